//! Replicas for the high-availability scenarios: each operator runs on its
//! own tokio runtime (its own thread pool) with its own Kubernetes client,
//! so it can be stopped as SIGTERM stops it, or killed as a crashed pod dies
//! (its runtime is dropped: every in-flight request is abandoned midway).
//! A [`CutProxy`] in front of SimKube cuts one replica's API connection
//! while its cloud connection works, as a network partition would.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use server_core::port::{
    CloudPort, CreateRequest, DeleteProgress, IdentityContext, ListScope, PortFuture, ProviderListing, ProviderServer,
    RebuildRequest, ServerRef, Term,
};
use server_kube::{CloudRegistry, ControllerConfig, Fence, LeaseConfig, Operator, RegionCloud};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::{AbortHandle, JoinHandle};

use crate::{Env, REGION};

/// The Lease timings of the scenarios: short, and valid (renew deadline
/// shorter than the lease, retry shorter than the deadline).
pub fn test_lease(identity: &str) -> LeaseConfig {
    LeaseConfig {
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(250),
        ..LeaseConfig::new(crate::NAMESPACE, identity)
    }
}

/// A cloud whose creates land at once and answer late, as Nova's
/// `POST /servers` does when it is slow: the instance record exists (and
/// lists) before the 202 comes back (nova/compute/api.py
/// `_provision_instances` writes it before the API answers). A caller that
/// dies while waiting has still created the server.
pub struct SlowAnswers {
    pub cloud: Arc<dyn CloudPort>,
    pub create_answer_delay: Duration,
}

impl std::fmt::Debug for SlowAnswers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlowAnswers").field("create_answer_delay", &self.create_answer_delay).finish_non_exhaustive()
    }
}

impl CloudPort for SlowAnswers {
    fn create<'a>(
        &'a self,
        identity: &'a IdentityContext,
        request: &'a CreateRequest,
    ) -> PortFuture<'a, ProviderServer> {
        Box::pin(async move {
            let created = self.cloud.create(identity, request).await;
            tokio::time::sleep(self.create_answer_delay).await;
            created
        })
    }

    fn delete<'a>(&'a self, identity: &'a IdentityContext, server: &'a ServerRef) -> PortFuture<'a, DeleteProgress> {
        self.cloud.delete(identity, server)
    }

    fn rebuild<'a>(&'a self, identity: &'a IdentityContext, request: &'a RebuildRequest) -> PortFuture<'a, ()> {
        self.cloud.rebuild(identity, request)
    }

    fn get<'a>(
        &'a self,
        identity: &'a IdentityContext,
        server: &'a ServerRef,
    ) -> PortFuture<'a, Option<ProviderServer>> {
        self.cloud.get(identity, server)
    }

    fn boot_read(&self, identity: &IdentityContext, uid: &str) -> Option<jiff::Timestamp> {
        self.cloud.boot_read(identity, uid)
    }

    fn list<'a>(&'a self, identity: &'a IdentityContext, scope: ListScope) -> PortFuture<'a, ProviderListing> {
        self.cloud.list(identity, scope)
    }

    fn attachments<'a>(
        &'a self,
        identity: &'a IdentityContext,
        server: &'a ServerRef,
    ) -> PortFuture<'a, Vec<server_core::port::AttachedResource>> {
        self.cloud.attachments(identity, server)
    }

    fn release<'a>(
        &'a self,
        identity: &'a IdentityContext,
        resource: &'a server_core::port::AttachedResource,
    ) -> PortFuture<'a, ()> {
        self.cloud.release(identity, resource)
    }

    fn networking<'a>(
        &'a self,
        identity: &'a IdentityContext,
        query: &'a server_core::port::NetworkingQuery,
    ) -> PortFuture<'a, server_core::port::Networking> {
        self.cloud.networking(identity, query)
    }

    fn update_port<'a>(
        &'a self,
        identity: &'a IdentityContext,
        update: &'a server_core::port::PortUpdate,
    ) -> PortFuture<'a, ()> {
        self.cloud.update_port(identity, update)
    }

    fn ensure_floating_ip<'a>(
        &'a self,
        identity: &'a IdentityContext,
        request: &'a server_core::port::FloatingIpRequest,
    ) -> PortFuture<'a, ()> {
        self.cloud.ensure_floating_ip(identity, request)
    }

    fn for_term(&self, term: &Term) -> Arc<dyn CloudPort> {
        Arc::new(SlowAnswers { cloud: self.cloud.for_term(term), create_answer_delay: self.create_answer_delay })
    }
}

