//! server-kube: the Server controller on Kubernetes.
//!
//! Connects server-core to a Kubernetes API: CRD types ([`crd`]), the watch
//! with the wake rule ([`wake`]), caches of the consumed kinds, the executor
//! that gathers facts, asks `server_core::reconcile` and runs its actions,
//! Kubernetes Events, and the monitor loop that projects the provider's view
//! onto status. Every rule is server-core's; this crate only performs I/O.
//!
//! ```no_run
//! # async fn doc(client: kube::Client, clouds: server_kube::CloudRegistry) -> Result<(), server_kube::Error> {
//! let config = server_kube::ControllerConfig::default();
//! server_kube::run(client, clouds, config, async { let _ = tokio::signal::ctrl_c().await; }).await
//! # }
//! ```

mod cache;
pub mod cached;
mod cloud;
pub mod compact_map;
mod config;
mod consumed;
mod controller;
pub mod convert;
pub mod crd;
mod error;
mod events;
mod executor;
mod explain;
mod facts;
mod fence;
mod freshness;
mod health;
pub mod held_user_data;
mod kube_api;
mod leader;
mod metrics;
mod monitor;
mod own_writes;
mod references;
mod region;
mod server_writes;
mod shutdown;
mod slots;
mod term;
pub mod wake;

use std::future::Future;
use std::sync::Arc;

use kube::Client;

pub use cloud::{CloudRegistry, ProviderKind, RegionCloud};
pub use config::ControllerConfig;
pub use consumed::{ReadKind, all_crds, consumed_crds, read_kinds};
pub use controller::requeue_for;
pub use error::Error;
pub use events::REPORTING_CONTROLLER;
pub use explain::{ShadowEntry, ShadowRound, explain, shadow};
pub use fence::Fence;
pub use health::Health;
pub use leader::LeaseConfig;
pub use metrics::{Metrics, NoMetrics, ServerLabels, ServerStateKey};
pub use references::ReferencePatch;

use cache::Caches;
use executor::Executor;
use health::Progress;
use monitor::Monitor;

/// The operator: the controller and the monitor over one client, one cloud
/// registry and one configuration.
///
/// With `config.leader_election`, several replicas may run: each keeps its
/// caches and its Server store warm, but only the holder of the Lease passes
/// over Servers, polls the cloud and writes. Every write and every cloud
/// call of the operator goes through the [`Fence`], which closes at the
/// leader's renew deadline.
#[derive(Clone)]
pub struct Operator {
    executor: Arc<Executor>,
    monitor: Arc<Monitor>,
    /// The unfenced client: the elector's, and the caches' reads.
    client: Client,
    fence: Fence,
    progress: Progress,
    /// True once the caches and the Server store are filled, while the loops
    /// run: the readiness probe.
    ready: Arc<tokio::sync::watch::Sender<bool>>,
}

impl std::fmt::Debug for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operator").field("executor", &self.executor).finish_non_exhaustive()
    }
}

impl Operator {
    pub fn new(client: Client, clouds: CloudRegistry, config: ControllerConfig) -> Self {
        Self::with_metrics(client, clouds, config, Arc::new(NoMetrics))
    }

    /// Like [`Operator::new`], reporting to `metrics`.
    pub fn with_metrics(
        client: Client,
        clouds: CloudRegistry,
        config: ControllerConfig,
        metrics: Arc<dyn Metrics>,
    ) -> Self {
        let fence = match config.leader_election {
            None => Fence::open(),
            Some(_) => Fence::closed(),
        };
        let progress = Progress::default();
        let terms = Arc::new(term::Terms::new(fence.clone(), client.clone(), clouds, config.clone(), metrics.clone()));
        let monitor = Monitor { terms: terms.clone(), config: config.clone(), metrics: metrics.clone() };
        let slots = slots::PassSlots::new(config.concurrency);
        let executor = Executor { terms, config, metrics, fence: fence.clone(), progress: progress.clone(), slots };
        let (ready, _) = tokio::sync::watch::channel(false);
        Operator {
            executor: Arc::new(executor),
            monitor: Arc::new(monitor),
            client,
            fence,
            progress,
            ready: Arc::new(ready),
        }
    }

    /// Whether this replica may act (always, without leader election).
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// The liveness watchdog over the reconcile loop.
    pub fn health(&self) -> Health {
        Health { progress: self.progress.clone(), stall_timeout: self.config().stall_timeout }
    }

    pub fn config(&self) -> &ControllerConfig {
        &self.executor.config
    }

    /// Whether the operator is taking work: true once its caches are filled
    /// and its loops run, false while the Server watch fails (nothing new
    /// would be reconciled) and once they stop.
    pub fn readiness(&self) -> tokio::sync::watch::Receiver<bool> {
        self.ready.subscribe()
    }

    /// Runs the controller and the monitor until `shutdown` resolves. Both
    /// start once the caches of consumed resources are filled.
    pub async fn run(&self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), Error> {
        self.run_loops(shutdown, Loops::Both).await
    }

