//! Pruning and field validation against a CRD's structural schema.
//!
//! A real API server drops every field of a custom resource that its
//! `openAPIV3Schema` does not declare (unless `x-kubernetes-preserve-unknown-fields`
//! keeps it), and the `fieldValidation` query parameter says what else to do
//! about them: `Strict` refuses the write (400, "strict decoding error:
//! unknown field ..."), `Warn` (the default) answers with a `Warning` header
//! per field, `Ignore` drops them silently. Upstream:
//! `apiextensions-apiserver/pkg/apiserver/schema/pruning/algorithm.go` and the
//! CRD handler's `unstructuredDecoder` in `customresource_handler.go`.

use serde_json::Value;

use super::status::ApiError;

/// The `fieldValidation` query parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

impl FieldValidation {
    /// Parses the query parameter; absent means Warn, as on a real server.
    pub(crate) fn parse(value: Option<&str>) -> Result<Self, ApiError> {
        match value.unwrap_or_default() {
            "" | "Warn" => Ok(Self::Warn),
            "Ignore" => Ok(Self::Ignore),
            "Strict" => Ok(Self::Strict),
            other => Err(ApiError::bad_request(format!(
                "fieldValidation: Unsupported value: {other:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
            ))),
        }
    }
}

/// ObjectMeta's fields: everything else under `metadata` is unknown.
const OBJECT_META_FIELDS: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// The `openAPIV3Schema` of `version` in a CRD object.
pub(crate) fn crd_schema<'a>(crd: &'a Value, version: &str) -> Option<&'a Value> {
    crd.pointer("/spec/versions")?
        .as_array()?
        .iter()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(version))?
        .pointer("/schema/openAPIV3Schema")
}

/// Removes from `object` every field `schema` does not declare, returning
/// their paths (`spec.foo`, `spec.items[0].bar`), metadata first, then by key.
pub(crate) fn prune(schema: &Value, object: &mut Value) -> Vec<String> {
    let mut unknown = Vec::new();
    if let Some(fields) = object.as_object_mut() {
        if let Some(Value::Object(metadata)) = fields.get_mut("metadata") {
            metadata.retain(|key, _| {
                let known = OBJECT_META_FIELDS.contains(&key.as_str());
                if !known {
                    unknown.push(format!("metadata.{key}"));
                }
                known
            });
        }
        prune_object(schema, fields, "", &mut unknown, true);
    }
    unknown
}

fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool) == Some(true)
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

fn prune_object(
    schema: &Value,
    fields: &mut serde_json::Map<String, Value>,
    path: &str,
    unknown: &mut Vec<String>,
    root: bool,
) {
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
    // The root and embedded resources always carry their type and metadata.
    let typed = root || flag(schema, "x-kubernetes-embedded-resource");
    let mut dropped = Vec::new();
    for (key, value) in fields.iter_mut() {
        if typed && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            if let Some(declared) = properties.and_then(|p| p.get(key)).filter(|_| key != "metadata") {
                prune_value(declared, value, &join(path, key), unknown);
            }
            continue;
        }
        match properties.and_then(|p| p.get(key)).or(additional) {
            Some(declared) => prune_value(declared, value, &join(path, key), unknown),
            None if preserve || schema.get("additionalProperties").and_then(Value::as_bool) == Some(true) => {}
            None => {
                unknown.push(join(path, key));
                dropped.push(key.clone());
            }
        }
    }
    for key in dropped {
        fields.remove(&key);
    }
}

fn prune_value(schema: &Value, value: &mut Value, path: &str, unknown: &mut Vec<String>) {
    match value {
        Value::Object(fields) => prune_object(schema, fields, path, unknown, false),
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter_mut().enumerate() {
                    prune_value(item_schema, item, &format!("{path}[{index}]"), unknown);
                }
            }
        }
        _ => {}
    }
}

/// What the write does with the unknown fields `prune` found: the error a
/// `Strict` write gets, or the warnings of a `Warn` one.
pub(crate) fn verdict(
    validation: FieldValidation,
    kind: &str,
    version: &str,
    unknown: &[String],
) -> Result<Vec<String>, ApiError> {
    if unknown.is_empty() {
        return Ok(Vec::new());
    }
    let described: Vec<String> = unknown.iter().map(|path| format!("unknown field \"{path}\"")).collect();
    match validation {
        FieldValidation::Ignore => Ok(Vec::new()),
        FieldValidation::Warn => Ok(described),
        FieldValidation::Strict => Err(ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
            described.join(", ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": {
                    "type": "object",
                    "properties": {
                        "flavorID": {"type": "string"},
                        "networks": {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "string"}}}},
                        "tags": {"type": "object", "additionalProperties": {"type": "string"}},
                    },
                },
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            },
        })
    }

    #[test]
    fn prunes_undeclared_fields_and_names_them() {
        let mut object = json!({
            "apiVersion": "g/v1", "kind": "Server",
            "metadata": {"name": "a", "labelz": {}},
            "spec": {"flavorID": "f", "flavorId": "typo", "networks": [{"id": "n", "uid": "x"}], "tags": {"a": "b"}},
            "status": {"anything": 1},
            "extra": true,
        });
        let unknown = prune(&schema(), &mut object);
        assert_eq!(unknown, ["metadata.labelz", "extra", "spec.flavorId", "spec.networks[0].uid"]);
        assert_eq!(
            object,
            json!({
                "apiVersion": "g/v1", "kind": "Server", "metadata": {"name": "a"},
                "spec": {"flavorID": "f", "networks": [{"id": "n"}], "tags": {"a": "b"}},
                "status": {"anything": 1},
            })
        );
    }

    #[test]
    fn strict_refuses_warn_warns_ignore_is_silent() {
        let unknown = vec!["spec.flavorId".to_string()];
        let error = verdict(FieldValidation::Strict, "Server", "v1alpha1", &unknown).expect_err("strict refuses");
        assert_eq!(error.code, 400);
        assert!(error.message.ends_with("strict decoding error: unknown field \"spec.flavorId\""), "{}", error.message);
        assert_eq!(
            verdict(FieldValidation::Warn, "Server", "v1", &unknown).ok(),
            Some(vec!["unknown field \"spec.flavorId\"".to_string()])
        );
        assert_eq!(verdict(FieldValidation::Ignore, "Server", "v1", &unknown).ok(), Some(Vec::new()));
        assert!(FieldValidation::parse(Some("Loose")).is_err());
        assert_eq!(FieldValidation::parse(None).ok(), Some(FieldValidation::Warn));
    }
}
