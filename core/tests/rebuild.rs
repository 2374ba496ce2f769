//! Image rebuild (DESIGN "Image rebuild"): the sequences a user sees, and
//! the properties of DESIGN §12 that keep it safe, each shown able to fail
//! against a deliberately broken rule.

mod support;

use jiff::Timestamp;
use proptest::prelude::*;
use server_core::model::{ConditionReason, Rebuild, RebuildState, Server, ServerStatus};
use server_core::port::{PowerState, ProviderServer, ProviderStatus};
use server_core::predicate::should_wake;
use server_core::reconcile::{Action, Decision, Facts, Options, Outcome, ProviderView, RebuildWait, Wait, reconcile};
use server_core::{observe, rebuild_settlement_pending};
use support::strategies::*;
use support::*;

const OPTIONS: Options = Options {
    provider_create_max_attempts: 3,
    create_grace: std::time::Duration::from_secs(60),
    listed_view_max_age: Options::DEFAULT_LISTED_VIEW_MAX_AGE,
};

type Reconcile = fn(&Server, &Facts, &Options, Timestamp) -> Decision;
type Observe = fn(&ServerStatus, Option<&ProviderServer>, Timestamp) -> ServerStatus;
type WakeRule = fn(Option<&Server>, &Server) -> bool;

/// A provider server that booted on `image`, at rest.
fn running_on(image: &str) -> ProviderServer {
    ProviderServer {
        id: "vm-1".into(),
        server_uid: "uid-web".into(),
        status: ProviderStatus::Active,
        power_state: PowerState::Running,
        launched_at: Some(at(5)),
        image_id: Some(image.into()),
        ..Default::default()
    }
}

/// What the provider shows once it accepted a rebuild onto `image` (Nova:
/// the image and the task change together, at acceptance).
fn rebuilding_onto(image: &str) -> ProviderServer {
    ProviderServer { status: ProviderStatus::Rebuild, task_in_flight: true, ..running_on(image) }
}

fn rebuilds(decision: &Decision) -> Vec<String> {
    decision
        .actions
        .iter()
        .filter_map(|action| match action {
            Action::RebuildProviderServer(request) => Some(request.image_id.clone()),
            _ => None,
        })
        .collect()
}

/// A Server running on `image` (the spec's), settled by a pass and a poll.
fn running_server() -> (Server, Facts) {
    let mut server = adopted();
    let mut facts = referenced_facts(&server);
    facts.provider = ProviderView::Present(running_on("image"));
    facts.networking = settled_networking(&server);
    server.status = observe(&server.status, Some(&running_on("image")), at(6));
    let decision = reconcile(&server, &facts, &OPTIONS, at(7));
    persist(&mut server, &decision);
    (server, facts)
}

fn with_record(facts: &Facts, record: ProviderServer) -> Facts {
    Facts { provider: ProviderView::Present(record), ..facts.clone() }
}

