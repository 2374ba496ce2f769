//! An image change on a present provider server (DESIGN "Image rebuild"):
//! once the server has booted, a changed `spec.image.id` is applied with a
//! provider rebuild, at most once per target image.
//!
//! The intent is write-ahead: one pass records `status.rebuild`
//! `{target, Initiated}` and yields; only a later pass that reads that marker
//! back sends the rebuild. Every step decides from the server as the
//! provider shows it in this pass (a listed view is read live first,
//! [`super::LiveRead::ImageChange`]), never from the status latches: the
//! gate is the record's launch time, and a rebuild is attributed to its
//! target by the record's image, which the provider sets to the target when
//! it accepts the rebuild (so a target already shown is never sent again).
//! The monitor only advances the marker's state from what it sees
//! ([`advance_from`]); creating, retargeting and clearing it, and the park,
//! are this module's. Nothing here touches the create-retry counter: a
//! rebuild is never a create failure.

use super::decision::{Event, EventReason, EventType, Outcome, RebuildWait, Wait};
use super::plan::Plan;
use super::provision::server_ref;
use crate::issued::IssuedCreate;
use crate::lifecycle::{Park, rebuild_failed};
use crate::model::{ConditionReason, ConditionType, Phase, Rebuild, RebuildState, Server};
use crate::monitor::{observe, project_health};
use crate::port::{ProviderServer, ProviderStatus, RebuildRequest};

/// What the image asks of the pass.
#[derive(Debug)]
pub(crate) enum ImageStep {
    /// Nothing about the image ends the pass: it goes on as usual.
    Continue,
    /// The pass ends here (what it changed is on the plan).
    End(Outcome),
    /// Send this rebuild; the plan holds the stamp written once it is accepted.
    Submit(RebuildRequest),
}

/// Whether `record` (listed or live) shows an image change under way or
/// pending for `server`: a marker stands, or the record names another image
/// than the spec's. A record that does not name its image (a create's
/// answer) is taken to run the image the create note recorded.
pub(crate) fn image_change_in_view(server: &Server, record: &ProviderServer) -> bool {
    let desired = server.spec.image.id.as_str();
    let running = match &record.image_id {
        Some(image) => Some(image.clone()),
        None => IssuedCreate::of(server).and_then(|issued| issued.image_id),
    };
    server.status.rebuild.is_some() || running.is_some_and(|image| image != desired)
}

/// A task is under way on the server. REBUILD is counted too: the provider
/// shows it only while a rebuild task runs, and it is never taken for rest.
pub fn task_in_flight(record: &ProviderServer) -> bool {
    record.task_in_flight || record.status == ProviderStatus::Rebuild
}

/// The monitor's rule: advances `marker` from what a record shows, forward
/// only, attributing by the record's image; never creates, retargets or
/// clears it.
/// - the record runs the target: ERROR fails it, a task in flight means the
///   rebuild was accepted, rest means it succeeded;
/// - the record runs another image: an accepted rebuild that ended in ERROR
///   or came to rest there can no longer reach its target, and fails;
/// - the record does not say its image: only an accepted rebuild in ERROR fails.
///
/// An `Initiated` marker under another image advances nothing: taking that
/// for acceptance would let a rebuild be sent twice, or never.
pub fn advance_from(marker: &mut Rebuild, record: &ProviderServer) {
    let error = record.status == ProviderStatus::Error;
    let busy = task_in_flight(record);
    let accepted = marker.state.accepted();
    match record.image_id.as_deref() {
        Some(image) if image == marker.target_image_id => {
            marker.advance(if error {
                RebuildState::Failed
            } else if busy {
                RebuildState::Rebuilding
            } else {
                RebuildState::Succeeded
            });
        }
        Some(_) if accepted && (error || !busy) => {
            marker.advance(RebuildState::Failed);
        }
        None if accepted && error => {
            marker.advance(RebuildState::Failed);
        }
        _ => {}
    }
}

/// Whether a rebuild's end awaits its settlement pass: a marker that says
/// `Succeeded`, or `Failed` on a Server not yet parked for it. A level, not
/// an edge: the watch wakes the reconciler on every write while it stands,
/// so a lost wake or a dropped settlement write is recovered by the next.
pub fn rebuild_settlement_pending(server: &Server) -> bool {
    let parked = server
        .status
        .condition(ConditionType::Available)
        .is_some_and(|available| available.reason == ConditionReason::Errored);
    server.status.rebuild.as_ref().is_some_and(|marker| match marker.state {
        RebuildState::Succeeded => true,
        RebuildState::Failed => !parked,
        RebuildState::Initiated | RebuildState::Rebuilding => false,
    })
}