/// A cloud port whose calls are several requests, as OpenStack's are (a
/// lookup, then `POST /servers`; a read, then `DELETE`), and which, while
/// armed, blocks between them until the test lets it go, as a slow Neutron
/// or Nova holds a call midway. Each request is first admitted by the
/// term's gate ([`CloudPort::for_term`]); what was sent is logged.
pub struct MidCallBlock {
    pub cloud: Arc<dyn CloudPort>,
    gate: Arc<dyn server_core::port::RequestGate>,
    pub armed: Arc<AtomicBool>,
    /// Calls waiting midway, by what they wait to send.
    pub blocked: Arc<Mutex<Vec<&'static str>>>,
    release: Arc<tokio::sync::watch::Sender<bool>>,
    /// Requests that changed the cloud, in order.
    pub sent: Arc<Mutex<Vec<&'static str>>>,
}

impl std::fmt::Debug for MidCallBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MidCallBlock").field("sent", &self.sent).finish_non_exhaustive()
    }
}

impl MidCallBlock {
    pub fn new(cloud: Arc<dyn CloudPort>) -> MidCallBlock {
        MidCallBlock {
            cloud,
            gate: Arc::new(server_core::port::Unfenced),
            armed: Arc::default(),
            blocked: Arc::default(),
            release: Arc::new(tokio::sync::watch::channel(false).0),
            sent: Arc::default(),
        }
    }

    /// Lets every blocked call go on.
    pub fn unblock(&self) {
        self.release.send_replace(true);
    }

    fn admit(&self, request: &'static str) -> Result<(), server_core::port::CloudError> {
        match self.gate.admit(Duration::from_secs(1)) {
            Some(_) => Ok(()),
            None => Err(server_core::port::CloudError::Unreachable { message: format!("{request}: not admitted") }),
        }
    }

    /// The first request, then (armed) the wait, then the gate again.
    async fn midway(&self, request: &'static str) -> Result<(), server_core::port::CloudError> {
        self.admit("the first request")?;
        if self.armed.load(Ordering::SeqCst) {
            if let Ok(mut blocked) = self.blocked.lock() {
                blocked.push(request);
            }
            let mut release = self.release.subscribe();
            let _ = release.wait_for(|released| *released).await;
        }
        self.admit(request)
    }

    fn log(&self, request: &'static str) {
        if let Ok(mut sent) = self.sent.lock() {
            sent.push(request);
        }
    }
}

