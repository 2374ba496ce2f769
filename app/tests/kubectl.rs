//! kubectl, a client this project did not write, against the `demo --serve`
//! playground, running what a user runs: `apply` with validation on (a typo
//! refused), `get -w`, `wait`, `describe` with events, `explain`, `diff` and
//! `--dry-run=server`, `delete --wait`, `get ns`, and the NotFound a deleted
//! Server gets.
//!
//! Needs `kubectl` on PATH. Without it the test passes with a note, except
//! under CI (`CI=true`), where a missing kubectl is a failure: `.ci/build-control-plane`
//! builds it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::{Command, Stdio};

use support::ServedDemo;

fn kubectl_output(demo: &ServedDemo, args: &[&str]) -> std::process::Output {
    Command::new("kubectl")
        .args(args)
        .arg("--cache-dir")
        .arg(demo.dir.join("cache"))
        .env("KUBECONFIG", demo.dir.join("kubeconfig"))
        .output()
        .expect("kubectl runs")
}

fn kubectl(demo: &ServedDemo, args: &[&str]) -> String {
    let output = kubectl_output(demo, args);
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

/// kubectl expected to fail: its stderr.
fn kubectl_fails(demo: &ServedDemo, args: &[&str]) -> String {
    let output = kubectl_output(demo, args);
    assert!(
        !output.status.success(),
        "kubectl {} succeeded:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
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
            "kubectl is missing under CI; .ci/build-control-plane builds it and .ci/run puts it on PATH"
        );
        eprintln!("skipping: kubectl is not on PATH (`bash .ci/build-control-plane` builds one)");
    }
    found
}

