//! `run`: the operator. Connects with the usual kubeconfig or in-cluster
//! config, runs the controller and the monitor, serves metrics and probes,
//! and on SIGTERM stops taking work, lets in-flight passes finish, exits 0.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use std::collections::BTreeMap;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Secret;
use prometheus_client::registry::Registry;
use server_kube::{CloudRegistry, ControllerConfig, LeaseConfig, Operator, ProviderKind, RegionCloud};
use server_openstack::{OpenStackCloud, OpenStackConfig};
use tokio::sync::watch;

use crate::http::Endpoints;
use crate::metrics::OperatorMetrics;
use crate::telemetry::{self, LogFormat};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The kubeconfig to connect with (default: $KUBECONFIG, then
    /// ~/.kube/config, then the in-cluster service account).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<std::path::PathBuf>,

    /// Watch Servers in this namespace only (default: all namespaces).
    #[arg(long, env = "SERVER_CONTROLLER_NAMESPACE")]
    namespace: Option<String>,

    /// Total provider create attempts before a Server is parked (1 to 100).
    #[arg(
        long,
        env = "SERVER_CONTROLLER_PROVIDER_CREATE_MAX_ATTEMPTS",
        default_value_t = 3,
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i32).range(1..=MAX_ATTEMPTS_BOUND)
    )]
    provider_create_max_attempts: i32,

    /// Fixed requeue interval after a pass yields or fails (e.g. 10s, 500ms).
    #[arg(long, env = "SERVER_CONTROLLER_YIELD_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    yield_interval: Duration,

    /// Interval of the monitor's provider poll; also the least time between
    /// two OpenStack server lists a pass asks for (whether a create whose
    /// answer was lost made a server is left to the next list).
    #[arg(long, env = "SERVER_CONTROLLER_MONITOR_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    monitor_interval: Duration,

    /// Reconcile passes running at once (different Servers; one Server never
    /// runs twice at once), 1 to 1024.
    #[arg(
        long,
        env = "SERVER_CONTROLLER_CONCURRENCY",
        default_value_t = ControllerConfig::DEFAULT_CONCURRENCY,
        value_parser = clap::value_parser!(u16).range(1..=1024)
    )]
    concurrency: u16,

    /// Each call to a region's cloud is abandoned after this long (1s to
    /// 10m). A create whose answer never came is not counted lost before ten
    /// times this: the cloud may still carry it out (DESIGN, "A create of
    /// unknown fate"). Keep each region's own `requestTimeout` at or under it.
    #[arg(
        long,
        env = "SERVER_CONTROLLER_CLOUD_TIMEOUT",
        default_value = "60s",
        value_parser = parse_cloud_timeout
    )]
    cloud_timeout: Duration,

    /// Do not run the monitor loop (the Servers' runtime status then goes stale).
    #[arg(long, env = "SERVER_CONTROLLER_NO_MONITOR")]
    no_monitor: bool,

    /// Read everything and act on nothing: each --monitor-interval, print
    /// per Server what this operator would do now, and the sums. No cloud
    /// write, no API write, no Lease, no probes port. For a migration: beside
    /// the Go controller on a converged region it must report no create and
    /// no delete.
    #[arg(long, env = "SERVER_CONTROLLER_SHADOW")]
    shadow: bool,

    /// With --shadow: one round, then exit: 0 when no provider server would
    /// be created or deleted, 3 when some would.
    #[arg(long, requires = "shadow")]
    shadow_once: bool,

    /// Read each region's Region resource (uni-region's, named by the region
    /// ID) from this namespace, usually the region controller's
    /// (`unikorn-region`), for its floating-IP network selector
    /// (`spec.openstack.network.externalNetworks.selector`); kept current by a
    /// watch. Needs list and watch on regions there. A region configuration's
    /// own `externalNetworks` overrides it.
    #[arg(long, env = "SERVER_CONTROLLER_REGION_NAMESPACE")]
    region_namespace: Option<String>,

    /// Act only while holding the leader Lease, so several replicas can run
    /// (`--leader-election=false` for a single replica that acts at once).
    #[arg(long, env = "SERVER_CONTROLLER_LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    leader_election: bool,

    /// Namespace of the leader Lease (default: POD_NAMESPACE, the in-cluster
    /// service account's namespace, or the kubeconfig's).
    #[arg(long, env = "SERVER_CONTROLLER_LEADER_ELECTION_NAMESPACE")]
    leader_election_namespace: Option<String>,

    /// Name of the leader Lease.
    #[arg(long, env = "SERVER_CONTROLLER_LEADER_ELECTION_ID", default_value = LeaseConfig::DEFAULT_NAME)]
    leader_election_id: String,

    /// How long followers wait, after they last saw the Lease renewed, before taking it (whole seconds).
    #[arg(long, env = "SERVER_CONTROLLER_LEADER_ELECTION_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    leader_election_lease_duration: Duration,

    /// How long the leader may fail to renew before it stops acting (shorter than the lease duration).
    #[arg(long, env = "SERVER_CONTROLLER_LEADER_ELECTION_RENEW_DEADLINE", default_value = "10s", value_parser = parse_duration)]
    leader_election_renew_deadline: Duration,

    /// Interval between attempts to acquire or renew the Lease.
    #[arg(long, env = "SERVER_CONTROLLER_LEADER_ELECTION_RETRY_PERIOD", default_value = "2s", value_parser = parse_duration)]
    leader_election_retry_period: Duration,

    /// After SIGTERM, how long in-flight passes may finish before they are
    /// dropped (keep it under the pod's terminationGracePeriodSeconds).
    #[arg(long, env = "SERVER_CONTROLLER_DRAIN_TIMEOUT", default_value = "20s", value_parser = parse_duration)]
    drain_timeout: Duration,

    /// /healthz fails when passes are in flight and none started or finished for this long.
    #[arg(long, env = "SERVER_CONTROLLER_STALL_TIMEOUT", default_value = "5m", value_parser = parse_duration)]
    stall_timeout: Duration,

    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, env = "SERVER_CONTROLLER_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,

    #[arg(long, env = "SERVER_CONTROLLER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,

    /// The kind of cloud started when no region flag gives one: `openstack`
    /// needs an --openstack-config or --openstack-secret; `sim` serves
    /// region-a from the in-process simulated cloud unless --sim-region names
    /// others. Each region's kind is the flag that registers it, so one
    /// operator can serve OpenStack and simulated regions side by side.
    #[arg(long, env = "SERVER_CONTROLLER_CLOUD", value_enum, default_value_t = CloudKind::Openstack)]
    cloud: CloudKind,

    /// A region the in-process simulated cloud serves (Region provider
    /// `simulated`). Repeat for each region; with --cloud sim and none
    /// given, region-a.
    #[cfg(feature = "sim")]
    #[arg(long = "sim-region", env = "SERVER_CONTROLLER_SIM_REGIONS", value_delimiter = ',')]
    sim_regions: Vec<String>,

    /// Seed of the simulated cloud (with --sim-region or --cloud sim).
    #[cfg(feature = "sim")]
    #[arg(long, env = "SERVER_CONTROLLER_SIM_SEED", default_value_t = 1)]
    sim_seed: u64,

    /// Share of the simulated cloud's servers given a faulty fate, and the
    /// scale of its call failures (0 to 1; 0: every server boots and no call
    /// fails).
    #[cfg(feature = "sim")]
    #[arg(long, env = "SERVER_CONTROLLER_SIM_FAULT_RATE", default_value_t = server_simcloud::FateMix::DEFAULT_FAULT_RATE, value_parser = parse_fault_rate)]
    sim_fault_rate: f64,

    /// How long the simulated cloud takes: `realistic` (builds in 20-60 s)
    /// or `fast` (seconds, for tests and playgrounds).
    #[cfg(feature = "sim")]
    #[arg(long, env = "SERVER_CONTROLLER_SIM_TIMING", value_enum, default_value_t = SimTiming::Realistic)]
    sim_timing: SimTiming,

    /// An OpenStack region: `REGION_ID=FILE`, the region label value and a
    /// JSON file of its endpoint configuration (auth URL, region name, ...).
    /// Repeat for each region.
    #[arg(long = "openstack-config", env = "SERVER_CONTROLLER_OPENSTACK_CONFIGS", value_delimiter = ',', value_parser = parse_region_source)]
    openstack_configs: Vec<(String, String)>,

    /// An OpenStack region from a Kubernetes Secret: `REGION_ID=NAMESPACE/NAME`,
    /// whose data keys are the configuration's fields. Repeat for each region.
    #[arg(long = "openstack-secret", env = "SERVER_CONTROLLER_OPENSTACK_SECRETS", value_delimiter = ',', value_parser = parse_region_source)]
    openstack_secrets: Vec<(String, String)>,
}

