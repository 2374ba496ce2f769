//! One test per rule of DESIGN §7, §8 and §10, through the public API.
#![allow(clippy::unwrap_used)]

mod support;

use server_core::Park;
use server_core::model::{
    CREATE_ISSUED_ANNOTATION, CREATE_REFUSED_ANNOTATION, ConditionReason, ConditionStatus, Detail, IDENTITY_LABEL,
    NetworkAttachment, ORGANIZATION_LABEL, Phase, REGION_LABEL, RETRY_ANNOTATION, ResourceKind, SecurityGroupRef,
    SshInjection, UserData, reference_finalizer,
};
use server_core::observe;
use server_core::port::{CloudError, ProviderServer, ProviderStatus};
use server_core::reconcile::{
    Action, ActionFailure, Options, Outcome, PassError, ProviderView, RegionUnserved, Wait, action_failed, reconcile,
};
use support::*;

const OPTIONS: Options = Options {
    provider_create_max_attempts: 3,
    create_grace: std::time::Duration::from_secs(60),
    listed_view_max_age: Options::DEFAULT_LISTED_VIEW_MAX_AGE,
};

#[test]
fn a_new_server_gets_its_finalizer_references_then_a_create() {
    let mut server = server();
    server.spec.ssh_certificate_authority_id = Some("ca-a".into());
    let decision = reconcile(&server, &facts(), &OPTIONS, at(10));

    let finalizer = reference_finalizer("web");
    let kinds: Vec<_> = decision
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::AddReference(r) => {
                assert_eq!(r.finalizer, finalizer);
                Some((r.kind, r.name.as_str()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (ResourceKind::Network, "net-a"),
            (ResourceKind::SecurityGroup, "sg-a"),
            (ResourceKind::SshCertificateAuthority, "ca-a"),
            (ResourceKind::Identity, "identity-a"),
        ]
    );
    assert!(matches!(decision.actions[0], Action::AddFinalizer { .. }));
    // The status write precedes the create it accounts for.
    let write = decision.actions.iter().position(|a| matches!(a, Action::WriteStatus(_))).unwrap();
    let create = decision.actions.iter().position(|a| matches!(a, Action::CreateProviderServer(_))).unwrap();
    assert!(write < create);
    let Action::CreateProviderServer(request) = &decision.actions[create] else { unreachable!() };
    let user_data = String::from_utf8(request.user_data.clone().unwrap()).unwrap();
    assert!(user_data.contains(CA_KEY), "the CA key is merged into the user data");
    assert_eq!(request.server.uid, "uid-web");
    assert!(!request.identity_ssh_key, "a Server on the CA path does not boot with the identity's keypair");
    assert_eq!(request.owner.region_id, server.meta.label(REGION_LABEL).unwrap());
    assert!(matches!(decision.outcome, Outcome::Yield(_)));
    assert_eq!(available(&decision).reason, ConditionReason::Provisioning);
}

#[test]
fn a_networks_recorded_provider_id_goes_with_the_create() {
    let server = server();
    let mut facts = facts();
    for (network, provider_id) in [("net-a", "neutron-a"), ("net-old", "neutron-old")] {
        let network = facts.find_mut(ResourceKind::Network, network).unwrap();
        network.detail = Detail::Network { provider_id: Some(provider_id.into()) };
    }
    let decision = reconcile(&server, &facts, &OPTIONS, at(10));
    let request = decision.actions.iter().find_map(|a| match a {
        Action::CreateProviderServer(request) => Some(request.clone()),
        _ => None,
    });
    let ids: Vec<_> = request.unwrap().network_ids.into_iter().collect();
    assert_eq!(ids, [("net-a".to_owned(), "neutron-a".to_owned())], "only the networks the spec names");
}

/// uni-region's `ResolvedSSHInjection`: `sshInjection` when set, else the CA
/// path when a CA is named, else the identity's keypair.
#[test]
fn the_identity_keypair_is_asked_for_unless_the_server_uses_a_ca_or_asks_for_none() {
    let key_asked = |ca: Option<&str>, injection: Option<SshInjection>| {
        let mut server = server();
        server.spec.ssh_certificate_authority_id = ca.map(Into::into);
        server.spec.ssh_injection = injection;
        server.meta.labels.insert(ORGANIZATION_LABEL.into(), "org-1".into());
        let decision = reconcile(&server, &facts(), &OPTIONS, at(10));
        let request = decision.actions.iter().find_map(|a| match a {
            Action::CreateProviderServer(request) => Some(request.clone()),
            _ => None,
        });
        let request = request.unwrap();
        assert_eq!(request.owner.organization_id, "org-1");
        assert_eq!(request.owner.project_id, "", "a missing label is written empty, as the Go controller does");
        request.identity_ssh_key
    };
    assert!(key_asked(None, None));
    assert!(!key_asked(Some("ca-a"), None));
    assert!(key_asked(Some("ca-a"), Some(SshInjection::IdentityKeypair)));
    assert!(!key_asked(None, Some(SshInjection::None)));
    assert!(!key_asked(None, Some(SshInjection::Ca)));
}

#[test]
fn a_present_provider_server_is_provisioned_and_stale_references_are_pruned() {
    let server = adopted();
    let mut facts = referenced_facts(&server);
    facts.find_mut(ResourceKind::Network, "net-old").unwrap().finalizers.push(reference_finalizer("web")); // no longer named
    facts.provider = present();
    let decision = reconcile(&server, &facts, &OPTIONS, at(10));
    assert_eq!(decision.outcome, Outcome::Done);
    assert_eq!(available(&decision).status, ConditionStatus::True);
    assert_eq!(available(&decision).reason, ConditionReason::Provisioned);
    let removed: Vec<_> = decision
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::RemoveReference(r) => Some(r.name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(removed, ["net-old"]);
    assert_eq!(creates(&decision) + deletes(&decision), 0);
    assert!(event_reasons(&decision).is_empty(), "{:?}", event_reasons(&decision));
}

#[test]
fn a_provider_server_the_port_took_over_is_recorded_in_one_event() {
    let server = adopted();
    let mut facts = referenced_facts(&server);
    let ProviderView::Present(mut record) = present() else { unreachable!() };
    record.adopted = true;
    facts.provider = ProviderView::Present(record);
    let decision = reconcile(&server, &facts, &OPTIONS, at(10));
    assert_eq!(event_reasons(&decision), ["ProviderServerAdopted"]);
    assert_eq!(creates(&decision) + deletes(&decision), 0);
    let mut recorded = server.clone();
    persist(&mut recorded, &decision);
    let again = reconcile(&recorded, &facts, &OPTIONS, at(11));
    assert!(event_reasons(&again).is_empty(), "sent once: {:?}", event_reasons(&again));
}

#[test]
fn a_pass_from_a_copy_that_missed_the_adoption_note_announces_nothing_before_a_guarded_write() {
    // Found flaky end to end: the adoption's status write reached the cache,
    // its annotation write not yet; the next pass started from that copy,
    // had no status to write and sent the event again before its annotation
    // write failed on the resourceVersion.
    let server = adopted();
    let mut facts = referenced_facts(&server);
    let ProviderView::Present(mut record) = present() else { unreachable!() };
    record.adopted = true;
    facts.provider = ProviderView::Present(record);
    let first = reconcile(&server, &facts, &OPTIONS, at(10));
    let mut status_only = server.clone();
    status_only.status = first.status.clone();
    let stale = reconcile(&status_only, &facts, &OPTIONS, at(11));
    let guarded =
        |a: &Action| matches!(a, Action::WriteStatus(_) | Action::Annotate { .. } | Action::AddFinalizer { .. });
    let first_guarded = stale.actions.iter().position(guarded);
    let first_event = stale.actions.iter().position(|a| matches!(a, Action::Emit(_)));
    assert!(first_event.is_some(), "the annotation is still missing, so the event is due: {:?}", stale.actions);
    assert!(first_guarded < first_event, "an event before any guarded write: {:?}", stale.actions);
}

#[test]
fn a_converged_server_writes_nothing() {
    let mut server = adopted();
    let mut facts = referenced_facts(&server);
    facts.provider = present();
    let first = reconcile(&server, &facts, &OPTIONS, at(10));
    persist(&mut server, &first);
    let second = reconcile(&server, &facts, &OPTIONS, at(20));
    assert_eq!(second.actions, vec![]);
    assert_eq!(second.outcome, Outcome::Done);
}

/// A pass that reads a boot the status does not show yet (the monitor's
/// write of it was skipped while the pass acted) writes the boot as the
/// monitor writes it from the same record, the latch among it: one status
/// write, and the monitor's next poll of that record has nothing to write.
#[test]
fn a_pass_that_latches_a_boot_leaves_the_monitor_nothing_to_write() {
    let mut server = adopted();
    let mut facts = referenced_facts(&server);
    facts.provider = present();
    let before_boot = reconcile(&server, &facts, &OPTIONS, at(10));
    persist(&mut server, &before_boot);
    let ProviderView::Present(mut record) = present() else { unreachable!() };
    record.status = ProviderStatus::Active;
    record.power_state = server_core::port::PowerState::Running;
    record.launched_at = Some(at(15));
    record.private_ip = Some("10.0.0.5".into());
    facts.provider = ProviderView::Present(record.clone());
    let booted = reconcile(&server, &facts, &OPTIONS, at(20));
    let writes = booted.actions.iter().filter(|a| matches!(a, Action::WriteStatus(_))).count();
    assert_eq!(writes, 1, "{:?}", booted.actions);
    assert_eq!(booted.status.provisioned_at, Some(at(15)));
    assert_eq!(booted.status.phase, Some(Phase::Running));
    persist(&mut server, &booted);
    let left = server_core::monitor::project(&server.status, Some(&record), at(21));
    assert_eq!(left, None, "the monitor would still write {left:?}");
}

#[test]
fn missing_labels_are_a_clear_error_that_touches_nothing() {
    for label in [REGION_LABEL, IDENTITY_LABEL] {
        let mut server = server();
        server.meta.labels.remove(label);
        let decision = reconcile(&server, &facts(), &OPTIONS, at(10));
        let Outcome::Error(PassError::MissingLabel { label: missing }) = &decision.outcome else {
            panic!("{:?}", decision.outcome)
        };
        assert_eq!(*missing, label);
        assert!(available(&decision).message.contains(label), "{}", available(&decision).message);
        assert!(decision.actions.iter().all(|a| matches!(a, Action::WriteStatus(_))), "{:?}", decision.actions);
        assert_eq!(available(&decision).reason, ConditionReason::Errored);
    }
}

#[test]
fn duplicate_ids_are_rejected_before_anything_is_touched() {
    let mut server = server();
    server.spec.security_groups.push(SecurityGroupRef { id: "sg-a".into() });
    let decision = reconcile(&server, &facts(), &OPTIONS, at(10));
    let Outcome::Terminal(Park::InvalidSpec { message }) = &decision.outcome else { panic!("{:?}", decision.outcome) };
    assert!(message.contains("sg-a") && message.contains("more than once"), "{message}");
    assert!(decision.actions.iter().all(|a| matches!(a, Action::WriteStatus(_))));
}

/// Several distinct IDs of one kind are a valid spec; a repeat is found
/// wherever it is, also among more than two.
#[test]
fn distinct_ids_pass_and_a_repeat_among_three_is_rejected() {
    let mut server = server();
    server.spec.networks.push(NetworkAttachment { id: "net-old".into(), allowed_address_pairs: vec![] });
    let decision = reconcile(&server, &facts(), &OPTIONS, at(10));
    assert!(!matches!(decision.outcome, Outcome::Terminal(_) | Outcome::Error(_)), "{:?}", decision.outcome);
    assert_eq!(creates(&decision), 1);

    server.spec.networks.push(NetworkAttachment { id: "net-a".into(), allowed_address_pairs: vec![] });
    let decision = reconcile(&server, &facts(), &OPTIONS, at(10));
    let Outcome::Terminal(Park::InvalidSpec { message }) = &decision.outcome else { panic!("{:?}", decision.outcome) };
    assert!(message.contains("net-a") && message.contains("more than once"), "{message}");
    assert_eq!(creates(&decision), 0);
}

#[test]
fn unknown_reference_ids_are_a_clear_error() {
    let mut server = server();
    server.spec.networks[0].id = "net-missing".into();
    let decision = reconcile(&server, &facts(), &OPTIONS, at(10));
    let Outcome::Error(error @ PassError::UnknownReference { id, .. }) = &decision.outcome else {
        panic!("{:?}", decision.outcome)
    };
    assert_eq!(id, "net-missing");
    let message = error.to_string();
    assert!(message.contains("attempt to reference unknown resource ID net-missing"), "{message}");
    assert!(decision.actions.iter().all(|a| matches!(a, Action::WriteStatus(_))));

    let mut server = server_with_ca("ca-missing");
    server.meta.generation = 2;
    let decision = reconcile(&server, &facts(), &OPTIONS, at(10));
    assert!(matches!(&decision.outcome, Outcome::Error(PassError::UnknownReference { id, .. }) if id == "ca-missing"));
}

/// An outcome's message is what the Available message its pass writes
/// says (a park's adds how to un-park the Server; a Done has none: its
/// message depends on the direction).
#[test]
fn an_outcome_says_what_its_available_condition_says() {
    let mut unlabelled = server();
    unlabelled.meta.labels.remove(REGION_LABEL);
    let mut repeated = server();
    repeated.spec.security_groups.push(SecurityGroupRef { id: "sg-a".into() });
    let mut unready = facts();
    support::identity_conditions(&mut unready).clear();
    for (server, facts) in [(unlabelled, facts()), (repeated, facts()), (server(), unready)] {
        let decision = reconcile(&server, &facts, &OPTIONS, at(10));
        assert_ne!(decision.outcome, Outcome::Done);
        let (said, written) = (decision.outcome.message().unwrap_or_default(), available(&decision).message);
        match decision.outcome {
            Outcome::Terminal(park) => assert_eq!(written, park.available_message("org", "web")),
            _ => assert_eq!(said, written, "{:?}", decision.outcome),
        }
    }
    assert_eq!(Outcome::Done.message(), None);
}

fn server_with_ca(id: &str) -> server_core::Server {
    let mut server = server();
    server.spec.ssh_certificate_authority_id = Some(id.into());
    server
}

#[test]
fn an_identity_that_is_not_ready_yields_before_any_provider_call() {
    let mut facts = facts();
    support::identity_conditions(&mut facts).clear();
    let decision = reconcile(&server(), &facts, &OPTIONS, at(10));
    assert_eq!(decision.outcome, Outcome::Yield(Wait::IdentityNotReady));
    assert_eq!(creates(&decision) + deletes(&decision), 0);
    assert!(decision.actions.iter().any(|a| matches!(a, Action::AddReference(_))), "references come first");
}

#[test]
fn pause_stops_all_work() {
    let mut server = create_failed(0);
    server.spec.pause = true;
    server.meta.deleting = true;
    let decision = reconcile(&server, &facts(), &OPTIONS, at(10));
    // Only the Available message says it is paused: no finalizer, reference
    // or provider action, no other status field.
    assert!(matches!(decision.actions.as_slice(), [Action::WriteStatus(_)]), "{:?}", decision.actions);
    assert_eq!(available(&decision).message, server_core::reconcile::PAUSED_MESSAGE);
    let mut other_fields = decision.status.clone();
    other_fields.conditions.retain(|c| c.type_ != server_core::model::ConditionType::Available);
    let mut before = server.status.clone();
    before.conditions.retain(|c| c.type_ != server_core::model::ConditionType::Available);
    assert_eq!(other_fields, before);
}

// --- §7: the bounded delete-and-retry machine -------------------------------

#[test]
fn first_failure_starts_a_retry_deletes_and_emits_once() {
    let server = create_failed(0);
    let mut facts = referenced_facts(&server);
    facts.provider = present();
    let decision = reconcile(&server, &facts, &OPTIONS, at(10));
    assert_eq!(decision.status.provider_create_failures, 1);
    assert!(decision.status.provider_create_retrying);
    assert_eq!(event_reasons(&decision), ["ProviderCreateRetrying"]);
    assert!(decision.events().next().unwrap().note.contains("(attempt 2/3)"));
    assert_eq!(deletes(&decision), 1);
    assert_eq!(creates(&decision), 0);
    assert_eq!(decision.outcome, Outcome::Yield(Wait::DeletingFailedServer));
    assert_eq!(available(&decision).message, "Deleting failed provider server before retrying create");
    // The counter is persisted before the delete runs.
    let write = decision.actions.iter().position(|a| matches!(a, Action::WriteStatus(_))).unwrap();
    let delete = decision.actions.iter().position(|a| matches!(a, Action::DeleteProviderServer(_))).unwrap();
    assert!(write < delete);
}

#[test]
fn retrying_with_the_server_still_present_deletes_again_without_an_event() {
    let mut server = create_failed(1);
    server.status.provider_create_retrying = true;
    let mut facts = referenced_facts(&server);
    facts.provider = present();
    let decision = reconcile(&server, &facts, &OPTIONS, at(10));
    assert_eq!(deletes(&decision), 1);
    assert_eq!(event_reasons(&decision), Vec::<&str>::new());
    assert!(decision.status.provider_create_retrying);
    assert_eq!(decision.status.provider_create_failures, 1, "no second count");
    let healthy = decision.status.condition(server_core::model::ConditionType::Healthy).unwrap();
    assert_eq!((healthy.status, healthy.reason), (ConditionStatus::Unknown, ConditionReason::Provisioning));
    assert_eq!(healthy.message, "Deleting failed provider server before retrying create");
}

#[test]
fn retrying_with_the_server_absent_resets_emits_retry_ready_and_creates_in_the_same_pass() {
    let mut server = create_failed(1);
    server.status.provider_create_retrying = true;
    server.status.mac_address = Some("fa:16:3e:00:00:01".into());
    server.status.private_ip = Some("10.0.0.4".into());
    server.status.phase = Some(Phase::Building);
    server.status.scheduled_at = Some(at(3));
    let facts = referenced_facts(&server); // provider absent
    let decision = reconcile(&server, &facts, &OPTIONS, at(10));
    assert!(!decision.status.provider_create_retrying);
    assert_eq!(event_reasons(&decision), ["ProviderCreateRetryReady"]);
    assert_eq!(decision.status.phase, Some(Phase::Pending));
    assert_eq!(decision.status.private_ip, None);
    assert_eq!(decision.status.scheduled_at, None);
    assert_eq!(decision.status.mac_address.as_deref(), Some("fa:16:3e:00:00:01"), "MAC survives the reset");
    assert_eq!(creates(&decision), 1, "the pass that finds the failed server gone creates again");
    assert_eq!(decision.outcome, Outcome::Yield(Wait::Creating));
    let noted = decision
        .actions
        .iter()
        .flat_map(Action::annotation_changes)
        .any(|(key, value)| key == CREATE_ISSUED_ANNOTATION && value.is_some());
    assert!(noted, "the create is noted before it is sent");

    persist(&mut server, &decision);
    let next = reconcile(&server, &facts, &OPTIONS, at(20));
    assert_eq!(creates(&next), 0, "within its grace the create is awaited, not sent again");
    assert_eq!(event_reasons(&next), Vec::<&str>::new(), "RetryReady is not repeated");
}

/// The count names the failed server; a copy of the Server from before the
/// retry's create (a lagging cache: retrying still set) that reads the next
/// attempt's server takes it for the Server's server, never deletes it.
#[test]
fn a_retry_deletes_the_failed_server_alone() {
    let mut server = adopted();
    let mut facts = referenced_facts(&server);
    let created = reconcile(&server, &facts, &OPTIONS, at(10));
    persist(&mut server, &created);
    let failed = ProviderServer { id: "vm-1".into(), status: ProviderStatus::Error, ..Default::default() };
    facts.provider = ProviderView::Present(failed.clone());
    server.status = observe(&server.status, Some(&failed), at(40));
    let counted = reconcile(&server, &facts, &OPTIONS, at(50));
    assert_eq!(counted.status.provider_create_failures, 1);
    assert_eq!(deletes(&counted), 1, "the failed server is deleted");
    persist(&mut server, &counted);
    let stale = server.clone();

    // Still there: deleted again.
    assert_eq!(deletes(&reconcile(&server, &facts, &OPTIONS, at(60))), 1);
    // Gone: the same pass creates the next attempt.
    facts.provider = ProviderView::Absent;
    let retried = reconcile(&server, &facts, &OPTIONS, at(70));
    assert_eq!(creates(&retried), 1);

    // The stale copy reads the next attempt's server, still building.
    let next = ProviderServer { id: "vm-2".into(), status: ProviderStatus::Build, ..Default::default() };
    facts.provider = ProviderView::Present(next);
    let from_stale = reconcile(&stale, &facts, &OPTIONS, at(80));
    assert_eq!(deletes(&from_stale) + creates(&from_stale), 0, "{:?}", from_stale.actions);
    assert!(!from_stale.status.provider_create_retrying);
    // The failed server itself, read on that copy, is deleted.
    facts.provider = ProviderView::Present(failed);
    assert_eq!(deletes(&reconcile(&stale, &facts, &OPTIONS, at(80))), 1);
}

#[test]
fn the_last_allowed_failure_parks_the_server_terminally() {
    let server = create_failed(2);
    let mut facts = referenced_facts(&server);
    facts.provider = present();
    let decision = reconcile(&server, &facts, &OPTIONS, at(10));
    assert_eq!(decision.outcome, Outcome::Terminal(Park::AtCap { max: 3 }));
    assert_eq!(
        available(&decision).message,
        format!(
            "Provider server create failed after 3 attempts; to un-park, fix the cause (image, flavor, capacity), \
             then request a retry: kubectl annotate server {name} -n {namespace} {RETRY_ANNOTATION}=now",
            name = server.meta.name,
            namespace = server.meta.namespace
        )
    );
    assert_eq!(decision.status.provider_create_failures, 3);
    assert!(!decision.status.provider_create_retrying);
    assert_eq!(event_reasons(&decision), ["ProviderCreateFailed"]);
    assert_eq!(creates(&decision) + deletes(&decision), 0);
    assert_eq!(available(&decision).reason, ConditionReason::Errored);
}

#[test]
fn at_the_cap_passes_after_a_restart_neither_advance_the_counter_nor_repeat_the_event() {
    let mut server = create_failed(2);
    let mut facts = referenced_facts(&server);
    facts.provider = present();
    let parked = reconcile(&server, &facts, &OPTIONS, at(10));
    persist(&mut server, &parked);
    for t in [20, 30, 40] {
        let again = reconcile(&server, &facts, &OPTIONS, at(t));
        assert_eq!(again.status.provider_create_failures, 3);
        assert!(matches!(again.outcome, Outcome::Terminal(_)));
        assert_eq!(again.actions, vec![], "nothing to write, nothing to emit");
    }
}

#[test]
fn failures_above_the_cap_heal_down_to_it() {
    let server = create_failed(7);
    let mut facts = referenced_facts(&server);
    facts.provider = present();
    let decision = reconcile(&server, &facts, &OPTIONS, at(10));
    assert_eq!(decision.status.provider_create_failures, 3);
    assert!(matches!(decision.outcome, Outcome::Terminal(_)));
    assert_eq!(deletes(&decision), 0);
}

#[test]
fn resetting_the_counter_re_arms_a_parked_server() {
    let mut server = create_failed(2);
    let mut facts = referenced_facts(&server);
    facts.provider = present();
    let parked = reconcile(&server, &facts, &OPTIONS, at(10));
    persist(&mut server, &parked);
    server.status.provider_create_failures = 0; // the operator's reset
    let rearmed = reconcile(&server, &facts, &OPTIONS, at(20));
    assert_eq!(rearmed.status.provider_create_failures, 1);
    assert_eq!(deletes(&rearmed), 1);
    assert_eq!(event_reasons(&rearmed), ["ProviderCreateRetrying"]);
}

#[test]
fn max_attempts_below_one_means_one() {
    for max in [0, -5, 1] {
        let server = create_failed(0);
        let mut facts = referenced_facts(&server);
        facts.provider = present();
        let decision = reconcile(&server, &facts, &Options::with_max_attempts(max), at(10));
        assert_eq!(decision.outcome, Outcome::Terminal(Park::AtCap { max: 1 }));
        assert_eq!(decision.status.provider_create_failures, 1);
        assert_eq!(deletes(&decision), 0);
    }
}

#[test]
fn provisioned_at_with_launched_at_and_phase_lost_is_never_retried() {
    let mut server = create_failed(0);
    server.status.provisioned_at = Some(at(5));
    server.status.phase = Some(Phase::Pending);
    let mut facts = referenced_facts(&server);
    facts.provider = present();
    let decision = reconcile(&server, &facts, &OPTIONS, at(10));
    assert_eq!(deletes(&decision), 0);
    assert_eq!(decision.status.provider_create_failures, 0);
    assert_eq!(decision.outcome, Outcome::Done);
}

#[test]
fn a_retry_in_flight_stops_when_the_server_turns_out_to_have_booted() {
    let mut server = create_failed(1);
    server.status.provider_create_retrying = true;
    server.status.launched_at = Some(at(5));
    let mut facts = referenced_facts(&server);
    facts.provider = present();
    let decision = reconcile(&server, &facts, &OPTIONS, at(10));
    assert_eq!(deletes(&decision), 0);
    assert!(!decision.status.provider_create_retrying);
}

#[test]
fn an_unknown_provider_view_never_creates_or_deletes() {
    let unknown = ProviderView::Unknown("timeout".into());
    let mut retrying = create_failed(1);
    retrying.status.provider_create_retrying = true;
    let mut deleting = adopted();
    deleting.meta.deleting = true;
    for server in [adopted(), create_failed(0), retrying, deleting] {
        let mut facts = referenced_facts(&server);
        facts.provider = unknown.clone();
        let decision = reconcile(&server, &facts, &OPTIONS, at(10));
        assert_eq!(creates(&decision) + deletes(&decision), 0, "{server:?}");
        assert!(matches!(decision.outcome, Outcome::Yield(_)));
    }
}

/// A provider that could not be asked is waited for with the reason of the
/// failed read; a missing cloud account is a different wait, and says so.
#[test]
fn an_unanswered_provider_read_is_waited_for_with_its_reason() {
    let server = adopted();
    let mut facts = referenced_facts(&server);
    facts.provider = ProviderView::Unknown("read timed out".into());
    let decision = reconcile(&server, &facts, &OPTIONS, at(10));
    assert_eq!(decision.outcome, Outcome::Yield(Wait::ProviderUnknown { reason: "read timed out".into() }));
    assert!(available(&decision).message.contains("read timed out"), "{}", available(&decision).message);
    facts.provider = ProviderView::NoIdentity;
    let decision = reconcile(&server, &facts, &OPTIONS, at(10));
    assert_eq!(decision.outcome, Outcome::Yield(Wait::NoCloudAccount));
}

#[test]
fn a_booted_server_whose_record_vanished_is_reported_once_and_never_recreated() {
    let mut server = adopted();
    server.status.provisioned_at = Some(at(5));
    let facts = referenced_facts(&server); // absent
    let first = reconcile(&server, &facts, &OPTIONS, at(10));
    assert_eq!(creates(&first), 0);
    assert_eq!(event_reasons(&first), ["ProviderServerMissing"]);
    assert_eq!(first.outcome, Outcome::Terminal(Park::MissingAfterBoot));
    persist(&mut server, &first);
    let second = reconcile(&server, &facts, &OPTIONS, at(20));
    assert_eq!(second.actions, vec![]);
    assert!(matches!(second.outcome, Outcome::Terminal(_)));
}

#[test]
fn a_refused_create_parks_until_the_spec_changes() {
    let mut server = adopted();
    let facts = referenced_facts(&server);
    let decision = reconcile(&server, &facts, &OPTIONS, at(10));
    persist(&mut server, &decision);
    let create = decision.actions.iter().find(|a| matches!(a, Action::CreateProviderServer(_))).unwrap();
    let refusal = ActionFailure::Cloud(CloudError::Refused { status: 403, message: "Quota exceeded for cores".into() });
    let parked = action_failed(&server, create, &refusal, at(11));
    assert!(
        matches!(&parked.outcome, Outcome::Terminal(Park::Refused { message }) if message.contains("Quota exceeded for cores"))
    );
    assert_eq!(event_reasons(&parked), ["ProviderCreateRefused"]);
    let recorded = parked.actions.iter().flat_map(Action::annotation_changes).collect::<Vec<_>>();
    assert!(recorded.contains(&(CREATE_REFUSED_ANNOTATION, Some("1"))), "{recorded:?}");
    persist(&mut server, &parked);

    // Restarts and resyncs do not create again.
    let again = reconcile(&server, &facts, &OPTIONS, at(20));
    assert_eq!(creates(&again), 0);
    assert!(
        matches!(&again.outcome, Outcome::Terminal(Park::Refused { message }) if message.contains("Quota exceeded"))
    );
    assert_eq!(again.actions, vec![]);

    // A spec change re-arms it.
    server.meta.generation = 2;
    assert_eq!(creates(&reconcile(&server, &facts, &OPTIONS, at(30))), 1);
}

#[test]
fn refused_user_data_parks_before_any_create_until_the_spec_changes() {
    let secret = "s3cr3t-token";
    for (user_data, reason) in [
        (format!("#cloud-config\npassword: {secret}\nfoo: [unclosed\n"), "InvalidCloudConfig"),
        (format!("#!/bin/sh\n# {secret}\n{}", "#".repeat(50_000)), "TooLarge"),
        (format!("{secret}\n"), "UnknownPayloadType"),
    ] {
        let mut server = server();
        server.spec.user_data = Some(UserData(user_data.into_bytes()));
        let decision = reconcile(&server, &facts(), &OPTIONS, at(10));
        assert_eq!(creates(&decision), 0, "{reason}");
        let Outcome::Terminal(Park::UserDataRefused { message }) = &decision.outcome else {
            panic!("{reason}: {:?}", decision.outcome)
        };
        assert!(message.starts_with(&format!("user data refused ({reason}): ")), "{message}");
        assert!(!message.contains(secret), "{message}");
        let available = available(&decision).message;
        assert!(available.starts_with(message.as_str()), "{available}");
        assert!(
            available.ends_with("fix spec.userData (a retry alone is refused again): kubectl edit server web -n org"),
            "{available}"
        );
        assert_eq!(event_reasons(&decision), ["UserDataRefused"], "{reason}");
        persist(&mut server, &decision);

        // Parked: a later pass (restart, resync) neither creates nor repeats the event.
        let again = reconcile(&server, &facts(), &OPTIONS, at(20));
        assert_eq!((creates(&again), event_reasons(&again).len()), (0, 0), "{reason}");
        assert!(!again.outcome.requeues());

        // Fixed user data (a spec change) creates.
        server.spec.user_data = Some(UserData(b"#cloud-config\nruncmd: [ls]\n".to_vec()));
        server.meta.generation = 2;
        assert_eq!(creates(&reconcile(&server, &facts(), &OPTIONS, at(30))), 1, "{reason}");
    }
}

#[test]
fn an_unusable_ca_key_is_an_error_that_requeues() {
    let server = server_with_ca("ca-a");
    let mut facts = facts();
    facts.find_mut(ResourceKind::SshCertificateAuthority, "ca-a").unwrap().detail =
        Detail::SshCertificateAuthority { public_key: "not a key".into() };
    let decision = reconcile(&server, &facts, &OPTIONS, at(10));
    assert_eq!(creates(&decision), 0);
    assert!(
        matches!(&decision.outcome, Outcome::Error(PassError::UserData(e)) if e.to_string().contains("SSH certificate authority public key"))
    );
    assert!(decision.outcome.requeues());
}

#[test]
fn action_failures_that_prove_a_create_did_not_land_release_it() {
    let mut server = adopted();
    server.meta.annotations.insert(CREATE_ISSUED_ANNOTATION.into(), "0".into());
    let create = Action::CreateProviderServer(Default::default());
    for error in [
        CloudError::Conflict { message: "busy".into() },
        CloudError::RateLimited { message: "slow down".into(), retry_after: None },
        CloudError::Unreachable { message: "connection refused".into() },
    ] {
        let decision = action_failed(&server, &create, &ActionFailure::Cloud(error), at(10));
        assert!(matches!(decision.outcome, Outcome::Yield(_)));
        assert_eq!(creates(&decision) + deletes(&decision), 0);
        // The create did not land: its absence must not count as a lost attempt.
        assert!(decision.actions.contains(&Action::Record(vec![(CREATE_ISSUED_ANNOTATION, None)])));
    }
    // A timeout or a 5xx may have landed: the create stays issued, so if its
    // server is gone before any pass sees it, the attempt still counts (found
    // by the simulator: a landed, timed-out create whose server vanished
    // unobserved was created again without counting, past the cap).
    for error in [
        CloudError::Timeout { message: "30s".into() },
        CloudError::Unavailable { status: 504, message: "gateway timeout".into() },
    ] {
        let decision = action_failed(&server, &create, &ActionFailure::Cloud(error), at(10));
        assert!(matches!(decision.outcome, Outcome::Yield(_)));
        assert_eq!(creates(&decision) + deletes(&decision), 0);
        let changed = decision
            .actions
            .iter()
            .flat_map(Action::annotation_changes)
            .any(|(key, _)| key == CREATE_ISSUED_ANNOTATION);
        assert!(!changed);
    }
    let stale = server_core::ApiCause::Answered { code: 409, reason: "Conflict".into(), message: "rv".into() };
    let failure = ActionFailure::Conflict(server_core::ApiFailure::new("adding the finalizer", stale));
    let conflict = action_failed(&server, &Action::AddFinalizer { annotations: Vec::new() }, &failure, at(10));
    assert!(matches!(conflict.outcome, Outcome::Yield(_)));
    assert_eq!(conflict.actions, vec![]);
}

#[test]
fn a_create_is_recorded_as_issued_with_its_time_and_spec_before_it_runs() {
    let server = adopted();
    let decision = reconcile(&server, &referenced_facts(&server), &OPTIONS, at(10));
    let expected = serde_json::json!({
        "attempt": 0,
        "at": at(10).to_string(),
        "flavorID": server.spec.flavor_id,
        "imageID": server.spec.image.id,
    });
    let note = decision
        .actions
        .iter()
        .position(|a| match a {
            Action::Annotate { key: CREATE_ISSUED_ANNOTATION, value: Some(value) } => {
                serde_json::from_str::<serde_json::Value>(value).ok() == Some(expected.clone())
            }
            _ => false,
        })
        .unwrap();
    let create = decision.actions.iter().position(|a| matches!(a, Action::CreateProviderServer(_))).unwrap();
    assert!(note < create);
}

#[test]
fn a_server_lost_before_it_was_seen_to_launch_spends_an_attempt() {
    // OPTIONS gives an issued create 60 s of grace; passes here are further apart.
    let mut server = adopted();
    let mut facts = referenced_facts(&server);
    let created = reconcile(&server, &facts, &OPTIONS, at(10));
    persist(&mut server, &created);
    // The provider drops the server before any observation of it.
    facts.provider = ProviderView::Absent;
    let lost = reconcile(&server, &facts, &OPTIONS, at(100));
    assert_eq!(lost.status.provider_create_failures, 1);
    assert_eq!(event_reasons(&lost), ["ProviderCreateRetrying", "ProviderCreateRetryReady"]);
    assert_eq!(creates(&lost), 1, "the live read that shows it lost shows it gone: the next attempt is made");
    let notes: Vec<_> = lost.actions.iter().flat_map(Action::annotation_changes).collect();
    assert_eq!(notes.len(), 1, "one change of the note: the new create's, {notes:?}");
    assert!(notes[0].1.is_some_and(|note| note.contains("\"attempt\":1") && !note.contains("counted")), "{notes:?}");
    persist(&mut server, &lost);
    // Lost once more: the cap parks it with no further create.
    let lost = reconcile(&server, &facts, &OPTIONS, at(200));
    assert_eq!(creates(&lost), 1, "the third attempt");
    persist(&mut server, &lost);
    let parked = reconcile(&server, &facts, &OPTIONS, at(300));
    assert_eq!(parked.outcome, Outcome::Terminal(Park::AtCap { max: 3 }));
    assert_eq!(creates(&parked), 0);
    persist(&mut server, &parked);
    assert_eq!(creates(&reconcile(&server, &facts, &OPTIONS, at(400))), 0, "the cap is sticky");
    // A reset re-arms it.
    server.status.provider_create_failures = 0;
    assert_eq!(creates(&reconcile(&server, &facts, &OPTIONS, at(500))), 1);
}

// --- Deletion ---------------------------------------------------------------

#[test]
fn deletion_deletes_the_provider_server_before_releasing_references() {
    let mut server = adopted();
    server.meta.deleting = true;
    let mut facts = referenced_facts(&server);
    facts.provider = present();
    let deleting = reconcile(&server, &facts, &OPTIONS, at(10));
    assert_eq!(deletes(&deleting), 1);
    assert!(!deleting.actions.iter().any(|a| matches!(a, Action::RemoveReference(_) | Action::RemoveFinalizer)));
    assert_eq!(available(&deleting).reason, ConditionReason::Deprovisioning);

    facts.provider = ProviderView::Absent;
    let gone = reconcile(&server, &facts, &OPTIONS, at(20));
    let released: Vec<_> = gone
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::RemoveReference(r) => Some(r.name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(released, ["net-a", "sg-a", "identity-a"]);
    assert_eq!(gone.actions.last(), Some(&Action::RemoveFinalizer));
    assert_eq!(gone.outcome, Outcome::Done);
}

#[test]
fn deletion_without_the_finalizer_does_nothing() {
    let mut server = server();
    server.meta.deleting = true;
    let decision = reconcile(&server, &facts(), &OPTIONS, at(10));
    assert_eq!(decision.actions, vec![]);
    assert_eq!(decision.outcome, Outcome::Done);
}

#[test]
fn deleting_a_server_whose_identity_is_gone_releases_it_with_a_warning() {
    let mut server = adopted();
    server.meta.deleting = true;
    let mut facts = referenced_facts(&server);
    facts.remove(ResourceKind::Identity);
    facts.provider = ProviderView::NoIdentity;
    let decision = reconcile(&server, &facts, &OPTIONS, at(10));
    assert_eq!(creates(&decision) + deletes(&decision), 0);
    assert_eq!(decision.actions.last(), Some(&Action::RemoveFinalizer));
    let released = decision.actions.iter().filter(|a| matches!(a, Action::RemoveReference(_))).count();
    assert_eq!(released, 2, "the network and the security group");
    assert_eq!(event_reasons(&decision), ["ProviderServerAbandoned"]);
    assert!(decision.events().all(|e| e.type_ == server_core::reconcile::EventType::Warning));
    assert_eq!(decision.outcome, Outcome::Done);

    // A live Server without identity waits; it never creates or deletes.
    let live = adopted();
    let mut facts = referenced_facts(&live);
    facts.provider = ProviderView::NoIdentity;
    let decision = reconcile(&live, &facts, &OPTIONS, at(10));
    assert_eq!(creates(&decision) + deletes(&decision), 0);
    assert!(matches!(decision.outcome, Outcome::Yield(_)));
}

/// Issue 25, item 7: only the OpenstackIdentity was deleted; the Identity
/// stays, is not being deleted, and its project still holds the server. A
/// missing cloud account is no evidence the project is gone: the deleting
/// Server keeps its finalizer and waits for the account, nothing abandoned.
/// Once the Identity itself is being deleted (its project goes with it), the
/// Server is released.
#[test]
fn deleting_a_server_whose_cloud_account_is_missing_under_a_live_identity_waits() {
    let mut server = adopted();
    server.meta.deleting = true;
    let mut facts = referenced_facts(&server);
    facts.provider = ProviderView::NoIdentity;
    let decision = reconcile(&server, &facts, &OPTIONS, at(10));
    assert_eq!(creates(&decision) + deletes(&decision), 0);
    assert!(
        !decision.actions.iter().any(|a| matches!(a, Action::RemoveFinalizer | Action::RemoveReference(_))),
        "released with its provider server possibly running: {:?}",
        decision.actions
    );
    assert_eq!(event_reasons(&decision), Vec::<&str>::new());
    assert_eq!(decision.outcome, Outcome::Yield(Wait::NoCloudAccount));

    // The Identity's own deletion is the evidence.
    match facts.consumed.get_mut(&ResourceKind::Identity).and_then(|i| i.first_mut()).map(|i| &mut i.detail) {
        Some(server_core::model::Detail::Identity { deleting, .. }) => *deleting = true,
        _ => panic!("the facts hold an Identity"),
    }
    let decision = reconcile(&server, &facts, &OPTIONS, at(20));
    assert_eq!(decision.actions.last(), Some(&Action::RemoveFinalizer));
    assert_eq!(event_reasons(&decision), ["ProviderServerAbandoned"]);
}

#[test]
fn a_server_whose_region_is_not_served_waits_with_the_reason_and_is_never_released() {
    let unserved = RegionUnserved::UnsupportedProvider { region: "region-k".into(), provider: "kubernetes".into() };
    let fresh = server();
    let mut facts = facts();
    facts.provider = ProviderView::RegionUnserved(unserved.clone());
    let decision = reconcile(&fresh, &facts, &OPTIONS, at(10));
    assert_eq!(creates(&decision) + deletes(&decision), 0);
    assert_eq!(decision.outcome, Outcome::Yield(Wait::RegionUnserved(unserved.clone())));
    assert!(decision.outcome.requeues(), "a Region or configuration fix is picked up by a later pass");
    let message = available(&decision).message;
    assert!(message.contains("\"kubernetes\"") && message.contains("region-k"), "{message}");

    // Deleting: the provider server may live in a cloud this controller
    // cannot reach, so the finalizer and the references stay.
    let mut deleting = adopted();
    deleting.meta.deleting = true;
    let mut facts = referenced_facts(&deleting);
    let mismatch = RegionUnserved::ProviderMismatch {
        region: "region-a".into(),
        declared: "simulated".into(),
        configured: "openstack".into(),
    };
    facts.provider = ProviderView::RegionUnserved(mismatch.clone());
    let decision = reconcile(&deleting, &facts, &OPTIONS, at(10));
    assert_eq!(creates(&decision) + deletes(&decision), 0);
    assert!(
        !decision.actions.iter().any(|a| matches!(a, Action::RemoveFinalizer | Action::RemoveReference(_))),
        "{:?}",
        decision.actions
    );
    assert_eq!(decision.outcome, Outcome::Yield(Wait::RegionUnserved(mismatch)));

    // A parked Server stays parked: an unserved region says nothing new.
    let mut parked = adopted();
    parked.status.provider_create_failures = 3;
    parked.status.provider_create_retrying = false;
    let mut facts = referenced_facts(&parked);
    facts.provider = ProviderView::RegionUnserved(unserved);
    let decision = reconcile(&parked, &facts, &OPTIONS, at(10));
    assert!(matches!(decision.outcome, Outcome::Terminal(_)), "{:?}", decision.outcome);
}

#[test]
fn references_left_under_a_former_identity_are_released() {
    let server = adopted();
    let finalizer = reference_finalizer("web");
    let mut facts = referenced_facts(&server);
    facts.provider = present();
    let mut old_network = server_core::model::Consumed::new("net-old-identity");
    old_network.finalizers.push(finalizer.clone());
    let mut old_identity = server_core::model::Consumed::new("identity-old");
    old_identity.finalizers.push(finalizer.clone());
    facts.other_identity_references =
        vec![(ResourceKind::Network, old_network), (ResourceKind::Identity, old_identity)];
    let removed = |decision: &server_core::reconcile::Decision| -> Vec<String> {
        decision
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::RemoveReference(r) => Some(r.name.clone()),
                _ => None,
            })
            .collect()
    };
    let pass = reconcile(&server, &facts, &OPTIONS, at(10));
    assert_eq!(removed(&pass), ["net-old-identity", "identity-old"]);

    let mut deleting = server.clone();
    deleting.meta.deleting = true;
    facts.provider = ProviderView::Absent;
    let gone = reconcile(&deleting, &facts, &OPTIONS, at(20));
    assert_eq!(removed(&gone), ["net-a", "sg-a", "identity-a", "net-old-identity", "identity-old"]);
}

/// The create's status write lost to a conflict (the monitor wrote in
/// between): the next pass sees the server present and must still say it is
/// being created, or a vanishing before the monitor ever lists it leaves
/// "not found" unchanged, nothing is written, nothing wakes a pass, and the
/// Server stays Provisioned with no server (seen at 10,000 Servers).
#[test]
fn a_present_server_whose_create_status_was_lost_still_arms_the_lost_before_launch_edge() {
    let mut server = adopted();
    set_healthy(&mut server, ConditionStatus::Unknown, ConditionReason::Unknown);
    let mut facts = referenced_facts(&server);
    facts.provider = ProviderView::Absent;
    let create = reconcile(&server, &facts, &OPTIONS, at(10));
    assert_eq!(creates(&create), 1);
    // Only the annotations land; the status write conflicted.
    for action in &create.actions {
        apply_meta(&mut server, action);
    }
    facts.provider = present();
    let next = reconcile(&server, &facts, &OPTIONS, at(12));
    // What the monitor writes from the same record (a building server is
    // Degraded), so the poll after it writes nothing and the vanishing is a change.
    let ProviderView::Present(record) = &facts.provider else { unreachable!() };
    let healthy = |status: &server_core::ServerStatus| {
        status.condition(server_core::model::ConditionType::Healthy).map(|h| (h.status, h.reason, h.message.clone()))
    };
    assert_eq!(healthy(&next.status), healthy(&server_core::observe(&server.status, Some(record), at(12))));
    assert_eq!(healthy(&next.status).map(|h| (h.0, h.1)), Some((ConditionStatus::False, ConditionReason::Degraded)));
    // The monitor then finds it gone: a status change, and it wakes a pass.
    let mut written = server.clone();
    written.status = next.status.clone();
    let mut vanished = written.clone();
    vanished.status = server_core::observe(&written.status, None, at(20));
    assert_ne!(vanished.status, written.status, "the monitor writes the vanishing");
    let (before, after) = (server_core::WakeSignals::of(&written), server_core::WakeSignals::of(&vanished));
    assert!(server_core::wakes(Some(&before), &after), "and the pass that counts it is woken");
}
