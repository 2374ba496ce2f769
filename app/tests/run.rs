//! `server-controller run` against the in-process API server of `demo --serve`:
//! it connects through a kubeconfig, turns ready once its caches are filled,
//! serves Prometheus metrics, and on SIGTERM finishes its work and exits 0.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{ServedDemo, free_port, get, wait_for};

#[test]
fn run_serves_probes_and_metrics_and_exits_cleanly_on_sigterm() {
    // An empty playground: `--cloud sim` refuses Servers another operator's
    // cloud holds (below), so this one gets a Server of its own.
    let demo = ServedDemo::start(0);
    let metrics = free_port();
    let mut operator = Command::new(env!("CARGO_BIN_EXE_server-controller"))
        .args(["run", "--cloud", "sim", "--sim-region", "region-a", "--namespace", "demo"])
        .args(["--yield-interval", "200ms", "--monitor-interval", "200ms", "--log-format", "json"])
        // The demo's own operator holds the default Lease; this one leads on its own.
        .args(["--leader-election-id", "run-test-leader"])
        .arg("--metrics-addr")
        .arg(metrics.to_string())
        .arg("--kubeconfig")
        .arg(demo.kubeconfig())
        // The flag wins over the environment.
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the operator starts");

    wait_for("/healthz", Duration::from_secs(60), || get(metrics, "/healthz").is_some_and(|(code, _)| code == 200));
    wait_for("/readyz to turn ready", Duration::from_secs(60), || {
        get(metrics, "/readyz").is_some_and(|(code, _)| code == 200)
    });
    let applied = Command::new("kubectl")
        .arg("apply")
        .arg("-f")
        .arg(demo.dir.join("server-controller-demo-server.yaml"))
        .env("KUBECONFIG", demo.kubeconfig())
        .output()
        .expect("kubectl runs");
    assert!(applied.status.success(), "kubectl apply: {}", String::from_utf8_lossy(&applied.stderr));
    wait_for("reconcile metrics", Duration::from_secs(60), || {
        get(metrics, "/metrics").is_some_and(|(_, body)| body.contains("server_controller_reconciles_total{"))
    });
    let (_, body) = get(metrics, "/metrics").unwrap();
    assert!(body.contains("server_controller_monitor_poll_duration_seconds"), "{body}");

    let term = Command::new("kill").args(["-TERM", &operator.id().to_string()]).status().expect("kill runs");
    assert!(term.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = operator.try_wait().expect("the operator can be waited on") {
            break status;
        }
        assert!(Instant::now() < deadline, "the operator did not exit within 30 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "the operator exited with {status} after SIGTERM");
}

#[test]
fn an_unreadable_kubeconfig_is_a_startup_error_naming_the_file() {
    let output = Command::new(env!("CARGO_BIN_EXE_server-controller"))
        .args(["run", "--kubeconfig", "/nonexistent/server-controller.kubeconfig", "--metrics-addr"])
        .arg(free_port().to_string())
        .stdin(Stdio::null())
        .output()
        .expect("the operator starts");
    // It never ran: a command-line error, not an operator that stopped.
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The path once, unquoted; the cause once.
    assert_eq!(
        stderr.trim_end(),
        "error: cannot read the kubeconfig /nonexistent/server-controller.kubeconfig: No such file or directory (os \
         error 2)"
    );
    assert!(!stderr.contains("operator stopped"), "{stderr}");
}

#[test]
fn run_with_the_simulated_cloud_refuses_servers_whose_provider_servers_are_elsewhere() {
    let demo = ServedDemo::start(2);
    let output = Command::new(env!("CARGO_BIN_EXE_server-controller"))
        .args(["run", "--cloud", "sim", "--sim-region", "region-a", "--namespace", "demo"])
        .args(["--leader-election-id", "run-test-refused"])
        .arg("--metrics-addr")
        .arg(free_port().to_string())
        .arg("--kubeconfig")
        .arg(demo.kubeconfig())
        .stdin(Stdio::null())
        .output()
        .expect("the operator starts");
    assert!(!output.status.success(), "it started over the playground's Servers");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("2 Server(s) of its regions already carry the controller's finalizer"), "{stderr}");
}

#[test]
fn run_serves_an_openstack_and_a_simulated_region_side_by_side_and_refuses_a_region_given_twice() {
    let demo = ServedDemo::start(0);
    // An OpenStack region's configuration; no call reaches it in this test.
    let config = demo.dir.join("region-o.json");
    std::fs::write(&config, r#"{"authURL": "http://127.0.0.1:9/v3", "region": "RegionOne"}"#).unwrap();
    let run = |regions: &[&str], leader_id: &str, metrics: std::net::SocketAddr| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_server-controller"));
        command
            .args(["run", "--namespace", "demo", "--leader-election-id", leader_id])
            .args(regions)
            .arg("--metrics-addr")
            .arg(metrics.to_string())
            .arg("--kubeconfig")
            .arg(demo.kubeconfig())
            .stdin(Stdio::null());
        command
    };
    let openstack = format!("region-o={}", config.display());

    let twice = run(&["--openstack-config", &openstack, "--sim-region", "region-o"], "run-test-twice", free_port())
        .output()
        .expect("the operator starts");
    assert!(!twice.status.success(), "it started with one region of two kinds");
    let stderr = String::from_utf8_lossy(&twice.stderr);
    assert!(
        stderr.contains("region region-o is given both as an OpenStack region and as --sim-region; give it once"),
        "{stderr}"
    );

    let metrics = free_port();
    let both = run(&["--openstack-config", &openstack, "--sim-region", "region-a"], "run-test-both", metrics)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the operator starts");
    wait_for("/readyz to turn ready", Duration::from_secs(60), || {
        get(metrics, "/readyz").is_some_and(|(code, _)| code == 200)
    });
    let term = Command::new("kill").args(["-TERM", &both.id().to_string()]).status().expect("kill runs");
    assert!(term.success());
    let output = both.wait_with_output().expect("the operator can be waited on");
    assert!(output.status.success(), "the operator exited with {} after SIGTERM", output.status);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("regions=region-a=simulated,region-o=openstack"), "{stderr}");
}