/// Parses `REGION_ID=SOURCE`.
pub(crate) fn parse_region_source(value: &str) -> Result<(String, String), String> {
    match value.split_once('=') {
        Some((region, source)) if !region.is_empty() && !source.is_empty() => Ok((region.into(), source.into())),
        _ => Err(format!("{value:?} is not REGION_ID=SOURCE")),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum CloudKind {
    /// server-simcloud's in-process cloud: for trying the operator without a cloud.
    /// It starts empty, so it refuses an API server whose Servers an operator
    /// already acted on (e.g. `demo --serve`'s). Only in builds with the `sim`
    /// feature, never in the production image.
    #[cfg(feature = "sim")]
    Sim,
    /// OpenStack (Keystone, Nova, Neutron).
    Openstack,
}

/// The bounds of `--cloud-timeout`: under a second no cloud answers a
/// create; over ten minutes a lost create would keep its Server waiting
/// (ten times this) for hours.
const CLOUD_TIMEOUT_BOUNDS: std::ops::RangeInclusive<Duration> = Duration::from_secs(1)..=Duration::from_secs(600);

fn parse_cloud_timeout(value: &str) -> Result<Duration, String> {
    let timeout = parse_duration(value)?;
    if CLOUD_TIMEOUT_BOUNDS.contains(&timeout) { Ok(timeout) } else { Err(format!("{value:?} is outside 1s to 10m")) }
}

/// Parses `500ms`, `10s`, `2m 30s`, ... (humantime); zero is refused.
pub(crate) fn parse_duration(value: &str) -> Result<Duration, String> {
    match humantime::parse_duration(value) {
        Ok(duration) if duration.is_zero() => Err(format!("{value:?} must be a positive duration")),
        Ok(duration) => Ok(duration),
        Err(error) => Err(format!("{value:?} is not a duration such as 10s or 500ms: {error}")),
    }
}

pub(crate) fn run(args: &Args) -> ExitCode {
    telemetry::init(args.log_format, "info,kube=warn,tower=warn,hyper=warn");
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    if args.shadow {
        return match runtime.block_on(shadow(args)) {
            Ok(code) => code,
            Err(error) => {
                eprintln!("error: {}", cause_once(&error));
                ExitCode::from(2)
            }
        };
    }
    match runtime.block_on(operate(args)) {
        Ok(()) => ExitCode::SUCCESS,
        // It never ran: said as a command-line tool says it, exit code 2.
        Err(Stopped::Starting(error)) => {
            eprintln!("error: {}", cause_once(&error));
            ExitCode::from(2)
        }
        Err(Stopped::Running(error)) => {
            tracing::error!(error = %cause_once(&error), "operator stopped");
            ExitCode::FAILURE
        }
    }
}

/// Why `run` ended with an error: it could not start, or it stopped.
#[derive(Debug)]
enum Stopped {
    Starting(anyhow::Error),
    Running(anyhow::Error),
}

/// The largest `--provider-create-max-attempts` accepted: far above any
/// sensible cap, far below where a counter could overflow.
pub(crate) const MAX_ATTEMPTS_BOUND: i64 = 100;

/// The error and its causes, each said once: libraries often repeat their
/// source's text in their own message, so a cause already contained in the
/// text before it is dropped.
pub(crate) fn cause_once(error: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if parts.last().is_some_and(|last| last.contains(&text)) {
            continue;
        }
        parts.push(text);
    }
    parts.join(": ")
}

fn controller_config(args: &Args, leader_election: Option<LeaseConfig>) -> ControllerConfig {
    ControllerConfig {
        namespace: args.namespace.clone(),
        options: server_core::Options::with_max_attempts(args.provider_create_max_attempts),
        yield_interval: args.yield_interval,
        monitor_interval: args.monitor_interval,
        cloud_timeout: args.cloud_timeout,
        concurrency: args.concurrency,
        reporting_instance: std::env::var("POD_NAME").ok(),
        region_namespace: args.region_namespace.clone(),
        leader_election,
        drain_timeout: args.drain_timeout,
        stall_timeout: args.stall_timeout,
        ..ControllerConfig::default()
    }
}

/// Where the in-cluster configuration names the pod's namespace.
const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// The leader Lease, or `None` with `--leader-election=false`. Refuses
/// timings under which two replicas could act at once.
fn lease_config(args: &Args, client: &kube::Client) -> anyhow::Result<Option<LeaseConfig>> {
    if !args.leader_election {
        return Ok(None);
    }
    let namespace = args
        .leader_election_namespace
        .clone()
        .or_else(|| std::env::var("POD_NAMESPACE").ok().filter(|n| !n.is_empty()))
        .or_else(|| std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE).ok().map(|n| n.trim().to_owned()))
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let lease = LeaseConfig {
        name: args.leader_election_id.clone(),
        lease_duration: args.leader_election_lease_duration,
        renew_deadline: args.leader_election_renew_deadline,
        retry_period: args.leader_election_retry_period,
        ..LeaseConfig::new(namespace, identity())
    };
    lease.validate().map_err(|e| anyhow::anyhow!("invalid leader election flags: {e}"))?;
    Ok(Some(lease))
}

