//! The cloud port over Nova and Neutron: the create, get, list and delete
//! flows, each idempotent and each keyed by the Server's uid.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use jiff::Timestamp;
use server_core::model::AllowedAddressPair;
use server_core::port::{
    AttachedResource, CloudError, CloudPort, CreateRequest, CreateStep, DeleteProgress, FloatingIp, FloatingIpRequest,
    IdentityContext, ListScope, NetworkSelector, Networking, NetworkingQuery, NetworkingSource, PortFuture, PortUpdate,
    ProviderListing, ProviderServer, ProviderStatus, RebuildRequest, RegionSettings, RequestGate, ServerPort,
    ServerRef, Term,
};
use tracing::{debug, info, warn};

use crate::auth::{Auth, FailureStreakHook};
use crate::client::{Http, Session};
use crate::config::{ConfigError, OpenStackConfig};
use crate::external::ExternalNetworks;
use crate::index::{Known, Listed, Project, ServerIndex};
use crate::mapping::{self, NovaServer, port_name};
use crate::network::{self as neutron, Port};
use crate::own_writes::OwnPortWrites;
use crate::resolve::NeutronNames;
use crate::{baremetal, compute};

/// The cloud port of one OpenStack region. Cheap to clone (shared state).
///
/// What it keeps is in two parts. `inner` lives as long as the process:
/// configuration, the HTTP client, tokens, the Neutron IDs of networks and
/// security groups by name (people make those, never a replica; a stale ID
/// is read again on the first "not found"), the Region's settings. `term`
/// is what it learnt about the project's servers (the uid index) and what
/// Neutron answered its own port writes, which only hold while no other
/// replica acts: each leadership term gets a new
/// one ([`CloudPort::for_term`]), with the term's gate, checked before
/// every request.
#[derive(Clone)]
pub struct OpenStackCloud {
    inner: Arc<Inner>,
    term: Arc<TermMemory>,
}

/// What one leadership term learns and may do.
struct TermMemory {
    /// Which Nova servers are whose, per identity, from one list each.
    index: ServerIndex,
    /// The ports this term made and the floating IPs it put on them.
    own_writes: OwnPortWrites,
    /// Admits each request of the term.
    gate: Arc<dyn RequestGate>,
}

impl TermMemory {
    fn new(term: &Term) -> Arc<Self> {
        Arc::new(TermMemory {
            index: ServerIndex::default(),
            own_writes: OwnPortWrites::default(),
            gate: term.gate.clone(),
        })
    }
}

struct Inner {
    config: OpenStackConfig,
    http: Http,
    auth: Auth,
    /// Neutron IDs of networks and security groups by name, per identity.
    names: NeutronNames,
    /// The external network last chosen for floating IPs, per identity.
    external: ExternalNetworks,
    /// What the region's Region resource says (see `apply_region_settings`).
    region: std::sync::RwLock<RegionSettings>,
    /// A lookup that only a new list can answer waits for the next one when
    /// a list ended less than this long ago (see [`OpenStackCloud::with_lookup_list_gap`]).
    lookup_list_gap: AtomicU64,
    /// Reads only (see [`OpenStackCloud::read_only`]).
    read_only: AtomicBool,
}

impl fmt::Debug for OpenStackCloud {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenStackCloud").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

/// What a list kept of the servers it showed.
struct Paged<T> {
    /// What `keep` made of each server that exists.
    kept: Vec<T>,
    /// The ids of the servers it showed deleted.
    deleted: Vec<String>,
    /// The latest `updated` it showed.
    latest_change: Option<Timestamp>,
    /// Nova's clock when it answered the first page.
    provider_now: Option<Timestamp>,
}

/// Notes in the index that `server` booted, when its record shows that
/// (the core's rule): the caller of the read may not be shown it (a list
/// taken for another Server's lookup, a second server of the uid).
fn record_boot(project: &Project, server: &NovaServer) {
    let Some(uid) = server.server_uid() else { return };
    if project.boot_read(uid).is_some() {
        return;
    }
    let record = mapping::provider_server(server);
    if server_core::record_shows_boot(&record) {
        project.record_boot(uid, record.launched_at.unwrap_or_else(jiff::Timestamp::now));
    }
}

/// Whether [`OpenStackCloud::ensure_port`] made the port or found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PortMade {
    /// Made for this create.
    Now,
    /// Left unbound by an earlier attempt, and updated.
    Earlier,
}

/// The core's view of a Neutron port.
fn server_port(port: Port, bound_to: Option<String>, floating_ip: Option<FloatingIp>) -> ServerPort {
    ServerPort {
        bound_to,
        id: port.id,
        mac_address: port.mac_address,
        security_groups: port.security_groups,
        allowed_address_pairs: port
            .allowed_address_pairs
            .into_iter()
            .map(|pair| AllowedAddressPair { cidr: pair.ip_address, mac_address: pair.mac_address })
            .collect(),
        floating_ip,
    }
}

