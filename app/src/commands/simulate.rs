//! `simulate`: the deterministic discrete-event simulation of the controller
//! against SimCloud (server-simulator), checking DESIGN §12 at every step. Exits
//! non-zero on any violation, printing the seed and step that reproduce it.

use std::io::{self, Write};
use std::process::ExitCode;

use server_simulator::{self as simulate, SimConfig};

/// Arguments of `simulate`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// How many Servers to simulate.
    #[arg(long, default_value_t = 10_000)]
    servers: usize,

    /// Seed of every random choice: the same seed replays the same run.
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// `provider-create-max-attempts` (1 to 100).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=super::run::MAX_ATTEMPTS_BOUND))]
    max_attempts: i32,

    /// Share of Servers (0..=1) with a faulty cloud fate; every other fault
    /// (read failures, write conflicts, stale watches, ...) scales with it.
    #[arg(long, default_value_t = 0.3, value_parser = crate::commands::parse_rate)]
    fault_rate: f64,

    /// Controller replicas: 2 elect a leader on a Lease (the leader crashes
    /// and freezes during the run); 1 runs without election.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=2))]
    replicas: u8,

    /// Run twice and compare the traces step by step (invariant 9).
    #[arg(long)]
    replay_check: bool,

    /// Log every step of one Server (`server-N` or `N`), e.g. the one a
    /// violation names, to see what the controller read, decided and did.
    #[arg(long, value_name = "SERVER", value_parser = parse_server)]
    explain: Option<usize>,

    /// Threads to run the simulation's shards on (0: one per core). The
    /// result does not depend on it.
    #[arg(long, default_value_t = 0)]
    threads: usize,

    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Output {
    Text,
    Json,
}

fn parse_server(value: &str) -> Result<usize, String> {
    let index = value.strip_prefix("server-").unwrap_or(value);
    index.parse().map_err(|_| format!("{value:?} is not a server name (server-N) or index"))
}

pub(crate) fn run(args: &Args) -> ExitCode {
    let mut config = SimConfig::with_fault_rate(args.servers, args.seed, args.fault_rate);
    config.max_attempts = args.max_attempts;
    config.replay_check = args.replay_check;
    config.ha.replicas = args.replicas;
    config.explain = args.explain;
    config.threads = args.threads;
    let report = simulate::run(&config);
    let printed = match args.output {
        Output::Text => format!("{report}"),
        Output::Json => match serde_json::to_string_pretty(&report) {
            Ok(json) => json + "\n",
            Err(error) => {
                eprintln!("error: cannot encode the report: {error}");
                return ExitCode::from(2);
            }
        },
    };
    if let Err(error) = io::stdout().lock().write_all(printed.as_bytes()) {
        eprintln!("error: cannot write the report: {error}");
        return ExitCode::from(2);
    }
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "{} invariant violation(s); reproduce with: server-controller simulate --servers {} --seed {} --max-attempts {} --fault-rate {}",
            report.violation_count, args.servers, args.seed, args.max_attempts, args.fault_rate
        );
        ExitCode::FAILURE
    }
}
