//! The cloud port: what the controller needs from a cloud, as plain
//! definitions. The core never calls it; server-kube drives it, and
//! server-openstack and server-simcloud implement it.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

pub use crate::listing::{ListScope, ProviderListing};
use crate::model::{AllowedAddressPair, NetworkAttachment, Tag};

/// A boxed future, so the port stays object-safe (`dyn CloudPort`) for the
/// per-region registry without pulling an async-trait crate into the core.
pub type PortFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, CloudError>> + Send + 'a>>;

/// The cloud behind one region.
///
/// Contract every implementation keeps:
/// - `create` is idempotent per `ServerRef::uid`: while a provider server tied
///   to that uid exists, it returns that server and makes no second one;
/// - `get` answers `Ok(None)` only when the provider authoritatively says the
///   server does not exist; anything it cannot tell is an `Err`;
/// - `delete` answers `Gone` only when the provider no longer lists the server;
///   it deletes the server alone: what else the Server holds at the provider
///   (ports, floating IPs) is told by `attachments` and released by `release`,
///   one resource at a time, as the core decides (DESIGN "Every provider
///   resource is released");
/// - `attachments` answers only what the provider listed with authority
///   (an empty list is a confirmed absence); anything it cannot tell is an `Err`;
/// - `release` is idempotent: a resource already gone is released;
/// - a port used for a leadership term (`for_term`) sends no request its
///   term's gate does not admit, checked before *each* request (one call may
///   be many), and keeps nothing it learnt about the cloud in another term.
pub trait CloudPort: Send + Sync {
    fn create<'a>(
        &'a self,
        identity: &'a IdentityContext,
        request: &'a CreateRequest,
    ) -> PortFuture<'a, ProviderServer>;
    fn delete<'a>(&'a self, identity: &'a IdentityContext, server: &'a ServerRef) -> PortFuture<'a, DeleteProgress>;
    /// Asks the provider to rebuild the server onto another image (Nova's
    /// `rebuild` action with the image alone: the server keeps its ID, ports,
    /// key and user data; its root disk is made anew). `Ok` means accepted.
    fn rebuild<'a>(&'a self, identity: &'a IdentityContext, request: &'a RebuildRequest) -> PortFuture<'a, ()>;
    fn get<'a>(
        &'a self,
        identity: &'a IdentityContext,
        server: &'a ServerRef,
    ) -> PortFuture<'a, Option<ProviderServer>>;
    /// When the server of `uid` booted, as a read this port made on its own
    /// account in this term showed it (a lookup's list of the whole project,
    /// whose other records reach no caller), if one did. Not a cloud call:
    /// what the port remembers. A boot the provider reported is latched even
    /// when the server is gone by the time the Server's pass reads it.
    /// Required, so that no wrapper can hide it.
    fn boot_read(&self, identity: &IdentityContext, uid: &str) -> Option<Timestamp>;
    /// The servers of the identity's project `scope` asks for, in one call:
    /// the monitor asks once per (region, identity) per poll. A port that
    /// cannot list changes answers a complete list to any ask
    /// (`ProviderListing::complete`).
    fn list<'a>(&'a self, identity: &'a IdentityContext, scope: ListScope) -> PortFuture<'a, ProviderListing>;
    /// The Server's provider resources besides its server (its ports and
    /// floating IPs), each by its ID. A cloud that keeps none apart from the
    /// server answers an empty list.
    fn attachments<'a>(
        &'a self,
        identity: &'a IdentityContext,
        server: &'a ServerRef,
    ) -> PortFuture<'a, Vec<AttachedResource>>;
    /// Releases (deletes) one such resource by its ID; one already gone is
    /// released.
    fn release<'a>(&'a self, identity: &'a IdentityContext, resource: &'a AttachedResource) -> PortFuture<'a, ()>;
    /// The port the Server's provider server (`provider_id`) boots with, and
    /// the floating IP on it, as the provider lists them now; `None` when
    /// the provider lists no such port. With it, the provider IDs the
    /// Server's security groups (`security_groups`, the spec's IDs) resolve
    /// to now: what the port should carry.
    fn networking<'a>(
        &'a self,
        identity: &'a IdentityContext,
        query: &'a NetworkingQuery,
    ) -> PortFuture<'a, Networking>;
    /// Sets the port's security groups and allowed address pairs.
    fn update_port<'a>(&'a self, identity: &'a IdentityContext, update: &'a PortUpdate) -> PortFuture<'a, ()>;
    /// Makes sure the port carries a floating IP (idempotent: a port that
    /// has one keeps it and nothing is made).
    fn ensure_floating_ip<'a>(
        &'a self,
        identity: &'a IdentityContext,
        request: &'a FloatingIpRequest,
    ) -> PortFuture<'a, ()>;
    /// What the region's Region resource says, each time it changes (a
    /// cloud that needs none of it ignores it). Not a cloud call.
    fn apply_region_settings(&self, settings: &RegionSettings) {
        let _ = settings;
    }
    /// This port as one leadership term uses it. Whatever the port remembers
    /// of the cloud (an index of whose servers exist, a list it took) starts
    /// empty for the term and is dropped with it: between two terms of this
    /// replica another replica may have created or deleted anything. What
    /// no other replica changes (credentials, tokens, names of networks a
    /// person made) may be shared. Every request the returned port sends is
    /// first admitted by `term`'s gate, with the deadline the gate gives.
    /// Required, so that no port can forget to say what its memory is.
    fn for_term(&self, term: &Term) -> Arc<dyn CloudPort>;
}

