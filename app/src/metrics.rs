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
use server_core::observations::FirstLaunch;
use server_core::reconcile::{EventReason, LiveRead};
use server_kube::{ServerLabels, ServerStateKey};

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

/// The labels of the Go controller's `unikorn_region_server_*` durations.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabelSet {
    region_id: String,
    region_name: String,
    flavor_id: String,
    flavor_name: String,
}

impl From<&ServerLabels> for ServerLabelSet {
    fn from(labels: &ServerLabels) -> Self {
        ServerLabelSet {
            region_id: labels.region_id.clone(),
            region_name: labels.region_name.clone(),
            flavor_id: labels.flavor_id.clone(),
            flavor_name: labels.flavor_name.clone(),
        }
    }
}

/// The labels of `unikorn_region_server_state`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerStateLabelSet {
    state: &'static str,
    region_id: String,
    region_name: String,
    flavor_id: String,
    flavor_name: String,
}

impl From<&ServerStateKey> for ServerStateLabelSet {
    fn from(key: &ServerStateKey) -> Self {
        let ServerLabelSet { region_id, region_name, flavor_id, flavor_name } = (&key.labels).into();
        ServerStateLabelSet { state: key.state, region_id, region_name, flavor_id, flavor_name }
    }
}

/// The buckets of the Go controller's histograms (pkg/monitor/health/server,
/// metrics.go), so its users' dashboards read the same series.
const PROVISION_BUCKETS: [f64; 10] = [5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0];
const SCHEDULING_BUCKETS: [f64; 7] = [1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];

fn provision_histogram() -> Histogram {
    Histogram::new(PROVISION_BUCKETS)
}

fn scheduling_histogram() -> Histogram {
    Histogram::new(SCHEDULING_BUCKETS)
}

