//! The chart's alerts (`charts/server-controller/files/alerts.yaml`) and
//! Grafana dashboard (`files/dashboard.json`): the alerts' promtool unit
//! tests pass and each alert has a test where it fires; the dashboard is
//! valid JSON whose every query reads a metric family the operator
//! registers; and every series either reads is on `/metrics` of an operator
//! that has just started (so no rule or panel waits for a first sample that
//! only comes with trouble).
//!
//! Without promtool the promtool test skips with a message naming
//! `.ci/run-promtool-deps`; under `CI=true` it fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::{ServedDemo, free_port, get, wait_for};

fn chart() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/server-controller")
}

fn yaml(path: &str) -> Value {
    let text = std::fs::read_to_string(chart().join(path)).unwrap();
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every rule of the rule file.
fn rules() -> Vec<Value> {
    yaml("files/alerts.yaml")["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|group| group["rules"].as_array().expect("rules").clone())
        .collect()
}

/// The prefixes of the operator's metric names: its own, and the Go
/// controller's server families it exports under their names.
const PREFIXES: [&str; 2] = ["server_controller_", "unikorn_region_"];

/// The metric names an expression reads (`server_controller_...`, `unikorn_region_...`).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for prefix in PREFIXES {
        let mut rest = expr;
        while let Some(start) = rest.find(prefix) {
            let tail = &rest[start..];
            let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
            names.insert(tail[..end].to_owned());
            rest = &tail[end..];
        }
    }
    names
}

/// promtool, or `None` (with a message) outside CI when it is not installed.
fn promtool_or_skip() -> Option<&'static str> {
    let found = Command::new("promtool").arg("--version").output().is_ok_and(|output| output.status.success());
    if found {
        return Some("promtool");
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "promtool is missing; `bash .ci/run-promtool-deps` installs it"
    );
    eprintln!("skipping: promtool is missing; `bash .ci/run-promtool-deps` installs it");
    None
}

#[test]
fn the_alert_rules_pass_their_promtool_unit_tests() {
    let Some(promtool) = promtool_or_skip() else { return };
    for args in [["check", "rules", "files/alerts.yaml"], ["test", "rules", "tests/alerts-test.yaml"]] {
        let output = Command::new(promtool).args(args).current_dir(chart()).output().expect("promtool runs");
        assert!(
            output.status.success(),
            "promtool {}:\n{}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[test]
fn every_alert_has_a_unit_test_in_which_it_fires() {
    let tests = yaml("tests/alerts-test.yaml");
    let fired: BTreeSet<&str> = tests["tests"]
        .as_array()
        .expect("tests")
        .iter()
        .flat_map(|test| test["alert_rule_test"].as_array().into_iter().flatten())
        .filter(|case| case["exp_alerts"].as_array().is_some_and(|alerts| !alerts.is_empty()))
        .filter_map(|case| case["alertname"].as_str())
        .collect();
    let rules = rules();
    assert!(rules.len() >= 5, "{} rules", rules.len());
    for rule in &rules {
        let alert = rule["alert"].as_str().expect("alerting rules only");
        assert!(fired.contains(alert), "{alert} never fires in tests/alerts-test.yaml");
        assert!(rule["labels"]["severity"].is_string(), "{alert} has no severity");
    }
}

/// The dashboard, parsed.
fn dashboard() -> Value {
    let text = std::fs::read_to_string(chart().join("files/dashboard.json")).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("files/dashboard.json is not valid JSON: {e}"))
}

/// Every PromQL expression of the dashboard: its panels' queries and its
/// template variables'.
fn dashboard_exprs(dashboard: &Value) -> Vec<String> {
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            exprs.push(target["expr"].as_str().expect("expr").to_owned());
        }
    }
    for variable in dashboard["templating"]["list"].as_array().expect("templating.list") {
        if let Some(query) = variable["query"]["query"].as_str() {
            exprs.push(query.to_owned());
        }
    }
    exprs
}

/// The metric families `app/src/metrics.rs` registers: under the
/// `server_controller` prefix the names its `sub.register(` calls give, and
/// without one those of its `registry.register(` calls.
fn registered_families() -> BTreeSet<String> {
    let source = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/metrics.rs")).unwrap();
    let named = |call: &str, prefix: &str| -> Vec<String> {
        source
            .split(call)
            .skip(1)
            .filter_map(|call| call.split('"').nth(1).map(|name| format!("{prefix}{name}")))
            .collect()
    };
    named("sub.register(", "server_controller_").into_iter().chain(named("registry.register(", "")).collect()
}

