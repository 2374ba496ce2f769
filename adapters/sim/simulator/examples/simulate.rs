//! The simulator without the CLI, for profiling:
//! `cargo run --release -p server-simulator --example simulate -- SERVERS SEED [THREADS [EXPLAIN]]`.

fn main() {
    let mut args = std::env::args().skip(1);
    let servers = args.next().and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let seed = args.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let mut config = server_simulator::SimConfig::new(servers, seed);
    config.threads = args.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    config.explain = args.next().and_then(|s| s.trim_start_matches("server-").parse().ok());
    let report = server_simulator::run(&config);
    print!("{report}");
    if !report.passed() {
        std::process::exit(1);
    }
}
