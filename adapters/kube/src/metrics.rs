//! Metrics hooks: the adapter reports, the app counts (e.g. with
//! prometheus-client). Every method has a no-op default.

use std::collections::BTreeMap;
use std::time::Duration;

use server_core::model::ResourceKind;
use server_core::observations::FirstLaunch;
use server_core::reconcile::EventReason;

/// The labels the Go controller's server metrics carry: the Server's region
/// (its label, and the Region's `unikorn-cloud.org/name` label when
/// `--region-namespace` is given, else empty) and flavor (`spec.flavorID`,
/// and the name Nova records for it, empty when it records none).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerLabels {
    pub region_id: String,
    pub region_name: String,
    pub flavor_id: String,
    pub flavor_name: String,
}

/// One series of the servers-by-state count: the state
/// (`server_core::observations::state_label`) and the Server's labels.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerStateKey {
    pub state: &'static str,
    pub labels: ServerLabels,
}

/// What the controller and the monitor report. Implementations must be cheap
/// and must not block: they are called inline.
pub trait Metrics: Send + Sync {
    /// One reconcile pass finished with this outcome (`done`, `yield`,
    /// `terminal`, `error`, or `failed` when facts could not be gathered).
    fn reconcile_finished(&self, outcome: &str, duration: Duration) {
        let _ = (outcome, duration);
    }

    /// An action of a decision failed (`AddReference`, `WriteStatus`, ...).
    fn action_failed(&self, action: &str) {
        let _ = action;
    }

    /// An Event was emitted. Retries started, ready and exhausted are
    /// `ProviderCreateRetrying`, `ProviderCreateRetryReady` and `ProviderCreateFailed`.
    fn event_emitted(&self, reason: EventReason) {
        let _ = reason;
    }

    /// The reference writer wrote one batch of `changes` reference changes
    /// to an object of `kind`, after `retries` lost races (each retried
    /// against a fresh read).
    fn reference_batch_written(&self, kind: ResourceKind, changes: usize, retries: usize) {
        let _ = (kind, changes, retries);
    }

    /// How a pass came by the provider's view: `listed` (the monitor's
    /// latest list, or a create answer, was enough), `unlisted` (no list
    /// held: read live), or why the core wanted a live read instead of the
    /// listed view (`LiveRead::label`, e.g. `changes_the_provider`).
    fn provider_read(&self, how: &str) {
        let _ = how;
    }

    /// One monitor poll finished: its duration and how many status patches it sent.
    fn monitor_poll_finished(&self, duration: Duration, patched: usize) {
        let _ = (duration, patched);
    }

    /// The monitor could not ask one (region, identity) group's cloud.
    fn monitor_group_failed(&self, region: &str) {
        let _ = region;
    }

    /// Live Servers by phase (`""` for none yet), as of the last monitor poll.
    fn servers_by_phase(&self, counts: &BTreeMap<String, usize>) {
        let _ = counts;
    }

    /// Servers by state, region and flavor, as of the last monitor poll:
    /// those of the (region, identity) groups the poll listed that the
    /// provider has (as the Go controller counts them: a Server the poll
    /// could not check is left out, never shown in a made-up state).
    fn servers_by_state(&self, counts: &BTreeMap<ServerStateKey, usize>) {
        let _ = counts;
    }

    /// A Server's first launch (`server_core::observations::first_launch`),
    /// reported once: on the monitor's status write that recorded it, once
    /// the API server accepted it.
    fn server_launched(&self, labels: &ServerLabels, launch: FirstLaunch) {
        let _ = (labels, launch);
    }
}

/// Counts nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoMetrics;

impl Metrics for NoMetrics {}
