//! What a failed action means. The executor stops at the first failed action
//! and asks here; it never classifies errors itself.

use jiff::Timestamp;

use super::api_failure::ApiFailure;
use super::decision::ServerPart;
use super::decision::{Action, Decision, Event, EventReason, EventType, Outcome, PassError, Reference, Wait};
use super::plan::Plan;
use crate::lifecycle::Park;
use crate::model::{
    CREATE_FORBIDDEN_ANNOTATION, CREATE_ISSUED_ANNOTATION, CREATE_REFUSED_ANNOTATION,
    CREATE_REFUSED_MESSAGE_ANNOTATION, RETRY_ANNOTATION, Server,
};
use crate::port::{CallEffect, CloudError};

/// Why an action failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ActionFailure {
    /// The cloud port answered with an error.
    Cloud(CloudError),
    /// A Kubernetes write lost a race (409 on a stale resourceVersion, a
    /// concurrent writer): the next pass sees fresh state.
    Conflict(ApiFailure),
    /// Any other Kubernetes API failure.
    Api(ApiFailure),
    /// The Server no longer exists (the API server answered 404).
    ServerGone,
}

/// The follow-up decision after `action` failed. `server` is the Server as
/// last persisted (with the pass's status if its WriteStatus ran).
pub fn action_failed(server: &Server, action: &Action, failure: &ActionFailure, now: Timestamp) -> Decision {
    let unchanged = |outcome| Decision { status: server.status.clone(), actions: Vec::new(), outcome };
    match (action, failure) {
        (Action::CreateProviderServer(_), ActionFailure::Cloud(CloudError::Refused { message, .. })) => {
            park_refused_create(server, message, now)
        }
        // The cloud's policy forbids the create (or a step before it): no
        // spec change fixes that, and the park says so.
        (Action::CreateProviderServer(_), ActionFailure::Cloud(error)) if forbidden(error).is_some() => {
            park_forbidden_create(server, forbidden(error).unwrap_or_default(), now)
        }
        // A step after the server exists (its floating IP, its port) that
        // does not pass: the server runs, and the message says what is
        // missing and what a person must do; never "create refused".
        (Action::EnsureFloatingIp(_) | Action::UpdatePort(_), ActionFailure::Cloud(error)) if !error.is_transient() => {
            let what = match action {
                Action::EnsureFloatingIp(_) => ServerPart::PublicIp,
                _ => ServerPart::PortSecurity,
            };
            // Said on Available (the next pass that converges says
            // Provisioned again).
            Plan::new(server, false, now).finish(Outcome::Error(PassError::AfterCreate { what, error: error.clone() }))
        }
        // What the answer proves about the create decides whether it stays
        // issued. A timeout or a 5xx leaves its fate unknown: it may have
        // landed, and its server may vanish before any pass sees it, so it
        // stays issued (absent later, without a boot and past the grace, it
        // is counted; bounded creates, fail closed). An answer that proves
        // it did not land (409, 429, authentication, never sent, a step
        // before the server create) releases it, so nothing is counted for a
        // create that never was.
        (Action::CreateProviderServer(_), ActionFailure::Cloud(error)) => {
            let mut plan = Plan::new(server, false, now);
            if error.effect() == CallEffect::None && server.meta.annotations.contains_key(CREATE_ISSUED_ANNOTATION) {
                plan.record(CREATE_ISSUED_ANNOTATION, None);
            }
            let outcome = match error {
                CloudError::Auth { .. } => Outcome::Error(PassError::Cloud(error.clone())),
                // A step before the server create failed: that step's
                // failure, retried on the next pass (a refused lookup or
                // port is no refused create: no spec change is asked for).
                CloudError::BeforeCreate { .. } if !error.is_transient() => {
                    Outcome::Error(PassError::Cloud(error.clone()))
                }
                _ => Outcome::Yield(Wait::Provider(error.clone())),
            };
            plan.finish(outcome)
        }
        (_, ActionFailure::Cloud(error)) if error.is_transient() => {
            unchanged(Outcome::Yield(Wait::Provider(error.clone())))
        }
        (_, ActionFailure::Conflict(failure)) => unchanged(Outcome::Yield(Wait::Conflict(failure.clone()))),
        (_, ActionFailure::Cloud(error)) => unchanged(Outcome::Error(PassError::Cloud(error.clone()))),
        // A reference the API server refused: the status stays as it was
        // (written before the create, it would make the create-issued note
        // stand for a create never sent), and an event says why the Server
        // waits.
        (Action::AddReference(reference) | Action::RemoveReference(reference), ActionFailure::Api(failure)) => {
            let adding = matches!(action, Action::AddReference(_));
            Decision {
                status: server.status.clone(),
                actions: vec![Action::Emit(reference_not_written(reference, adding, failure))],
                outcome: Outcome::Error(PassError::Api(failure.clone())),
            }
        }
        (_, ActionFailure::Api(failure)) => unchanged(Outcome::Error(PassError::Api(failure.clone()))),
        // Nothing is left to act on; the watch's delete event ends its work.
        (_, ActionFailure::ServerGone) => unchanged(Outcome::Error(PassError::ServerGone)),
    }
}

