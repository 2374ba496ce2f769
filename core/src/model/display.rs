//! How a person reads the model's closed sets: the names the CRD uses on the
//! wire (`Running`, `Errored`), never Rust's `Debug` text.

use std::fmt;

use super::condition::{ConditionReason, ConditionStatus, ConditionType};
use super::status::Phase;

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Pending => "Pending",
            Phase::Queued => "Queued",
            Phase::Building => "Building",
            Phase::Running => "Running",
            Phase::Stopping => "Stopping",
            Phase::Stopped => "Stopped",
        })
    }
}

impl fmt::Display for ConditionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConditionType::Available => "Available",
            ConditionType::Healthy => "Healthy",
        })
    }
}

impl fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        })
    }
}

impl fmt::Display for ConditionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConditionReason::Provisioning => "Provisioning",
            ConditionReason::Provisioned => "Provisioned",
            ConditionReason::Cancelled => "Cancelled",
            ConditionReason::Errored => "Errored",
            ConditionReason::Deprovisioning => "Deprovisioning",
            ConditionReason::Deprovisioned => "Deprovisioned",
            ConditionReason::Unknown => "Unknown",
            ConditionReason::Healthy => "Healthy",
            ConditionReason::Degraded => "Degraded",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Display is the wire name, so a person reads what `kubectl get -o yaml` shows.
    #[test]
    fn display_is_the_serialized_name() {
        let wire = |value: &dyn erased::Wire| value.wire();
        for phase in [Phase::Pending, Phase::Queued, Phase::Building, Phase::Running, Phase::Stopping, Phase::Stopped] {
            assert_eq!(phase.to_string(), wire(&phase));
        }
        for reason in [
            ConditionReason::Provisioning,
            ConditionReason::Provisioned,
            ConditionReason::Cancelled,
            ConditionReason::Errored,
            ConditionReason::Deprovisioning,
            ConditionReason::Deprovisioned,
            ConditionReason::Unknown,
            ConditionReason::Healthy,
            ConditionReason::Degraded,
        ] {
            assert_eq!(reason.to_string(), wire(&reason));
        }
        for status in [ConditionStatus::True, ConditionStatus::False, ConditionStatus::Unknown] {
            assert_eq!(status.to_string(), wire(&status));
        }
        for kind in [ConditionType::Available, ConditionType::Healthy] {
            assert_eq!(kind.to_string(), wire(&kind));
        }
    }

    mod erased {
        pub(super) trait Wire {
            fn wire(&self) -> String;
        }
        impl<T: serde::Serialize> Wire for T {
            fn wire(&self) -> String {
                serde_json::to_value(self).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
            }
        }
    }
}