#[test]
fn an_image_change_on_a_booted_server_is_recorded_then_rebuilt_once_then_settled() {
    let (mut server, facts) = running_server();
    server.spec.image.id = "image-2".into();
    server.meta.generation += 1;

    // The intent first, alone: nothing is asked of the provider.
    let armed = reconcile(&server, &facts, &OPTIONS, at(10));
    assert_eq!(armed.outcome, Outcome::Yield(Wait::Rebuild(RebuildWait::IntentRecorded)));
    assert!(rebuilds(&armed).is_empty());
    assert_eq!(armed.status.rebuild, Some(Rebuild::initiated("image-2")));
    persist(&mut server, &armed);

    // Read back, it is sent; the accepted stamp is written after it.
    let sent = reconcile(&server, &facts, &OPTIONS, at(20));
    assert_eq!(rebuilds(&sent), ["image-2"]);
    let rebuild_at = sent.actions.iter().position(|a| matches!(a, Action::RebuildProviderServer(_)));
    let write_at = sent.actions.iter().position(|a| matches!(a, Action::WriteStatus(_)));
    assert!(rebuild_at < write_at, "the stamp says what the provider accepted: {:?}", sent.actions);
    assert_eq!(sent.status.rebuild.as_ref().map(|r| r.state), Some(RebuildState::Rebuilding));
    assert_eq!(sent.status.phase, Some(server_core::model::Phase::Building));
    assert_eq!(sent.status.provider_create_failures, 0);
    assert_eq!(event_reasons(&sent), ["ProviderServerRebuilding"]);
    persist(&mut server, &sent);

    // While the provider works, passes send nothing more.
    let busy = with_record(&facts, rebuilding_onto("image-2"));
    server.status = observe(&server.status, Some(&rebuilding_onto("image-2")), at(25));
    assert!(rebuilds(&reconcile(&server, &busy, &OPTIONS, at(26))).is_empty());
    assert!(!rebuild_settlement_pending(&server));

    // The monitor sees it done: the level wakes the settlement pass.
    let done = running_on("image-2");
    let before = server.clone();
    server.status = observe(&server.status, Some(&done), at(30));
    assert_eq!(server.status.rebuild.as_ref().map(|r| r.state), Some(RebuildState::Succeeded));
    assert!(should_wake(Some(&before), &server));
    let settled = with_record(&facts, done);
    let clearing = reconcile(&server, &settled, &OPTIONS, at(31));
    assert_eq!(clearing.status.rebuild, None);
    assert_eq!(clearing.outcome, Outcome::Yield(Wait::Rebuild(RebuildWait::Settling)));
    assert_eq!(event_reasons(&clearing), ["ProviderServerRebuilt"]);
    persist(&mut server, &clearing);
    let confirmed = reconcile(&server, &settled, &OPTIONS, at(41));
    assert_eq!(confirmed.outcome, Outcome::Done);
    assert!(rebuilds(&confirmed).is_empty() && confirmed.status.rebuild.is_none());
}

#[test]
fn a_failed_rebuild_parks_until_another_image_is_asked_for() {
    let (mut server, facts) = running_server();
    server.spec.image.id = "image-2".into();
    server.meta.generation += 1;
    let decision = reconcile(&server, &facts, &OPTIONS, at(10));
    persist(&mut server, &decision);
    let decision = reconcile(&server, &facts, &OPTIONS, at(20));
    persist(&mut server, &decision);

    let errored = ProviderServer { status: ProviderStatus::Error, ..running_on("image-2") };
    server.status = observe(&server.status, Some(&errored), at(30));
    assert_eq!(server.status.rebuild.as_ref().map(|r| r.state), Some(RebuildState::Failed));
    assert!(rebuild_settlement_pending(&server), "a failure not yet parked wakes its pass");
    let failed = with_record(&facts, errored.clone());
    let parked = reconcile(&server, &failed, &OPTIONS, at(31));
    assert!(matches!(parked.outcome, Outcome::Terminal(server_core::Park::RebuildFailed { .. })), "{parked:?}");
    assert_eq!(available(&parked).reason, ConditionReason::Errored);
    assert_eq!(event_reasons(&parked), ["ProviderServerRebuildFailed"]);
    assert!(rebuilds(&parked).is_empty() && creates(&parked) + deletes(&parked) == 0);
    persist(&mut server, &parked);
    assert!(!rebuild_settlement_pending(&server), "a parked failure is quiet");
    let again = reconcile(&server, &failed, &OPTIONS, at(41));
    assert!(event_reasons(&again).is_empty(), "said once");

    // Another image re-arms, and its rebuild goes out.
    server.spec.image.id = "image-3".into();
    server.meta.generation += 1;
    let rearmed = reconcile(&server, &failed, &OPTIONS, at(50));
    assert_eq!(rearmed.status.rebuild, Some(Rebuild::initiated("image-3")));
    persist(&mut server, &rearmed);
    let back = ProviderServer { status: ProviderStatus::Active, ..errored };
    let sent = reconcile(&server, &with_record(&facts, back), &OPTIONS, at(60));
    assert_eq!(rebuilds(&sent), ["image-3"]);
}

