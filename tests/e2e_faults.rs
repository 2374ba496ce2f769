//! The same scenarios with SimKube misbehaving: conflicts and 500s on writes
//! and reads, and watches cut short. The operator must still converge, and
//! the invariants (at most max creates, one provider server per Server, no
//! booted server deleted, clean deletion) must still hold.

use server_core::model::reference_finalizer;
use server_e2e::cloud::Fate;
use server_e2e::simkube::{FaultConfig, FaultKind, Verb};
use server_e2e::*;

fn faults() -> FaultConfig {
    FaultConfig::none()
        .with_error_rate(Verb::Patch, FaultKind::Conflict, 0.15)
        .with_error_rate(Verb::Patch, FaultKind::Internal, 0.1)
        .with_error_rate(Verb::Get, FaultKind::Internal, 0.1)
        .with_error_rate(Verb::List, FaultKind::Internal, 0.1)
        .with_error_rate(Verb::Create, FaultKind::Internal, 0.1)
        .with_watch_cut_probability(0.2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenarios_converge_under_api_faults() {
    within(async {
        let mut env = Env::new(31).await;
        env.sim.faults().set(faults());
        let happy = env.create_server("happy", fast(Fate::clean()), Env::spec());
        let flaky = env.create_server("flaky", fast(Fate::failing_boots(2)), Env::spec());
        let doomed = env.create_server("doomed", fast(Fate::failing_forever()), Env::spec());
        let data = env.create_server(
            "data",
            fast(Fate::error_after_launch(std::time::Duration::from_millis(400))),
            Env::spec(),
        );
        env.start();

        for name in ["happy", "flaky"] {
            env.wait_server(name, "Running and Available", |s| {
                phase(s) == "Running" && available_reason(s) == "Provisioned" && status(s).provisioned_at.is_some()
            })
            .await;
        }
        env.wait_server("doomed", "parked at the cap", |s| {
            available_reason(s) == "Errored" && available_message(s).contains("failed after 3 attempts")
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
            env.sim.store().delete("servers", Some(NAMESPACE), name).unwrap_or_else(|e| panic!("deleting {name}: {e}"));
        }
        for name in ["happy", "flaky", "doomed", "data"] {
            env.wait(&format!("{name} is gone"), || env.server(name).is_none()).await;
            let reference = reference_finalizer(name);
            for (plural, resource) in
                [("networks", NETWORK), ("securitygroups", SECURITY_GROUP), ("identities", IDENTITY)]
            {
                assert!(!env.finalizers(plural, resource).contains(&reference), "{plural} keeps {name}'s reference");
            }
        }
        assert_eq!(env.cloud.live_servers(), 0, "a provider server outlived its Server");
        env.assert_invariants();
        env.stop().await;
    })
    .await;
}
