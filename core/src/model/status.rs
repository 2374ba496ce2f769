//! `Server.status`, field for field as the real CRD names them. Fields the
//! CRD has and we do not model (volumes, rebuild, ...) are never written: the
//! adapters persist status as a merge patch of changed fields only.

use jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::condition::{Condition, ConditionType, find_condition};

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
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    #[serde(rename = "privateIP", default, skip_serializing_if = "Option::is_none")]
    pub private_ip: Option<String>,
    #[serde(rename = "publicIP", default, skip_serializing_if = "Option::is_none")]
    pub public_ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac_address: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launched_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_at: Option<Timestamp>,
    /// Write-once latch: the server booted at least once. See DESIGN §4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub provider_create_failures: i32,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub provider_create_retrying: bool,
}

fn is_zero(value: &i32) -> bool {
    *value == 0
}

impl ServerStatus {
    pub fn condition(&self, type_: ConditionType) -> Option<&Condition> {
        find_condition(&self.conditions, type_)
    }
}
