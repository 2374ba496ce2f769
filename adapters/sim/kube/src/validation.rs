//! Value validation of a custom resource against its structural schema, as a
//! real API server does after pruning: types, `required`, `enum`, `format`,
//! `pattern`, `maxLength`, numeric bounds and `x-kubernetes-list-type: map`
//! keys. A write with any violation is refused with 422 `Invalid`, every
//! cause listed (field path, reason, message) in the shape kubectl prints.
//!
//! Upstream: `apiextensions-apiserver/pkg/apiserver/validation` over
//! `k8s.io/kube-openapi/pkg/validation/validate` (messages such as
//! `spec.flavorID in body must be of type uuid: "f"`), and validation
//! ratcheting (`CRDValidationRatcheting`, on by default since 1.30): a value
//! an update leaves unchanged is not validated again, so an object stored
//! before a schema tightened can still have its status written.
//!
//! Not evaluated: `x-kubernetes-validations` (CEL). SimKube has no CEL
//! engine; the one rule in the Server CRD (infrastructureRef immutable)
//! guards a field this operator never writes.

use serde_json::Value;

/// One violation: `details.causes[]` of the `Status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueNotSupported`, ...
    pub(crate) reason: &'static str,
    /// The path, e.g. `spec.networks[0].id`.
    pub(crate) field: String,
    /// What is wrong, without the path.
    pub(crate) message: String,
}

impl Cause {
    /// `field: message`, as the API server joins them in `Status.message`.
    pub(crate) fn describe(&self) -> String {
        format!("{}: {}", self.field, self.message)
    }
}

/// Whether the schema carries CEL rules (`x-kubernetes-validations`) anywhere.
pub(crate) fn has_rules(schema: &Value) -> bool {
    match schema {
        Value::Object(fields) => fields.contains_key("x-kubernetes-validations") || fields.values().any(has_rules),
        Value::Array(items) => items.iter().any(has_rules),
        _ => false,
    }
}

/// The cause kube-apiserver appends when schema errors kept it from running
/// the CEL rules (apiextensions-apiserver `customresource_handler`: "some
/// validation rules were not checked"). SimKube never runs them: see
/// [`crate`]'s known leniencies.
pub(crate) fn rules_not_checked() -> Cause {
    Cause {
        reason: "FieldValueInvalid",
        field: "<nil>".into(),
        message: "Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation".into(),
    }
}

/// The violations of `object` against `schema`; `old` is the stored object
/// an update replaces (unchanged values are not validated again).
pub(crate) fn validate(schema: &Value, object: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let (Some(fields), Some(properties)) = (object.as_object(), schema.get("properties").and_then(Value::as_object))
    {
        // apiVersion, kind and metadata are the API server's to check.
        for (key, value) in fields {
            if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            if let Some(property) = properties.get(key) {
                let old = old.and_then(|o| o.get(key));
                check(property, value, old, key, &mut causes);
            }
        }
        required(schema, fields, "", &mut causes);
    }
    causes
}

fn check(schema: &Value, value: &Value, old: Option<&Value>, path: &str, causes: &mut Vec<Cause>) {
    if old == Some(value) {
        return;
    }
    // A null in a field that is not nullable is pruned before validation.
    if value.is_null() {
        return;
    }
    if let Some(expected) = schema.get("type").and_then(Value::as_str)
        && !is_of_type(value, expected)
    {
        // The API server shows the offending type, not the value, here.
        let found = quoted_type(value);
        causes.push(Cause {
            reason: "FieldValueTypeInvalid",
            field: path.to_string(),
            message: format!("Invalid value: {found}: {path} in body must be of type {expected}: {found}"),
        });
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let supported: Vec<String> = allowed.iter().map(Value::to_string).collect();
        causes.push(Cause {
            reason: "FieldValueNotSupported",
            field: path.to_string(),
            message: format!("Unsupported value: {value}: supported values: {}", supported.join(", ")),
        });
    }
    match value {
        Value::String(text) => check_string(schema, text, value, path, causes),
        Value::Number(number) => check_number(schema, number, value, path, causes),
        Value::Object(fields) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (key, item) in fields {
                if let Some(property) = properties.and_then(|p| p.get(key)).or(additional) {
                    check(property, item, old.and_then(|o| o.get(key)), &format!("{path}.{key}"), causes);
                }
            }
            required(schema, fields, path, causes);
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                let old_items = old.and_then(Value::as_array);
                for (index, item) in items.iter().enumerate() {
                    // Ratcheting matches list items by position, as upstream does
                    // for atomic lists; an item moved is validated again.
                    let old_item = old_items.and_then(|o| o.get(index));
                    check(item_schema, item, old_item, &format!("{path}[{index}]"), causes);
                }
            }
            unique_map_keys(schema, items, path, causes);
        }
        Value::Bool(_) | Value::Null => {}
    }
}