impl CloudPort for MidCallBlock {
    fn create<'a>(
        &'a self,
        identity: &'a IdentityContext,
        request: &'a CreateRequest,
    ) -> PortFuture<'a, ProviderServer> {
        Box::pin(async move {
            self.midway("POST /servers").await?;
            self.log("POST /servers");
            self.cloud.create(identity, request).await
        })
    }

    fn rebuild<'a>(&'a self, identity: &'a IdentityContext, request: &'a RebuildRequest) -> PortFuture<'a, ()> {
        Box::pin(async move {
            self.midway("POST /servers/action rebuild").await?;
            self.log("POST /servers/action rebuild");
            self.cloud.rebuild(identity, request).await
        })
    }

    fn delete<'a>(&'a self, identity: &'a IdentityContext, server: &'a ServerRef) -> PortFuture<'a, DeleteProgress> {
        Box::pin(async move {
            self.midway("DELETE /servers").await?;
            self.log("DELETE /servers");
            self.cloud.delete(identity, server).await
        })
    }

    fn get<'a>(
        &'a self,
        identity: &'a IdentityContext,
        server: &'a ServerRef,
    ) -> PortFuture<'a, Option<ProviderServer>> {
        Box::pin(async move {
            self.admit("GET /servers")?;
            self.cloud.get(identity, server).await
        })
    }

    fn boot_read(&self, identity: &IdentityContext, uid: &str) -> Option<jiff::Timestamp> {
        self.cloud.boot_read(identity, uid)
    }

    fn list<'a>(&'a self, identity: &'a IdentityContext, scope: ListScope) -> PortFuture<'a, ProviderListing> {
        Box::pin(async move {
            self.admit("GET /servers/detail")?;
            self.cloud.list(identity, scope).await
        })
    }

    fn attachments<'a>(
        &'a self,
        identity: &'a IdentityContext,
        server: &'a ServerRef,
    ) -> PortFuture<'a, Vec<server_core::port::AttachedResource>> {
        Box::pin(async move {
            self.admit("GET /ports")?;
            self.cloud.attachments(identity, server).await
        })
    }

    fn release<'a>(
        &'a self,
        identity: &'a IdentityContext,
        resource: &'a server_core::port::AttachedResource,
    ) -> PortFuture<'a, ()> {
        Box::pin(async move {
            self.admit("DELETE /ports")?;
            self.log("DELETE /ports");
            self.cloud.release(identity, resource).await
        })
    }

    fn networking<'a>(
        &'a self,
        identity: &'a IdentityContext,
        query: &'a server_core::port::NetworkingQuery,
    ) -> PortFuture<'a, server_core::port::Networking> {
        Box::pin(async move {
            self.admit("GET /ports")?;
            self.cloud.networking(identity, query).await
        })
    }

    fn update_port<'a>(
        &'a self,
        identity: &'a IdentityContext,
        update: &'a server_core::port::PortUpdate,
    ) -> PortFuture<'a, ()> {
        Box::pin(async move {
            self.admit("PUT /ports")?;
            self.log("PUT /ports");
            self.cloud.update_port(identity, update).await
        })
    }

    fn ensure_floating_ip<'a>(
        &'a self,
        identity: &'a IdentityContext,
        request: &'a server_core::port::FloatingIpRequest,
    ) -> PortFuture<'a, ()> {
        Box::pin(async move {
            self.admit("POST /floatingips")?;
            self.log("POST /floatingips");
            self.cloud.ensure_floating_ip(identity, request).await
        })
    }

    fn for_term(&self, term: &Term) -> Arc<dyn CloudPort> {
        Arc::new(MidCallBlock {
            cloud: self.cloud.for_term(term),
            gate: term.gate.clone(),
            armed: self.armed.clone(),
            blocked: self.blocked.clone(),
            release: self.release.clone(),
            sent: self.sent.clone(),
        })
    }
}

/// One operator replica on its own runtime.
pub struct Replica {
    pub name: String,
    pub fence: Fence,
    runtime: Option<tokio::runtime::Runtime>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), server_kube::Error>>>,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica").field("name", &self.name).field("fence", &self.fence).finish_non_exhaustive()
    }
}

impl Replica {
    /// Starts a replica talking to the API at `api` with the Env's cloud
    /// (creates answered after `create_answer_delay`) and `config` plus the
    /// test Lease under `name`.
    pub fn start(
        env: &Env,
        name: &str,
        api: &str,
        config: &ControllerConfig,
        create_answer_delay: Duration,
    ) -> Replica {
        let url = api.parse().unwrap_or_else(|e| panic!("bad url {api}: {e}"));
        Replica::start_on(env.cloud.port(), name, kube::Config::new(url), config, create_answer_delay)
    }

