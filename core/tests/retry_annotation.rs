//! The operator's retry annotation: consumed once by the next pass, it
//! un-parks a Server parked at the cap or by a refusal, never recreates a
//! server that booted, and always says in an event what it did.
#![allow(clippy::unwrap_used)]

mod support;

use server_core::model::{CREATE_REFUSED_ANNOTATION, Phase, RETRY_ANNOTATION, Server};
use server_core::port::CloudError;
use server_core::reconcile::{Action, ActionFailure, Decision, Options, ProviderView, action_failed};
use server_core::{Lifecycle, ParkKind, lifecycle, reconcile, should_wake};
use support::*;

fn options() -> Options {
    Options::with_max_attempts(3)
}

fn pass(server: &mut Server, view: ProviderView, t: i64) -> Decision {
    let mut facts = referenced_facts(server);
    facts.provider = view;
    let decision = reconcile(server, &facts, &options(), at(t));
    persist(server, &decision);
    decision
}

fn request_retry(server: &mut Server) -> Server {
    let before = server.clone();
    server.meta.annotations.insert(RETRY_ANNOTATION.into(), "2026-11-30T18:00:00Z".into());
    before
}

fn position(decision: &Decision, wanted: impl Fn(&Action) -> bool) -> Option<usize> {
    decision.actions.iter().position(wanted)
}

fn parked_at_cap() -> Server {
    let mut server = create_failed(3);
    pass(&mut server, ProviderView::Absent, 10);
    assert_eq!(lifecycle(&server, &options()), Lifecycle::Parked(ParkKind::AtCap));
    server
}

#[test]
fn a_retry_wakes_a_parked_server() {
    let mut server = parked_at_cap();
    let before = request_retry(&mut server);
    assert!(should_wake(Some(&before), &server));
    assert!(!should_wake(Some(&server), &server), "an annotation already seen does not wake again");
}

#[test]
fn a_server_parked_at_the_cap_creates_again_once_its_count_is_reset() {
    let mut server = parked_at_cap();
    request_retry(&mut server);
    let decision = pass(&mut server, ProviderView::Absent, 20);

    // The last failed server was counted when it failed: it is cleared as a
    // retry (here the provider no longer has it), not counted again.
    assert_eq!(event_reasons(&decision), ["RetryRequested", "ProviderCreateRetryReady"]);
    assert_eq!(decision.status.provider_create_failures, 0);
    // The reset is written before the request is consumed: a crash in
    // between finds the Server no longer parked, so nothing is reset twice.
    let reset = position(&decision, |a| matches!(a, Action::WriteStatus(_))).unwrap();
    let consumed =
        position(&decision, |a| matches!(a, Action::Annotate { key, value: None } if *key == RETRY_ANNOTATION));
    assert!(reset < consumed.unwrap(), "{:?}", decision.actions);
    assert!(!server.meta.annotations.contains_key(RETRY_ANNOTATION));

    // The pass that finds the failed server gone creates, as attempt 1.
    assert_eq!(creates(&decision), 1);

    // Consumed once: the next pass awaits that create and announces no retry.
    let next = pass(&mut server, ProviderView::Absent, 21);
    assert_eq!(creates(&next), 0);
    assert!(event_reasons(&next).iter().all(|r| *r != "RetryRequested"), "{:?}", event_reasons(&next));
    assert_eq!(next.status.provider_create_failures, 0);
}

#[test]
fn a_refused_server_forgets_the_refusal_and_creates_again() {
    let mut server = adopted();
    let first = pass(&mut server, ProviderView::Absent, 10);
    let create = first.actions.iter().find(|a| matches!(a, Action::CreateProviderServer(_))).unwrap().clone();
    let refusal = CloudError::Refused { status: 403, message: "Quota exceeded for instances".into() };
    let follow_up = action_failed(&server, &create, &ActionFailure::Cloud(refusal), at(11));
    persist(&mut server, &follow_up);
    assert_eq!(lifecycle(&server, &options()), Lifecycle::Parked(ParkKind::Refused));
    assert_eq!(creates(&pass(&mut server, ProviderView::Absent, 12)), 0, "parked until the spec changes");

    request_retry(&mut server);
    let decision = pass(&mut server, ProviderView::Absent, 20);
    assert_eq!(event_reasons(&decision), ["RetryRequested"]);
    assert!(decision.actions.contains(&Action::Annotate { key: CREATE_REFUSED_ANNOTATION, value: None }));
    assert_eq!(creates(&decision), 1);
}

/// A retry of refused user data checks it again; unchanged, it is refused
/// again (no create), and the retry's event says that fixing the user data
/// is what un-parks it.
#[test]
fn a_retry_of_refused_user_data_alone_is_refused_again() {
    let mut server = adopted();
    server.spec.user_data = Some(server_core::model::UserData(b"not a payload cloud-init runs\n".to_vec()));
    let first = pass(&mut server, ProviderView::Absent, 10);
    assert_eq!(creates(&first), 0);
    assert_eq!(lifecycle(&server, &options()), Lifecycle::Parked(ParkKind::UserDataRefused));

    request_retry(&mut server);
    let decision = pass(&mut server, ProviderView::Absent, 20);
    assert_eq!(creates(&decision), 0, "the same user data is refused again");
    let notes: Vec<&str> = decision
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Emit(event) if event.reason.as_str() == "RetryRequested" => Some(event.note.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(notes.len(), 1, "{:?}", decision.actions);
    assert!(notes[0].contains("Fix spec.userData"), "{notes:?}");
    assert_eq!(lifecycle(&server, &options()), Lifecycle::Parked(ParkKind::UserDataRefused));
}

#[test]
fn a_server_that_booted_and_vanished_is_never_recreated_by_a_retry() {
    let mut server = adopted();
    server.status.provisioned_at = Some(at(5));
    server.status.launched_at = Some(at(5));
    server.status.phase = Some(Phase::Running);
    pass(&mut server, ProviderView::Absent, 10);
    assert_eq!(lifecycle(&server, &options()), Lifecycle::Parked(ParkKind::MissingAfterBoot));

    request_retry(&mut server);
    let decision = pass(&mut server, ProviderView::Absent, 20);
    assert_eq!(event_reasons(&decision), ["RetryRefused"]);
    assert_eq!(creates(&decision) + deletes(&decision), 0);
    assert!(!server.meta.annotations.contains_key(RETRY_ANNOTATION), "consumed, so it is not refused forever");
    assert_eq!(lifecycle(&server, &options()), Lifecycle::Parked(ParkKind::MissingAfterBoot));
}

#[test]
fn a_retry_of_a_server_that_is_not_parked_is_consumed_and_changes_nothing_else() {
    let mut server = adopted();
    let mut twin = server.clone();
    request_retry(&mut server);
    let with_retry = pass(&mut server, ProviderView::Absent, 10);
    let without = pass(&mut twin, ProviderView::Absent, 10);
    assert_eq!(event_reasons(&with_retry), ["RetryRequested"]);
    assert_eq!(with_retry.status, without.status);
    assert_eq!(creates(&with_retry), creates(&without));
    assert!(!server.meta.annotations.contains_key(RETRY_ANNOTATION));
}
