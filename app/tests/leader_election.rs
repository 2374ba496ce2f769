//! Two `server-controller run` processes on one API server (the in-process
//! one of `demo --serve`), as two replicas of the Deployment: one leads, the
//! other is ready but idle, and SIGTERM on the leader hands the Lease over
//! within one retry period. And a probe port that cannot be bound stops the
//! process at start-up, naming the address.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{ServedDemo, free_port, get, wait_for};

/// The retry period both replicas run with.
const RETRY: Duration = Duration::from_millis(500);

/// The `server_controller_leader` gauge of a replica.
fn leader_gauge(metrics: SocketAddr) -> Option<u8> {
    let (_, body) = get(metrics, "/metrics")?;
    body.lines().find_map(|line| line.strip_prefix("server_controller_leader ")).and_then(|v| v.trim().parse().ok())
}

fn replica(demo: &ServedDemo, name: &str, metrics: SocketAddr) -> Child {
    Command::new(env!("CARGO_BIN_EXE_server-controller"))
        .args(["run", "--cloud", "sim", "--sim-region", "region-a", "--namespace", "demo"])
        .args(["--yield-interval", "200ms", "--monitor-interval", "200ms", "--log-format", "json"])
        // The demo's own operator holds the default Lease of "demo"; these
        // two elect on one of their own there (SimKube, like an API server,
        // refuses objects in a namespace that does not exist).
        .args(["--leader-election-id", "replicas-leader"])
        .args(["--leader-election-lease-duration", "3s", "--leader-election-renew-deadline", "2s"])
        .args(["--leader-election-retry-period", "500ms"])
        .arg("--metrics-addr")
        .arg(metrics.to_string())
        .env("KUBECONFIG", demo.kubeconfig())
        .env("POD_NAME", name)
        .stdin(Stdio::null())
        .stdout(log(demo, name))
        .stderr(log(demo, name))
        .spawn()
        .expect("the operator starts")
}

/// Where a replica's log goes (stdout and stderr).
fn log(demo: &ServedDemo, name: &str) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(demo.dir.join(format!("{name}.log")))
        .expect("a log file")
}

fn read_log(demo: &ServedDemo, name: &str) -> String {
    std::fs::read_to_string(demo.dir.join(format!("{name}.log"))).unwrap_or_default()
}

fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let term = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill runs");
    assert!(term.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().expect("the operator can be waited on") {
            return status;
        }
        assert!(Instant::now() < deadline, "the operator did not exit within 30 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn one_of_two_replicas_leads_and_sigterm_hands_over_within_one_retry_period() {
    // An empty playground: `run --cloud sim` refuses Servers whose provider
    // servers are in the demo's own cloud, and the election needs none.
    let demo = ServedDemo::start(0);
    let (metrics_a, metrics_b) = (free_port(), free_port());
    let mut a = replica(&demo, "replica-a", metrics_a);
    wait_for("replica-a to lead", Duration::from_secs(60), || leader_gauge(metrics_a) == Some(1));
    let mut b = replica(&demo, "replica-b", metrics_b);
    wait_for("replica-b to turn ready as a follower", Duration::from_secs(60), || {
        get(metrics_b, "/readyz").is_some_and(|(code, _)| code == 200)
    });
    // Several retry periods: the follower never takes a held Lease.
    let watch_until = Instant::now() + RETRY * 6;
    while Instant::now() < watch_until {
        assert_eq!(leader_gauge(metrics_b), Some(0), "the follower acts while the leader holds the Lease");
        assert_eq!(leader_gauge(metrics_a), Some(1), "the leader lost the Lease without a cause");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(get(metrics_b, "/healthz").map(|(code, _)| code), Some(200));
    // The follower says who leads, once, when it sees the holder change.
    let follower = read_log(&demo, "replica-b");
    let said: Vec<&str> = follower.lines().filter(|line| line.contains("another replica leads")).collect();
    assert_eq!(said.len(), 1, "{follower}");
    assert!(said[0].contains(r#""holder":"replica-a""#), "{follower}");

    let terminated = Instant::now();
    let status = terminate(&mut a);
    assert!(status.success(), "the leader exited with {status} after SIGTERM");
    wait_for("replica-b to take over", Duration::from_secs(10), || leader_gauge(metrics_b) == Some(1));
    let handover = terminated.elapsed();
    println!("SIGTERM to the follower leading: {} ms", handover.as_millis());
    // The released Lease is free at the follower's next retry; the gauge is
    // sampled every 250 ms, and the leader drains its passes first.
    assert!(handover < RETRY * 4, "handover took {handover:?}, more than one retry period plus the drain");

    let status = terminate(&mut b);
    assert!(status.success(), "the second leader exited with {status}");
}

#[test]
fn a_probe_port_in_use_is_a_startup_error_naming_the_address() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let addr = taken.local_addr().expect("its address");
    let output = Command::new(env!("CARGO_BIN_EXE_server-controller"))
        .args(["run", "--cloud", "sim", "--metrics-addr", &addr.to_string()])
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .stdin(Stdio::null())
        .output()
        .expect("the operator starts");
    assert!(!output.status.success(), "the operator ran without its probes");
    let logs = String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
    assert!(logs.contains(&addr.to_string()), "the error does not name {addr}: {logs}");
}