/// Whether a port named after the Server is the Server's: described as
/// its own, or (made by the Go controller, which sets no description)
/// undescribed and bound to no server. A port of a Server of the same name
/// in another namespace of the project is neither.
fn owns_port(server: &ServerRef, port: &Port) -> bool {
    port.description == mapping::resource_description(server)
        || (port.description.is_empty() && port.device_id.is_empty())
}

/// A failure of a step before `POST /servers`: that step's, never a server
/// create of unknown fate (nothing that could make a server was sent). A
/// missing network or group stays what it is: a wait, typed already; a
/// refusal too (Neutron's quota on the port parks the Server as DESIGN's
/// table of create answers says, with Neutron's message).
fn before(step: CreateStep) -> impl Fn(CloudError) -> CloudError {
    move |error| match error {
        error @ (CloudError::NotReady { .. } | CloudError::Refused { .. } | CloudError::BeforeCreate { .. }) => error,
        error => CloudError::BeforeCreate { step, source: Box::new(error) },
    }
}

/// At most this many lists per lookup (a list racing a create can leave the
/// answer in doubt once; down cells keep it so).
const MAX_LISTS_PER_LOOKUP: usize = 2;

impl OpenStackCloud {
    /// Validates the configuration and builds the HTTP client. Nothing is
    /// sent until the first call: credentials come with each call.
    pub fn new(config: OpenStackConfig) -> Result<Self, ConfigError> {
        Self::with_login_failure_hook(config, None)
    }

    /// As [`OpenStackCloud::new`], calling `hook` once per streak of logins
    /// Keystone refuses for one credential (the operator counts them).
    pub fn with_login_failure_hook(
        config: OpenStackConfig,
        hook: Option<FailureStreakHook>,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let http = Http::new(&config)?;
        let auth = Auth::new(&config, hook);
        Ok(OpenStackCloud {
            inner: Arc::new(Inner {
                config,
                http,
                auth,
                names: NeutronNames::default(),
                external: ExternalNetworks::default(),
                region: std::sync::RwLock::default(),
                lookup_list_gap: AtomicU64::new(0),
                read_only: AtomicBool::new(false),
            }),
            term: TermMemory::new(&Term::unfenced()),
        })
    }

    /// Lookups list Nova at most once per `gap`: a lookup that only a new
    /// list can answer (a create whose answer was lost) while a list ended
    /// less than `gap` ago is answered "not known yet" (a 503 the caller
    /// waits on) and left to the next list, which the monitor makes every
    /// interval. Every lookup listing for itself made the cloud path
    /// O(Servers²) at scale: one create in doubt per few hundred Servers,
    /// each costing a list of every server. Zero (the default) lists
    /// whenever a lookup needs it.
    pub fn with_lookup_list_gap(self, gap: Duration) -> Self {
        let millis = u64::try_from(gap.as_millis()).unwrap_or(u64::MAX);
        self.inner.lookup_list_gap.store(millis, Ordering::Relaxed);
        self
    }

    /// A port that reads and never writes, for `explain` and `run
    /// --shadow`: a Go-made server is reported as this operator would adopt
    /// it, without tagging it; every call that changes the cloud answers
    /// `Unreachable` (nothing sent).
    pub fn read_only(self) -> Self {
        self.inner.read_only.store(true, Ordering::Relaxed);
        self
    }

    fn is_read_only(&self) -> bool {
        self.inner.read_only.load(Ordering::Relaxed)
    }

    /// Refuses `what` on a read-only port, before anything is sent.
    fn writable(&self, what: &str) -> Result<(), CloudError> {
        match self.is_read_only() {
            true => Err(CloudError::Unreachable {
                message: format!("{what}: this cloud port only reads; nothing was sent"),
            }),
            false => Ok(()),
        }
    }

    fn lookup_list_gap(&self) -> Duration {
        Duration::from_millis(self.inner.lookup_list_gap.load(Ordering::Relaxed))
    }

    /// The port for the controller's per-region registry.
    pub fn port(&self) -> Arc<dyn CloudPort> {
        Arc::new(self.clone())
    }

    pub fn config(&self) -> &OpenStackConfig {
        &self.inner.config
    }

    fn session<'a>(&'a self, identity: &'a IdentityContext) -> Session<'a> {
        Session { http: &self.inner.http, auth: &self.inner.auth, identity, gate: self.term.gate.as_ref() }
    }

