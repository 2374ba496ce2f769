//! Conditions as the unikorn CRDs define them: a type, a tri-state status, a
//! reason from a closed set, a message and the time the status last changed.

use jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub enum ConditionType {
    /// Owned by the reconciler: has the server been provisioned?
    Available,
    /// Owned by the monitor: what does the provider say about the server?
    Healthy,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConditionReason {
    Provisioning,
    Provisioned,
    Cancelled,
    Errored,
    Deprovisioning,
    Deprovisioned,
    Unknown,
    Healthy,
    Degraded,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Available or Healthy.
    #[serde(rename = "type")]
    pub type_: ConditionType,
    /// True, False or Unknown.
    pub status: ConditionStatus,
    /// One CamelCase word from a closed set (Provisioning, Provisioned,
    /// Errored, Healthy, Degraded, ...).
    pub reason: ConditionReason,
    /// What happened, for a person; never user data or provider bodies.
    pub message: String,
    /// When the status last changed.
    pub last_transition_time: Timestamp,
}

impl ConditionStatus {
    /// The status a stored condition's `status` string reads as, if it is
    /// one of the three Kubernetes defines.
    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "True" => Some(ConditionStatus::True),
            "False" => Some(ConditionStatus::False),
            "Unknown" => Some(ConditionStatus::Unknown),
            _ => None,
        }
    }
}

/// Reads a stored Server status's conditions as the core understands them,
/// in place (the JSON document of `status`): a condition whose `status` is
/// not True, False or Unknown (another tool's value, or a later version's)
/// reads as Unknown: it says nothing the core can act on, which is what
/// Unknown means, and the rest of the Server is read and managed as usual
/// instead of being left alone. Returns the JSON path of each value read
/// so, never the value (it is not ours, and may be anything), for the
/// adapter to say once what it could not read.
pub fn read_condition_statuses(status: &mut serde_json::Value) -> Vec<String> {
    let mut unread = Vec::new();
    let Some(conditions) = status.get_mut("conditions").and_then(serde_json::Value::as_array_mut) else {
        return unread;
    };
    for (index, condition) in conditions.iter_mut().enumerate() {
        let Some(value) = condition.get_mut("status") else { continue };
        if value.as_str().and_then(ConditionStatus::parse).is_none() {
            *value = serde_json::Value::String("Unknown".into());
            unread.push(format!("status.conditions[{index}].status"));
        }
    }
    unread
}

/// Finds the condition of a type, if present.
pub fn find_condition(conditions: &[Condition], type_: ConditionType) -> Option<&Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Sets a condition, keeping its transition time unless its status changes
/// (the Kubernetes convention), so re-asserting a condition writes nothing.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: ConditionType,
    status: ConditionStatus,
    reason: ConditionReason,
    message: impl Into<String>,
    now: Timestamp,
) {
    let message = message.into();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            if existing.status != status {
                existing.last_transition_time = now;
            }
            existing.status = status;
            existing.reason = reason;
            existing.message = message;
        }
        None => conditions.push(Condition { type_, status, reason, message, last_transition_time: now }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_status_the_core_does_not_know_reads_as_unknown_and_is_named_by_path() {
        let mut status = serde_json::json!({ "phase": "Running", "conditions": [
            { "type": "Available", "status": "True", "reason": "Provisioned", "message": "",
              "lastTransitionTime": "2026-01-01T00:00:00Z" },
            { "type": "Healthy", "status": "Maybe", "reason": "Healthy", "message": "",
              "lastTransitionTime": "2026-01-01T00:00:00Z" },
            { "type": "Healthy", "status": 7 },
        ]});
        let unread = read_condition_statuses(&mut status);
        assert_eq!(unread, vec!["status.conditions[1].status", "status.conditions[2].status"]);
        assert_eq!(status["conditions"][1]["status"], "Unknown");
        assert_eq!(status["conditions"][0]["status"], "True", "what can be read is kept");
        assert!(read_condition_statuses(&mut status).is_empty(), "read once, nothing left to report");
        let read: crate::model::ServerStatus =
            serde_json::from_value(serde_json::json!({ "phase": "Running", "conditions": [status["conditions"][1]] }))
                .expect("the rest of the status reads");
        let healthy = find_condition(&read.conditions, ConditionType::Healthy).map(|c| c.status);
        assert_eq!(healthy, Some(ConditionStatus::Unknown));
    }

    #[test]
    fn transition_time_moves_only_when_status_changes() {
        let t0 = Timestamp::from_second(100).unwrap_or_default();
        let t1 = Timestamp::from_second(200).unwrap_or_default();
        let mut conditions = Vec::new();
        let (available, f) = (ConditionType::Available, ConditionStatus::False);
        set_condition(&mut conditions, available, f, ConditionReason::Provisioning, "a", t0);
        set_condition(&mut conditions, available, f, ConditionReason::Errored, "b", t1);
        assert_eq!(conditions[0].last_transition_time, t0);
        assert_eq!(conditions[0].reason, ConditionReason::Errored);
        let t = ConditionStatus::True;
        set_condition(&mut conditions, available, t, ConditionReason::Provisioned, "c", t1);
        assert_eq!(conditions[0].last_transition_time, t1);
        assert_eq!(conditions.len(), 1);
    }
}
