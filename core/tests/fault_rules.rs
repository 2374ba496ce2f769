//! The rules that keep the controller correct under faults: what a failed
//! create's answer proves, parks that outlast outages, a fresh record that
//! shows a boot, a slow create, the monitor and the reconciler agreeing, and
//! the wake edges a parked or missing Server depends on. Each test drives the
//! public API through the sequence that once went wrong.
#![allow(clippy::unwrap_used)]

mod support;

use server_core::model::{
    CREATE_ISSUED_ANNOTATION, ConditionReason, ConditionStatus, ConditionType, Phase, Server, set_condition,
};
use server_core::port::{CloudError, PowerState, ProviderServer, ProviderStatus};
use server_core::reconcile::{Action, ActionFailure, Decision, Facts, Options, Outcome, ProviderView, action_failed};
use server_core::{ParkKind, observe, reconcile, should_wake, status_merge_patch};
use support::*;

fn create_action(decision: &Decision) -> Action {
    decision.actions.iter().find(|a| matches!(a, Action::CreateProviderServer(_))).cloned().unwrap()
}

fn with_view(server: &Server, view: ProviderView) -> Facts {
    let mut facts = referenced_facts(server);
    facts.provider = view;
    facts
}

fn writes_status(decision: &Decision) -> bool {
    decision.actions.iter().any(|a| matches!(a, Action::WriteStatus(_)))
}

fn record(status: ProviderStatus, power_state: PowerState, launched_at: Option<i64>) -> ProviderServer {
    ProviderServer {
        id: "vm-1".into(),
        server_uid: "uid-web".into(),
        status,
        power_state,
        launched_at: launched_at.map(at),
        ..Default::default()
    }
}

/// Issues the first create at `t` and persists it; returns the create action.
fn issue_create(server: &mut Server, options: &Options, t: i64) -> Action {
    let decision = reconcile(server, &with_view(server, ProviderView::Absent), options, at(t));
    persist(server, &decision);
    create_action(&decision)
}

/// Runs the follow-up of a failed create and persists it.
fn fail_create(server: &mut Server, create: &Action, error: CloudError, t: i64) -> Decision {
    let follow_up = action_failed(server, create, &ActionFailure::Cloud(error), at(t));
    persist(server, &follow_up);
    follow_up
}

// --- What a failed create's answer proves -----------------------------------

#[test]
fn a_create_that_landed_behind_a_gateway_error_is_never_repeated_past_the_cap() {
    // Max 1: the create lands but the gateway answers 504; its server
    // vanishes before it boots. Only one create may ever be accepted.
    let options = Options::with_max_attempts(1);
    let mut server = adopted();
    let create = issue_create(&mut server, &options, 10);
    fail_create(&mut server, &create, CloudError::Unavailable { status: 504, message: "gateway".into() }, 11);
    // Long after any grace, the server is absent.
    let later = reconcile(&server, &with_view(&server, ProviderView::Absent), &options, at(100_000));
    assert_eq!(creates(&later), 0, "a second create past the cap of one");
    assert!(matches!(later.outcome, Outcome::Terminal(_)), "{:?}", later.outcome);
    assert_eq!(later.status.provider_create_failures, 1);
}

#[test]
fn a_create_answered_with_a_5xx_is_counted_lost_once_its_grace_is_over() {
    // A create answered 503 (its fate unknown) whose server never appears is
    // counted and retried after the grace, not held forever.
    let timeout = std::time::Duration::from_secs(60);
    let options = Options::with_max_attempts(3).with_create_grace(Options::grace_for_timeout(timeout));
    let mut server = adopted();
    let create = issue_create(&mut server, &options, 10);
    fail_create(&mut server, &create, CloudError::Unavailable { status: 503, message: "outage".into() }, 11);
    let within = reconcile(&server, &with_view(&server, ProviderView::Absent), &options, at(10 + 599));
    assert_eq!(creates(&within), 0, "still within the grace: the create may be landing");
    let past = reconcile(&server, &with_view(&server, ProviderView::Absent), &options, at(10 + 600));
    assert_eq!(past.status.provider_create_failures, 1, "counted once the grace passed: {:?}", past.outcome);
    assert_eq!(event_reasons(&past), ["ProviderCreateRetrying", "ProviderCreateRetryReady"]);
}

#[test]
fn a_create_slower_than_several_request_timeouts_is_not_counted_lost_nor_sent_again() {
    // Seen on a real cloud: Nova took 40 s to create behind a 5 s request
    // timeout. An absence read 10 s after the attempt says nothing: a second
    // create then would make a second server once the first lands.
    let timeout = std::time::Duration::from_secs(5);
    let options = Options::with_max_attempts(3).with_create_grace(Options::grace_for_timeout(timeout));
    let mut server = adopted();
    let create = issue_create(&mut server, &options, 10);
    fail_create(&mut server, &create, CloudError::Timeout { message: "5 s".into() }, 15);
    for t in [20, 30, 40, 50, 59] {
        let pass = reconcile(&server, &with_view(&server, ProviderView::Absent), &options, at(t));
        assert_eq!(creates(&pass), 0, "a create sent again {} s after a slow one", t - 10);
        assert_eq!(pass.status.provider_create_failures, 0, "counted lost {} s after the attempt", t - 10);
    }
}

