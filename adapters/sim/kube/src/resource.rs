//! Resource types SimKube serves: read from CustomResourceDefinitions, plus built-ins.

use serde_json::Value;

use super::status::ApiError;

/// One served resource type: what discovery advertises and the store keys on.
///
/// All served versions share one storage: objects are returned with the
/// `apiVersion` the client asked for, without conversion (SimKube serves
/// single-schema CRDs, as this project's are).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    /// API group; empty for the core group (`/api/v1`).
    pub group: String,
    /// Served versions; the first is the preferred one.
    pub versions: Vec<String>,
    /// `Kind`, e.g. `Server`.
    pub kind: String,
    /// `ListKind`, e.g. `ServerList`.
    pub list_kind: String,
    /// Plural resource name used in paths, e.g. `servers`.
    pub plural: String,
    /// Singular resource name, e.g. `server`.
    pub singular: String,
    /// Short names advertised by discovery.
    pub short_names: Vec<String>,
    /// Categories advertised by discovery.
    pub categories: Vec<String>,
    /// Namespaced (true) or cluster-scoped (false).
    pub namespaced: bool,
    /// Whether the `/status` subresource is enabled (status then ignored on the main resource).
    pub status_subresource: bool,
}

impl ResourceType {
    /// A namespaced resource type without a status subresource.
    pub fn namespaced(group: &str, version: &str, kind: &str, plural: &str) -> Self {
        Self {
            group: group.to_string(),
            versions: vec![version.to_string()],
            kind: kind.to_string(),
            list_kind: format!("{kind}List"),
            plural: plural.to_string(),
            singular: kind.to_lowercase(),
            short_names: Vec::new(),
            categories: Vec::new(),
            namespaced: true,
            status_subresource: false,
        }
    }

    /// A cluster-scoped resource type without a status subresource.
    pub fn cluster_scoped(group: &str, version: &str, kind: &str, plural: &str) -> Self {
        Self { namespaced: false, ..Self::namespaced(group, version, kind, plural) }
    }

    /// Enables the `/status` subresource.
    #[must_use]
    pub fn with_status_subresource(mut self) -> Self {
        self.status_subresource = true;
        self
    }

    /// `events.k8s.io/v1` Event (kube-runtime's Recorder writes these).
    pub fn events() -> Self {
        let mut events = Self::namespaced("events.k8s.io", "v1", "Event", "events");
        events.short_names = vec!["ev".to_string()];
        events
    }

    /// core/v1 Event: the same objects as [`ResourceType::events`], in the
    /// core group's shape (what `kubectl describe` reads).
    pub fn core_events() -> Self {
        let mut events = Self::namespaced("", "v1", "Event", "events");
        events.short_names = vec!["ev".to_string()];
        events
    }

    /// core/v1 Namespace.
    pub fn namespaces() -> Self {
        let mut namespaces = Self::cluster_scoped("", "v1", "Namespace", "namespaces").with_status_subresource();
        namespaces.short_names = vec!["ns".to_string()];
        namespaces
    }

    /// `coordination.k8s.io/v1` Lease (leader election).
    pub fn leases() -> Self {
        Self::namespaced("coordination.k8s.io", "v1", "Lease", "leases")
    }

    /// `apiextensions.k8s.io/v1` CustomResourceDefinition: creating one installs its type.
    pub fn custom_resource_definitions() -> Self {
        let mut crds =
            Self::cluster_scoped("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions")
                .with_status_subresource();
        crds.short_names = vec!["crd".to_string(), "crds".to_string()];
        crds
    }

    /// The preferred (first) served version.
    pub fn preferred_version(&self) -> &str {
        self.versions.first().map_or("v1", String::as_str)
    }

