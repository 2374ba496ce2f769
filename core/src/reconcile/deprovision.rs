//! Deletion: the provider server goes first; then, once the provider
//! confirms it absent (and no create of unknown fate can still land), every
//! other provider resource of the Server (floating IPs, ports), each by its
//! ID; references are released, and the Server's finalizer goes, only once
//! the provider confirms all of them absent (DESIGN "Every provider resource
//! is released").

use super::decision::{Action, Decision, Event, EventReason, EventType, Outcome, Wait};
use super::facts::{AttachmentsView, Facts, ProviderView};
use super::plan::Plan;
use super::provision::server_ref;
use super::references;
use crate::issued::IssuedCreate;
use crate::model::{CREATE_ISSUED_ANNOTATION, SERVER_FINALIZER, Server};
use crate::options::Options;

pub(crate) fn deprovision(server: &Server, facts: &Facts, options: &Options, mut plan: Plan) -> Decision {
    match &facts.provider {
        ProviderView::Unknown(reason) => {
            plan.finish(Outcome::Yield(Wait::ProviderUnknownBeforeDelete { reason: reason.clone() }))
        }
        // The provider server may exist in a cloud this controller cannot
        // reach: the Server keeps its finalizer until one serves the region.
        ProviderView::RegionUnserved(unserved) => plan.finish(Outcome::Yield(Wait::RegionUnserved(unserved.clone()))),
        // The cloud account is missing but the Identity stays and is not being
        // deleted: its project (and the provider server) may well exist, so
        // the Server keeps its finalizer until the account is back. A missing
        // account is not evidence the project is gone.
        ProviderView::NoIdentity if facts.identity().is_some_and(|identity| !identity.is_deleting_identity()) => {
            plan.finish(Outcome::Yield(Wait::NoCloudAccount))
        }
        // The Identity is gone or being deleted (its cloud account with it):
        // no project can hold a provider server, nothing to delete, so the
        // Server is released, and a person is told.
        ProviderView::NoIdentity => {
            plan.emit(Event {
                type_: EventType::Warning,
                reason: EventReason::ProviderServerAbandoned,
                action: "ReleaseServer",
                note: "The server's identity is gone, so its provider server could not be looked for or deleted; \
                       the server is released without it"
                    .into(),
            });
            release(server, facts, plan)
        }
        ProviderView::Present(_) => {
            // The provider shows the server this pass deletes: whatever create
            // the note records has landed (one provider server per Server), so
            // its fate is settled and the note goes before the delete. The
            // absence read after the delete is then final at once.
            if IssuedCreate::of(server).is_some() {
                plan.annotate(CREATE_ISSUED_ANNOTATION, None);
            }
            plan.provider(Action::DeleteProviderServer(server_ref(server)));
            plan.finish(Outcome::Yield(Wait::DeletingProviderServer))
        }
        // A create of unknown fate may still land after this read: absence
        // is confirmed once its grace is over. Only the create-issued note
        // says whether one is outstanding; nothing in the status does (a
        // `scheduledAt` may describe an earlier attempt's server: a park at
        // the cap keeps it).
        ProviderView::Absent
            if IssuedCreate::of(server).is_some_and(|issued| issued.in_grace(plan.now, options.create_grace)) =>
        {
            plan.finish(Outcome::Yield(Wait::IssuedCreateBeforeRelease))
        }
        ProviderView::Absent => release_attachments(server, facts, plan),
    }
}

/// The provider server is confirmed gone: its ports and floating IPs go
/// next, each by its ID; the Server is released only once the provider lists
/// none of them. Nova keeps a port the caller made when its server goes, and
/// Neutron keeps a floating IP when its port goes: nothing else frees them.
fn release_attachments(server: &Server, facts: &Facts, mut plan: Plan) -> Decision {
    match &facts.attachments {
        AttachmentsView::Known(left) if left.is_empty() => release(server, facts, plan),
        AttachmentsView::Known(left) => {
            let mut remaining = left.clone();
            // Floating IPs before the ports they may be associated with.
            remaining.sort();
            remaining.dedup();
            for resource in &remaining {
                plan.provider(Action::ReleaseAttachment(resource.clone()));
            }
            plan.finish(Outcome::Yield(Wait::ReleasingAttachments { remaining }))
        }
        AttachmentsView::Unknown(reason) => {
            plan.finish(Outcome::Yield(Wait::AttachmentsUnknownBeforeRelease { reason: reason.clone() }))
        }
        // Not read is not "none": fail closed.
        AttachmentsView::NotRead => plan.finish(Outcome::Yield(Wait::AttachmentsUnknownBeforeRelease {
            reason: "they were not read in this pass".into(),
        })),
    }
}

/// Releases every reference, then the Server's finalizer.
fn release(server: &Server, facts: &Facts, mut plan: Plan) -> Decision {
    for action in references::to_release(server, facts) {
        plan.trail(action);
    }
    if server.meta.has_finalizer(SERVER_FINALIZER) {
        plan.trail(Action::RemoveFinalizer);
    }
    plan.finish(Outcome::Done)
}
