//! Image rebuild end to end, on both cloud paths: an image edit on a booted
//! Server rebuilds its provider server once and clears the marker; a failed
//! rebuild parks until another image is asked for; an edit before the first
//! boot waits for it.

use std::time::Duration;

use serde_json::json;
use server_core::model::RebuildState;
use server_e2e::cloud::Fate;
use server_e2e::*;

cloud_scenarios!(
    an_image_edit_on_a_running_server_rebuilds_it_once_and_settles,
    a_failed_rebuild_parks_and_another_image_rearms_it,
    an_image_edit_before_the_first_boot_waits_for_it,
);

const IMAGE_2: &str = "1f9e5d4c-69b6-4e66-a4c6-1c76d2d8d403";
const IMAGE_3: &str = "2a0f6e5d-7ac7-4f77-b5d7-2d87e3e9e514";

/// A fast fate whose rebuilds take `rebuild` (long enough for a poll to see one under way).
fn rebuilding(fate: Fate, rebuild: Duration) -> Fate {
    fast(fate).with_rebuild_time(rebuild)
}

fn image_spec(image: &str) -> serde_json::Value {
    json!({ "image": { "id": image } })
}

async fn an_image_edit_on_a_running_server_rebuilds_it_once_and_settles(kind: CloudKind) {
    let mut env = Env::new(kind, 11).await;
    let uid = env.create_server("rebuilt", rebuilding(Fate::clean(), Duration::from_millis(600)), Env::spec());
    env.start();
    let booted =
        env.wait_server("rebuilt", "Running", |s| phase(s) == "Running" && available_reason(s) == "Provisioned").await;
    let provisioned_at = status(&booted).provisioned_at;

    env.patch_spec("rebuilt", image_spec(IMAGE_2)).await;
    env.wait_server("rebuilt", "the rebuild accepted", |s| {
        status(s).rebuild.as_ref().is_some_and(|r| r.state == RebuildState::Rebuilding && r.target_image_id == IMAGE_2)
    })
    .await;
    let settled = env
        .wait_server("rebuilt", "rebuilt and settled", |s| {
            status(s).rebuild.is_none() && phase(s) == "Running" && available_reason(s) == "Provisioned"
        })
        .await;
    env.idle(5).await;
    let truth = env.truth(&uid);
    assert_eq!(truth.rebuilds_accepted, 1, "one rebuild: {truth:?}");
    assert_eq!(truth.rebuilds_repeated, 0);
    assert_eq!((truth.creates_accepted, truth.delete_calls), (1, 0), "never recreated: {truth:?}");
    assert_eq!(status(&settled).provisioned_at, provisioned_at, "the latch stays");
    assert_eq!(status(&settled).provider_create_failures, 0);
    assert_eq!(env.event_count("rebuilt", "ProviderServerRebuilding"), 1, "{:?}", env.events("rebuilt"));
    assert!(env.event_count("rebuilt", "ProviderServerRebuilt") >= 1, "{:?}", env.events("rebuilt"));
    assert_eq!(env.event_count("rebuilt", "SpecChangeNotApplied"), 0);
    if let Some(openstack) = env.openstack() {
        let rebuilds = openstack.counters().server_rebuilds;
        assert_eq!(rebuilds, 1, "one rebuild action reached Nova");
    }
    env.assert_invariants();
    env.stop().await;
}

async fn a_failed_rebuild_parks_and_another_image_rearms_it(kind: CloudKind) {
    let mut env = Env::new(kind, 12).await;
    let fate = rebuilding(Fate::clean().with_failed_rebuilds(1), Duration::from_millis(300));
    let uid = env.create_server("broken", fate, Env::spec());
    env.start();
    env.wait_server("broken", "Running", |s| phase(s) == "Running" && available_reason(s) == "Provisioned").await;

    env.patch_spec("broken", image_spec(IMAGE_2)).await;
    let parked = env
        .wait_server("broken", "parked for the failed rebuild", |s| {
            available_reason(s) == "Errored"
                && status(s).rebuild.as_ref().is_some_and(|r| r.state == RebuildState::Failed)
        })
        .await;
    assert!(available_message(&parked).contains("rebuild"), "{}", available_message(&parked));
    env.idle(5).await;
    let truth = env.truth(&uid);
    assert_eq!((truth.rebuilds_accepted, truth.creates_accepted, truth.delete_calls), (1, 1, 0), "{truth:?}");
    assert_eq!(env.event_count("broken", "ProviderServerRebuildFailed"), 1, "{:?}", env.events("broken"));

    // Another image re-arms: it is rebuilt onto it (the fate's second rebuild succeeds).
    env.patch_spec("broken", image_spec(IMAGE_3)).await;
    env.wait_server("broken", "rebuilt onto the third image", |s| {
        status(s).rebuild.is_none() && available_reason(s) == "Provisioned" && phase(s) == "Running"
    })
    .await;
    let truth = env.truth(&uid);
    assert_eq!((truth.rebuilds_accepted, truth.creates_accepted, truth.delete_calls), (2, 1, 0), "{truth:?}");
    env.assert_invariants();
    env.stop().await;
}

async fn an_image_edit_before_the_first_boot_waits_for_it(kind: CloudKind) {
    let mut env = Env::new(kind, 13).await;
    let fate = Fate::clean().with_build_time(Duration::from_secs(8)).with_rebuild_time(Duration::from_millis(300));
    let uid = env.create_server("early", fate, Env::spec());
    env.start();
    env.wait("the create", || env.truth(&uid).creates_accepted == 1).await;
    env.patch_spec("early", image_spec(IMAGE_2)).await;
    env.wait_server("early", "waiting for the first boot", |s| {
        available_message(s) == server_core::reconcile::RebuildWait::FirstBoot.message()
    })
    .await;
    assert_eq!(env.truth(&uid).rebuilds_accepted, 0, "rebuilt before it booted");
    env.wait_server("early", "rebuilt after it booted", |s| {
        status(s).provisioned_at.is_some() && status(s).rebuild.is_none() && available_reason(s) == "Provisioned"
    })
    .await;
    let truth = env.truth(&uid);
    assert_eq!((truth.rebuilds_accepted, truth.creates_accepted, truth.delete_calls), (1, 1, 0), "{truth:?}");
    env.assert_invariants();
    env.stop().await;
}
