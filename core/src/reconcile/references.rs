//! Reference edges (DESIGN §8): the Server's finalizer on each resource it
//! consumes, so none of them can be deleted while the Server needs it.

use super::decision::{Action, Reference};
use super::facts::Facts;
use crate::model::{Consumed, ResourceKind, Server, reference_finalizer};

/// Each consumed resource the facts know, with its kind and whether the
/// Server names it (the spec, or the identity label for the Identity).
fn consumed<'a>(server: &'a Server, facts: &'a Facts) -> impl Iterator<Item = (ResourceKind, &'a Consumed, bool)> {
    let named = ResourceKind::ALL.into_iter().flat_map(move |kind| {
        facts.of(kind).iter().map(move |resource| (kind, resource, kind.named(server).any(|id| id == resource.name)))
    });
    // Another identity's resources are never what the Server names now.
    let elsewhere = facts.other_identity_references.iter().map(|(kind, resource)| (*kind, resource, false));
    named.chain(elsewhere)
}

fn reference(kind: ResourceKind, resource: &Consumed, finalizer: &str) -> Reference {
    Reference { kind, name: resource.name.clone(), finalizer: finalizer.to_owned() }
}

/// Adds the reference to every resource the spec names (and the identity)
/// that does not carry it yet.
pub(crate) fn to_add(server: &Server, facts: &Facts) -> Vec<Action> {
    let finalizer = reference_finalizer(&server.meta.name);
    consumed(server, facts)
        .filter(|(_, resource, named)| *named && !resource.has_finalizer(&finalizer))
        .map(|(kind, resource, _)| Action::AddReference(reference(kind, resource, &finalizer)))
        .collect()
}

/// Removes the reference from resources the spec no longer names. The
/// identity is always named while the Server lives.
pub(crate) fn to_prune(server: &Server, facts: &Facts) -> Vec<Action> {
    let finalizer = reference_finalizer(&server.meta.name);
    consumed(server, facts)
        .filter(|(_, resource, named)| !*named && resource.has_finalizer(&finalizer))
        .map(|(kind, resource, _)| Action::RemoveReference(reference(kind, resource, &finalizer)))
        .collect()
}

/// Removes every reference the Server holds: on deletion, once the provider
/// server is gone.
pub(crate) fn to_release(server: &Server, facts: &Facts) -> Vec<Action> {
    let finalizer = reference_finalizer(&server.meta.name);
    consumed(server, facts)
        .filter(|(_, resource, _)| resource.has_finalizer(&finalizer))
        .map(|(kind, resource, _)| Action::RemoveReference(reference(kind, resource, &finalizer)))
        .collect()
}
