//! core/v1 Events as a second view of the `events.k8s.io/v1` Events.
//!
//! A real API server stores one Event type and serves it under both groups;
//! `kubectl describe` reads `/api/v1` Events while kube-runtime's recorder
//! writes `events.k8s.io/v1` ones. The field mapping is upstream's
//! `Convert_v1_Event_To_core_Event` and its inverse
//! (kubernetes `pkg/apis/events/v1/conversion.go`), and the field selector
//! renames are that package's `AddFieldLabelConversionsForEvent`.

use serde_json::{Map, Value};

use super::resource::ResourceType;
use super::store::TypeKey;

/// `(events.k8s.io field, core/v1 field)`: the renamed top-level fields.
const RENAMED: [(&str, &str); 6] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// `reportingController` in events.k8s.io is `reportingComponent` in core/v1.
const REPORTING: (&str, &str) = ("reportingController", "reportingComponent");

/// Whether `rtype` is the core/v1 view of Events.
pub(crate) fn is_core_events(rtype: &ResourceType) -> bool {
    rtype.group.is_empty() && rtype.plural == "events"
}

/// Where the Events of either view are stored.
pub(crate) fn storage_key() -> TypeKey {
    ("events.k8s.io".to_string(), "events".to_string())
}

fn rename(event: &Value, pairs: impl Iterator<Item = (&'static str, &'static str)>) -> Value {
    let Some(fields) = event.as_object() else { return event.clone() };
    let mut converted: Map<String, Value> = fields.clone();
    for (from, to) in pairs {
        converted.remove(to);
        if let Some(value) = fields.get(from) {
            converted.remove(from);
            converted.insert(to.to_string(), value.clone());
        }
    }
    Value::Object(converted)
}

fn pairs() -> impl Iterator<Item = (&'static str, &'static str)> {
    RENAMED.into_iter().chain([REPORTING])
}

/// A stored (events.k8s.io) Event as core/v1 shows it.
pub(crate) fn to_core(event: &Value) -> Value {
    rename(event, pairs())
}

/// A core/v1 Event as it is stored (events.k8s.io).
pub(crate) fn from_core(event: &Value) -> Value {
    rename(event, pairs().map(|(stored, core)| (core, stored)))
}

/// A core/v1 field selector path as a path of the stored Event.
pub(crate) fn stored_field(path: &[String]) -> Vec<String> {
    let Some((first, rest)) = path.split_first() else { return Vec::new() };
    if first == "source" && rest.is_empty() {
        // `source` selects on `source.component` (upstream `EventToSelectableFields`).
        return vec!["deprecatedSource".to_string(), "component".to_string()];
    }
    let head = pairs().find(|(_, core)| core == first).map_or(first.as_str(), |(stored, _)| stored);
    std::iter::once(head.to_string()).chain(rest.iter().cloned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn converts_both_ways() {
        let stored = json!({
            "metadata": {"name": "e1", "namespace": "ns"},
            "regarding": {"kind": "Server", "name": "s1"},
            "note": "attempt 2/3",
            "reason": "ProviderCreateRetrying",
            "reportingController": "server-controller",
            "deprecatedCount": 2,
            "series": {"count": 2, "lastObservedTime": "2026-01-01T00:00:00.000000Z"},
        });
        let core = to_core(&stored);
        assert_eq!(core["involvedObject"]["name"], "s1");
        assert_eq!(core["message"], "attempt 2/3");
        assert_eq!(core["reportingComponent"], "server-controller");
        assert_eq!(core["count"], 2);
        assert_eq!(core["series"]["count"], 2);
        assert!(core.get("regarding").is_none() && core.get("note").is_none());
        assert_eq!(from_core(&core), stored);
    }

    #[test]
    fn maps_field_selector_paths() {
        let path = |text: &str| text.split('.').map(str::to_string).collect::<Vec<_>>();
        assert_eq!(stored_field(&path("involvedObject.uid")), path("regarding.uid"));
        assert_eq!(stored_field(&path("source")), path("deprecatedSource.component"));
        assert_eq!(stored_field(&path("metadata.name")), path("metadata.name"));
        assert_eq!(stored_field(&path("reportingComponent")), path("reportingController"));
    }
}
