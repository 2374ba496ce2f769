//! Only a sent server create is a create attempt (DESIGN "Only a sent
//! create is an attempt"): a step before it (a lookup, the port) that fails
//! is that step's failure, retried, never counted against the cap and never
//! a create of unknown fate. The property runs against server-core's rules
//! (it must hold) and against the rule as it was (it must catch it).
#![allow(clippy::unwrap_used)]

mod support;

use jiff::Timestamp;
use proptest::prelude::*;
use server_core::model::{CREATE_ISSUED_ANNOTATION, Server};
use server_core::port::{CloudError, CreateStep};
use server_core::reconcile::{
    Action, ActionFailure, Decision, EventReason, Facts, Options, Outcome, ProviderView, action_failed,
};
use server_core::{lifecycle, reconcile};
use support::*;

type FollowUp = fn(&Server, &Action, &ActionFailure, Timestamp) -> Decision;

fn arb_source() -> impl Strategy<Value = CloudError> {
    prop_oneof![
        (500u16..505).prop_map(|status| CloudError::from_http(status, "unavailable")),
        Just(CloudError::Timeout { message: "cut".into() }),
        Just(CloudError::from_http(409, "busy")),
        Just(CloudError::from_http(400, "invalid address pair")),
        Just(CloudError::from_http(401, "token")),
    ]
}

fn arb_step() -> impl Strategy<Value = CreateStep> {
    prop_oneof![Just(CreateStep::Lookup), Just(CreateStep::Port)]
}

fn facts(server: &Server) -> Facts {
    Facts { provider: ProviderView::Absent, ..referenced_facts(server) }
}

/// A Server whose creates fail before the server create any number of
/// times, each followed by passes spread over up to three create graces:
/// the failure count stays 0, no event speaks of a failed or lost create,
/// nothing parks, and every pass that is not waiting on something else
/// sends a create again.
fn failures_before_the_create_are_never_attempts(follow_up: FollowUp) -> Result<(), String> {
    let strategy = prop::collection::vec((arb_step(), arb_source(), 1i64..1_800), 1..8);
    run(strategy, |blips| {
        let options = Options::with_max_attempts(3).with_create_grace(std::time::Duration::from_secs(600));
        let mut server = server();
        let mut now = 1_000;
        for (step, source, later) in blips {
            let decision = reconcile(&server, &facts(&server), &options, at(now));
            persist(&mut server, &decision);
            let Some(create) = decision.actions.iter().find(|a| matches!(a, Action::CreateProviderServer(_))) else {
                return Err(TestCaseError::fail(format!("no create at {now}: {:?}", decision.outcome)));
            };
            let failure = ActionFailure::Cloud(CloudError::BeforeCreate { step, source: Box::new(source) });
            let after = follow_up(&server, create, &failure, at(now));
            persist(&mut server, &after);
            prop_assert!(after.outcome.requeues(), "{:?}", after.outcome);
            prop_assert!(
                !server.meta.annotations.contains_key(CREATE_ISSUED_ANNOTATION),
                "a create never sent is still issued"
            );
            now += later;
            for reason in event_reasons(&reconcile(&server, &facts(&server), &options, at(now))) {
                prop_assert!(
                    reason != EventReason::ProviderCreateRetrying.as_str()
                        && reason != EventReason::ProviderCreateFailed.as_str(),
                    "{reason}"
                );
            }
            prop_assert_eq!(server.status.provider_create_failures, 0);
            prop_assert!(lifecycle(&server, &options).park().is_none(), "parked: {:?}", lifecycle(&server, &options));
        }
        Ok(())
    })
}

#[test]
fn a_failure_before_the_server_create_is_never_a_create_attempt() {
    must_hold(failures_before_the_create_are_never_attempts(action_failed));
}