#[test]
fn an_authentication_failure_on_create_is_not_counted_as_an_attempt() {
    let options = Options::with_max_attempts(3);
    let mut server = adopted();
    for pass in 0..5 {
        let t = 10 + pass * 100_000;
        let create = issue_create(&mut server, &options, t);
        let follow_up = fail_create(&mut server, &create, CloudError::Auth { message: "token rejected".into() }, t + 1);
        assert!(follow_up.outcome.requeues(), "{:?}", follow_up.outcome);
        assert!(!server.meta.annotations.contains_key(CREATE_ISSUED_ANNOTATION), "the create is released");
    }
    assert_eq!(server.status.provider_create_failures, 0, "nothing was ever created");
    let next = reconcile(&server, &with_view(&server, ProviderView::Absent), &options, at(1_000_000));
    assert_eq!(creates(&next), 1);
}

/// The executor runs `decision` until its status write, which fails (a
/// concurrent writer moved the resourceVersion on: the monitor's poll) and
/// stops the pass; returns the events sent before it.
fn persist_until_the_status_write_conflicts(server: &mut Server, decision: &Decision) -> Vec<&'static str> {
    let mut events = Vec::new();
    for action in decision.actions.iter().take_while(|a| !matches!(a, Action::WriteStatus(_))) {
        apply_meta(server, action);
        if let Action::Emit(event) = action {
            events.push(event.reason.as_str());
        }
    }
    events
}

#[test]
fn a_refusal_outlives_a_status_write_lost_to_a_concurrent_writer() {
    // Found flaky in the end-to-end suite: the monitor's status patch landed
    // between the refused create and its follow-up, the follow-up's guarded
    // writes conflicted, and a later pass counted the refused create as lost
    // and sent it again.
    let options = Options::with_max_attempts(3).with_create_grace(std::time::Duration::from_secs(60));
    let mut server = adopted();
    let create = issue_create(&mut server, &options, 10);
    let refusal = CloudError::Refused { status: 403, message: "Quota exceeded for instances".into() };
    let follow_up = action_failed(&server, &create, &ActionFailure::Cloud(refusal), at(11));
    let events = persist_until_the_status_write_conflicts(&mut server, &follow_up);
    assert_eq!(events, ["ProviderCreateRefused"], "the event is sent with the record");
    for t in [20, 200, 2_000, 20_000] {
        let pass = reconcile(&server, &with_view(&server, ProviderView::Absent), &options, at(t));
        assert_eq!(creates(&pass), 0, "the refused create was sent again at {t}s");
        assert_eq!(event_reasons(&pass), Vec::<&str>::new());
        let Outcome::Terminal(park) = &pass.outcome else { panic!("not parked at {t}s: {:?}", pass.outcome) };
        let message = park.message();
        assert!(message.contains("Quota exceeded for instances"), "the provider's words were lost: {message}");
        persist(&mut server, &pass);
        assert_eq!(server_core::park(&server, &options).map(|p| p.kind()), Some(ParkKind::Refused));
    }
    assert_eq!(server.status.provider_create_failures, 0);
}

#[test]
fn what_a_failed_create_proves_is_recorded_before_the_status_write() {
    // A create proven not to have landed is released before the follow-up's
    // status write, so a conflict on that write cannot leave it counted.
    let options = Options::with_max_attempts(1).with_create_grace(std::time::Duration::from_secs(60));
    for error in [
        CloudError::Auth { message: "token rejected".into() },
        CloudError::Conflict { message: "busy".into() },
        CloudError::RateLimited { message: "slow down".into(), retry_after: None },
        CloudError::Unreachable { message: "connection refused".into() },
    ] {
        let mut server = adopted();
        let create = issue_create(&mut server, &options, 10);
        let follow_up = action_failed(&server, &create, &ActionFailure::Cloud(error.clone()), at(11));
        persist_until_the_status_write_conflicts(&mut server, &follow_up);
        assert!(!server.meta.annotations.contains_key(CREATE_ISSUED_ANNOTATION), "{error:?}: still issued");
        let later = reconcile(&server, &with_view(&server, ProviderView::Absent), &options, at(100_000));
        assert_eq!((creates(&later), later.status.provider_create_failures), (1, 0), "{error:?}");
    }
}