#[test]
fn an_image_change_before_the_first_boot_waits_for_it() {
    let (mut server, facts) = running_server();
    server.status = ServerStatus::default();
    server.spec.image.id = "image-2".into();
    let building = ProviderServer {
        status: ProviderStatus::Build,
        power_state: PowerState::NoState,
        launched_at: None,
        ..running_on("image")
    };
    let decision = reconcile(&server, &with_record(&facts, building), &OPTIONS, at(10));
    assert_eq!(decision.outcome, Outcome::Yield(Wait::Rebuild(RebuildWait::FirstBoot)));
    assert!(rebuilds(&decision).is_empty() && decision.status.rebuild.is_none());
}

#[test]
fn a_refused_rebuild_before_acceptance_leaves_the_intent_standing() {
    let (mut server, facts) = running_server();
    server.spec.image.id = "image-2".into();
    let decision = reconcile(&server, &facts, &OPTIONS, at(10));
    persist(&mut server, &decision);
    let mut pass = server_core::pass::Pass::with_facts(server.clone(), &facts, &OPTIONS, at(20));
    while let Some(action) = pass.poll_action() {
        if matches!(action, Action::RebuildProviderServer(_)) {
            let busy = server_core::port::CloudError::Conflict { message: "in task_state powering-off".into() };
            pass.handle_failed(server_core::reconcile::ActionFailure::Cloud(busy));
        } else {
            pass.handle_done();
        }
    }
    let (outcome, persisted) = pass.finish();
    assert!(matches!(outcome, Outcome::Yield(Wait::Provider(_))), "{outcome:?}");
    assert_eq!(persisted.status.rebuild, Some(Rebuild::initiated("image-2")), "no stamp for what was refused");
}

// --- Properties -------------------------------------------------------------

/// Never a rebuild of a server the provider does not show booted (its
/// record's launch time, read in the pass), whatever the status says.
fn never_rebuilds_an_unbooted_server(rule: Reconcile) -> Result<(), String> {
    run((arb_server(), arb_record(), arb_image()), |(mut server, record, image)| {
        server.meta.deleting = false;
        server.spec.image.id = image;
        let facts = Facts { provider: ProviderView::Present(record.clone()), ..referenced_facts(&server) };
        let decision = rule(&server, &facts, &OPTIONS, at(100));
        if !rebuilds(&decision).is_empty() {
            prop_assert!(record.launched_at.is_some(), "rebuilt a server the provider shows never booted");
            prop_assert!(!server_core::rebuild_task_in_flight(&record), "rebuilt a busy server");
        }
        Ok(())
    })
}

/// The marker only moves forward under the monitor, and the monitor never
/// creates, clears or retargets it.
fn the_monitor_only_advances_the_marker(rule: Observe) -> Result<(), String> {
    run((arb_status(), arb_record()), |(status, record)| {
        let next = rule(&status, Some(&record), at(100));
        match (&status.rebuild, &next.rebuild) {
            (None, None) => {}
            (Some(before), Some(after)) => {
                prop_assert_eq!(&before.target_image_id, &after.target_image_id, "retargeted");
                prop_assert!(after.state.rank() >= before.state.rank(), "{:?} went back to {:?}", before, after);
                if before.state.is_terminal() {
                    prop_assert_eq!(before.state, after.state, "an end flipped");
                }
            }
            (before, after) => prop_assert!(false, "the monitor made {before:?} into {after:?}"),
        }
        Ok(())
    })
}