/// One leadership term, as a cloud port sees it: a number, and the gate
/// every request of the term passes before it is sent.
#[derive(Clone)]
pub struct Term {
    /// Counts this replica's terms; 0 is the only term of a replica that
    /// runs without leader election.
    pub number: u64,
    pub gate: Arc<dyn RequestGate>,
}

impl Term {
    /// A term whose gate admits every request with its own timeout: a
    /// single replica, or a one-off command (`explain`).
    pub fn unfenced() -> Self {
        Term { number: 0, gate: Arc::new(Unfenced) }
    }
}

impl fmt::Debug for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Term").field("number", &self.number).finish_non_exhaustive()
    }
}

/// Whether a request may be sent now, and how long it may run. The
/// adapter's implementation is the leader's fence: a request is not sent
/// once the term's lease may have passed to another replica, and none is
/// given a deadline past the fence (the instant this replica stops acting,
/// before any other may start).
pub trait RequestGate: Send + Sync {
    /// `Some(deadline)`: send it, giving up after `deadline` (at most
    /// `timeout`); `None`: do not send it.
    fn admit(&self, timeout: Duration) -> Option<Duration>;
}

/// Admits every request with its own timeout.
#[derive(Clone, Copy, Debug, Default)]
pub struct Unfenced;

impl RequestGate for Unfenced {
    fn admit(&self, timeout: Duration) -> Option<Duration> {
        Some(timeout)
    }
}

/// What a region's `Region` resource (region.unikorn-cloud.org) says that
/// its cloud acts on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegionSettings {
    /// `spec.openstack.network.externalNetworks.selector`: which external
    /// networks floating IPs may come from.
    pub external_networks: Option<NetworkSelector>,
}

/// uni-region's `NetworkSelector`: a network is selected when its ID is in
/// `ids` (if given) and it carries every tag of `tags` (if given).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSelector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ids: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
}

impl NetworkSelector {
    /// Whether a network with this ID and these tags is selected.
    pub fn selects(&self, id: &str, tags: &[String]) -> bool {
        self.ids.as_ref().is_none_or(|ids| ids.iter().any(|wanted| wanted == id))
            && self.tags.as_ref().is_none_or(|wanted| wanted.iter().all(|tag| tags.contains(tag)))
    }
}

/// A provider resource a Server holds besides its server, by its provider
/// ID. Floating IPs order before ports: a floating IP is released before the
/// port it is associated with (Neutron keeps a floating IP whose port goes,
/// unassociated and still allocated).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum AttachedResource {
    /// A Neutron floating IP (the Server's public IP).
    FloatingIp { id: String },
    /// A Neutron port the server boots with. Nova deletes only the ports it
    /// made itself; a port the caller made survives its server.
    Port { id: String },
}

