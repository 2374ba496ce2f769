//! The Kubernetes API server, minimally and in memory: the stored Servers,
//! each at a resourceVersion from one counter (like etcd's revision), the
//! controller replicas' caches of them (see [`TrackedServer`]), and the
//! tenants' consumed resources, whose finalizers are the reference edges.
//! Every change to a stored Server goes through here.

use server_core::Server;
use server_simcloud::{FateKind, ServerHandle};

use super::world::{CreatePassInFlight, Lagging, NOT_PENDING, REPLICAS, Tenant, copy_meta, copy_status};

/// The Kubernetes side of one shard.
#[derive(Debug)]
pub(crate) struct ApiServer {
    servers: Vec<TrackedServer>,
    tenants: Vec<Tenant>,
    /// The latest resourceVersion handed out.
    revision: u64,
}

/// Which part of a Server a write changes (see [`ApiServer::write`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ServerPart {
    Status,
    Meta,
    MetaAndSpec,
}

impl ApiServer {
    pub(crate) fn new(servers: Vec<TrackedServer>, tenants: Vec<Tenant>) -> Self {
        ApiServer { servers, tenants, revision: 0 }
    }

    /// How many Servers the shard has (created or not yet).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.servers.len()
    }

    #[inline]
    pub(crate) fn server(&self, i: usize) -> Option<&TrackedServer> {
        self.servers.get(i)
    }

    #[inline]
    pub(crate) fn server_mut(&mut self, i: usize) -> Option<&mut TrackedServer> {
        self.servers.get_mut(i)
    }

    pub(crate) fn servers(&self) -> &[TrackedServer] {
        &self.servers
    }

    pub(crate) fn servers_mut(&mut self) -> &mut [TrackedServer] {
        &mut self.servers
    }

    /// How many tenants the shard has.
    pub(crate) fn tenant_count(&self) -> usize {
        self.tenants.len()
    }

    #[inline]
    pub(crate) fn tenant(&self, t: usize) -> Option<&Tenant> {
        self.tenants.get(t)
    }

    #[inline]
    pub(crate) fn tenant_mut(&mut self, t: usize) -> Option<&mut Tenant> {
        self.tenants.get_mut(t)
    }

    /// Server `i` with its tenant, for a pass that fills in the tenant's
    /// provider view.
    #[inline]
    pub(crate) fn server_and_tenant(&mut self, i: usize) -> Option<(&TrackedServer, &mut Tenant)> {
        let tracked = self.servers.get(i)?;
        let tenant = self.tenants.get_mut(tracked.tenant)?;
        Some((tracked, tenant))
    }

    #[inline]
    fn next_revision(&mut self) -> u64 {
        self.revision += 1;
        self.revision
    }

    /// The user creates Server `i`: stored at a new resourceVersion (returned).
    #[inline]
    pub(crate) fn create(&mut self, i: usize) -> Option<u64> {
        let rv = self.next_revision();
        let tracked = self.servers.get_mut(i)?;
        tracked.exists = true;
        tracked.rv = rv;
        Some(rv)
    }

    /// Another writer changed Server `i` in a field this model does not
    /// carry: it moves to a new resourceVersion.
    #[inline]
    pub(crate) fn touch(&mut self, i: usize) {
        let rv = self.next_revision();
        if let Some(tracked) = self.servers.get_mut(i) {
            tracked.rv = rv;
        }
    }

    /// Server `i`'s provider group as the replicas' listings hold it: its
    /// tenant, its offset among the tenant's Servers, and how many it has.
    #[inline]
    pub(crate) fn group_of(&self, i: usize) -> Option<(usize, usize, usize)> {
        let t = self.servers.get(i)?.tenant;
        let tenant = self.tenants.get(t)?;
        Some((t, i.checked_sub(tenant.first)?, tenant.len))
    }

    /// Applies `change` to Server `i` at a new resourceVersion: `change`
    /// runs on the shadow copy and the copies swap, so the shadow holds the
    /// Server before the write (for the wake rule, the checks and a lagging
    /// cache) until [`ApiServer::level`]. No whole Server is cloned per
    /// write. Returns the old and the new resourceVersion.
    #[inline]
    pub(crate) fn write(
        &mut self,
        i: usize,
        change: &dyn Fn(&mut Server) -> Result<(), String>,
    ) -> Result<(u64, u64), String> {
        let rv = self.revision + 1;
        let Some(tracked) = self.servers.get_mut(i) else { return Err("no such server".into()) };
        if let Err(error) = change(&mut tracked.shadow) {
            tracked.shadow.clone_from(&tracked.server);
            return Err(error);
        }
        std::mem::swap(&mut tracked.shadow, &mut tracked.server);
        let old_rv = tracked.rv;
        tracked.rv = rv;
        self.revision = rv;
        Ok((old_rv, rv))
    }

    /// Brings Server `i`'s shadow copy level after a write that changed
    /// `part`, copying that part back.
    #[inline]
    pub(crate) fn level(&mut self, i: usize, part: ServerPart) {
        if let Some(tracked) = self.servers.get_mut(i) {
            match part {
                ServerPart::Status => copy_status(&mut tracked.shadow.status, &tracked.server.status),
                ServerPart::Meta => copy_meta(&mut tracked.shadow.meta, &tracked.server.meta),
                ServerPart::MetaAndSpec => {
                    copy_meta(&mut tracked.shadow.meta, &tracked.server.meta);
                    tracked.shadow.spec = tracked.server.spec.clone();
                }
            }
            debug_assert!(
                tracked.shadow == tracked.server,
                "{part:?} write to {} touched another part",
                tracked.server.meta.name
            );
        }
    }

    /// Server `i` leaves the API server (its last finalizer went, or it had
    /// none).
    #[inline]
    pub(crate) fn remove(&mut self, i: usize) -> Option<&TrackedServer> {
        let tracked = self.servers.get_mut(i)?;
        tracked.exists = false;
        Some(tracked)
    }
}