#[test]
fn a_delete_the_provider_fails_transiently_is_a_wait_and_a_refused_one_an_error() {
    let server = create_failed(1);
    let delete = Action::DeleteProviderServer(Default::default());
    let busy = CloudError::Unavailable { status: 503, message: "busy".into() };
    let waiting = action_failed(&server, &delete, &ActionFailure::Cloud(busy), at(10));
    assert!(matches!(waiting.outcome, Outcome::Yield(_)), "{:?}", waiting.outcome);
    let refused = CloudError::Refused { status: 403, message: "policy".into() };
    let failed = action_failed(&server, &delete, &ActionFailure::Cloud(refused), at(10));
    assert!(matches!(failed.outcome, Outcome::Error(_)), "{:?}", failed.outcome);
    assert_eq!(creates(&failed) + deletes(&failed) + creates(&waiting) + deletes(&waiting), 0);
}

// --- A slow create ----------------------------------------------------------

#[test]
fn a_timed_out_create_absent_within_its_grace_is_neither_counted_nor_repeated() {
    let options = Options::with_max_attempts(3);
    let mut server = adopted();
    let create = issue_create(&mut server, &options, 10);
    fail_create(&mut server, &create, CloudError::Timeout { message: "5s".into() }, 15);
    // Nova is still working on it: the list does not show it yet.
    for t in [20, 30, 50] {
        let pass = reconcile(&server, &with_view(&server, ProviderView::Absent), &options, at(t));
        assert_eq!(pass.status.provider_create_failures, 0, "counted as lost at {t}s");
        assert_eq!(creates(&pass), 0, "a second create while the first may be in flight");
        assert!(matches!(pass.outcome, Outcome::Yield(_)));
        persist(&mut server, &pass);
    }
    // It comes up: a running server, no failure.
    let up = record(ProviderStatus::Active, PowerState::Running, Some(55));
    let pass = reconcile(&server, &with_view(&server, ProviderView::Present(up)), &options, at(60));
    assert_eq!(pass.outcome, Outcome::Done);
    assert_eq!(pass.status.provider_create_failures, 0);
}

#[test]
fn a_parked_server_whose_provider_server_turns_out_to_run_leaves_the_park() {
    let options = Options::with_max_attempts(3);
    let mut server = create_failed(3);
    let parked = reconcile(&server, &with_view(&server, ProviderView::Absent), &options, at(10));
    assert!(matches!(parked.outcome, Outcome::Terminal(_)));
    persist(&mut server, &parked);
    // The slow create came up after all: the monitor latches the boot, and
    // that status write must wake the parked Server.
    let up = record(ProviderStatus::Active, PowerState::Running, Some(20));
    let mut observed = server.clone();
    observed.status = observe(&server.status, Some(&up), at(30));
    assert!(should_wake(Some(&server), &observed), "nothing would wake the parked server");
    // Even from the stale status, a record that shows the boot decides.
    let pass = reconcile(&server, &with_view(&server, ProviderView::Present(up)), &options, at(31));
    assert_eq!(pass.outcome, Outcome::Done);
    assert_eq!(pass.status.provisioned_at, Some(at(20)));
    assert_eq!(available(&pass).status, ConditionStatus::True);
    assert_eq!(creates(&pass) + deletes(&pass), 0);
}

// --- Parks outlast outages --------------------------------------------------

/// A parked Server, as persisted after the pass that parked it.
fn parked_servers(options: &Options) -> Vec<(&'static str, Server)> {
    let mut at_cap = create_failed(3);
    let decision = reconcile(&at_cap, &with_view(&at_cap, ProviderView::Absent), options, at(10));
    persist(&mut at_cap, &decision);

    let mut refused = adopted();
    let create = issue_create(&mut refused, options, 10);
    let quota = CloudError::Refused { status: 403, message: "Quota exceeded for instances".into() };
    fail_create(&mut refused, &create, quota, 11);

    let mut missing = adopted();
    missing.status.provisioned_at = Some(at(5));
    missing.status.launched_at = Some(at(5));
    missing.status.phase = Some(Phase::Running);
    let decision = reconcile(&missing, &with_view(&missing, ProviderView::Absent), options, at(10));
    persist(&mut missing, &decision);
    vec![("at the cap", at_cap), ("refused", refused), ("missing after boot", missing)]
}

#[test]
fn a_parked_server_stays_parked_unchanged_while_the_provider_is_unreachable() {
    let options = Options::with_max_attempts(3);
    for (park, server) in parked_servers(&options) {
        assert!(matches!(
            reconcile(&server, &with_view(&server, ProviderView::Absent), &options, at(20)).outcome,
            Outcome::Terminal(_)
        ));
        let outage = ProviderView::Unknown("connection timed out".into());
        let pass = reconcile(&server, &with_view(&server, outage), &options, at(30));
        assert!(matches!(pass.outcome, Outcome::Terminal(_)), "{park}: {:?}", pass.outcome);
        assert!(!writes_status(&pass), "{park}: an outage rewrote the status: {:?}", pass.actions);
        assert_eq!(pass.events().count(), 0, "{park}");
        // The provider comes back: still parked, and no event again.
        let back = reconcile(&server, &with_view(&server, ProviderView::Absent), &options, at(40));
        assert!(matches!(back.outcome, Outcome::Terminal(_)), "{park}");
        assert_eq!(back.events().count(), 0, "{park}: the park's event fired again");
    }
}

