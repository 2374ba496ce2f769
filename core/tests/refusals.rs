//! Refusals are named for what they are and say what a person must do
//! (DESIGN "Parks"): a policy's 403 parks as forbidden, never as a refused
//! create that a spec change could fix; a refused login is an error retried
//! under the credential's backoff; a failure after the server exists (its
//! floating IP) never says the create was refused.
#![allow(clippy::unwrap_used)]

mod support;

use server_core::lifecycle::{Lifecycle, Park, ParkKind, lifecycle};
use server_core::model::{RETRY_ANNOTATION, Server};
use server_core::port::{CloudError, CreateStep, FloatingIpRequest};
use server_core::reconcile::{Action, ActionFailure, Options, Outcome, PassError, ProviderView, ServerPart};
use server_core::{action_failed, reconcile};
use support::*;

fn issue_create(server: &mut Server, t: i64) -> Action {
    let mut facts = referenced_facts(server);
    facts.provider = ProviderView::Absent;
    let decision = reconcile(server, &facts, &Options::default(), at(t));
    persist(server, &decision);
    decision.actions.iter().find(|a| matches!(a, Action::CreateProviderServer(_))).cloned().unwrap()
}

fn policy() -> CloudError {
    CloudError::NotPermitted {
        message: "creating port: rule:create_port is disallowed by policy (HTTP 403, request id req-1)".into(),
    }
}

/// A policy's refusal of the create, or of the port before it, parks the
/// Server as forbidden: the message says no spec change fixes it and what
/// to do, later passes stay parked without creating, and a retry request
/// un-parks it.
#[test]
fn a_policy_refusal_parks_as_forbidden_and_says_what_a_person_must_do() {
    for error in [policy(), CloudError::BeforeCreate { step: CreateStep::Port, source: Box::new(policy()) }] {
        let mut server = adopted();
        let create = issue_create(&mut server, 10);
        let follow_up = action_failed(&server, &create, &ActionFailure::Cloud(error.clone()), at(11));
        persist(&mut server, &follow_up);
        let Outcome::Terminal(park) = &follow_up.outcome else { panic!("{:?}", follow_up.outcome) };
        assert_eq!(park.kind(), ParkKind::Forbidden, "{error}");
        let message = park.message();
        assert!(message.contains("no spec change can fix a policy"), "{message}");
        assert!(message.contains(RETRY_ANNOTATION), "{message}");
        assert!(!message.contains("change the spec to try again"), "{message}");
        assert_eq!(lifecycle(&server, &Options::default()), Lifecycle::Parked(ParkKind::Forbidden));

        let mut facts = referenced_facts(&server);
        facts.provider = ProviderView::Absent;
        let again = reconcile(&server, &facts, &Options::default(), at(20));
        assert!(matches!(&again.outcome, Outcome::Terminal(Park::Forbidden { .. })), "{:?}", again.outcome);
        assert_eq!(creates(&again), 0);
        assert_eq!(again.events().count(), 0, "the park's event fires once, on entry");

        server.meta.annotations.insert(RETRY_ANNOTATION.into(), "now".into());
        let retried = reconcile(&server, &facts, &Options::default(), at(30));
        assert_eq!(creates(&retried), 1, "a retry request un-parks it: {:?}", retried.outcome);
    }
}

/// A login Keystone refuses (400/401/403/404 on the token request, all
/// `Auth`) is an error retried under the credential's backoff, never a
/// refused create.
#[test]
fn a_refused_login_is_an_error_never_a_refused_create() {
    let mut server = adopted();
    let create = issue_create(&mut server, 10);
    let error = CloudError::Auth { message: "Keystone forbade the login (HTTP 403): ...".into() };
    let follow_up = action_failed(&server, &create, &ActionFailure::Cloud(error), at(11));
    assert!(matches!(follow_up.outcome, Outcome::Error(PassError::Cloud(CloudError::Auth { .. }))));
    persist(&mut server, &follow_up);
    assert_ne!(lifecycle(&server, &Options::default()).park(), Some(ParkKind::Refused));
}