fn columns(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// A table row's cells, cut where the header's columns start (a cell may be
/// empty, or hold spaces).
fn cells(header: &str, line: &str) -> Vec<String> {
    let mut starts: Vec<usize> = header
        .char_indices()
        .filter(|&(i, c)| c != ' ' && (i == 0 || header.as_bytes()[i - 1] == b' '))
        .map(|(i, _)| i)
        .collect();
    starts.push(usize::MAX);
    starts.windows(2).map(|w| line.get(w[0]..w[1].min(line.len())).unwrap_or_default().trim().to_owned()).collect()
}

#[test]
fn kubectl_lists_describes_and_shows_events() {
    if !kubectl_available() {
        return;
    }
    // The fates are seeded, the cloud's random 503s and lost answers are
    // drawn in call order: a change of timing can land one on server-001's
    // last create, which then parks with no server ("not found"). This test
    // reads the columns, so its cloud answers every write.
    let demo = ServedDemo::start_with(5, &["--write-failure-rate", "0", "--lost-create-rate", "0"]);

    // The columns tell the truth at a glance: what the provider says, what
    // the controller did, the failures counted, the age, and the provider's
    // last word. A server that vanished after boot is not shown `Running`,
    // a Server parked at the cap not `Queued` (the phase, whose values the
    // upstream CRD fixes and which keeps its last value, is in -o wide).
    let servers = kubectl(&demo, &["get", "servers"]);
    let mut lines = servers.lines();
    let header = lines.next().expect("a header line");
    assert_eq!(columns(header), ["NAME", "HEALTH", "AVAILABLE", "FAILURES", "AGE", "PROVIDER"], "{servers}");
    let rows: Vec<Vec<String>> = lines.map(|line| cells(header, line)).collect();
    // Five servers, one of which the demo deletes midway.
    assert_eq!(rows.len(), 4, "{servers}");
    for row in &rows {
        assert!(row[0].starts_with("server-"), "{servers}");
        // Ages are rendered by the server ("12s"), not passed through as timestamps.
        assert!(row[4].ends_with('s') || row[4].ends_with('m'), "unexpected age in {row:?}");
    }
    let row =
        |name: &str| rows.iter().find(|row| row[0] == name).cloned().unwrap_or_else(|| panic!("{name}: {servers}"));
    // server-001 fails before launch every time: parked at the cap of 3.
    assert_eq!(
        row("server-001")[1..],
        ["Errored", "Errored", "3", &row("server-001")[4], "Server is in an error state"],
        "{servers}"
    );
    // server-004 booted and then vanished: parked, and said to be gone.
    let vanished = row("server-004");
    assert_eq!(
        [&vanished[1], &vanished[2], &vanished[5]],
        ["Unknown", "Errored", "Server not found at the provider"],
        "{servers}"
    );
    assert!(!servers.lines().any(|line| line.contains("Running") || line.contains("Queued")), "{servers}");
    let wide = kubectl(&demo, &["get", "srv", "-o", "wide"]);
    let wide_header = wide.lines().next().unwrap_or_default();
    assert_eq!(
        cells(wide_header, wide_header),
        [
            "NAME",
            "HEALTH",
            "AVAILABLE",
            "FAILURES",
            "AGE",
            "PROVIDER",
            "PHASE",
            "PRIVATEIP",
            "PUBLICIP",
            "FLAVOR",
            "IMAGE"
        ],
        "{wide}"
    );

    // Every park's Available message ends with the one command that un-parks it.
    let message = |name: &str| {
        kubectl(
            &demo,
            &["get", "server", name, "-o", r#"jsonpath={.status.conditions[?(@.type=="Available")].message}"#],
        )
    };
    let at_cap = message("server-001");
    assert!(
        at_cap.ends_with("kubectl annotate server server-001 -n demo server-controller.unikorn-cloud.org/retry=now"),
        "{at_cap}"
    );
    let missing = message("server-004");
    assert!(missing.ends_with("kubectl delete server server-004 -n demo"), "{missing}");

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

    // describe reads core/v1 Events: the operator's events.k8s.io ones.
    let parked = kubectl(&demo, &["describe", "server", "server-001"]);
    let events = parked.split_once("Events:").map(|(_, events)| events).unwrap_or_default();
    assert!(events.contains("ProviderCreateFailed"), "{parked}");
    assert!(events.contains("server-controller"), "the reporting controller is shown: {parked}");
}

/// The playground's example Server, as the "try this" block names it.
const EXAMPLE: &str = "server-controller-demo-server.yaml";

#[test]
fn a_user_applies_watches_explains_diffs_and_deletes_a_server() {
    if !kubectl_available() {
        return;
    }
    let demo = ServedDemo::start_with(3, &["--create-failure-rate", "0"]);
    let example = demo.dir.join(EXAMPLE);
    let example = example.to_str().expect("a UTF-8 path");

    // Validation on (kubectl's default): the server validates strictly.
    let applied = kubectl(&demo, &["apply", "-f", example]);
    assert!(applied.contains("server.region.unikorn-cloud.org/my-server created"), "{applied}");
    let typo = demo.dir.join("typo.yaml");
    let manifest = std::fs::read_to_string(example)
        .expect("the example")
        .replace("kind: Server", "kind: Server\nstatuz: {}")
        .replace("my-server", "typo");
    std::fs::write(&typo, manifest).expect("written");
    let refused = kubectl_fails(&demo, &["apply", "-f", typo.to_str().expect("UTF-8")]);
    assert!(refused.contains("unknown field \"statuz\""), "{refused}");

    // The operator keeps running in the playground: the Server goes Running.
    kubectl(&demo, &["wait", "--for=jsonpath={.status.phase}=Running", "server/my-server", "--timeout=60s"]);
    let watched = kubectl(&demo, &["get", "server", "my-server", "-w", "--request-timeout=2s"]);
    assert!(watched.lines().any(|line| line.starts_with("my-server")), "{watched}");

    let explained = kubectl(&demo, &["explain", "server.spec"]);
    assert!(explained.contains("KIND:       Server") && explained.contains("flavorID"), "{explained}");

    // diff and a server-side dry run show the change without making it.
    let edited = demo.dir.join("edited.yaml");
    let manifest = std::fs::read_to_string(example).expect("the example");
    std::fs::write(&edited, manifest.replace("000000000001", "0000000000ff")).expect("written");
    let edited = edited.to_str().expect("UTF-8");
    let diff = kubectl_output(&demo, &["diff", "-f", edited]);
    assert_eq!(diff.status.code(), Some(1), "kubectl diff exits 1 when it finds differences: {diff:?}");
    let diff = String::from_utf8_lossy(&diff.stdout);
    assert!(diff.contains("+  flavorID: 6a2b1c3d-0000-4000-8000-0000000000ff"), "{diff}");
    let dry = kubectl(&demo, &["apply", "-f", edited, "--dry-run=server"]);
    assert!(dry.contains("(server dry run)"), "{dry}");
    let flavor = kubectl(&demo, &["get", "server", "my-server", "-o", "jsonpath={.spec.flavorID}"]);
    assert_eq!(flavor, "6a2b1c3d-0000-4000-8000-000000000001", "a dry run changes nothing");

    let namespaces = kubectl(&demo, &["get", "ns"]);
    assert!(namespaces.lines().any(|line| columns(line).starts_with(&["demo", "Active"])), "{namespaces}");

    let deleted = kubectl(&demo, &["delete", "server", "my-server", "--wait", "--timeout=60s"]);
    assert!(deleted.contains("deleted"), "{deleted}");
    let gone = kubectl_fails(&demo, &["get", "server", "my-server"]);
    assert!(
        gone.contains(r#"Error from server (NotFound): servers.region.unikorn-cloud.org "my-server" not found"#),
        "{gone}"
    );
}
