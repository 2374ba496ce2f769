//! Status is persisted as a JSON merge patch (RFC 7386) of the top-level
//! fields that changed, so fields this operator does not model (volumes,
//! rebuild, ...) survive every write.

use serde_json::{Map, Value};

use crate::model::ServerStatus;

/// The merge patch taking `before` to `after`, or `None` when nothing changed
/// (no write at all). Removed fields become `null`, which deletes them.
pub fn status_merge_patch(before: &ServerStatus, after: &ServerStatus) -> Option<Value> {
    let (before, after) = (to_object(before), to_object(after));
    let mut patch = Map::new();
    for (key, value) in &after {
        if before.get(key) != Some(value) {
            patch.insert(key.clone(), value.clone());
        }
    }
    for key in before.keys() {
        if !after.contains_key(key) {
            patch.insert(key.clone(), Value::Null);
        }
    }
    (!patch.is_empty()).then_some(Value::Object(patch))
}

fn to_object(status: &ServerStatus) -> Map<String, Value> {
    match serde_json::to_value(status) {
        Ok(Value::Object(map)) => map,
        // A derived Serialize of a struct always yields an object.
        _ => Map::new(),
    }
}

/// Applies a merge patch to a JSON document (RFC 7386), as the API server does.
pub fn apply_merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(target) = target {
        for (key, value) in patch {
            if value.is_null() {
                target.remove(key);
            } else {
                apply_merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use serde_json::json;

    use super::*;
    use crate::model::Phase;

    #[test]
    fn unchanged_status_writes_nothing() {
        let status = ServerStatus { phase: Some(Phase::Running), ..Default::default() };
        assert_eq!(status_merge_patch(&status, &status.clone()), None);
    }

    #[test]
    fn only_changed_fields_are_named_and_cleared_fields_are_nulled() {
        let before = ServerStatus {
            phase: Some(Phase::Running),
            private_ip: Some("10.0.0.1".into()),
            launched_at: Some(Timestamp::UNIX_EPOCH),
            ..Default::default()
        };
        let after =
            ServerStatus { phase: Some(Phase::Pending), private_ip: Some("10.0.0.1".into()), ..Default::default() };
        assert_eq!(status_merge_patch(&before, &after), Some(json!({"phase": "Pending", "launchedAt": null})));
    }

    #[test]
    fn unmodelled_fields_survive_a_round_trip_through_the_patch() {
        let mut stored = json!({
            "phase": "Building",
            "volumes": [{"id": "v1", "message": "ok", "provisioningStatus": "Provisioned"}],
            "rebuild": {"state": "Initiated", "targetImageID": "i"},
        });
        let before: ServerStatus = serde_json::from_value(stored.clone()).unwrap_or_default();
        let after = ServerStatus { phase: Some(Phase::Running), provider_create_failures: 2, ..before.clone() };
        let patch = status_merge_patch(&before, &after).unwrap_or_default();
        apply_merge_patch(&mut stored, &patch);
        assert_eq!(stored["phase"], "Running");
        assert_eq!(stored["providerCreateFailures"], 2);
        assert_eq!(stored["volumes"][0]["id"], "v1");
        assert_eq!(stored["rebuild"]["state"], "Initiated");
    }
}
