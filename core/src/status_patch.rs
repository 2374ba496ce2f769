//! Status is persisted as a JSON merge patch (RFC 7386) of the top-level
//! fields that changed, so fields this operator does not model (volumes,
//! ...) survive every write.

use std::fmt;
use std::ops::Deref;
use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::model::ServerStatus;

/// The status fields this operator writes, once: the key in the document,
/// when the field is absent from it, and how a change of it is found,
/// copied, encoded and decoded. `absent` mirrors the field's
/// `skip_serializing_if`: an absent value is not in the document, so
/// removing one is a `null`.
struct Field {
    key: &'static str,
    absent: fn(&ServerStatus) -> bool,
    changed: fn(&ServerStatus, &ServerStatus) -> bool,
    /// Copies the field from the second status into the first.
    copy: fn(&mut ServerStatus, &ServerStatus),
    /// The field's value in the document (only asked of a present one).
    encode: fn(&ServerStatus) -> Value,
    /// Sets the field from a patch's value: `null` resets it to absent.
    decode: fn(&mut ServerStatus, &Value) -> Result<(), serde_json::Error>,
}

macro_rules! fields {
    ($($key:literal => $field:ident, absent $absent:expr;)*) => {
        const FIELDS: &[Field] = &[$(Field {
            key: $key,
            absent: |status| ($absent)(&status.$field),
            changed: |before, after| before.$field != after.$field,
            copy: |to, from| to.$field.clone_from(&from.$field),
            // Plain data always serializes; `Null` would only drop the field.
            encode: |status| serde_json::to_value(&status.$field).unwrap_or(Value::Null),
            decode: |status, value| set(&mut status.$field, value),
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
    "rebuild" => rebuild, absent Option::is_none;
}

/// One bit per entry of [`FIELDS`].
const _: () = assert!(FIELDS.len() <= u16::BITS as usize);

/// A status merge patch (RFC 7386) of the fields this operator writes, kept
/// typed: which fields it names and their new values. Executors that hold
/// the typed status apply it as it is ([`StatusPatch::apply`]); its wire
/// form, the JSON document, is built once, the first time it is asked for
/// ([`StatusPatch::json`], or through `Deref`, which makes a patch usable
/// wherever a JSON merge patch is).
#[derive(Clone)]
pub struct StatusPatch {
    /// Bit `n` set: `FIELDS[n]` is named by the patch.
    named: u16,
    /// The new values of the named fields; the others stay at their default.
    values: ServerStatus,
    json: OnceLock<Value>,
}

impl StatusPatch {
    /// The patch taking `before` to `after`, or `None` when nothing changed
    /// (no write at all). Removed fields become `null`, which deletes them.
    ///
    /// Field by field on the typed status: the same patch as diffing the two
    /// JSON documents (typed equality and JSON equality coincide for these
    /// fields, and absence follows the `skip_serializing_if` of each), at a
    /// fraction of the cost on the hottest path of every pass.
    /// `tests/status_patch_equivalence.rs` holds it to the JSON diff, and the
    /// unit tests below to the field list.
    pub fn between(before: &ServerStatus, after: &ServerStatus) -> Option<StatusPatch> {
        if before == after {
            return None;
        }
        let mut patch = StatusPatch { named: 0, values: ServerStatus::default(), json: OnceLock::new() };
        for (bit, field) in FIELDS.iter().enumerate() {
            // A field absent on both sides is not in either document.
            if (field.changed)(before, after) && !((field.absent)(before) && (field.absent)(after)) {
                patch.named |= 1 << bit;
                (field.copy)(&mut patch.values, after);
            }
        }
        (patch.named != 0).then_some(patch)
    }

    /// Reads a JSON merge patch of these fields. A key outside the field
    /// table is an error, not ignored: the typed status could not hold it.
    pub fn from_json(patch: &Value) -> Result<StatusPatch, StatusPatchError> {
        let Value::Object(entries) = patch else {
            return Err(StatusPatchError::NotAnObject { kind: json_kind(patch) });
        };
        let mut typed = StatusPatch { named: 0, values: ServerStatus::default(), json: OnceLock::new() };
        for (key, value) in entries {
            let Some(bit) = FIELDS.iter().position(|field| field.key == key) else {
                return Err(StatusPatchError::UnknownField { key: key.clone() });
            };
            let field = &FIELDS[bit];
            (field.decode)(&mut typed.values, value)
                .map_err(|source| StatusPatchError::InvalidValue { key: field.key, source })?;
            typed.named |= 1 << bit;
        }
        Ok(typed)
    }

    /// Applies the patch to the typed status, as the API server applies it
    /// to the document: each field named is replaced, a `null` clears it.
    pub fn apply(&self, status: &mut ServerStatus) {
        for field in self.fields() {
            (field.copy)(status, &self.values);
        }
    }

    /// The keys of the document the patch names, in the field table's order.
    pub fn keys(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.fields().map(|field| field.key)
    }

    /// The patch as its JSON document, built on first use.
    pub fn json(&self) -> &Value {
        self.json.get_or_init(|| self.encode())
    }

    /// The patch as its JSON document, owned.
    pub fn into_json(mut self) -> Value {
        self.json.take().unwrap_or_else(|| self.encode())
    }

    fn fields(&self) -> impl Iterator<Item = &'static Field> + '_ {
        FIELDS.iter().enumerate().filter(|(bit, _)| self.named & (1 << bit) != 0).map(|(_, field)| field)
    }

    fn encode(&self) -> Value {
        let document = self.fields().map(|field| {
            let value = if (field.absent)(&self.values) { Value::Null } else { (field.encode)(&self.values) };
            (field.key.to_owned(), value)
        });
        Value::Object(document.collect())
    }
}

impl PartialEq for StatusPatch {
    fn eq(&self, other: &Self) -> bool {
        self.named == other.named && self.values == other.values
    }
}

impl fmt::Debug for StatusPatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StatusPatch").field(self.json()).finish()
    }
}

impl fmt::Display for StatusPatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.json().fmt(f)
    }
}

impl Deref for StatusPatch {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.json()
    }
}

/// The merge patch taking `before` to `after` as its JSON document, or
/// `None` when nothing changed; see [`StatusPatch::between`].
pub fn status_merge_patch(before: &ServerStatus, after: &ServerStatus) -> Option<Value> {
    StatusPatch::between(before, after).map(StatusPatch::into_json)
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

/// Applies a JSON merge patch (RFC 7386) of [`status_merge_patch`]'s fields
/// to the typed status, as the API server applies it to the document: each
/// field named is replaced, `null` clears it. A key outside the field table
/// is an error, not ignored: the typed status could not hold it. Nothing is
/// applied unless the whole patch is valid.
pub fn apply_status_patch(status: &mut ServerStatus, patch: &Value) -> Result<(), StatusPatchError> {
    StatusPatch::from_json(patch)?.apply(status);
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
        // `rebuild` is modelled; `volumes` is not and is kept by leaving it out.
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
        let rebuild = apply_status_patch(&mut status, &json!({"rebuild": {"targetImageID": "i", "state": "Halfway"}}));
        assert!(matches!(rebuild, Err(StatusPatchError::InvalidValue { key: "rebuild", .. })), "{rebuild:?}");
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
            rebuild: Some(crate::model::Rebuild::initiated("img-2")),
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
