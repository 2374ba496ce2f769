//! The same scenarios with SimKube misbehaving: conflicts and 500s on writes
//! and reads, and watches cut short. The operator must still converge, and
//! the invariants (at most max creates, one provider server per Server, no
//! booted server deleted, clean deletion) must still hold.
//!
//! And the operator's caches of consumed resources lagging or frozen: a
//! stale cache may cost a conflict and a retry, never a wrong decision.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;
use server_core::ParkKind;
use server_core::model::reference_finalizer;
use server_e2e::cloud::Fate;
use server_e2e::simkube::{FaultConfig, FaultKind, Verb};
use server_e2e::*;
use server_kube::ControllerConfig;

// Fault injection into the API (errors, cut and refused watches): SimKube's.
simkube_scenarios!(
    scenarios_converge_under_api_faults,
    a_network_newer_than_the_cache_is_confirmed_not_reported_unknown,
    a_frozen_cache_only_conflicts_and_never_leaks_a_reference,
    a_boot_the_monitor_could_not_write_is_latched_at_once,
    a_release_reads_live_until_the_cache_caught_up_with_its_references,
);

fn faults() -> FaultConfig {
    FaultConfig::none()
        .with_error_rate(Verb::Patch, FaultKind::Conflict, 0.15)
        .with_error_rate(Verb::Patch, FaultKind::Internal, 0.1)
        .with_error_rate(Verb::Get, FaultKind::Internal, 0.1)
        .with_error_rate(Verb::List, FaultKind::Internal, 0.1)
        .with_error_rate(Verb::Create, FaultKind::Internal, 0.1)
        .with_watch_cut_probability(0.2)
}

async fn scenarios_converge_under_api_faults(kind: CloudKind) {
    let mut env = Env::new(kind, 31).await;
    env.sim().faults().set(faults());
    let happy = env.create_server("happy", fast(Fate::clean()), Env::spec());
    let flaky = env.create_server("flaky", fast(Fate::failing_boots(2)), Env::spec());
    let doomed = env.create_server("doomed", fast(Fate::failing_forever()), Env::spec());
    let data = env.create_server("data", fast(Fate::error_after_launch(Duration::from_millis(400))), Env::spec());
    env.start();

    for name in ["happy", "flaky"] {
        env.wait_server(name, "Running and Available", |s| {
            phase(s) == "Running" && available_reason(s) == "Provisioned" && status(s).provisioned_at.is_some()
        })
        .await;
    }
    env.wait_server("doomed", "parked at the cap", |s| {
        available_reason(s) == "Errored" && env.park(s) == Some(ParkKind::AtCap)
    })
    .await;
    env.wait_server("data", "booted, then ERROR observed", |s| {
        status(s).provisioned_at.is_some()
            && condition(s, "Healthy").is_some_and(|c| c.0 == "False" && c.1 == "Errored")
    })
    .await;
    env.idle(10).await;

    assert_eq!(env.truth(&happy).creates_accepted, 1);
    assert_eq!(env.truth(&flaky).creates_accepted, 3);
    assert_eq!(env.truth(&doomed).creates_accepted, 3, "more than max creates");
    let data_truth = env.truth(&data);
    assert_eq!((data_truth.creates_accepted, data_truth.delete_calls), (1, 0), "{data_truth:?}");
    for uid in [&happy, &flaky, &doomed] {
        assert_eq!(env.truth(uid).launched_deleted, 0, "{uid}: a booted server was deleted");
    }
    let server = env.server("flaky").unwrap_or_else(|| panic!("gone"));
    assert_eq!(status(&server).provider_create_failures, 2, "a conflict counted a failure twice");
    let counters = env.counters();
    assert!(counters.total_faults() > 0 && counters.watch_cuts > 0, "no fault was injected: {counters:?}");
    println!("faults injected: {:?}, watch cuts: {}", counters.injected_faults, counters.watch_cuts);

    // Deletion still cleans up everything (deletes go through the store, so
    // the harness itself is not subject to the faults).
    for name in ["happy", "flaky", "doomed", "data"] {
        env.sim().store().delete("servers", Some(NAMESPACE), name).unwrap_or_else(|e| panic!("deleting {name}: {e}"));
    }
    for name in ["happy", "flaky", "doomed", "data"] {
        env.wait(&format!("{name} is gone"), || env.server(name).is_none()).await;
        let reference = reference_finalizer(name);
        for (plural, resource) in [("networks", NETWORK), ("securitygroups", SECURITY_GROUP), ("identities", IDENTITY)]
        {
            assert!(!env.finalizers(plural, resource).contains(&reference), "{plural} keeps {name}'s reference");
        }
    }
    assert_eq!(env.cloud.live_servers(), 0, "a provider server outlived its Server");
    for uid in [&happy, &flaky, &doomed, &data] {
        env.assert_released(uid);
    }
    env.assert_invariants();
    env.stop().await;
}