fn required(schema: &Value, fields: &serde_json::Map<String, Value>, path: &str, causes: &mut Vec<Cause>) {
    for name in schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        if fields.get(name).is_none_or(Value::is_null) {
            let field = if path.is_empty() { name.to_string() } else { format!("{path}.{name}") };
            causes.push(Cause { reason: "FieldValueRequired", field, message: "Required value".into() });
        }
    }
}

fn check_string(schema: &Value, text: &str, value: &Value, path: &str, causes: &mut Vec<Cause>) {
    if let Some(format) = schema.get("format").and_then(Value::as_str)
        && !has_format(text, format)
    {
        // kube-openapi reports a format miss as a type error (`errors.InvalidType`).
        let mut cause = invalid(path, value, format!("{path} in body must be of type {format}: {value}"));
        cause.reason = "FieldValueTypeInvalid";
        causes.push(cause);
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        // A pattern the regex engine cannot compile is the CRD's fault; the
        // real API server refuses such a CRD, so there is nothing to check.
        if let Ok(regex) = regex::Regex::new(pattern)
            && !regex.is_match(text)
        {
            causes.push(invalid(path, value, format!("{path} in body should match '{pattern}'")));
        }
    }
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && text.chars().count() as u64 > max
    {
        causes.push(Cause {
            reason: "FieldValueTooLong",
            field: path.to_string(),
            message: format!("Too long: may not be more than {max} bytes"),
        });
    }
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && (text.chars().count() as u64) < min
    {
        causes.push(invalid(path, value, format!("{path} in body should be at least {min} chars long")));
    }
}

fn check_number(schema: &Value, number: &serde_json::Number, value: &Value, path: &str, causes: &mut Vec<Cause>) {
    let Some(number) = number.as_f64() else { return };
    if let Some(minimum) = schema.get("minimum").and_then(Value::as_f64)
        && number < minimum
    {
        causes.push(invalid(path, value, format!("{path} in body should be greater than or equal to {minimum}")));
    }
    if let Some(maximum) = schema.get("maximum").and_then(Value::as_f64)
        && number > maximum
    {
        causes.push(invalid(path, value, format!("{path} in body should be less than or equal to {maximum}")));
    }
}

/// `x-kubernetes-list-type: map`: no two items share their key fields.
fn unique_map_keys(schema: &Value, items: &[Value], path: &str, causes: &mut Vec<Cause>) {
    if schema.get("x-kubernetes-list-type").and_then(Value::as_str) != Some("map") {
        return;
    }
    let keys: Vec<&str> = schema
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|keys| keys.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut seen = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let key: Vec<&Value> = keys.iter().map(|k| item.get(*k).unwrap_or(&Value::Null)).collect();
        if seen.contains(&key) {
            let shown: serde_json::Map<String, Value> =
                keys.iter().zip(&key).map(|(k, v)| ((*k).to_string(), (*v).clone())).collect();
            causes.push(Cause {
                reason: "FieldValueDuplicate",
                field: format!("{path}[{index}]"),
                message: format!("Duplicate value: {}", Value::Object(shown)),
            });
        } else {
            seen.push(key);
        }
    }
}

fn invalid(path: &str, value: &Value, detail: String) -> Cause {
    let shown = match value {
        Value::String(_) | Value::Number(_) | Value::Bool(_) => value.to_string(),
        _ => quoted_type(value),
    };
    Cause { reason: "FieldValueInvalid", field: path.to_string(), message: format!("Invalid value: {shown}: {detail}") }
}

/// The JSON type of a value, quoted as kube-openapi names it.
fn quoted_type(value: &Value) -> String {
    let name = match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    format!("\"{name}\"")
}

fn is_of_type(value: &Value, expected: &str) -> bool {
    match expected {
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        _ => true,
    }
}

/// The formats kube-openapi's default registry checks; any other passes
/// (upstream validates only the formats it knows).
fn has_format(text: &str, format: &str) -> bool {
    match format {
        "uuid" => is_uuid(text),
        "date-time" => text.parse::<jiff::Timestamp>().is_ok(),
        "byte" => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.decode(text).is_ok()
        }
        _ => true,
    }
}

