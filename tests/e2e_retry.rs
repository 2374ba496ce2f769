//! The bounded delete-and-retry machine end to end (DESIGN §7): pre-launch
//! failures are retried up to the cap, booted servers never are, and a
//! restart in the middle of a retry neither loses nor repeats an attempt.

use std::time::Duration;

use serde_json::json;
use server_core::ParkKind;
use server_core::model::RETRY_ANNOTATION;
use server_e2e::cloud::Fate;
use server_e2e::*;

cloud_scenarios!(
    two_pre_launch_errors_then_success,
    pre_launch_errors_forever_park_at_the_cap_until_reset,
    the_retry_annotation_unparks_a_server_at_the_cap_once,
    launched_then_error_is_never_deleted,
    provisioned_at_alone_blocks_the_retry,
    restart_in_the_middle_of_a_retry_converges_without_advancing_the_counter,
);

const RETRYING: &str = "ProviderCreateRetrying";
const READY: &str = "ProviderCreateRetryReady";
const FAILED: &str = "ProviderCreateFailed";

async fn two_pre_launch_errors_then_success(kind: CloudKind) {
    let mut env = Env::new(kind, 11).await;
    let uid = env.create_server("flaky", fast(Fate::failing_boots(2)), Env::spec());
    env.start();
    let server = env
        .wait_server("flaky", "Running after two retries", |s| {
            phase(s) == "Running" && status(s).provisioned_at.is_some()
        })
        .await;
    env.wait("both RetryReady events", || env.event_count("flaky", READY) == 2).await;
    let truth = env.truth(&uid);
    assert_eq!(truth.creates_accepted, 3, "{truth:?}");
    assert_eq!(truth.launched_deleted, 0, "a booted server was deleted");
    assert_eq!(status(&server).provider_create_failures, 2);
    assert!(!status(&server).provider_create_retrying);
    assert_eq!(env.event_count("flaky", RETRYING), 2, "{:?}", env.events("flaky"));
    // Each attempt's number is visible, not folded into the first one's event.
    let notes = env.event_notes("flaky", RETRYING);
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(notes[0].ends_with("(attempt 2/3)") && notes[1].ends_with("(attempt 3/3)"), "{notes:?}");
    assert_eq!(env.event_count("flaky", READY), 2, "{:?}", env.events("flaky"));
    assert_eq!(env.event_count("flaky", FAILED), 0);
    if let Some(openstack) = env.openstack_counters() {
        // Nova keeps a failed server's port (the caller made it); each next
        // attempt brings it up to date and boots with it.
        assert_eq!(
            (openstack.port_creates, openstack.port_updates, openstack.port_deletes),
            (1, 2, 0),
            "{openstack:?}"
        );
        assert_eq!(env.openstack_ports_of(&uid), Some(1));
    }
    env.assert_invariants();
    env.stop().await;
}

/// Exactly max creates, one ProviderCreateFailed, parked with no further
/// provider calls; an operator's reset of `providerCreateFailures` re-arms it.
async fn pre_launch_errors_forever_park_at_the_cap_until_reset(kind: CloudKind) {
    let mut env = Env::new(kind, 12).await;
    let uid = env.create_server("doomed", fast(Fate::failing_forever()), Env::spec());
    env.start();
    let server = env
        .wait_server("doomed", "parked at the cap", |s| {
            available_reason(s) == "Errored" && env.park(s) == Some(ParkKind::AtCap)
        })
        .await;
    assert_eq!(status(&server).provider_create_failures, 3);
    assert_eq!(condition(&server, "Available").map(|c| c.0).as_deref(), Some("False"));
    let parked = env.cloud.counters();
    assert_eq!(env.truth(&uid).creates_accepted, 3);

    // Several requeue intervals: no create, delete or get (the monitor's
    // one list per poll is for the whole project, not this Server).
    env.idle(20).await;
    let later = env.cloud.counters();
    assert_eq!(
        (later.create_calls, later.delete_calls, later.get_calls),
        (parked.create_calls, parked.delete_calls, parked.get_calls),
        "a parked server reached the provider"
    );
    assert_eq!(env.event_count("doomed", FAILED), 1, "{:?}", env.events("doomed"));
    assert_eq!(env.truth(&uid).creates_accepted, 3);
    let server = env.server("doomed").unwrap_or_else(|| panic!("gone"));
    assert_eq!(status(&server).provider_create_failures, 3, "the counter moved while parked");

    env.patch_status("doomed", json!({ "providerCreateFailures": 0 })).await;
    env.wait("a create after the reset", || env.truth(&uid).creates_accepted > 3).await;
    env.wait_server("doomed", "parked again after three more attempts", |s| {
        status(s).provider_create_failures == 3 && available_reason(s) == "Errored"
    })
    .await;
    env.wait("the second ProviderCreateFailed", || env.event_count("doomed", FAILED) == 2).await;
    // The failed server left parked counts as the first failure after the
    // reset: two more creates reach the cap again.
    assert_eq!(env.truth(&uid).creates_accepted, 5);
    env.assert_invariants();
    env.stop().await;
}