impl AttachedResource {
    pub fn id(&self) -> &str {
        match self {
            AttachedResource::FloatingIp { id } | AttachedResource::Port { id } => id,
        }
    }

    /// The kind, for logs and messages.
    pub fn kind(&self) -> &'static str {
        match self {
            AttachedResource::FloatingIp { .. } => "floating IP",
            AttachedResource::Port { .. } => "port",
        }
    }
}

impl fmt::Display for AttachedResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind(), self.id())
    }
}

/// What [`CloudPort::networking`] is asked about.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkingQuery {
    pub server: ServerRef,
    /// The provider server whose port is read.
    pub provider_id: String,
    /// The spec's security group IDs, in spec order.
    pub security_groups: Vec<String>,
}

/// The Server's port and what it should carry, as the provider tells them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Networking {
    /// The port the server boots with (none listed: `None`).
    pub port: Option<ServerPort>,
    /// The provider IDs of the spec's security groups, in spec order.
    pub wanted_security_groups: Vec<String>,
    /// Where the port's description comes from.
    #[serde(default)]
    pub source: NetworkingSource,
}

/// Where a [`Networking`] answer's port comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum NetworkingSource {
    /// Read from the provider for this answer: a port read bound to a
    /// server shows that server present at the read.
    #[default]
    Read,
    /// The provider's answers to this leadership term's own writes of the
    /// port and its floating IP, made moments before (the port's create
    /// with the server's, a floating IP's create): what the port carries,
    /// bound to the server that create made, not that the server is still
    /// there.
    OwnWrites,
}

/// A Server's port, as the provider lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerPort {
    pub id: String,
    /// The port's own MAC address: an address pair without one uses it.
    pub mac_address: Option<String>,
    /// Provider IDs of its security groups.
    pub security_groups: Vec<String>,
    pub allowed_address_pairs: Vec<AllowedAddressPair>,
    /// The floating IP associated with the port, if any.
    pub floating_ip: Option<FloatingIp>,
    /// The provider server the port is bound to as read (Neutron's
    /// `device_id`), `None` when unbound. The provider unbinds a deleted
    /// server's ports, so a port read bound to a server shows that server
    /// present at the read.
    pub bound_to: Option<String>,
}

/// A floating IP, by its provider ID.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FloatingIp {
    pub id: String,
    pub address: Option<String>,
}

/// The security groups and address pairs a port is to carry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortUpdate {
    pub server: ServerRef,
    pub port_id: String,
    /// Provider IDs.
    pub security_groups: Vec<String>,
    pub allowed_address_pairs: Vec<AllowedAddressPair>,
}

/// A floating IP for the Server's port.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FloatingIpRequest {
    pub server: ServerRef,
    pub port_id: String,
}

/// Which Server a provider server belongs to. The uid is the idempotency key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ServerRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// Who is calling the cloud: project and credentials of one Identity.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct IdentityContext {
    pub region_id: String,
    pub identity_id: String,
    pub project_id: String,
    pub credentials: Credentials,
    /// The Nova keypair of the identity (`OpenstackIdentity.spec.sshKeyName`),
    /// sent as `key_name` to servers that use it.
    pub ssh_key_name: Option<String>,
}

impl fmt::Debug for IdentityContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdentityContext")
            .field("region_id", &self.region_id)
            .field("identity_id", &self.identity_id)
            .field("project_id", &self.project_id)
            .field("ssh_key_name", &self.ssh_key_name)
            .finish_non_exhaustive()
    }
}

/// Credentials never print: `Debug` redacts them.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum Credentials {
    #[default]
    None,
    Password {
        user_id: String,
        password: String,
    },
    ApplicationCredential {
        id: String,
        secret: String,
    },
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::None => f.write_str("None"),
            Credentials::Password { .. } => f.write_str("Password(<redacted>)"),
            Credentials::ApplicationCredential { .. } => f.write_str("ApplicationCredential(<redacted>)"),
        }
    }
}