// --- A fresh record decides over status -------------------------------------

#[test]
fn a_fresh_record_that_shows_a_boot_is_never_deleted_to_retry() {
    let options = Options::with_max_attempts(3);
    // Status says: cleared for retry, no boot in sight.
    let mut retrying = create_failed(1);
    retrying.status.provider_create_retrying = true;
    // Status says: failed before launch.
    let failed = create_failed(0);
    for server in [retrying, failed] {
        for booted in [
            record(ProviderStatus::Active, PowerState::Running, Some(7)),
            record(ProviderStatus::Active, PowerState::NoState, None),
            record(ProviderStatus::Error, PowerState::NoState, Some(7)),
        ] {
            let pass = reconcile(&server, &with_view(&server, ProviderView::Present(booted.clone())), &options, at(10));
            assert_eq!(deletes(&pass), 0, "deleted a booted server: {booted:?}");
            assert!(pass.status.provisioned_at.is_some(), "the boot was not latched: {booted:?}");
            assert!(!pass.status.provider_create_retrying);
        }
    }
}

// --- The monitor and the reconciler agree -----------------------------------

#[test]
fn a_failed_server_being_cleared_for_retry_is_not_rewritten_by_each_poll() {
    let options = Options::with_max_attempts(3);
    let mut server = create_failed(0);
    let errored = record(ProviderStatus::Error, PowerState::NoState, None);
    let first = reconcile(&server, &with_view(&server, ProviderView::Present(errored.clone())), &options, at(10));
    assert_eq!(deletes(&first), 1);
    persist(&mut server, &first);
    // The delete is slow: five polls and passes see the same ERROR record.
    let mut writes = 0;
    for poll in 0..5 {
        let t = 20 + poll * 30;
        let observed = observe(&server.status, Some(&errored), at(t));
        if status_merge_patch(&server.status, &observed).is_some() {
            writes += 1;
            server.status = observed;
        }
        let pass = reconcile(&server, &with_view(&server, ProviderView::Present(errored.clone())), &options, at(t + 1));
        assert_eq!(deletes(&pass), 1, "the delete is asked again");
        if writes_status(&pass) {
            writes += 1;
        }
        persist(&mut server, &pass);
    }
    assert_eq!(writes, 0, "status churned between the monitor and the reconciler");
}

/// Issue 25, item 6: a booted server whose compute host is down, which Nova
/// reports UNKNOWN. The monitor writes Healthy Unknown (a wake edge); the
/// woken pass, holding the same record, once reset it to "Creating provider
/// server", the next poll wrote Unknown again, and so on: 5 polls, 10 status
/// writes and 10 passes. The pass now writes what the monitor writes from
/// the record, so after the first poll nothing is written and nothing wakes.
#[test]
fn a_booted_server_the_provider_reports_unknown_is_not_rewritten_each_poll() {
    let options = Options::with_max_attempts(3);
    let mut server = adopted();
    let active = record(ProviderStatus::Active, PowerState::Running, Some(5));
    server.status = observe(&server.status, Some(&active), at(6));
    let settled = reconcile(&server, &with_view(&server, ProviderView::Present(active)), &options, at(7));
    persist(&mut server, &settled);
    let unknown = record(ProviderStatus::Unknown, PowerState::Running, Some(5));
    let (mut writes, mut passes) = (0, 0);
    for poll in 0..5 {
        let t = 10 + 10 * poll;
        let polled = observe(&server.status, Some(&unknown), at(t));
        if status_merge_patch(&server.status, &polled).is_some() {
            writes += 1;
            let mut written = server.clone();
            written.status = polled;
            let woken = should_wake(Some(&server), &written);
            server = written;
            if woken {
                passes += 1;
                let pass = reconcile(
                    &server,
                    &with_view(&server, ProviderView::Present(unknown.clone())),
                    &options,
                    at(t + 1),
                );
                if writes_status(&pass) {
                    writes += 1;
                }
                persist(&mut server, &pass);
            }
        }
    }
    assert_eq!((writes, passes), (1, 1), "the monitor and the passes rewrote each other");
    let healthy = server.status.condition(ConditionType::Healthy).unwrap();
    assert_eq!((healthy.status, healthy.reason), (ConditionStatus::Unknown, ConditionReason::Unknown));
}

// --- Wake edges -------------------------------------------------------------

