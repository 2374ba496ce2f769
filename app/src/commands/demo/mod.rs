//! `demo`: the whole system on an embedded default. SimKube and SimCloud run
//! in-process; the real operator (controller and monitor) talks to SimKube
//! over loopback HTTP with short intervals; N Servers with a mix of fates are
//! created, and the run ends with a table and a verdict on DESIGN §12
//! invariants 1–7 checked against the sims' ground truth. Exit 0 iff every
//! invariant holds and every Server settled.
//!
//! With `--serve` it is a playground: once the table is printed, the
//! operator, SimKube and the simulated cloud keep running until Ctrl-C or
//! SIGTERM, and kubectl works against them with the kubeconfig it writes.

pub(crate) mod observer;
mod report;
pub(crate) mod scenario;
mod verdict;
pub(crate) mod world;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;
use server_core::model::{ConditionReason, ConditionStatus, ConditionType, Phase};
use server_core::{Lifecycle, ParkKind};
use server_kube::{CloudRegistry, ControllerConfig, Operator, RegionCloud};
use server_sim_testbed::{CloudBed, CloudPath};
use server_simcloud::{CloudConfig, Fate, SimCloud, UidTruth};
use server_simkube::{Patch, PatchKind};
use tokio::sync::watch;

use crate::commands::run::{CloudKind, parse_duration};
use crate::telemetry::{self, LogFormat};
use observer::{History, Observer};
use report::{ApiRequests, CreateAttempts, INVARIANTS, InvariantVerdict, Report, Unsettled};
use scenario::{Planned, Role};
use world::{NAMESPACE, REGION, World};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// How many Servers to create.
    #[arg(long, default_value_t = 50)]
    servers: usize,

    /// Seed of every random choice in the sims.
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// Share (0..=1) of the Servers beyond the showcase whose cloud fate is
    /// faulty; it also scales the cloud's call failures below unless they
    /// are given. 0 gives a clean cloud.
    #[arg(long, default_value_t = 0.3, value_parser = crate::commands::parse_rate)]
    create_failure_rate: f64,

    /// Share (0..=1) of the cloud's get and list calls that fail (default: create-failure-rate × 0.1).
    #[arg(long, value_parser = crate::commands::parse_rate)]
    read_failure_rate: Option<f64>,

    /// Share (0..=1) of the cloud's create and delete calls answered 503 (default: create-failure-rate × 0.03).
    #[arg(long, value_parser = crate::commands::parse_rate)]
    write_failure_rate: Option<f64>,

    /// Share (0..=1) of accepted creates whose answer is lost (default: create-failure-rate × 0.03).
    #[arg(long, value_parser = crate::commands::parse_rate)]
    lost_create_rate: Option<f64>,

    /// `provider-create-max-attempts` of the operator (1 to 100).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=super::run::MAX_ATTEMPTS_BOUND))]
    max_attempts: i32,

    /// Give up waiting for every Server to settle after this long.
    #[arg(long, default_value = "90s", value_parser = parse_duration)]
    timeout: Duration,

    #[arg(long, value_enum, default_value_t = Output::Text)]
    output: Output,

    /// A playground: after the table, keep the operator, the API server and
    /// the simulated cloud running, and write a kubeconfig for kubectl,
    /// until Ctrl-C. (`run` cannot share this cloud: it is in this process.)
    #[arg(long)]
    serve: bool,

    /// Where `--serve` writes the kubeconfig (an example Server manifest is
    /// written beside it).
    #[arg(long, default_value = "server-controller-demo.kubeconfig")]
    kubeconfig: std::path::PathBuf,

    /// Address of the in-process API server.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,

    /// How the operator reaches SimCloud: directly through the cloud port
    /// (`sim`), or through the OpenStack adapter over HTTP to the OpenStack
    /// simulator (`openstack`: Keystone, Nova and Neutron on a loopback port).
    #[arg(long, value_enum, default_value_t = CloudKind::Sim)]
    cloud: CloudKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Output {
    Text,
    Json,
}