    /// Runs only the controller (watch, wake rule, passes) until `shutdown` resolves.
    pub async fn run_controller(&self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), Error> {
        self.run_loops(shutdown, Loops::Controller).await
    }

    /// Runs only the monitor loop until `shutdown` resolves.
    pub async fn run_monitor(&self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), Error> {
        self.run_loops(shutdown, Loops::Monitor).await
    }

    /// Runs the loops (and the election, if configured) until `shutdown`
    /// resolves; then in-flight passes get `drain_timeout` before they are
    /// dropped, and only after that does the leader release its Lease.
    async fn run_loops(&self, shutdown: impl Future<Output = ()> + Send + 'static, loops: Loops) -> Result<(), Error> {
        let shutdown = shutdown::shutdown(shutdown);
        let (stop_election, election_stopped) = tokio::sync::oneshot::channel::<()>();
        let election = match self.config().leader_election.clone() {
            None => None,
            Some(lease) => {
                lease.validate().map_err(Error::LeaderElection)?;
                let stopped = shutdown::shutdown(async move {
                    let _ = election_stopped.await;
                });
                Some(tokio::spawn(leader::run(self.client.clone(), lease, self.fence.clone(), stopped)))
            }
        };
        // Region settings before any pass: a create must not pick a floating
        // IP network before its region's selector is known.
        let region_watch = match &self.config().region_namespace {
            Some(namespace) => {
                let regions = region::load(&self.client, namespace, self.executor.terms.registered_clouds()).await?;
                Some(tokio::spawn(regions.run(shutdown.clone())))
            }
            None => None,
        };
        let stop = shutdown.clone();
        let work = self.with_caches(shutdown.clone(), move |caches, wakes| async move {
            let shutdown = stop;
            let (latch_wakes, latch_woken) = tokio::sync::mpsc::unbounded_channel();
            match loops {
                Loops::Both => {
                    tokio::join!(
                        controller::run(self.executor.clone(), caches.clone(), wakes, latch_woken, shutdown.clone()),
                        self.monitor.run(&caches, &latch_wakes, shutdown.clone())
                    );
                }
                Loops::Controller => {
                    controller::run(self.executor.clone(), caches, wakes, latch_woken, shutdown.clone()).await
                }
                // Nobody takes the wakes when only the monitor runs.
                Loops::Monitor => self.monitor.run(&caches, &latch_wakes, shutdown.clone()).await,
            }
            Ok(())
        });
        let result = drained(work, shutdown, self.config().drain_timeout).await;
        self.ready.send_replace(false);
        if let Some(region_watch) = region_watch {
            region_watch.abort();
        }
        if let Some(election) = election {
            // The elector closes the fence before it releases the Lease.
            let _ = stop_election.send(());
            let _ = election.await;
        }
        result
    }

    /// Runs `work` over filled caches of the configured namespace scope.
    async fn with_caches<W, F>(&self, shutdown: shutdown::Shutdown, work: W) -> Result<(), Error>
    where
        W: FnOnce(Caches, cache::Wakes) -> F,
        F: Future<Output = Result<(), Error>>,
    {
        let config = self.config();
        let ready = self.ready.clone();
        // The term forgets its writes the cache has caught up with.
        let terms = self.executor.terms.clone();
        let observed: cache::ServerObserved = Arc::new(move |uid, version| terms.server_observed(uid, version));
        // The caches read through the unfenced client: a follower keeps
        // them warm.
        let result = cache::with_caches(
            &self.client,
            config.namespace.as_deref(),
            &kube_api::WatchSettings::of(config),
            ready.clone(),
            observed,
            shutdown,
            |caches, wakes| {
                ready.send_replace(true);
                work(caches, wakes)
            },
        )
        .await;
        self.ready.send_replace(false);
        result
    }
}

#[derive(Clone, Copy, Debug)]
enum Loops {
    Both,
    Controller,
    Monitor,
}

/// Runs `work` to its end, or, once `shutdown` resolves, for at most `drain`
/// more. Dropping passes cut short is safe: every action is idempotent, and
/// a create is always preceded in its pass by a resourceVersion-guarded
/// write of the create-issued annotation, so whoever passes next finishes
/// the job and never creates twice. Waiting is bounded whatever `work` waits
/// on (kube-runtime holds its runner until its store is filled).
async fn drained(
    work: impl Future<Output = Result<(), Error>>,
    shutdown: shutdown::Shutdown,
    drain: std::time::Duration,
) -> Result<(), Error> {
    let mut work = std::pin::pin!(work);
    tokio::select! {
        result = &mut work => return result,
        () = shutdown => {}
    }
    match tokio::time::timeout(drain, work).await {
        Ok(result) => result,
        Err(_) => {
            tracing::warn!(?drain, "in-flight passes did not finish in time after shutdown; dropping them");
            Ok(())
        }
    }
}

/// Runs the controller and the monitor until `shutdown` resolves.
pub async fn run(
    client: Client,
    clouds: CloudRegistry,
    config: ControllerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    Operator::new(client, clouds, config).run(shutdown).await
}