/// The operator's cache of Networks lags the API server (each networks watch
/// is cut after one event and every networks request is answered 1.5 s late).
/// A Network created together with the Server that names it is not in the
/// cache when the Server's first pass runs: the pass confirms the absence
/// with a live list and finds it, so the Server never reports it unknown.
async fn a_network_newer_than_the_cache_is_confirmed_not_reported_unknown(kind: CloudKind) {
    let mut env = Env::new(kind, 32).await;
    let lag = Duration::from_millis(1500);
    env.sim().faults().set(
        FaultConfig::none().only_resources(["networks"]).with_watch_cut_after(1).with_latency(lag, Duration::ZERO),
    );
    env.start();
    // Any Network event now cuts the watch: the cache then lags by `lag`.
    env.wait("the networks watch to be open", || env.counters().count(Verb::Watch, "networks") >= 1).await;
    env.seed("networks", "trigger", json!({"prefix": "192.168.1.0/24"}));
    env.wait("the networks watch to be cut", || env.counters().watch_cuts >= 1).await;

    let late = "5b0f3c2e-1d4a-4e6b-8c7d-9e0f1a2b3c4d";
    env.seed("networks", late, json!({"prefix": "192.168.2.0/24"}));
    let mut spec = Env::spec();
    spec["networks"] = json!([{ "id": late }]);
    let uid = env.create_server("late", fast(Fate::clean()), spec);
    let reported_unknown = AtomicBool::new(false);
    env.wait_server("late", "Running and Available", |s| {
        if available_message(s).contains("unknown resource ID") {
            reported_unknown.store(true, Ordering::SeqCst);
        }
        phase(s) == "Running" && available_reason(s) == "Provisioned"
    })
    .await;
    assert!(!reported_unknown.load(Ordering::SeqCst), "a Network the cache lacked was reported unknown");
    assert!(env.counters().count(Verb::List, "networks") >= 2, "no live list: the cache did not lag");
    assert!(env.finalizers("networks", late).contains(&reference_finalizer("late")));
    assert_eq!(env.truth(&uid).creates_accepted, 1);
    env.sim().faults().clear();
    env.assert_invariants();
    env.stop().await;
}

/// The operator's cache of Networks is frozen (its watch cut after one event,
/// every reconnect refused) before a Server references a Network. Its later
/// passes see the Network without the reference: re-adding it with the
/// outdated resourceVersion conflicts, and the pass yields instead of acting
/// on the stale view. Deleted meanwhile, the Server reads its references
/// live before releasing them, so none is left behind.
async fn a_frozen_cache_only_conflicts_and_never_leaks_a_reference(kind: CloudKind) {
    let mut env = Env::new(kind, 33).await;
    env.sim().faults().set(FaultConfig::none().only_resources(["networks"]).with_watch_cut_after(1));
    env.start();
    env.wait("the networks watch to be open", || env.counters().count(Verb::Watch, "networks") >= 1).await;
    // Let the open watch get past fault injection before refusing the next ones.
    env.idle(2).await;
    env.sim().faults().fail_next(Verb::Watch, Some("networks"), FaultKind::Internal, u32::MAX);
    env.seed("networks", "trigger", json!({"prefix": "192.168.1.0/24"}));
    env.wait("the networks watch to be cut", || env.counters().watch_cuts >= 1).await;

    let uid = env.create_server("brief", fast(Fate::clean()), Env::spec());
    let reference = reference_finalizer("brief");
    env.wait("the provider server and its Network reference", || {
        env.truth(&uid).live == 1 && env.finalizers("networks", NETWORK).contains(&reference)
    })
    .await;
    // Passes after it still find the reference absent in the frozen cache,
    // but the reference writer knows it wrote it: no second write.
    env.idle(10).await;
    assert_eq!(env.counters().count(Verb::Patch, "networks"), 1, "the reference was written again");
    let held = env.finalizers("networks", NETWORK);
    assert_eq!(held.iter().filter(|f| **f == reference).count(), 1, "{held:?}");

    env.delete_server("brief").await;
    env.wait("the Server is gone", || env.server("brief").is_none()).await;
    env.sim().faults().clear();
    for (plural, name) in [("networks", NETWORK), ("securitygroups", SECURITY_GROUP), ("identities", IDENTITY)] {
        assert!(!env.finalizers(plural, name).contains(&reference), "{plural}/{name} keeps the reference");
    }
    let truth = env.truth(&uid);
    assert_eq!((truth.creates_accepted, truth.live), (1, 0), "{truth:?}");
    env.assert_released(&uid);
    env.assert_invariants();
    env.stop().await;
}

