//! SimCloud behaviour: fates, idempotent create, ground truth, and the async port.

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use server_core::port::{
    CallEffect, CloudError, CloudPort, CreateRequest, DeleteProgress, IdentityContext, PowerState, ProviderStatus,
    ServerRef,
};

use super::*;

fn start() -> Timestamp {
    Timestamp::from_second(1_750_000_000).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn at(seconds: i64) -> Timestamp {
    start() + SignedDuration::from_secs(seconds)
}

fn request(uid: &str) -> CreateRequest {
    CreateRequest {
        server: ServerRef { namespace: "ns".into(), name: format!("server-{uid}"), uid: uid.into() },
        name: format!("server-{uid}"),
        public_ip: true,
        ..Default::default()
    }
}

fn model_with(uid: &str, fate: Fate) -> CloudModel {
    let mut model = CloudModel::new(CloudConfig::reliable(1));
    model.script(uid, fate);
    model
}

fn status_at(model: &mut CloudModel, uid: &str, t: i64) -> Option<ProviderStatus> {
    model.get(at(t), uid).ok().flatten().map(|r| r.status)
}

#[test]
fn clean_boot_builds_then_launches_with_addresses() {
    let mut model = model_with("u", Fate::clean().with_build_time(Duration::from_secs(30)));
    let created = model.create(at(0), "p", &request("u")).unwrap_or_default();
    assert_eq!(created.status, ProviderStatus::Build);
    assert!(created.queued, "scheduling at first");
    assert_eq!(created.server_uid, "u");
    assert_eq!(created.created, Some(at(0)));
    assert!(created.private_ip.is_some() && created.mac_address.is_none() && created.launched_at.is_none());

    let building = model.get(at(10), "u").ok().flatten().unwrap_or_default();
    assert_eq!((building.status, building.queued), (ProviderStatus::Build, false));

    let active = model.get(at(30), "u").ok().flatten().unwrap_or_default();
    assert_eq!(active.status, ProviderStatus::Active);
    assert_eq!(active.power_state, PowerState::Running);
    assert_eq!(active.launched_at, Some(at(30)));
    assert!(active.public_ip.is_none() && active.mac_address.is_some(), "no floating IP until one is allocated");
    assert!(model.set_floating_ip(at(31), "u", true).is_ok());
    let public = model.get(at(31), "u").ok().flatten().unwrap_or_default();
    assert!(public.public_ip.is_some());
    let fip = model.port_of("u", at(31)).and_then(|p| p.floating_ip).map(|f| f.id).unwrap_or_default();
    assert!(model.release_floating_ip(at(32), &fip).is_ok());
    assert!(model.get(at(32), "u").ok().flatten().unwrap_or_default().public_ip.is_none());
    assert_eq!(active.id, created.id);
    let truth = model.truth("u", at(30));
    assert_eq!((truth.live, truth.live_launched, truth.creates_accepted), (1, true, 1));
}

#[test]
fn create_is_idempotent_per_uid() {
    let mut model = model_with("u", Fate::clean());
    let first = model.create(at(0), "p", &request("u")).unwrap_or_default();
    let second = model.create(at(5), "p", &request("u")).unwrap_or_default();
    assert_eq!(first.id, second.id);
    let other = model.create(at(5), "p", &request("v")).unwrap_or_default();
    assert_ne!(first.id, other.id);
    let counters = model.counters();
    assert_eq!((counters.create_calls, counters.creates_accepted, counters.creates_deduplicated), (3, 2, 1));
    assert_eq!(model.truth("u", at(5)).live, 1);
    assert_eq!(model.live_servers(at(5)), 2);
}

#[test]
fn user_data_over_novas_limit_is_refused() {
    let mut model = model_with("u", Fate::clean());
    // 49,149 bytes are 65,532 base64 characters: the most Nova takes.
    let fits = CreateRequest { user_data: Some(vec![b'#'; 49_149]), ..request("u") };
    assert!(model.create(at(0), "p", &fits).is_ok());
    let mut model = model_with("u", Fate::clean());
    let over = CreateRequest { user_data: Some(vec![b'#'; 49_150]), ..request("u") };
    let refused = model.create(at(0), "p", &over);
    assert!(matches!(refused, Err(CloudError::Refused { status: 400, .. })), "{refused:?}");
    let truth = model.truth("u", at(0));
    assert_eq!((truth.creates_accepted, truth.creates_refused, truth.live), (0, 1, 0));
}

#[test]
fn failing_boots_error_before_launch_k_times_then_boot() {
    let fate = Fate::failing_boots(2).with_fail_time(Duration::from_secs(10)).with_build_time(Duration::from_secs(20));
    let mut model = model_with("u", fate);
    for (attempt, start) in [(1, 0), (2, 100)] {
        assert!(model.create(at(start), "p", &request("u")).is_ok(), "attempt {attempt}");
        assert_eq!(status_at(&mut model, "u", start + 5), Some(ProviderStatus::Build));
        let failed = model.get(at(start + 10), "u").ok().flatten().unwrap_or_default();
        assert_eq!(failed.status, ProviderStatus::Error, "attempt {attempt}");
        assert_eq!((failed.launched_at, failed.mac_address), (None, None));
        assert_eq!(model.delete(at(start + 20), "u"), Ok(DeleteProgress::Gone));
        assert_eq!(status_at(&mut model, "u", start + 20), None);
    }
    assert!(model.create(at(200), "p", &request("u")).is_ok());
    assert_eq!(status_at(&mut model, "u", 220), Some(ProviderStatus::Active));
    let truth = model.truth("u", at(220));
    assert_eq!((truth.creates_accepted, truth.launched_deleted, truth.ever_launched), (3, 0, true));
}

#[test]
fn failing_forever_never_launches() {
    let mut model = model_with("u", Fate::failing_forever());
    for round in 0..5 {
        let t = round * 100;
        assert!(model.create(at(t), "p", &request("u")).is_ok());
        assert_eq!(status_at(&mut model, "u", t + 90), Some(ProviderStatus::Error));
        assert_eq!(model.delete(at(t + 90), "u"), Ok(DeleteProgress::Gone));
    }
    assert!(!model.truth("u", at(1_000)).ever_launched);
}

#[test]
fn error_after_launch_keeps_launched_at() {
    let fate = Fate::error_after_launch(Duration::from_secs(60)).with_build_time(Duration::from_secs(30));
    let mut model = model_with("u", fate);
    assert!(model.create(at(0), "p", &request("u")).is_ok());
    assert_eq!(status_at(&mut model, "u", 30), Some(ProviderStatus::Active));
    let errored = model.get(at(90), "u").ok().flatten().unwrap_or_default();
    assert_eq!(errored.status, ProviderStatus::Error);
    assert_eq!(errored.launched_at, Some(at(30)), "the record still says it booted");
    // Deleting it is what invariant 1 forbids on the retry path: the truth records it.
    assert_eq!(model.delete(at(95), "u"), Ok(DeleteProgress::Gone));
    assert_eq!(model.truth("u", at(95)).launched_deleted, 1);
}

#[test]
fn vanished_records_are_gone_after_launch() {
    let fate = Fate::vanish_after_launch(Duration::from_secs(60)).with_build_time(Duration::from_secs(30));
    let mut model = model_with("u", fate);
    assert!(model.create(at(0), "p", &request("u")).is_ok());
    assert_eq!(status_at(&mut model, "u", 89), Some(ProviderStatus::Active));
    assert_eq!(model.get(at(90), "u"), Ok(None));
    let truth = model.truth("u", at(90));
    assert_eq!((truth.live, truth.ever_launched, truth.delete_calls), (0, true, 0));
}

#[test]
fn refused_creates_are_quota_errors_until_the_quota_frees() {
    let mut model = model_with("u", Fate::refused(1));
    let refused = model.create(at(0), "p", &request("u"));
    assert!(matches!(refused, Err(CloudError::Refused { status: 403, .. })), "{refused:?}");
    assert!(refused.is_err_and(|e| !e.is_transient()));
    assert!(model.create(at(10), "p", &request("u")).is_ok());
    let truth = model.truth("u", at(10));
    assert_eq!((truth.creates_refused, truth.creates_accepted, truth.create_calls), (1, 1, 2));
}

#[test]
fn slow_deletes_take_several_polls() {
    let mut model = model_with("u", Fate::clean().with_delete_time(Duration::from_secs(30)));
    assert!(model.create(at(0), "p", &request("u")).is_ok());
    assert_eq!(model.delete(at(100), "u"), Ok(DeleteProgress::InProgress));
    assert_eq!(model.delete(at(110), "u"), Ok(DeleteProgress::InProgress));
    assert!(model.get(at(120), "u").is_ok_and(|r| r.is_some()), "still listed while deleting");
    assert_eq!(model.delete(at(130), "u"), Ok(DeleteProgress::Gone));
    assert_eq!(model.get(at(130), "u"), Ok(None));
    // The deletion started once, on a launched server.
    let counters = model.counters();
    assert_eq!((counters.delete_calls, counters.deletions_started, counters.launched_deleted), (3, 1, 1));
    assert_eq!(model.delete(at(140), "unknown"), Ok(DeleteProgress::Gone));
}

#[test]
fn scripted_read_failures_then_answers() {
    let mut model = model_with("u", Fate::clean().with_failed_reads(2));
    assert!(model.create(at(0), "p", &request("u")).is_ok());
    assert!(matches!(model.get(at(1), "u"), Err(CloudError::Timeout { .. })));
    assert!(matches!(model.list(at(1), "p"), Err(CloudError::Timeout { .. })));
    assert!(model.get(at(1), "u").is_ok_and(|r| r.is_some()));
    assert!(model.list(at(1), "p").is_ok_and(|r| r.len() == 1));
}

/// Every page after the first walks on from its marker: together the pages
/// are the whole list, newest first, each server once, and a marker whose
/// server is gone since still marks its place (Nova reads markers among
/// deleted rows).
#[test]
fn pages_walk_the_list_newest_first_from_their_marker() {
    let mut model = CloudModel::new(CloudConfig::reliable(1));
    for (i, uid) in ["a", "b", "c", "d", "e"].into_iter().enumerate() {
        let t = i64::try_from(i).unwrap_or_default();
        assert!(model.create(at(t), "p", &request(uid)).is_ok());
    }
    let page =
        |model: &mut CloudModel, after: Option<&str>, t: i64| match model
            .list_page(at(t), "p", after, 2, false, |_| true)
        {
            Ok(ListPage::Servers(servers)) => Some(servers),
            _ => None,
        };
    let uids = |servers: &[Shown]| -> Vec<String> { servers.iter().map(|s| s.record.server_uid.clone()).collect() };
    let first = page(&mut model, None, 10).unwrap_or_default();
    assert_eq!(uids(&first), ["e", "d"]);
    let marker = first.last().map(|s| s.record.id.clone()).unwrap_or_default();
    assert!(model.delete(at(10), "d").is_ok());
    let gone = 1_000;
    let second = page(&mut model, Some(&marker), gone).unwrap_or_default();
    assert_eq!(uids(&second), ["c", "b"], "the page after a deleted marker");
    let last = page(&mut model, second.last().map(|s| s.record.id.as_str()), gone).unwrap_or_default();
    assert_eq!(uids(&last), ["a"]);
    assert_eq!(uids(&page(&mut model, None, gone).unwrap_or_default()), ["e", "c"], "the deleted one is unlisted");
    assert_eq!(model.list_page(at(gone), "p", Some("sim-ffff"), 2, false, |_| true), Ok(ListPage::MarkerNotFound));
    assert_eq!(model.list_page(at(gone), "p", Some("not-ours"), 2, false, |_| true), Ok(ListPage::MarkerNotFound));
    let only_b = model.list_page(at(gone), "p", None, 2, false, |s| s.record.server_uid == "b");
    assert!(matches!(only_b, Ok(ListPage::Servers(s)) if uids(&s) == ["b"]), "the filter runs before the limit");
}

/// A recreated server lists once, as its new self, in its new place.
#[test]
fn a_recreated_server_lists_once_in_its_new_place() {
    let mut model = CloudModel::new(CloudConfig::reliable(1));
    assert!(model.create(at(0), "p", &request("a")).is_ok());
    assert!(model.create(at(1), "p", &request("b")).is_ok());
    assert!(model.delete(at(2), "a").is_ok());
    let again = model.create(at(1_000), "p", &request("a")).map(|r| r.id).unwrap_or_default();
    match model.list_page(at(1_001), "p", None, 10, false, |_| true) {
        Ok(ListPage::Servers(servers)) => {
            let listed: Vec<(&str, &str)> =
                servers.iter().map(|s| (s.record.server_uid.as_str(), s.record.id.as_str())).collect();
            assert_eq!(listed.first(), Some(&("a", again.as_str())));
            assert_eq!(listed.len(), 2);
        }
        other => panic!("a page was expected: {other:?}"),
    }
}

/// A list of changes shows each server dated its latest change, and a
/// deleted one, dated its deletion, until its row is archived; other lists
/// never show a deleted one.
#[test]
fn a_list_of_changes_shows_deleted_servers_dated_their_deletion() {
    let mut model = model_with("a", Fate::clean());
    assert!(model.create(at(0), "p", &request("a")).is_ok());
    assert!(model.create(at(1), "p", &request("b")).is_ok());
    assert!(model.delete(at(100), "a").is_ok());
    let shown = |model: &mut CloudModel, t: i64, with_deleted: bool| match model.list_page(
        at(t),
        "p",
        None,
        10,
        with_deleted,
        |_| true,
    ) {
        Ok(ListPage::Servers(servers)) => {
            servers.into_iter().map(|s| (s.record.server_uid, s.changed, s.deleted)).collect::<Vec<_>>()
        }
        other => panic!("a page was expected: {other:?}"),
    };
    let later = at(200);
    let listed = shown(&mut model, 200, true);
    assert_eq!(listed.len(), 2, "{listed:?}");
    let deleted = listed.iter().find(|(uid, ..)| uid == "a").cloned();
    assert!(matches!(deleted, Some((_, changed, true)) if changed > at(99) && changed <= later), "{listed:?}");
    let live = listed.iter().find(|(uid, ..)| uid == "b").cloned();
    assert!(matches!(live, Some((_, changed, false)) if changed >= at(1)), "{listed:?}");
    assert_eq!(shown(&mut model, 200, false).len(), 1, "a complete list shows no deleted server");
    let archived = 200 + i64::try_from(crate::DELETED_ROWS_KEPT.as_secs()).unwrap_or_default();
    assert_eq!(shown(&mut model, archived, true).len(), 1, "an archived row is not shown");
}

/// A scripted read failure of any server of the project fails a page, as
/// it fails a whole list.
#[test]
fn scripted_read_failures_fail_pages_too() {
    let mut model = model_with("u", Fate::clean().with_failed_reads(1));
    assert!(model.create(at(0), "p", &request("u")).is_ok());
    assert!(matches!(model.list_page(at(1), "p", None, 5, false, |_| true), Err(CloudError::Timeout { .. })));
    assert!(matches!(model.list_page(at(1), "p", None, 5, false, |_| true), Ok(ListPage::Servers(s)) if s.len() == 1));
}

#[test]
fn read_failures_drawn_from_the_rate_are_transient() {
    let config = CloudConfig { read_failure_rate: 1.0, ..CloudConfig::reliable(3) };
    let mut model = CloudModel::new(config);
    for _ in 0..20 {
        let error = model.get(at(0), "u").err();
        assert!(error.is_some_and(|e| e.is_transient() && !matches!(e, CloudError::Refused { .. })));
    }
    assert_eq!(model.counters().injected_failures, 20);
}

#[test]
fn lost_create_answers_still_create_exactly_one_server() {
    let config = CloudConfig { lost_create_rate: 1.0, ..CloudConfig::reliable(3) };
    let mut model = CloudModel::new(config);
    // A timeout or a gateway's 504: either way the caller cannot tell it landed.
    let lost = model.create(at(0), "p", &request("u")).err();
    assert!(lost.as_ref().is_some_and(|e| e.effect() == CallEffect::Unknown), "{lost:?}");
    assert!(model.get(at(1), "u").is_ok_and(|r| r.is_some()), "it was made");
    // The retry finds it (the dedup answer is not lost: nothing new was made).
    assert!(model.create(at(2), "p", &request("u")).is_ok());
    assert_eq!(model.truth("u", at(2)).creates_accepted, 1);
}

#[test]
fn lost_create_answers_are_timeouts_and_gateway_errors() {
    let config = CloudConfig { lost_create_rate: 1.0, ..CloudConfig::reliable(5) };
    let mut model = CloudModel::new(config);
    let (mut timeouts, mut gateway) = (0, 0);
    for i in 0..40 {
        match model.create(at(0), "p", &request(&format!("u{i}"))) {
            Err(CloudError::Timeout { .. }) => timeouts += 1,
            Err(CloudError::Unavailable { status: 504, .. }) => gateway += 1,
            other => panic!("{other:?}"),
        }
    }
    assert!(timeouts > 0 && gateway > 0, "{timeouts} timeouts, {gateway} gateway errors");
    assert_eq!(model.counters().creates_accepted, 40);
}

#[test]
fn an_authentication_failure_creates_nothing() {
    let config = CloudConfig { auth_failure_rate: 1.0, ..CloudConfig::reliable(3) };
    let mut model = CloudModel::new(config);
    let error = model.create(at(0), "p", &request("u")).err();
    assert!(matches!(&error, Some(CloudError::Auth { .. })), "{error:?}");
    assert!(error.is_some_and(|e| e.effect() == CallEffect::None));
    assert_eq!(model.truth("u", at(1)).creates_accepted, 0);
}

#[test]
fn an_outage_fails_every_call_unsent_within_its_window() {
    let outage = Outage { from: at(10).as_millisecond(), until: at(20).as_millisecond() };
    let mut model = CloudModel::new(CloudConfig { outage: Some(outage), ..CloudConfig::reliable(3) });
    assert!(model.create(at(0), "p", &request("u")).is_ok());
    for t in [10, 19] {
        for error in [
            model.get(at(t), "u").err(),
            model.list(at(t), "p").err(),
            model.create(at(t), "p", &request("v")).err(),
            model.delete(at(t), "u").err(),
        ] {
            assert!(matches!(error, Some(CloudError::Unreachable { .. })), "{t}: {error:?}");
        }
    }
    assert!(model.get(at(20), "u").is_ok_and(|r| r.is_some()), "the outage ended; nothing was deleted");
    assert_eq!(model.counters().outage_failures, 8);
}

#[test]
fn list_is_scoped_to_the_project_and_ordered() {
    let mut model = CloudModel::new(CloudConfig::reliable(3));
    for uid in ["c", "a", "b"] {
        assert!(model.create(at(0), "p1", &request(uid)).is_ok());
    }
    assert!(model.create(at(0), "p2", &request("z")).is_ok());
    let uids: Vec<String> = model.list(at(1), "p1").unwrap_or_default().into_iter().map(|r| r.server_uid).collect();
    assert_eq!(uids, ["a", "b", "c"]);
    assert_eq!(model.list(at(1), "p3"), Ok(Vec::new()));
}

#[test]
fn drawn_fates_are_deterministic_per_seed() {
    let run = |seed| {
        let mut model = CloudModel::new(CloudConfig::new(seed));
        (0..200).map(|i| model.fate(&format!("uid-{i}"))).collect::<Vec<_>>()
    };
    assert_eq!(run(5), run(5));
    assert_ne!(run(5), run(6));
}

fn identity(project: &str) -> IdentityContext {
    IdentityContext { project_id: project.into(), ..Default::default() }
}

#[tokio::test(start_paused = true)]
async fn port_runs_the_model_on_the_clock_it_is_given() {
    let cloud = SimCloud::with_clock(CloudConfig::reliable(1), Arc::new(TokioClock::starting_at(start())));
    cloud.script("u", Fate::failing_boots(1).with_fail_time(Duration::from_secs(5)));
    let port: Arc<dyn CloudPort> = cloud.port();
    let (id, req) = (identity("p"), request("u"));

    let created = port.create(&id, &req).await.unwrap_or_default();
    assert_eq!(created.status, ProviderStatus::Build);
    tokio::time::advance(Duration::from_secs(5)).await;
    let failed = port.get(&id, &req.server).await.ok().flatten().unwrap_or_default();
    assert_eq!(failed.status, ProviderStatus::Error);
    assert_eq!(port.delete(&id, &req.server).await, Ok(DeleteProgress::Gone));
    assert_eq!(port.get(&id, &req.server).await, Ok(None));

    let again = port.create(&id, &req).await.unwrap_or_default();
    assert_ne!(again.id, created.id);
    tokio::time::advance(Duration::from_secs(30)).await;
    let listed = port.list(&id, server_core::port::ListScope::Complete).await.unwrap_or_default().servers;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].status, ProviderStatus::Active);
    assert_eq!(listed[0].launched_at, Some(at(35)));

    let counters = cloud.counters();
    assert_eq!((counters.create_calls, counters.get_calls, counters.list_calls, counters.delete_calls), (2, 2, 1, 1));
    assert_eq!(cloud.truth("u").creates_accepted, 2);
    assert_eq!(cloud.live_servers(), 1);
}