#[test]
fn a_missing_booted_server_that_reappears_wakes_the_reconciler() {
    let options = Options::with_max_attempts(3);
    let mut server = adopted();
    server.status.provisioned_at = Some(at(5));
    server.status.phase = Some(Phase::Running);
    set_condition(
        &mut server.status.conditions,
        ConditionType::Healthy,
        ConditionStatus::True,
        ConditionReason::Healthy,
        "Server is active",
        at(5),
    );
    // The monitor stops seeing it; the reconciler reports it missing.
    let mut unseen = server.clone();
    unseen.status = observe(&server.status, None, at(10));
    let missing = reconcile(&unseen, &with_view(&unseen, ProviderView::Absent), &options, at(11));
    persist(&mut unseen, &missing);
    assert_eq!(available(&missing).reason, ConditionReason::Errored);
    // It is back: the monitor's write must wake the reconciler.
    let back = record(ProviderStatus::Active, PowerState::Running, Some(5));
    let mut seen = unseen.clone();
    seen.status = observe(&unseen.status, Some(&back), at(40));
    assert!(should_wake(Some(&unseen), &seen));
    let pass = reconcile(&seen, &with_view(&seen, ProviderView::Present(back)), &options, at(41));
    assert_eq!(pass.outcome, Outcome::Done);
    assert_eq!(available(&pass).status, ConditionStatus::True);
}

/// A create whose short-lived provider server vanishes before the monitor
/// ever sees it: the pass that saw it building ended Done, so only the
/// monitor's "not found" can bring a pass back to count it lost.
#[test]
fn a_provider_server_that_vanishes_unseen_before_a_poll_wakes_the_reconciler() {
    let options = Options::with_max_attempts(3).with_create_grace(std::time::Duration::from_secs(60));
    let mut server = adopted();
    // The monitor polled before the create: no provider server yet.
    server.status = observe(&server.status, None, at(1));
    issue_create(&mut server, &options, 10);
    let building = record(ProviderStatus::Build, PowerState::NoState, None);
    let done = reconcile(&server, &with_view(&server, ProviderView::Present(building)), &options, at(12));
    assert_eq!(done.outcome, Outcome::Done, "a building server is left to the monitor");
    persist(&mut server, &done);
    // Gone before the next poll: the poll writes "not found", and that write must wake.
    let polled = observe(&server.status, None, at(20));
    assert!(status_merge_patch(&server.status, &polled).is_some(), "the poll writes nothing, so nothing can wake");
    let mut unseen = server.clone();
    unseen.status = polled;
    assert!(should_wake(Some(&server), &unseen), "nothing would wake the Server");
    assert!(!should_wake(Some(&unseen), &unseen.clone()), "only the edge");
    // Past the grace, the woken pass counts the create lost and retries.
    let pass = reconcile(&unseen, &with_view(&unseen, ProviderView::Absent), &options, at(100));
    assert_eq!(pass.status.provider_create_failures, 1);
    assert_eq!(event_reasons(&pass), ["ProviderCreateRetrying", "ProviderCreateRetryReady"]);
}

proptest::proptest! {
    /// Whatever the status before it, a create whose pass then ended Done
    /// (never booted) and whose provider server the monitor then does not
    /// find is written and wakes a pass: never a Server stuck Provisioned
    /// with no provider server.
    #[test]
    fn an_issued_create_the_monitor_loses_always_wakes_a_pass(
        status in support::strategies::arb_status(),
        seen_building in proptest::prelude::any::<bool>(),
    ) {
        let options = Options::with_max_attempts(100);
        let mut server = adopted();
        server.status = status;
        // Never booted: no launch signal, no post-launch phase.
        server.status.launched_at = None;
        server.status.provisioned_at = None;
        server.status.phase = server.status.phase.filter(|phase| !phase.is_post_launch());
        let issued = reconcile(&server, &with_view(&server, ProviderView::Absent), &options, at(10));
        proptest::prop_assume!(creates(&issued) == 1);
        persist(&mut server, &issued);
        let building = record(ProviderStatus::Build, PowerState::NoState, None);
        if seen_building {
            server.status = observe(&server.status, Some(&building), at(11));
        }
        let done = reconcile(&server, &with_view(&server, ProviderView::Present(building)), &options, at(12));
        proptest::prop_assume!(done.outcome == Outcome::Done);
        persist(&mut server, &done);
        let mut unseen = server.clone();
        unseen.status = observe(&server.status, None, at(20));
        proptest::prop_assert!(status_merge_patch(&server.status, &unseen.status).is_some());
        proptest::prop_assert!(should_wake(Some(&server), &unseen));
    }
}

