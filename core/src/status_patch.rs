//! Status is persisted as a JSON merge patch (RFC 7386) of the top-level
//! fields that changed, so fields this operator does not model (volumes,
//! rebuild, ...) survive every write.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::model::ServerStatus;

/// The merge patch taking `before` to `after`, or `None` when nothing changed
/// (no write at all). Removed fields become `null`, which deletes them.
///
/// Field by field on the typed status, serializing only what changed: the
/// same patch as diffing the two JSON documents (typed equality and JSON
/// equality coincide for these fields, and absence follows the
/// `skip_serializing_if` of each), at a fraction of the cost on the hottest
/// path of every pass. `tests/status_patch_equivalence.rs` holds it to the
/// JSON diff, and the unit tests below to the field list.
pub fn status_merge_patch(before: &ServerStatus, after: &ServerStatus) -> Option<Value> {
    if before == after {
        return None;
    }
    let mut patch = Map::new();
    let (b, a) = (before, after);
    diff(&mut patch, "conditions", &b.conditions, &a.conditions, Vec::is_empty);
    diff(&mut patch, "phase", &b.phase, &a.phase, Option::is_none);
    diff(&mut patch, "privateIP", &b.private_ip, &a.private_ip, Option::is_none);
    diff(&mut patch, "publicIP", &b.public_ip, &a.public_ip, Option::is_none);
    diff(&mut patch, "macAddress", &b.mac_address, &a.mac_address, Option::is_none);
    diff(&mut patch, "launchedAt", &b.launched_at, &a.launched_at, Option::is_none);
    diff(&mut patch, "scheduledAt", &b.scheduled_at, &a.scheduled_at, Option::is_none);
    diff(&mut patch, "provisionedAt", &b.provisioned_at, &a.provisioned_at, Option::is_none);
    diff(&mut patch, "providerCreateFailures", &b.provider_create_failures, &a.provider_create_failures, |n| *n == 0);
    diff(&mut patch, "providerCreateRetrying", &b.provider_create_retrying, &a.provider_create_retrying, |r| !r);
    (!patch.is_empty()).then_some(Value::Object(patch))
}

/// One field of the patch. `absent` mirrors the field's `skip_serializing_if`:
/// an absent value is not in the document, so removing one is a `null`.
fn diff<T: PartialEq + Serialize>(
    patch: &mut Map<String, Value>,
    key: &str,
    before: &T,
    after: &T,
    absent: fn(&T) -> bool,
) {
    if before == after {
        return;
    }
    if !absent(after) {
        // Plain data always serializes; `Null` would only drop the field.
        patch.insert(key.to_owned(), serde_json::to_value(after).unwrap_or(Value::Null));
    } else if !absent(before) {
        patch.insert(key.to_owned(), Value::Null);
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

    /// Every key a fully populated status serializes to is one the typed diff
    /// knows: a new status field must be added there too.
    #[test]
    fn the_typed_diff_covers_every_status_field() {
        let t = Timestamp::from_second(1_700_000_000).unwrap_or_default();
        let mut full = ServerStatus {
            phase: Some(Phase::Running),
            private_ip: Some("10.0.0.1".into()),
            public_ip: Some("192.0.2.1".into()),
            mac_address: Some("fa:16:3e:00:00:01".into()),
            launched_at: Some(t),
            scheduled_at: Some(t),
            provisioned_at: Some(t),
            provider_create_failures: 1,
            provider_create_retrying: true,
            ..Default::default()
        };
        crate::model::set_condition(
            &mut full.conditions,
            crate::model::ConditionType::Healthy,
            crate::model::ConditionStatus::True,
            crate::model::ConditionReason::Healthy,
            "ok",
            t,
        );
        let Value::Object(fields) = serde_json::to_value(&full).unwrap_or_default() else {
            panic!("a status serializes to an object");
        };
        let Some(Value::Object(patch)) = status_merge_patch(&ServerStatus::default(), &full) else {
            panic!("a full status differs from an empty one");
        };
        let (mut serialized, mut diffed): (Vec<_>, Vec<_>) = (fields.keys().collect(), patch.keys().collect());
        serialized.sort();
        diffed.sort();
        assert_eq!(serialized, diffed);
        let Some(Value::Object(cleared)) = status_merge_patch(&full, &ServerStatus::default()) else {
            panic!("an empty status differs from a full one");
        };
        assert!(cleared.values().all(Value::is_null) && cleared.len() == fields.len());
    }
}