    /// Starts a replica with its own client from `kube_config` and `cloud`
    /// serving [`REGION`].
    pub fn start_on(
        cloud: Arc<dyn CloudPort>,
        name: &str,
        kube_config: kube::Config,
        config: &ControllerConfig,
        create_answer_delay: Duration,
    ) -> Replica {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .thread_name(format!("replica-{name}"))
            .build()
            .unwrap_or_else(|e| panic!("no runtime for {name}: {e}"));
        // The client's connection pool and buffer task belong to this runtime.
        let _inside = runtime.enter();
        let client = kube::Client::try_from(kube_config).unwrap_or_else(|e| panic!("no client for {name}: {e}"));
        let cloud: Arc<dyn CloudPort> = Arc::new(SlowAnswers { cloud, create_answer_delay });
        let config = ControllerConfig {
            leader_election: Some(test_lease(name)),
            reporting_instance: Some(name.into()),
            ..config.clone()
        };
        let operator = Operator::new(client, CloudRegistry::new().with(REGION, RegionCloud::openstack(cloud)), config);
        let fence = operator.fence().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = runtime.spawn(async move {
            operator
                .run(async move {
                    let _ = stopped.await;
                })
                .await
        });
        Replica { name: name.into(), fence, runtime: Some(runtime), stop: Some(stop), task: Some(task) }
    }

    /// Whether this replica may act now.
    pub fn leads(&self) -> bool {
        self.fence.holds()
    }

    /// Stops it as SIGTERM does and waits for it to exit.
    pub async fn terminate(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            match tokio::time::timeout(Duration::from_secs(30), task).await {
                Ok(Ok(Ok(()))) => {}
                other => panic!("replica {} did not stop cleanly: {other:?}", self.name),
            }
        }
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }

    /// Kills it: no shutdown, no release; whatever it was doing is abandoned.
    pub fn kill(&mut self) {
        self.stop.take();
        self.task.take();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Samples which replicas lead every few milliseconds and remembers whether
/// two ever led at once.
pub struct LeadershipLog {
    overlap: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for LeadershipLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeadershipLog").field("overlap", &self.overlap).finish_non_exhaustive()
    }
}

impl LeadershipLog {
    pub fn start(fences: Vec<Fence>) -> LeadershipLog {
        let overlap = Arc::new(AtomicBool::new(false));
        let flag = overlap.clone();
        let task = tokio::spawn(async move {
            loop {
                if fences.iter().filter(|fence| fence.holds()).count() > 1 {
                    flag.store(true, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        });
        LeadershipLog { overlap, task }
    }

    /// Whether two replicas were ever seen acting at once.
    pub fn overlapped(&self) -> bool {
        self.overlap.load(Ordering::SeqCst)
    }
}

impl Drop for LeadershipLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A TCP proxy in front of the API server that can cut its clients off:
/// open connections are reset, new ones are accepted and never answered
/// (requests hang, as across a partition), until healed.
pub struct CutProxy {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<AbortHandle>>>,
    /// Connections accepted while cut, never answered.
    held: Arc<Mutex<Vec<TcpStream>>>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for CutProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CutProxy").field("addr", &self.addr).field("cut", &self.cut).finish_non_exhaustive()
    }
}

impl CutProxy {
    pub async fn start(upstream: SocketAddr) -> CutProxy {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap_or_else(|e| panic!("proxy bind: {e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("proxy address: {e}"));
        let cut = Arc::new(AtomicBool::new(false));
        let connections: Arc<Mutex<Vec<AbortHandle>>> = Arc::new(Mutex::new(Vec::new()));
        let held: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (is_cut, open, holding) = (cut.clone(), connections.clone(), held.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if is_cut.load(Ordering::SeqCst) {
                    // Accepted, never answered.
                    if let Ok(mut holding) = holding.lock() {
                        holding.push(inbound);
                    }
                    continue;
                }
                let forward = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                if let Ok(mut open) = open.lock() {
                    open.push(forward.abort_handle());
                }
            }
        });
        CutProxy { addr, cut, connections, held, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The proxy's address (for a TLS upstream: `https://` and this).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cuts every connection through the proxy.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        if let Ok(mut open) = self.connections.lock() {
            for connection in open.drain(..) {
                connection.abort();
            }
        }
    }

    /// Ends the cut: new connections go through again, and those held
    /// unanswered are closed (their clients connect again), so a healed
    /// replica's watches resume instead of hanging until their timeout.
    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
        if let Ok(mut held) = self.held.lock() {
            held.clear();
        }
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.cut();
    }
}