/// This replica's name in the Lease: the pod name, else host and process.
fn identity() -> String {
    if let Some(pod) = std::env::var("POD_NAME").ok().filter(|p| !p.is_empty()) {
        return pod;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_owned()).unwrap_or_default();
    let host = if host.is_empty() { "server-controller".to_owned() } else { host };
    format!("{host}-{}", std::process::id())
}

/// Each region's cloud, of the kind its flag gives: OpenStack from
/// --openstack-config/--openstack-secret, simulated from --sim-region. A
/// region given twice is refused.
async fn clouds(args: &Args, client: &kube::Client, metrics: &OperatorMetrics) -> anyhow::Result<CloudRegistry> {
    let hook = Some(metrics.login_failure_hook());
    // Lookups that need a new Nova list leave it to the monitor's next poll.
    let gap = args.monitor_interval;
    let registry = openstack_clouds(
        &args.openstack_configs,
        &args.openstack_secrets,
        client,
        hook,
        gap,
        Some(args.cloud_timeout),
        Access::ReadWrite,
    )
    .await?;
    #[cfg(feature = "sim")]
    let registry = {
        let mut registry = registry.supporting(server_kube::ProviderKind::Simulated);
        let sim_regions = sim_regions(args);
        if !sim_regions.is_empty() {
            refuse_servers_made_elsewhere(client, args.namespace.as_deref(), &sim_regions).await?;
            let mut config = server_simcloud::CloudConfig::with_fault_rate(args.sim_seed, args.sim_fault_rate);
            config.mix.timing = match args.sim_timing {
                SimTiming::Realistic => server_simcloud::Timing::REALISTIC,
                SimTiming::Fast => server_simcloud::Timing::FAST,
            };
            let cloud = server_simcloud::SimCloud::new(config);
            for region in sim_regions {
                if registry.get(&region).is_some() {
                    anyhow::bail!(
                        "region {region} is given both as an OpenStack region and as --sim-region; give it once"
                    );
                }
                registry.insert(region, RegionCloud::simulated(cloud.port()));
            }
        }
        registry
    };
    if registry.regions().next().is_none() {
        anyhow::bail!(match args.cloud {
            CloudKind::Openstack => {
                "no region to serve: give at least one --openstack-config REGION_ID=FILE or --openstack-secret \
                 REGION_ID=NAMESPACE/NAME"
            }
            #[cfg(feature = "sim")]
            CloudKind::Sim => "no region to serve: give at least one --sim-region",
        });
    }
    Ok(registry)
}

