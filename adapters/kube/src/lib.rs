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
mod config;
mod controller;
pub mod convert;
pub mod crd;
mod error;
mod events;
mod executor;
mod explain;
mod facts;
mod identity;
mod metrics;
mod monitor;
mod registry;
mod shutdown;
pub mod wake;

use std::future::Future;
use std::sync::Arc;

use kube::Client;

pub use config::ControllerConfig;
pub use controller::requeue_for;
pub use error::Error;
pub use events::{REPORTING_CONTROLLER, UNREADABLE_REASON};
pub use explain::explain;
pub use metrics::{Metrics, NoMetrics};
pub use monitor::PollReport;
pub use registry::CloudRegistry;
pub use server_core::Outcome;

use cache::Caches;
use cached::CachedServer;
use executor::Executor;
use monitor::Monitor;

/// The operator: the controller and the monitor over one client, one cloud
/// registry and one configuration.
#[derive(Clone)]
pub struct Operator {
    executor: Arc<Executor>,
    monitor: Arc<Monitor>,
    /// True while the caches are filled and the loops run: the readiness probe.
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
        let events = events::EventPublisher::new(client.clone(), config.reporting_instance.clone());
        let monitor = Monitor {
            client: client.clone(),
            clouds: clouds.clone(),
            config: config.clone(),
            metrics: metrics.clone(),
        };
        let executor = Executor { client, clouds, events, config, metrics };
        let (ready, _) = tokio::sync::watch::channel(false);
        Operator { executor: Arc::new(executor), monitor: Arc::new(monitor), ready: Arc::new(ready) }
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
        let shutdown = shutdown::shutdown(shutdown);
        self.with_caches(shutdown.clone(), |caches| async move {
            let (controller, monitor) = tokio::join!(
                controller::run(self.executor.clone(), caches.clone(), shutdown.clone()),
                self.monitor.run(&caches, shutdown)
            );
            controller.and(monitor)
        })
        .await
    }

    /// Runs only the controller (watch, wake rule, passes) until `shutdown` resolves.
    pub async fn run_controller(&self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), Error> {
        let shutdown = shutdown::shutdown(shutdown);
        self.with_caches(shutdown.clone(), |caches| controller::run(self.executor.clone(), caches, shutdown)).await
    }

    /// Runs only the monitor loop until `shutdown` resolves.
    pub async fn run_monitor(&self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), Error> {
        let shutdown = shutdown::shutdown(shutdown);
        self.with_caches(shutdown.clone(), |caches| async move { self.monitor.run(&caches, shutdown).await }).await
    }

    /// One reconcile pass over `server`, outside the controller (for the
    /// simulator and tests). Returns the core's outcome. Without running
    /// caches, it lists the consumed kinds of the Server's namespace first.
    pub async fn reconcile_once(&self, server: &crd::Server) -> Result<Outcome, Error> {
        let namespace = server.metadata.namespace.as_deref().unwrap_or_default();
        let caches = Caches::load(&self.executor.client, Some(namespace)).await?;
        self.executor.reconcile(&CachedServer::new(server.clone()), &caches).await
    }

    /// One monitor poll, outside the loop; it lists the consumed kinds first.
    pub async fn poll_once(&self) -> Result<PollReport, Error> {
        let caches = Caches::load(&self.executor.client, self.config().namespace.as_deref()).await?;
        self.monitor.poll(&caches).await
    }

    /// Runs `work` over filled caches of the configured namespace scope.
    async fn with_caches<W, F>(&self, shutdown: shutdown::Shutdown, work: W) -> Result<(), Error>
    where
        W: FnOnce(Caches) -> F,
        F: Future<Output = Result<(), Error>>,
    {
        let config = self.config();
        let ready = self.ready.clone();
        let result = cache::with_caches(
            &self.executor.client,
            config.namespace.as_deref(),
            &cache::WatchSettings::of(config),
            ready.clone(),
            shutdown,
            |caches| {
                ready.send_replace(true);
                work(caches)
            },
        )
        .await;
        self.ready.send_replace(false);
        result
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