/// strfmt's UUID: 8-4-4-4-12 hex digits (any case), or 32 without dashes.
fn is_uuid(text: &str) -> bool {
    let bytes = text.as_bytes();
    match bytes.len() {
        32 => bytes.iter().all(u8::is_ascii_hexdigit),
        36 => bytes.iter().enumerate().all(|(index, byte)| match index {
            8 | 13 | 18 | 23 => *byte == b'-',
            _ => byte.is_ascii_hexdigit(),
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "required": ["spec"],
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["flavorID", "image"],
                    "properties": {
                        "flavorID": {"type": "string", "format": "uuid"},
                        "image": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}},
                        "provider": {"type": "string", "enum": ["openstack", "simulated"], "maxLength": 10},
                        "cidr": {"type": "string", "pattern": "^[0-9.]+/[0-9]+$"},
                        "count": {"type": "integer", "minimum": 0},
                        "volumes": {
                            "type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["id"],
                            "items": {"type": "object", "properties": {"id": {"type": "string"}}},
                        },
                    },
                },
                "status": {"type": "object", "properties": {"at": {"type": "string", "format": "date-time"}}},
            },
        })
    }

    fn fields(causes: &[Cause]) -> Vec<String> {
        causes.iter().map(Cause::describe).collect()
    }

    #[test]
    fn a_valid_object_passes() {
        let object = json!({
            "apiVersion": "g/v1", "kind": "Server", "metadata": {"name": "a"},
            "spec": {"flavorID": "8C2B1D54-2a56-4bb3-9b0c-1d2f6e1f4a01", "image": {"id": "i"}, "provider": "openstack",
                     "cidr": "10.0.0.0/8", "count": 3, "volumes": [{"id": "a"}, {"id": "b"}]},
            "status": {"at": "2026-11-30T17:00:00Z"},
        });
        assert_eq!(fields(&validate(&schema(), &object, None)), Vec::<String>::new());
    }

    #[test]
    fn every_violation_is_named_with_its_path_as_the_api_server_does() {
        let object = json!({
            "spec": {"flavorID": "f", "image": {}, "provider": "aws-but-very-long", "cidr": "x",
                     "count": -1, "volumes": [{"id": "a"}, {"id": "a"}]},
            "status": {"at": "yesterday"},
        });
        assert_eq!(
            fields(&validate(&schema(), &object, None)),
            vec![
                "spec.cidr: Invalid value: \"x\": spec.cidr in body should match '^[0-9.]+/[0-9]+$'",
                "spec.count: Invalid value: -1: spec.count in body should be greater than or equal to 0",
                "spec.flavorID: Invalid value: \"f\": spec.flavorID in body must be of type uuid: \"f\"",
                "spec.image.id: Required value",
                "spec.provider: Unsupported value: \"aws-but-very-long\": supported values: \"openstack\", \"simulated\"",
                "spec.provider: Too long: may not be more than 10 bytes",
                "spec.volumes[1]: Duplicate value: {\"id\":\"a\"}",
                "status.at: Invalid value: \"yesterday\": status.at in body must be of type date-time: \"yesterday\"",
            ]
        );
    }

    #[test]
    fn wrong_types_and_missing_required_fields_are_refused() {
        let object = json!({"spec": {"flavorID": 7, "image": "i"}});
        assert_eq!(
            fields(&validate(&schema(), &object, None)),
            vec![
                "spec.flavorID: Invalid value: \"integer\": spec.flavorID in body must be of type string: \"integer\"",
                "spec.image: Invalid value: \"string\": spec.image in body must be of type object: \"string\"",
            ]
        );
        assert_eq!(fields(&validate(&schema(), &json!({}), None)), vec!["spec: Required value"]);
    }

    /// Validation ratcheting: a value an update leaves as it was stays
    /// admitted; a changed one is checked.
    #[test]
    fn an_update_is_checked_only_where_it_changes_the_object() {
        let stored = json!({"spec": {"flavorID": "f", "image": {"id": "i"}}});
        let status_written =
            json!({"spec": {"flavorID": "f", "image": {"id": "i"}}, "status": {"at": "2026-11-30T17:00:00Z"}});
        assert!(validate(&schema(), &status_written, Some(&stored)).is_empty());
        let flavor_changed = json!({"spec": {"flavorID": "g", "image": {"id": "i"}}});
        assert_eq!(validate(&schema(), &flavor_changed, Some(&stored)).len(), 1);
    }
}