/// A pass moves the marker forward too, except where it is the owner: a
/// marker for another image is replaced, a settled one cleared on the
/// target at rest, a failure assigned over a success.
fn a_pass_moves_the_marker_only_as_it_may(rule: Reconcile) -> Result<(), String> {
    run((arb_server(), arb_record()), |(mut server, record)| {
        server.meta.deleting = false;
        let facts = Facts { provider: ProviderView::Present(record.clone()), ..referenced_facts(&server) };
        let decision = rule(&server, &facts, &OPTIONS, at(100));
        let desired = &server.spec.image.id;
        match (&server.status.rebuild, &decision.status.rebuild) {
            (Some(before), Some(after)) if before.target_image_id == after.target_image_id => {
                let forward = after.state.rank() >= before.state.rank();
                prop_assert!(forward || after.state == RebuildState::Failed, "{before:?} went back to {after:?}");
            }
            (Some(_), Some(after)) | (None, Some(after)) => {
                prop_assert_eq!(after, &Rebuild::initiated(desired), "armed something else than the spec's image")
            }
            (Some(before), None) => prop_assert!(
                !server_core::ever_booted(&decision.status)
                    || record.image_id.as_deref() == Some(before.target_image_id.as_str())
                        && !server_core::rebuild_task_in_flight(&record),
                "cleared {before:?} of a booted server before the provider showed it done"
            ),
            (None, None) => {}
        }
        Ok(())
    })
}

/// No lost settlement wake: while a rebuild's end awaits its pass, every
/// write of the Server wakes it (a level, not an edge), and that pass either
/// ends the level or requeues itself.
fn no_settlement_is_left_waiting(wake: WakeRule) -> Result<(), String> {
    run(
        (arb_server(), arb_status(), arb_record(), any::<bool>()),
        |(mut server, mut old_status, record, same_marker)| {
            server.meta.deleting = false;
            server.spec.pause = false;
            if !rebuild_settlement_pending(&server) {
                return Ok(());
            }
            // Half the time a write that leaves the marker as it stands: the
            // level, not its edge, must wake.
            if same_marker {
                old_status.rebuild = server.status.rebuild.clone();
            }
            let old = Server { status: old_status, ..server.clone() };
            prop_assert!(wake(Some(&old), &server), "a write while a settlement waits did not wake it");
            let facts = Facts { provider: ProviderView::Present(record), ..referenced_facts(&server) };
            let decision = reconcile(&server, &facts, &OPTIONS, at(100));
            let after = Server { status: decision.status.clone(), ..server.clone() };
            prop_assert!(
                !rebuild_settlement_pending(&after) || decision.outcome.requeues(),
                "the settlement pass ended {:?} with the level standing",
                decision.outcome
            );
            Ok(())
        },
    )
}

/// A rebuild never counts as a create failure: while a marker stands on a
/// server the provider shows booted, no pass deletes or creates a server,
/// nor touches the create-retry counter.
fn a_rebuild_is_never_a_create_failure(rule: Reconcile) -> Result<(), String> {
    run((arb_server(), arb_record(), arb_marker()), |(mut server, mut record, marker)| {
        server.meta.deleting = false;
        server.status.provider_create_retrying = false;
        let Some(marker) = marker else { return Ok(()) };
        server.status.rebuild = Some(marker);
        record.launched_at = record.launched_at.or(Some(at(5)));
        let facts = Facts { provider: ProviderView::Present(record), ..referenced_facts(&server) };
        let decision = rule(&server, &facts, &OPTIONS, at(100));
        prop_assert_eq!(creates(&decision) + deletes(&decision), 0, "a rebuild led to a delete or a create");
        let clamped = server.status.provider_create_failures.clamp(0, OPTIONS.max_attempts());
        prop_assert_eq!(decision.status.provider_create_failures, clamped, "a rebuild was counted");
        Ok(())
    })
}