    /// Lists the servers of the project (every one, or those changed since
    /// `changed_since`) and records them in the index, with the boots the
    /// list shows: page by page, so a list that ends before its last page
    /// (a page that failed, a lookup's caller that stopped waiting) still
    /// notes every boot it was shown. Of each server that exists only what
    /// `keep` makes of it is held past its page; of each shown deleted, its
    /// id.
    async fn list_into<T>(
        &self,
        session: &Session<'_>,
        project: &Project,
        changed_since: Option<Timestamp>,
        mut keep: impl FnMut(&NovaServer) -> Option<T>,
    ) -> Result<Paged<T>, CloudError> {
        let started = self.term.index.tick();
        let mut listed = Vec::new();
        let mut paged = Paged { kept: Vec::new(), deleted: Vec::new(), latest_change: None, provider_now: None };
        let answered = compute::list_servers(session, changed_since, |page| {
            for server in &page {
                paged.latest_change = paged.latest_change.max(server.updated_at());
                if server.deleted() {
                    paged.deleted.push(server.id.clone());
                    continue;
                }
                if !server.down_cell() {
                    record_boot(project, server);
                }
                listed.push(Listed::of(server));
                paged.kept.extend(keep(server));
            }
        })
        .await?;
        paged.provider_now = answered.first_page_date;
        match changed_since {
            None => project.record_list(started, listed),
            Some(_) => project.record_changes(started, listed),
        }
        Ok(paged)
    }

    /// Lists the project into the index in a task of its own that holds
    /// `listing` until the list ends: a caller that stops waiting (its
    /// call's timeout, while a list of many pages pages) does not cut the
    /// list short, and the callers waiting on the lock find the index
    /// answered instead of starting the list again.
    async fn list_detached(
        &self,
        identity: &IdentityContext,
        project: &Arc<Project>,
        listing: tokio::sync::OwnedMutexGuard<()>,
    ) -> Result<(), CloudError> {
        let (cloud, identity, project) = (self.clone(), identity.clone(), project.clone());
        let list = tokio::spawn(async move {
            let _listing = listing;
            let session = cloud.session(&identity);
            cloud.list_into(&session, &project, None, |_| None::<()>).await.map(drop)
        });
        list.await.unwrap_or_else(|_| {
            Err(CloudError::Unavailable {
                status: 503,
                message: "listing servers: the list ended without an answer".into(),
            })
        })
    }

    /// What the index knows of `uid`, listing (once, shared with concurrent
    /// callers of the same identity) when only a list can tell.
    async fn known(&self, session: &Session<'_>, project: &Arc<Project>, uid: &str) -> Result<Known, CloudError> {
        for attempt in 0..MAX_LISTS_PER_LOOKUP {
            if let known @ (Known::Ids(_) | Known::Absent) = project.known(uid) {
                return Ok(known);
            }
            let listing = project.listing.clone().lock_owned().await;
            // Another caller's list, finished while this one waited, may answer.
            if let known @ (Known::Ids(_) | Known::Absent) = project.known(uid) {
                return Ok(known);
            }
            let gap = self.lookup_list_gap();
            if attempt == 0 && project.listed_within(gap) {
                return Err(CloudError::Unavailable {
                    status: 503,
                    message: format!(
                        "listing servers: whether server {uid} exists is told by the next list of the project's \
                         servers (they are listed at most every {}s)",
                        gap.as_secs()
                    ),
                });
            }
            self.list_detached(session.identity, project, listing).await?;
        }
        match project.known(uid) {
            Known::MustList => Err(CloudError::Unavailable {
                status: 503,
                message: format!(
                    "listing servers: {} servers of the project are in a Nova cell that does not answer, so \
                     whether server {uid} exists cannot be told",
                    project.down_cells()
                ),
            }),
            known => Ok(known),
        }
    }

    /// Every live Nova server tied to the Server, oldest first, each read
    /// just now; a Go-made one is adopted first (see [`Self::adopt`]).
    async fn servers_of(&self, session: &Session<'_>, server: &ServerRef) -> Result<Vec<NovaServer>, CloudError> {
        let project = self.term.index.project(session.identity);
        let uid = server.uid.as_str();
        for _ in 0..MAX_LISTS_PER_LOOKUP {
            let ids = match self.known(session, &project, uid).await? {
                Known::Ids(ids) => ids,
                Known::Absent => return Ok(self.adopt(session, &project, server).await?.into_iter().collect()),
                Known::MustList => continue,
            };
            let mut found = Vec::with_capacity(ids.len());
            for id in ids {
                match compute::get_server(session, &id).await? {
                    Some(nova) if nova.down_cell() => {
                        return Err(CloudError::Unavailable {
                            status: 503,
                            message: format!("reading server {id}: its Nova cell does not answer"),
                        });
                    }
                    Some(nova) if nova.server_uid() == Some(uid) => {
                        record_boot(&project, &nova);
                        found.push(nova);
                    }
                    _ => project.forget(uid, &id),
                }
            }
            if !found.is_empty() {
                if found.len() > 1 {
                    let ids: Vec<&str> = found.iter().map(|s| s.id.as_str()).collect();
                    warn!(server_uid = uid, ?ids, "more than one provider server carries this Server's uid");
                }
                return Ok(found);
            }
        }
        Ok(Vec::new())
    }

