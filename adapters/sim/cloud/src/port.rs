//! The async [`CloudPort`] over the model: each call reads the clock it was
//! given, optionally waits a simulated network latency, and runs the model
//! under a lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use jiff::Timestamp;
use server_core::port::{
    AttachedResource, CloudPort, CreateRequest, DeleteProgress, FloatingIpRequest, IdentityContext, ListScope,
    Networking, NetworkingQuery, PortFuture, PortUpdate, ProviderListing, ProviderServer, RebuildRequest, ServerRef,
    Term,
};

use super::clock::{Clock, SystemClock};
use super::counters::{Counters, UidTruth};
use super::fate::Fate;
use super::model::{CloudConfig, CloudModel};

/// An in-process cloud: a handle to one shared [`CloudModel`]. Clones share it,
/// so a test can keep a handle to script fates and read counters while the
/// controller holds [`SimCloud::port`].
#[derive(Clone, Debug)]
pub struct SimCloud {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    model: Mutex<CloudModel>,
    clock: Arc<dyn Clock>,
    latency_micros: AtomicU64,
}

impl SimCloud {
    /// A cloud on the wall clock.
    pub fn new(config: CloudConfig) -> Self {
        SimCloud::with_clock(config, Arc::new(SystemClock))
    }

    /// A cloud on the given clock (e.g. [`super::TokioClock`] in paused tests).
    pub fn with_clock(config: CloudConfig, clock: Arc<dyn Clock>) -> Self {
        SimCloud::build(CloudModel::new(config), clock)
    }

    /// Makes every port call first wait `latency` (tokio time), from now on,
    /// for every handle of this cloud.
    pub fn set_latency(&self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.shared.latency_micros.store(micros, Ordering::Relaxed);
    }

    fn build(model: CloudModel, clock: Arc<dyn Clock>) -> Self {
        SimCloud { shared: Arc::new(Shared { model: Mutex::new(model), clock, latency_micros: AtomicU64::new(0) }) }
    }

    /// The cloud port for the controller's per-region registry.
    pub fn port(&self) -> Arc<dyn CloudPort> {
        Arc::new(self.clone())
    }

    pub fn now(&self) -> Timestamp {
        self.shared.clock.now()
    }

    /// Fixes the fate of the Server with this uid (before it is created).
    pub fn script(&self, uid: &str, fate: Fate) {
        self.model().script(uid, fate);
    }

    pub fn counters(&self) -> Counters {
        self.model().counters()
    }

    /// Ground truth for one Server, now.
    pub fn truth(&self, uid: &str) -> UidTruth {
        let now = self.now();
        self.model().truth(uid, now)
    }

    /// Provider servers that exist now.
    pub fn live_servers(&self) -> usize {
        let now = self.now();
        self.model().live_servers(now)
    }

    /// Runs `f` on the model under the lock (for anything not wrapped here).
    pub fn with_model<R>(&self, f: impl FnOnce(&mut CloudModel) -> R) -> R {
        f(&mut self.model())
    }

    fn model(&self) -> MutexGuard<'_, CloudModel> {
        // A panic while holding the lock leaves the model consistent (every
        // mutation is a few plain field writes), so poisoning is ignored.
        self.shared.model.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    async fn delay(&self) {
        let micros = self.shared.latency_micros.load(Ordering::Relaxed);
        if micros > 0 {
            tokio::time::sleep(Duration::from_micros(micros)).await;
        }
    }
}

