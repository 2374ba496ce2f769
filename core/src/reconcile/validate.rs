//! Checks that must pass before a Server touches anything.

use std::collections::BTreeSet;

use super::decision::Outcome;
use super::facts::Facts;
use crate::model::{IDENTITY_LABEL, REGION_LABEL, ResourceKind, Server};

/// The labels every Server needs to find its cloud and identity.
pub(crate) fn required_labels(server: &Server) -> Result<(), Outcome> {
    for label in [REGION_LABEL, IDENTITY_LABEL] {
        if server.meta.label(label).is_none() {
            return Err(Outcome::Error(format!("server is missing required label {label}; set it to add the server")));
        }
    }
    Ok(())
}

/// Repeated IDs in the spec: a spec error, parked until the spec changes.
pub(crate) fn no_duplicate_ids(server: &Server) -> Result<(), Outcome> {
    duplicate_id(server).map_or(Ok(()), |message| Err(Outcome::Terminal(message)))
}

/// What is repeated in the spec, as the park's message.
pub(crate) fn duplicate_id(server: &Server) -> Option<String> {
    let networks = server.spec.networks.iter().map(|n| n.id.as_str());
    let security_groups = server.spec.security_groups.iter().map(|g| g.id.as_str());
    for (kind, ids) in [
        (ResourceKind::Network, networks.collect::<Vec<_>>()),
        (ResourceKind::SecurityGroup, security_groups.collect()),
    ] {
        let mut seen = BTreeSet::new();
        if let Some(repeated) = ids.into_iter().find(|id| !seen.insert(*id)) {
            return Some(format!(
                "{} ID {repeated} appears more than once in the spec; list each {} once",
                kind.as_str(),
                kind.as_str()
            ));
        }
    }
    None
}

/// Every ID the spec names must exist; the resource may appear later, so this
/// is an error that requeues rather than a park.
pub(crate) fn references_exist(server: &Server, facts: &Facts) -> Result<(), Outcome> {
    let unknown = |kind: ResourceKind, id: &str| {
        Outcome::Error(format!("attempt to reference unknown resource ID {id} ({})", kind.as_str()))
    };
    for network in &server.spec.networks {
        if !facts.networks.iter().any(|n| n.name == network.id) {
            return Err(unknown(ResourceKind::Network, &network.id));
        }
    }
    for group in &server.spec.security_groups {
        if !facts.security_groups.iter().any(|g| g.name == group.id) {
            return Err(unknown(ResourceKind::SecurityGroup, &group.id));
        }
    }
    if let Some(ca) = &server.spec.ssh_certificate_authority_id
        && !facts.ssh_certificate_authorities.iter().any(|c| &c.resource.name == ca)
    {
        return Err(unknown(ResourceKind::SshCertificateAuthority, ca));
    }
    if facts.identity.is_none() {
        let id = server.meta.label(IDENTITY_LABEL).unwrap_or_default();
        return Err(unknown(ResourceKind::Identity, id));
    }
    Ok(())
}
