//! Pure translations between the port's types and OpenStack's JSON: what a
//! Nova server record means to the monitor, and what a create request puts
//! in Neutron and Nova. No I/O here, so it is all unit-tested.

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD as BASE64;
use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Value, json};
use server_core::model::NetworkAttachment;
use server_core::port::{CreateRequest, PowerState, ProviderServer, ProviderStatus, ServerRef};

/// Nova metadata that ties a provider server to its Server; the uid is the
/// idempotency key.
pub const METADATA_SERVER_UID: &str = "unikorn:server-uid";
pub const METADATA_SERVER_NAMESPACE: &str = "unikorn:server-namespace";
pub const METADATA_SERVER_NAME: &str = "unikorn:server-name";
/// Written when this controller takes over a server another controller made.
pub(crate) const METADATA_ADOPTED_FROM: &str = "unikorn:adopted-from";

/// The system metadata the Go controller writes on every server it makes
/// (its legacy camelCase keys and their namespaced copies); other tools read
/// them, so this controller writes them too. `serverID` is the Server's
/// object name, which is also how a Go-made server is found for adoption.
pub const METADATA_GO_SERVER_ID: &str = "serverID";
const METADATA_GO_SERVER_ID_NAMESPACED: &str = "region:server_id";

/// The Neutron port made for a Server, found again by this name. The Go
/// controller's scheme (`server-<Server name>`), so either controller finds
/// the other's port; a Server name is unique in its namespace, whose
/// identity owns the project.
pub fn port_name(server_name: &str) -> String {
    format!("server-{server_name}")
}

/// The description of the port and floating IP this controller makes for a
/// Server: `Server <namespace>/<name>`. It tells them apart from resources
/// of a Server of the same name in another namespace of the project.
pub fn resource_description(server: &server_core::port::ServerRef) -> String {
    format!("Server {}/{}", server.namespace, server.name)
}

/// The subset of a Nova server record the port needs (API v2.1 fields).
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct NovaServer {
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) status: String,
    #[serde(default)]
    pub(crate) metadata: NovaMetadata,
    #[serde(rename = "OS-EXT-STS:power_state", default)]
    pub(crate) power_state: Option<i64>,
    #[serde(rename = "OS-EXT-STS:task_state", default)]
    pub(crate) task_state: Option<String>,
    #[serde(default)]
    pub(crate) created: Option<String>,
    /// When Nova last changed the server (`updated_at`), on its clock.
    #[serde(default)]
    pub(crate) updated: Option<String>,
    #[serde(rename = "OS-SRV-USG:launched_at", default)]
    pub(crate) launched_at: Option<String>,
    /// The image it runs: `{"id": ...}`, or `""` for a server booted from a volume.
    #[serde(default)]
    pub(crate) image: NovaImage,
    /// Network name -> addresses on it.
    #[serde(default)]
    pub(crate) addresses: BTreeMap<String, Vec<NovaAddress>>,
    /// The flavor embedded in the record (microversion >= 2.47).
    #[serde(default)]
    pub(crate) flavor: Option<NovaFlavor>,
}

/// What this controller reads of the flavor Nova embeds in a server record:
/// the name it had when the server was created.
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct NovaFlavor {
    #[serde(default)]
    pub(crate) original_name: Option<String>,
}

/// Nova's `image` of a server: an object with the image's `id`, or an empty
/// string when the server boots from a volume (nova/api/openstack/compute/
/// views/servers.py `_get_image`). Anything else reads as not said.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(untagged)]
pub(crate) enum NovaImage {
    Image {
        id: String,
    },
    #[default]
    #[serde(skip)]
    None,
    Other(serde::de::IgnoredAny),
}