/// The monitor lists a boot and its latch write is refused: a pass is woken
/// and latches it at once, not a poll later (by then the server may be gone,
/// and a Server whose boot nobody latched would be created again).
async fn a_boot_the_monitor_could_not_write_is_latched_at_once(kind: CloudKind) {
    let poll = Duration::from_secs(4);
    let mut env = Env::with_config(kind, 41, ControllerConfig { monitor_interval: poll, ..test_config() }).await;
    env.create_server("late-boot", Fate::clean().with_build_time(Duration::from_secs(6)), Env::spec());
    env.start();
    // The first poll (at 4 s) writes the build; the boot (at 6 s) is the
    // next poll's, and its patch is the next one the Server gets.
    env.wait_server("late-boot", "the build written by the monitor", |s| {
        matches!(phase(s).as_str(), "Queued" | "Building")
    })
    .await;
    assert!(status(&env.server("late-boot").unwrap_or_else(|| panic!("gone"))).provisioned_at.is_none());
    env.sim().faults().fail_next(Verb::Patch, Some("servers"), FaultKind::Conflict, 1);
    let refused = || env.counters().injected_faults.values().sum::<u64>() > 0;
    env.wait("the monitor's latch refused", refused).await;
    let since = std::time::Instant::now();
    env.wait_server("late-boot", "provisionedAt latched", |s| status(s).provisioned_at.is_some()).await;
    assert!(
        since.elapsed() < poll / 2,
        "latched {:?} after the refusal: by the next poll, not a pass",
        since.elapsed()
    );
    let truth = env.truth(&env.server("late-boot").and_then(|s| s.metadata.uid).unwrap_or_default());
    assert_eq!(truth.creates_accepted, 1);
    env.stop().await;
}

/// A deleting Server is released on a read that holds every reference
/// written so far. The term's first release lists live; a release whose
/// cache is behind this term's own reference writes (its watch held) lists
/// live again; once the cache has caught up, releases read it and list
/// nothing.
async fn a_release_reads_live_until_the_cache_caught_up_with_its_references(kind: CloudKind) {
    let mut env = Env::new(kind, 43).await;
    let early: Vec<String> = ["early-a", "early-b", "early-c"].iter().map(|name| (*name).to_owned()).collect();
    for name in &early {
        env.create_server(name, fast(Fate::clean()), Env::spec());
    }
    env.start();
    let running = |s: &server_kube::crd::Server| phase(s) == "Running" && status(s).provisioned_at.is_some();
    for name in &early {
        env.wait_server(name, "Running", running).await;
    }
    let delete = |names: &[String]| {
        let names = names.to_vec();
        let env = &env;
        async move {
            for name in &names {
                env.delete_server(name).await;
            }
            env.wait("the Servers are gone", || names.iter().all(|name| env.server(name).is_none())).await;
            for name in &names {
                let reference = reference_finalizer(name);
                for (plural, object) in
                    [("networks", NETWORK), ("securitygroups", SECURITY_GROUP), ("identities", IDENTITY)]
                {
                    assert!(
                        !env.finalizers(plural, object).contains(&reference),
                        "{plural}/{object} keeps {reference}"
                    );
                }
            }
        }
    };
    let listed_while = async |deleting: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + '_>>| {
        let before = consumed_reads(&env.counters());
        deleting.await;
        consumed_reads(&env.counters()) - before
    };
    assert!(listed_while(Box::pin(delete(&early[..1]))).await > 0, "the term's first release read no list");

    // The cache of Networks stops at the late Server's reference write.
    env.sim().faults().set(FaultConfig::none().with_watch_held("networks"));
    let uid = env.create_server("late", fast(Fate::clean()), Env::spec());
    env.wait_server("late", "Running", running).await;
    assert!(env.finalizers("networks", NETWORK).contains(&reference_finalizer("late")));
    let late = ["late".to_owned()];
    assert!(listed_while(Box::pin(delete(&late))).await > 0, "released on a cache behind its own reference write");
    env.assert_released(&uid);

    env.sim().faults().clear();
    env.idle(2).await;
    assert_eq!(listed_while(Box::pin(delete(&early[1..]))).await, 0, "a release listed what its caught-up cache holds");
    env.assert_invariants();
    env.stop().await;
}
