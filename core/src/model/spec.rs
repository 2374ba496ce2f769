//! `Server.spec`, field for field as the real CRD names them.

use base64::Engine as _;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerSpec {
    /// Pause, if true, will inhibit reconciliation.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pause: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(rename = "flavorID")]
    pub flavor_id: String,
    pub image: ImageSpec,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<SecurityGroupRef>,
    /// PublicIPAllocation is the server public IP allocation configuration.
    // Named as in the real CRD: camelCase would give `publicIpAllocation`,
    // which the API server prunes.
    #[serde(rename = "publicIPAllocation", default, skip_serializing_if = "Option::is_none")]
    pub public_ip_allocation: Option<PublicIpAllocation>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<NetworkAttachment>,
    #[serde(rename = "sshCertificateAuthorityID", default, skip_serializing_if = "Option::is_none")]
    pub ssh_certificate_authority_id: Option<String>,
    /// SSHInjection identifies the create-time SSH access material requested for the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_injection: Option<SshInjection>,
    /// Cloud-init user data, base64 on the wire.
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
    pub name: String,
    pub value: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ImageSpec {
    pub id: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SecurityGroupRef {
    pub id: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PublicIpAllocation {
    #[serde(default)]
    pub enabled: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkAttachment {
    pub id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_address_pairs: Vec<AllowedAddressPair>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AllowedAddressPair {
    pub cidr: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac_address: Option<String>,
}

/// Raw user-data bytes, carried base64-encoded in JSON like Go's `[]byte`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserData(pub Vec<u8>);

impl Serialize for UserData {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for UserData {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let encoded = String::deserialize(deserializer)?;
        base64::engine::general_purpose::STANDARD
            .decode(encoded.as_bytes())
            .map(UserData)
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
