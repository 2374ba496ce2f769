//! `server-controller explain` on a parked Server of `demo --serve`: it says
//! where the Server stands and how to un-park it, and writes nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Command;

use support::ServedDemo;

fn explain(demo: &ServedDemo, target: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_server-controller"))
        .args(["explain", target, "--kubeconfig"])
        .arg(demo.kubeconfig())
        .env_remove("SERVER_CONTROLLER_OPENSTACK_CONFIGS")
        .output()
        .expect("explain runs")
}

fn resource_version(demo: &ServedDemo, name: &str) -> String {
    let output = Command::new("kubectl")
        .args(["get", "server", name, "-n", "demo", "-o", "jsonpath={.metadata.resourceVersion}"])
        .env("KUBECONFIG", demo.kubeconfig())
        .output()
        .expect("kubectl runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
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
    assert!(text.contains("status.providerCreateFailures to 0"), "{text}");
    assert!(text.contains("identity:  identity-a (ready)"), "{text}");
    // No cloud configuration given: the provider is not asked, and nothing
    // is created or deleted on that account.
    assert!(text.contains("provider:  could not be read (no cloud is configured for region region-a"), "{text}");
    assert!(!text.contains("create provider server"), "{text}");
    assert_eq!(resource_version(&demo, "server-001"), before, "explain wrote to the Server");
}

#[test]
fn explain_names_what_it_cannot_find() {
    let demo = ServedDemo::start(1);
    let output = explain(&demo, "demo/no-such-server");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cannot explain Server demo/no-such-server"), "{stderr}");
    assert!(stderr.contains("not found"), "{stderr}");

    let output = explain(&demo, "no-namespace");
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("is not NAMESPACE/NAME"));
}
