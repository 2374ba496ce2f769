//! The end-to-end scenarios on the reference API server: the operator (one
//! replica, on a real Lease) against kube-apiserver and etcd, every write and
//! read through the API, the cloud SimCloud's port. The same scenarios run
//! against SimKube in e2e_lifecycle, e2e_retry and e2e_watch; here the API
//! server is the real one, so merge patches, resourceVersion preconditions,
//! watch bookmarks, paging and Events are kube-apiserver's own.
//!
//! Needs the control plane of `.ci/build-control-plane` (skipped without it
//! outside CI).

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use server_e2e::cloud::Fate;
use server_e2e::ha::Replica;
use server_e2e::real::{RealWorld, running, wait_api};
use server_e2e::{Env, NETWORK, SECURITY_GROUP, fast, test_config, within};

const PATIENCE: Duration = Duration::from_secs(60);
const RETRYING: &str = "ProviderCreateRetrying";
const FAILED: &str = "ProviderCreateFailed";

async fn wait_for(what: &str, check: impl FnMut() -> bool) {
    wait_api(what, PATIENCE, check).await;
}

async fn wait_server(world: &RealWorld, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    wait_for(&format!("{name}: {what}"), || {
        last = world.server(name).unwrap_or(Value::Null);
        check(&last)
    })
    .await;
    last
}

fn available(server: &Value) -> (String, String) {
    let conditions = server["status"]["conditions"].as_array().cloned().unwrap_or_default();
    let found = conditions.iter().find(|c| c["type"] == "Available").cloned().unwrap_or(Value::Null);
    (found["status"].as_str().unwrap_or_default().into(), found["reason"].as_str().unwrap_or_default().into())
}

fn failures(server: &Value) -> u64 {
    server["status"]["providerCreateFailures"].as_u64().unwrap_or(0)
}

async fn operator(world: &RealWorld) -> Replica {
    let kube = world.kube_config(None).await;
    let replica = Replica::start_on(world.cloud.port(), "operator", kube, &test_config(), Duration::ZERO);
    let started = Instant::now();
    while !replica.leads() {
        assert!(started.elapsed() < PATIENCE, "the operator never led");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    replica
}

/// A clean Server, one that fails to boot twice, and one that never boots:
/// Running, Running after two retries, parked at the cap until an operator
/// resets the counter; then every deletion releases the cloud and the
/// references on the shared Network and SecurityGroup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_retries_park_and_deletion_on_the_real_api_server() {
    within(async {
        let Some(world) = RealWorld::start(101) else { return };
        let happy = world.create_server_with_fate("happy", fast(Fate::clean()), Env::spec());
        let flaky = world.create_server_with_fate("flaky", fast(Fate::failing_boots(2)), Env::spec());
        let doomed = world.create_server_with_fate("doomed", fast(Fate::failing_forever()), Env::spec());
        let mut operator = operator(&world).await;

        wait_server(&world, "happy", "Running", running).await;
        assert!(!world.finalizers("networks", NETWORK).is_empty(), "the Network holds no reference");
        assert!(!world.finalizers("securitygroups", SECURITY_GROUP).is_empty(), "the SecurityGroup holds no reference");

        let server = wait_server(&world, "flaky", "Running after two retries", running).await;
        assert_eq!(failures(&server), 2, "{server:#}");
        let truth = world.cloud.truth(&flaky);
        assert_eq!((truth.creates_accepted, truth.launched_deleted), (3, 0), "{truth:?}");
        wait_for("two retry events", || world.events("flaky").get(RETRYING) == Some(&2)).await;

        let server = wait_server(&world, "doomed", "parked at the cap", |s| {
            failures(s) == 3 && available(s) == ("False".into(), "Errored".into())
        })
        .await;
        assert_eq!(world.cloud.truth(&doomed).creates_accepted, 3, "{server:#}");
        wait_for("one ProviderCreateFailed", || world.events("doomed").get(FAILED) == Some(&1)).await;
        // Parked: no further create while nobody resets it.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(world.cloud.truth(&doomed).creates_accepted, 3, "a parked Server was created again");

        // An operator's reset through the status subresource re-arms it.
        let reset = json!({ "status": { "providerCreateFailures": 0 } }).to_string();
        let args = ["-n", "e2e", "patch", "server", "doomed", "--subresource=status", "--type=merge", "-p"];
        world.plane.kubectl_ok(&[&args[..], &[reset.as_str()]].concat());
        wait_for("a create after the reset", || world.cloud.truth(&doomed).creates_accepted > 3).await;
        wait_server(&world, "doomed", "parked again", |s| failures(s) == 3).await;

        for name in ["happy", "flaky", "doomed"] {
            world.plane.kubectl_ok(&["-n", "e2e", "delete", "server", name, "--wait=false"]);
        }
        for name in ["happy", "flaky", "doomed"] {
            wait_for(&format!("{name} gone"), || world.server(name).is_none()).await;
        }
        for uid in [&happy, &flaky, &doomed] {
            assert_eq!(world.cloud.truth(uid).live, 0, "{uid} left a provider server");
        }
        wait_for("the Network released", || world.finalizers("networks", NETWORK).is_empty()).await;
        wait_for("the SecurityGroup released", || world.finalizers("securitygroups", SECURITY_GROUP).is_empty()).await;
        operator.terminate().await;
    })
    .await
}

/// A Server whose status this controller cannot read does not stop the
/// others, before or after the start, and pause stops all work on one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_odd_server_and_a_paused_one_do_not_hold_up_the_others() {
    within(async {
        let Some(world) = RealWorld::start(102) else { return };
        // The CRD leaves condition statuses open (its phases are an enum).
        let odd = world.create_server_with_fate("a-odd", fast(Fate::clean()), Env::spec());
        let odd_status = json!({ "status": {
            "conditions": [{ "type": "Healthy", "status": "Maybe", "reason": "Errored",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z" }],
        }})
        .to_string();
        let args = ["-n", "e2e", "patch", "server", "a-odd", "--subresource=status", "--type=merge", "-p"];
        world.plane.kubectl_ok(&[&args[..], &[odd_status.as_str()]].concat());
        let mut paused_spec = Env::spec();
        paused_spec["pause"] = json!(true);
        let paused = world.create_server("paused", paused_spec);
        for name in ["b1", "b2"] {
            world.create_server_with_fate(name, fast(Fate::clean()), Env::spec());
        }
        let mut operator = operator(&world).await;
        for name in ["b1", "b2"] {
            wait_server(&world, name, "Running", running).await;
        }
        world.create_server_with_fate("b3", fast(Fate::clean()), Env::spec());
        wait_server(&world, "b3", "Running", running).await;
        assert_eq!(world.cloud.truth(&paused).create_calls, 0, "a paused Server reached the cloud");
        assert!(world.cloud.truth(&odd).live <= 1);

        // Unpaused, it is reconciled.
        let resume = json!({ "spec": { "pause": false } }).to_string();
        world.plane.kubectl_ok(&["-n", "e2e", "patch", "server", "paused", "--type=merge", "-p", &resume]);
        wait_server(&world, "paused", "Running once unpaused", running).await;
        operator.terminate().await;
    })
    .await
}
