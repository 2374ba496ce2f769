//! Checks that must pass before a Server touches anything.

use super::decision::{Outcome, PassError};
use super::facts::Facts;
use crate::lifecycle::spec_park;
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