    /// The Server's provider server, if any.
    async fn lookup(&self, session: &Session<'_>, server: &ServerRef) -> Result<Option<NovaServer>, CloudError> {
        Ok(self.servers_of(session, server).await?.into_iter().next())
    }

    /// Takes over a server the Go controller made for this Server: no server
    /// carries the uid, and exactly one of the project carries the Server's
    /// name in the Go controller's `serverID` metadata, with no port
    /// `server-<name>` bound to another server. It is tagged with the uid, so
    /// later lookups find it as any other. Several candidates are an error:
    /// nothing is created or deleted until a person decides.
    async fn adopt(
        &self,
        session: &Session<'_>,
        project: &Project,
        server: &ServerRef,
    ) -> Result<Option<NovaServer>, CloudError> {
        let candidates = project.go_made(&server.name);
        let id = match candidates.as_slice() {
            [] => return Ok(None),
            [id] => id.clone(),
            several => {
                return Err(CloudError::Refused {
                    status: 409,
                    message: format!(
                        "adopting the Go controller's server for {}/{}: {} servers of the project carry serverID={} \
                         ({}); tag the right one with {}={} or delete the others",
                        server.namespace,
                        server.name,
                        several.len(),
                        server.name,
                        several.join(", "),
                        mapping::METADATA_SERVER_UID,
                        server.uid
                    ),
                });
            }
        };
        let Some(mut nova) = compute::get_server(session, &id).await? else {
            return Ok(None);
        };
        if nova.go_server_name() != Some(server.name.as_str()) {
            return Ok(None);
        }
        let ports = neutron::ports_named(session, &port_name(&server.name)).await?;
        if let Some(port) = ports.iter().find(|p| !p.device_id.is_empty() && p.device_id != id) {
            return Err(CloudError::Refused {
                status: 409,
                message: format!(
                    "adopting the Go controller's server {id} for {}/{}: its port {} is bound to server {}, not to it",
                    server.namespace,
                    server.name,
                    port_name(&server.name),
                    port.device_id
                ),
            });
        }
        let mut ownership = mapping::ownership_metadata(server);
        ownership.insert(mapping::METADATA_ADOPTED_FROM.to_owned(), "go-controller".to_owned());
        if self.is_read_only() {
            // As it would be once adopted; nothing written, nothing remembered.
            for (key, value) in ownership {
                nova.metadata.insert(&key, value);
            }
            return Ok(Some(nova));
        }
        compute::update_metadata(session, &id, &ownership).await?;
        for (key, value) in ownership {
            nova.metadata.insert(&key, value);
        }
        project.remember(&server.uid, &id, self.term.index.tick());
        info!(
            server_uid = %server.uid,
            namespace = %server.namespace,
            name = %server.name,
            provider_id = %id,
            "adopted the provider server the Go controller made"
        );
        Ok(Some(nova))
    }

    async fn create_flow(
        &self,
        identity: &IdentityContext,
        request: &CreateRequest,
    ) -> Result<ProviderServer, CloudError> {
        let session = self.session(identity);
        let uid = request.server.uid.as_str();
        let Some(network) = request.networks.first() else {
            return Err(CloudError::Refused {
                status: 400,
                message: format!(
                    "server {}/{} names no network to attach",
                    request.server.namespace, request.server.name
                ),
            });
        };
        if let Some(existing) = self.lookup(&session, &request.server).await.map_err(before(CreateStep::Lookup))? {
            // Its floating IP, if it lacks one, is the core's to ask for
            // (`ensure_floating_ip`), on the next pass that reads its port.
            debug!(server_uid = uid, provider_id = %existing.id, "provider server exists; create is a no-op");
            return Ok(mapping::provider_server(&existing));
        }
        let resolved = self
            .inner
            .names
            .resolve(
                &session,
                &network.id,
                request.network_ids.get(&network.id).map(String::as_str),
                &request.security_group_ids,
            )
            .await
            .map_err(before(CreateStep::Lookup))?;
        // The floating IP's network is chosen before anything is made: a
        // choice that cannot be made refuses the create while no server
        // exists. The floating IP itself is made after the server, as its
        // own step the core asks for (`ensure_floating_ip`).
        if request.public_ip {
            self.floating_network(&session).await.map_err(before(CreateStep::Lookup))?;
        }
        self.term.own_writes.forget(identity, uid);
        let (port, made) = match self.ensure_port(&session, request, network, &resolved).await {
            Err(CloudError::NotReady { message }) => {
                // A kept Neutron ID went stale: read the names again next time.
                self.inner.names.invalidate(identity).await;
                return Err(CloudError::NotReady { message });
            }
            other => other.map_err(before(CreateStep::Port))?,
        };
        let project = self.term.index.project(identity);
        project.mark_uncertain(uid, self.term.index.tick());
        let id = compute::create_server(
            &session,
            &mapping::server_body(request, &port.id, identity.ssh_key_name.as_deref()),
        )
        .await?;
        project.remember(uid, &id, self.term.index.tick());
        project.settle(uid);
        if made == PortMade::Now {
            let known = server_port(port.clone(), Some(id.clone()), None);
            self.term.own_writes.note_created(identity, uid, &id, known);
        }
        info!(
            server_uid = uid,
            namespace = %request.server.namespace,
            name = %request.server.name,
            provider_id = %id,
            port_id = %port.id,
            "created provider server"
        );
        // Nova answered 202: the server exists and is being scheduled.
        Ok(ProviderServer {
            id,
            server_uid: uid.to_owned(),
            status: ProviderStatus::Build,
            queued: true,
            ..ProviderServer::default()
        })
    }

