//! A deterministic discrete-event simulation of the controller against
//! SimCloud, driving server-core's rules directly: no HTTP, no tokio, virtual
//! time. Servers arrive, get reconciled and monitored, fail in the ways their
//! cloud fates say, get deleted, reset and edited, while the controller
//! restarts, its writes conflict or get lost and its watch lags. Every step
//! is checked against DESIGN §12 invariants 1–6, 9 and 10, using the cloud's
//! ground truth where the status could lie.
//!
//! ```
//! use server_sim::simulate::{SimConfig, run};
//! let report = run(&SimConfig::new(50, 7));
//! assert!(report.passed(), "{report}");
//! assert_eq!(report.trace_hash, run(&SimConfig::new(50, 7)).trace_hash);
//! ```

mod checker;
mod config;
mod engine;
mod executor;
mod queue;
mod report;
mod rules;
mod trace;
mod world;

use std::collections::BTreeMap;
use std::time::Instant;

pub use config::{KubeFaults, SimConfig, SimTiming};
pub use report::{KubeStats, Report, Violation};
pub use rules::Rules;

use engine::Engine;
use trace::Trace;

/// Runs the simulation with server-core's rules.
pub fn run(config: &SimConfig) -> Report {
    run_with(config, Rules::CORE)
}

/// Runs the simulation with the given rules (a test may plug in broken ones).
pub fn run_with(config: &SimConfig, rules: Rules) -> Report {
    let started = Instant::now();
    let mut engine = if config.replay_check {
        let mut first = simulate(config, rules, Trace::recording());
        let recorded = first.trace.take_recorded();
        let first_hash = first.trace.finish();
        let mut second = simulate(config, rules, Trace::replaying(recorded));
        let diverged = second.trace.divergence.or_else(|| {
            let same_length = second.trace.expected_steps() == usize::try_from(second.step).ok();
            (!same_length || second.trace.finish() != first_hash).then_some(second.step)
        });
        if let Some(step) = diverged {
            second.step = step;
            second.violation("9", 0, format!("the replay with the same seed diverged at step {step}"));
        }
        second
    } else {
        simulate(config, rules, Trace::default())
    };
    engine.final_checks();
    report(&engine, started.elapsed().as_secs_f64())
}

fn simulate(config: &SimConfig, rules: Rules, trace: Trace) -> Engine {
    let mut engine = Engine::new(config.clone(), rules, trace);
    engine.plan();
    engine.run();
    engine
}

impl Engine {
    /// Invariant 6 once more at the end: nothing of a removed Server remains,
    /// however late a stale pass acted.
    fn final_checks(&mut self) {
        for i in 0..self.objs.len() {
            let Some(obj) = self.objs.get(i) else { continue };
            if obj.exists || obj.rv == 0 {
                continue;
            }
            let live = self.cloud.truth(&obj.server.meta.uid, self.now_ts).live;
            if live > 0 {
                self.violation("6", i, format!("{live} provider server(s) remain for a removed Server at the end"));
            }
        }
    }
}

fn report(engine: &Engine, wall_seconds: f64) -> Report {
    let config = &engine.config;
    let mut outcomes = BTreeMap::new();
    let mut fates = BTreeMap::new();
    for obj in &engine.objs {
        *outcomes.entry(engine.outcome_of(obj)).or_insert(0) += 1;
        *fates.entry(obj.fate.as_str()).or_insert(0) += 1;
    }
    let cloud = engine.cloud.counters();
    let steps = engine.step;
    Report {
        servers: config.servers,
        seed: config.seed,
        max_attempts: engine.options.max_attempts(),
        fault_rate: config.fault_rate,
        steps,
        virtual_seconds: engine.now as f64 / 1000.0,
        wall_seconds,
        steps_per_second: if wall_seconds > 0.0 { steps as f64 / wall_seconds } else { 0.0 },
        trace_hash: format!("{:016x}", engine.trace.finish()),
        outcomes,
        fates,
        create_attempts: cloud.creates_accepted,
        cloud,
        kube: engine.stats.clone(),
        violation_count: engine.violations.count,
        violations: engine.violations.list.clone(),
    }
}

#[cfg(test)]
mod tests;
