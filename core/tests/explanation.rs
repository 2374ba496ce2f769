//! `explain`: the core's decision, in words, for the engineer on call. It is
//! the decision a pass makes (same function), so the text can only say what
//! the controller would do.
#![allow(clippy::unwrap_used)]

mod support;

use server_core::explain::{Unread, explain, explain_unread};
use server_core::port::{PowerState, ProviderServer, ProviderStatus};
use server_core::reconcile::{Options, ProviderView};
use server_core::{Lifecycle, ParkKind, reconcile};
use support::*;

#[test]
fn a_fresh_server_is_explained_as_the_create_a_pass_would_issue() {
    let server = adopted();
    let mut facts = referenced_facts(&server);
    facts.provider = ProviderView::Absent;
    let options = Options::with_max_attempts(3);
    let explanation = explain(server.clone(), facts.clone(), options, at(10));
    assert_eq!(explanation.decision, Some(reconcile(&server, &facts, &options, at(10))));
    let text = explanation.to_string();
    assert!(text.starts_with("Server org/web (generation 1)\n"), "{text}");
    assert!(text.contains("identity:  identity-a (ready)"), "{text}");
    assert!(text.contains("provider:  has no server for this Server"), "{text}");
    assert!(text.contains("create provider server \"web\" (flavor flavor, image image)"), "{text}");
}

#[test]
fn a_server_parked_at_the_cap_says_how_to_retry() {
    let options = Options::with_max_attempts(3);
    let mut server = create_failed(3);
    let mut facts = referenced_facts(&server);
    facts.provider = ProviderView::Absent;
    let decision = reconcile(&server, &facts, &options, at(10));
    persist(&mut server, &decision);

    let explanation = explain(server, facts, options, at(11));
    assert_eq!(explanation.lifecycle, Lifecycle::Parked(ParkKind::AtCap));
    let text = explanation.to_string();
    assert!(text.contains("parked: 3 of 3 create attempts failed before launch"), "{text}");
    assert!(
        text.contains("un-park:   fix the cause (image, flavor, capacity), then request a retry: kubectl annotate server web -n org server-controller.unikorn-cloud.org/retry=now"),
        "{text}"
    );
    assert!(!text.contains("create provider server"), "{text}");
}

/// Without the provider's record the command says what it does not know and
/// what it would need, and invents no decision: a healthy Server is not said
/// to get a status write and a wait (what a pass that cannot read the
/// provider would do, not what the operator, which can, does).
#[test]
fn without_the_providers_record_nothing_is_guessed() {
    let mut server = adopted();
    server.status.provisioned_at = Some(at(5));
    let facts = referenced_facts(&server);
    let unread = Unread::NoCloudGiven { region: "region-a".into() };
    let explanation =
        explain_unread(server.clone(), facts.clone(), Options::with_max_attempts(3), unread.clone(), at(10));
    assert_eq!(explanation.decision, None);
    let text = explanation.to_string();
    assert!(
        text.contains("provider:  unknown: this command was given no cloud configuration for region region-a"),
        "{text}"
    );
    assert!(text.contains("--openstack-config region-a=FILE or --openstack-secret region-a=NAMESPACE/NAME"), "{text}");
    assert!(text.contains("not guessed"), "{text}");
    for invented in ["would now", "write status", "check again", "Waiting for the provider"] {
        assert!(!text.contains(invented), "{invented:?} in {text}");
    }

    // A decision that reads no provider is still given: a paused Server.
    server.spec.pause = true;
    let paused = explain_unread(server, facts, Options::with_max_attempts(3), unread, at(10));
    assert!(paused.decision.is_some());
    assert!(paused.to_string().contains("and then wait for the next change"), "{paused}");
}

/// Refused user data is its own park, with its own advice: fix the user
/// data (a retry annotation alone would be refused again).
#[test]
fn refused_user_data_is_explained_as_its_own_park() {
    let options = Options::with_max_attempts(3);
    let mut server = adopted();
    server.spec.user_data = Some(server_core::model::UserData(b"not a known payload\n".to_vec()));
    let facts = referenced_facts(&server);
    let decision = reconcile(&server, &facts, &options, at(10));
    persist(&mut server, &decision);
    let explanation = explain(server, facts, options, at(11));
    assert_eq!(explanation.lifecycle, Lifecycle::Parked(ParkKind::UserDataRefused));
    let text = explanation.to_string();
    assert!(text.contains("parked: this generation's user data is refused"), "{text}");
    assert!(
        text.contains("un-park:   fix spec.userData (a retry alone is refused again): kubectl edit server web -n org"),
        "{text}"
    );
    assert!(!text.contains("provider refused"), "{text}");
}

#[test]
fn an_unreadable_provider_is_said_to_block_creates_and_deletes() {
    let server = adopted();
    let mut facts = referenced_facts(&server);
    facts.provider = ProviderView::Unknown("Nova answered 503".into());
    let text = explain(server, facts, Options::with_max_attempts(3), at(10)).to_string();
    assert!(text.contains("could not be read (Nova answered 503): nothing is created or deleted"), "{text}");
    assert!(!text.contains("create provider server"), "{text}");
}

#[test]
fn a_booted_server_is_said_never_to_be_recreated() {
    let mut server = adopted();
    server.status.provisioned_at = Some(at(5));
    let mut facts = referenced_facts(&server);
    facts.provider = ProviderView::Present(ProviderServer {
        id: "vm-1".into(),
        server_uid: server.meta.uid.clone(),
        status: ProviderStatus::Active,
        power_state: PowerState::Running,
        launched_at: Some(at(5)),
        ..Default::default()
    });
    let text = explain(server, facts, Options::with_max_attempts(3), at(10)).to_string();
    assert!(text.contains("never deleted and recreated"), "{text}");
    assert!(text.contains("server vm-1 is ACTIVE, booted at"), "{text}");
}

/// The migration report's count (`run --shadow`): a Server with no server
/// would be created; one whose server runs and whose status says so would
/// change nothing; without the record there is no decision to count.
#[test]
fn the_intent_counts_what_a_decision_would_change() {
    let options = Options::with_max_attempts(3);
    let server = adopted();
    let mut facts = referenced_facts(&server);
    facts.provider = ProviderView::Absent;
    let intent = explain(server.clone(), facts.clone(), options, at(10)).intent().unwrap();
    assert_eq!((intent.creates, intent.deletes), (1, 0));
    assert!(intent.to_string().starts_with("1 provider server create, "), "{intent}");

    let running = ProviderServer {
        id: "vm-1".into(),
        server_uid: "uid-web".into(),
        status: ProviderStatus::Active,
        power_state: PowerState::Running,
        launched_at: Some(at(5)),
        ..Default::default()
    };
    let mut settled = server.clone();
    settled.status = server_core::observe(&settled.status, Some(&running), at(6));
    facts.provider = ProviderView::Present(running);
    for second in [10, 11] {
        let decision = reconcile(&settled, &facts, &options, at(second));
        persist(&mut settled, &decision);
    }
    let idle = explain(settled, facts, options, at(12)).intent().unwrap();
    assert!(idle.is_idle(), "{idle}");
    assert_eq!(idle.to_string(), "nothing");

    let unread = explain_unread(
        server,
        referenced_facts(&adopted()),
        options,
        Unread::NoCloudGiven { region: "r".into() },
        at(10),
    );
    assert_eq!(unread.intent(), None);
}
