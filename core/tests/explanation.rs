//! `explain`: the core's decision, in words, for the engineer on call. It is
//! the decision a pass makes (same function), so the text can only say what
//! the controller would do.
#![allow(clippy::unwrap_used)]

mod support;

use server_core::explain::explain;
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
    assert_eq!(explanation.decision, reconcile(&server, &facts, &options, at(10)));
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
    assert!(text.contains("annotate the Server server-controller.unikorn-cloud.org/retry=<anything>"), "{text}");
    assert!(!text.contains("create provider server"), "{text}");
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