/// Everything the provider needs to create a server.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateRequest {
    pub server: ServerRef,
    /// Provider-side name: the Server's name label, else its object name.
    pub name: String,
    pub flavor_id: String,
    pub image_id: String,
    pub networks: Vec<NetworkAttachment>,
    /// Provider network IDs already known for networks the request names
    /// (by Network name): they spare the lookup by name.
    pub network_ids: BTreeMap<String, String>,
    pub security_group_ids: Vec<String>,
    pub public_ip: bool,
    /// Final user data, already merged with managed parts by the core.
    pub user_data: Option<Vec<u8>>,
    pub tags: Vec<Tag>,
    /// Boot with the identity's SSH keypair (Nova `key_name`): the Server
    /// asks for it, or names no SSH CA and no other way (uni-region's rule).
    pub identity_ssh_key: bool,
    /// Whom the server belongs to, from the Server's labels, for the system
    /// metadata other tools read.
    pub owner: Owner,
    /// No create was ever issued for the Server (see
    /// [`crate::reconcile::never_created`]), so no port of an earlier
    /// attempt can exist and the adapter need not look for one to reuse.
    /// `false` (the default) always looks.
    pub first_create: bool,
}

/// A rebuild of a present provider server onto `image_id`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebuildRequest {
    pub server: ServerRef,
    /// The provider server to rebuild.
    pub provider_id: String,
    pub image_id: String,
}

/// The unikorn IDs a Server's labels carry (empty when a label is missing,
/// as the Go controller writes them).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub organization_id: String,
    pub project_id: String,
    pub region_id: String,
}

