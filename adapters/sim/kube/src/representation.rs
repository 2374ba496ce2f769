//! Representations a client may ask for in `Accept` instead of the object
//! itself: a `meta.k8s.io` Table (server-side printing, `table`) or
//! `PartialObjectMetadata`, an object answered as its metadata alone, which
//! kube-apiserver does for any verb (apiserver
//! `endpoints/handlers/response.go`, `transformResponseObject`). Clients ask
//! the latter to learn a write's new resourceVersion without reading back
//! the whole object. Both come in `meta.k8s.io` `v1` and `v1beta1`.

use serde_json::{Value, json};

/// A representation other than the object itself, with its `apiVersion`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Representation {
    Table(&'static str),
    PartialObjectMetadata(&'static str),
}

/// The representation of the client's first acceptable media type that
/// SimKube offers; `None` when that is the object itself (plain JSON).
pub(crate) fn preferred(accept: Option<&str>) -> Option<Representation> {
    for range in accept?.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default();
        if !matches!(media, "application/json" | "application/*" | "*/*") {
            continue;
        }
        let params: Vec<(&str, &str)> = parts.filter_map(|p| p.split_once('=')).collect();
        let param = |name: &str| params.iter().find(|(key, _)| key.trim() == name).map(|(_, value)| value.trim());
        let api_version = match (param("g"), param("v")) {
            (Some("meta.k8s.io"), Some("v1")) => "meta.k8s.io/v1",
            (Some("meta.k8s.io"), Some("v1beta1")) => "meta.k8s.io/v1beta1",
            _ if param("as").is_none() => return None,
            // A version SimKube does not offer: try the next one.
            _ => continue,
        };
        match param("as") {
            None => return None,
            Some("Table") => return Some(Representation::Table(api_version)),
            Some("PartialObjectMetadata") => return Some(Representation::PartialObjectMetadata(api_version)),
            _ => {}
        }
    }
    None
}

/// The `apiVersion` of the PartialObjectMetadata asked for, if that is the
/// client's preferred representation.
pub(crate) fn metadata_only(accept: Option<&str>) -> Option<&'static str> {
    match preferred(accept) {
        Some(Representation::PartialObjectMetadata(api_version)) => Some(api_version),
        _ => None,
    }
}

/// `object` as its metadata alone.
pub(crate) fn partial_metadata(object: &Value, api_version: &str) -> Value {
    json!({ "kind": "PartialObjectMetadata", "apiVersion": api_version, "metadata": object["metadata"] })
}

/// The list kind of [`partial_metadata`]'s objects.
pub(crate) const PARTIAL_METADATA_LIST_KIND: &str = "PartialObjectMetadataList";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_acceptable_media_type_decides() {
        let metadata = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
        let table = "application/json;as=Table;g=meta.k8s.io;v=v1";
        assert_eq!(metadata_only(Some(metadata)), Some("meta.k8s.io/v1"));
        assert_eq!(metadata_only(Some(&format!("{metadata},application/json"))), Some("meta.k8s.io/v1"));
        assert_eq!(metadata_only(Some(&format!("application/json,{metadata}"))), None);
        assert_eq!(
            metadata_only(Some("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1")),
            Some("meta.k8s.io/v1beta1")
        );
        assert_eq!(preferred(Some(&format!("{table},{metadata}"))), Some(Representation::Table("meta.k8s.io/v1")));
        assert_eq!(metadata_only(Some(&format!("{table},{metadata}"))), None, "the Table comes first");
        assert_eq!(metadata_only(Some("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v9")), None);
        assert_eq!(
            metadata_only(Some(&format!("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v9,{metadata}"))),
            Some("meta.k8s.io/v1"),
            "a version not offered is skipped"
        );
        assert_eq!(metadata_only(None), None);
    }

    #[test]
    fn an_object_keeps_its_metadata_alone() {
        let object = json!({ "kind": "Server", "metadata": { "name": "a", "resourceVersion": "7" }, "spec": { "userData": "eA==" } });
        let partial = partial_metadata(&object, "meta.k8s.io/v1");
        assert_eq!(partial["kind"], "PartialObjectMetadata");
        assert_eq!(partial["metadata"]["resourceVersion"], "7");
        assert!(partial.get("spec").is_none());
    }
}
