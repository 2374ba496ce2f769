//! `bench`: the cost and scale of the operator, measured. For each size N it
//! builds a world (SimKube and the OpenStack simulator in this process, N
//! Servers with the demo's fate mix, 32 KB of user data each, sharing 10
//! Networks and 10 SecurityGroups), starts the real operator as a separate
//! `server-controller run` process against it, and waits until every Server
//! settled. API requests, conflicts and bytes written are counted by the API
//! server, cloud calls by the cloud; memory and CPU of the operator alone
//! come from /proc. On the size `--steady-servers`, once converged, a window
//! with nothing changing counts what the operator still does.

mod operator;
mod report;
mod world;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::commands::run::parse_duration;
use crate::telemetry::{self, LogFormat};
use operator::{ControllerProcess, OperatorFlags, OperatorMetrics, OperatorProcess, ProcessSample};
use report::{ApiCounts, BenchReport, CloudCounts, SizeResult, SteadyState, per};
use server_sim_testbed::go_controller::{GoBuild, GoController, GoOptions};
use world::{ApiServer, BenchWorld, Controller};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The sizes to measure, in order (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1000,3000,10000", value_parser = parse_size)]
    servers: Vec<usize>,

    /// Seed of every random choice in the sims.
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// Share (0..=1) of Servers whose cloud fate is faulty, as in `demo`.
    #[arg(long, default_value_t = 0.3, value_parser = crate::commands::parse_rate)]
    create_failure_rate: f64,

    /// Share (0..=1) of Servers that ask for a public IP, spread evenly.
    #[arg(long, default_value_t = 0.5, value_parser = crate::commands::parse_rate)]
    public_ip_share: f64,

    /// Share (0..=1) of the public Servers whose first floating-IP create
    /// fails (the OpenStack simulator answers that many `POST
    /// /v2.0/floatingips` with 503): each must still get its public IP.
    #[arg(long, default_value_t = 0.2, value_parser = crate::commands::parse_rate)]
    floating_ip_fault_rate: f64,

    /// Once settled (and after the steady window), delete every Server and
    /// wait until all are gone, then count what the cloud still holds of
    /// them (servers, ports, floating IPs): any is a leak, and a leak fails
    /// the bench.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    delete: bool,

    /// `provider-create-max-attempts` of the operator (1 to 100).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=super::run::MAX_ATTEMPTS_BOUND))]
    max_attempts: i32,

    /// The operator's `--yield-interval`.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    yield_interval: Duration,

    /// The operator's `--monitor-interval`.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    monitor_interval: Duration,

    /// The operator's `--cloud-timeout`, also each region's `requestTimeout`.
    /// A create answered with a 5xx has an unknown fate and its Server waits
    /// ten times this before counting it lost, so the default (the
    /// operator's 60 s) would make the fate mix's create outages, not the
    /// operator, set the bench's wall time. The simulated cloud answers in
    /// milliseconds, so 5 s never cuts a call short.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    cloud_timeout: Duration,

    /// Give up waiting for one size to settle after this long.
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    timeout: Duration,

    /// The size whose converged world the steady-state window measures
    /// (0: none; skipped when it is not among --servers; the report says
    /// whether every Server had settled).
    #[arg(long, default_value_t = 1000)]
    steady_servers: usize,

    /// Length of the steady-state window.
    #[arg(long, default_value = "3m", value_parser = parse_duration)]
    steady_window: Duration,

    /// Start the operator under this profiler (e.g. `heaptrack`, or
    /// `perf record -g --`; split on spaces). Its process is then the
    /// profiler's, so the report's operator RSS and CPU are the profiler's.
    #[arg(long, value_name = "COMMAND")]
    operator_wrapper: Option<String>,

    /// Where the operator's logs and configuration go (default: a new
    /// directory under the system's temporary directory, removed when every
    /// size settled).
    #[arg(long)]
    work_dir: Option<PathBuf>,

    /// The API server: SimKube in this process, or the real kube-apiserver
    /// and etcd (built by `.ci/build-control-plane`), the operator then
    /// running as its ServiceAccount under deploy/base's RBAC.
    #[arg(long, value_enum, default_value_t = ApiServer::Simkube)]
    api_server: ApiServer,

    /// The controller measured: this operator, or the Go controller it
    /// replaces (`GO_CONTROLLER_BIN`, built by `.ci/build-go-controller`;
    /// needs `--api-server real`, as root for its mount namespace, and port
    /// 8080 free), which runs with its fixed 10 s yield whatever
    /// `--yield-interval` says, its monitor polling every `--monitor-interval`.
    #[arg(long, value_enum, default_value_t = Controller::Ours)]
    controller: Controller,

    /// Size of each Server's user data, base64 as the API stores it (a
    /// multiple of 4, 128 to 49152). kube-apiserver's watch cache keeps
    /// several versions of each Server, so 10,000 Servers on the real API
    /// server fit this machine with 4096, not with the default.
    #[arg(long, default_value_t = world::USER_DATA_BYTES, value_parser = parse_user_data_bytes)]
    user_data_bytes: usize,

    /// Passes at once: this operator's `--concurrency`, the Go controller's
    /// `--max-concurrency` (their defaults: 32 and 2).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1024))]
    concurrency: u32,

    /// Identities (OpenStack projects) the Servers are spread over, 1 to
    /// 10: each has its own SSH CA and owns a share of the 10 Networks and
    /// SecurityGroups. One object holds at most about 30,000 references
    /// (docs/DESIGN.md, "Reference edges"), so past 30,000 Servers spread
    /// them.
    #[arg(long, default_value_t = 1)]
    identities: usize,

    #[arg(long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Output {
    /// A Markdown table.
    Text,
    Json,
}