/// Issue 25, item 5: a server taken over from another controller that
/// vanishes before it booted. It has no create-issued note, so the edge of a
/// lost create never rose: the Server stayed Provisioned with no provider
/// server until the resync. Taken-over servers get the same wake edges as
/// created ones, and the woken pass creates the Server's server again.
#[test]
fn an_adopted_server_that_vanishes_before_it_booted_wakes_a_pass() {
    let options = Options::with_max_attempts(3);
    let mut server = adopted();
    let building = ProviderServer { adopted: true, ..record(ProviderStatus::Build, PowerState::NoState, None) };
    let taken_over = reconcile(&server, &with_view(&server, ProviderView::Present(building.clone())), &options, at(10));
    assert_eq!(event_reasons(&taken_over), ["ProviderServerAdopted"]);
    persist(&mut server, &taken_over);
    server.status = observe(&server.status, Some(&building), at(20));
    // Gone before it booted: the monitor's "not found" must wake a pass.
    let mut unseen = server.clone();
    unseen.status = observe(&server.status, None, at(30));
    assert!(should_wake(Some(&server), &unseen), "nothing would wake the Server");
    assert!(!should_wake(Some(&unseen), &unseen.clone()), "only the edge");
    let pass = reconcile(&unseen, &with_view(&unseen, ProviderView::Absent), &options, at(31));
    assert_eq!(creates(&pass), 1, "the woken pass makes the Server's server again");
}

proptest::proptest! {
    /// Whatever the status before it, a server taken over, never seen to
    /// boot, that the monitor then does not find is written and wakes a pass.
    #[test]
    fn an_adopted_server_the_monitor_loses_always_wakes_a_pass(
        status in support::strategies::arb_status(),
        seen_building in proptest::prelude::any::<bool>(),
    ) {
        let options = Options::with_max_attempts(100);
        let mut server = adopted();
        server.status = status;
        server.status.launched_at = None;
        server.status.provisioned_at = None;
        server.status.phase = server.status.phase.filter(|phase| !phase.is_post_launch());
        server.status.provider_create_retrying = false;
        let building = ProviderServer { adopted: true, ..record(ProviderStatus::Build, PowerState::NoState, None) };
        if seen_building {
            server.status = observe(&server.status, Some(&building), at(11));
        }
        let done = reconcile(&server, &with_view(&server, ProviderView::Present(building)), &options, at(12));
        proptest::prop_assume!(done.outcome == Outcome::Done);
        persist(&mut server, &done);
        let mut unseen = server.clone();
        unseen.status = observe(&server.status, None, at(20));
        proptest::prop_assert!(status_merge_patch(&server.status, &unseen.status).is_some());
        proptest::prop_assert!(should_wake(Some(&server), &unseen));
    }
}

// --- Arithmetic -------------------------------------------------------------

#[test]
fn the_largest_cap_neither_overflows_nor_re_arms() {
    let options = Options::with_max_attempts(i32::MAX);
    for failures in [i32::MAX - 1, i32::MAX] {
        let server = create_failed(failures);
        let errored = record(ProviderStatus::Error, PowerState::NoState, None);
        let pass = reconcile(&server, &with_view(&server, ProviderView::Present(errored)), &options, at(10));
        assert!(matches!(pass.outcome, Outcome::Terminal(_)), "{failures}: {:?}", pass.outcome);
        assert_eq!(pass.status.provider_create_failures, i32::MAX);
        assert_eq!(creates(&pass) + deletes(&pass), 0);
    }
}

// --- Deletion ---------------------------------------------------------------

#[test]
fn deletion_does_not_release_a_server_while_a_create_of_unknown_fate_may_land() {
    let options = Options::default();
    let mut server = adopted();
    let create = issue_create(&mut server, &options, 10);
    fail_create(&mut server, &create, CloudError::Timeout { message: "no answer".into() }, 15);
    server.meta.deleting = true;
    let early = reconcile(&server, &with_view(&server, ProviderView::Absent), &options, at(20));
    assert!(
        !early.actions.iter().any(|a| matches!(a, Action::RemoveFinalizer | Action::RemoveReference(_))),
        "released while the create may still land: {:?}",
        early.actions
    );
    assert!(early.outcome.requeues());
    // Its fate is settled once the grace is over: absent means it never landed.
    let settled = reconcile(&server, &with_view(&server, ProviderView::Absent), &options, at(100_000));
    assert_eq!(settled.actions.last(), Some(&Action::RemoveFinalizer));
}

/// The deleting pass that finds the create's server deletes it and settles
/// the note: the absence after that delete is final at once, however recent
/// the create. A server that vanished on its own before any deleting pass
/// saw it is waited for until the grace is over (the note is the only
/// evidence of which create a record belongs to).
#[test]
fn deletion_of_a_server_whose_create_was_seen_landed_is_not_delayed() {
    let options = Options::default();
    let mut server = adopted();
    issue_create(&mut server, &options, 10);
    let building = record(ProviderStatus::Build, PowerState::NoState, None);
    let building = ProviderServer { created: Some(at(11)), ..building };
    server.status = observe(&server.status, Some(&building), at(12));
    server.meta.deleting = true;
    let vanished = reconcile(&server, &with_view(&server, ProviderView::Absent), &options, at(20));
    assert!(vanished.outcome.requeues(), "{:?}", vanished.outcome);
    let delete = reconcile(&server, &with_view(&server, ProviderView::Present(building)), &options, at(20));
    assert_eq!(deletes(&delete), 1);
    persist(&mut server, &delete);
    assert!(!server.meta.annotations.contains_key(CREATE_ISSUED_ANNOTATION), "the note is settled by the delete");
    let gone = reconcile(&server, &with_view(&server, ProviderView::Absent), &options, at(21));
    assert_eq!(gone.actions.last(), Some(&Action::RemoveFinalizer));
}