impl NovaImage {
    pub(crate) fn id(&self) -> Option<&str> {
        match self {
            NovaImage::Image { id } if !id.is_empty() => Some(id),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct NovaAddress {
    pub(crate) addr: String,
    #[serde(default)]
    pub(crate) version: Option<u8>,
    #[serde(rename = "OS-EXT-IPS:type", default)]
    pub(crate) kind: Option<String>,
    #[serde(rename = "OS-EXT-IPS-MAC:mac_addr", default)]
    pub(crate) mac: Option<String>,
}

/// What this controller reads of a Nova server's metadata. A list carries
/// every key of every server (the user's tags, the Go controller's system
/// keys); keeping them all cost megabytes per list at 10,000 servers, so
/// only the keys read here are kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NovaMetadata {
    server_uid: Option<String>,
    go_server_id: Option<String>,
    go_server_id_namespaced: Option<String>,
    adopted: bool,
    empty: bool,
}

impl Default for NovaMetadata {
    /// No key (a record without the field has none).
    fn default() -> Self {
        NovaMetadata {
            server_uid: None,
            go_server_id: None,
            go_server_id_namespaced: None,
            adopted: false,
            empty: true,
        }
    }
}

impl NovaMetadata {
    /// Metadata of these pairs.
    #[cfg(test)]
    pub(crate) fn from_pairs<K: AsRef<str>>(pairs: impl IntoIterator<Item = (K, String)>) -> Self {
        let mut metadata = NovaMetadata::default();
        for (key, value) in pairs {
            metadata.insert(key.as_ref(), value);
        }
        metadata
    }

    /// Records one key, as Nova's metadata update does.
    pub(crate) fn insert(&mut self, key: &str, value: String) {
        self.empty = false;
        match key {
            METADATA_SERVER_UID => self.server_uid = Some(value),
            METADATA_GO_SERVER_ID => self.go_server_id = Some(value),
            METADATA_GO_SERVER_ID_NAMESPACED => self.go_server_id_namespaced = Some(value),
            METADATA_ADOPTED_FROM => self.adopted = true,
            _ => {}
        }
    }

    /// No key at all (a record of a down cell has none).
    pub(crate) fn is_empty(&self) -> bool {
        self.empty
    }
}

impl<'de> Deserialize<'de> for NovaMetadata {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = NovaMetadata;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("Nova server metadata: an object of strings")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<NovaMetadata, A::Error> {
                let mut metadata = NovaMetadata::default();
                while let Some(key) = map.next_key::<String>()? {
                    metadata.insert(&key, map.next_value::<String>()?);
                }
                Ok(metadata)
            }
        }
        deserializer.deserialize_map(Keys)
    }
}

impl NovaServer {
    pub(crate) fn server_uid(&self) -> Option<&str> {
        self.metadata.server_uid.as_deref().filter(|uid| !uid.is_empty())
    }

    /// The Server name the Go controller recorded (`serverID`), on a server
    /// this controller has not tied to a uid yet.
    pub(crate) fn go_server_name(&self) -> Option<&str> {
        if self.server_uid().is_some() {
            return None;
        }
        [&self.metadata.go_server_id, &self.metadata.go_server_id_namespaced]
            .into_iter()
            .find_map(Option::as_deref)
            .filter(|name| !name.is_empty())
    }

    /// A record from a Nova cell that does not answer (microversion >= 2.69):
    /// status UNKNOWN and no metadata. What it is cannot be told, so it is
    /// never read as "absent" nor as someone else's server.
    pub(crate) fn down_cell(&self) -> bool {
        self.status.eq_ignore_ascii_case("UNKNOWN") && self.metadata.is_empty()
    }

    /// A list of changes shows it deleted (Nova lists deleted servers when
    /// asked for `changes-since`, with status DELETED).
    pub(crate) fn deleted(&self) -> bool {
        self.status.eq_ignore_ascii_case("DELETED")
    }

    /// When Nova last changed it, if the record says.
    pub(crate) fn updated_at(&self) -> Option<Timestamp> {
        self.updated.as_deref().and_then(parse_time)
    }

    /// Nova is already deleting it: a second DELETE would only earn a 409.
    pub(crate) fn deleting(&self) -> bool {
        self.task_state.as_deref() == Some("deleting") || self.status.eq_ignore_ascii_case("DELETED")
    }

    /// Deleted on a cloud that defers reclaiming (`reclaim_instance_interval`):
    /// Nova keeps listing it, and holds its port, until a force delete.
    pub(crate) fn soft_deleted(&self) -> bool {
        self.status.eq_ignore_ascii_case("SOFT_DELETED")
    }
}

