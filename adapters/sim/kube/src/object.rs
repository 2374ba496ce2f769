//! Accessors for object metadata on untyped JSON.

use serde_json::{Map, Value};

use super::status::ApiError;

/// etcd's default `--max-request-bytes` (1.5 MiB): a write of a larger
/// object is refused by etcd, whatever the API server thinks of it.
pub(crate) const ETCD_MAX_REQUEST_BYTES: usize = 1536 * 1024;

/// Refuses an object etcd would refuse to store: its JSON (custom resources
/// are stored as JSON) over [`ETCD_MAX_REQUEST_BYTES`]. A shared object
/// with a finalizer per Server reaches it (about 30,000 references).
pub(crate) fn fits_in_etcd(object: &Value) -> Result<(), ApiError> {
    struct Counted(usize);
    impl std::io::Write for Counted {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counted = Counted(0);
    serde_json::to_writer(&mut counted, object).map_err(|e| ApiError::internal(e.to_string()))?;
    if counted.0 > ETCD_MAX_REQUEST_BYTES {
        return Err(ApiError::etcd_request_too_large());
    }
    Ok(())
}

/// `metadata.<field>` as a string.
pub(crate) fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

/// `metadata`, created (and replaced if it was not an object) when needed.
pub(crate) fn meta_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.is_object() {
        *object = Value::Object(Map::new());
    }
    let map = match object {
        Value::Object(map) => map,
        _ => unreachable_object(),
    };
    let metadata = map.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    if !metadata.is_object() {
        *metadata = Value::Object(Map::new());
    }
    match metadata {
        Value::Object(metadata) => metadata,
        _ => unreachable_object(),
    }
}

// Both call sites have just made the value an object; this keeps the
// accessors total without an `unwrap`.
#[cold]
fn unreachable_object() -> ! {
    unreachable!("value was just set to an object")
}

/// `metadata.finalizers`, as strings.
pub(crate) fn finalizers(object: &Value) -> Vec<&str> {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Whether `metadata.deletionTimestamp` is set.
pub(crate) fn is_deleting(object: &Value) -> bool {
    object.pointer("/metadata/deletionTimestamp").is_some_and(|v| !v.is_null())
}

/// `metadata.generation` (0 when absent).
pub(crate) fn generation(object: &Value) -> i64 {
    object.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0)
}

/// Whether two objects differ in anything but `metadata` (and `status`, when
/// the status subresource owns it): the API server's rule for bumping
/// `metadata.generation`.
pub(crate) fn spec_differs(old: &Value, new: &Value, ignore_status: bool) -> bool {
    let ignored = |key: &str| matches!(key, "metadata" | "apiVersion" | "kind") || (ignore_status && key == "status");
    let empty = Map::new();
    let old = old.as_object().unwrap_or(&empty);
    let new = new.as_object().unwrap_or(&empty);
    old.keys().chain(new.keys()).filter(|key| !ignored(key)).any(|key| old.get(key) != new.get(key))
}

/// Roughly the heap bytes a JSON value holds: its strings and keys, plus a
/// fixed cost per node. Used to bound what the watch history keeps alive.
pub(crate) fn approximate_bytes(value: &Value) -> usize {
    const NODE: usize = 32;
    NODE + match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => 0,
        Value::String(text) => text.len(),
        Value::Array(items) => items.iter().map(approximate_bytes).sum(),
        Value::Object(map) => map.iter().map(|(key, value)| key.len() + approximate_bytes(value)).sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_object_over_etcds_request_limit_is_refused_as_kube_apiserver_refuses_it() {
        let referenced_by = |servers: usize| {
            let finalizers: Vec<String> =
                (0..servers).map(|i| format!("servers.region.unikorn-cloud.org/server-{i:05}")).collect();
            json!({"metadata": {"name": "shared", "finalizers": finalizers}})
        };
        assert!(fits_in_etcd(&referenced_by(30_000)).is_ok());
        let refused = fits_in_etcd(&referenced_by(40_000)).err().map(|e| e.to_status());
        assert_eq!(
            refused.as_ref().map(|s| (&s["code"], &s["reason"], &s["message"])),
            Some((&json!(500), &Value::Null, &json!("etcdserver: request is too large")))
        );
    }

    #[test]
    fn meta_mut_repairs_non_objects() {
        let mut value = json!(3);
        meta_mut(&mut value).insert("name".into(), json!("x"));
        assert_eq!(value, json!({"metadata": {"name": "x"}}));
        let mut value = json!({"metadata": []});
        meta_mut(&mut value).insert("name".into(), json!("y"));
        assert_eq!(meta_str(&value, "name"), Some("y"));
    }

    #[test]
    fn spec_differs_ignores_metadata_and_optionally_status() {
        let old = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"x": 1}, "status": {"y": 1}});
        let relabelled = json!({"metadata": {"labels": {"a": "2"}}, "spec": {"x": 1}, "status": {"y": 1}});
        let restatused = json!({"metadata": {}, "spec": {"x": 1}, "status": {"y": 2}});
        let respecced = json!({"metadata": {}, "spec": {"x": 2}, "status": {"y": 1}});
        assert!(!spec_differs(&old, &relabelled, true));
        assert!(!spec_differs(&old, &restatused, true));
        assert!(spec_differs(&old, &restatused, false));
        assert!(spec_differs(&old, &respecced, true));
    }
}