/// An operator reset (providerCreateFailures back to 0) after a create
/// whose server failed and then vanished: that one create is counted once.
/// The create-issued note of the old window carries an attempt number the
/// new window reaches again; were it kept after the failure was counted, the
/// same create would be counted a second time as "lost" (found by the
/// sequence model in invariants.rs).
#[test]
fn a_failed_create_is_counted_once_even_when_a_reset_brings_the_counter_back_to_its_attempt() {
    let options = Options {
        provider_create_max_attempts: 3,
        create_grace: std::time::Duration::from_secs(60),
        listed_view_max_age: Options::DEFAULT_LISTED_VIEW_MAX_AGE,
    };
    let mut server = create_failed(0);
    // The failed server's create was issued as attempt 1, long ago, by a
    // pass that wrote Available before it.
    server.meta.annotations.insert(CREATE_ISSUED_ANNOTATION.into(), format!("1@{}", at(1)));
    let (status, reason) = (ConditionStatus::False, ConditionReason::Provisioning);
    set_condition(&mut server.status.conditions, ConditionType::Available, status, reason, "Creating", at(1));
    let mut counted = Vec::new();
    let mut creates = 0;
    for t in [1_000, 1_010, 1_020, 1_030] {
        let decision = reconcile(&server, &with_view(&server, ProviderView::Absent), &options, at(t));
        creates += creates_in(&decision);
        persist(&mut server, &decision);
        counted.push(server.status.provider_create_failures);
        if creates > 0 {
            break;
        }
    }
    assert_eq!(creates, 1, "the retry creates again: {counted:?}");
    assert_eq!(server.status.provider_create_failures, 1, "one failed create, counted once: {counted:?}");
}

fn creates_in(decision: &Decision) -> usize {
    decision.actions.iter().filter(|a| matches!(a, Action::CreateProviderServer(_))).count()
}

/// Issue 25, item 4: a Server parked at the cap through lost-before-launch
/// keeps its last attempt's `scheduledAt` (the park does not reset the
/// runtime status). After a retry, a create whose answer is lost and a
/// deletion 5 s later, the absence the deleting pass reads says nothing of
/// that create: the old `scheduledAt` is no evidence that it landed. The
/// deletion waits on the create-issued note's grace.
#[test]
fn deletion_waits_on_the_create_issued_note_not_on_an_old_scheduled_at() {
    let options = Options::with_max_attempts(1).with_create_grace(std::time::Duration::from_secs(60));
    let mut server = adopted();
    issue_create(&mut server, &options, 10);
    // The monitor sees the attempt's server, then it vanishes before booting.
    let building = ProviderServer { created: Some(at(11)), ..record(ProviderStatus::Build, PowerState::NoState, None) };
    server.status = observe(&server.status, Some(&building), at(12));
    server.status = observe(&server.status, None, at(20));
    let parked = reconcile(&server, &with_view(&server, ProviderView::Absent), &options, at(100));
    persist(&mut server, &parked);
    assert_eq!(server_core::lifecycle(&server, &options), server_core::Lifecycle::Parked(ParkKind::AtCap));
    assert_eq!(server.status.scheduled_at, Some(at(11)), "the park keeps the last attempt's scheduledAt");
    // The operator asks for a retry; its create's answer is lost.
    server.meta.annotations.insert(server_core::model::RETRY_ANNOTATION.into(), "now".into());
    let retried = reconcile(&server, &with_view(&server, ProviderView::Absent), &options, at(200));
    persist(&mut server, &retried);
    let create = create_action(&retried);
    fail_create(&mut server, &create, CloudError::Timeout { message: "no answer".into() }, 215);
    // Deleted 5 s later: the create may still land.
    server.meta.deleting = true;
    let early = reconcile(&server, &with_view(&server, ProviderView::Absent), &options, at(220));
    assert!(
        !early.actions.iter().any(|a| matches!(a, Action::RemoveFinalizer | Action::RemoveReference(_))),
        "released while the create may still land: {:?}",
        early.actions
    );
    assert!(early.outcome.requeues());
    // It lands: the deleting pass deletes it, and the absence after that delete is final at once.
    let landed = record(ProviderStatus::Build, PowerState::NoState, None);
    let deleting = reconcile(&server, &with_view(&server, ProviderView::Present(landed)), &options, at(230));
    assert_eq!(deletes(&deleting), 1);
    persist(&mut server, &deleting);
    let gone = reconcile(&server, &with_view(&server, ProviderView::Absent), &options, at(240));
    assert_eq!(gone.actions.last(), Some(&Action::RemoveFinalizer), "a deleted create's absence is final");
}