/// The simulated regions: those given, else region-a with --cloud sim.
#[cfg(feature = "sim")]
fn sim_regions(args: &Args) -> Vec<String> {
    match (args.cloud, args.sim_regions.is_empty()) {
        (CloudKind::Sim, true) => vec![DEFAULT_SIM_REGION.to_owned()],
        _ => args.sim_regions.clone(),
    }
}

/// The region `--cloud sim` serves when no --sim-region is given.
#[cfg(feature = "sim")]
const DEFAULT_SIM_REGION: &str = "region-a";

/// The simulated cloud starts empty in this process: Servers of its regions
/// some operator already acted on (they carry its finalizer) have their
/// provider servers in another cloud — typically `demo --serve`'s, which
/// lives in the demo's process — and this operator would report every one of
/// them missing.
#[cfg(feature = "sim")]
async fn refuse_servers_made_elsewhere(
    client: &kube::Client,
    namespace: Option<&str>,
    sim_regions: &[String],
) -> anyhow::Result<()> {
    use kube::ResourceExt as _;
    let servers: kube::Api<server_kube::crd::Server> = match namespace {
        Some(namespace) => kube::Api::namespaced(client.clone(), namespace),
        None => kube::Api::all(client.clone()),
    };
    let listed = servers
        .list_metadata(&kube::api::ListParams::default())
        .await
        .context("cannot list Servers to check that the simulated cloud starts on an empty world")?;
    let acted_on = listed
        .items
        .iter()
        .filter(|server| {
            server.labels().get(server_core::model::REGION_LABEL).is_some_and(|region| sim_regions.contains(region))
        })
        .filter(|server| server.finalizers().iter().any(|f| f == server_core::model::SERVER_FINALIZER))
        .count();
    if acted_on > 0 {
        anyhow::bail!(
            "the simulated cloud starts empty in this process, but {acted_on} Server(s) of its regions already carry \
             the controller's finalizer: their provider servers are in another cloud (`demo --serve` keeps its cloud \
             in its own process), so this operator would report them missing. Point it at an API server without \
             them, or use the playground's own operator."
        );
    }
    Ok(())
}

