//! Prometheus metrics of the operator, fed by server-kube's `Metrics` hooks.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use server_core::reconcile::{EventReason, LiveRead};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageLabel {
    stage: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabel {
    action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReadLabel {
    how: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabel {
    phase: String,
}

/// `outcome` of `reconciles_total`: `server_core::Outcome::label`'s values,
/// and `failed` for a pass whose facts could not be gathered.
const RECONCILE_OUTCOMES: &[&str] = &["done", "yield", "terminal", "error", "failed"];

/// `stage` of `provider_create_retries_total`.
const RETRY_STAGES: [&str; 3] = ["started", "ready", "exhausted"];

/// The operator's metrics, registered once in a registry served at `/metrics`.
#[derive(Debug)]
pub(crate) struct OperatorMetrics {
    reconciles: Family<OutcomeLabel, Counter>,
    reconcile_duration: Histogram,
    retries: Family<StageLabel, Counter>,
    events: Family<ReasonLabel, Counter>,
    action_failures: Family<ActionLabel, Counter>,
    provider_reads: Family<ReadLabel, Counter>,
    monitor_poll_duration: Histogram,
    monitor_patches: Counter,
    monitor_group_failures: Counter,
    monitor_interval: Gauge<f64, AtomicU64>,
    keystone_login_failure_streaks: Counter,
    servers_by_phase: Family<PhaseLabel, Gauge>,
    leader: Gauge,
    /// Phases last reported, so a phase that empties drops to zero.
    known_phases: Mutex<Vec<String>>,
}

impl OperatorMetrics {
    /// Registers every family with a sample from the start: the label values
    /// known in advance at zero, so a rule sees the first increase of a
    /// counter and needs no `absent()` before it. `monitor_interval` is the
    /// `--monitor-interval` the monitor polls at (none: it does not run).
    pub(crate) fn register(registry: &mut Registry, monitor_interval: Option<Duration>) -> Self {
        let metrics = OperatorMetrics {
            reconciles: Family::default(),
            reconcile_duration: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            retries: Family::default(),
            events: Family::default(),
            action_failures: Family::default(),
            provider_reads: Family::default(),
            monitor_poll_duration: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            monitor_patches: Counter::default(),
            monitor_group_failures: Counter::default(),
            monitor_interval: Gauge::default(),
            keystone_login_failure_streaks: Counter::default(),
            servers_by_phase: Family::default(),
            leader: Gauge::default(),
            known_phases: Mutex::new(Vec::new()),
        };
        for outcome in RECONCILE_OUTCOMES {
            drop(metrics.reconciles.get_or_create(&OutcomeLabel { outcome: (*outcome).to_owned() }));
        }
        for stage in RETRY_STAGES {
            drop(metrics.retries.get_or_create(&StageLabel { stage }));
        }
        for reason in EventReason::ALL {
            drop(metrics.events.get_or_create(&ReasonLabel { reason: reason.as_str() }));
        }
        // How a pass came by the provider's view: the two the executor names
        // and every reason the core gives for a live read.
        let reads = ["listed", "unlisted"].into_iter().chain(LiveRead::ALL.map(LiveRead::label));
        for how in reads {
            drop(metrics.provider_reads.get_or_create(&ReadLabel { how: how.to_owned() }));
        }
        // Every phase the CRD allows, and "None", at 0 until the first poll.
        for phase in ["Pending", "Queued", "Building", "Running", "Stopping", "Stopped", "None"] {
            drop(metrics.servers_by_phase.get_or_create(&PhaseLabel { phase: phase.to_owned() }));
        }
        metrics.monitor_interval.set(monitor_interval.map_or(0.0, |interval| interval.as_secs_f64()));
        let sub = registry.sub_registry_with_prefix("server_controller");
        sub.register("reconciles", "Reconcile passes by outcome", metrics.reconciles.clone());
        sub.register("reconcile_duration_seconds", "Duration of a reconcile pass", metrics.reconcile_duration.clone());
        sub.register(
            "provider_create_retries",
            "Provider create retries by stage (started, ready, exhausted)",
            metrics.retries.clone(),
        );
        sub.register("events", "Kubernetes Events emitted by reason", metrics.events.clone());
        sub.register("action_failures", "Failed actions of a decision by kind", metrics.action_failures.clone());
        sub.register(
            "provider_reads",
            "How passes came by the provider's view: listed (the monitor's latest list was enough), unlisted (none \
             held), or why a live read was needed",
            metrics.provider_reads.clone(),
        );
        sub.register(
            "monitor_poll_duration_seconds",
            "Duration of one monitor poll of every Server",
            metrics.monitor_poll_duration.clone(),
        );
        sub.register("monitor_status_patches", "Status patches sent by the monitor", metrics.monitor_patches.clone());
        sub.register(
            "monitor_group_failures",
            "Monitor polls of a (region, identity) group whose cloud could not be asked",
            metrics.monitor_group_failures.clone(),
        );
        sub.register(
            "monitor_interval_seconds",
            "The interval the monitor polls at (--monitor-interval; 0 when the monitor is off)",
            metrics.monitor_interval.clone(),
        );
        sub.register(
            "keystone_login_failure_streaks",
            "Streaks of logins Keystone refused for one credential (one per streak, not per attempt)",
            metrics.keystone_login_failure_streaks.clone(),
        );
        sub.register("servers", "Live Servers by phase, as of the last monitor poll", metrics.servers_by_phase.clone());
        sub.register(
            "leader",
            "1 while this replica holds the leader lease and may act (always 1 without leader election)",
            metrics.leader.clone(),
        );
        metrics
    }

    /// What the OpenStack adapter calls when a credential's logins start
    /// being refused.
    pub(crate) fn login_failure_hook(&self) -> server_openstack::FailureStreakHook {
        let counter = self.keystone_login_failure_streaks.clone();
        std::sync::Arc::new(move || {
            counter.inc();
        })
    }

    /// Keeps the `leader` gauge following the fence (sampled: the fence
    /// closes by the clock, not by an event).
    pub(crate) fn watch_leadership(&self, fence: server_kube::Fence) {
        let gauge = self.leader.clone();
        tokio::spawn(async move {
            loop {
                gauge.set(i64::from(fence.holds()));
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
    }
}

impl server_kube::Metrics for OperatorMetrics {
    fn reconcile_finished(&self, outcome: &str, duration: Duration) {
        self.reconciles.get_or_create(&OutcomeLabel { outcome: outcome.to_owned() }).inc();
        self.reconcile_duration.observe(duration.as_secs_f64());
    }

    fn action_failed(&self, action: &str) {
        self.action_failures.get_or_create(&ActionLabel { action: action.to_owned() }).inc();
    }

    fn event_emitted(&self, reason: EventReason) {
        self.events.get_or_create(&ReasonLabel { reason: reason.as_str() }).inc();
        let stage = match reason {
            EventReason::ProviderCreateRetrying => Some(RETRY_STAGES[0]),
            EventReason::ProviderCreateRetryReady => Some(RETRY_STAGES[1]),
            EventReason::ProviderCreateFailed => Some(RETRY_STAGES[2]),
            _ => None,
        };
        if let Some(stage) = stage {
            self.retries.get_or_create(&StageLabel { stage }).inc();
        }
    }

    fn provider_read(&self, how: &str) {
        self.provider_reads.get_or_create(&ReadLabel { how: how.to_owned() }).inc();
    }

    fn monitor_poll_finished(&self, duration: Duration, patched: usize) {
        self.monitor_poll_duration.observe(duration.as_secs_f64());
        self.monitor_patches.inc_by(patched as u64);
    }

    fn monitor_group_failed(&self, _region: &str) {
        self.monitor_group_failures.inc();
    }

    fn servers_by_phase(&self, counts: &BTreeMap<String, usize>) {
        let Ok(mut known) = self.known_phases.lock() else { return };
        for phase in known.iter().filter(|p| !counts.contains_key(*p)) {
            self.servers_by_phase.get_or_create(&PhaseLabel { phase: phase.clone() }).set(0);
        }
        for (phase, count) in counts {
            let label = PhaseLabel { phase: if phase.is_empty() { "None".into() } else { phase.clone() } };
            self.servers_by_phase.get_or_create(&label).set(i64::try_from(*count).unwrap_or(i64::MAX));
        }
        *known = counts.keys().cloned().collect();
    }
}

#[cfg(test)]
mod tests {
    use server_kube::Metrics as _;

    use super::*;

    #[test]
    fn known_label_values_are_shown_at_zero_from_the_start() {
        let mut registry = Registry::default();
        let _metrics = OperatorMetrics::register(&mut registry, Some(Duration::from_secs(30)));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap_or_default();
        for outcome in RECONCILE_OUTCOMES {
            assert!(
                text.contains(&format!("server_controller_reconciles_total{{outcome=\"{outcome}\"}} 0\n")),
                "{text}"
            );
        }
        for stage in RETRY_STAGES {
            assert!(
                text.contains(&format!("server_controller_provider_create_retries_total{{stage=\"{stage}\"}} 0\n"))
            );
        }
        for reason in EventReason::ALL {
            let reason = reason.as_str();
            assert!(text.contains(&format!("server_controller_events_total{{reason=\"{reason}\"}} 0\n")), "{text}");
        }
        assert!(text.contains("server_controller_monitor_interval_seconds 30.0\n"), "{text}");
    }

    #[test]
    fn retries_are_counted_by_stage_and_rendered() {
        let mut registry = Registry::default();
        let metrics = OperatorMetrics::register(&mut registry, None);
        metrics.event_emitted(EventReason::ProviderCreateRetrying);
        metrics.event_emitted(EventReason::ProviderCreateRetrying);
        metrics.event_emitted(EventReason::ProviderCreateFailed);
        metrics.reconcile_finished("done", Duration::from_millis(3));
        metrics.servers_by_phase(&BTreeMap::from([("Running".to_owned(), 4)]));
        metrics.provider_read("listed");
        metrics.provider_read("listed");
        metrics.provider_read("changes_the_provider");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap_or_default();
        assert!(text.contains("server_controller_provider_create_retries_total{stage=\"started\"} 2"), "{text}");
        assert!(text.contains("server_controller_provider_create_retries_total{stage=\"exhausted\"} 1"), "{text}");
        assert!(text.contains("server_controller_reconciles_total{outcome=\"done\"} 1"), "{text}");
        assert!(text.contains("server_controller_servers{phase=\"Running\"} 4"), "{text}");
        assert!(text.contains("server_controller_provider_reads_total{how=\"listed\"} 2"), "{text}");
        assert!(text.contains("server_controller_provider_reads_total{how=\"changes_the_provider\"} 1"), "{text}");
    }
}
