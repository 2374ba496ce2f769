//! What a simulation run is made of: size, seed, the rules' options, the fault
//! mix on both sides, and the timing of the controller and the user.

use server_simcloud::{CloudConfig, FateMix};

use crate::ha::HaConfig;

/// One simulation run. `SimConfig::new(servers, seed)` gives the default mix.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    pub servers: usize,
    pub seed: u64,
    /// `provider-create-max-attempts` for the reconcile rules.
    pub max_attempts: i32,
    /// Headline fault rate: the share of servers with a faulty cloud fate;
    /// every other fault probability scales with it.
    pub fault_rate: f64,
    pub cloud: CloudConfig,
    pub kube: KubeFaults,
    /// The controller replicas, their Lease and their troubles.
    pub ha: HaConfig,
    pub timing: SimTiming,
    /// Run twice and compare the trace step by step (invariant 9).
    pub replay_check: bool,
    /// Violations kept in full in the report (all are counted).
    pub max_reported_violations: usize,
    /// Index of a Server whose every step is logged in the report.
    pub explain: Option<usize>,
    /// Threads to run shards on; 0 means one per available core. The result
    /// is the same for any value.
    pub threads: usize,
    /// Servers per shard (rounded up to whole tenants). Part of what a seed
    /// replays: the same seed with another shard size is another run.
    pub shard_size: usize,
    /// When the wake filter decides the wakes of a relist. Production:
    /// [`RelistWakes::AtInitDone`]; a test switches to the old rule to see
    /// the checker catch it.
    pub relist_wakes: RelistWakes,
}

/// When the wake filter (adapters/kube/src/wake.rs) decides the wakes of a
/// relist whose pages arrive with API round trips between them, while the
/// reflector's store keeps the copies from before the relist until its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelistWakes {
    /// Production: once the last page is in (`InitDone`), against the
    /// Servers as seen before the relist, when the store holds the relisted
    /// copies.
    AtInitDone,
    /// The old rule (for a test): each relisted Server as its page arrives,
    /// remembered as seen at once, so a pass it triggers reads the store's
    /// copy from before the relist, or finds none for a new Server.
    PerPage,
}

impl SimConfig {
    /// Small enough to stay cache-friendly and to spread over threads.
    pub const DEFAULT_SHARD_SIZE: usize = 10_000;

    pub fn new(servers: usize, seed: u64) -> Self {
        SimConfig::with_fault_rate(servers, seed, FateMix::DEFAULT_FAULT_RATE)
    }

    pub fn with_fault_rate(servers: usize, seed: u64, fault_rate: f64) -> Self {
        let fault_rate = if fault_rate.is_finite() { fault_rate.clamp(0.0, 1.0) } else { 0.0 };
        SimConfig {
            servers,
            seed,
            max_attempts: server_core::Options::DEFAULT_MAX_ATTEMPTS,
            fault_rate,
            cloud: CloudConfig::with_fault_rate(seed, fault_rate),
            kube: KubeFaults::with_fault_rate(fault_rate),
            ha: HaConfig::with_fault_rate(fault_rate),
            timing: SimTiming::default(),
            replay_check: false,
            max_reported_violations: 100,
            explain: None,
            threads: 0,
            shard_size: SimConfig::DEFAULT_SHARD_SIZE,
            relist_wakes: RelistWakes::AtInitDone,
        }
    }
}