/// An operator lowering `providerCreateFailures` while a create is in flight
/// (its answer lost, within its grace) leaves a note naming another attempt
/// than the counter. The create may land all the same: no second create is
/// sent until its grace is over (found by the deletion sequences of
/// invariants.rs, which model creates that land after their answer).
#[test]
fn a_reset_during_a_create_in_flight_does_not_create_again_within_its_grace() {
    let options = Options::with_max_attempts(3).with_create_grace(std::time::Duration::from_secs(60));
    let mut server = adopted();
    server.status.provider_create_failures = 1;
    let create = issue_create(&mut server, &options, 10);
    fail_create(&mut server, &create, CloudError::Timeout { message: "no answer".into() }, 15);
    server.status.provider_create_failures = 0;
    let early = reconcile(&server, &with_view(&server, ProviderView::Absent), &options, at(30));
    assert_eq!(creates(&early), 0, "{:?}", early.actions);
    assert!(early.outcome.requeues());
    let later = reconcile(&server, &with_view(&server, ProviderView::Absent), &options, at(100));
    assert_eq!(creates(&later), 1, "once the grace is over the counter's attempt is created");
}

/// A note of an attempt the counter has already moved past is settled: the
/// counter moved only by counting that attempt. The next attempt's create
/// goes out at once, not after the settled create's grace.
#[test]
fn a_note_of_an_attempt_already_counted_does_not_hold_up_the_next_create() {
    let options = Options::with_max_attempts(3).with_create_grace(std::time::Duration::from_secs(60));
    let mut server = adopted();
    server.status.provider_create_failures = 1;
    issue_create(&mut server, &options, 10);
    // Its server was seen failing, deleted and counted: the counter is past it.
    server.status.provider_create_failures = 2;
    let next = reconcile(&server, &with_view(&server, ProviderView::Absent), &options, at(12));
    assert_eq!(creates(&next), 1, "{:?}", next.actions);
}

/// A healthy running Server whose provider read fails once (a 503 while a
/// restarted operator reads every Server): the pass waits and writes
/// nothing, so its conditions never flip to False and back.
#[test]
fn a_transient_read_error_never_flips_a_healthy_servers_conditions() {
    let options = Options::with_max_attempts(3);
    let mut server = adopted();
    let running = record(ProviderStatus::Active, PowerState::Running, Some(5));
    server.status = observe(&server.status, Some(&running), at(6));
    for second in [10, 11] {
        let pass =
            reconcile(&server, &with_view(&server, ProviderView::Present(running.clone())), &options, at(second));
        persist(&mut server, &pass);
    }
    let settled = reconcile(&server, &with_view(&server, ProviderView::Present(running.clone())), &options, at(12));
    assert!(!writes_status(&settled), "settled before the fault: {:?}", settled.actions);
    for outage in [ProviderView::Unknown("Nova answered 503".into()), ProviderView::Unknown("read timed out".into())] {
        let pass = reconcile(&server, &with_view(&server, outage), &options, at(20));
        assert!(!writes_status(&pass), "a transient read error rewrote the status: {:?}", pass.actions);
        assert_eq!(pass.events().count(), 0);
    }
}

// --- A reference the API server refuses -------------------------------------

/// etcd refuses a Network whose references fill its request limit: the
/// follow-up writes no status (before a first create, an Available
/// condition would make the create-issued note stand for a create never
/// sent) and sends one Warning naming the object and the refusal.
#[test]
fn a_refused_reference_write_is_an_event_naming_the_object_and_writes_no_status() {
    use server_core::model::ResourceKind;
    use server_core::reconcile::{EventType, Reference};
    use server_core::{ApiCause, ApiFailure};
    let server = server();
    let reference = Reference {
        kind: ResourceKind::Network,
        name: "net-1".into(),
        finalizer: server_core::model::reference_finalizer("web"),
    };
    let refusal = ApiFailure::new(
        "adding the reference",
        ApiCause::Answered { code: 500, reason: String::new(), message: "etcdserver: request is too large".into() },
    );
    for (action, verb) in
        [(Action::AddReference(reference.clone()), "hold"), (Action::RemoveReference(reference.clone()), "release")]
    {
        let follow_up = action_failed(&server, &action, &ActionFailure::Api(refusal.clone()), at(5));
        assert!(!writes_status(&follow_up), "{follow_up:?}");
        assert_eq!(follow_up.status, server.status);
        let events: Vec<_> = follow_up.events().collect();
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].type_, EventType::Warning);
        assert_eq!(
            events[0].note,
            format!(
                "cannot {verb} the reference on network net-1: HTTP 500: etcdserver: request is too large; retrying"
            )
        );
        assert!(matches!(follow_up.outcome, Outcome::Error(_)), "{:?}", follow_up.outcome);
    }
}
