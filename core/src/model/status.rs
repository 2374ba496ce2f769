//! `Server.status`, field for field as the real CRD names them. Fields the
//! CRD has and we do not model (volumes, ...) are never written: the
//! adapters persist status as a merge patch of changed fields only.

use jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::condition::{Condition, ConditionType, find_condition};
use super::rebuild::Rebuild;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Phase {
    Pending,
    Queued,
    Building,
    Running,
    Stopping,
    Stopped,
}

impl Phase {
    /// Running, Stopping and Stopped are reachable only after the server booted.
    pub fn is_post_launch(self) -> bool {
        matches!(self, Phase::Running | Phase::Stopping | Phase::Stopped)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerStatus {
    /// Available (the controller's view: Provisioning, Provisioned once the
    /// create was issued, Errored when parked, Deprovisioning) and Healthy
    /// (the provider's view, written by the monitor).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Where the provider server is in its life, from its provider status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// The address of the server's port on its first network.
    #[serde(rename = "privateIP", default, skip_serializing_if = "Option::is_none")]
    pub private_ip: Option<String>,
    /// The floating IP, when publicIPAllocation is enabled.
    #[serde(rename = "publicIP", default, skip_serializing_if = "Option::is_none")]
    pub public_ip: Option<String>,
    /// The MAC address of the server's first port (written by the monitor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac_address: Option<String>,
    /// When the provider last booted the server (Nova `launched_at`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launched_at: Option<Timestamp>,
    /// When the provider accepted the create (Nova `created`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_at: Option<Timestamp>,
    /// Write-once latch: set the first time the provider reports the server
    /// booted, never cleared. A Server with it set is never deleted and
    /// recreated by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned_at: Option<Timestamp>,
    /// Provider creates that ended in an error before the server booted,
    /// counted against --provider-create-max-attempts. Lowering it un-parks.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub provider_create_failures: i32,
    /// True while a failed provider server is being deleted before the next
    /// create attempt.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub provider_create_retrying: bool,
    /// The image rebuild asked for and how far it got (write-ahead: recorded
    /// before the provider is asked). Created, retargeted and cleared by the
    /// reconciler; the monitor only advances its state from what it sees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebuild: Option<Rebuild>,
}

fn is_zero(value: &i32) -> bool {
    *value == 0
}

impl ServerStatus {
    pub fn condition(&self, type_: ConditionType) -> Option<&Condition> {
        find_condition(&self.conditions, type_)
    }
}