impl CloudPort for SimCloud {
    fn create<'a>(
        &'a self,
        identity: &'a IdentityContext,
        request: &'a CreateRequest,
    ) -> PortFuture<'a, ProviderServer> {
        Box::pin(async move {
            self.delay().await;
            let now = self.now();
            self.model().create(now, &identity.project_id, request)
        })
    }

    fn delete<'a>(&'a self, _identity: &'a IdentityContext, server: &'a ServerRef) -> PortFuture<'a, DeleteProgress> {
        Box::pin(async move {
            self.delay().await;
            let now = self.now();
            self.model().delete(now, &server.uid)
        })
    }

    fn rebuild<'a>(&'a self, _identity: &'a IdentityContext, request: &'a RebuildRequest) -> PortFuture<'a, ()> {
        Box::pin(async move {
            self.delay().await;
            let now = self.now();
            self.model().rebuild(now, &request.server.uid, &request.image_id)
        })
    }

    fn get<'a>(
        &'a self,
        _identity: &'a IdentityContext,
        server: &'a ServerRef,
    ) -> PortFuture<'a, Option<ProviderServer>> {
        Box::pin(async move {
            self.delay().await;
            let now = self.now();
            let mut model = self.model();
            let record = model.get(now, &server.uid);
            model.mark_read(now, &server.uid);
            record
        })
    }

    /// Every read of this cloud answers its caller: none shows a boot the
    /// caller was not shown.
    fn boot_read(&self, _identity: &IdentityContext, _uid: &str) -> Option<jiff::Timestamp> {
        None
    }

    /// Every ask is answered with a complete list: this cloud dates no change.
    fn list<'a>(&'a self, identity: &'a IdentityContext, _scope: ListScope) -> PortFuture<'a, ProviderListing> {
        Box::pin(async move {
            self.delay().await;
            let now = self.now();
            let mut model = self.model();
            let records = model.list(now, &identity.project_id)?;
            for record in &records {
                model.mark_read(now, &record.server_uid);
            }
            Ok(ProviderListing::complete(records))
        })
    }

    /// A Server's port and floating IP are its server's (they go with it):
    /// a Server holds nothing at this cloud once its server is gone.
    fn attachments<'a>(
        &'a self,
        _identity: &'a IdentityContext,
        _server: &'a ServerRef,
    ) -> PortFuture<'a, Vec<AttachedResource>> {
        Box::pin(async move {
            self.delay().await;
            Ok(Vec::new())
        })
    }

    /// Nothing but servers exists here, so any other resource is already gone.
    /// A floating IP is released from its server's port; a port goes with
    /// its server (nothing to release).
    fn release<'a>(&'a self, _identity: &'a IdentityContext, resource: &'a AttachedResource) -> PortFuture<'a, ()> {
        Box::pin(async move {
            self.delay().await;
            let now = self.now();
            match resource {
                AttachedResource::FloatingIp { id } => self.model().release_floating_ip(now, id),
                AttachedResource::Port { .. } => Ok(()),
            }
        })
    }

    /// The live server's port (`None` once it is gone); the spec's security
    /// group IDs resolve to themselves here.
    fn networking<'a>(
        &'a self,
        _identity: &'a IdentityContext,
        query: &'a NetworkingQuery,
    ) -> PortFuture<'a, Networking> {
        Box::pin(async move {
            self.delay().await;
            let now = self.now();
            Ok(Networking {
                port: self.model().port_of(&query.server.uid, now),
                wanted_security_groups: query.security_groups.clone(),
                source: Default::default(),
            })
        })
    }

    fn update_port<'a>(&'a self, _identity: &'a IdentityContext, update: &'a PortUpdate) -> PortFuture<'a, ()> {
        Box::pin(async move {
            self.delay().await;
            let now = self.now();
            self.model().update_port(now, &update.server.uid, &update.security_groups, &update.allowed_address_pairs)
        })
    }

    fn ensure_floating_ip<'a>(
        &'a self,
        _identity: &'a IdentityContext,
        request: &'a FloatingIpRequest,
    ) -> PortFuture<'a, ()> {
        Box::pin(async move {
            self.delay().await;
            let now = self.now();
            self.model().set_floating_ip(now, &request.server.uid, true)
        })
    }

    /// The same cloud: SimCloud remembers nothing about the cloud besides
    /// the model, which *is* the cloud, and each call is one request, so
    /// the caller's check before each call (server-kube's fence) is the
    /// check before each request.
    fn for_term(&self, _term: &Term) -> Arc<dyn CloudPort> {
        Arc::new(self.clone())
    }
}