#[tokio::test(start_paused = true)]
async fn port_latency_delays_calls_in_tokio_time() {
    let cloud = SimCloud::with_clock(CloudConfig::reliable(1), Arc::new(TokioClock::starting_at(start())));
    cloud.set_latency(Duration::from_millis(250));
    let port = cloud.port();
    let before = tokio::time::Instant::now();
    let created = port.create(&identity("p"), &request("u")).await.unwrap_or_default();
    assert_eq!(tokio::time::Instant::now() - before, Duration::from_millis(250));
    assert_eq!(created.created, Some(start() + SignedDuration::from_millis(250)));
}

#[test]
fn manual_clock_drives_a_sync_port_user() {
    let clock = Arc::new(ManualClock::starting_at(start()));
    let cloud = SimCloud::with_clock(CloudConfig::reliable(1), clock.clone());
    cloud.with_model(|m| m.create(cloud.now(), "p", &request("u"))).ok();
    assert!(!cloud.truth("u").live_launched);
    // Drawn realistic build times are at most a minute.
    clock.advance(Duration::from_secs(61));
    assert!(cloud.truth("u").live_launched);
}

/// A create after a boot the controller was shown counts as a booted
/// server recreated; one after a boot that vanished between its reads is
/// counted apart (no controller could have known it booted). Reads inside
/// the cloud (`get`) show the controller nothing; `mark_read` says it was shown.
#[test]
fn a_create_after_a_boot_a_read_showed_is_told_from_one_after_an_unread_boot() {
    let fate = Fate::vanish_after_launch(Duration::from_secs(10)).with_build_time(Duration::from_secs(30));
    let mut unread = model_with("u", fate.clone());
    let _ = unread.create(at(0), "p", &request("u"));
    assert_eq!(status_at(&mut unread, "u", 20), Some(ProviderStatus::Build));
    assert_eq!(status_at(&mut unread, "u", 50), None, "booted at 30 and gone at 40, unread");
    let _ = unread.create(at(60), "p", &request("u"));
    let truth = unread.truth("u", at(60));
    assert_eq!((truth.creates_after_launch, truth.creates_after_boot_read), (1, 0));

    let mut read = model_with("u", fate);
    let _ = read.create(at(0), "p", &request("u"));
    assert_eq!(status_at(&mut read, "u", 35), Some(ProviderStatus::Active));
    read.mark_read(at(35), "u");
    assert_eq!(status_at(&mut read, "u", 50), None);
    let _ = read.create(at(60), "p", &request("u"));
    let truth = read.truth("u", at(60));
    assert_eq!((truth.creates_after_launch, truth.creates_after_boot_read), (1, 1));
}