/// At most one accepted rebuild per target image: sequences of passes,
/// monitor polls (or none: the monitor lags), status writes lost, the
/// provider finishing or failing, and image edits.
fn one_accepted_rebuild_per_target(rule: Reconcile) -> Result<(), String> {
    #[derive(Clone, Copy, Debug)]
    enum Step {
        Pass { lose_writes: bool },
        Poll,
        Finish { error: bool },
        Edit(u8),
    }
    let step = prop_oneof![
        4 => any::<bool>().prop_map(|lose_writes| Step::Pass { lose_writes }),
        2 => Just(Step::Poll),
        2 => any::<bool>().prop_map(|error| Step::Finish { error }),
        1 => (0u8..3).prop_map(Step::Edit),
    ];
    run(prop::collection::vec(step, 1..40), |steps| {
        let (mut server, facts) = running_server();
        let mut record = running_on("image");
        // Accepted rebuilds per target since the spec last named it.
        let mut accepted: std::collections::BTreeMap<String, u32> = Default::default();
        for (t, step) in steps.iter().enumerate() {
            let now = at(100 + 10 * t as i64);
            match *step {
                Step::Pass { lose_writes } => {
                    let decision = rule(&server, &with_record(&facts, record.clone()), &OPTIONS, now);
                    for image in rebuilds(&decision) {
                        // Nova refuses a rebuild while a task runs (409).
                        if server_core::rebuild_task_in_flight(&record) {
                            continue;
                        }
                        record = rebuilding_onto(&image);
                        let count = accepted.entry(image.clone()).or_default();
                        *count += 1;
                        prop_assert!(*count <= 1, "two accepted rebuilds onto {image}: {steps:?}");
                    }
                    if !lose_writes {
                        persist(&mut server, &decision);
                    }
                }
                Step::Poll => server.status = observe(&server.status, Some(&record), now),
                Step::Finish { error } if server_core::rebuild_task_in_flight(&record) => {
                    record.task_in_flight = false;
                    record.status = if error { ProviderStatus::Error } else { ProviderStatus::Active };
                }
                Step::Finish { .. } => {}
                Step::Edit(n) => {
                    let image = ["image", "image-2", "image-3"][usize::from(n)].to_owned();
                    if image != server.spec.image.id {
                        accepted.remove(&image);
                        server.spec.image.id = image;
                        server.meta.generation += 1;
                    }
                }
            }
        }
        Ok(())
    })
}

#[test]
fn properties_hold_for_the_core() {
    must_hold(never_rebuilds_an_unbooted_server(reconcile));
    must_hold(the_monitor_only_advances_the_marker(observe));
    must_hold(a_pass_moves_the_marker_only_as_it_may(reconcile));
    must_hold(no_settlement_is_left_waiting(should_wake));
    must_hold(a_rebuild_is_never_a_create_failure(reconcile));
    must_hold(one_accepted_rebuild_per_target(reconcile));
}

// --- ... and each catches a deliberately broken rule ------------------------

/// Gates on the status's latches instead of the record read in the pass.
fn gates_on_the_status(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    let mut facts = facts.clone();
    if let ProviderView::Present(record) = &mut facts.provider {
        record.launched_at = server.status.launched_at.or(server.status.provisioned_at).or(Some(at(1)));
        record.task_in_flight = false;
        if record.status == ProviderStatus::Rebuild {
            record.status = ProviderStatus::Active;
        }
    }
    reconcile(server, &facts, options, now)
}

/// Sets the state from what it sees, without the rank check.
fn observes_without_rank(status: &ServerStatus, record: Option<&ProviderServer>, now: Timestamp) -> ServerStatus {
    let mut next = observe(status, record, now);
    if let (Some(marker), Some(record)) = (next.rebuild.as_mut(), record)
        && server_core::rebuild_task_in_flight(record)
    {
        marker.state = RebuildState::Rebuilding;
    }
    next
}

/// Clears the marker whenever the record runs the spec's image.
fn clears_on_sight(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    let mut decision = reconcile(server, facts, options, now);
    if let ProviderView::Present(record) = &facts.provider
        && record.image_id.as_deref() == Some(server.spec.image.id.as_str())
    {
        decision.status.rebuild = None;
    }
    decision
}