/// The provider's record of a server, as the monitor projects it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderServer {
    pub id: String,
    /// The `ServerRef::uid` the provider server is tied to (from its metadata).
    pub server_uid: String,
    pub status: ProviderStatus,
    pub power_state: PowerState,
    /// True while the provider has accepted the server but not begun deploying it.
    pub queued: bool,
    pub created: Option<Timestamp>,
    /// Nova `OS-SRV-USG:launched_at`: the server booted.
    pub launched_at: Option<Timestamp>,
    /// The image the server runs (Nova `image.id`), `None` when the record
    /// does not say. A rebuild sets it to its target when it is accepted.
    #[serde(default)]
    pub image_id: Option<String>,
    /// A task is under way on the server (Nova `OS-EXT-STS:task_state` is
    /// set: rebuilding, rebooting, ...); at rest it is false.
    #[serde(default)]
    pub task_in_flight: bool,
    /// The name of the flavor the server was created with (Nova's embedded
    /// `flavor.original_name`), for the metrics' `flavor_name` label.
    #[serde(default)]
    pub flavor_name: Option<String>,
    /// The provision state of the Ironic node deploying the server, for a
    /// baremetal server whose node the provider could read.
    #[serde(default)]
    pub ironic: Option<crate::baremetal::ProvisionState>,
    pub private_ip: Option<String>,
    pub public_ip: Option<String>,
    pub mac_address: Option<String>,
    /// The port took this server over: another controller made it for the
    /// Server (the Go controller, before this one took the region over).
    #[serde(default)]
    pub adopted: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProviderStatus {
    Active,
    #[default]
    Build,
    Error,
    Rebuild,
    Unknown,
    /// Any other provider status (SHUTOFF, REBOOT, MIGRATING, ...).
    Other(String),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum PowerState {
    #[default]
    NoState,
    Running,
    Shutdown,
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeleteProgress {
    /// The provider no longer lists the server.
    Gone,
    /// Deletion accepted and still under way.
    InProgress,
}

/// How many times one page of a list is asked before the list fails. A
/// list of many pages must not fail for one lost page: at 30 pages and 3 %
/// of reads failing, one try a page lists whole 40 % of the time, three tries
/// 99.9 %.
pub const LIST_PAGE_ATTEMPTS: u32 = 3;

/// What went wrong talking to the cloud. The split between transient and
/// refused is load-bearing: only a refusal parks a server.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CloudError {
    /// 409: the provider is busy with the resource; try again.
    #[error("provider conflict: {message}")]
    Conflict { message: String },
    /// 429, or 413 `overLimit`: try again later, not before `retry_after`
    /// when the provider said (`Retry-After`).
    #[error("provider rate limit: {message}{}", retry_after.map(|d| format!(" (asked to wait {}s)", d.as_secs())).unwrap_or_default())]
    RateLimited { message: String, retry_after: Option<Duration> },
    /// 5xx: the provider failed; try again.
    #[error("provider unavailable (HTTP {status}): {message}")]
    Unavailable { status: u16, message: String },
    /// No answer in time; the outcome of the call is unknown.
    #[error("provider request timed out: {message}")]
    Timeout { message: String },
    /// A 4xx other than 409/429: the request itself is refused (quota, invalid).
    #[error("provider refused the request (HTTP {status}): {message}")]
    Refused { status: u16, message: String },
    /// Authentication or configuration failed (bad credentials, no endpoint).
    #[error("provider authentication failed: {message}")]
    Auth { message: String },
    /// 403 with the policy engine's refusal (Neutron `PolicyNotAuthorized`):
    /// the cloud's policy does not let this identity do it. No spec change
    /// and no waiting fixes a policy; a person must grant the role it asks for.
    #[error("the cloud's policy does not allow it: {message}")]
    NotPermitted { message: String },
    /// Something the request needs does not exist at the provider yet (a
    /// network or security group still being provisioned); nothing was sent
    /// that could have made a server. Try again.
    #[error("provider not ready: {message}")]
    NotReady { message: String },
    /// The request never reached the provider (connection refused, DNS
    /// failure, TLS handshake failed): it had no effect.
    #[error("provider unreachable: {message}")]
    Unreachable { message: String },
    /// A step a create takes before it sends the server create (a lookup,
    /// the port) failed with `source`: the server create was never sent, so
    /// this is that step's failure, never a create of unknown fate, and
    /// never a create attempt.
    #[error("{step} (no server create was sent): {source}")]
    BeforeCreate { step: CreateStep, source: Box<CloudError> },
}

/// The steps a create takes before its server create.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CreateStep {
    /// Looking up what the create needs: an existing server, networks,
    /// security groups.
    Lookup,
    /// Preparing the port the server boots with.
    Port,
}

impl fmt::Display for CreateStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CreateStep::Lookup => "looking up what the create needs",
            CreateStep::Port => "preparing the server's port",
        })
    }
}

/// What a failed call says about its own effect at the provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallEffect {
    /// The answer proves the call changed nothing (a refusal, 409, 429, an
    /// authentication failure, a request that was never sent).
    None,
    /// The request may have been carried out with its answer lost (a
    /// timeout, a 5xx from a gateway, a connection lost after sending).
    Unknown,
}

impl CloudError {
    /// Maps an HTTP status to an error class as DESIGN §7 sorts them.
    pub fn from_http(status: u16, message: impl Into<String>) -> Self {
        let message = message.into();
        match status {
            401 => CloudError::Auth { message },
            409 => CloudError::Conflict { message },
            429 => CloudError::RateLimited { message, retry_after: None },
            500..=599 => CloudError::Unavailable { status, message },
            _ => CloudError::Refused { status, message },
        }
    }

    /// Whether a read that failed so is asked again at once (a page of a
    /// list, up to [`LIST_PAGE_ATTEMPTS`] times): no answer, a 5xx, or no
    /// connection. A rate limit waits out its `Retry-After`, and a refusal
    /// or a failed login is not answered differently a moment later.
    pub fn read_asked_again(&self) -> bool {
        matches!(self, CloudError::Timeout { .. } | CloudError::Unavailable { .. } | CloudError::Unreachable { .. })
    }

