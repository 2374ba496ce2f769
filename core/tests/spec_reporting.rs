//! What the controller tells a user about spec it cannot apply: a flavor
//! edited after the provider server exists, and tags the provider would
//! refuse.

mod support;

use server_core::model::{ConditionReason, ConditionStatus, Tag};
use server_core::reconcile::{Action, Options, Outcome, reconcile};
use support::*;

const OPTIONS: Options = Options {
    provider_create_max_attempts: 3,
    create_grace: std::time::Duration::from_secs(60),
    listed_view_max_age: Options::DEFAULT_LISTED_VIEW_MAX_AGE,
};

/// A Server whose create ran (the issued note recorded its spec) and whose
/// provider server is now present.
fn created_and_running() -> (server_core::Server, server_core::Facts) {
    let mut server = adopted();
    let mut facts = referenced_facts(&server);
    let created = reconcile(&server, &facts, &OPTIONS, at(10));
    assert_eq!(creates(&created), 1);
    persist(&mut server, &created);
    facts.provider = present();
    let running = reconcile(&server, &facts, &OPTIONS, at(20));
    persist(&mut server, &running);
    assert_eq!(available(&running).message, "Provisioned");
    (server, facts)
}

#[test]
fn a_flavor_edited_on_an_existing_server_is_reported_once_and_not_applied() {
    let (mut server, facts) = created_and_running();
    let created_with = server.spec.flavor_id.clone();
    server.spec.flavor_id = "bigger".into();
    server.meta.generation += 1;

    let edited = reconcile(&server, &facts, &OPTIONS, at(30));
    assert_eq!(edited.outcome, Outcome::Done);
    assert_eq!(creates(&edited) + deletes(&edited), 0, "never rebuilt for a new flavor");
    let condition = available(&edited);
    assert_eq!((condition.status, condition.reason), (ConditionStatus::True, ConditionReason::Provisioned));
    assert!(condition.message.starts_with("Provisioned; spec.flavorID is \"bigger\""), "{}", condition.message);
    assert!(condition.message.contains(&format!("created with {created_with:?}")), "{}", condition.message);
    assert_eq!(event_reasons(&edited), ["SpecChangeNotApplied"]);

    persist(&mut server, &edited);
    let again = reconcile(&server, &facts, &OPTIONS, at(40));
    assert!(event_reasons(&again).is_empty(), "reported once: {:?}", event_reasons(&again));
    assert!(!again.actions.iter().any(|a| matches!(a, Action::WriteStatus(_))), "nothing to write");

    // Editing it back clears the note.
    server.spec.flavor_id = created_with;
    server.meta.generation += 1;
    let reverted = reconcile(&server, &facts, &OPTIONS, at(50));
    assert_eq!(available(&reverted).message, "Provisioned");
    assert!(event_reasons(&reverted).is_empty());
}

/// An image edit is applied (a rebuild, see tests/rebuild.rs), so it is
/// never reported as a change not applied; a flavor edit on a server with
/// no record of its create (another controller made it) is not judged.
#[test]
fn an_image_edit_is_not_reported_and_a_server_with_no_record_of_its_create_is_not_judged() {
    let (mut server, facts) = created_and_running();
    server.spec.image.id = "other-image".into();
    let edited = reconcile(&server, &facts, &OPTIONS, at(30));
    assert!(!event_reasons(&edited).contains(&"SpecChangeNotApplied"), "{:?}", event_reasons(&edited));
    assert!(!available(&edited).message.contains("spec.image.id"), "{}", available(&edited).message);

    server.spec.image.id = "image".into();
    server.spec.flavor_id = "bigger".into();
    server.meta.annotations.clear();
    let unknown = reconcile(&server, &facts, &OPTIONS, at(40));
    assert_eq!(available(&unknown).message, "Provisioned");
    assert!(event_reasons(&unknown).is_empty());
}

#[test]
fn tags_the_provider_would_refuse_are_left_out_of_the_create_with_one_event() {
    let mut server = adopted();
    server.spec.tags = vec![
        Tag { name: "compute.unikorn-cloud.org/workload".into(), value: "batch".into() },
        Tag { name: "owner@example.com".into(), value: "secret-looking value".into() },
    ];
    let facts = referenced_facts(&server);
    let decision = reconcile(&server, &facts, &OPTIONS, at(10));
    let request = decision
        .actions
        .iter()
        .find_map(|a| match a {
            Action::CreateProviderServer(request) => Some(request),
            _ => None,
        })
        .expect("a create");
    assert_eq!(request.tags, [Tag { name: "compute:workload".into(), value: "batch".into() }]);
    assert_eq!(event_reasons(&decision), ["ProviderTagsDropped"]);
    let note = decision
        .actions
        .iter()
        .find_map(|a| match a {
            Action::Emit(event) => Some(event.note.clone()),
            _ => None,
        })
        .unwrap_or_default();
    assert!(note.contains("\"owner@example.com\""), "{note}");
    assert!(!note.contains("secret-looking value"), "values never reach an event: {note}");

    // Nothing dropped, nothing said.
    server.spec.tags.truncate(1);
    let clean = reconcile(&server, &referenced_facts(&server), &OPTIONS, at(10));
    assert!(event_reasons(&clean).is_empty(), "{:?}", event_reasons(&clean));
}
