//! The Kubernetes API server, minimally and in memory: the stored Servers,
//! each at a resourceVersion from one counter (like etcd's revision), the
//! controller replicas' caches of them (see [`TrackedServer`]), and the
//! tenants' consumed resources, whose finalizers are the reference edges.
//! Every change to a stored Server goes through here.

use server_core::Server;

use super::world::{Tenant, TrackedServer, copy_meta, copy_status};

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
