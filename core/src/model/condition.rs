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