/// One OpenStack cloud per region, from files or from Secrets, each with the
/// OpenStack identity source. Credentials are per identity
/// (OpenstackIdentity), never in this configuration. Lookups list Nova at
/// most once per `lookup_list_gap` (see `OpenStackCloud::with_lookup_list_gap`).
/// Whether a command's clouds may change anything: `run` acts; `explain`
/// and `run --shadow` only read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    ReadWrite,
    ReadOnly,
}

pub(crate) async fn openstack_clouds(
    configs: &[(String, String)],
    secrets: &[(String, String)],
    client: &kube::Client,
    login_failure_hook: Option<server_openstack::FailureStreakHook>,
    lookup_list_gap: Duration,
    cloud_timeout: Option<Duration>,
    access: Access,
) -> anyhow::Result<CloudRegistry> {
    let mut registry = CloudRegistry::new().supporting(ProviderKind::Openstack);
    for (region, path) in configs {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read region {region}'s OpenStack configuration {path}"))?;
        let config = OpenStackConfig::from_json(&text)
            .with_context(|| format!("region {region}'s OpenStack configuration {path} is invalid"))?;
        check_request_timeout(region, &config, cloud_timeout)?;
        register_openstack(&mut registry, region, config, login_failure_hook.clone(), lookup_list_gap, access)?;
    }
    for (region, secret) in secrets {
        let (namespace, name) = secret
            .split_once('/')
            .with_context(|| format!("region {region}: the Secret {secret:?} is not NAMESPACE/NAME"))?;
        let secrets: kube::Api<Secret> = kube::Api::namespaced(client.clone(), namespace);
        // The API's own message, not kube's Debug rendering of the Status.
        let found = secrets.get(name).await.map_err(|error| match error {
            kube::Error::Api(status) => {
                anyhow::anyhow!("cannot read region {region}'s Secret {secret}: {} ({})", status.message, status.reason)
            }
            other => anyhow::Error::new(other).context(format!("cannot read region {region}'s Secret {secret}")),
        })?;
        let data: BTreeMap<String, Vec<u8>> =
            found.data.unwrap_or_default().into_iter().map(|(key, value)| (key, value.0)).collect();
        let config = OpenStackConfig::from_secret_data(&data)
            .with_context(|| format!("region {region}'s Secret {secret} is invalid"))?;
        check_request_timeout(region, &config, cloud_timeout)?;
        register_openstack(&mut registry, region, config, login_failure_hook.clone(), lookup_list_gap, access)?;
    }
    Ok(registry)
}

