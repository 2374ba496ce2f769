//! The operator's retry annotation: a documented way to un-park a Server
//! (`kubectl annotate server NAME server-controller.unikorn-cloud.org/retry=now`).
//! Consumed once by the next pass, whatever the Server's state, with an
//! event saying what it did.

use super::decision::{Event, EventReason, EventType};
use crate::lifecycle::{Lifecycle, ParkKind, lifecycle};
use crate::model::{
    CREATE_FORBIDDEN_ANNOTATION, CREATE_REFUSED_ANNOTATION, CREATE_REFUSED_MESSAGE_ANNOTATION, RETRY_ANNOTATION,
    Server, USER_DATA_REFUSED_ANNOTATION, retry_requested,
};
use crate::options::Options;
use crate::predicate::provider_create_failure;

/// A consumed retry request: the Server as the rest of the pass must see it
/// (the park's ground removed), the annotations to remove, and the event.
#[derive(Debug)]
pub(crate) struct Retry {
    pub(crate) server: Server,
    pub(crate) remove_annotations: Vec<&'static str>,
    pub(crate) event: Event,
}

/// `None` unless the Server carries the retry annotation.
pub(crate) fn take(server: &Server, options: &Options) -> Option<Retry> {
    if !retry_requested(&server.meta) {
        return None;
    }
    let mut adjusted = server.clone();
    adjusted.meta.annotations.remove(RETRY_ANNOTATION);
    let mut remove_annotations = vec![RETRY_ANNOTATION];
    let normal =
        |note: String| Event { type_: EventType::Normal, reason: EventReason::RetryRequested, action: "Retry", note };
    let event = match lifecycle(server, options) {
        Lifecycle::Parked(ParkKind::AtCap) => {
            let spent = adjusted.status.provider_create_failures;
            // Nothing is outstanding at the cap, so zero re-arms cleanly: the
            // next create is attempt 1 again, bounded by the cap as before.
            // The last failed server (if the provider still has it) was
            // counted already: it is cleared as a retry, not counted again.
            adjusted.status.provider_create_failures = 0;
            adjusted.status.provider_create_retrying = provider_create_failure(&adjusted);
            normal(format!("Retry requested: {spent} failed create attempts forgotten; creating again"))
        }
        Lifecycle::Parked(ParkKind::Forbidden) => {
            for key in [CREATE_FORBIDDEN_ANNOTATION, CREATE_REFUSED_MESSAGE_ANNOTATION] {
                adjusted.meta.annotations.remove(key);
                remove_annotations.push(key);
            }
            normal("Retry requested: the policy's refusal of this generation forgotten; creating again".into())
        }
        Lifecycle::Parked(ParkKind::Refused) => {
            for key in [CREATE_REFUSED_ANNOTATION, CREATE_REFUSED_MESSAGE_ANNOTATION] {
                adjusted.meta.annotations.remove(key);
                remove_annotations.push(key);
            }
            normal("Retry requested: the refusal of this generation forgotten; creating again".into())
        }
        // The user data is checked again (a controller that reads more of it
        // may take it), but as written it is most likely refused again: the
        // event says so, and that fixing spec.userData is what un-parks it.
        Lifecycle::Parked(ParkKind::UserDataRefused) => {
            for key in [USER_DATA_REFUSED_ANNOTATION, CREATE_REFUSED_MESSAGE_ANNOTATION] {
                adjusted.meta.annotations.remove(key);
                remove_annotations.push(key);
            }
            normal(
                "Retry requested: the user data is checked again; unchanged, it is refused again. Fix \
                 spec.userData to un-park the Server"
                    .into(),
            )
        }
        Lifecycle::Parked(ParkKind::MissingAfterBoot) => Event {
            type_: EventType::Warning,
            reason: EventReason::RetryRefused,
            action: "Retry",
            note: "Retry not done: this server booted before and may have held data, and the controller never \
                   recreates such a server; delete the Server and create a new one"
                .into(),
        },
        Lifecycle::Parked(ParkKind::InvalidSpec) => {
            normal("Retry requested: nothing to reset, the spec is invalid as written; fix the spec".into())
        }
        other => normal(format!("Retry requested while not parked ({}): nothing to reset", other.as_str())),
    };
    Some(Retry { server: adjusted, remove_annotations, event })
}