/// Wakes on the marker's edges only.
fn wakes_on_edges(old: Option<&Server>, new: &Server) -> bool {
    match old {
        Some(old) if old.status.rebuild == new.status.rebuild => {
            let mut quiet = new.clone();
            quiet.status.rebuild = None;
            let mut quiet_old = old.clone();
            quiet_old.status.rebuild = None;
            should_wake(Some(&quiet_old), &quiet)
        }
        _ => should_wake(old, new),
    }
}

/// Takes a failed rebuild for a failed create: the status's boot latches
/// are not read while a marker stands.
fn rebuild_as_create_failure(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    let mut blind = server.clone();
    if blind.status.rebuild.is_some() {
        blind.status.provisioned_at = None;
        blind.status.launched_at = None;
        blind.status.phase = None;
        blind.status.rebuild = None;
        server_core::model::set_condition(
            &mut blind.status.conditions,
            server_core::model::ConditionType::Healthy,
            server_core::model::ConditionStatus::False,
            ConditionReason::Errored,
            "errored",
            at(0),
        );
    }
    let mut facts = facts.clone();
    if blind.status.rebuild.is_none()
        && let ProviderView::Present(record) = &mut facts.provider
        && server.status.rebuild.is_some()
    {
        record.launched_at = None;
        record.status = ProviderStatus::Error;
        record.power_state = PowerState::NoState;
    }
    reconcile(&blind, &facts, options, now)
}

/// Attributes by the marker alone: an intent standing reads as not yet sent.
fn attributes_by_the_marker(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    let mut facts = facts.clone();
    if server.status.rebuild.as_ref().is_some_and(|r| r.state == RebuildState::Initiated)
        && let ProviderView::Present(record) = &mut facts.provider
    {
        record.image_id = Some("image-0".into());
        record.task_in_flight = false;
        record.status = ProviderStatus::Active;
    }
    reconcile(server, &facts, options, now)
}

#[test]
fn a_gate_on_the_status_is_caught() {
    must_catch(|| never_rebuilds_an_unbooted_server(gates_on_the_status));
}

#[test]
fn a_monitor_without_the_rank_check_is_caught() {
    must_catch(|| the_monitor_only_advances_the_marker(observes_without_rank));
}

#[test]
fn a_clear_before_the_provider_is_done_is_caught() {
    must_catch(|| a_pass_moves_the_marker_only_as_it_may(clears_on_sight));
}

#[test]
fn an_edge_wake_is_caught() {
    must_catch(|| no_settlement_is_left_waiting(wakes_on_edges));
}

#[test]
fn a_rebuild_taken_for_a_create_failure_is_caught() {
    must_catch(|| a_rebuild_is_never_a_create_failure(rebuild_as_create_failure));
}

#[test]
fn attribution_by_the_marker_alone_is_caught() {
    must_catch(|| one_accepted_rebuild_per_target(attributes_by_the_marker));
}

/// What a migration report counts: a pass that sends a rebuild is a
/// rebuild (a root disk made anew), summed across Servers like creates.
#[test]
fn a_rebuild_is_counted_in_what_a_pass_would_do() {
    let (mut server, facts) = running_server();
    server.spec.image.id = "image-2".into();
    let decision = reconcile(&server, &facts, &OPTIONS, at(10));
    persist(&mut server, &decision);
    let sent = reconcile(&server, &facts, &OPTIONS, at(20));
    let intent = server_core::explain::Intent::of(&sent);
    assert_eq!((intent.rebuilds, intent.creates, intent.deletes), (1, 0, 0));
    assert!(intent.to_string().contains("1 provider server rebuild"), "{intent}");
    let mut total = server_core::explain::Intent::default();
    total += intent;
    total += intent;
    assert_eq!(total.rebuilds, 2);
}