/// A region whose `requestTimeout` is longer than `--cloud-timeout` is
/// refused at start: every call would be abandoned at the cloud timeout
/// while its request still waits, so the region's own timeout would never
/// be what ends a request, and the grace a create of unknown fate is given
/// (10 × `--cloud-timeout`) would be reckoned from the shorter of the two.
fn check_request_timeout(
    region: &str,
    config: &OpenStackConfig,
    cloud_timeout: Option<Duration>,
) -> anyhow::Result<()> {
    match cloud_timeout {
        Some(limit) if config.request_timeout > limit => anyhow::bail!(
            "region {region}'s requestTimeout ({}) is longer than --cloud-timeout ({}); set requestTimeout at or \
             under --cloud-timeout, or raise --cloud-timeout",
            humantime::format_duration(config.request_timeout),
            humantime::format_duration(limit)
        ),
        _ => Ok(()),
    }
}

/// Adds `region`'s OpenStack port to `registry`; a region given twice (by
/// file or Secret) is refused rather than one silently replacing the other.
fn register_openstack(
    registry: &mut CloudRegistry,
    region: &str,
    config: OpenStackConfig,
    login_failure_hook: Option<server_openstack::FailureStreakHook>,
    lookup_list_gap: Duration,
    access: Access,
) -> anyhow::Result<()> {
    if registry.get(region).is_some() {
        anyhow::bail!("region {region} is given twice; give each region once");
    }
    let cloud = OpenStackCloud::with_login_failure_hook(config, login_failure_hook)
        .with_context(|| format!("region {region}"))?
        .with_lookup_list_gap(lookup_list_gap);
    let port = match access {
        Access::ReadWrite => cloud.port(),
        Access::ReadOnly => cloud.read_only().port(),
    };
    registry.insert(region, RegionCloud::openstack(port));
    Ok(())
}