    /// The Server's port that `server_id` boots with (or, unbound, may).
    async fn server_port(
        &self,
        session: &Session<'_>,
        server: &ServerRef,
        server_id: &str,
    ) -> Result<Option<Port>, CloudError> {
        let ports = neutron::ports_named(session, &port_name(&server.name)).await?;
        Ok(ports.into_iter().find(|p| p.device_id == server_id || (p.device_id.is_empty() && owns_port(server, p))))
    }

    /// The port the new server boots with: an unbound leftover of an earlier
    /// attempt on the same network is brought up to date and reused; an
    /// unbound one on a network the spec no longer names is deleted.
    async fn ensure_port(
        &self,
        session: &Session<'_>,
        request: &CreateRequest,
        network: &server_core::model::NetworkAttachment,
        resolved: &mapping::ResolvedNetworking,
    ) -> Result<(Port, PortMade), CloudError> {
        let uid = request.server.uid.as_str();
        let body = mapping::port_body(request, network, resolved);
        let mut reusable = None;
        // No create was ever issued for the Server: no port of an earlier
        // attempt exists to reuse (the core's `never_created`).
        let named = if request.first_create {
            Vec::new()
        } else {
            neutron::ports_named(session, &port_name(&request.server.name)).await?
        };
        // A port bound to a server is that server's, whoever made it (a
        // predecessor of the same name whose server was abandoned, another
        // replica's create): never reused, never released here. Ports are
        // released by ID once their server is known gone (`release`).
        let unbound = named.into_iter().filter(|port| port.device_id.is_empty());
        for port in unbound.filter(|port| owns_port(&request.server, port)) {
            if reusable.is_none() && port.network_id == resolved.network_id {
                reusable = Some(port);
            } else {
                self.release_port(session, &port).await?;
            }
        }
        if let Some(port) = reusable {
            let mut update = body;
            // Name and network are fixed; refresh what the spec may have changed.
            if let Some(fields) = update.get_mut("port").and_then(|p| p.as_object_mut()) {
                fields.remove("network_id");
                fields.remove("name");
            }
            neutron::update_port(session, &port.id, update).await?;
            debug!(server_uid = uid, port_id = %port.id, "reusing port of an earlier attempt");
            return Ok((port, PortMade::Earlier));
        }
        let port = neutron::create_port(session, body).await?;
        info!(server_uid = uid, port_id = %port.id, network_id = %resolved.network_id, "created port");
        Ok((port, PortMade::Now))
    }

    /// The port `query.provider_id` boots with, the floating IP on it, and
    /// the Neutron IDs of the spec's security groups: the port as this
    /// term's own writes left it while their answers stand (`own_writes`),
    /// else read.
    async fn networking_flow(
        &self,
        identity: &IdentityContext,
        query: &NetworkingQuery,
    ) -> Result<Networking, CloudError> {
        let session = self.session(identity);
        let wanted = self.inner.names.security_group_ids(&session, &query.security_groups).await?;
        if let Some(port) = self.term.own_writes.port_of(identity, &query.server.uid, &query.provider_id) {
            return Ok(Networking {
                port: Some(port),
                wanted_security_groups: wanted,
                source: NetworkingSource::OwnWrites,
            });
        }
        let Some(port) = self.server_port(&session, &query.server, &query.provider_id).await? else {
            return Ok(Networking { port: None, wanted_security_groups: wanted, source: NetworkingSource::Read });
        };
        let floating_ip = neutron::floating_ips_of(&session, &port.id)
            .await?
            .into_iter()
            .next()
            .map(|ip| FloatingIp { id: ip.id, address: ip.floating_ip_address });
        let bound_to = (!port.device_id.is_empty()).then(|| port.device_id.clone());
        let port = server_port(port, bound_to, floating_ip);
        Ok(Networking { port: Some(port), wanted_security_groups: wanted, source: NetworkingSource::Read })
    }