/// A Nova record as the monitor sees it.
pub(crate) fn provider_server(server: &NovaServer) -> ProviderServer {
    let status = provider_status(&server.status);
    let fixed = addresses(server, "fixed");
    let floating = addresses(server, "floating");
    ProviderServer {
        id: server.id.clone(),
        server_uid: server.server_uid().unwrap_or_default().to_owned(),
        queued: status == ProviderStatus::Build && queued(server.task_state.as_deref()),
        status,
        power_state: power_state(server.power_state),
        created: server.created.as_deref().and_then(parse_time),
        // Whole seconds: the Server's launchedAt and provisionedAt are
        // metav1.Time to the Go controller, which writes them back without
        // the fraction Nova gives (`13:53:12.774549`), so the two
        // controllers agree on a booted server's latch only at seconds.
        launched_at: server.launched_at.as_deref().and_then(parse_time).map(whole_seconds),
        private_ip: preferred(&fixed).map(|a| a.addr.clone()),
        public_ip: preferred(&floating).map(|a| a.addr.clone()),
        // Every address of one port shares its MAC; floating ones repeat it.
        mac_address: preferred(&fixed).or(preferred(&floating)).and_then(|a| a.mac.clone()),
        flavor_name: server.flavor.as_ref().and_then(|flavor| flavor.original_name.clone()),
        // Ironic's view, when read, is added by the list.
        ironic: None,
        adopted: server.metadata.adopted,
        image_id: server.image.id().map(str::to_owned),
        task_in_flight: server.task_state.as_deref().is_some_and(|task| !task.is_empty()),
    }
}

fn addresses<'a>(server: &'a NovaServer, kind: &str) -> Vec<&'a NovaAddress> {
    server
        .addresses
        .values()
        .flatten()
        // Without the extension attribute an address is taken as fixed.
        .filter(|a| a.kind.as_deref().unwrap_or("fixed") == kind)
        .collect()
}

/// IPv4 first: it is what users and the Go controller report.
fn preferred<'a>(addresses: &[&'a NovaAddress]) -> Option<&'a NovaAddress> {
    addresses.iter().find(|a| a.version == Some(4)).or(addresses.first()).copied()
}

pub(crate) fn provider_status(status: &str) -> ProviderStatus {
    match status.to_ascii_uppercase().as_str() {
        "ACTIVE" => ProviderStatus::Active,
        "BUILD" => ProviderStatus::Build,
        "ERROR" => ProviderStatus::Error,
        "REBUILD" => ProviderStatus::Rebuild,
        "UNKNOWN" | "" => ProviderStatus::Unknown,
        other => ProviderStatus::Other(other.to_owned()),
    }
}

/// Nova `OS-EXT-STS:power_state`: 0 NOSTATE, 1 RUNNING, 3 PAUSED,
/// 4 SHUTDOWN, 6 CRASHED, 7 SUSPENDED.
pub(crate) fn power_state(state: Option<i64>) -> PowerState {
    match state {
        None | Some(0) => PowerState::NoState,
        Some(1) => PowerState::Running,
        Some(4) => PowerState::Shutdown,
        Some(_) => PowerState::Other,
    }
}

/// A BUILD server has not begun deploying while Nova is still scheduling it
/// (no task yet, or `scheduling`); later tasks (`networking`,
/// `block_device_mapping`, `spawning`) are the deployment itself.
fn queued(task_state: Option<&str>) -> bool {
    matches!(task_state, None | Some("scheduling"))
}

/// OpenStack timestamps: RFC 3339 (`created`: `2024-05-01T10:00:00Z`) or a
/// naive UTC date-time (`launched_at`: `2024-05-01T10:00:05.000000`).
pub(crate) fn parse_time(text: &str) -> Option<Timestamp> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    text.parse::<Timestamp>()
        .ok()
        .or_else(|| text.parse::<DateTime>().ok().and_then(|dt| dt.to_zoned(TimeZone::UTC).ok()).map(|z| z.timestamp()))
}

/// `at` without its fraction of a second, as Kubernetes' `metav1.Time`
/// serializes (RFC 3339 to the second).
fn whole_seconds(at: Timestamp) -> Timestamp {
    Timestamp::from_second(at.as_second()).unwrap_or(at)
}

