//! One reconcile pass as a pure function: facts in, decision out (DESIGN §2).

mod decision;
mod deprovision;
mod facts;
mod failure;
mod issued;
mod options;
mod plan;
mod provision;
mod references;
mod retry;
pub(crate) mod validate;

pub use decision::{Action, Decision, Event, EventReason, EventType, Outcome, Reference};
pub use facts::{Facts, ProviderView};
pub use failure::{ActionFailure, action_failed};
pub use options::Options;

use jiff::Timestamp;

use crate::model::{SERVER_FINALIZER, Server};
use plan::Plan;

/// Whether a pass over `server` reads its facts at all. A paused Server, or
/// one being deleted that no longer carries the finalizer, has nothing to do:
/// the adapter can skip gathering (no API or provider reads) and still call
/// [`reconcile`], which then decides nothing from the facts.
pub fn needs_facts(server: &Server) -> bool {
    !server.spec.pause && (!server.meta.deleting || server.meta.has_finalizer(SERVER_FINALIZER))
}

/// Decides one pass for `server` given what the adapter found.
pub fn reconcile(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    // Pause stops all work, deletion included; nothing is written. Deletion
    // without the finalizer is not ours to finish.
    if !needs_facts(server) {
        return Decision { status: server.status.clone(), actions: Vec::new(), outcome: Outcome::Done };
    }
    let deleting = server.meta.deleting;
    let mut plan = Plan::new(&server.status, deleting, now);
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
            plan.annotate(*key, None);
        }
    }
    let server = retried.as_ref().map_or(server, |retry| &retry.server);

    let checks = validate::required_labels(server)
        .and_then(|()| validate::no_duplicate_ids(server))
        .and_then(|()| validate::references_exist(server, facts));
    if let Err(outcome) = checks {
        return plan.finish(outcome);
    }

    if !server.meta.has_finalizer(SERVER_FINALIZER) {
        plan.lead(Action::AddFinalizer);
    }
    for action in references::to_add(server, facts) {
        plan.lead(action);
    }
    if !facts.identity.as_ref().is_some_and(|i| i.is_ready()) {
        return plan.finish(Outcome::Yield("Waiting for the identity to become ready".into()));
    }
    provision::provision(server, facts, options, plan)
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
        let decision = reconcile(&server, &Facts::default(), &Options::default(), Timestamp::UNIX_EPOCH);
        assert!(decision.actions.is_empty() && decision.outcome == Outcome::Done);
        server.spec.pause = false;
        server.meta.deleting = true;
        assert!(!needs_facts(&server), "deleting without our finalizer");
        server.meta.finalizers.push(SERVER_FINALIZER.into());
        assert!(needs_facts(&server), "deleting with our finalizer: deprovision");
    }
}
