//! Ironic calls: the provision states of the nodes deploying the project's
//! servers, for the phase of a baremetal server in Nova BUILD.
//!
//! The Go controller reads a node by `instance_uuid` with the region's
//! privileged credentials. This controller holds no region-level
//! credentials: it lists with the identity's token, and Ironic shows a
//! project the nodes it owns or leases (its project-scoped node policy).
//! Whatever it cannot read (no Ironic in the catalog, a refusal, an outage)
//! leaves the servers with the VM default.

use std::collections::HashMap;

use http::Method;
use serde::Deserialize;
use server_core::baremetal::ProvisionState;
use server_core::port::CloudError;

use crate::client::{Call, Service, Session};

/// A runaway pagination (a marker that does not advance) stops here.
const MAX_PAGES: usize = 100;

#[derive(Deserialize)]
struct NodeList {
    #[serde(default)]
    nodes: Vec<Node>,
    /// The next page's URL, while more remain.
    #[serde(default)]
    next: Option<String>,
}

#[derive(Deserialize)]
struct Node {
    uuid: String,
    #[serde(default)]
    instance_uuid: Option<String>,
    #[serde(default)]
    provision_state: Option<String>,
}

/// Nova server id -> the provision state of the Ironic node deploying it,
/// for every node with an instance the token's project sees.
pub(crate) async fn node_states(session: &Session<'_>) -> Result<HashMap<String, ProvisionState>, CloudError> {
    const OPERATION: &str = "listing baremetal nodes";
    let mut states = HashMap::new();
    let mut marker: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let mut call = Call::new(OPERATION, Service::Baremetal, Method::GET, "/nodes")
            .query("associated", "true")
            .query("fields", "uuid,instance_uuid,provision_state");
        if let Some(marker) = &marker {
            call = call.query("marker", marker.clone());
        }
        let page: NodeList = session.send(&call).await?.json(OPERATION)?;
        let last = page.nodes.last().map(|node| node.uuid.clone());
        for node in page.nodes {
            if let (Some(instance), Some(state)) = (node.instance_uuid, node.provision_state) {
                states.insert(instance, provision_state(&state));
            }
        }
        match last {
            Some(last) if page.next.is_some() && marker.as_deref() != Some(last.as_str()) => marker = Some(last),
            _ => return Ok(states),
        }
    }
    Err(CloudError::Unavailable { status: 502, message: format!("{OPERATION}: more than {MAX_PAGES} pages") })
}

/// Ironic's `provision_state` as it spells it (ironic/common/states.py).
pub(crate) fn provision_state(text: &str) -> ProvisionState {
    match text {
        "enroll" => ProvisionState::Enroll,
        "verifying" => ProvisionState::Verifying,
        "manageable" => ProvisionState::Manageable,
        "inspecting" => ProvisionState::Inspecting,
        "inspect wait" => ProvisionState::InspectWait,
        "inspect failed" => ProvisionState::InspectFailed,
        "adopting" => ProvisionState::Adopting,
        "adopt failed" => ProvisionState::AdoptFailed,
        "cleaning" => ProvisionState::Cleaning,
        "clean wait" => ProvisionState::CleanWait,
        "clean hold" => ProvisionState::CleanHold,
        "clean failed" => ProvisionState::CleanFailed,
        "available" => ProvisionState::Available,
        "deploying" => ProvisionState::Deploying,
        "wait call-back" => ProvisionState::DeployWait,
        "deploy hold" => ProvisionState::DeployHold,
        "deploy failed" => ProvisionState::DeployFailed,
        "active" => ProvisionState::Active,
        "error" => ProvisionState::Error,
        _ => ProvisionState::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ironic_spellings_parse_and_an_unknown_one_is_other() {
        assert_eq!(provision_state("wait call-back"), ProvisionState::DeployWait);
        assert_eq!(provision_state("clean wait"), ProvisionState::CleanWait);
        assert_eq!(provision_state("deploy failed"), ProvisionState::DeployFailed);
        assert_eq!(provision_state("available"), ProvisionState::Available);
        assert_eq!(provision_state("active"), ProvisionState::Active);
        assert_eq!(provision_state("rescuing"), ProvisionState::Other);
    }
}
