//! `server-controller explain` on a parked Server of `demo --serve`: it says
//! where the Server stands and how to un-park it, and writes nothing; then
//! the documented way to un-park it, `kubectl annotate ... retry=...`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Command;

use support::{ServedDemo, wait_for};

/// How long a retry may take to be consumed and spent again.
const RETRY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(90);

fn explain(demo: &ServedDemo, target: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_server-controller"))
        .args(["explain", target, "--kubeconfig"])
        .arg(demo.kubeconfig())
        .env_remove("SERVER_CONTROLLER_OPENSTACK_CONFIGS")
        .output()
        .expect("explain runs")
}

fn kubectl(demo: &ServedDemo, args: &[&str]) -> String {
    let output =
        Command::new("kubectl").args(args).env("KUBECONFIG", demo.kubeconfig()).output().expect("kubectl runs");
    assert!(output.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

fn resource_version(demo: &ServedDemo, name: &str) -> String {
    kubectl(demo, &["get", "server", name, "-n", "demo", "-o", "jsonpath={.metadata.resourceVersion}"])
}

#[test]
fn explain_says_why_a_server_is_parked_and_how_to_retry_it() {
    // The demo's second Server exhausts its create attempts and parks.
    let demo = ServedDemo::start(3);
    let before = resource_version(&demo, "server-001");
    let output = explain(&demo, "demo/server-001");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}{text}", String::from_utf8_lossy(&output.stderr));
    assert!(text.starts_with("Server demo/server-001 (generation 1)\n"), "{text}");
    assert!(text.contains("parked: 3 of 3 create attempts failed before launch"), "{text}");
    assert!(
        text.contains("un-park:   fix the cause (image, flavor, capacity), then request a retry: kubectl annotate server server-001 -n demo server-controller.unikorn-cloud.org/retry=now"),
        "{text}"
    );
    assert!(text.contains("identity:  identity-a (ready)"), "{text}");
    // No cloud configuration given: the provider's view is unknown, the
    // command says what it would need and decides nothing it cannot know.
    assert!(
        text.contains("provider:  unknown: this command was given no cloud configuration for region region-a"),
        "{text}"
    );
    assert!(text.contains("--openstack-config region-a=FILE or --openstack-secret region-a=NAMESPACE/NAME"), "{text}");
    assert!(text.contains("not guessed"), "{text}");
    assert!(!text.contains("would now") && !text.contains("create provider server"), "{text}");
    assert_eq!(resource_version(&demo, "server-001"), before, "explain wrote to the Server");

    // The documented un-park: an annotation, consumed once, recorded in an event.
    kubectl(
        &demo,
        &["annotate", "server", "server-001", "-n", "demo", "server-controller.unikorn-cloud.org/retry=now"],
    );
    wait_for("the retry annotation to be consumed", RETRY_TIMEOUT, || {
        let annotations =
            kubectl(&demo, &["get", "server", "server-001", "-n", "demo", "-o", "jsonpath={.metadata.annotations}"]);
        !annotations.contains("server-controller.unikorn-cloud.org/retry\"")
    });
    let events: serde_json::Value =
        serde_json::from_str(&kubectl(&demo, &["get", "events", "-n", "demo", "-o", "json"])).unwrap();
    let retried = events["items"].as_array().unwrap().iter().any(|event| {
        event["reason"] == "RetryRequested"
            && event["involvedObject"]["name"] == "server-001"
            && event["message"].as_str().is_some_and(|m| m.contains("3 failed create attempts forgotten"))
    });
    assert!(retried, "no RetryRequested event for server-001: {events}");
    // Its cloud fate fails every boot: it creates again and parks again.
    wait_for("server-001 to spend its attempts again", RETRY_TIMEOUT, || {
        let text = String::from_utf8_lossy(&explain(&demo, "demo/server-001").stdout).into_owned();
        text.contains("parked: 3 of 3 create attempts failed before launch") && !text.contains("RetryRequested")
    });
}

#[test]
fn explain_names_what_it_cannot_find() {
    let demo = ServedDemo::start(1);
    let output = explain(&demo, "demo/no-such-server");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stderr.trim_end(),
        "error: cannot explain Server demo/no-such-server: there is no Server no-such-server in namespace demo \
         (`kubectl get servers -n demo` lists them)"
    );

    let output = explain(&demo, "a/b/c");
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("is not NAME or NAMESPACE/NAME"));
}

/// A NAME alone is looked up in the kubeconfig context's namespace, as
/// kubectl does (the playground's context names `demo`); and the binary run
/// as `kubectl-server_explain` is the kubectl plugin `kubectl server-explain`.
#[test]
fn explain_takes_the_kubeconfig_namespace_and_runs_as_a_kubectl_plugin() {
    let demo = ServedDemo::start(1);
    let output = explain(&demo, "server-000");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}{text}", String::from_utf8_lossy(&output.stderr));
    assert!(text.starts_with("Server demo/server-000 (generation 1)\n"), "{text}");

    let plugins = demo.dir.join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugin dir");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_server-controller"), plugins.join("kubectl-server_explain"))
        .expect("symlink");
    let path = format!("{}:{}", plugins.display(), std::env::var("PATH").unwrap_or_default());
    let output = Command::new("kubectl")
        .args(["server-explain", "server-000", "-n", "demo"])
        .env("PATH", path)
        .env("KUBECONFIG", demo.kubeconfig())
        .env_remove("SERVER_CONTROLLER_OPENSTACK_CONFIGS")
        .output()
        .expect("kubectl runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}{text}", String::from_utf8_lossy(&output.stderr));
    assert!(text.starts_with("Server demo/server-000 (generation 1)\n"), "{text}");
}