    /// `PUT /ports/{id}` with the security groups and address pairs.
    async fn update_port_flow(&self, identity: &IdentityContext, update: &PortUpdate) -> Result<(), CloudError> {
        let session = self.session(identity);
        // Its answer is not kept: the next pass reads the port.
        self.term.own_writes.forget(identity, &update.server.uid);
        let body = mapping::port_security_body(&update.security_groups, &update.allowed_address_pairs);
        neutron::update_port(&session, &update.port_id, body).await?;
        info!(server_uid = %update.server.uid, port_id = %update.port_id, "updated the port's security groups and address pairs");
        Ok(())
    }

    /// A floating IP on the port from the chosen external network. The core
    /// asks only when the pass's read of the port found none; one made since
    /// makes Neutron refuse another (409 `FloatingIPPortAlreadyAssociated`),
    /// a conflict the next pass reads the port again for.
    async fn ensure_floating_ip_flow(
        &self,
        identity: &IdentityContext,
        request: &FloatingIpRequest,
    ) -> Result<(), CloudError> {
        let session = self.session(identity);
        let network_id = self.floating_network(&session).await?;
        let description = mapping::resource_description(&request.server);
        let ip = neutron::create_floating_ip(&session, &network_id, &request.port_id, &description).await.inspect_err(
            |error| {
                // Whatever the port carries now is for a read to say.
                self.term.own_writes.forget(identity, &request.server.uid);
                // Refused (the network gone, say), not merely unanswered.
                if !error.is_transient() {
                    self.inner.external.forget(identity);
                }
            },
        )?;
        let known = FloatingIp { id: ip.id.clone(), address: ip.floating_ip_address.clone() };
        self.term.own_writes.note_floating_ip(identity, &request.server.uid, &request.port_id, known);
        info!(
            server_uid = %request.server.uid,
            floating_ip_id = %ip.id,
            address = ip.floating_ip_address.as_deref().unwrap_or(""),
            "created floating IP"
        );
        Ok(())
    }

    /// The external-network selector in force: the configuration's, else
    /// the Region resource's.
    fn external_network_selector(&self) -> Option<NetworkSelector> {
        let configured = self.inner.config.external_networks.clone();
        configured.or_else(|| {
            let region = self.inner.region.read().unwrap_or_else(std::sync::PoisonError::into_inner);
            region.external_networks.clone()
        })
    }

    /// The configured external network; else, with a selector (the
    /// configuration's or the Region's), the first external network it
    /// selects; else the first external network Neutron lists. Both as the
    /// Go controller picks (uni-region's openstack provider takes the first
    /// external network when no selector is given).
    async fn floating_network(&self, session: &Session<'_>) -> Result<String, CloudError> {
        let config = &self.inner.config;
        if let Some(id) = config.floating_network_id.as_deref().filter(|id| !id.is_empty()) {
            return Ok(id.to_owned());
        }
        let selector = self.external_network_selector();
        if let Some(kept) = self.inner.external.kept(session.identity, &selector) {
            return Ok(kept);
        }
        let chosen = self.choose_floating_network(session, selector.as_ref()).await?;
        self.inner.external.keep(session.identity, selector, chosen.clone());
        Ok(chosen)
    }

    /// [`Self::floating_network`] as Neutron's list of external networks
    /// tells it now.
    async fn choose_floating_network(
        &self,
        session: &Session<'_>,
        selector: Option<&NetworkSelector>,
    ) -> Result<String, CloudError> {
        let networks = neutron::external_networks(session).await?;
        if let Some(selector) = selector {
            return match networks.into_iter().find(|n| selector.selects(&n.id, &n.tags)) {
                Some(network) => Ok(network.id),
                None => Err(CloudError::Refused {
                    status: 400,
                    message: format!(
                        "a public IP was requested but no external network the project sees matches the \
                         region's selector (ids {:?}, tags {:?})",
                        selector.ids.as_deref().unwrap_or_default(),
                        selector.tags.as_deref().unwrap_or_default()
                    ),
                }),
            };
        }
        let count = networks.len();
        match networks.into_iter().next() {
            Some(first) => {
                if count > 1 {
                    debug!(network_id = %first.id, external_networks = count, "no selector: the first external network Neutron lists");
                }
                Ok(first.id)
            }
            None => Err(CloudError::Refused {
                status: 400,
                message: "a public IP was requested but the project sees no external network: configure \
                          floatingNetworkID or give the project access to one"
                    .into(),
            }),
        }
    }