fn parse_user_data_bytes(value: &str) -> Result<usize, String> {
    let bytes: usize = value.trim().parse().map_err(|_| format!("{value:?} is not a number of bytes"))?;
    let range = world::MIN_USER_DATA_BYTES..=world::MAX_USER_DATA_BYTES;
    if !range.contains(&bytes) || !bytes.is_multiple_of(4) {
        return Err(format!(
            "user data of {bytes} bytes: give a multiple of 4 from {} to {} (base64 comes in groups of 4)",
            range.start(),
            range.end()
        ));
    }
    Ok(bytes)
}

fn parse_size(value: &str) -> Result<usize, String> {
    match value.trim().parse::<usize>() {
        Ok(0) => Err("a size must be at least 1 Server".into()),
        Ok(size) if size > 100_000 => Err(format!("{size} Servers is more than this bench is built for (100,000)")),
        Ok(size) => Ok(size),
        Err(_) => Err(format!("{value:?} is not a number of Servers")),
    }
}

pub(crate) fn run(args: &Args) -> ExitCode {
    telemetry::init(LogFormat::Text, "error");
    crate::commands::block_on_verdict(bench(args))
}

/// Runs every size; whether all settled.
async fn bench(args: &Args) -> anyhow::Result<bool> {
    let started = Instant::now();
    let go_build = match args.controller {
        Controller::Ours => None,
        Controller::Go if args.api_server != ApiServer::Real => {
            anyhow::bail!("--controller go runs on the real API server only: add --api-server real")
        }
        Controller::Go => Some(GoBuild::find()?),
    };
    let identities = world::Identities::new(args.identities)?;
    let work_dir = match &args.work_dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("server-controller-bench-{}", std::process::id())),
    };
    std::fs::create_dir_all(&work_dir).with_context(|| format!("cannot create {}", work_dir.display()))?;
    if args.steady_servers != 0 && !args.servers.contains(&args.steady_servers) {
        eprintln!("note: no steady-state window: {} is not among --servers", args.steady_servers);
    }
    let mut sizes = Vec::new();
    let mut steady_state = None;
    let mut api_server_names: Vec<String> = Vec::new();
    for &servers in &args.servers {
        let (size, steady, api_server) = measure(args, go_build.as_ref(), servers, identities, &work_dir).await?;
        if !api_server_names.contains(&api_server) {
            api_server_names.push(api_server);
        }
        sizes.push(size);
        steady_state = steady_state.or(steady);
    }
    let all_settled = sizes.iter().all(|size| size.settled && size.violations().is_empty());
    let report = BenchReport {
        controller: match &go_build {
            None => "server-controller".to_owned(),
            Some(build) => format!("the Go controller ({})", build.stamp),
        },
        api_server: api_server_names.join(", "),
        seed: args.seed,
        create_failure_rate: args.create_failure_rate,
        user_data_bytes: args.user_data_bytes,
        shared_networks: world::SHARED_RESOURCES,
        shared_security_groups: world::SHARED_RESOURCES,
        identities: identities.count(),
        yield_interval_seconds: args.yield_interval.as_secs_f64(),
        monitor_interval_seconds: args.monitor_interval.as_secs_f64(),
        cloud_timeout_seconds: args.cloud_timeout.as_secs_f64(),
        sizes,
        steady_state,
        duration_seconds: started.elapsed().as_secs_f64(),
    };
    match args.output {
        Output::Text => print!("{report}"),
        Output::Json => println!("{}", serde_json::to_string_pretty(&report).context("cannot encode the report")?),
    }
    if all_settled && args.work_dir.is_none() {
        // Best effort: a leftover temporary directory harms nothing.
        let _ = std::fs::remove_dir_all(&work_dir);
    } else if !all_settled {
        eprintln!("the operator's logs are in {}", work_dir.display());
    }
    Ok(all_settled)
}