type DurationFamily = Family<ServerLabelSet, Histogram, fn() -> Histogram>;

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
    server_state: Family<ServerStateLabelSet, Gauge>,
    /// Series of `server_state` last reported, so one that empties goes.
    known_states: Mutex<Vec<ServerStateLabelSet>>,
    provision_duration: DurationFamily,
    scheduling_duration: DurationFamily,
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
            server_state: Family::default(),
            known_states: Mutex::new(Vec::new()),
            provision_duration: Family::new_with_constructor(provision_histogram),
            scheduling_duration: Family::new_with_constructor(scheduling_histogram),
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
        // The Go controller's server metrics, under its names (no prefix):
        // dashboards and alerts written for it read these unchanged.
        registry.register(
            "unikorn_region_server_state",
            "Number of servers currently in each lifecycle state, per region and flavor",
            metrics.server_state.clone(),
        );
        registry.register(
            "unikorn_region_server_provision_duration_seconds",
            "Duration from the Server's creation to Nova booting it (OS-SRV-USG:launched_at), observed once per \
             Server when launchedAt is first recorded",
            metrics.provision_duration.clone(),
        );
        registry.register(
            "unikorn_region_server_scheduling_duration_seconds",
            "Duration from the Server's creation to Nova creating the server (created), observed once per Server \
             with its provision duration",
            metrics.scheduling_duration.clone(),
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

    fn servers_by_state(&self, counts: &BTreeMap<ServerStateKey, usize>) {
        let Ok(mut known) = self.known_states.lock() else { return };
        let current: Vec<ServerStateLabelSet> = counts.keys().map(ServerStateLabelSet::from).collect();
        for gone in known.iter().filter(|series| !current.contains(series)) {
            self.server_state.remove(gone);
        }
        for (series, count) in current.iter().zip(counts.values()) {
            self.server_state.get_or_create(series).set(i64::try_from(*count).unwrap_or(i64::MAX));
        }
        *known = current;
    }

    fn server_launched(&self, labels: &ServerLabels, launch: FirstLaunch) {
        let labels = ServerLabelSet::from(labels);
        if let Some(provision) = launch.provision {
            self.provision_duration.get_or_create(&labels).observe(provision.as_secs_f64());
        }
        if let Some(scheduling) = launch.scheduling {
            self.scheduling_duration.get_or_create(&labels).observe(scheduling.as_secs_f64());
        }
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

/// The Go controller's server metrics, scraped from `/metrics` of the
/// operator running Servers to their boot on both cloud paths.
#[cfg(all(test, feature = "sim"))]
mod scraped {
    use std::sync::Arc;

    use serde_json::json;
    use server_core::model::NAME_LABEL;
    use server_e2e::cloud::Fate;
    use server_e2e::*;
    use server_kube::ControllerConfig;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::http::Endpoints;

    const OTHER_FLAVOR: &str = "3f9a2c71-6d4e-4b8a-9c15-7e2d0b8f4a92";

    /// `/metrics` served on a loopback port for `registry` (the probes'
    /// watchdog from an operator that is not run: only `/metrics` is read).
    async fn serve(env: &Env, registry: Registry) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        let idle = server_kube::Operator::new(env.operator_client().clone(), env.read_only_clouds(), test_config());
        let endpoints = Endpoints::new(registry, idle.health());
        tokio::spawn(async move { endpoints.serve(listener, std::future::pending()).await });
        addr
    }

    async fn scrape(addr: std::net::SocketAddr) -> String {
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("/metrics answers");
        stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await.expect("the request is sent");
        let mut response = String::new();
        stream.read_to_string(&mut response).await.expect("the response is read");
        assert!(response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200"), "{response}");
        response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default()
    }

    /// The value of the one sample of `series` whose labels include `labels`.
    fn sample(body: &str, series: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut found = body
            .lines()
            .filter(|line| line.starts_with(&format!("{series}{{")))
            .filter(|line| labels.iter().all(|(key, value)| line.contains(&format!("{key}=\"{value}\""))));
        let line = found.next()?;
        assert!(found.next().is_none(), "several {series} samples match {labels:?}:\n{body}");
        line.rsplit(' ').next()?.parse().ok()
    }

    async fn launches_and_states_are_counted_once_per_server(kind: CloudKind) {
        // The Region's display name on SimKube; on kube-apiserver the
        // operator runs under the base RBAC, which reads no Region (the
        // overlay grants that in the Regions' namespace), and the name is empty.
        let named = api_server() == ApiServer::SimKube;
        let region_namespace = named.then(|| NAMESPACE.to_owned());
        let mut env = Env::with_config(kind, 31, ControllerConfig { region_namespace, ..test_config() }).await;
        env.seed(
            "regions",
            REGION,
            json!({
                "provider": "openstack",
                "openstack": {
                    "endpoint": "https://keystone.example.com/v3",
                    "serviceAccountSecret": { "namespace": NAMESPACE, "name": "region-1-credentials" },
                },
            }),
        );
        env.edit("regions", REGION, |region| region["metadata"]["labels"] = json!({ NAME_LABEL: "region-one" }));
        let mut other = Env::spec();
        other["flavorID"] = json!(OTHER_FLAVOR);
        env.create_server("a", fast(Fate::clean()), Env::spec());
        env.create_server("b", fast(Fate::clean()), Env::spec());
        env.create_server("c", fast(Fate::clean()), other);
        let mut registry = Registry::default();
        let metrics = Arc::new(OperatorMetrics::register(&mut registry, Some(test_config().monitor_interval)));
        let addr = serve(&env, registry).await;
        env.start_with_metrics(Loops::Both, metrics);
        for name in ["a", "b", "c"] {
            env.wait_server(name, "Running", |s| phase(s) == "Running").await;
        }

        // Nova's embedded flavor names it; SimCloud names none. The
        // OpenStack simulator knows no flavor here and gives its ID, as
        // Nova gives the name of the flavor the server was created with.
        let flavor_name = |flavor: &'static str| if kind == CloudKind::OpenStack { flavor } else { "" };
        let region_name = if named { "region-one" } else { "" };
        let of = |flavor: &'static str| {
            [
                ("region_id", REGION),
                ("region_name", region_name),
                ("flavor_id", flavor),
                ("flavor_name", flavor_name(flavor)),
            ]
        };
        let expected = [(FLAVOR, 2.0), (OTHER_FLAVOR, 1.0)];
        let deadline = tokio::time::Instant::now() + PATIENCE;
        let mut body = scrape(addr).await;
        let counted = |body: &str| {
            expected.iter().all(|(flavor, servers)| {
                let mut running = of(flavor).to_vec();
                running.push(("state", "running"));
                sample(body, "unikorn_region_server_state", &running) == Some(*servers)
                    && sample(body, "unikorn_region_server_provision_duration_seconds_count", &of(flavor))
                        == Some(*servers)
            })
        };
        while !counted(&body) {
            assert!(tokio::time::Instant::now() < deadline, "the servers were never counted:\n{body}");
            tokio::time::sleep(Duration::from_millis(50)).await;
            body = scrape(addr).await;
        }

        // Many polls later, and after writes of the monitor to each Server
        // (its phase, set back by hand, projected again): the durations
        // were observed once per Server.
        for name in ["a", "b", "c"] {
            env.patch_status(name, json!({ "phase": "Building" })).await;
        }
        for name in ["a", "b", "c"] {
            env.wait_server(name, "Running again", |s| phase(s) == "Running").await;
        }
        env.idle(20).await;
        let body = scrape(addr).await;
        for (flavor, servers) in expected {
            for histogram in ["provision", "scheduling"] {
                let family = format!("unikorn_region_server_{histogram}_duration_seconds");
                let count = sample(&body, &format!("{family}_count"), &of(flavor));
                assert_eq!(count, Some(servers), "{family} of {flavor}:\n{body}");
                // Each booted within seconds: all in the 5 s bucket.
                let mut first = of(flavor).to_vec();
                first.push(("le", "5.0"));
                assert_eq!(sample(&body, &format!("{family}_bucket"), &first), Some(servers), "{body}");
            }
            let mut running = of(flavor).to_vec();
            running.push(("state", "running"));
            assert_eq!(sample(&body, "unikorn_region_server_state", &running), Some(servers), "{body}");
        }
        // The Go controller's bucket bounds.
        for (family, top, beyond) in [("provision", "3600.0", "7200.0"), ("scheduling", "300.0", "600.0")] {
            let family = format!("unikorn_region_server_{family}_duration_seconds_bucket");
            let mut top_bucket = of(FLAVOR).to_vec();
            top_bucket.push(("le", top));
            assert!(sample(&body, &family, &top_bucket).is_some(), "{family} has no le={top}:\n{body}");
            let over = body.lines().any(|line| line.starts_with(&family) && line.contains(&format!("le=\"{beyond}\"")));
            assert!(!over, "{family} has a bucket le={beyond}:\n{body}");
        }
        env.stop().await;
    }

    server_e2e::cloud_scenarios!(launches_and_states_are_counted_once_per_server);
}