/// Nova metadata for the Server's provider server: the request's tags
/// (already converted to keys Nova accepts by the core, see
/// [`server_core::provider_metadata`]), then the keys tying the server to its
/// Server, which no tag can override.
pub(crate) fn server_metadata(request: &CreateRequest) -> BTreeMap<String, String> {
    let mut metadata: BTreeMap<String, String> =
        request.tags.iter().map(|tag| (tag.name.clone(), tag.value.clone())).collect();
    metadata.extend(system_metadata(request));
    metadata.extend(ownership_metadata(&request.server));
    metadata
}

/// What the Go controller writes on every server it makes, over any tag of
/// the same name (uni-region `reconcileServer`): its legacy camelCase keys
/// and their namespaced copies.
pub(crate) fn system_metadata(request: &CreateRequest) -> BTreeMap<String, String> {
    let owner = &request.owner;
    let server_id = &request.server.name;
    [
        (METADATA_GO_SERVER_ID_NAMESPACED, server_id),
        ("identity:organization_id", &owner.organization_id),
        ("identity:project_id", &owner.project_id),
        ("region:region_id", &owner.region_id),
        (METADATA_GO_SERVER_ID, server_id),
        ("organizationID", &owner.organization_id),
        ("projectID", &owner.project_id),
        ("regionID", &owner.region_id),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_owned(), value.clone()))
    .collect()
}

/// The keys that tie a Nova server to its Server: ours (uid, namespace,
/// name), written at create and when adopting a Go-made server.
pub(crate) fn ownership_metadata(server: &ServerRef) -> BTreeMap<String, String> {
    BTreeMap::from([
        (METADATA_SERVER_UID.to_owned(), server.uid.clone()),
        (METADATA_SERVER_NAMESPACE.to_owned(), server.namespace.clone()),
        (METADATA_SERVER_NAME.to_owned(), server.name.clone()),
    ])
}

/// Neutron IDs of what a Server's spec names by Kubernetes resource name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ResolvedNetworking {
    pub(crate) network_id: String,
    pub(crate) security_group_ids: Vec<String>,
}

/// `POST /v2.0/ports` body: the Server's port on its first network.
pub(crate) fn port_body(request: &CreateRequest, network: &NetworkAttachment, ids: &ResolvedNetworking) -> Value {
    let pairs: Vec<Value> = network
        .allowed_address_pairs
        .iter()
        .map(|pair| match &pair.mac_address {
            Some(mac) if !mac.is_empty() => json!({"ip_address": pair.cidr, "mac_address": mac}),
            _ => json!({"ip_address": pair.cidr}),
        })
        .collect();
    json!({"port": {
        "name": port_name(&request.server.name),
        "description": resource_description(&request.server),
        "network_id": ids.network_id,
        "security_groups": ids.security_group_ids,
        "allowed_address_pairs": pairs,
    }})
}

/// `PUT /ports/{id}` body setting a port's security groups (Neutron IDs)
/// and allowed address pairs (a pair without a MAC address takes the port's).
pub(crate) fn port_security_body(
    security_groups: &[String],
    pairs: &[server_core::model::AllowedAddressPair],
) -> Value {
    let pairs: Vec<Value> = pairs
        .iter()
        .map(|pair| match &pair.mac_address {
            Some(mac) if !mac.is_empty() => json!({"ip_address": pair.cidr, "mac_address": mac}),
            _ => json!({"ip_address": pair.cidr}),
        })
        .collect();
    json!({"port": {"security_groups": security_groups, "allowed_address_pairs": pairs}})
}

/// `POST /servers` body: boots from the image with the prepared port, and
/// with the identity's keypair (`key_name`) when the request uses it and the
/// identity has one (an empty `key_name` would be refused; the Go controller
/// leaves it out too).
pub(crate) fn server_body<'a>(
    request: &'a CreateRequest,
    port_id: &'a str,
    ssh_key_name: Option<&'a str>,
) -> ServerBody<'a> {
    ServerBody {
        server: ServerFields {
            name: &request.name,
            flavor_ref: &request.flavor_id,
            image_ref: &request.image_id,
            networks: [PortAttachment { port: port_id }],
            metadata: server_metadata(request),
            user_data: request.user_data.as_deref().map(Base64),
            key_name: ssh_key_name.filter(|key| request.identity_ssh_key && !key.is_empty()),
        },
    }
}