/// The image step of a pass over `server` whose provider server `record`
/// was read in this pass. In order: a marker for another image is replaced
/// (re-armed, even over a failed one: another image is the way out of that
/// park); a failed rebuild parks (two-phase: recorded, then read back);
/// an unreadable image waits while a marker stands; a record on the target
/// settles; a record on another image waits for the first boot, records the
/// intent, or, with the intent read back and the server at rest, sends the
/// rebuild.
pub(crate) fn converge_image(server: &Server, record: &ProviderServer, plan: &mut Plan) -> ImageStep {
    let desired = server.spec.image.id.as_str();
    if plan.status.rebuild.as_ref().is_some_and(|marker| marker.target_image_id != desired) {
        plan.status.rebuild = Some(Rebuild::initiated(desired));
        return ImageStep::End(Outcome::Yield(Wait::Rebuild(RebuildWait::IntentRecorded)));
    }
    let current = record.image_id.as_deref();
    let on_target = current == Some(desired);
    let busy = task_in_flight(record);
    let error = record.status == ProviderStatus::Error;

    if let Some(marker) = plan.status.rebuild.clone() {
        if marker.state == RebuildState::Failed {
            return park(server, record, plan);
        }
        let failed_on_target = error && (marker.state.accepted() || on_target);
        let superseded = marker.state.accepted() && current.is_some() && !on_target && !busy;
        if failed_on_target || superseded {
            plan.status = observe(&plan.status, Some(record), plan.now);
            // Assigned, not advanced: a `Succeeded` seen just before the
            // ERROR would otherwise stand and wake the parked Server forever.
            plan.status.rebuild = Some(Rebuild { state: RebuildState::Failed, ..marker });
            return ImageStep::End(Outcome::Yield(Wait::Rebuild(RebuildWait::FailureRecorded)));
        }
    }

    let Some(current) = current else {
        return match plan.status.rebuild {
            Some(_) => ImageStep::End(Outcome::Yield(Wait::Rebuild(RebuildWait::ImageUnreadable))),
            None => ImageStep::Continue,
        };
    };

    if current == desired {
        let Some(marker) = plan.status.rebuild.as_mut() else {
            return ImageStep::Continue;
        };
        if error {
            return ImageStep::Continue;
        }
        if !busy {
            // Settled: clear, then confirm by reading it back absent.
            plan.status.rebuild = None;
            plan.emit(Event {
                type_: EventType::Normal,
                reason: EventReason::ProviderServerRebuilt,
                action: "RebuildProviderServer",
                note: format!("Provider server {} runs image {desired}", record.id),
            });
            return ImageStep::End(Outcome::Yield(Wait::Rebuild(RebuildWait::Settling)));
        }
        if marker.state.is_terminal() {
            // Nothing advances a terminal marker: the pass's own requeue
            // carries the settlement.
            return ImageStep::End(Outcome::Yield(Wait::Rebuild(RebuildWait::Converging)));
        }
        // Accepted (the record runs the target, a task under way): said on
        // the marker; Healthy stays the monitor's.
        marker.advance(RebuildState::Rebuilding);
        return ImageStep::Continue;
    }

    // Before its first boot the image is a create parameter: a server that
    // fails before it is created again (from the spec's image) by the
    // bounded create retry, one that boots is rebuilt after.
    if record.launched_at.is_none() {
        return ImageStep::End(Outcome::Yield(Wait::Rebuild(RebuildWait::FirstBoot)));
    }
    let Some(marker) = plan.status.rebuild.as_mut() else {
        plan.status.rebuild = Some(Rebuild::initiated(desired));
        return ImageStep::End(Outcome::Yield(Wait::Rebuild(RebuildWait::IntentRecorded)));
    };
    match marker.state {
        RebuildState::Rebuilding => ImageStep::Continue,
        RebuildState::Succeeded | RebuildState::Failed => {
            ImageStep::End(Outcome::Yield(Wait::Rebuild(RebuildWait::Converging)))
        }
        RebuildState::Initiated if busy => ImageStep::End(Outcome::Yield(Wait::Rebuild(RebuildWait::ProviderBusy))),
        RebuildState::Initiated => {
            // Only an intent read back durable authorizes the send.
            let durable = server.status.rebuild.as_ref() == Some(&Rebuild::initiated(desired));
            if !durable {
                return ImageStep::End(Outcome::Yield(Wait::Rebuild(RebuildWait::IntentRecorded)));
            }
            marker.advance(RebuildState::Rebuilding);
            stamp_accepted(plan);
            plan.emit(Event {
                type_: EventType::Normal,
                reason: EventReason::ProviderServerRebuilding,
                action: "RebuildProviderServer",
                note: format!("Rebuilding provider server {} onto image {desired}", record.id),
            });
            ImageStep::Submit(RebuildRequest {
                server: server_ref(server),
                provider_id: record.id.clone(),
                image_id: desired.to_owned(),
            })
        }
    }
}

/// The park of a rebuild read back `Failed`: the record's health and phase
/// are written, the marker stays, and the event is said on entry.
fn park(server: &Server, record: &ProviderServer, plan: &mut Plan) -> ImageStep {
    plan.status = observe(&plan.status, Some(record), plan.now);
    let image = server.spec.image.id.clone();
    let parked = rebuild_failed(server)
        && server.status.condition(ConditionType::Available).is_some_and(|a| a.reason == ConditionReason::Errored);
    if !parked {
        plan.emit(Event {
            type_: EventType::Warning,
            reason: EventReason::ProviderServerRebuildFailed,
            action: "RebuildProviderServer",
            note: format!(
                "Rebuilding provider server {} onto image {image} failed; kept as it is until another image is \
                 selected or the server is replaced",
                record.id
            ),
        });
    }
    ImageStep::End(Outcome::Terminal(Park::RebuildFailed { image }))
}

/// What a rebuild the provider accepted looks like, written by the pass that
/// sent it (never read from the provider's answer, which may still show the
/// server as it was): the same Healthy and phase the monitor writes for a
/// rebuilding server, so the two never rewrite each other.
fn stamp_accepted(plan: &mut Plan) {
    plan.status.phase = Some(Phase::Building);
    let rebuilding = ProviderServer { status: ProviderStatus::Rebuild, ..ProviderServer::default() };
    project_health(&mut plan.status, Some(&rebuilding), plan.now);
}