/// The floating IP of a running server that cannot be made (no router to
/// the external network: Neutron's 404 `ExternalGatewayForFloatingIPNotFound`;
/// the floating-IP quota: 409 `OverQuota`) is an error that says the server
/// exists and what is missing; nothing is recorded as refused.
#[test]
fn a_floating_ip_that_cannot_be_made_never_says_create_refused() {
    let server = adopted();
    let ensure = Action::EnsureFloatingIp(FloatingIpRequest { server: Default::default(), port_id: "port-1".into() });
    for error in [
        CloudError::Refused {
            status: 404,
            message: "creating floating IP: External network ext is not reachable from subnet s (HTTP 404)".into(),
        },
        CloudError::Refused { status: 409, message: "creating floating IP: Quota exceeded (HTTP 409)".into() },
        policy(),
    ] {
        let follow_up = action_failed(&server, &ensure, &ActionFailure::Cloud(error.clone()), at(11));
        let Outcome::Error(pass_error @ PassError::AfterCreate { what: ServerPart::PublicIp, .. }) = &follow_up.outcome
        else {
            panic!("{:?}", follow_up.outcome)
        };
        let message = pass_error.to_string();
        assert!(message.contains("the provider server exists, but its public IP could not be allocated"), "{message}");
        assert!(!message.contains("refused to create"), "{message}");
        assert!(follow_up.actions.iter().all(|a| a.annotation_changes().is_empty()), "{:?}", follow_up.actions);
        assert_eq!(available(&follow_up).message, message, "Available says it");
    }
    // A 503 passes: the next pass makes it.
    let follow_up = action_failed(&server, &ensure, &ActionFailure::Cloud(CloudError::from_http(503, "")), at(11));
    assert!(matches!(follow_up.outcome, Outcome::Yield(_)));
}

/// A rate limit is waited out as long as the provider asked, at least the
/// yield interval and at most `Outcome::MAX_RETRY_AFTER`; a 413 `overLimit`
/// (the adapter's `RateLimited`) on the create is no park, and what it asked
/// survives a step before the create.
#[test]
fn a_rate_limit_requeues_after_what_the_provider_asked_bounded() {
    use std::time::Duration;
    let yield_interval = Duration::from_secs(10);
    let limited = |secs: u64| CloudError::RateLimited {
        message: "creating server: rate-limited (HTTP 413)".into(),
        retry_after: Some(Duration::from_secs(secs)),
    };
    let mut server = adopted();
    let create = issue_create(&mut server, 10);
    for (asked, waits) in [(30, 30), (2, 10), (100_000, 300)] {
        for error in
            [limited(asked), CloudError::BeforeCreate { step: CreateStep::Port, source: Box::new(limited(asked)) }]
        {
            let follow_up = action_failed(&server, &create, &ActionFailure::Cloud(error.clone()), at(11));
            assert!(matches!(follow_up.outcome, Outcome::Yield(_)), "{error}: {:?}", follow_up.outcome);
            assert_eq!(follow_up.outcome.requeue_after(yield_interval), Some(Duration::from_secs(waits)), "{error}");
        }
    }
    let unasked = CloudError::RateLimited { message: "429".into(), retry_after: None };
    let follow_up = action_failed(&server, &create, &ActionFailure::Cloud(unasked), at(11));
    assert_eq!(follow_up.outcome.requeue_after(yield_interval), Some(yield_interval));
    assert_eq!(Outcome::Done.requeue_after(yield_interval), None);
}

/// `spec.infrastructureRef` (a host pin this controller does not act on) is
/// refused as a park of its own, with a message naming it, before anything is
/// created; never silently ignored.
#[test]
fn a_host_pin_is_refused_never_ignored() {
    let mut server = adopted();
    server.spec.infrastructure_ref = Some("compute-17".into());
    let mut facts = referenced_facts(&server);
    facts.provider = ProviderView::Absent;
    let decision = reconcile(&server, &facts, &Options::default(), at(10));
    assert_eq!(creates(&decision), 0);
    let Outcome::Terminal(park) = &decision.outcome else { panic!("{:?}", decision.outcome) };
    assert_eq!(park.kind(), ParkKind::HostPinned);
    assert!(park.message().contains("spec.infrastructureRef"), "{}", park.message());
    assert_eq!(pin_events(&decision), 1, "the refusal is announced: {:?}", decision.actions);
    persist(&mut server, &decision);
    assert_eq!(lifecycle(&server, &Options::default()), Lifecycle::Parked(ParkKind::HostPinned));
    // Said once: a later pass over the parked Server announces nothing.
    let again = reconcile(&server, &facts, &Options::default(), at(15));
    assert_eq!(pin_events(&again), 0, "{:?}", again.actions);
    server.spec.infrastructure_ref = None;
    server.meta.generation += 1;
    let decision = reconcile(&server, &facts, &Options::default(), at(20));
    assert_eq!(creates(&decision), 1, "without the pin it is created: {:?}", decision.outcome);
}

fn pin_events(decision: &server_core::Decision) -> usize {
    let refused = |action: &&Action| matches!(action, Action::Emit(event) if event.reason == server_core::reconcile::EventReason::SpecNotSupported);
    decision.actions.iter().filter(refused).count()
}
