//! The provider's three views end to end: unknown reads never lead to a
//! second server, a refused create parks until the spec changes, and a
//! booted server that disappears is reported, not recreated.

use std::time::Duration;

use serde_json::json;
use server_core::ParkKind;
use server_e2e::cloud::{CloudConfig, Fate};
use server_e2e::*;

cloud_scenarios!(
    failing_and_timing_out_reads_never_make_a_second_server,
    a_refused_create_parks_until_the_spec_changes,
    a_provisioned_server_that_disappears_is_reported_once_and_not_recreated,
);

/// Reads time out or fail around the create, and the create's own answer is
/// lost: the Server still ends with exactly one provider server.
async fn failing_and_timing_out_reads_never_make_a_second_server(kind: CloudKind) {
    let cloud = CloudConfig { read_failure_rate: 0.5, lost_create_rate: 1.0, ..CloudConfig::reliable(21) };
    let mut env = Env::with_cloud(kind, 21, cloud).await;
    let uid = env.create_server("unsure", fast(Fate::clean().with_failed_reads(4)), Env::spec());
    // A second one whose first reads all time out before its create.
    let uid2 = env.create_server("unsure-2", fast(Fate::clean().with_failed_reads(8)), Env::spec());
    env.start();
    for name in ["unsure", "unsure-2"] {
        env.wait_server(name, "Running and Available", |s| {
            phase(s) == "Running" && available_reason(s) == "Provisioned"
        })
        .await;
    }
    for uid in [&uid, &uid2] {
        let truth = env.truth(uid);
        assert_eq!((truth.creates_accepted, truth.live, truth.delete_calls), (1, 1, 0), "{uid}: {truth:?}");
    }
    assert!(env.cloud.counters().injected_failures > 0, "no read failed: the test proves nothing");
    if let Some(openstack) = env.openstack_counters() {
        // Lost create answers reached the adapter as 504s; the retried creates
        // found the server (no duplicate, see assert_invariants) and its port.
        assert_eq!(openstack.port_creates, 2, "{openstack:?}");
        for uid in [&uid, &uid2] {
            assert_eq!(env.openstack_ports_of(uid), Some(1), "{uid}");
        }
    }
    env.assert_invariants();
    env.stop().await;
}

/// Quota: parked with the provider's message, one event, no retry storm; a
/// spec change re-arms it.
async fn a_refused_create_parks_until_the_spec_changes(kind: CloudKind) {
    let mut env = Env::new(kind, 22).await;
    let uid = env.create_server("quota", fast(Fate::refused(1)), Env::spec());
    env.start();
    // The refusal is recorded before the status is written: wait for both.
    let parked = env
        .wait_server("quota", "parked as refused, with Available Errored", |s| {
            env.park(s) == Some(ParkKind::Refused) && available_reason(s) == "Errored"
        })
        .await;
    // The user is told what the provider said.
    assert!(available_message(&parked).contains("Quota exceeded"), "{}", available_message(&parked));
    env.idle(15).await;
    assert_eq!(env.truth(&uid).create_calls, 1, "a refused create was retried");
    assert_eq!(env.event_count("quota", "ProviderCreateRefused"), 1, "{:?}", env.events("quota"));

    env.patch_spec("quota", json!({ "tags": [{ "name": "quota", "value": "raised" }] })).await;
    env.wait_server("quota", "Running after the spec change", |s| {
        phase(s) == "Running" && available_reason(s) == "Provisioned"
    })
    .await;
    let truth = env.truth(&uid);
    assert_eq!((truth.create_calls, truth.creates_accepted), (2, 1), "{truth:?}");
    if let Some(openstack) = env.openstack_counters() {
        // The refused attempt's port is brought up to date and reused.
        assert_eq!((openstack.port_creates, openstack.server_creates), (1, 2), "{openstack:?}");
        assert_eq!(env.openstack_ports_of(&uid), Some(1));
    }
    env.assert_invariants();
    env.stop().await;
}

/// Deleted behind the operator's back after it booted: reported once and
/// parked, never recreated. The monitor sees the absence at its next poll;
/// the reconciler acts on it at the next resync (a status write that leaves
/// the ProviderCreateFailure predicate unchanged wakes nothing).
async fn a_provisioned_server_that_disappears_is_reported_once_and_not_recreated(kind: CloudKind) {
    let mut env = Env::with_config(kind, 23, config_with_resync(Duration::from_millis(300))).await;
    let fate = fast(Fate::vanish_after_launch(Duration::from_millis(500)));
    let uid = env.create_server("vanishing", fate, Env::spec());
    env.start();
    env.wait_server("vanishing", "booted", |s| status(s).provisioned_at.is_some()).await;
    let server = env
        .wait_server("vanishing", "reported missing", |s| {
            available_reason(s) == "Errored" && env.park(s) == Some(ParkKind::MissingAfterBoot)
        })
        .await;
    assert!(status(&server).provisioned_at.is_some(), "the latch was cleared");
    env.idle(15).await;
    assert_eq!(env.event_count("vanishing", "ProviderServerMissing"), 1, "{:?}", env.events("vanishing"));
    let truth = env.truth(&uid);
    assert_eq!((truth.creates_accepted, truth.live), (1, 0), "recreated behind the user's back: {truth:?}");
    env.assert_invariants();
    env.stop().await;
}
