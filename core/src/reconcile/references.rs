//! Reference edges (DESIGN §8): the Server's finalizer on each resource it
//! consumes, so none of them can be deleted while the Server needs it.

use super::decision::{Action, Reference};
use super::facts::Facts;
use crate::model::{Consumed, ResourceKind, Server, reference_finalizer};

/// Each consumed resource the facts know, with its kind and whether the spec names it.
fn consumed<'a>(server: &'a Server, facts: &'a Facts) -> impl Iterator<Item = (ResourceKind, &'a Consumed, bool)> {
    let spec = &server.spec;
    let networks =
        facts.networks.iter().map(|n| (ResourceKind::Network, n, spec.networks.iter().any(|s| s.id == n.name)));
    let groups = facts
        .security_groups
        .iter()
        .map(|g| (ResourceKind::SecurityGroup, g, spec.security_groups.iter().any(|s| s.id == g.name)));
    let cas = facts.ssh_certificate_authorities.iter().map(|ca| {
        let named = spec.ssh_certificate_authority_id.as_deref() == Some(ca.resource.name.as_str());
        (ResourceKind::SshCertificateAuthority, &ca.resource, named)
    });
    let identity = facts.identity.iter().map(|i| (ResourceKind::Identity, &i.resource, true));
    // Another identity's resources are never what the spec names now.
    let elsewhere = facts.other_identity_references.iter().map(|(kind, resource)| (*kind, resource, false));
    networks.chain(groups).chain(cas).chain(identity).chain(elsewhere)
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
