//! A deterministic discrete-event simulation of the controller against
//! SimCloud, driving server-core's rules directly: no HTTP, no tokio, virtual
//! time. Servers arrive, get reconciled and monitored, fail in the ways their
//! cloud fates say, get deleted, reset, retried, paused and edited, some on
//! a provider server another controller made (adopted), while two
//! controller replicas elect a leader (`ha`), the leader crashes and
//! freezes, writes conflict or get lost and watches lag. Passes take their
//! provider view from their replica's latest monitor list when it holds one
//! (`term`: that memory belongs to a leadership term) and read live when
//! server-core's `live_read_needed` says so. Every step is checked against
//! DESIGN §12 invariants 1–6, 9, 10 and 13 (11 on the election), using the
//! cloud's ground truth where the status could lie, and that no pass
//! decides on a view listed before its term.
//!
//! ```
//! use server_simulator::{SimConfig, run};
//! let report = run(&SimConfig::new(50, 7));
//! assert!(report.passed(), "{report}");
//! assert_eq!(report.trace_hash, run(&SimConfig::new(50, 7)).trace_hash);
//! ```

mod api_server;
mod checker;
mod config;
mod engine;
mod explain;
mod ha;
mod queue;
mod replicas;
mod report;
mod rules;
mod term;
mod trace;
mod world;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

pub use config::{KubeFaults, RelistWakes, SimConfig, SimTiming};
pub use ha::HaConfig;
pub use report::{KubeStats, Report, Violation};
pub use rules::DecisionRules;

use engine::{Engine, Shard};
use ha::Timeline;
use report::merge_counts;
use trace::Trace;

use server_simcloud::Counters;
use server_simcloud::rng::Fnv1a;

/// Runs the simulation with server-core's rules.
pub fn run(config: &SimConfig) -> Report {
    run_with(config, DecisionRules::CORE)
}

/// Runs the simulation with the given rules (a test may plug in broken ones).
///
/// The Servers are split into fixed shards (by count only) that run on
/// `config.threads` threads; the result does not depend on the thread count.
pub fn run_with(config: &SimConfig, rules: DecisionRules) -> Report {
    let started = Instant::now();
    let shards = Shard::layout(config.servers, config.shard_size);
    // One set of controller replicas for every shard.
    let timeline = ha::elect(&config.ha, config.seed, config.kube.restarts, &config.timing);
    let threads = match config.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
    .clamp(1, shards.len().max(1));
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<ShardResult>>> = Mutex::new((0..shards.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                while let Some(shard) = shards.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let result = run_shard(config, *shard, rules, &timeline);
                    let mut slots = results.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                    if let Some(slot) = slots.get_mut(shard.index) {
                        *slot = Some(result);
                    }
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut report = merge(config, results.into_iter().flatten().collect(), started.elapsed().as_secs_f64());
    if timeline.overlap_ms > 0 {
        report.violation_count += 1;
        report.violations.push(Violation {
            invariant: "11",
            seed: config.seed,
            shard: 0,
            step: 0,
            at_ms: 0,
            server: String::new(),
            message: format!("two controller replicas could act at once for {} ms", timeline.overlap_ms),
        });
    }
    report
}

/// One shard, start to end (twice, compared step by step, with the replay check).
fn run_shard(config: &SimConfig, shard: Shard, rules: DecisionRules, timeline: &Timeline) -> ShardResult {
    let mut engine = if config.replay_check {
        let mut first = simulate(config, shard, rules, timeline, Trace::recording());
        let (recorded, first_hash) = first.take_recorded_trace();
        drop(first);
        let mut second = simulate(config, shard, rules, timeline, Trace::replaying(recorded));
        second.check_replay(first_hash);
        second
    } else {
        simulate(config, shard, rules, timeline, Trace::default())
    };
    engine.final_checks();
    engine.result()
}

fn simulate(config: &SimConfig, shard: Shard, rules: DecisionRules, timeline: &Timeline, trace: Trace) -> Engine {
    let mut engine = Engine::new(config.clone(), shard, rules, trace);
    engine.plan(timeline);
    engine.run();
    engine
}

/// What a shard contributes to the report (the engine itself is dropped on
/// its thread).
#[derive(Debug)]
struct ShardResult {
    steps: u64,
    now: u64,
    trace_hash: u64,
    outcomes: BTreeMap<&'static str, u64>,
    fates: BTreeMap<&'static str, u64>,
    cloud: Counters,
    kube: KubeStats,
    violation_count: u64,
    violations: Vec<Violation>,
    explain: Vec<String>,
}

fn merge(config: &SimConfig, results: Vec<ShardResult>, wall_seconds: f64) -> Report {
    let mut report = Report {
        servers: config.servers,
        seed: config.seed,
        max_attempts: server_core::Options::with_max_attempts(config.max_attempts).max_attempts(),
        fault_rate: config.fault_rate,
        steps: 0,
        virtual_seconds: 0.0,
        wall_seconds,
        steps_per_second: 0.0,
        trace_hash: String::new(),
        outcomes: BTreeMap::new(),
        fates: BTreeMap::new(),
        create_attempts: 0,
        cloud: Counters::default(),
        kube: KubeStats::default(),
        violation_count: 0,
        violations: Vec::new(),
        explain: Vec::new(),
    };
    // The run's hash: FNV-1a over the shards' hashes, in shard order.
    let mut trace = Fnv1a::new();
    let mut now = 0;
    for result in results {
        trace.write_u64(result.trace_hash);
        report.steps += result.steps;
        now = now.max(result.now);
        merge_counts(&mut report.outcomes, &result.outcomes);
        merge_counts(&mut report.fates, &result.fates);
        report.cloud.merge(&result.cloud);
        report.kube.merge(&result.kube);
        report.violation_count += result.violation_count;
        let room = config.max_reported_violations.saturating_sub(report.violations.len());
        report.violations.extend(result.violations.into_iter().take(room));
        report.explain.extend(result.explain);
    }
    report.trace_hash = format!("{:016x}", trace.finish());
    report.virtual_seconds = now as f64 / 1000.0;
    report.create_attempts = report.cloud.creates_accepted;
    report.steps_per_second = if wall_seconds > 0.0 { report.steps as f64 / wall_seconds } else { 0.0 };
    report
}

#[cfg(test)]
mod tests;
