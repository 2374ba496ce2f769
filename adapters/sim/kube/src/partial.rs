//! `as=PartialObjectMetadata`: an object answered as its metadata alone,
//! which kube-apiserver does for any verb when the first acceptable media
//! type of the `Accept` header asks for it (apiserver
//! `endpoints/handlers/response.go`, `transformResponseObject`, for
//! `meta.k8s.io` `v1` and `v1beta1`). Clients ask it to learn a write's new
//! resourceVersion without reading back the whole object.

use serde_json::{Value, json};

/// The `apiVersion` of the PartialObjectMetadata asked for, if the client's
/// first acceptable media type is one (plain JSON first: `None`).
pub(crate) fn negotiate(accept: Option<&str>) -> Option<&'static str> {
    for range in accept?.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default();
        if !matches!(media, "application/json" | "application/*" | "*/*") {
            continue;
        }
        let params: Vec<(&str, &str)> = parts.filter_map(|p| p.split_once('=')).collect();
        let param = |name: &str| params.iter().find(|(key, _)| key.trim() == name).map(|(_, value)| value.trim());
        match (param("as"), param("g"), param("v")) {
            (None, _, _) => return None,
            (Some("PartialObjectMetadata"), Some("meta.k8s.io"), Some("v1")) => return Some("meta.k8s.io/v1"),
            (Some("PartialObjectMetadata"), Some("meta.k8s.io"), Some("v1beta1")) => {
                return Some("meta.k8s.io/v1beta1");
            }
            // Another representation (a Table): not this module's.
            _ => {}
        }
    }
    None
}

/// `object` as its metadata alone.
pub(crate) fn of(object: &Value, api_version: &str) -> Value {
    json!({ "kind": "PartialObjectMetadata", "apiVersion": api_version, "metadata": object["metadata"] })
}

/// The list kind of [`of`]'s objects.
pub(crate) const LIST_KIND: &str = "PartialObjectMetadataList";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_acceptable_media_type_decides() {
        let metadata = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
        assert_eq!(negotiate(Some(metadata)), Some("meta.k8s.io/v1"));
        assert_eq!(negotiate(Some(&format!("{metadata},application/json"))), Some("meta.k8s.io/v1"));
        assert_eq!(negotiate(Some(&format!("application/json,{metadata}"))), None);
        assert_eq!(
            negotiate(Some("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1")),
            Some("meta.k8s.io/v1beta1")
        );
        let table_first = format!("application/json;as=Table;g=meta.k8s.io;v=v1,{metadata}");
        assert_eq!(negotiate(Some(&table_first)), Some("meta.k8s.io/v1"), "a Table is the table module's");
        assert_eq!(negotiate(Some("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v9")), None);
        assert_eq!(negotiate(None), None);
    }

    #[test]
    fn an_object_keeps_its_metadata_alone() {
        let object = json!({ "kind": "Server", "metadata": { "name": "a", "resourceVersion": "7" }, "spec": { "userData": "eA==" } });
        let partial = of(&object, "meta.k8s.io/v1");
        assert_eq!(partial["kind"], "PartialObjectMetadata");
        assert_eq!(partial["metadata"]["resourceVersion"], "7");
        assert!(partial.get("spec").is_none());
    }
}