/// A probe port already taken: one line naming the address and the cause
/// once, exit code 2, before any API server is asked.
#[test]
fn a_taken_metrics_port_is_a_startup_error_naming_the_address_once() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let addr = taken.local_addr().expect("its address");
    let output = Command::new(env!("CARGO_BIN_EXE_server-controller"))
        .args(["run", "--kubeconfig", "/nonexistent/kubeconfig", "--metrics-addr"])
        .arg(addr.to_string())
        .stdin(Stdio::null())
        .output()
        .expect("the operator starts");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.starts_with(&format!("error: cannot serve /metrics, /healthz and /readyz on {addr}")), "{stderr}");
    assert_eq!(stderr.matches("in use").count(), 1, "the cause said more than once: {stderr}");
}

/// Timeouts are checked against each other at start: a region whose
/// `requestTimeout` is longer than `--cloud-timeout` is refused, naming both.
#[test]
fn a_region_request_timeout_longer_than_the_cloud_timeout_is_refused_at_start() {
    let demo = ServedDemo::start(1);
    let config = demo.dir.join("region-a.json");
    std::fs::write(
        &config,
        r#"{"authURL": "https://keystone.example:5000/v3", "region": "RegionOne", "requestTimeout": "2m"}"#,
    )
    .expect("written");
    let output = Command::new(env!("CARGO_BIN_EXE_server-controller"))
        .args(["run", "--no-monitor", "--cloud-timeout", "60s", "--metrics-addr"])
        .arg(free_port().to_string())
        .arg("--openstack-config")
        .arg(format!("region-a={}", config.display()))
        .arg("--kubeconfig")
        .arg(demo.kubeconfig())
        .stdin(Stdio::null())
        .output()
        .expect("the operator starts");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "error: region region-a's requestTimeout (2m) is longer than --cloud-timeout (1m); set requestTimeout at \
             or under --cloud-timeout, or raise --cloud-timeout"
        ),
        "{stderr}"
    );
}

/// `run --shadow` reads OpenStack regions only and says so when given none;
/// `--shadow-once` means nothing without `--shadow`. Neither binds the probes
/// port (a Go controller beside it holds :8080).
#[test]
fn run_shadow_needs_a_region_to_read_and_shadow_once_needs_shadow() {
    let demo = ServedDemo::start(1);
    let output = Command::new(env!("CARGO_BIN_EXE_server-controller"))
        .args(["run", "--shadow", "--shadow-once", "--kubeconfig"])
        .arg(demo.kubeconfig())
        .stdin(Stdio::null())
        .output()
        .expect("the operator starts");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.starts_with("error: no region to read: --shadow reads OpenStack regions"), "{stderr}");

    let output = Command::new(env!("CARGO_BIN_EXE_server-controller"))
        .args(["run", "--shadow-once"])
        .stdin(Stdio::null())
        .output()
        .expect("the operator starts");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("--shadow"), "{output:?}");
}