/// Faults on the Kubernetes side and what the user and operator do.
/// Probabilities are per write (writes), per watch delivery (stale watch), or
/// per Server (user and operator actions).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KubeFaults {
    /// Another writer changes the object between our read and our write: 409.
    pub write_conflict: f64,
    /// The write fails (5xx) and is not applied.
    pub write_dropped: f64,
    /// The write is applied but its answer is lost: the caller sees an error.
    pub write_lost_answer: f64,
    /// A watch delivery is held back: the controller's cache lags behind the
    /// API server (monotonically) until it catches up.
    pub stale_watch: f64,
    /// Crashes of the leading controller replica during the run (in-memory
    /// state lost; it comes back as a new process after the downtime).
    pub restarts: u32,
    /// The provider goes down with the controller's first crash and stays
    /// unreachable this long (ms) after a replica leads again, so that
    /// leader's first passes over parked Servers read no provider view.
    pub provider_outage: u64,
    /// Share of Servers the user deletes at some point.
    pub user_delete: f64,
    /// Share of Servers whose spec the user edits (flavor and network swap).
    pub spec_edit: f64,
    /// Share of quota-refused Servers whose spec the user fixes.
    pub refused_spec_fix: f64,
    /// Share of Servers created with user data cloud-init would refuse (a
    /// script without its `#!` line): the core refuses it before any create
    /// (`UserDataErrorReason::UnknownPayloadType`). Half of them the user
    /// fixes later (a spec edit writes the script whole).
    pub refused_user_data: f64,
    /// Share of parked Servers an operator resets (providerCreateFailures).
    pub operator_reset: f64,
    /// Share of those resets made with the retry annotation (`kubectl
    /// annotate ... server-controller.unikorn-cloud.org/retry=now`) rather
    /// than by patching the status.
    pub retry_by_annotation: f64,
    /// Share of quota-refused Servers whose spec the user leaves as it is,
    /// for which an operator requests a retry (the retry annotation).
    pub refused_retry: f64,
    /// Share of Servers whose provider server another controller made
    /// before this one took the region over (the Go controller's): the
    /// port adopts it.
    pub adoptable: f64,
    /// Share of those still building when they are taken over, that vanish
    /// before they boot (the Server must get a server of its own).
    pub adoptable_vanish: f64,
    /// Share of Servers the user pauses (`spec.pause`) a while, and unpauses.
    pub pause: f64,
    /// Times each controller replica's Server watch is cut and relisted
    /// during the run (a dropped connection, then 410 Gone): the first while
    /// Servers arrive, the others later.
    pub relists: u32,
    /// How long (ms) a cut watch stays down before its relist starts (the
    /// watcher's 1 s retry interval, then a resumed watch refused with 410
    /// Gone): what changes meanwhile reaches the cache only through the relist.
    pub watch_gap: u64,
    /// Servers per page of a relist (`limit`: the controller's Server watch
    /// asks for 100, server-kube's `DEFAULT_SERVER_WATCH_PAGE_SIZE`). Pages
    /// are one API round trip apart.
    pub list_page_size: usize,
}

impl KubeFaults {
    pub fn with_fault_rate(rate: f64) -> Self {
        KubeFaults {
            write_conflict: rate * 0.1,
            write_dropped: rate * 0.03,
            write_lost_answer: rate * 0.03,
            stale_watch: rate * 0.1,
            restarts: if rate > 0.0 { 1 } else { 0 },
            provider_outage: if rate > 0.0 { 5_000 } else { 0 },
            user_delete: 0.2,
            spec_edit: 0.05,
            refused_spec_fix: 0.5,
            refused_user_data: if rate > 0.0 { 0.02 } else { 0.0 },
            operator_reset: 0.5,
            retry_by_annotation: 0.5,
            refused_retry: 0.5,
            adoptable: 0.02,
            adoptable_vanish: 0.25,
            pause: 0.03,
            relists: if rate > 0.0 { 2 } else { 0 },
            watch_gap: 2_000,
            list_page_size: 100,
        }
    }
}

/// Virtual-time knobs, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimTiming {
    /// Servers are created uniformly over this window.
    pub arrival_window: u64,
    /// The run stops here.
    pub horizon: u64,
    /// Fixed requeue after Yield or Error (DESIGN §6: 10 s).
    pub requeue: u64,
    /// Monitor poll interval (per identity).
    pub monitor_interval: u64,
    /// From a watch event to the pass it triggers.
    pub wake_delay: u64,
    /// Longest a held-back watch delivery lags.
    pub max_watch_lag: u64,
    /// How long a crashed controller replica is down.
    pub restart_downtime: u64,
    /// Periodic resync of every Server, if any.
    pub resync_interval: Option<u64>,
}

impl SimTiming {
    /// The controller's cloud request timeout in this simulation: what the
    /// grace of an issued create is a multiple of, as in production.
    pub const CLOUD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

    pub fn create_grace(&self) -> std::time::Duration {
        server_core::Options::grace_for_timeout(Self::CLOUD_TIMEOUT)
    }
}

impl Default for SimTiming {
    fn default() -> Self {
        SimTiming {
            arrival_window: 60_000,
            horizon: 15 * 60_000,
            requeue: 10_000,
            monitor_interval: 30_000,
            wake_delay: 100,
            max_watch_lag: 5_000,
            restart_downtime: 10_000,
            resync_interval: None,
        }
    }
}
