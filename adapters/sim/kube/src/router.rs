//! URL layout of the Kubernetes API, and the axum `Router` serving it.
//!
//! Paths are parsed by hand rather than with axum route patterns: whether
//! `/apis/g/v/namespaces/x/...` is a namespaced collection depends on which
//! types are installed, which only the store knows at request time.

use std::sync::Arc;

use axum::Router;

use super::Shared;
use super::handlers;
use super::resource::ResourceType;
use super::status::ApiError;

/// Builds the router; every request goes to one handler that parses the path.
pub(crate) fn build(shared: Arc<Shared>) -> Router {
    Router::new().fallback(handlers::handle).with_state(shared)
}

/// The shape of a request path, before resource types are resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ApiPath<'a> {
    /// `/version`
    Version,
    /// `/api`
    CoreVersions,
    /// `/apis`
    Groups,
    /// `/apis/{group}`
    Group(&'a str),
    /// `/api/{version}` or `/apis/{group}/{version}`
    ResourceList { group: &'a str, version: &'a str },
    /// `/openapi/v2`
    OpenApiV2,
    /// `/openapi/v3`
    OpenApiV3Root,
    /// `/openapi/v3/api/{version}` or `/openapi/v3/apis/{group}/{version}`
    OpenApiV3 { group: &'a str, version: &'a str },
    /// Anything below a group version.
    Resource { group: &'a str, version: &'a str, rest: Vec<&'a str> },
}

/// Splits a path into the API's shape; `None` for paths outside the API.
pub(crate) fn parse(path: &str) -> Option<ApiPath<'_>> {
    let trimmed = path.trim_end_matches('/');
    let segments: Vec<&str> = trimmed.strip_prefix('/')?.split('/').collect();
    if segments.iter().any(|segment| segment.is_empty()) {
        return None;
    }
    Some(match segments.as_slice() {
        ["version"] => ApiPath::Version,
        ["openapi", "v2"] => ApiPath::OpenApiV2,
        ["openapi", "v3"] => ApiPath::OpenApiV3Root,
        ["openapi", "v3", "api", version] => ApiPath::OpenApiV3 { group: "", version },
        ["openapi", "v3", "apis", group, version] => ApiPath::OpenApiV3 { group, version },
        ["api"] => ApiPath::CoreVersions,
        ["apis"] => ApiPath::Groups,
        ["apis", group] => ApiPath::Group(group),
        ["api", version] => ApiPath::ResourceList { group: "", version },
        ["apis", group, version] => ApiPath::ResourceList { group, version },
        ["api", version, rest @ ..] => ApiPath::Resource { group: "", version, rest: rest.to_vec() },
        ["apis", group, version, rest @ ..] => ApiPath::Resource { group, version, rest: rest.to_vec() },
        _ => return None,
    })
}

/// A request path resolved against the served types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResourcePath {
    pub(crate) rtype: ResourceType,
    pub(crate) version: String,
    /// `Some` for `/namespaces/{ns}/...` paths.
    pub(crate) namespace: Option<String>,
    pub(crate) name: Option<String>,
    /// Whether the path ends in `/status`.
    pub(crate) status: bool,
}

impl ResourcePath {
    /// The resource label counters and faults use: `plural` or `plural/status`.
    pub(crate) fn label(&self) -> String {
        if self.status { format!("{}/status", self.rtype.plural) } else { self.rtype.plural.clone() }
    }
}

/// Resolves `rest` (the segments after the group version) against the served types.
pub(crate) fn resolve<'a>(
    lookup: impl Fn(&str) -> Option<&'a ResourceType>,
    path: &str,
    version: &str,
    rest: &[&str],
) -> Result<ResourcePath, ApiError> {
    let not_found = || ApiError::unknown_path(path);
    let (namespace, plural, tail) = match rest {
        ["namespaces", namespace, plural, tail @ ..] if lookup(plural).is_some_and(|rtype| rtype.namespaced) => {
            (Some((*namespace).to_string()), *plural, tail)
        }
        [plural, tail @ ..] => (None, *plural, tail),
        [] => return Err(not_found()),
    };
    let rtype = lookup(plural).ok_or_else(not_found)?;
    if !rtype.serves(version) {
        return Err(not_found());
    }
    let (name, status) = match tail {
        [] => (None, false),
        [name] => (Some((*name).to_string()), false),
        [name, "status"] if rtype.status_subresource => (Some((*name).to_string()), true),
        _ => return Err(not_found()),
    };
    // A namespaced object is only addressable inside its namespace.
    if rtype.namespaced && namespace.is_none() && name.is_some() {
        return Err(not_found());
    }
    Ok(ResourcePath { rtype: rtype.clone(), version: version.to_string(), namespace, name, status })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_api_paths() {
        assert_eq!(parse("/version"), Some(ApiPath::Version));
        assert_eq!(parse("/api"), Some(ApiPath::CoreVersions));
        assert_eq!(parse("/apis/"), Some(ApiPath::Groups));
        assert_eq!(parse("/apis/g.io"), Some(ApiPath::Group("g.io")));
        assert_eq!(parse("/apis/g.io/v1"), Some(ApiPath::ResourceList { group: "g.io", version: "v1" }));
        assert_eq!(
            parse("/apis/g.io/v1/namespaces/ns/widgets/w"),
            Some(ApiPath::Resource { group: "g.io", version: "v1", rest: vec!["namespaces", "ns", "widgets", "w"] })
        );
        assert_eq!(parse("/openapi/v3/apis/g.io/v1"), Some(ApiPath::OpenApiV3 { group: "g.io", version: "v1" }));
        assert_eq!(parse("/openapi/v3/api/v1"), Some(ApiPath::OpenApiV3 { group: "", version: "v1" }));
        assert_eq!(parse("/openapi/v2"), Some(ApiPath::OpenApiV2));
        assert_eq!(parse("/healthz"), None);
        assert_eq!(parse("/apis//v1"), None);
        assert_eq!(parse(""), None);
    }

    #[test]
    fn resolves_namespaced_and_cluster_paths() {
        let widgets = ResourceType::namespaced("g.io", "v1", "Widget", "widgets").with_status_subresource();
        let gadgets = ResourceType::cluster_scoped("g.io", "v1", "Gadget", "gadgets");
        let lookup = |plural: &str| match plural {
            "widgets" => Some(&widgets),
            "gadgets" => Some(&gadgets),
            _ => None,
        };
        let path = resolve(lookup, "p", "v1", &["namespaces", "ns", "widgets", "w", "status"]).expect("status path");
        assert_eq!(path.namespace.as_deref(), Some("ns"));
        assert_eq!(path.name.as_deref(), Some("w"));
        assert!(path.status);
        assert_eq!(path.label(), "widgets/status");

        let all = resolve(lookup, "p", "v1", &["widgets"]).expect("all namespaces");
        assert_eq!((all.namespace, all.name), (None, None));

        let gadget = resolve(lookup, "p", "v1", &["gadgets", "g"]).expect("cluster object");
        assert_eq!(gadget.name.as_deref(), Some("g"));

        for bad in [
            &["widgets", "w"][..],
            &["gadgets", "g", "status"][..],
            &["namespaces", "ns", "gadgets"][..],
            &["nothing"][..],
            &["widgets", "w", "status", "x"][..],
        ] {
            assert_eq!(resolve(lookup, "p", "v1", bad).map_err(|e| e.code), Err(404), "{bad:?}");
        }
        assert!(resolve(lookup, "p", "v2", &["widgets"]).is_err());
    }
}