/// The family a series belongs to: `_total` of a counter, `_bucket`,
/// `_sum` and `_count` of a histogram are its family's.
fn family(series: &str) -> &str {
    ["_total", "_bucket", "_sum", "_count"].iter().find_map(|suffix| series.strip_suffix(suffix)).unwrap_or(series)
}

#[test]
fn the_dashboard_is_valid_and_reads_only_registered_metric_families() {
    let dashboard = dashboard();
    assert_eq!(dashboard["uid"], "server-controller", "a stable uid keeps links working across installs");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 8, "{} panels", panels.len());
    let ids: BTreeSet<u64> = panels.iter().map(|p| p["id"].as_u64().expect("a numeric panel id")).collect();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
    for panel in panels {
        assert!(panel["title"].as_str().is_some_and(|t| !t.is_empty()), "{panel}");
        assert!(panel["targets"].as_array().is_some_and(|t| !t.is_empty()), "a panel without a query: {panel}");
    }
    let families = registered_families();
    assert!(families.len() >= 12, "{families:?}");
    let mut read = BTreeSet::new();
    for expr in dashboard_exprs(&dashboard) {
        let names = metric_names(&expr);
        assert!(!names.is_empty(), "a query that reads none of the operator's metrics: {expr}");
        for name in names {
            assert!(families.contains(family(&name)), "{name} (in {expr}) is no metric family of app/src/metrics.rs");
            read.insert(family(&name).to_owned());
        }
    }
    // What the README's metrics table tells an operator to watch is on it.
    for watched in [
        "server_controller_leader",
        "server_controller_servers",
        "server_controller_provider_create_retries",
        "server_controller_events",
        "server_controller_reconciles",
        "server_controller_monitor_poll_duration_seconds",
        "server_controller_monitor_group_failures",
        "server_controller_keystone_login_failure_streaks",
        "unikorn_region_server_state",
        "unikorn_region_server_provision_duration_seconds",
        "unikorn_region_server_scheduling_duration_seconds",
    ] {
        assert!(read.contains(watched), "the dashboard shows no {watched}");
    }
}

/// The series every rule and every dashboard query reads are exported by
/// `run` before anything happened: a counter or gauge, or a histogram's
/// `_bucket`, `_sum` and `_count`.
#[test]
fn every_series_the_alerts_and_the_dashboard_read_is_exported_from_the_start() {
    let mut wanted: BTreeSet<String> =
        rules().iter().flat_map(|rule| metric_names(rule["expr"].as_str().expect("expr"))).collect();
    assert!(wanted.len() >= 6, "{wanted:?}");
    wanted.extend(dashboard_exprs(&dashboard()).iter().flat_map(|expr| metric_names(expr)));
    // The one family whose label values are not known in advance: the kinds
    // of actions that failed. Its panel shows no series until one fails.
    wanted.remove("server_controller_action_failures_total");
    // The Go controller's server families are labelled by region and flavor:
    // no series until a poll counts a Server, or a Server first boots.
    wanted.retain(|name| !name.starts_with("unikorn_region_"));

    let demo = ServedDemo::start(0);
    let metrics = free_port();
    let mut operator = Command::new(env!("CARGO_BIN_EXE_server-controller"))
        .args(["run", "--cloud", "sim", "--sim-region", "region-a", "--namespace", "demo"])
        .args(["--leader-election-id", "alerts-test-leader"])
        .arg("--metrics-addr")
        .arg(metrics.to_string())
        .arg("--kubeconfig")
        .arg(demo.kubeconfig())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the operator starts");
    let mut body = String::new();
    wait_for("/metrics", Duration::from_secs(60), || {
        get(metrics, "/metrics").is_some_and(|(code, text)| {
            body = text;
            code == 200
        })
    });
    let _ = operator.kill();
    let _ = operator.wait();

    let exported: BTreeSet<&str> =
        body.lines().filter(|line| !line.starts_with('#')).filter_map(|line| line.split(['{', ' ']).next()).collect();
    let missing: Vec<&String> = wanted.iter().filter(|name| !exported.contains(name.as_str())).collect();
    assert!(
        missing.is_empty(),
        "read by the alerts or the dashboard but not on /metrics at the start: {missing:?}\n{body}"
    );
    assert!(
        body.lines().any(|line| line == "server_controller_monitor_interval_seconds 30.0"),
        "the monitor's interval (30 s by default) is exported:\n{body}"
    );
}