pub(crate) fn run(args: &Args) -> ExitCode {
    telemetry::init(LogFormat::Text, "error");
    crate::commands::block_on_verdict(demo(args))
}

/// Prints the report; whether the run passed.
fn print_report(args: &Args, report: &Report) -> anyhow::Result<bool> {
    match args.output {
        Output::Text => print!("{report}"),
        Output::Json => println!("{}", serde_json::to_string_pretty(report).context("cannot encode the report")?),
    }
    use std::io::Write as _;
    std::io::stdout().flush().context("cannot write the report")?;
    Ok(report.violations.is_empty() && report.settled)
}

/// The per-Server bookkeeping of the driver.
pub(crate) struct Tracked {
    pub(crate) planned: Planned,
    pub(crate) uid: String,
    pub(crate) fate: Fate,
    pub(crate) rearmed: bool,
    /// The Server asks for a public IP (the bench's half).
    pub(crate) public: bool,
}

async fn demo(args: &Args) -> anyhow::Result<bool> {
    let started = Instant::now();
    let max = args.max_attempts.max(1);
    let world = World::start(args.seed, args.listen).await?;
    let mut cloud_config = CloudConfig::with_fault_rate(args.seed, args.create_failure_rate);
    cloud_config.mix = scenario::mix(args.create_failure_rate);
    cloud_config.read_failure_rate = args.read_failure_rate.unwrap_or(cloud_config.read_failure_rate);
    cloud_config.write_failure_rate = args.write_failure_rate.unwrap_or(cloud_config.write_failure_rate);
    cloud_config.lost_create_rate = args.lost_create_rate.unwrap_or(cloud_config.lost_create_rate);
    let cloud = SimCloud::new(cloud_config);

    let mut observer = Observer::default();
    let mut tracked = Vec::new();
    for planned in scenario::plan(args.servers, args.create_failure_rate > 0.0) {
        let uid = world.create_server(&planned.name, planned.unmodelled_fields)?;
        if let Some(fate) = scenario::fate(planned.role, args.seed, &uid) {
            cloud.script(&uid, fate);
        }
        let fate = cloud.with_model(|model| model.fate(&uid));
        observer.track(&planned.name, &uid, planned.unmodelled_fields);
        tracked.push(Tracked { planned, uid, fate, rearmed: false, public: false });
    }
    // From here on, every request the API server counts is the operator's.
    world.bed.sim.reset_counters();

    let config = ControllerConfig {
        namespace: Some(NAMESPACE.into()),
        options: rule_options(max),
        yield_interval: Duration::from_millis(250),
        monitor_interval: Duration::from_millis(250),
        cloud_timeout: Duration::from_secs(5),
        concurrency: 16,
        // As deployed: the operator acts while it holds the leader Lease.
        leader_election: Some(server_kube::LeaseConfig::new(NAMESPACE, "demo")),
        ..ControllerConfig::default()
    };
    let (registry, _openstack) = cloud_registry(args.cloud, &cloud).await?;
    let operator = Operator::new(world.bed.client.clone(), registry, config);
    let (stop, stopped) = watch::channel(false);
    let running = {
        let operator = operator.clone();
        let mut stopped = stopped.clone();
        tokio::spawn(async move {
            operator
                .run(async move {
                    let _ = stopped.wait_for(|stop| *stop).await;
                })
                .await
        })
    };

    let mut progress = Progress::new(args);
    let deadline = Instant::now() + args.timeout;
    let settled = loop {
        observer.sample(&world, &cloud);
        act_as_user(&world, &mut tracked, &mut observer, max)?;
        let done = tracked.len() - unsettled(&tracked, &observer, &cloud, max).len();
        progress.update(Instant::now(), done, cloud.live_servers(), || unsettled(&tracked, &observer, &cloud, max));
        if done == tracked.len() {
            break true;
        }
        if Instant::now() >= deadline {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // A last look after the operator had time to write anything it owed.
    tokio::time::sleep(Duration::from_millis(300)).await;
    observer.sample(&world, &cloud);
    progress.finish();
    // The playground keeps the operator running past the report.
    let running = if args.serve {
        Some(running)
    } else {
        stop_operator(&stop, running).await?;
        None
    };

    // Neutron's ports and floating IPs, when the cloud is the OpenStack
    // simulator: each must belong to a Server that still exists.
    let neutron = _openstack.openstack().map(|sim| verdict::Neutron {
        ports: sim.ports().into_iter().map(|port| (port.id, port.name)).collect(),
        floating_ips: sim.floating_ips().into_iter().map(|ip| (ip.id, ip.port_id)).collect(),
    });
    let violations = verdict::check(&world, &cloud, &observer, max, neutron.as_ref(), settled);
    let report = build_report(args, &world, &cloud, &observer, &tracked, violations, settled, started.elapsed());
    let passed = print_report(args, &report)?;
    if let Some(running) = running {
        let served = serve_until_interrupted(&world, &args.kubeconfig).await;
        stop_operator(&stop, running).await?;
        served?;
    }
    Ok(passed)
}

async fn stop_operator(
    stop: &watch::Sender<bool>,
    running: tokio::task::JoinHandle<Result<(), server_kube::Error>>,
) -> anyhow::Result<()> {
    let _ = stop.send(true);
    match tokio::time::timeout(Duration::from_secs(10), running).await {
        Ok(Ok(Ok(()))) => Ok(()),
        Ok(Ok(Err(error))) => anyhow::bail!("the operator failed: {error}"),
        Ok(Err(error)) => anyhow::bail!("the operator task failed: {error}"),
        Err(_) => anyhow::bail!("the operator did not stop within 10 s"),
    }
}

/// The operator's clouds. With `openstack`, the OpenStack simulator serves
/// SimCloud's model over HTTP and the real OpenStack adapter talks to it; the
/// returned test bed keeps it serving.
async fn cloud_registry(kind: CloudKind, cloud: &SimCloud) -> anyhow::Result<(CloudRegistry, CloudBed)> {
    let path = match kind {
        CloudKind::Sim => CloudPath::Direct,
        CloudKind::Openstack => CloudPath::OpenStack,
    };
    let tenant = World::tenant();
    let bed = CloudBed::start(path, cloud.clone(), &tenant, None).await?;
    // What the unikorn network controllers would have made in Neutron.
    for network in world::NETWORKS {
        bed.seed_neutron(&tenant, "networks", network);
    }
    bed.seed_neutron(&tenant, "securitygroups", world::SECURITY_GROUP);
    // Both paths stand in for an OpenStack region: the tenant has its
    // OpenstackIdentity, and SimCloud models Nova.
    Ok((CloudRegistry::new().with(REGION, RegionCloud::openstack(bed.port()?)), bed))
}

/// How long the count of settled Servers may stand still before the
/// progress names the Servers it waits for, and why.
const NAME_WAITS_AFTER: Duration = Duration::from_secs(10);

/// The run's progress: a bar on a terminal; otherwise (stdout or stderr not
/// a terminal: CI, a pipe) a line on stderr per 10 % settled. Either way,
/// once no Server settled for [`NAME_WAITS_AFTER`], it names the Servers it
/// waits for and where each stands.
struct Progress {
    bar: ProgressBar,
    lines: bool,
    total: usize,
    started: Instant,
    done: usize,
    /// When `done` last changed.
    changed: Instant,
    /// The last tenth a line was printed for.
    tenth: usize,
    /// When the waits were last named on a line.
    named: Option<Instant>,
}

impl Progress {
    fn new(args: &Args) -> Self {
        use std::io::IsTerminal as _;
        let lines = !(std::io::stdout().is_terminal() && std::io::stderr().is_terminal());
        Self::with(args, lines, Instant::now())
    }

    fn with(args: &Args, lines: bool, now: Instant) -> Self {
        let bar = ProgressBar::with_draw_target(Some(args.servers as u64), ProgressDrawTarget::stderr());
        if lines || args.output == Output::Json {
            bar.set_draw_target(ProgressDrawTarget::hidden());
        } else {
            let style =
                ProgressStyle::with_template("{spinner} settling servers [{bar:30}] {pos}/{len} {elapsed} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style.progress_chars("=> "));
            bar.enable_steady_tick(Duration::from_millis(120));
        }
        Progress { bar, lines, total: args.servers, started: now, done: 0, changed: now, tenth: 0, named: None }
    }

    fn update(&mut self, now: Instant, done: usize, live: usize, unsettled: impl FnOnce() -> Vec<Unsettled>) {
        if done != self.done {
            self.done = done;
            self.changed = now;
            self.named = None;
        }
        let elapsed = now.duration_since(self.started).as_secs_f64();
        let tenth = (done * 10).checked_div(self.total).unwrap_or(10);
        if self.lines && tenth > self.tenth {
            self.tenth = tenth;
            eprintln!("settling servers: {done}/{} ({}%) after {elapsed:.1} s", self.total, tenth * 10);
        }
        let stalled = now.duration_since(self.changed);
        if stalled < NAME_WAITS_AFTER {
            self.bar.set_position(done as u64);
            self.bar.set_message(format!("{live} provider servers live"));
            return;
        }
        let waiting = format!("waiting {:.0} s for {}", stalled.as_secs_f64(), report::name_unsettled(&unsettled()));
        self.bar.set_position(done as u64);
        self.bar.set_message(waiting.clone());
        if self.lines && self.named.is_none_or(|at| now.duration_since(at) >= NAME_WAITS_AFTER) {
            self.named = Some(now);
            eprintln!("settling servers: {done}/{}, {waiting}", self.total);
        }
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
        if self.lines && self.done < self.total {
            let elapsed = self.started.elapsed().as_secs_f64();
            eprintln!("settling servers: stopped at {}/{} after {elapsed:.1} s", self.done, self.total);
        }
    }
}

/// The Servers that have not reached the end their fate leads to, and where
/// each stands (its Available condition, bounded).
fn unsettled(tracked: &[Tracked], observer: &Observer, cloud: &SimCloud, max: i32) -> Vec<Unsettled> {
    tracked
        .iter()
        .filter_map(|t| {
            let history = &observer.servers[&t.planned.name];
            if is_settled(t, history, max, &cloud.truth(&t.uid)) {
                return None;
            }
            let standing = match history.latest.as_ref().and_then(|s| s.status.condition(ConditionType::Available)) {
                Some(available) => bounded(&format!("{}: {}", available.reason, available.message)),
                None => "no Available condition yet".into(),
            };
            Some(Unsettled { server: t.planned.name.clone(), standing })
        })
        .collect()
}

/// At most 120 characters of `text`, cut at a character boundary.
fn bounded(text: &str) -> String {
    const MAX: usize = 120;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_owned(),
    }
}

/// What users do during the run: delete the designated Server once it runs,
/// and edit the spec of a Server whose create the provider refused.
fn act_as_user(world: &World, tracked: &mut [Tracked], observer: &mut Observer, max: i32) -> anyhow::Result<()> {
    let store = world.store();
    for t in tracked.iter_mut() {
        let Some(history) = observer.servers.get_mut(&t.planned.name) else { continue };
        let Some(server) = &history.latest else { continue };
        if t.planned.role == Role::DeletedMidway
            && !history.deleted_by_user
            && server.status.phase == Some(Phase::Running)
        {
            store
                .delete("servers", Some(NAMESPACE), &t.planned.name)
                .map_err(|e| anyhow::anyhow!("cannot delete {}: {e:?}", t.planned.name))?;
            history.deleted_by_user = true;
        }
        rearm_if_refused(&store, t, server, max)?;
    }
    Ok(())
}

/// What a user does about a Server whose create the provider refused
/// (quota): edits its spec (another flavor), which lets the operator try again.
pub(crate) fn rearm_if_refused(
    store: &server_simkube::StoreHandle,
    t: &mut Tracked,
    server: &server_core::Server,
    max: i32,
) -> anyhow::Result<()> {
    if needs_rearm(t, server, max) {
        let patch = Patch::Merge(PatchKind::Merge, rearm_patch());
        store
            .patch("servers", Some(NAMESPACE), &t.planned.name, &patch)
            .map_err(|e| anyhow::anyhow!("cannot edit {}: {e:?}", t.planned.name))?;
        t.rearmed = true;
    }
    Ok(())
}

/// Whether the user has yet to edit a Server parked as refused.
pub(crate) fn needs_rearm(t: &Tracked, server: &server_core::Server, max: i32) -> bool {
    !t.rearmed && server_core::lifecycle(server, &rule_options(max)).park() == Some(ParkKind::Refused)
}

/// The user's edit of a refused Server: another flavor.
pub(crate) fn rearm_patch() -> serde_json::Value {
    json!({"spec": {"flavorID": "6a2b1c3d-0000-4000-8000-0000000000ff"}})
}

/// The rules' options as the demo's operator runs them.
pub(crate) fn rule_options(max: i32) -> server_core::Options {
    server_core::Options::with_max_attempts(max)
}

/// Where a Server stands, by the project's one classifier.
fn lifecycle(server: &server_core::Server, max: i32) -> Lifecycle {
    server_core::lifecycle(server, &rule_options(max))
}

fn healthy_is(server: &server_core::Server, status: ConditionStatus) -> bool {
    server.status.condition(ConditionType::Healthy).is_some_and(|c| c.status == status)
}

/// Whether a Server reached the end its fate leads to, given what the cloud
/// did for it (`truth`).
pub(crate) fn is_settled(t: &Tracked, history: &History, max: i32, truth: &UidTruth) -> bool {
    let creates_accepted = truth.creates_accepted;
    if history.gone {
        return true;
    }
    let Some(server) = &history.latest else { return false };
    let fate = &t.fate;
    if t.planned.role == Role::DeletedMidway {
        return false;
    }
    let available = server.status.condition(ConditionType::Available);
    let provisioned = available.is_some_and(|c| c.reason == ConditionReason::Provisioned);
    let parked_at_cap = lifecycle(server, max) == Lifecycle::Parked(ParkKind::AtCap);
    let cap = u32::try_from(max).unwrap_or(1);
    if fate.refused_creates > 0 && !t.rearmed {
        // Its refusal comes first, then the user's edit; unless the cloud's
        // outages (503s, counted: fail closed) reach the cap before it was
        // ever refused.
        return parked_at_cap && truth.creates_refused == 0;
    }
    if fate.failed_boots >= cap {
        return parked_at_cap;
    }
    // A counted attempt that made no server was a create answered with a
    // 5xx (the cloud's outages hit any fate) whose grace ran out with no
    // server: counted too (DESIGN, fail closed), so with fewer servers made
    // than the cap, a park at the cap is where that luck ends.
    if parked_at_cap && creates_accepted < cap {
        return true;
    }
    // A create answered with a 5xx has an unknown fate: once its grace ran
    // out without a server it counts as an attempt (DESIGN, fail closed), so
    // boots that fail fewer times than the cap, plus such answers, can
    // legitimately reach it.
    if fate.failed_boots > 0 && parked_at_cap {
        return true;
    }
    if fate.vanish_after_launch.is_some() {
        // A server that vanishes before any read saw it launched leaves the
        // same evidence as one lost before launch (no record, no launch
        // time), so each such create is counted and the cap can be reached.
        return parked_at_cap || lifecycle(server, max) == Lifecycle::Parked(ParkKind::MissingAfterBoot);
    }
    if fate.error_after_launch.is_some() {
        return server.status.provisioned_at.is_some() && healthy_is(server, ConditionStatus::False) && provisioned;
    }
    server.status.phase == Some(Phase::Running) && provisioned && healthy_is(server, ConditionStatus::True)
}

pub(crate) fn outcome(history: &History, max: i32) -> String {
    if history.gone {
        return "deleted by the user".into();
    }
    let Some(server) = &history.latest else { return "never seen".into() };
    let failures = server.status.provider_create_failures;
    match lifecycle(server, max).park() {
        Some(ParkKind::AtCap) => return "parked at the create cap".into(),
        Some(ParkKind::MissingAfterBoot) => return "vanished after boot, not recreated".into(),
        Some(ParkKind::Refused) => return "refused by the provider".into(),
        Some(ParkKind::UserDataRefused) => return "parked: user data refused".into(),
        Some(ParkKind::InvalidSpec) => return "parked: invalid spec".into(),
        Some(ParkKind::HostPinned) => return "parked: pinned to a host".into(),
        Some(ParkKind::Forbidden) => return "forbidden by the cloud's policy".into(),
        Some(ParkKind::RebuildFailed) => return "parked: its rebuild failed".into(),
        None => {}
    }
    if server.status.phase == Some(Phase::Running) && healthy_is(server, ConditionStatus::False) {
        return "errored after launch, kept (holds data)".into();
    }
    if server.status.phase == Some(Phase::Running) {
        return match failures {
            0 => "running".into(),
            n => format!("running after {n} failed create(s)"),
        };
    }
    let phase = server.status.phase.map_or_else(|| "no phase yet".to_string(), |phase| format!("phase {phase}"));
    let available = server
        .status
        .condition(ConditionType::Available)
        .map_or_else(|| "no Available condition".to_string(), |c| format!("Available {}", c.reason));
    format!("unsettled ({phase}, {available})")
}

/// The fate the cloud gave a Server, in words.
pub(crate) fn describe_fate(t: &Tracked) -> String {
    let fate = &t.fate;
    if t.planned.role == Role::DeletedMidway {
        return "boots; the user deletes it midway".into();
    }
    let mut parts = Vec::new();
    if fate.refused_creates > 0 {
        parts.push(format!("refused {}x (quota), then the user edits it", fate.refused_creates));
    }
    match fate.failed_boots {
        0 => {}
        Fate::FOREVER => parts.push("every boot fails".into()),
        1 => parts.push("1 boot fails".into()),
        n => parts.push(format!("{n} boots fail")),
    }
    if fate.failed_boots != Fate::FOREVER {
        parts.push(
            match (fate.error_after_launch, fate.vanish_after_launch) {
                (Some(_), _) => "boots, then errors",
                (None, Some(_)) => "boots, then vanishes",
                (None, None) => "boots",
            }
            .into(),
        );
    }
    if parts == ["boots"] { "boots cleanly".into() } else { parts.join(", ") }
}

#[allow(clippy::too_many_arguments)]
fn build_report(
    args: &Args,
    world: &World,
    cloud: &SimCloud,
    observer: &Observer,
    tracked: &[Tracked],
    violations: Vec<verdict::Violation>,
    settled: bool,
    elapsed: Duration,
) -> Report {
    let unsettled = unsettled(tracked, observer, cloud, args.max_attempts.max(1));
    let mut grouped: BTreeMap<(String, String), usize> = BTreeMap::new();
    for t in tracked {
        let Some(history) = observer.servers.get(&t.planned.name) else { continue };
        *grouped.entry((describe_fate(t), outcome(history, args.max_attempts.max(1)))).or_insert(0) += 1;
    }
    let outcomes =
        grouped.into_iter().map(|((fate, outcome), servers)| report::FateOutcome { fate, outcome, servers }).collect();
    let mut events = BTreeMap::new();
    for event in world.store().list("events", Some(NAMESPACE)) {
        let reason = event["reason"].as_str().unwrap_or("?").to_owned();
        let count = event["series"]["count"].as_u64().unwrap_or(1);
        *events.entry(reason).or_insert(0) += count;
    }
    let counters = world.bed.sim.counters();
    let by_verb_and_resource =
        counters.requests.iter().map(|((verb, resource), count)| (format!("{verb} {resource}"), *count)).collect();
    let total = counters.total();
    let c = cloud.counters();
    let max_accepted_per_server = tracked.iter().map(|t| cloud.truth(&t.uid).creates_accepted).max().unwrap_or(0);
    let failed: std::collections::BTreeSet<u8> = violations.iter().map(|v| v.invariant).collect();
    Report {
        servers: args.servers,
        seed: args.seed,
        max_attempts: args.max_attempts.max(1),
        duration_seconds: elapsed.as_secs_f64(),
        // A Server that settled in the last look counts as settled.
        settled: settled || unsettled.is_empty(),
        outcomes,
        create_attempts: CreateAttempts {
            calls: c.create_calls,
            accepted: c.creates_accepted,
            refused: c.creates_refused,
            deduplicated: c.creates_deduplicated,
            failed: c.create_calls.saturating_sub(c.creates_accepted + c.creates_refused + c.creates_deduplicated),
            max_accepted_per_server,
        },
        events,
        api_requests: ApiRequests {
            total,
            per_server: total as f64 / args.servers.max(1) as f64,
            by_verb_and_resource,
            faults_injected: counters.total_faults(),
        },
        cloud_calls: BTreeMap::from([
            ("create", c.create_calls),
            ("delete", c.delete_calls),
            ("get", c.get_calls),
            ("list", c.list_calls),
        ]),
        invariants: INVARIANTS
            .iter()
            .map(|(invariant, statement)| InvariantVerdict {
                invariant: *invariant,
                statement,
                holds: !failed.contains(invariant),
            })
            .collect(),
        violations,
        timeout_seconds: args.timeout.as_secs_f64(),
        unsettled,
    }
}

/// Writes the kubeconfig and an example Server, says what to try, and waits
/// for Ctrl-C or SIGTERM while everything keeps running.
async fn serve_until_interrupted(world: &World, path: &std::path::Path) -> anyhow::Result<()> {
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: demo\n  cluster:\n    server: {url}\ncontexts:\n- name: demo\n  context:\n    cluster: demo\n    user: demo\n    namespace: {NAMESPACE}\ncurrent-context: demo\nusers:\n- name: demo\n  user: {{}}\n",
        url = world.bed.served().url()
    );
    std::fs::write(path, kubeconfig).with_context(|| format!("cannot write {}", path.display()))?;
    let kubeconfig = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let example = kubeconfig.with_file_name(EXAMPLE_FILE);
    std::fs::write(&example, world::example_server(EXAMPLE_NAME))
        .with_context(|| format!("cannot write {}", example.display()))?;
    eprintln!(
        "\nThe playground stays up at {url}: the operator, this API server and the simulated cloud
keep running until Ctrl-C. Try this:

  export KUBECONFIG={kubeconfig}
  kubectl get servers -o wide
  kubectl describe server server-001          # parked at the create cap: conditions and events
  kubectl explain server.spec
  kubectl apply -f {example}
  kubectl get server {EXAMPLE_NAME} -w               # Pending, Building, Running
  kubectl delete server {EXAMPLE_NAME} --wait

New Servers get a fate from --create-failure-rate (0: a clean cloud for every Server). This cloud
lives in this process: `server-controller run --cloud sim` against this API server
would start an empty cloud of its own, so run it against a real cluster instead.",
        url = world.bed.served().url(),
        kubeconfig = kubeconfig.display(),
        example = example.display(),
    );
    wait_for_interrupt().await
}

/// The example Server the playground writes beside its kubeconfig.
const EXAMPLE_FILE: &str = "server-controller-demo-server.yaml";
const EXAMPLE_NAME: &str = "my-server";

async fn wait_for_interrupt() -> anyhow::Result<()> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot listen for SIGTERM")?;
    tokio::select! {
        interrupted = tokio::signal::ctrl_c() => interrupted.context("cannot wait for Ctrl-C"),
        _ = terminate.recv() => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use server_core::model::Server;

    use super::*;

    fn tracked(fate: Fate) -> Tracked {
        let planned = Planned { name: "s".into(), role: Role::Drawn, unmodelled_fields: false };
        Tracked { planned, uid: "u".into(), fate, rearmed: false, public: false }
    }

    /// What the cloud did: `accepted` creates made a server.
    fn made(accepted: u32) -> UidTruth {
        UidTruth { creates_accepted: accepted, ..UidTruth::default() }
    }

    /// A Server that never booted, with `failures` counted attempts and no retry pending.
    fn parked_after(failures: i32) -> History {
        let mut server = Server::default();
        server.status.provider_create_failures = failures;
        History { latest: Some(server), ..Default::default() }
    }

    #[test]
    fn a_cap_reached_with_an_unknown_fate_create_among_failed_boots_is_settled_but_not_from_a_clean_fate() {
        let max = 3;
        // Every attempt made a server (the cloud accepted 3 creates).
        assert!(is_settled(&tracked(Fate::failing_boots(2)), &parked_after(3), max, &made(3)));
        assert!(is_settled(&tracked(Fate::failing_forever()), &parked_after(3), max, &made(3)));
        assert!(
            !is_settled(&tracked(Fate::failing_boots(2)), &parked_after(2), max, &made(3)),
            "under the cap is not parked"
        );
        assert!(!is_settled(&tracked(Fate::clean()), &parked_after(3), max, &made(3)), "a clean fate must end running");
        let vanishes = Fate::vanish_after_launch(std::time::Duration::from_millis(1_500));
        assert!(is_settled(&tracked(vanishes.clone()), &parked_after(3), max, &made(3)), "every boot vanished unseen");
        assert!(!is_settled(&tracked(vanishes), &parked_after(1), max, &made(3)));
    }

    /// Seen at 3,000 Servers: a clean fate whose three creates each met a
    /// cloud outage (503, never a server) parks at the cap, by design.
    #[test]
    fn a_clean_fate_parked_at_the_cap_is_settled_only_when_some_attempt_made_no_server() {
        let max = 3;
        assert!(is_settled(&tracked(Fate::clean()), &parked_after(3), max, &made(0)), "three outages");
        assert!(is_settled(&tracked(Fate::clean()), &parked_after(3), max, &made(2)));
        assert!(
            !is_settled(&tracked(Fate::clean()), &parked_after(3), max, &made(3)),
            "three servers made: a wrong park"
        );
        assert!(!is_settled(&tracked(Fate::clean()), &parked_after(2), max, &made(0)), "under the cap it must go on");
    }

    /// Seen at 100,000 Servers: a fate refused once met three cloud outages
    /// before its refusal, so it parked at the cap and was never refused
    /// (nor edited by the user).
    #[test]
    fn a_refused_fate_parked_at_the_cap_by_outages_is_settled() {
        let max = 3;
        assert!(is_settled(&tracked(Fate::refused(1)), &parked_after(3), max, &made(0)), "three outages");
        assert!(
            !is_settled(&tracked(Fate::refused(1)), &parked_after(2), max, &made(0)),
            "under the cap it must go on"
        );
        assert!(
            !is_settled(&tracked(Fate::refused(1)), &parked_after(0), max, &made(0)),
            "its refusal is still to come"
        );
        let refused = UidTruth { creates_refused: 1, ..UidTruth::default() };
        assert!(
            !is_settled(&tracked(Fate::refused(1)), &parked_after(3), max, &refused),
            "refused, then at the cap: its refusal was counted as an attempt"
        );
    }

    /// Once no Server settled for 10 s, the progress names the Servers it
    /// waits for and where each stands; before that it does not.
    #[test]
    fn progress_names_what_it_waits_for_once_a_wait_passes_ten_seconds() {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let args = Cli::parse_from(["demo", "--servers", "4"]).args;
        let start = Instant::now();
        let mut progress = Progress::with(&args, true, start);
        let waiting = || {
            vec![Unsettled { server: "server-002".into(), standing: "Provisioning: Waiting for the provider".into() }]
        };
        progress.update(start + Duration::from_secs(1), 3, 3, waiting);
        assert!(!progress.bar.message().contains("server-002"), "{}", progress.bar.message());
        progress.update(start + Duration::from_secs(11), 3, 3, waiting);
        let message = progress.bar.message();
        assert!(
            message.starts_with("waiting 10 s for server-002 (Provisioning: Waiting for the provider)"),
            "{message}"
        );
        // A Server settling starts the count again.
        progress.update(start + Duration::from_secs(12), 4, 3, waiting);
        assert!(!progress.bar.message().contains("server-002"), "{}", progress.bar.message());
    }
}