    /// Floating IPs first (they hold the port), then the port itself.
    async fn release_port(&self, session: &Session<'_>, port: &Port) -> Result<(), CloudError> {
        for ip in neutron::floating_ips_of(session, &port.id).await? {
            neutron::delete_floating_ip(session, &ip.id).await?;
            info!(floating_ip_id = %ip.id, port_id = %port.id, "released floating IP");
        }
        neutron::delete_port(session, &port.id).await?;
        info!(port_id = %port.id, "released port");
        Ok(())
    }

    async fn delete_flow(&self, identity: &IdentityContext, server: &ServerRef) -> Result<DeleteProgress, CloudError> {
        let session = self.session(identity);
        let uid = server.uid.as_str();
        self.term.own_writes.forget(identity, uid);
        let servers = self.servers_of(&session, server).await?;
        if !servers.is_empty() {
            for nova in &servers {
                if nova.soft_deleted() {
                    compute::force_delete_server(&session, &nova.id).await?;
                    info!(server_uid = uid, provider_id = %nova.id, "force-deleted soft-deleted provider server");
                } else if !nova.deleting() {
                    compute::delete_server(&session, &nova.id).await?;
                    info!(server_uid = uid, provider_id = %nova.id, "requested provider server deletion");
                }
            }
            // Nova deletes asynchronously; a quick look spares a pass when it
            // was fast. Any doubt (still there, or no answer) is "in progress".
            let project = self.term.index.project(identity);
            for nova in &servers {
                match compute::get_server(&session, &nova.id).await {
                    Ok(None) => project.forget(uid, &nova.id),
                    Ok(Some(_)) | Err(_) => return Ok(DeleteProgress::InProgress),
                }
            }
        }
        // Nova no longer has it. Its port and floating IP are the core's to
        // release, each by its ID, once it has seen the server absent
        // (`attachments`, `release`): Nova deletes asynchronously, so this
        // call is rarely the one that sees it gone.
        Ok(DeleteProgress::Gone)
    }

    /// The Server's ports (named `server-<name>`, described as its own or,
    /// made by the Go controller, undescribed and unbound) and their floating
    /// IPs, with any floating IP described as the Server's whose port is
    /// already gone. Floating IPs first.
    async fn attachments_flow(
        &self,
        identity: &IdentityContext,
        server: &ServerRef,
    ) -> Result<Vec<AttachedResource>, CloudError> {
        let session = self.session(identity);
        let description = mapping::resource_description(server);
        let ports: Vec<Port> = neutron::ports_named(&session, &port_name(&server.name))
            .await?
            .into_iter()
            .filter(|port| owns_port(server, port))
            .collect();
        let mut found = std::collections::BTreeSet::new();
        for port in &ports {
            for ip in neutron::floating_ips_of(&session, &port.id).await? {
                found.insert(AttachedResource::FloatingIp { id: ip.id });
            }
        }
        for ip in neutron::floating_ips_described(&session, &description).await? {
            if ip.port_id.is_none() || ports.iter().any(|port| Some(&port.id) == ip.port_id.as_ref()) {
                found.insert(AttachedResource::FloatingIp { id: ip.id });
            }
        }
        found.extend(ports.into_iter().map(|port| AttachedResource::Port { id: port.id }));
        Ok(found.into_iter().collect())
    }

    /// Deletes one port or floating IP by its ID; one already gone (404) is
    /// released.
    async fn release_flow(&self, identity: &IdentityContext, resource: &AttachedResource) -> Result<(), CloudError> {
        let session = self.session(identity);
        self.term.own_writes.forget_resource(identity, resource);
        match resource {
            AttachedResource::FloatingIp { id } => neutron::delete_floating_ip(&session, id).await?,
            AttachedResource::Port { id } => neutron::delete_port(&session, id).await?,
        }
        info!(kind = resource.kind(), provider_id = %resource.id(), "released");
        Ok(())
    }

    async fn get_flow(
        &self,
        identity: &IdentityContext,
        server: &ServerRef,
    ) -> Result<Option<ProviderServer>, CloudError> {
        let session = self.session(identity);
        Ok(self.lookup(&session, server).await?.as_ref().map(mapping::provider_server))
    }

