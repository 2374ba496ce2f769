//! Checks that must pass before a Server touches anything.

use std::collections::BTreeSet;

use super::decision::{Outcome, PassError};
use super::facts::Facts;
use crate::lifecycle::Park;
use crate::model::{IDENTITY_LABEL, REGION_LABEL, ResourceKind, Server};

/// The labels every Server needs to find its cloud and identity.
pub(crate) fn required_labels(server: &Server) -> Result<(), Outcome> {
    for label in [REGION_LABEL, IDENTITY_LABEL] {
        if server.meta.label(label).is_none() {
            return Err(Outcome::Error(PassError::MissingLabel { label }));
        }
    }
    Ok(())
}

/// A spec this controller cannot act on as written (a repeated ID, a host
/// pin): parked until the spec changes.
pub(crate) fn no_duplicate_ids(server: &Server) -> Result<(), Outcome> {
    spec_park(server).map_or(Ok(()), |park| Err(Outcome::Terminal(park)))
}

/// The park of a spec this controller cannot act on as written.
pub(crate) fn spec_park(server: &Server) -> Option<Park> {
    // `spec.infrastructureRef` names a host to place the server on, which
    // this controller does not do (the Go controller sends it to Nova as
    // `hypervisor_hostname` with admin credentials): refused, never ignored.
    if server.spec.infrastructure_ref.is_some() {
        return Some(Park::HostPinned);
    }
    duplicate_id(server).map(|message| Park::InvalidSpec { message })
}

/// What is repeated in the spec, as the park's message.
pub(crate) fn duplicate_id(server: &Server) -> Option<String> {
    for kind in ResourceKind::ALL {
        let ids = kind.named(server);
        if ids.len() < 2 {
            continue;
        }
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

/// Every ID the Server names must exist; the resource may appear later, so
/// this is an error that requeues rather than a park.
pub(crate) fn references_exist(server: &Server, facts: &Facts) -> Result<(), Outcome> {
    for kind in ResourceKind::ALL {
        if let Some(id) = kind.named(server).find(|id| facts.find(kind, id).is_none()) {
            return Err(Outcome::Error(PassError::UnknownReference { kind, id: id.to_owned() }));
        }
    }
    Ok(())
}