/// The un-park command the park's message ends with (`kubectl annotate
/// server NAME ...retry=now`) is consumed once: the counter starts over, the
/// attempts run to the cap again, and the annotation is gone.
async fn the_retry_annotation_unparks_a_server_at_the_cap_once(kind: CloudKind) {
    let mut env = Env::new(kind, 14).await;
    let uid = env.create_server("stuck", fast(Fate::failing_forever()), Env::spec());
    env.start();
    let parked = env
        .wait_server("stuck", "parked at the cap", |s| {
            available_reason(s) == "Errored" && env.park(s) == Some(ParkKind::AtCap)
        })
        .await;
    let namespace = parked.metadata.namespace.clone().unwrap_or_default();
    let command = format!("kubectl annotate server stuck -n {namespace} {RETRY_ANNOTATION}=now");
    assert!(available_message(&parked).ends_with(&command), "{}", available_message(&parked));
    assert_eq!(env.truth(&uid).creates_accepted, 3);

    env.annotate("stuck", RETRY_ANNOTATION, "now").await;
    env.wait("the retry consumed", || env.event_count("stuck", "RetryRequested") == 1).await;
    env.wait_server("stuck", "parked at the cap again", |s| {
        env.park(s) == Some(ParkKind::AtCap)
            && !s.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(RETRY_ANNOTATION))
    })
    .await;
    env.wait("the second ProviderCreateFailed", || env.event_count("stuck", FAILED) == 2).await;
    // The failed server left parked is cleared as a retry, not counted
    // again (DESIGN): three full attempts, and none after.
    assert_eq!(env.truth(&uid).creates_accepted, 6);
    env.idle(5).await;
    assert_eq!(env.truth(&uid).creates_accepted, 6, "a consumed retry was taken again");
    env.assert_invariants();
    env.stop().await;
}

/// A server that booted and then failed holds data: never deleted, never retried.
async fn launched_then_error_is_never_deleted(kind: CloudKind) {
    let mut env = Env::new(kind, 13).await;
    let uid = env.create_server("data", fast(Fate::error_after_launch(Duration::from_millis(400))), Env::spec());
    env.start();
    env.wait_server("data", "booted, then ERROR observed", |s| {
        status(s).provisioned_at.is_some()
            && condition(s, "Healthy").is_some_and(|c| c.0 == "False" && c.1 == "Errored")
    })
    .await;
    env.idle(10).await;
    let truth = env.truth(&uid);
    assert_eq!((truth.delete_calls, truth.creates_accepted, truth.live), (0, 1, 1), "{truth:?}");
    assert_eq!(env.event_count("data", RETRYING), 0);
    assert_eq!(env.event_count("data", READY), 0);
    let server = env.server("data").unwrap_or_else(|| panic!("gone"));
    assert_eq!(status(&server).provider_create_failures, 0);
    env.assert_invariants();
    env.stop().await;
}

/// provisionedAt alone (launchedAt and the phase lost, Healthy Errored) is
/// enough: the server is never deleted to retry.
async fn provisioned_at_alone_blocks_the_retry(kind: CloudKind) {
    let mut env = Env::new(kind, 14).await;
    let uid = env.create_server("latched", fast(Fate::error_after_launch(Duration::from_millis(300))), Env::spec());
    env.start();
    let booted = env
        .wait_server("latched", "booted, then ERROR observed", |s| {
            status(s).provisioned_at.is_some()
                && condition(s, "Healthy").is_some_and(|c| c.0 == "False" && c.1 == "Errored")
        })
        .await;
    env.stop().await;
    let provisioned_at = status(&booted).provisioned_at;

    // Lose everything but the latch, then run the controller alone so no
    // monitor write restores it.
    env.edit_server("latched", |server| {
        let status = &mut server["status"];
        for field in ["launchedAt", "scheduledAt", "privateIP", "publicIP"] {
            if let Some(status) = status.as_object_mut() {
                status.remove(field);
            }
        }
        status["phase"] = json!("Pending");
    });
    env.start_loops(Loops::ControllerOnly);
    env.idle(10).await;
    let truth = env.truth(&uid);
    assert_eq!((truth.delete_calls, truth.creates_accepted), (0, 1), "{truth:?}");
    assert_eq!(env.event_count("latched", RETRYING), 0);
    let server = env.server("latched").unwrap_or_else(|| panic!("gone"));
    assert_eq!(status(&server).provisioned_at, provisioned_at, "the latch moved");
    assert!(!status(&server).provider_create_retrying);
    env.assert_invariants();
    env.stop().await;
}

/// Stopped while deleting a failed provider server (retrying = true); the new
/// controller finishes the retry without counting another failure.
async fn restart_in_the_middle_of_a_retry_converges_without_advancing_the_counter(kind: CloudKind) {
    let mut env = Env::new(kind, 15).await;
    let fate = fast(Fate::failing_boots(1)).with_delete_time(Duration::from_millis(1500));
    let uid = env.create_server("restarted", fate, Env::spec());
    env.start();
    env.wait_server("restarted", "retrying", |s| status(s).provider_create_retrying).await;
    env.stop().await;
    let stopped = env.server("restarted").unwrap_or_else(|| panic!("gone"));
    assert_eq!(status(&stopped).provider_create_failures, 1);
    env.idle(3).await;

    env.start();
    let server = env
        .wait_server("restarted", "Running after the restart", |s| {
            phase(s) == "Running" && status(s).provisioned_at.is_some()
        })
        .await;
    assert_eq!(status(&server).provider_create_failures, 1, "the restart advanced the counter");
    let truth = env.truth(&uid);
    assert_eq!(truth.creates_accepted, 2, "{truth:?}");
    assert_eq!(truth.launched_deleted, 0);
    env.wait("RetryReady", || env.event_count("restarted", READY) == 1).await;
    assert_eq!(env.event_count("restarted", RETRYING), 1, "{:?}", env.events("restarted"));
    env.assert_invariants();
    env.stop().await;
}