/// The rule as it was: the step's own answer taken as the create's (a 5xx
/// or a timeout in a lookup left the create's fate unknown).
fn step_answer_as_the_creates(server: &Server, action: &Action, failure: &ActionFailure, now: Timestamp) -> Decision {
    match failure {
        ActionFailure::Cloud(CloudError::BeforeCreate { source, .. }) => {
            action_failed(server, action, &ActionFailure::Cloud((**source).clone()), now)
        }
        other => action_failed(server, action, other, now),
    }
}

#[test]
fn the_attempt_property_catches_the_rule_as_it_was() {
    must_catch(|| failures_before_the_create_are_never_attempts(step_answer_as_the_creates));
}

/// A step refused outright (a 400 on the port) is that step's error,
/// requeued: not a refused create parked until the spec changes.
#[test]
fn a_refused_step_is_an_error_that_requeues_not_a_refused_create() {
    let options = Options::default();
    let mut server = server();
    let decision = reconcile(&server, &facts(&server), &options, at(1_000));
    persist(&mut server, &decision);
    let create = decision.actions.iter().find(|a| matches!(a, Action::CreateProviderServer(_))).unwrap();
    let refused =
        CloudError::BeforeCreate { step: CreateStep::Port, source: Box::new(CloudError::from_http(400, "x")) };
    let after = action_failed(&server, create, &ActionFailure::Cloud(refused), at(1_000));
    assert!(matches!(after.outcome, Outcome::Error(_)), "{:?}", after.outcome);
    assert!(event_reasons(&after).is_empty(), "{:?}", event_reasons(&after));
    persist(&mut server, &after);
    assert!(lifecycle(&server, &options).park().is_none());
}

/// A create's failure, whichever step it met.
fn arb_create_failure() -> impl Strategy<Value = CloudError> {
    prop_oneof![
        (arb_step(), arb_source())
            .prop_map(|(step, source)| CloudError::BeforeCreate { step, source: Box::new(source) }),
        arb_source(),
    ]
}

type Rules = fn(&Server, &Facts, &Options, Timestamp) -> Decision;

/// Only a Server's first create tells the adapter that no port of an
/// earlier attempt can exist: once any create ran (each may leave its port
/// behind, whatever its failure), every later create says otherwise, so the
/// adapter looks for that port to reuse. The first create says it.
fn only_the_first_create_skips_the_port_lookup(rules: Rules) -> Result<(), String> {
    let strategy = prop::collection::vec((arb_create_failure(), 1i64..1_800), 1..8);
    run(strategy, |failures| {
        let options = Options::with_max_attempts(3).with_create_grace(std::time::Duration::from_secs(600));
        let mut server = server();
        let mut now = 1_000;
        let mut port_may_exist = false;
        for (failure, later) in failures {
            let decision = rules(&server, &facts(&server), &options, at(now));
            persist(&mut server, &decision);
            if let Some(create) = decision.actions.iter().find(|a| matches!(a, Action::CreateProviderServer(_))) {
                let Action::CreateProviderServer(request) = create else { unreachable!() };
                prop_assert_eq!(request.first_create, !port_may_exist, "first create said wrong");
                port_may_exist = true;
                let after = action_failed(&server, create, &ActionFailure::Cloud(failure), at(now));
                persist(&mut server, &after);
            }
            now += later;
        }
        Ok(())
    })
}

#[test]
fn only_the_first_create_of_a_server_skips_the_port_lookup() {
    must_hold(only_the_first_create_skips_the_port_lookup(reconcile));
}

/// Takes the create note alone as the sign of an earlier create: a create
/// whose answer proved it did not land releases its note, and its port stays.
fn first_while_no_note(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    let mut decision = reconcile(server, facts, options, now);
    for action in &mut decision.actions {
        if let Action::CreateProviderServer(request) = action {
            request.first_create = !server.meta.annotations.contains_key(CREATE_ISSUED_ANNOTATION);
        }
    }
    decision
}

#[test]
fn the_first_create_property_catches_a_note_only_rule() {
    must_catch(|| only_the_first_create_skips_the_port_lookup(first_while_no_note));
}
