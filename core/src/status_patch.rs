//! Status is persisted as a JSON merge patch (RFC 7386) of the top-level
//! fields that changed, so fields this operator does not model (volumes,
//! rebuild, ...) survive every write.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::model::ServerStatus;

/// The status fields this operator writes, once: the key in the document,
/// how the typed diff names a change of it, and how a patch of it applies.
/// `absent` mirrors the field's `skip_serializing_if`: an absent value is not
/// in the document, so removing one is a `null`.
struct Field {
    key: &'static str,
    diff: fn(&mut Map<String, Value>, &ServerStatus, &ServerStatus),
    apply: fn(&mut ServerStatus, &Value) -> Result<(), serde_json::Error>,
}

macro_rules! fields {
    ($($key:literal => $field:ident, absent $absent:expr;)*) => {
        const FIELDS: &[Field] = &[$(Field {
            key: $key,
            diff: |patch, before, after| diff(patch, $key, &before.$field, &after.$field, $absent),
            apply: |status, value| set(&mut status.$field, value),
        }),*];
    };
}

fields! {
    "conditions" => conditions, absent Vec::is_empty;
    "phase" => phase, absent Option::is_none;
    "privateIP" => private_ip, absent Option::is_none;
    "publicIP" => public_ip, absent Option::is_none;
    "macAddress" => mac_address, absent Option::is_none;
    "launchedAt" => launched_at, absent Option::is_none;
    "scheduledAt" => scheduled_at, absent Option::is_none;
    "provisionedAt" => provisioned_at, absent Option::is_none;
    "providerCreateFailures" => provider_create_failures, absent |n: &i32| *n == 0;
    "providerCreateRetrying" => provider_create_retrying, absent |r: &bool| !r;
}

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
    for field in FIELDS {
        (field.diff)(&mut patch, before, after);
    }
    (!patch.is_empty()).then_some(Value::Object(patch))
}

/// One field of the patch.
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

/// Why a status merge patch cannot be applied to the typed status.
#[derive(Debug, thiserror::Error)]
pub enum StatusPatchError {
    #[error("a status merge patch must be a JSON object, not {kind}")]
    NotAnObject { kind: &'static str },
    /// A key [`status_merge_patch`] never writes: a patch from elsewhere, or
    /// a field added to the status but not to the field table.
    #[error("the status merge patch names {key}, which is not a status field this operator writes")]
    UnknownField { key: String },
    #[error("the status merge patch has an invalid {key}: {source}")]
    InvalidValue {
        key: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

/// Applies a merge patch (RFC 7386) of [`status_merge_patch`]'s fields to
/// the typed status, as the API server applies it to the document: each
/// field named is replaced, `null` clears it. A key outside the field table
/// is an error, not ignored: the typed status could not hold it.
pub fn apply_status_patch(status: &mut ServerStatus, patch: &Value) -> Result<(), StatusPatchError> {
    let Value::Object(entries) = patch else {
        return Err(StatusPatchError::NotAnObject { kind: json_kind(patch) });
    };
    for (key, value) in entries {
        let Some(field) = FIELDS.iter().find(|field| field.key == key) else {
            return Err(StatusPatchError::UnknownField { key: key.clone() });
        };
        (field.apply)(status, value).map_err(|source| StatusPatchError::InvalidValue { key: field.key, source })?;
    }
    Ok(())
}

/// One field of a merge patch: `null` resets it to its default (absent).
fn set<'a, T: Default + Deserialize<'a>>(field: &mut T, value: &'a Value) -> Result<(), serde_json::Error> {
    *field = if value.is_null() { T::default() } else { T::deserialize(value)? };
    Ok(())
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
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

    #[test]
    fn applying_a_patch_gives_the_status_it_was_made_for() {
        let t = Timestamp::from_second(1_700_000_000).unwrap_or_default();
        let before = ServerStatus {
            phase: Some(Phase::Running),
            private_ip: Some("10.0.0.1".into()),
            launched_at: Some(t),
            provisioned_at: Some(t),
            provider_create_failures: 2,
            ..Default::default()
        };
        let after = ServerStatus {
            phase: Some(Phase::Pending),
            private_ip: None,
            launched_at: None,
            provider_create_failures: 0,
            provider_create_retrying: true,
            mac_address: Some("fa:16:3e:00:00:01".into()),
            ..before.clone()
        };
        let patch = status_merge_patch(&before, &after).unwrap_or_default();
        let mut applied = before.clone();
        assert!(apply_status_patch(&mut applied, &patch).is_ok());
        assert_eq!(applied, after);
    }

    #[test]
    fn a_patch_the_table_cannot_hold_is_an_error_naming_what_is_wrong() {
        let mut status = ServerStatus::default();
        let unknown = apply_status_patch(&mut status, &json!({"phase": "Running", "volumes": []}));
        assert!(matches!(&unknown, Err(StatusPatchError::UnknownField { key }) if key == "volumes"), "{unknown:?}");
        let invalid = apply_status_patch(&mut status, &json!({"phase": 7}));
        assert!(matches!(invalid, Err(StatusPatchError::InvalidValue { key: "phase", .. })), "{invalid:?}");
        let not_object = apply_status_patch(&mut status, &json!([1]));
        assert_eq!(
            not_object.map_err(|e| e.to_string()),
            Err("a status merge patch must be a JSON object, not an array".into())
        );
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