    async fn list_flow(&self, identity: &IdentityContext, scope: ListScope) -> Result<ProviderListing, CloudError> {
        let session = self.session(identity);
        let project = self.term.index.project(identity);
        let changed_since = match scope {
            ListScope::Complete => None,
            ListScope::ChangedSince(since) => Some(since),
        };
        // Servers this operator did not make (no uid) are not its business;
        // down-cell records cannot be told apart, so they are left out too.
        let Paged { kept: mut records, deleted, latest_change, provider_now } = self
            .list_into(&session, &project, changed_since, |s| {
                (s.server_uid().is_some() && !s.down_cell()).then(|| mapping::provider_server(s))
            })
            .await?;
        // While a server builds, Ironic tells a baremetal one's progress:
        // one list of the project's nodes, read best effort.
        if records.iter().any(|record| record.status == ProviderStatus::Build) {
            match baremetal::node_states(&session).await {
                Ok(states) => {
                    for record in records.iter_mut().filter(|record| record.status == ProviderStatus::Build) {
                        record.ironic = states.get(&record.id).copied();
                    }
                }
                Err(error) => debug!(%error, "baremetal nodes not read; building servers show the VM default"),
            }
        }
        Ok(ProviderListing { changed_since, servers: records, deleted, latest_change, provider_now })
    }
}

impl CloudPort for OpenStackCloud {
    fn create<'a>(
        &'a self,
        identity: &'a IdentityContext,
        request: &'a CreateRequest,
    ) -> PortFuture<'a, ProviderServer> {
        Box::pin(async move {
            self.writable("creating a server")?;
            self.create_flow(identity, request).await
        })
    }

    fn delete<'a>(&'a self, identity: &'a IdentityContext, server: &'a ServerRef) -> PortFuture<'a, DeleteProgress> {
        Box::pin(async move {
            self.writable("deleting a server")?;
            self.delete_flow(identity, server).await
        })
    }

    fn get<'a>(
        &'a self,
        identity: &'a IdentityContext,
        server: &'a ServerRef,
    ) -> PortFuture<'a, Option<ProviderServer>> {
        Box::pin(self.get_flow(identity, server))
    }

    fn rebuild<'a>(&'a self, identity: &'a IdentityContext, request: &'a RebuildRequest) -> PortFuture<'a, ()> {
        Box::pin(async move {
            self.writable("rebuilding a server")?;
            let session = self.session(identity);
            compute::rebuild_server(&session, &request.provider_id, &request.image_id).await?;
            info!(server_uid = %request.server.uid, provider_id = %request.provider_id, "provider server rebuild accepted");
            Ok(())
        })
    }

    fn apply_region_settings(&self, settings: &RegionSettings) {
        let mut region = self.inner.region.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if *region != *settings {
            if self.inner.config.external_networks.is_some() && settings.external_networks.is_some() {
                info!(region = %self.inner.config.region, "the configuration's externalNetworks overrides the Region's selector");
            }
            *region = settings.clone();
        }
    }

    fn boot_read(&self, identity: &IdentityContext, uid: &str) -> Option<jiff::Timestamp> {
        self.term.index.project(identity).boot_read(uid)
    }

    fn list<'a>(&'a self, identity: &'a IdentityContext, scope: ListScope) -> PortFuture<'a, ProviderListing> {
        Box::pin(self.list_flow(identity, scope))
    }

    fn attachments<'a>(
        &'a self,
        identity: &'a IdentityContext,
        server: &'a ServerRef,
    ) -> PortFuture<'a, Vec<AttachedResource>> {
        Box::pin(self.attachments_flow(identity, server))
    }

    fn release<'a>(&'a self, identity: &'a IdentityContext, resource: &'a AttachedResource) -> PortFuture<'a, ()> {
        Box::pin(async move {
            self.writable("releasing a port or floating IP")?;
            self.release_flow(identity, resource).await
        })
    }

    fn networking<'a>(
        &'a self,
        identity: &'a IdentityContext,
        query: &'a NetworkingQuery,
    ) -> PortFuture<'a, Networking> {
        Box::pin(self.networking_flow(identity, query))
    }

    fn update_port<'a>(&'a self, identity: &'a IdentityContext, update: &'a PortUpdate) -> PortFuture<'a, ()> {
        Box::pin(async move {
            self.writable("updating a port")?;
            self.update_port_flow(identity, update).await
        })
    }

    fn ensure_floating_ip<'a>(
        &'a self,
        identity: &'a IdentityContext,
        request: &'a FloatingIpRequest,
    ) -> PortFuture<'a, ()> {
        Box::pin(async move {
            self.writable("making a floating IP")?;
            self.ensure_floating_ip_flow(identity, request).await
        })
    }

    /// The same region with an empty uid index: a list taken in an earlier
    /// term says nothing about what another replica did since (it may have
    /// created the very server a lookup would call absent).
    fn for_term(&self, term: &Term) -> Arc<dyn CloudPort> {
        Arc::new(OpenStackCloud { inner: self.inner.clone(), term: TermMemory::new(term) })
    }
}
