//! Discovery documents: `/version`, `/api`, `/apis`, `/apis/{group}`,
//! `/apis/{group}/{version}` and `/api/v1`, in both the classic form and the
//! aggregated (`apidiscovery.k8s.io/v2`) form kube-rs asks for with
//! `Discovery::run_aggregated`.

use serde_json::{Value, json};

use super::resource::ResourceType;
use super::status::ApiError;

/// Media type of aggregated discovery responses.
pub(crate) const AGGREGATED_CONTENT_TYPE: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether an `Accept` header asks for aggregated discovery.
pub(crate) fn wants_aggregated(accept: Option<&str>) -> bool {
    accept.is_some_and(|accept| accept.contains("as=APIGroupDiscoveryList"))
}

const ITEM_VERBS: [&str; 8] = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];
const STATUS_VERBS: [&str; 3] = ["get", "patch", "update"];

pub(crate) fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-simkube",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

/// The versions of a group, preferred first, as the union over its types.
fn group_versions<'a>(types: &[&'a ResourceType]) -> Vec<&'a str> {
    let mut versions: Vec<&str> = Vec::new();
    for rtype in types {
        for version in &rtype.versions {
            if !versions.contains(&version.as_str()) {
                versions.push(version);
            }
        }
    }
    versions
}

/// Served groups (core excluded), sorted by name, each with its types.
fn groups<'a>(types: &[&'a ResourceType]) -> Vec<(&'a str, Vec<&'a ResourceType>)> {
    let mut groups: Vec<(&str, Vec<&ResourceType>)> = Vec::new();
    for rtype in types.iter().filter(|t| !t.group.is_empty()) {
        match groups.iter_mut().find(|(name, _)| *name == rtype.group) {
            Some((_, members)) => members.push(rtype),
            None => groups.push((&rtype.group, vec![rtype])),
        }
    }
    groups.sort_by(|a, b| a.0.cmp(b.0));
    groups
}

fn group_version(group: &str, version: &str) -> Value {
    let group_version = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    json!({"groupVersion": group_version, "version": version})
}

fn api_group(name: &str, members: &[&ResourceType]) -> Value {
    let versions = group_versions(members);
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": name,
        "versions": versions.iter().map(|v| group_version(name, v)).collect::<Vec<_>>(),
        "preferredVersion": versions.first().map(|v| group_version(name, v)),
    })
}

/// `GET /api`.
pub(crate) fn core_versions(types: &[&ResourceType], aggregated: bool) -> Value {
    let core: Vec<&ResourceType> = types.iter().copied().filter(|t| t.group.is_empty()).collect();
    if aggregated {
        let items = if core.is_empty() { Vec::new() } else { vec![aggregated_group("", &core)] };
        return aggregated_list(items);
    }
    let mut versions = group_versions(&core);
    if versions.is_empty() {
        versions.push("v1");
    }
    json!({
        "kind": "APIVersions",
        "versions": versions,
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}]
    })
}

/// `GET /apis`.
pub(crate) fn group_list(types: &[&ResourceType], aggregated: bool) -> Value {
    let groups = groups(types);
    if aggregated {
        return aggregated_list(groups.iter().map(|(name, members)| aggregated_group(name, members)).collect());
    }
    json!({
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": groups.iter().map(|(name, members)| api_group(name, members)).collect::<Vec<_>>(),
    })
}

/// `GET /apis/{group}`.
pub(crate) fn group(types: &[&ResourceType], name: &str) -> Result<Value, ApiError> {
    groups(types)
        .iter()
        .find(|(group, _)| *group == name)
        .map(|(group, members)| api_group(group, members))
        .ok_or_else(|| ApiError::unknown_path(&format!("/apis/{name}")))
}

/// `GET /apis/{group}/{version}` or `GET /api/{version}`.
pub(crate) fn resource_list(types: &[&ResourceType], group: &str, version: &str) -> Result<Value, ApiError> {
    let served: Vec<&ResourceType> = types.iter().copied().filter(|t| t.group == group && t.serves(version)).collect();
    if served.is_empty() && !(group.is_empty() && version == "v1") {
        return Err(ApiError::unknown_path(&format!("{group}/{version}")));
    }
    let mut resources = Vec::new();
    for rtype in served {
        resources.push(json!({
            "name": rtype.plural,
            "singularName": rtype.singular,
            "namespaced": rtype.namespaced,
            "kind": rtype.kind,
            "verbs": ITEM_VERBS,
            "shortNames": rtype.short_names,
            "categories": rtype.categories,
        }));
        if rtype.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", rtype.plural),
                "singularName": "",
                "namespaced": rtype.namespaced,
                "kind": rtype.kind,
                "verbs": STATUS_VERBS,
            }));
        }
    }
    Ok(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version(group, version)["groupVersion"],
        "resources": resources,
    }))
}

fn aggregated_list(items: Vec<Value>) -> Value {
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

fn aggregated_group(name: &str, members: &[&ResourceType]) -> Value {
    let versions: Vec<Value> = group_versions(members)
        .into_iter()
        .map(|version| {
            let resources: Vec<Value> = members
                .iter()
                .filter(|t| t.serves(version))
                .map(|t| {
                    let kind = json!({"group": name, "version": version, "kind": t.kind});
                    let subresources: Vec<Value> = if t.status_subresource {
                        vec![json!({"subresource": "status", "responseKind": kind, "verbs": STATUS_VERBS})]
                    } else {
                        Vec::new()
                    };
                    json!({
                        "resource": t.plural,
                        "responseKind": kind,
                        "scope": if t.namespaced { "Namespaced" } else { "Cluster" },
                        "singularResource": t.singular,
                        "verbs": ITEM_VERBS,
                        "shortNames": t.short_names,
                        "categories": t.categories,
                        "subresources": subresources,
                    })
                })
                .collect();
            json!({"version": version, "freshness": "Current", "resources": resources})
        })
        .collect();
    json!({"metadata": {"name": name}, "versions": versions})
}