/// The Warning that says which reference the API server refused and how.
fn reference_not_written(reference: &Reference, adding: bool, failure: &ApiFailure) -> Event {
    let (action, verb) = if adding { ("AddReference", "hold") } else { ("RemoveReference", "release") };
    Event {
        type_: EventType::Warning,
        reason: EventReason::ReferenceNotWritten,
        action,
        note: format!(
            "cannot {verb} the reference on {} {}: {}; retrying",
            reference.kind.as_str(),
            reference.name,
            failure.cause
        ),
    }
}

/// The words of a policy's refusal of a create or of a step before it.
fn forbidden(error: &CloudError) -> Option<&str> {
    match error {
        CloudError::NotPermitted { message } => Some(message),
        CloudError::BeforeCreate { source, .. } => forbidden(source),
        _ => None,
    }
}

/// A create the cloud's policy forbids parks the server until a person
/// grants what the policy asks and requests a retry (or the spec changes):
/// recorded like a refusal, under its own annotation, so the park's message
/// never asks for a spec change that cannot help.
fn park_forbidden_create(server: &Server, provider_message: &str, now: Timestamp) -> Decision {
    let generation = server.meta.generation;
    let already_recorded = server.meta.annotations.get(CREATE_FORBIDDEN_ANNOTATION) == Some(&generation.to_string());
    let provider_message = bounded(provider_message);
    let mut plan = Plan::new(server, false, now);
    plan.record(CREATE_FORBIDDEN_ANNOTATION, Some(generation.to_string()));
    let message = format!(
        "the cloud's policy does not let this Server's identity create its server: {provider_message}; no spec \
         change can fix a policy: have a cloud administrator grant the identity's user the role the policy asks \
         for, then annotate the Server with {RETRY_ANNOTATION} to try again"
    );
    plan.record(CREATE_REFUSED_MESSAGE_ANNOTATION, Some(message.clone()));
    if server.meta.annotations.contains_key(CREATE_ISSUED_ANNOTATION) {
        plan.record(CREATE_ISSUED_ANNOTATION, None);
    }
    if !already_recorded {
        plan.emit(Event {
            type_: EventType::Warning,
            reason: EventReason::ProviderCreateRefused,
            action: "CreateProviderServer",
            note: format!("The cloud's policy forbids creating the server: {provider_message}"),
        });
    }
    plan.finish(Outcome::Terminal(Park::Forbidden { message }))
}

/// A create the provider refuses outright (quota, invalid request) parks the
/// server with the provider's message until its spec changes. The refusal,
/// its words and the release of the issued create are one record, written
/// before the status: a concurrent status write (the monitor's) that makes
/// the status write fail leaves the next pass parking from the record, where
/// without it that pass would count the refused create as lost and send it
/// again.
fn park_refused_create(server: &Server, provider_message: &str, now: Timestamp) -> Decision {
    let generation = server.meta.generation;
    let already_recorded = server.meta.annotations.get(CREATE_REFUSED_ANNOTATION) == Some(&generation.to_string());
    let provider_message = bounded(provider_message);
    let mut plan = Plan::new(server, false, now);
    plan.record(CREATE_REFUSED_ANNOTATION, Some(generation.to_string()));
    let message = refused_message(provider_message);
    plan.record(CREATE_REFUSED_MESSAGE_ANNOTATION, Some(message.clone()));
    if server.meta.annotations.contains_key(CREATE_ISSUED_ANNOTATION) {
        plan.record(CREATE_ISSUED_ANNOTATION, None);
    }
    if !already_recorded {
        plan.emit(Event {
            type_: EventType::Warning,
            reason: EventReason::ProviderCreateRefused,
            action: "CreateProviderServer",
            note: format!("Provider refused to create the server: {provider_message}"),
        });
    }
    plan.finish(Outcome::Terminal(Park::Refused { message }))
}

/// The Available message of a refused create.
fn refused_message(provider_message: &str) -> String {
    format!("provider refused to create the server: {provider_message}")
}

/// The longest provider message kept with a refusal, in bytes.
const MAX_PROVIDER_MESSAGE: usize = 1024;

/// `message`, cut to [`MAX_PROVIDER_MESSAGE`] bytes at a character boundary.
fn bounded(message: &str) -> &str {
    let mut end = message.len().min(MAX_PROVIDER_MESSAGE);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}