    /// `group/version` (or `version` for the core group).
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() { version.to_string() } else { format!("{}/{}", self.group, version) }
    }

    /// Whether `version` is served.
    pub fn serves(&self, version: &str) -> bool {
        self.versions.iter().any(|v| v == version)
    }

    /// Reads an `apiextensions.k8s.io/v1` CustomResourceDefinition.
    ///
    /// Only served versions are exposed; the storage version comes first so it
    /// is the preferred one. The status subresource is on if any served version
    /// declares it.
    pub fn from_crd(crd: &Value) -> Result<Self, ApiError> {
        let invalid = |what: &str| ApiError::bad_request(format!("invalid CustomResourceDefinition: {what}"));
        if crd.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") {
            return Err(invalid("kind must be CustomResourceDefinition"));
        }
        let spec = crd.get("spec").ok_or_else(|| invalid("missing spec"))?;
        let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_string);
        let strings = |value: Option<&Value>| -> Vec<String> {
            value
                .and_then(Value::as_array)
                .map(|items| items.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
                .unwrap_or_default()
        };
        let group = text(spec.get("group")).ok_or_else(|| invalid("missing spec.group"))?;
        let names = spec.get("names").ok_or_else(|| invalid("missing spec.names"))?;
        let kind = text(names.get("kind")).ok_or_else(|| invalid("missing spec.names.kind"))?;
        let plural = text(names.get("plural")).ok_or_else(|| invalid("missing spec.names.plural"))?;
        let singular = text(names.get("singular")).unwrap_or_else(|| kind.to_lowercase());
        let list_kind = text(names.get("listKind")).unwrap_or_else(|| format!("{kind}List"));
        let namespaced = match spec.get("scope").and_then(Value::as_str) {
            Some("Namespaced") => true,
            Some("Cluster") => false,
            _ => return Err(invalid("spec.scope must be Namespaced or Cluster")),
        };

        let mut versions = Vec::new();
        let mut status_subresource = false;
        for version in spec.get("versions").and_then(Value::as_array).ok_or_else(|| invalid("missing spec.versions"))? {
            let name = text(version.get("name")).ok_or_else(|| invalid("version without name"))?;
            if version.get("served").and_then(Value::as_bool) == Some(false) {
                continue;
            }
            status_subresource |= version.pointer("/subresources/status").is_some();
            if version.get("storage").and_then(Value::as_bool) == Some(true) {
                versions.insert(0, name);
            } else {
                versions.push(name);
            }
        }
        if versions.is_empty() {
            return Err(invalid("no served version"));
        }

        Ok(Self {
            group,
            versions,
            kind,
            list_kind,
            plural,
            singular,
            short_names: strings(names.get("shortNames")),
            categories: strings(names.get("categories")),
            namespaced,
            status_subresource,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_a_crd_with_storage_version_first() {
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"]},
                "scope": "Cluster",
                "versions": [
                    {"name": "v1alpha1", "served": true, "storage": false},
                    {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}},
                    {"name": "v0", "served": false, "storage": false}
                ]
            }
        });
        let rt = ResourceType::from_crd(&crd).expect("valid CRD");
        assert_eq!(rt.versions, vec!["v1", "v1alpha1"]);
        assert!(!rt.namespaced);
        assert!(rt.status_subresource);
        assert_eq!(rt.list_kind, "WidgetList");
        assert_eq!(rt.singular, "widget");
        assert_eq!(rt.short_names, vec!["wd"]);
    }

    #[test]
    fn rejects_malformed_crds_without_panicking() {
        for bad in [
            json!(null),
            json!({"kind": "CustomResourceDefinition"}),
            json!({"kind": "CustomResourceDefinition", "spec": {"group": "g", "names": {"kind": "K", "plural": "ks"}, "scope": "Nowhere", "versions": []}}),
            json!({"kind": "CustomResourceDefinition", "spec": {"group": "g", "names": {"kind": "K", "plural": "ks"}, "scope": "Cluster", "versions": []}}),
        ] {
            let error = ResourceType::from_crd(&bad).expect_err("must be rejected");
            assert_eq!(error.code, 400);
        }
    }
}