/// One size: the world, the operator, the wait, the counts.
async fn measure(
    args: &Args,
    go_build: Option<&GoBuild>,
    servers: usize,
    identities: world::Identities,
    work_dir: &Path,
) -> anyhow::Result<(SizeResult, Option<SteadyState>, String)> {
    eprintln!("bench: {servers} Servers: seeding the world");
    let shape = world::Shape {
        servers,
        seed: args.seed,
        create_failure_rate: args.create_failure_rate,
        public_ip_share: args.public_ip_share,
        user_data_bytes: args.user_data_bytes,
        identities,
    };
    let mut world = BenchWorld::start(args.api_server, args.controller, &shape).await?;
    let floating_ip_faults = world.inject_floating_ip_faults(args.floating_ip_fault_rate);
    let dir = work_dir.join(format!("n{servers}"));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let (kubeconfig, region) = world.write_configs(&dir, args.cloud_timeout)?;
    let flags = OperatorFlags {
        yield_interval: args.yield_interval,
        monitor_interval: args.monitor_interval,
        cloud_timeout: args.cloud_timeout,
        wrapper: args
            .operator_wrapper
            .as_deref()
            .map(|w| w.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default(),
        max_attempts: args.max_attempts,
        concurrency: args.concurrency,
    };
    let sims_peak_is_this_size = operator::reset_own_peak_rss();
    let sims_at_start = ProcessSample::read(None)?;
    let api_server_at_start = api_server_sample(&world);
    let started = Instant::now();
    let mut operator = match go_build {
        None => {
            ControllerProcess::Ours(OperatorProcess::spawn(&kubeconfig, &region, &flags, &dir.join("operator.log"))?)
        }
        Some(build) => {
            let token = world.monitor_token().context("the world was not seeded for the Go controller")?;
            let options = GoOptions {
                namespace: crate::commands::demo::world::NAMESPACE.to_owned(),
                poll: args.monitor_interval,
                max_concurrency: args.concurrency,
                max_attempts: args.max_attempts,
                controller_gomaxprocs: None,
                log_level: "info",
                dir: dir.join("go-controller"),
            };
            ControllerProcess::Go(GoController::start(build, &kubeconfig, token, &options)?)
        }
    };
    let (settled, wall) = settle(args, &mut world, &mut operator, started).await?;
    // Every public Server running has its public IP (a floating IP whose
    // create failed is made by a later pass): waited for, bounded.
    let public = world.wait_public_ips(args.max_attempts, started, args.timeout, &mut operator).await?;
    let settled_servers = settled.iter().filter(|done| **done).count();
    let unsettled = world.unsettled(&settled, UNSETTLED_SHOWN, args.max_attempts);
    let settled = settled_servers == servers;
    eprintln!(
        "bench: {servers} Servers: {} in {:.0} s",
        if settled { "settled".to_owned() } else { format!("{settled_servers} settled") },
        wall.as_secs_f64()
    );

    world.watch_latches();
    let api = world.api_counters()?;
    let cloud = openstack_counters(&world)?;
    let cloud_log = world.cloud.openstack().map(|sim| sim.requests()).unwrap_or_default();
    let api_server_now = api_server_sample(&world);
    let metrics = operator.metrics().await.unwrap_or_default();
    let process = operator.sample()?;
    let sims = ProcessSample::read(None)?;
    let size = SizeResult {
        servers,
        settled,
        settled_servers,
        wall_seconds: wall.as_secs_f64(),
        wall_ms_per_server: per(wall.as_secs_f64() * 1000.0, servers),
        operator_cpu_seconds: process.cpu_seconds,
        operator_cpu_ms_per_server: per(process.cpu_seconds * 1000.0, servers),
        api: ApiCounts::from_counters(&api, servers),
        cloud: CloudCounts::from_counters(cloud, &cloud_log, servers),
        passes: metrics.passes,
        passes_per_server: per(metrics.passes, servers),
        listed_reads_per_server: per(metrics.listed_reads, servers),
        live_reads_per_server: per(metrics.live_reads, servers),
        rss_sims_bytes: sims.peak_rss,
        rss_sims_is_this_size: sims_peak_is_this_size,
        sims_cpu_cores: (sims.cpu_seconds - sims_at_start.cpu_seconds) / wall.as_secs_f64().max(f64::EPSILON),
        rss_operator_bytes: process.peak_rss,
        api_server_process: api_server_now.map(|now| report::ApiServerProcess {
            peak_rss_bytes: now.peak_rss,
            cpu_ms_per_server: per(
                (now.cpu_seconds - api_server_at_start.map_or(0.0, |start| start.cpu_seconds)) * 1000.0,
                servers,
            ),
        }),
        unsettled,
        public,
        floating_ip_faults,
        deletion: None,
        invariants: world.invariants(),
        restarts: operator.restarts(),
    };
    // Measured even when a few Servers did not settle: the report says so.
    let steady = if servers == args.steady_servers {
        Some(steady_window(args, &world, &mut operator, servers, settled).await?)
    } else {
        None
    };
    let mut size = size;
    if args.delete {
        eprintln!("bench: {servers} Servers: deleting every Server");
        let (api_before, cpu_before) = (world.api_counters()?, operator.sample()?.cpu_seconds);
        let mut deletion = world.delete_all_and_count_leaks(args.timeout, &mut operator).await?;
        let (api_after, cpu_after) = (world.api_counters()?, operator.sample()?.cpu_seconds);
        let consumed_lists = |counters: &server_simkube::CounterSnapshot| -> u64 {
            ["networks", "securitygroups", "sshcertificateauthorities", "identities"]
                .iter()
                .map(|resource| counters.count(server_simkube::Verb::List, resource))
                .sum()
        };
        deletion.api_requests_per_server = per(api_after.total().saturating_sub(api_before.total()) as f64, servers);
        deletion.consumed_lists_per_server =
            per(consumed_lists(&api_after).saturating_sub(consumed_lists(&api_before)) as f64, servers);
        deletion.operator_cpu_ms_per_server = per((cpu_after - cpu_before) * 1000.0, servers);
        size.deletion = Some(deletion);
    }
    // Whatever the deletion did to booted servers is the user's: the
    // invariants were counted before it; only a latch changed since counts.
    size.invariants.provisioned_at_changed = world.invariants().provisioned_at_changed;
    // The operator stops before the world it talks to.
    drop(operator);
    Ok((size, steady, world.api_server()))
}

/// How many unsettled Servers a report names.
const UNSETTLED_SHOWN: usize = 10;

/// Waits until every Server settled or the timeout; which settled, and when.
async fn settle(
    args: &Args,
    world: &mut BenchWorld,
    operator: &mut ControllerProcess,
    started: Instant,
) -> anyhow::Result<(Vec<bool>, Duration)> {
    let servers = world.tracked.len();
    let mut settled = vec![false; servers];
    let mut last_progress = Instant::now();
    loop {
        operator.check_running()?;
        world.watch_latches();
        let mut done = world.observe(&mut settled, args.max_attempts).await?;
        if done == servers {
            // Settled once is not settled now: look at every Server again.
            let elapsed = started.elapsed();
            settled.fill(false);
            done = world.observe(&mut settled, args.max_attempts).await?;
            if done == servers {
                return Ok((settled, elapsed));
            }
        }
        if started.elapsed() >= args.timeout {
            return Ok((settled, started.elapsed()));
        }
        if last_progress.elapsed() >= Duration::from_secs(15) {
            eprintln!("bench: {servers} Servers: {done} settled after {:.0} s", started.elapsed().as_secs_f64());
            last_progress = Instant::now();
        }
        tokio::time::sleep(observation_pause(servers)).await;
    }
}

/// How long the bench waits between two looks at every Server: half a
/// second, and 20 µs a Server past 25,000, so that looking (a read of each
/// unsettled Server, in the process that runs the sims) stays a small share
/// of the machine at 100,000 instead of a third of a core.
fn observation_pause(servers: usize) -> Duration {
    let per_server = Duration::from_micros(20).saturating_mul(u32::try_from(servers).unwrap_or(u32::MAX));
    Duration::from_millis(500).max(per_server)
}

/// With a converged world and nothing changing: what the operator does in a window.
async fn steady_window(
    args: &Args,
    world: &BenchWorld,
    operator: &mut ControllerProcess,
    servers: usize,
    converged: bool,
) -> anyhow::Result<SteadyState> {
    eprintln!("bench: {servers} Servers: steady-state window of {}", humantime::format_duration(args.steady_window));
    // Let the last passes and the monitor's follow-up settle before counting.
    tokio::time::sleep(args.monitor_interval + args.yield_interval).await;
    let api_before = world.api_counters()?;
    let cloud_before = openstack_counters(world)?;
    let metrics_before = operator.metrics().await?;
    let started = Instant::now();
    while started.elapsed() < args.steady_window {
        operator.check_running()?;
        tokio::time::sleep(Duration::from_millis(500).min(args.steady_window)).await;
    }
    let window = started.elapsed();
    let api_after = world.api_counters()?;
    let cloud_after = openstack_counters(world)?;
    let metrics_after: OperatorMetrics = operator.metrics().await?;
    let monitor_polls = metrics_after.monitor_polls - metrics_before.monitor_polls;
    let cloud_server_lists = cloud_after.server_lists - cloud_before.server_lists;
    Ok(SteadyState {
        servers,
        converged,
        window_seconds: window.as_secs_f64(),
        api_writes: report::writes(&api_after) - report::writes(&api_before),
        api_requests: api_after.total() - api_before.total(),
        passes: metrics_after.passes - metrics_before.passes,
        live_reads: metrics_after.live_reads - metrics_before.live_reads,
        monitor_polls,
        cloud_server_lists,
        cloud_requests: report::cloud_requests(&cloud_after) - report::cloud_requests(&cloud_before),
        cloud_server_lists_per_poll: if monitor_polls > 0.0 { cloud_server_lists as f64 / monitor_polls } else { 0.0 },
        rss_operator_bytes: operator.sample()?.peak_rss,
    })
}

/// kube-apiserver's and etcd's CPU and peak RSS together, when they are
/// processes of their own (the real API server).
fn api_server_sample(world: &BenchWorld) -> Option<ProcessSample> {
    let samples: Vec<ProcessSample> =
        world.api_server_processes().into_iter().filter_map(|pid| ProcessSample::read(Some(pid)).ok()).collect();
    (!samples.is_empty()).then(|| ProcessSample {
        cpu_seconds: samples.iter().map(|s| s.cpu_seconds).sum(),
        peak_rss: samples.iter().map(|s| s.peak_rss).sum(),
        rss: samples.iter().map(|s| s.rss).sum(),
    })
}

fn openstack_counters(world: &BenchWorld) -> anyhow::Result<server_sim_testbed::OpenStackCounters> {
    Ok(world.cloud.openstack().context("the bench's cloud is not on the OpenStack path")?.counters())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, clap::Parser)]
    struct Command {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn sizes_default_to_the_issues_and_refuse_nonsense_clearly() {
        let parse = |sizes: &[&str]| Command::try_parse_from(["bench"].iter().chain(sizes));
        assert_eq!(parse(&[]).map(|c| c.args.servers).ok(), Some(vec![1000, 3000, 10000]));
        assert_eq!(parse(&["--servers", "50,200"]).map(|c| c.args.servers).ok(), Some(vec![50, 200]));
        for refused in ["0", "ten", "1000000", "10,-3"] {
            let error = parse(&["--servers", refused]).map(|_| ()).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(error.contains("--servers"), "{refused}: {error}");
        }
    }

    #[test]
    fn user_data_is_32_kb_unless_asked_and_a_size_base64_cannot_have_is_refused() {
        let parse = |extra: &[&str]| Command::try_parse_from(["bench"].iter().chain(extra));
        assert_eq!(parse(&[]).map(|c| c.args.user_data_bytes).ok(), Some(32 * 1024));
        assert_eq!(super::observation_pause(1_000), Duration::from_millis(500));
        assert_eq!(super::observation_pause(100_000), Duration::from_secs(2));
        assert_eq!(parse(&["--user-data-bytes", "4096"]).map(|c| c.args.user_data_bytes).ok(), Some(4096));
        for refused in ["4097", "64", "65536", "4k"] {
            let error =
                parse(&["--user-data-bytes", refused]).map(|_| ()).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(error.contains("--user-data-bytes"), "{refused}: {error}");
        }
    }

    #[test]
    fn the_steady_window_is_three_minutes_unless_shortened() {
        let parse = |extra: &[&str]| Command::try_parse_from(["bench"].iter().chain(extra));
        assert_eq!(parse(&[]).map(|c| c.args.steady_window).ok(), Some(Duration::from_secs(180)));
        assert_eq!(
            parse(&["--steady-window", "20s"]).map(|c| c.args.steady_window).ok(),
            Some(Duration::from_secs(20))
        );
        assert!(parse(&["--steady-window", "0s"]).is_err());
    }
}
