//! Knobs of the controller and the monitor.

use std::time::Duration;

/// How the controller and the monitor run. `Default` gives the production
/// values of DESIGN §6 and §11.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// Watch and poll Servers in this namespace only; `None` means all.
    pub namespace: Option<String>,
    /// The reconcile rules' options (`provider-create-max-attempts`, ...).
    pub options: server_core::Options,
    /// Fixed requeue interval after Yield or Error; never exponential.
    pub yield_interval: Duration,
    /// Interval of the monitor's provider poll.
    pub monitor_interval: Duration,
    /// Re-reconcile every Server at this interval; `None` disables the
    /// periodic resync (the initial list at start-up still wakes every Server).
    pub resync_interval: Option<Duration>,
    /// Delay before re-establishing a failed Server watch.
    pub watch_retry_interval: Duration,
    /// Objects per page when a watch (re)lists a consumed kind.
    pub watch_page_size: u32,
    /// Servers per page when the Server watch (re)lists: smaller than
    /// `watch_page_size`, because a Server carries its user data (Nova takes
    /// up to 64 KiB) and a page is held whole, as text and decoded, while it
    /// is read.
    pub server_watch_page_size: u32,
    /// Upper bound on one cloud call; an expired call counts as a provider
    /// timeout (the provider's view becomes unknown).
    pub cloud_timeout: Duration,
    /// Reconciles running at once (different Servers; one Server never runs twice at once).
    pub concurrency: u16,
    /// How the reference writer encodes a batch of reference finalizer
    /// changes on a shared object (see `references`); JSON Patch unless
    /// measuring the alternative.
    pub reference_patch: crate::ReferencePatch,
    /// `reportingInstance` of emitted Events (e.g. the pod name); defaults to the controller name.
    pub reporting_instance: Option<String>,
    /// Read each region's `Region` resource from this namespace (the region
    /// controller's) and hand its settings to the region's cloud; `None`
    /// reads no Region.
    pub region_namespace: Option<String>,
    /// Act only while holding this Lease; `None` acts unconditionally (one replica).
    pub leader_election: Option<crate::LeaseConfig>,
    /// After shutdown is requested, how long in-flight passes may run before
    /// they are dropped (safe: every action is idempotent, and a create is
    /// preceded by a resourceVersion-guarded create-issued write).
    pub drain_timeout: Duration,
    /// The liveness watchdog fails when passes are in flight and none has
    /// started or finished for this long.
    pub stall_timeout: Duration,
}

impl ControllerConfig {
    pub const DEFAULT_YIELD_INTERVAL: Duration = Duration::from_secs(10);
    pub const DEFAULT_MONITOR_INTERVAL: Duration = Duration::from_secs(30);
    /// Fits a 30 s termination grace period with room for the lease release.
    pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(20);
    /// Three cloud calls at the 60 s cloud timeout, plus the API's share.
    pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(300);
    /// Passes at once (`--concurrency`): passes mostly wait (on the API
    /// server, the cloud), and a pass waiting on the reference writer gives
    /// its slot up (`slots`). 32 settled 3,000 Servers on kube-apiserver in
    /// 132 s against 234 s with 8 (docs/BENCH.md).
    pub const DEFAULT_CONCURRENCY: u16 = 32;
    /// kube-runtime's default page size.
    pub const DEFAULT_WATCH_PAGE_SIZE: u32 = 500;
    /// 100 Servers of 32 KiB of user data are a 3 MiB page; 500 held 16 MiB
    /// of text plus as much decoded, the largest share of the operator's
    /// peak heap in the bench.
    pub const DEFAULT_SERVER_WATCH_PAGE_SIZE: u32 = 100;

    /// The options the rules run with: `options`, with the grace of an
    /// issued create set to its fixed multiple of `cloud_timeout` (a create
    /// may be carried out after its call timed out), and the oldest listed
    /// provider view a pass may decide from to its fixed multiple of
    /// `monitor_interval` (one missed poll).
    pub fn rule_options(&self) -> server_core::Options {
        use server_core::Options;
        self.options
            .with_create_grace(Options::grace_for_timeout(self.cloud_timeout))
            .with_listed_view_max_age(Options::listed_view_max_age_for_interval(self.monitor_interval))
    }
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            namespace: None,
            options: server_core::Options::default(),
            yield_interval: Self::DEFAULT_YIELD_INTERVAL,
            monitor_interval: Self::DEFAULT_MONITOR_INTERVAL,
            resync_interval: Some(Duration::from_secs(10 * 60 * 60)),
            watch_retry_interval: Duration::from_secs(1),
            watch_page_size: Self::DEFAULT_WATCH_PAGE_SIZE,
            server_watch_page_size: Self::DEFAULT_SERVER_WATCH_PAGE_SIZE,
            cloud_timeout: Duration::from_secs(60),
            concurrency: Self::DEFAULT_CONCURRENCY,
            reference_patch: crate::ReferencePatch::default(),
            reporting_instance: None,
            region_namespace: None,
            leader_election: None,
            drain_timeout: Self::DEFAULT_DRAIN_TIMEOUT,
            stall_timeout: Self::DEFAULT_STALL_TIMEOUT,
        }
    }
}