    /// Transient errors mean "ask again later"; they never park a server.
    pub fn is_transient(&self) -> bool {
        match self {
            CloudError::BeforeCreate { source, .. } => source.is_transient(),
            other => {
                !matches!(other, CloudError::Refused { .. } | CloudError::Auth { .. } | CloudError::NotPermitted { .. })
            }
        }
    }

    /// How long the provider asked to be left alone (`Retry-After` on a 429
    /// or a 413 `overLimit`), if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            CloudError::RateLimited { retry_after, .. } => *retry_after,
            CloudError::BeforeCreate { source, .. } => source.retry_after(),
            _ => None,
        }
    }

    /// Whether the failed call may still have taken effect. A 502/504 from a
    /// gateway does not mean Nova did not accept the create, so every 5xx is
    /// as unknown as a timeout; only an answer that proves otherwise is `None`.
    pub fn effect(&self) -> CallEffect {
        match self {
            CloudError::Timeout { .. } | CloudError::Unavailable { .. } => CallEffect::Unknown,
            CloudError::Conflict { .. }
            | CloudError::RateLimited { .. }
            | CloudError::Refused { .. }
            | CloudError::NotPermitted { .. }
            | CloudError::Auth { .. }
            | CloudError::Unreachable { .. }
            | CloudError::NotReady { .. }
            // Whatever the step's own answer, the server create was not sent.
            | CloudError::BeforeCreate { .. } => CallEffect::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_statuses_sort_into_classes() {
        assert!(CloudError::from_http(409, "").is_transient());
        assert!(CloudError::from_http(429, "").is_transient());
        assert!(CloudError::from_http(503, "").is_transient());
        assert!(matches!(CloudError::from_http(403, "quota"), CloudError::Refused { .. }));
        assert!(matches!(CloudError::from_http(401, "token"), CloudError::Auth { .. }));
        assert!(!CloudError::from_http(400, "bad flavor").is_transient());
        assert!(matches!(CloudError::from_http(413, "over quota"), CloudError::Refused { status: 413, .. }));
    }

    #[test]
    fn only_timeouts_and_server_errors_leave_a_call_effect_unknown() {
        for status in [500, 502, 503, 504] {
            assert_eq!(CloudError::from_http(status, "").effect(), CallEffect::Unknown, "{status}");
        }
        assert_eq!(CloudError::Timeout { message: String::new() }.effect(), CallEffect::Unknown);
        for status in [400, 401, 403, 404, 409, 413, 429] {
            assert_eq!(CloudError::from_http(status, "").effect(), CallEffect::None, "{status}");
        }
        assert_eq!(CloudError::Unreachable { message: String::new() }.effect(), CallEffect::None);
        assert!(CloudError::Unreachable { message: String::new() }.is_transient());
        // A network or group still being provisioned: nothing was sent, so a
        // wait, never a refusal and never an unknown-fate create.
        assert_eq!(CloudError::NotReady { message: String::new() }.effect(), CallEffect::None);
        assert!(CloudError::NotReady { message: String::new() }.is_transient());
    }

    /// A failure before the server create proves it was not sent, whatever
    /// the step's own answer (a 5xx, a timeout); whether it passes is the
    /// step's.
    #[test]
    fn a_failure_before_the_server_create_never_leaves_its_effect_unknown() {
        for source in [
            CloudError::from_http(503, ""),
            CloudError::Timeout { message: String::new() },
            CloudError::from_http(400, "bad pair"),
            CloudError::from_http(401, ""),
        ] {
            for step in [CreateStep::Lookup, CreateStep::Port] {
                let transient = source.is_transient();
                let error = CloudError::BeforeCreate { step, source: Box::new(source.clone()) };
                assert_eq!(error.effect(), CallEffect::None, "{error}");
                assert_eq!(error.is_transient(), transient, "{error}");
            }
        }
    }

    #[test]
    fn credentials_never_print() {
        let ctx = IdentityContext {
            credentials: Credentials::Password { user_id: "u".into(), password: "hunter2".into() },
            ..Default::default()
        };
        assert!(!format!("{ctx:?}").contains("hunter2"));
        assert!(!format!("{:?}", ctx.credentials).contains("hunter2"));
    }
}
