//! `Server.spec`, field for field as the real CRD names them.

use base64::Engine as _;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerSpec {
    /// Stops all work on this Server while true, deletion included: no cloud
    /// call, no status write.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pause: bool,
    /// Key/value pairs copied to the provider server's metadata.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
    /// Which kind of cloud serves this Server: openstack, kubernetes or simulated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The provider flavor (size) ID. Changing it does not resize an existing
    /// server: it applies only to a server created after the change.
    #[serde(rename = "flavorID")]
    pub flavor_id: String,
    /// The boot image.
    pub image: ImageSpec,
    /// SecurityGroup resources (same namespace) whose rules apply to the
    /// server's port. Each holds a finalizer while this Server uses it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<SecurityGroupRef>,
    /// Whether the server gets a floating (public) IP.
    // Named as in the real CRD: camelCase would give `publicIpAllocation`,
    // which the API server prunes.
    #[serde(rename = "publicIPAllocation", default, skip_serializing_if = "Option::is_none")]
    pub public_ip_allocation: Option<PublicIpAllocation>,
    /// Network resources (same namespace) the server attaches to, one port
    /// each. Each holds a finalizer while this Server uses it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<NetworkAttachment>,
    /// Pins the server to one physical host (uni-region sets it; the Go
    /// controller sends it to Nova as `hypervisor_hostname` with admin
    /// credentials). This controller does not place servers on hosts: a
    /// Server that sets it is refused as an invalid spec, never created on
    /// another host behind the user's back.
    #[serde(rename = "infrastructureRef", default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_ref: Option<String>,
    /// An SSHCertificateAuthority resource (same namespace): its public key is
    /// added to the user data as a managed cloud-config part, so sshd trusts
    /// user certificates it signed. It holds a finalizer while this Server uses it.
    #[serde(rename = "sshCertificateAuthorityID", default, skip_serializing_if = "Option::is_none")]
    pub ssh_certificate_authority_id: Option<String>,
    /// Which SSH access material the server gets at create time: ca (the SSH
    /// certificate authority's key in cloud-init), identityKeypair (the
    /// identity's Nova key pair) or none. Unset: ca when a CA is named, else
    /// identityKeypair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_injection: Option<SshInjection>,
    /// Cloud-init user data, base64 on the wire, at most 65,535 base64
    /// characters once the SSH CA part is merged in (Nova's limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<UserData>,
}

impl ServerSpec {
    /// How SSH access reaches the server: `sshInjection` when set; without
    /// it (older Servers) the CA path when a CA is named, else the
    /// identity's keypair (uni-region's `ResolvedSSHInjection`).
    pub fn resolved_ssh_injection(&self) -> SshInjection {
        match (self.ssh_injection, &self.ssh_certificate_authority_id) {
            (Some(injection), _) => injection,
            (None, Some(_)) => SshInjection::Ca,
            (None, None) => SshInjection::IdentityKeypair,
        }
    }
}

/// The create-time SSH access material a Server asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SshInjection {
    /// The SSH certificate authority's key, written by cloud-init.
    #[serde(rename = "ca")]
    Ca,
    /// The identity's Nova keypair (`key_name`).
    #[serde(rename = "identityKeypair")]
    IdentityKeypair,
    /// Neither.
    #[serde(rename = "none")]
    None,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Tag {
    /// The metadata key.
    pub name: String,
    /// The metadata value.
    pub value: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ImageSpec {
    /// The provider image ID the server boots from.
    pub id: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SecurityGroupRef {
    /// The name of a SecurityGroup resource in the Server's namespace.
    pub id: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PublicIpAllocation {
    /// Allocate a floating IP from the region's external network.
    #[serde(default)]
    pub enabled: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkAttachment {
    /// The name of a Network resource in the Server's namespace.
    pub id: String,
    /// Extra MAC/IP pairs the port lets through (e.g. a virtual IP).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_address_pairs: Vec<AllowedAddressPair>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AllowedAddressPair {
    /// An IPv4 CIDR traffic may come from.
    pub cidr: String,
    /// A MAC address traffic may come from; the port's own when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac_address: Option<String>,
}

/// Raw user-data bytes, carried base64-encoded in JSON like Go's `[]byte`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct UserData(pub Vec<u8>);

/// Its size, never its bytes: user data does not reach a log.
impl std::fmt::Debug for UserData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UserData({} bytes)", self.0.len())
    }
}

impl Serialize for UserData {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

/// Base64 as kube-apiserver checks `format: byte` (Go's `StdEncoding`):
/// the standard alphabet, padded, line breaks skipped, and bits past the
/// last byte not required to be zero ("QR==" is accepted).
const GO_STD_ENCODING: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
);

impl UserData {
    /// Decodes user data as the API server stores it: base64 text, as Go's
    /// `encoding/json` reads a `[]byte` (line breaks skipped).
    pub fn from_base64(encoded: &str) -> Result<UserData, base64::DecodeError> {
        let decoded = if encoded.contains(['\r', '\n']) {
            GO_STD_ENCODING.decode(encoded.replace(['\r', '\n'], ""))
        } else {
            GO_STD_ENCODING.decode(encoded.as_bytes())
        };
        decoded.map(UserData)
    }
}

impl<'de> Deserialize<'de> for UserData {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let encoded = String::deserialize(deserializer)?;
        UserData::from_base64(&encoded)
            .map_err(|e| serde::de::Error::custom(format!("userData is not valid base64: {e}")))
    }
}

impl JsonSchema for UserData {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "UserData".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "format": "byte" })
    }

    fn inline_schema() -> bool {
        true
    }
}

#[cfg(test)]
mod user_data_base64 {
    use super::UserData;

    fn decode(text: &str) -> Result<UserData, serde_json::Error> {
        serde_json::from_value(serde_json::Value::String(text.to_owned()))
    }

    /// What kube-apiserver admits as `format: byte` (Go's `StdEncoding`)
    /// decodes here too; what it refuses is refused.
    #[test]
    fn user_data_decodes_as_the_api_server_checks_it() {
        assert_eq!(decode("I2Nsb3VkLWNvbmZpZwo=").ok(), Some(UserData(b"#cloud-config\n".to_vec())));
        assert_eq!(decode("QR==").ok(), Some(UserData(b"A".to_vec())), "bits past the last byte need not be zero");
        assert_eq!(decode("I2Nsb3Vk\r\nLWNvbmZpZwo=").ok(), Some(UserData(b"#cloud-config\n".to_vec())), "line breaks");
        assert!(decode("QQ").is_err(), "padding is required");
        assert!(decode("%%%=").is_err());
    }
}
