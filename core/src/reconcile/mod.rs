//! One reconcile pass as a pure function: facts in, decision out (DESIGN §2).

mod api_failure;
mod decision;
mod deprovision;
mod facts;
mod failure;
mod listed;
mod networking;
mod plan;
mod provision;
mod rebuild;
mod references;
mod retry;
pub(crate) mod validate;

pub use crate::options::Options;
pub use api_failure::{ApiCause, ApiFailure, NotSent};
pub use decision::{
    Action, Decision, Event, EventReason, EventType, Outcome, PassError, RebuildWait, Reference, ServerPart, Wait,
};
pub use facts::{AttachmentsView, Facts, NetworkingView, ProviderRead, ProviderView, RegionUnserved};
pub use failure::{ActionFailure, action_failed};
pub use listed::{LiveRead, live_read_needed};
pub use networking::{port_follows_spec, wants_public_ip};
pub use provision::{never_created, no_create_begun};
pub use rebuild::{advance_from as advance_rebuild_from, rebuild_settlement_pending, task_in_flight};

use jiff::Timestamp;

use crate::model::{
    ConditionReason, ConditionStatus, ConditionType, Consumed, SERVER_FINALIZER, Server, set_condition,
};
use crate::status_patch::StatusPatch;
use plan::Plan;

use crate::lifecycle::Park;

/// Whether a pass over `server` reads its facts at all. A paused Server, or
/// one being deleted that no longer carries the finalizer, has nothing to do:
/// the adapter can skip gathering (no API or provider reads) and still call
/// [`reconcile`], which then decides nothing from the facts.
pub fn needs_facts(server: &Server) -> bool {
    !server.spec.pause && (!server.meta.deleting || server.meta.has_finalizer(SERVER_FINALIZER))
}

/// Whether a pass over `server` must read the Server's provider resources
/// besides its server ([`Facts::attachments`]), given the provider view it
/// holds: a deleting Server whose provider server is confirmed absent
/// (what is left of it decides whether it may go).
pub fn reads_attachments(server: &Server, facts: &Facts) -> bool {
    needs_facts(server) && server.meta.deleting && facts.provider == ProviderView::Absent
}

/// Whether a pass over `server` must read the port its present provider
/// server boots with and the floating IP on it ([`Facts::networking`]),
/// given the provider view it holds: a Server not being deleted or retried
/// whose provider server is present. The floating IP and the port follow
/// the spec on every such pass (see `networking`).
pub fn reads_networking(server: &Server, facts: &Facts) -> bool {
    needs_facts(server)
        && !server.meta.deleting
        && !server.status.provider_create_retrying
        && matches!(facts.provider, ProviderView::Present(_))
}

/// Decides one pass for `server` given what the adapter found.
pub fn reconcile(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    // Pause stops all work, deletion included; only the Available message
    // says so. Deletion without the finalizer is not ours to finish.
    if server.spec.pause {
        return paused(server, now);
    }
    if !needs_facts(server) {
        return Decision { status: server.status.clone(), actions: Vec::new(), outcome: Outcome::Done };
    }
    let deleting = server.meta.deleting;
    let mut plan = Plan::new(server, deleting, now);
    // A counter outside 0..=max (an option lowered since) heals into range.
    let max = options.max_attempts();
    plan.status.provider_create_failures = plan.status.provider_create_failures.clamp(0, max);

    if deleting {
        if let Err(outcome) = validate::required_labels(server) {
            return plan.finish(outcome);
        }
        return deprovision::deprovision(server, facts, options, plan);
    }

    // An operator's retry request is consumed before anything is decided:
    // the rest of the pass sees the Server without the park's ground.
    let retried = retry::take(server, options);
    if let Some(retry) = &retried {
        plan.status.provider_create_failures = retry.server.status.provider_create_failures;
        plan.status.provider_create_retrying = retry.server.status.provider_create_retrying;
        plan.emit(retry.event.clone());
        for key in &retry.remove_annotations {
            plan.annotate(key, None);
        }
    }
    let server = retried.as_ref().map_or(server, |retry| &retry.server);

    let checks = validate::required_labels(server)
        .and_then(|()| validate::no_duplicate_ids(server))
        .and_then(|()| validate::references_exist(server, facts));
    if let Err(outcome) = checks {
        // A host pin is refused, never ignored: the park's message on the
        // Available condition, and one Warning event when it is first said.
        if let Outcome::Terminal(park @ Park::HostPinned) = &outcome
            && plan.says_anew(&outcome)
        {
            plan.emit(Event {
                type_: EventType::Warning,
                reason: EventReason::SpecNotSupported,
                action: "RefuseHostPin",
                note: park.message(),
            });
        }
        return plan.finish(outcome);
    }

    if !server.meta.has_finalizer(SERVER_FINALIZER) {
        plan.lead(Action::AddFinalizer { annotations: Vec::new() });
    }
    for action in references::to_add(server, facts) {
        plan.lead(action);
    }
    if !facts.identity().is_some_and(Consumed::is_ready_identity) {
        return plan.finish(Outcome::Yield(Wait::IdentityNotReady));
    }
    provision::provision(server, facts, options, plan)
}

/// The Available message of a paused Server.
pub const PAUSED_MESSAGE: &str =
    "Paused: spec.pause is true, so nothing is done for this Server, deletion included, until it is false";

/// A paused Server: no cloud call, no reference or finalizer change; the
/// Available condition keeps its status and reason and says it is paused
/// (one status write, then none while the pause lasts).
fn paused(server: &Server, now: Timestamp) -> Decision {
    let mut status = server.status.clone();
    let (condition_status, reason) = status
        .condition(ConditionType::Available)
        .map_or((ConditionStatus::False, ConditionReason::Provisioning), |c| (c.status, c.reason));
    set_condition(&mut status.conditions, ConditionType::Available, condition_status, reason, PAUSED_MESSAGE, now);
    let actions = StatusPatch::between(&server.status, &status).map(Action::WriteStatus).into_iter().collect();
    Decision { status, actions, outcome: Outcome::Done }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paused_or_released_servers_need_no_facts() {
        let mut server = Server::default();
        assert!(needs_facts(&server));
        server.spec.pause = true;
        assert!(!needs_facts(&server));
        server.spec.pause = false;
        server.meta.deleting = true;
        assert!(!needs_facts(&server), "deleting without our finalizer");
        server.meta.finalizers.push(SERVER_FINALIZER.into());
        assert!(needs_facts(&server), "deleting with our finalizer: deprovision");
    }

    /// Pausing is reported once (the Available message), and then nothing
    /// is written or done, deletion included.
    #[test]
    fn a_paused_server_says_so_once_and_does_nothing_else() {
        for deleting in [false, true] {
            let mut server = Server::default();
            server.spec.pause = true;
            server.meta.deleting = deleting;
            server.meta.finalizers.push(SERVER_FINALIZER.into());
            let decision = reconcile(&server, &Facts::default(), &Options::default(), Timestamp::UNIX_EPOCH);
            assert_eq!(decision.outcome, Outcome::Done);
            assert!(matches!(decision.actions.as_slice(), [Action::WriteStatus(_)]), "{:?}", decision.actions);
            let message = decision.status.condition(ConditionType::Available).map(|c| c.message.as_str());
            assert_eq!(message, Some(PAUSED_MESSAGE));
            server.status = decision.status;
            let again = reconcile(&server, &Facts::default(), &Options::default(), Timestamp::UNIX_EPOCH);
            assert!(again.actions.is_empty(), "{:?}", again.actions);
        }
    }
}