/// A client from `--kubeconfig` (its current context), or else from the
/// environment as kubectl finds it.
pub(crate) async fn kube_client(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            // Read here, not by kube, whose message quotes the path twice
            // ('"/path"') and repeats the cause.
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the kubeconfig {}", path.display()))?;
            let file = kube::config::Kubeconfig::from_yaml(&text)
                .with_context(|| format!("the kubeconfig {} is not a kubeconfig", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .with_context(|| format!("the kubeconfig {} is unusable", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("cannot build a Kubernetes client from the kubeconfig or the in-cluster config")?,
    };
    crate::kube_client::client(config).context("cannot build a Kubernetes client")
}

/// What a started operator runs with.
struct Started {
    listener: tokio::net::TcpListener,
    operator: Operator,
    endpoints: Endpoints,
}

/// `run --shadow`: rounds of what this operator would do, printed; nothing
/// acted on. The clouds read only (`OpenStackCloud::read_only`).
async fn shadow(args: &Args) -> anyhow::Result<ExitCode> {
    let client = kube_client(args.kubeconfig.as_deref()).await?;
    let clouds = openstack_clouds(
        &args.openstack_configs,
        &args.openstack_secrets,
        &client,
        None,
        Duration::ZERO,
        Some(args.cloud_timeout),
        Access::ReadOnly,
    )
    .await?;
    if clouds.regions().next().is_none() {
        anyhow::bail!(
            "no region to read: --shadow reads OpenStack regions; give --openstack-config REGION_ID=FILE or \
             --openstack-secret REGION_ID=NAMESPACE/NAME"
        );
    }
    let config = controller_config(args, None);
    loop {
        let round = server_kube::shadow(&client, &clouds, &config, args.namespace.as_deref()).await?;
        print!("{round}");
        if args.shadow_once {
            let total = round.total();
            // A rebuild destroys a root disk: as much a difference as a create or a delete.
            let destructive = total.creates + total.deletes + total.rebuilds;
            return Ok(if destructive == 0 { ExitCode::SUCCESS } else { ExitCode::from(3) });
        }
        tokio::select! {
            () = terminated() => return Ok(ExitCode::SUCCESS),
            () = tokio::time::sleep(args.monitor_interval) => {}
        }
    }
}

async fn operate(args: &Args) -> Result<(), Stopped> {
    let started = start(args).await.map_err(Stopped::Starting)?;
    serve(args, started).await.map_err(Stopped::Running)
}

/// Everything before the first pass: the probes' port, the API server, the
/// clouds and the Lease. A failure here means the operator never ran.
async fn start(args: &Args) -> anyhow::Result<Started> {
    // Probes that cannot be served are a startup error, not a warning at exit.
    let listener = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .with_context(|| format!("cannot serve /metrics, /healthz and /readyz on {}", args.metrics_addr))?;
    let client = kube_client(args.kubeconfig.as_deref()).await?;
    let version = client.apiserver_version().await.context("cannot reach the Kubernetes API server")?;
    let mut registry = Registry::default();
    let monitor_interval = (!args.no_monitor).then_some(args.monitor_interval);
    let metrics = Arc::new(OperatorMetrics::register(&mut registry, monitor_interval));
    let clouds = clouds(args, &client, &metrics).await?;
    let leader_election = lease_config(args, &client)?;
    let regions = clouds
        .regions()
        .filter_map(|region| Some(format!("{region}={}", clouds.get(region)?.provider())))
        .collect::<Vec<_>>()
        .join(",");
    let leader_lease = match &leader_election {
        Some(lease) => format!("{}/{}", lease.namespace, lease.name),
        None => "off".to_owned(),
    };
    tracing::info!(server_version = %version.git_version, %regions, %leader_lease, "connected");

    let operator = Operator::with_metrics(client, clouds, controller_config(args, leader_election), metrics.clone());
    metrics.watch_leadership(operator.fence().clone());
    let endpoints = Endpoints::new(registry, operator.health());
    Ok(Started { listener, operator, endpoints })
}

async fn serve(args: &Args, started: Started) -> anyhow::Result<()> {
    let Started { listener, operator, endpoints } = started;

    let (stop, stopped) = watch::channel(false);
    let wait_stop = |mut stopped: watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    let http = {
        let endpoints = endpoints.clone();
        let shutdown = wait_stop(stopped.clone());
        tokio::spawn(async move { endpoints.serve(listener, shutdown).await })
    };
    tokio::spawn(async move {
        terminated().await;
        tracing::info!("termination requested: finishing in-flight passes, then releasing the leader lease");
        let _ = stop.send(true);
    });

    // Ready once the operator's caches are filled and its loops run.
    let mut readiness = operator.readiness();
    let probe = endpoints.clone();
    tokio::spawn(async move {
        while readiness.changed().await.is_ok() {
            probe.set_ready(*readiness.borrow());
        }
    });
    let result = if args.no_monitor {
        operator.run_controller(wait_stop(stopped.clone())).await
    } else {
        operator.run(wait_stop(stopped.clone())).await
    };
    endpoints.set_ready(false);
    match http.await {
        Ok(Err(error)) => tracing::warn!(%error, "metrics endpoint failed"),
        Err(error) => tracing::warn!(%error, "metrics endpoint task failed"),
        Ok(Ok(())) => {}
    }
    result.context("the controller failed")
}

/// Resolves on SIGTERM (Kubernetes stopping the pod) or Ctrl-C.
async fn terminated() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {

    #[cfg(feature = "sim")]
    #[test]
    fn a_sim_fault_rate_outside_zero_to_one_is_refused_with_an_example() {
        assert_eq!(super::parse_fault_rate("0"), Ok(0.0));
        assert_eq!(super::parse_fault_rate("0.3"), Ok(0.3));
        for bad in ["1.5", "-0.1", "NaN", "many"] {
            let error = super::parse_fault_rate(bad).expect_err(bad);
            assert!(error.contains("between 0 and 1"), "{error}");
        }
    }
    use clap::Parser;

    use super::*;

    #[derive(Debug, clap::Parser)]
    struct Command {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn the_create_cap_is_bounded_at_parse_time_with_a_clear_error() {
        let parse = |value: &str| Command::try_parse_from(["run", "--provider-create-max-attempts", value]);
        assert_eq!(parse("1").map(|c| c.args.provider_create_max_attempts).ok(), Some(1));
        assert_eq!(parse("100").map(|c| c.args.provider_create_max_attempts).ok(), Some(100));
        for refused in ["0", "-1", "101", "2147483647", "99999999999"] {
            let error = parse(refused).map(|_| ()).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(error.contains("--provider-create-max-attempts"), "{refused}: {error}");
        }
    }

    #[test]
    fn concurrency_defaults_and_is_bounded_at_parse_time() {
        let parse = |args: &[&str]| Command::try_parse_from(["run"].iter().chain(args)).map(|c| c.args.concurrency);
        assert_eq!(parse(&[]).ok(), Some(ControllerConfig::DEFAULT_CONCURRENCY));
        assert_eq!(parse(&["--concurrency", "64"]).ok(), Some(64));
        for refused in ["0", "1025", "-3", "many"] {
            let flag = format!("--concurrency={refused}");
            let error = parse(&[flag.as_str()]).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(error.contains("--concurrency"), "{refused}: {error}");
        }
    }

    #[test]
    fn an_openstack_region_given_twice_is_refused_and_the_first_kept() {
        let config = || OpenStackConfig::from_json(r#"{"authURL": "http://keystone:5000", "region": "r1"}"#);
        let mut registry = CloudRegistry::new().supporting(ProviderKind::Openstack);
        let first = config()
            .map_err(anyhow::Error::from)
            .and_then(|c| register_openstack(&mut registry, "r1", c, None, Duration::ZERO, Access::ReadWrite));
        assert!(first.is_ok(), "{first:?}");
        let again = config()
            .map_err(anyhow::Error::from)
            .and_then(|c| register_openstack(&mut registry, "r1", c, None, Duration::ZERO, Access::ReadWrite));
        let error = again.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains("region r1 is given twice"), "{error}");
        assert!(registry.get("r1").is_some());
    }

    #[test]
    fn the_cloud_timeout_sets_the_create_grace_and_is_bounded_at_parse_time() {
        let parse = |args: &[&str]| Command::try_parse_from(["run"].iter().chain(args)).map(|c| c.args);
        let default = parse(&[]).map(|args| controller_config(&args, None)).ok();
        assert_eq!(default.map(|config| config.cloud_timeout), Some(ControllerConfig::default().cloud_timeout));
        let short = parse(&["--cloud-timeout", "5s"]).map(|args| controller_config(&args, None).rule_options()).ok();
        assert_eq!(short.map(|options| options.create_grace), Some(Duration::from_secs(50)));
        for refused in ["0s", "500ms", "11m", "soon"] {
            let flag = format!("--cloud-timeout={refused}");
            let error = parse(&[flag.as_str()]).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(error.contains("--cloud-timeout"), "{refused}: {error}");
        }
    }

    #[cfg(feature = "sim")]
    #[test]
    fn each_region_flag_gives_its_kind_and_cloud_sim_alone_serves_region_a() {
        let parse = |args: &[&str]| Command::try_parse_from(["run"].iter().chain(args)).map(|c| c.args);
        let sim_alone = parse(&["--cloud", "sim"]).map(|args| sim_regions(&args)).ok();
        assert_eq!(sim_alone, Some(vec![DEFAULT_SIM_REGION.to_owned()]));
        let named = parse(&["--cloud", "sim", "--sim-region", "region-x"]).map(|args| sim_regions(&args)).ok();
        assert_eq!(named, Some(vec!["region-x".to_owned()]));
        // OpenStack by default: no simulated region unless one is named.
        let openstack = parse(&["--openstack-config", "region-o=o.json"]).map(|args| sim_regions(&args)).ok();
        assert_eq!(openstack, Some(vec![]));
        let mixed = parse(&["--openstack-config", "region-o=o.json", "--sim-region", "region-s"]).ok();
        assert_eq!(mixed.as_ref().map(sim_regions), Some(vec!["region-s".to_owned()]));
        assert_eq!(mixed.map(|args| args.openstack_configs), Some(vec![("region-o".into(), "o.json".into())]));
    }

    #[test]
    fn each_cause_is_said_once() {
        let root = std::io::Error::other("No such file or directory");
        let middle = anyhow::Error::new(root).context("failed to read kubeconfig: No such file or directory");
        let top = middle.context("cannot build a Kubernetes client");
        assert_eq!(
            cause_once(&top),
            "cannot build a Kubernetes client: failed to read kubeconfig: No such file or directory"
        );
    }

    #[test]
    fn durations_parse_with_units_and_reject_nonsense() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5 parsecs").is_err());
    }
}

/// The simulated cloud's clock scale (`--sim-timing`).
#[cfg(feature = "sim")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SimTiming {
    Realistic,
    Fast,
}

#[cfg(feature = "sim")]
fn parse_fault_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if (0.0..=1.0).contains(&rate) => Ok(rate),
        _ => Err(format!("{text:?} is not a share between 0 and 1 (e.g. 0.3)")),
    }
}
