//! Baremetal servers in Nova BUILD: the Ironic node's provision state tells
//! a server not yet taken up for deployment (`Queued`) from one being
//! deployed (`Building`), as the Go controller tells them at `8fcef6b`
//! (its `baremetalBuildPhase`). The adapter parses Ironic's
//! `provision_state`; the rule reads only the type.

use serde::{Deserialize, Serialize};

use crate::model::Phase;

/// An Ironic node's `provision_state` (ironic/common/states.py).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProvisionState {
    Enroll,
    Verifying,
    Manageable,
    Inspecting,
    InspectWait,
    InspectFailed,
    Adopting,
    AdoptFailed,
    Cleaning,
    CleanWait,
    CleanHold,
    CleanFailed,
    Available,
    Deploying,
    DeployWait,
    DeployHold,
    DeployFailed,
    Active,
    Error,
    /// A state this controller does not know (one a later Ironic adds).
    Other,
}

/// The phase of a baremetal server Nova reports in BUILD, from its node's
/// provision state: before deployment (enrolled, managed, being inspected,
/// cleaned or adopted, available) `Queued`; deploying, deployed or failed
/// along the way `Building` (a failure shows on the Healthy condition, from
/// Nova; the server is still in its build until it is torn down). A state
/// this controller does not know is `Queued`: no deployment progress is
/// claimed that may not be real.
pub fn build_phase(state: ProvisionState) -> Phase {
    match state {
        ProvisionState::Enroll
        | ProvisionState::Verifying
        | ProvisionState::Manageable
        | ProvisionState::Inspecting
        | ProvisionState::InspectWait
        | ProvisionState::Adopting
        | ProvisionState::Cleaning
        | ProvisionState::CleanWait
        | ProvisionState::CleanHold
        | ProvisionState::Available
        | ProvisionState::Other => Phase::Queued,
        ProvisionState::Deploying
        | ProvisionState::DeployWait
        | ProvisionState::DeployHold
        | ProvisionState::Active
        | ProvisionState::InspectFailed
        | ProvisionState::AdoptFailed
        | ProvisionState::CleanFailed
        | ProvisionState::DeployFailed
        | ProvisionState::Error => Phase::Building,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pre_deploy_states_are_queued_and_deploy_states_building() {
        for state in [
            ProvisionState::Enroll,
            ProvisionState::Manageable,
            ProvisionState::Available,
            ProvisionState::Cleaning,
            ProvisionState::CleanWait,
            ProvisionState::CleanHold,
            ProvisionState::Inspecting,
            ProvisionState::InspectWait,
            ProvisionState::Verifying,
            ProvisionState::Adopting,
            ProvisionState::Other,
        ] {
            assert_eq!(build_phase(state), Phase::Queued, "{state:?}");
        }
        for state in [
            ProvisionState::Deploying,
            ProvisionState::DeployWait,
            ProvisionState::DeployHold,
            ProvisionState::Active,
            ProvisionState::DeployFailed,
            ProvisionState::CleanFailed,
            ProvisionState::InspectFailed,
            ProvisionState::AdoptFailed,
            ProvisionState::Error,
        ] {
            assert_eq!(build_phase(state), Phase::Building, "{state:?}");
        }
    }

    /// The monitor's projection: in BUILD the node's state decides; without
    /// a node read, the VM default (Nova's task state); out of BUILD, Nova.
    #[test]
    fn the_monitor_takes_a_baremetal_build_phase_from_ironic() {
        use crate::model::ServerStatus;
        use crate::port::{PowerState, ProviderServer, ProviderStatus};
        let phase = |status: ProviderStatus, queued: bool, ironic: Option<ProvisionState>| {
            let power_state = if status == ProviderStatus::Active { PowerState::Running } else { PowerState::NoState };
            let record = ProviderServer { status, power_state, queued, ironic, ..ProviderServer::default() };
            crate::monitor::observe(&ServerStatus::default(), Some(&record), jiff::Timestamp::UNIX_EPOCH).phase
        };
        assert_eq!(phase(ProviderStatus::Build, false, Some(ProvisionState::Available)), Some(Phase::Queued));
        assert_eq!(phase(ProviderStatus::Build, true, Some(ProvisionState::DeployWait)), Some(Phase::Building));
        assert_eq!(phase(ProviderStatus::Build, true, None), Some(Phase::Queued));
        assert_eq!(phase(ProviderStatus::Build, false, None), Some(Phase::Building));
        assert_eq!(phase(ProviderStatus::Active, false, Some(ProvisionState::Active)), Some(Phase::Running));
    }
}