/// One Server object and everything the simulation tracks about it.
#[derive(Debug)]
pub(crate) struct TrackedServer {
    /// The API server's copy; only [`ApiServer`] writes it.
    server: Server,
    /// Equal to `server` between writes; during one, the Server before it
    /// (see [`ApiServer::write`]).
    shadow: Server,
    rv: u64,
    /// Created and not yet removed from the API server.
    exists: bool,
    /// Each replica's cache, when it lags: the older copy and its
    /// resourceVersion, or no copy at all (created while that replica's
    /// watch was cut). `None` means that cache is up to date.
    pub(crate) lagging: [Option<Box<Lagging>>; REPLICAS],
    pub(crate) tenant: usize,
    pub(crate) fate: FateKind,
    /// This Server's state in the cloud model.
    pub(crate) handle: ServerHandle,
    /// (resourceVersion, record version) of the last observation that
    /// changed nothing.
    pub(crate) monitor_memo: Option<(u64, u64)>,
    /// Per replica, when the next pass is due (`NOT_PENDING` if none), and
    /// the ticket that identifies that queue entry: kube-runtime keeps one
    /// pending reconcile per object, the earliest.
    pub(crate) pending_at: [u64; REPLICAS],
    pub(crate) ticket: [u32; REPLICAS],
    /// Per replica, a pass that read its facts and decided to create, whose
    /// actions run when its create call goes out (see `Engine::reconcile`).
    /// kube-runtime runs no other pass of this replica on the Server meanwhile.
    pub(crate) in_flight: [Option<Box<CreatePassInFlight>>; REPLICAS],
    /// An operator reset of it is already scheduled.
    pub(crate) reset_scheduled: bool,
    /// A create note may stand for no create: its write got no answer (it
    /// may have landed), or the write setting it back after refused user
    /// data failed; a note write or a set-back that lands clears it. The core
    /// counts such a note as an attempt in doubt (fail closed), as it would
    /// after a crash between a note and its create.
    pub(crate) note_orphaned: bool,
}

impl TrackedServer {
    /// Server `server` (of the shard's tenant `tenant`), not created yet.
    pub(crate) fn new(server: Server, tenant: usize, fate: FateKind, handle: ServerHandle) -> Self {
        TrackedServer {
            shadow: server.clone(),
            server,
            rv: 0,
            exists: false,
            lagging: [None, None],
            tenant,
            fate,
            handle,
            monitor_memo: None,
            pending_at: [NOT_PENDING; REPLICAS],
            ticket: [0; REPLICAS],
            in_flight: [None, None],
            reset_scheduled: false,
            note_orphaned: false,
        }
    }

    /// The API server's copy.
    #[inline]
    pub(crate) fn stored(&self) -> &Server {
        &self.server
    }

    /// Its resourceVersion (0: never created).
    #[inline]
    pub(crate) fn rv(&self) -> u64 {
        self.rv
    }

    /// Created and not yet removed.
    #[inline]
    pub(crate) fn exists(&self) -> bool {
        self.exists
    }

    /// The stored Server's user data: what the answer to a write of it holds.
    pub(crate) fn stored_user_data(&self) -> Option<server_core::model::UserData> {
        self.exists.then(|| self.server.spec.user_data.clone()).flatten()
    }

    /// During a write (between [`ApiServer::write`] and
    /// [`ApiServer::level`]), the Server before it; otherwise the stored copy.
    #[inline]
    pub(crate) fn before_write(&self) -> &Server {
        &self.shadow
    }

    /// Replica `r`'s cache keeps the Server as it was before the write under
    /// way, at `old_rv` (its watch event is late or stopped).
    #[inline]
    pub(crate) fn hold_back(&mut self, r: usize, old_rv: u64) {
        if let Some(lagging) = self.lagging.get_mut(r) {
            *lagging = Some(Box::new(Lagging::Stale(self.shadow.clone(), old_rv)));
        }
    }

    /// The Server as replica `r`'s cache holds it, with its resourceVersion;
    /// `None` when that cache does not hold it (removed, or not listed yet).
    pub(crate) fn view(&self, r: usize) -> Option<(&Server, u64)> {
        match self.lagging.get(r).and_then(Option::as_deref) {
            Some(Lagging::Stale(server, rv)) => Some((server, *rv)),
            Some(Lagging::Absent) => None,
            None if self.exists => Some((&self.server, self.rv)),
            None => None,
        }
    }
}
