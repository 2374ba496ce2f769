//! kubectl, a client this project did not write, against `demo --serve`:
//! `get servers` shows the CRD's printer columns through SimKube's
//! server-side printing, and `get events` and `describe` work.
//!
//! Needs `kubectl` on PATH. Without it the test passes with a note, except
//! under CI (`CI=true`), where a missing kubectl is a failure: `.ci/run-kubectl-deps`
//! installs it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::{Command, Stdio};

use support::ServedDemo;

fn kubectl(demo: &ServedDemo, args: &[&str]) -> String {
    let output = Command::new("kubectl")
        .args(args)
        .arg("--cache-dir")
        .arg(demo.dir.join("cache"))
        .env("KUBECONFIG", demo.dir.join("kubeconfig"))
        .output()
        .expect("kubectl runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "kubectl {} failed ({}):\n{stdout}\n{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Whether kubectl can run here; panics under CI, where it must.
fn kubectl_available() -> bool {
    let found = Command::new("kubectl")
        .args(["version", "--client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "kubectl is missing under CI; .ci/run-kubectl-deps installs it (Debian package kubernetes-client)"
        );
        eprintln!("skipping: kubectl is not on PATH (install Debian's kubernetes-client to run this test)");
    }
    found
}

fn columns(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

#[test]
fn kubectl_lists_describes_and_shows_events() {
    if !kubectl_available() {
        return;
    }
    let demo = ServedDemo::start(5);

    let servers = kubectl(&demo, &["get", "servers"]);
    let mut lines = servers.lines();
    let header = lines.next().expect("a header line");
    assert_eq!(columns(header), ["NAME", "STATUS", "AGE", "PRIVATEIP", "PUBLICIP"], "{servers}");
    let rows: Vec<Vec<&str>> = lines.map(columns).collect();
    // Five servers, one of which the demo deletes midway.
    assert_eq!(rows.len(), 4, "{servers}");
    for row in &rows {
        assert!(row[0].starts_with("server-"), "{servers}");
        assert!(matches!(row[1], "Provisioned" | "Errored"), "unexpected status in {row:?}:\n{servers}");
        // Ages are rendered by the server ("12s"), not passed through as timestamps.
        assert!(row[2].ends_with('s') || row[2].ends_with('m'), "unexpected age in {row:?}");
    }
    for status in ["Provisioned", "Errored"] {
        assert!(rows.iter().any(|row| row[1] == status), "no {status} server:\n{servers}");
    }

    let one = kubectl(&demo, &["get", "server", "server-000"]);
    assert_eq!(one.lines().count(), 2, "{one}");
    assert!(one.contains("server-000"), "{one}");

    let events = kubectl(&demo, &["get", "events"]);
    assert_eq!(
        columns(events.lines().next().unwrap_or_default()),
        ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    );
    assert!(events.contains("ProviderCreateFailed"), "{events}");
    assert!(events.contains("server/server-001"), "{events}");

    let described = kubectl(&demo, &["describe", "server", "server-000"]);
    assert!(described.lines().any(|line| columns(line) == ["Name:", "server-000"]), "{described}");
    assert!(described.contains("Provisioned"), "{described}");
}