/// The create body, encoded as it is sent: the user data (up to 64 KiB) is
/// written into the JSON as base64 straight from the request's bytes, never
/// held as a second, base64 copy beside them.
#[derive(Debug, Serialize)]
pub(crate) struct ServerBody<'a> {
    server: ServerFields<'a>,
}

#[derive(Debug, Serialize)]
struct ServerFields<'a> {
    name: &'a str,
    #[serde(rename = "flavorRef")]
    flavor_ref: &'a str,
    #[serde(rename = "imageRef")]
    image_ref: &'a str,
    networks: [PortAttachment<'a>; 1],
    metadata: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user_data: Option<Base64<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key_name: Option<&'a str>,
}

#[derive(Debug, Serialize)]
struct PortAttachment<'a> {
    port: &'a str,
}

/// Bytes serialized as their standard base64 text.
#[derive(Debug)]
struct Base64<'a>(&'a [u8]);

impl Serialize for Base64<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&base64::display::Base64Display::new(self.0, &BASE64))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use server_core::model::{AllowedAddressPair, Tag};
    use server_core::port::Owner;

    fn nova(value: Value) -> NovaServer {
        serde_json::from_value(value).unwrap_or_default()
    }

    #[test]
    fn active_record_with_launch_time_addresses_and_mac() {
        let server = nova(json!({
            "id": "9168b536",
            "status": "ACTIVE",
            "metadata": {"unikorn:server-uid": "uid-1"},
            "OS-EXT-STS:power_state": 1,
            "OS-EXT-STS:task_state": null,
            "created": "2024-05-01T10:00:00Z",
            "OS-SRV-USG:launched_at": "2024-05-01T10:00:42.000000",
            "addresses": {"private": [
                {"addr": "fd00::5", "version": 6, "OS-EXT-IPS:type": "fixed", "OS-EXT-IPS-MAC:mac_addr": "fa:16:3e:00:00:01"},
                {"addr": "10.0.0.5", "version": 4, "OS-EXT-IPS:type": "fixed", "OS-EXT-IPS-MAC:mac_addr": "fa:16:3e:00:00:01"},
                {"addr": "203.0.113.7", "version": 4, "OS-EXT-IPS:type": "floating", "OS-EXT-IPS-MAC:mac_addr": "fa:16:3e:00:00:01"},
            ]},
        }));
        let record = provider_server(&server);
        assert_eq!(record.server_uid, "uid-1");
        assert_eq!(record.status, ProviderStatus::Active);
        assert_eq!(record.power_state, PowerState::Running);
        assert!(!record.queued);
        assert_eq!(record.created, "2024-05-01T10:00:00Z".parse().ok());
        assert_eq!(record.launched_at, "2024-05-01T10:00:42Z".parse().ok());
        assert_eq!(record.private_ip.as_deref(), Some("10.0.0.5"));
        assert_eq!(record.public_ip.as_deref(), Some("203.0.113.7"));
        assert_eq!(record.mac_address.as_deref(), Some("fa:16:3e:00:00:01"));
    }

    #[test]
    fn building_server_is_queued_until_nova_starts_deploying() {
        let scheduling = nova(json!({"id": "a", "status": "BUILD", "OS-EXT-STS:task_state": "scheduling"}));
        assert!(provider_server(&scheduling).queued);
        let spawning = nova(json!({"id": "a", "status": "BUILD", "OS-EXT-STS:task_state": "spawning"}));
        assert!(!provider_server(&spawning).queued);
        let record = provider_server(&spawning);
        assert_eq!((record.launched_at, record.private_ip, record.mac_address), (None, None, None));
        assert_eq!(record.server_uid, "");
    }

    #[test]
    fn statuses_and_power_states() {
        assert_eq!(provider_status("SHUTOFF"), ProviderStatus::Other("SHUTOFF".into()));
        assert_eq!(provider_status("error"), ProviderStatus::Error);
        assert_eq!(provider_status("REBUILD"), ProviderStatus::Rebuild);
        assert_eq!(provider_status(""), ProviderStatus::Unknown);
        assert_eq!(power_state(Some(4)), PowerState::Shutdown);
        assert_eq!(power_state(Some(0)), PowerState::NoState);
        assert_eq!(power_state(Some(7)), PowerState::Other);
        assert_eq!(power_state(None), PowerState::NoState);
    }

    #[test]
    fn timestamps_in_both_openstack_shapes() {
        assert_eq!(parse_time("2013-09-23T13:53:12.000000"), "2013-09-23T13:53:12Z".parse().ok());
        assert_eq!(parse_time("2013-09-23T13:53:12+01:00"), "2013-09-23T12:53:12Z".parse().ok());
        assert_eq!(parse_time(""), None);
        assert_eq!(parse_time("yesterday"), None);
    }

    #[test]
    fn launched_at_keeps_whole_seconds_as_the_go_controller_writes_it() {
        let record: NovaServer = serde_json::from_value(json!({
            "id": "s", "status": "ACTIVE", "OS-SRV-USG:launched_at": "2013-09-23T13:53:12.774549",
        }))
        .unwrap_or_default();
        assert_eq!(provider_server(&record).launched_at, "2013-09-23T13:53:12Z".parse().ok());
    }

    fn request() -> CreateRequest {
        CreateRequest {
            server: ServerRef { namespace: "ns".into(), name: "web".into(), uid: "uid-1".into() },
            name: "web-label".into(),
            flavor_id: "flavor".into(),
            image_id: "image".into(),
            networks: vec![NetworkAttachment {
                id: "net-1".into(),
                allowed_address_pairs: vec![
                    AllowedAddressPair { cidr: "10.1.0.0/24".into(), mac_address: None },
                    AllowedAddressPair { cidr: "10.2.0.1".into(), mac_address: Some("fa:16:3e:aa:bb:cc".into()) },
                ],
            }],
            security_group_ids: vec!["sg-1".into(), "sg-2".into()],
            network_ids: Default::default(),
            public_ip: true,
            user_data: Some(b"#cloud-config\n".to_vec()),
            tags: vec![
                Tag { name: "team".into(), value: "blue".into() },
                Tag { name: "unikorn:server-uid".into(), value: "forged".into() },
                Tag { name: "regionID".into(), value: "forged".into() },
            ],
            identity_ssh_key: true,
            owner: Owner { organization_id: "org-1".into(), project_id: "proj-1".into(), region_id: "region-1".into() },
            first_create: true,
        }
    }

    #[test]
    fn only_the_metadata_keys_read_are_kept_and_an_empty_map_is_told_from_a_full_one() {
        let tagged = nova(json!({"id": "a", "status": "ACTIVE", "metadata": {
            "team": "blue", "projectID": "p", "unikorn:server-uid": "u1",
            "unikorn:adopted-from": "go-controller", "serverID": "web",
        }}));
        assert_eq!(tagged.server_uid(), Some("u1"));
        assert_eq!(tagged.go_server_name(), None, "a server tied to a uid is not the Go controller's");
        assert!(provider_server(&tagged).adopted);
        let go = nova(json!({"id": "g", "status": "ACTIVE", "metadata": {"region:server_id": "web"}}));
        assert_eq!(go.go_server_name(), Some("web"));
        // A down cell's record: UNKNOWN and no metadata, whether `{}` or left out.
        for record in [json!({"id": "d", "status": "UNKNOWN", "metadata": {}}), json!({"id": "d", "status": "UNKNOWN"})]
        {
            assert!(nova(record).down_cell());
        }
        assert!(!nova(json!({"id": "d", "status": "UNKNOWN", "metadata": {"team": "blue"}})).down_cell());
        let refused = serde_json::from_value::<NovaServer>(json!({"id": "x", "metadata": {"team": 7}}));
        assert!(refused.is_err(), "Nova's metadata values are strings");
    }

    /// The create body as Nova reads it: the bytes sent, decoded.
    pub(crate) fn body_value(request: &CreateRequest, port_id: &str, key: Option<&str>) -> Value {
        let sent = serde_json::to_vec(&server_body(request, port_id, key)).unwrap_or_default();
        serde_json::from_slice(&sent).unwrap_or_default()
    }

    #[test]
    fn the_sent_user_data_is_the_requests_bytes_in_standard_base64() {
        use base64::Engine as _;
        let bytes: Vec<u8> = (0..48 * 1024).map(|i| (i * 7 % 256) as u8).collect();
        let request = CreateRequest { user_data: Some(bytes.clone()), ..request() };
        let sent = body_value(&request, "p", None);
        let text = sent["server"]["user_data"].as_str().unwrap_or_default();
        assert_eq!(BASE64.decode(text).ok(), Some(bytes));
    }

    #[test]
    fn create_bodies() {
        let request = request();
        let ids =
            ResolvedNetworking { network_id: "neutron-net".into(), security_group_ids: vec!["g1".into(), "g2".into()] };
        let port = port_body(&request, &request.networks[0], &ids);
        assert_eq!(port["port"]["name"], "server-web");
        assert_eq!(port["port"]["network_id"], "neutron-net");
        assert_eq!(port["port"]["security_groups"], json!(["g1", "g2"]));
        assert_eq!(
            port["port"]["allowed_address_pairs"],
            json!([{"ip_address": "10.1.0.0/24"}, {"ip_address": "10.2.0.1", "mac_address": "fa:16:3e:aa:bb:cc"}])
        );
        let server = body_value(&request, "port-1", Some("identity-key"));
        assert_eq!(server["server"]["name"], "web-label");
        assert_eq!(server["server"]["key_name"], "identity-key");
        assert_eq!(server["server"]["flavorRef"], "flavor");
        assert_eq!(server["server"]["imageRef"], "image");
        assert_eq!(server["server"]["networks"], json!([{"port": "port-1"}]));
        assert_eq!(server["server"]["user_data"], "I2Nsb3VkLWNvbmZpZwo=");
        // The Go controller's system metadata wins over a tag of its name;
        // ours wins over everything.
        assert_eq!(
            server["server"]["metadata"],
            json!({
                "team": "blue",
                "serverID": "web", "organizationID": "org-1", "projectID": "proj-1", "regionID": "region-1",
                "region:server_id": "web", "identity:organization_id": "org-1",
                "identity:project_id": "proj-1", "region:region_id": "region-1",
                "unikorn:server-uid": "uid-1", "unikorn:server-namespace": "ns", "unikorn:server-name": "web",
            })
        );
        let no_user_data = CreateRequest { user_data: None, ..request.clone() };
        assert!(body_value(&no_user_data, "p", None)["server"].get("user_data").is_none());
    }

    #[test]
    fn key_name_only_for_servers_that_use_the_identity_keypair_and_an_identity_that_has_one() {
        let request = request();
        assert!(body_value(&request, "p", None)["server"].get("key_name").is_none());
        assert!(body_value(&request, "p", Some(""))["server"].get("key_name").is_none());
        let ca_path = CreateRequest { identity_ssh_key: false, ..request };
        assert!(body_value(&ca_path, "p", Some("identity-key"))["server"].get("key_name").is_none());
    }

    #[test]
    fn the_requests_tags_are_sent_and_operator_keys_win() {
        let mut request = request();
        request.tags = vec![
            Tag { name: "compute:workload".into(), value: "batch".into() },
            Tag { name: "unikorn:server-uid".into(), value: "forged".into() },
            Tag { name: "serverID".into(), value: "forged".into() },
        ];
        let metadata = server_metadata(&request);
        assert_eq!(metadata.get("compute:workload").map(String::as_str), Some("batch"));
        assert_eq!(metadata.get("unikorn:server-uid").map(String::as_str), Some("uid-1"));
        assert_eq!(metadata.get("serverID"), Some(&request.server.name));
    }

    #[test]
    fn go_made_and_down_cell_records() {
        let go = nova(json!({"id": "g", "status": "ACTIVE", "metadata": {"serverID": "web", "projectID": "p"}}));
        assert_eq!(go.go_server_name(), Some("web"));
        let ours =
            nova(json!({"id": "o", "status": "ACTIVE", "metadata": {"serverID": "web", "unikorn:server-uid": "u"}}));
        assert_eq!(ours.go_server_name(), None, "a server tied to a uid is nobody's to adopt");
        let down = nova(json!({"id": "d", "status": "UNKNOWN", "created": "2019-02-28T03:16:19Z"}));
        assert!(down.down_cell() && !go.down_cell());
    }
}
