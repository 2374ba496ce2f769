//! OpenAPI documents built from the served types: `/openapi/v3` (the root
//! listing one document per group version), `/openapi/v3/apis/{group}/{version}`
//! and `/openapi/v2`.
//!
//! kubectl reads them to validate (`apply --validate` checks that PATCH of
//! the kind accepts `fieldValidation`, then lets the server validate), to
//! check `dryRun` support (`diff`, `--dry-run=server`) and to answer
//! `explain`. A custom resource's schema is its CRD's `openAPIV3Schema` with
//! `metadata` as a reference to ObjectMeta and the
//! `x-kubernetes-group-version-kind` extension, as upstream's
//! `apiextensions-apiserver/pkg/controller/openapi/builder/builder.go` builds
//! it; definitions are named as upstream names them (`org.unikorn-cloud.region.v1alpha1.Server`
//! for group `region.unikorn-cloud.org`). Built-in types (Events, Namespaces,
//! Leases, CRDs) get a short schema: their kind and metadata, not every field.
//! v2 is served as JSON only; a client that accepts nothing but protobuf
//! gets 406.

use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::{Map, Value, json};

use super::resource::ResourceType;
use super::schema::crd_schema;
use super::status::ApiError;
use super::store::StoreState;

/// Which OpenAPI dialect a document is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    V2,
    V3,
}

impl Dialect {
    fn reference(self, name: &str) -> Value {
        let prefix = match self {
            Self::V2 => "#/definitions/",
            Self::V3 => "#/components/schemas/",
        };
        json!({"$ref": format!("{prefix}{name}")})
    }

    /// A reference with a description beside it (v3 wraps it in `allOf`, as upstream does).
    fn described_reference(self, name: &str, description: &str) -> Value {
        match self {
            Self::V2 => {
                let mut reference = self.reference(name);
                reference["description"] = json!(description);
                reference
            }
            Self::V3 => json!({"allOf": [self.reference(name)], "description": description}),
        }
    }
}

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";

const API_VERSION_DESCRIPTION: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DESCRIPTION: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const METADATA_DESCRIPTION: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// The definition name upstream gives a kind.
fn definition_name(rtype: &ResourceType, version: &str, kind: &str) -> String {
    match rtype.group.as_str() {
        "" => format!("io.k8s.api.core.{version}.{kind}"),
        "apiextensions.k8s.io" => format!("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.{version}.{kind}"),
        group if group.ends_with(".k8s.io") => {
            let short = group.split('.').next().unwrap_or(group);
            format!("io.k8s.api.{short}.{version}.{kind}")
        }
        group => {
            let reversed: Vec<&str> = group.split('.').rev().collect();
            format!("{}.{version}.{kind}", reversed.join("."))
        }
    }
}

fn gvk(rtype: &ResourceType, version: &str, kind: &str) -> Value {
    json!({"group": rtype.group, "version": version, "kind": kind})
}

/// The served CRD object of a custom resource type, if it is one.
fn crd_of(store: &StoreState, rtype: &ResourceType) -> Option<std::sync::Arc<Value>> {
    let crds = ResourceType::custom_resource_definitions();
    store.get(&(crds.group, crds.plural), None, &format!("{}.{}", rtype.plural, rtype.group)).ok()
}

/// The kind's schema: the CRD's, or a short one for a built-in type.
fn kind_schema(store: &StoreState, rtype: &ResourceType, version: &str, dialect: Dialect) -> Value {
    let declared = crd_of(store, rtype).and_then(|crd| crd_schema(&crd, version).cloned());
    let mut schema = declared.unwrap_or_else(|| {
        json!({
            "description": format!("{} (SimKube serves its kind and metadata; the API server's documentation has every field).", rtype.kind),
            "type": "object",
        })
    });
    if !schema.is_object() {
        schema = json!({"type": "object"});
    }
    let properties =
        schema.as_object_mut().map(|fields| fields.entry("properties").or_insert_with(|| Value::Object(Map::new())));
    if let Some(Value::Object(properties)) = properties {
        properties
            .entry("apiVersion")
            .or_insert_with(|| json!({"description": API_VERSION_DESCRIPTION, "type": "string"}));
        properties.entry("kind").or_insert_with(|| json!({"description": KIND_DESCRIPTION, "type": "string"}));
        properties.insert("metadata".into(), dialect.described_reference(OBJECT_META, METADATA_DESCRIPTION));
    }
    schema["x-kubernetes-group-version-kind"] = json!([gvk(rtype, version, &rtype.kind)]);
    schema
}

fn list_schema(rtype: &ResourceType, version: &str, dialect: Dialect) -> Value {
    let item = definition_name(rtype, version, &rtype.kind);
    json!({
        "description": format!("{} is a list of {}", rtype.list_kind, rtype.kind),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"description": API_VERSION_DESCRIPTION, "type": "string"},
            "items": {"description": format!("List of {}.", rtype.plural), "type": "array", "items": dialect.reference(&item)},
            "kind": {"description": KIND_DESCRIPTION, "type": "string"},
            "metadata": dialect.described_reference(LIST_META, "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"),
        },
        "x-kubernetes-group-version-kind": [gvk(rtype, version, &rtype.list_kind)],
    })
}

fn string(description: &str) -> Value {
    json!({"description": description, "type": "string"})
}

fn string_map(description: &str) -> Value {
    json!({"description": description, "type": "object", "additionalProperties": {"type": "string", "default": ""}})
}

/// ObjectMeta, ListMeta, Status and the patch and delete bodies.
fn meta_schemas(dialect: Dialect) -> Map<String, Value> {
    let time = |description: &str| json!({"description": description, "type": "string", "format": "date-time"});
    let object_meta = json!({
        "description": "ObjectMeta is metadata that all persisted resources must have, which includes all objects users must create.",
        "type": "object",
        "properties": {
            "annotations": string_map("Annotations is an unstructured key value map stored with a resource that may be set by external tools to store and retrieve arbitrary metadata."),
            "creationTimestamp": time("CreationTimestamp is a timestamp representing the server time when this object was created. Populated by the system. Read-only."),
            "deletionGracePeriodSeconds": {"description": "Number of seconds allowed for this object to gracefully terminate before it will be removed from the system.", "type": "integer", "format": "int64"},
            "deletionTimestamp": time("DeletionTimestamp is RFC 3339 date and time at which this resource will be deleted. Set by the server when a graceful deletion is requested by the user."),
            "finalizers": {"description": "Must be empty before the object is deleted from the registry.", "type": "array", "items": {"type": "string", "default": ""}, "x-kubernetes-list-type": "set"},
            "generateName": string("GenerateName is an optional prefix, used by the server, to generate a unique name ONLY IF the Name field has not been provided."),
            "generation": {"description": "A sequence number representing a specific generation of the desired state. Populated by the system. Read-only.", "type": "integer", "format": "int64"},
            "labels": string_map("Map of string keys and values that can be used to organize and categorize (scope and select) objects."),
            "managedFields": {"description": "ManagedFields maps workflow-id and version to the set of fields that are managed by that workflow.", "type": "array", "items": {"type": "object"}},
            "name": string("Name must be unique within a namespace. Cannot be updated."),
            "namespace": string("Namespace defines the space within which each name must be unique. Cannot be updated."),
            "ownerReferences": {"description": "List of objects depended by this object.", "type": "array", "items": {"type": "object"}},
            "resourceVersion": string("An opaque value that represents the internal version of this object that can be used by clients to determine when objects have changed. Populated by the system. Read-only."),
            "selfLink": string("Deprecated: selfLink is a legacy read-only field that is no longer populated by the system."),
            "uid": string("UID is the unique in time and space value for this object. Populated by the system. Read-only."),
        },
    });
    let list_meta = json!({
        "description": "ListMeta describes metadata that synthetic resources must have, including lists and various status objects.",
        "type": "object",
        "properties": {
            "continue": string("continue may be set if the user set a limit on the number of items returned, and indicates that the server has more data available."),
            "remainingItemCount": {"description": "The number of subsequent items in the list which are not included in this list response.", "type": "integer", "format": "int64"},
            "resourceVersion": string("String that identifies the server's internal version of this object that can be used by clients to determine when objects have changed."),
            "selfLink": string("Deprecated: selfLink is a legacy read-only field that is no longer populated by the system."),
        },
    });
    let status = json!({
        "description": "Status is a return value for calls that don't return other objects.",
        "type": "object",
        "properties": {
            "apiVersion": string(API_VERSION_DESCRIPTION),
            "code": {"description": "Suggested HTTP return code for this status, 0 if not set.", "type": "integer", "format": "int32"},
            "details": {"description": "Extended data associated with the reason.", "type": "object"},
            "kind": string(KIND_DESCRIPTION),
            "message": string("A human-readable description of the status of this operation."),
            "metadata": dialect.described_reference(LIST_META, "Standard list metadata."),
            "reason": string("A machine-readable description of why this operation is in the \"Failure\" status."),
            "status": string("Status of the operation. One of: \"Success\" or \"Failure\"."),
        },
        "x-kubernetes-group-version-kind": [{"group": "", "kind": "Status", "version": "v1"}],
    });
    let mut schemas = Map::new();
    schemas.insert(OBJECT_META.into(), object_meta);
    schemas.insert(LIST_META.into(), list_meta);
    schemas.insert(STATUS.into(), status);
    schemas.insert(
        PATCH.into(),
        json!({"description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.", "type": "object"}),
    );
    schemas.insert(
        DELETE_OPTIONS.into(),
        json!({"description": "DeleteOptions may be provided when deleting an API object.", "type": "object"}),
    );
    schemas
}

/// A query or path parameter.
fn parameter(dialect: Dialect, name: &str, location: &str, kind: &str, description: &str) -> Value {
    let mut parameter = json!({"name": name, "in": location, "description": description});
    match dialect {
        Dialect::V2 => parameter["type"] = json!(kind),
        Dialect::V3 => parameter["schema"] = json!({"type": kind, "uniqueItems": true}),
    }
    if location == "path" {
        parameter["required"] = json!(true);
    }
    parameter
}

fn write_parameters(dialect: Dialect, patch: bool) -> Vec<Value> {
    let mut parameters = vec![
        parameter(
            dialect,
            "dryRun",
            "query",
            "string",
            "When present, indicates that modifications should not be persisted. Valid values are: All.",
        ),
        parameter(
            dialect,
            "fieldManager",
            "query",
            "string",
            "fieldManager is a name associated with the actor or entity that is making these changes.",
        ),
        parameter(
            dialect,
            "fieldValidation",
            "query",
            "string",
            "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields. Valid values are: Ignore, Warn (the default) and Strict.",
        ),
    ];
    if patch {
        parameters.push(parameter(
            dialect,
            "force",
            "query",
            "boolean",
            "Force is going to \"force\" Apply requests. It must be unset for non-apply patch requests.",
        ));
    }
    parameters
}

const PATCH_TYPES: [&str; 3] =
    ["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"];

/// One operation of a path.
struct Operation<'a> {
    rtype: &'a ResourceType,
    version: &'a str,
    action: &'a str,
    description: String,
    /// The definition of the request body, if any.
    body: Option<&'a str>,
    /// The definition of the response.
    response: &'a str,
    parameters: Vec<Value>,
}

impl Operation<'_> {
    fn build(self, dialect: Dialect, operation_id: String) -> Value {
        let mut operation = json!({
            "description": self.description,
            "operationId": operation_id,
            "parameters": self.parameters,
            "x-kubernetes-action": self.action,
            "x-kubernetes-group-version-kind": gvk(self.rtype, self.version, &self.rtype.kind),
        });
        let body_types: Vec<&str> =
            if self.action == "patch" { PATCH_TYPES.to_vec() } else { vec!["application/json"] };
        let ok = json!({"description": "OK"});
        match dialect {
            Dialect::V3 => {
                let content = |schema: Value, types: &[&str]| -> Value {
                    Value::Object(types.iter().map(|t| ((*t).to_string(), json!({"schema": schema}))).collect())
                };
                let mut ok = ok;
                ok["content"] = content(dialect.reference(self.response), &["application/json", "application/yaml"]);
                operation["responses"] = json!({"200": ok});
                if let Some(body) = self.body {
                    operation["requestBody"] =
                        json!({"content": content(dialect.reference(body), &body_types), "required": true});
                }
            }
            Dialect::V2 => {
                let mut ok = ok;
                ok["schema"] = dialect.reference(self.response);
                operation["responses"] = json!({"200": ok});
                operation["consumes"] = json!(body_types);
                operation["produces"] = json!(["application/json", "application/yaml"]);
                if let Some(body) = self.body
                    && let Some(parameters) = operation["parameters"].as_array_mut()
                {
                    parameters.insert(
                        0,
                        json!({"name": "body", "in": "body", "required": true, "schema": dialect.reference(body)}),
                    );
                }
            }
        }
        operation
    }
}

fn operation_id(verb: &str, rtype: &ResourceType, version: &str, scope: &str, suffix: &str) -> String {
    let group: String = rtype
        .group
        .split(['.', '-'])
        .filter(|part| !part.is_empty())
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map(|c| c.to_uppercase().collect::<String>() + chars.as_str()).unwrap_or_default()
        })
        .collect();
    let group = if group.is_empty() { "Core".to_string() } else { group };
    let mut version_chars = version.chars();
    let version =
        version_chars.next().map(|c| c.to_uppercase().collect::<String>() + version_chars.as_str()).unwrap_or_default();
    format!("{verb}{group}{version}{scope}{}{suffix}", rtype.kind)
}

/// The paths of one type at one version.
fn type_paths(rtype: &ResourceType, version: &str, dialect: Dialect, paths: &mut Map<String, Value>) {
    let root =
        if rtype.group.is_empty() { format!("/api/{version}") } else { format!("/apis/{}/{version}", rtype.group) };
    let kind = definition_name(rtype, version, &rtype.kind);
    let list = definition_name(rtype, version, &rtype.list_kind);
    let scope = if rtype.namespaced { "Namespaced" } else { "" };
    let base = if rtype.namespaced {
        format!("{root}/namespaces/{{namespace}}/{}", rtype.plural)
    } else {
        format!("{root}/{}", rtype.plural)
    };
    let namespace_parameter = || {
        parameter(dialect, "namespace", "path", "string", "object name and auth scope, such as for teams and projects")
    };
    let name_parameter = || parameter(dialect, "name", "path", "string", &format!("name of the {}", rtype.kind));
    let path_parameters = |named: bool| -> Vec<Value> {
        let mut parameters = Vec::new();
        if named {
            parameters.push(name_parameter());
        }
        if rtype.namespaced {
            parameters.push(namespace_parameter());
        }
        parameters
    };
    let build = |action: &str,
                 description: String,
                 body: Option<&str>,
                 response: &str,
                 parameters: Vec<Value>,
                 verb: &str,
                 suffix: &str| {
        Operation { rtype, version, action, description, body, response, parameters }
            .build(dialect, operation_id(verb, rtype, version, scope, suffix))
    };
    let plural = &rtype.plural;
    let kind_name = &rtype.kind;

    let mut collection = Map::new();
    collection.insert(
        "get".into(),
        build("list", format!("list or watch objects of kind {kind_name}"), None, &list, Vec::new(), "list", ""),
    );
    collection.insert(
        "post".into(),
        build(
            "post",
            format!("create a {kind_name}"),
            Some(&kind),
            &kind,
            write_parameters(dialect, false),
            "create",
            "",
        ),
    );
    collection.insert(
        "delete".into(),
        build(
            "deletecollection",
            format!("delete collection of {kind_name}"),
            None,
            STATUS,
            Vec::new(),
            "deleteCollection",
            "",
        ),
    );
    collection.insert("parameters".into(), json!(path_parameters(false)));
    paths.insert(base.clone(), Value::Object(collection));

    let mut item = Map::new();
    item.insert(
        "get".into(),
        build("get", format!("read the specified {kind_name}"), None, &kind, Vec::new(), "read", ""),
    );
    item.insert(
        "put".into(),
        build(
            "put",
            format!("replace the specified {kind_name}"),
            Some(&kind),
            &kind,
            write_parameters(dialect, false),
            "replace",
            "",
        ),
    );
    item.insert(
        "patch".into(),
        build(
            "patch",
            format!("partially update the specified {kind_name}"),
            Some(PATCH),
            &kind,
            write_parameters(dialect, true),
            "patch",
            "",
        ),
    );
    item.insert(
        "delete".into(),
        build(
            "delete",
            format!("delete a {kind_name}"),
            Some(DELETE_OPTIONS),
            STATUS,
            vec![parameter(
                dialect,
                "dryRun",
                "query",
                "string",
                "When present, indicates that modifications should not be persisted. Valid values are: All.",
            )],
            "delete",
            "",
        ),
    );
    item.insert("parameters".into(), json!(path_parameters(true)));
    paths.insert(format!("{base}/{{name}}"), Value::Object(item));

    if rtype.status_subresource {
        let mut status = Map::new();
        status.insert(
            "get".into(),
            build(
                "get",
                format!("read status of the specified {kind_name}"),
                None,
                &kind,
                Vec::new(),
                "read",
                "Status",
            ),
        );
        status.insert(
            "put".into(),
            build(
                "put",
                format!("replace status of the specified {kind_name}"),
                Some(&kind),
                &kind,
                write_parameters(dialect, false),
                "replace",
                "Status",
            ),
        );
        status.insert(
            "patch".into(),
            build(
                "patch",
                format!("partially update status of the specified {kind_name}"),
                Some(PATCH),
                &kind,
                write_parameters(dialect, true),
                "patch",
                "Status",
            ),
        );
        status.insert("parameters".into(), json!(path_parameters(true)));
        paths.insert(format!("{base}/{{name}}/status"), Value::Object(status));
    }
    if rtype.namespaced {
        let mut all = Map::new();
        all.insert(
            "get".into(),
            build(
                "list",
                format!("list or watch objects of kind {kind_name}"),
                None,
                &list,
                Vec::new(),
                "list",
                "ForAllNamespaces",
            ),
        );
        paths.insert(format!("{root}/{plural}"), Value::Object(all));
    }
}

/// Types served at a group version.
fn served<'a>(store: &'a StoreState, group: &str, version: &str) -> Vec<&'a ResourceType> {
    store.types().filter(|t| t.group == group && t.serves(version)).collect()
}

fn definitions(store: &StoreState, types: &[(&ResourceType, String)], dialect: Dialect) -> Map<String, Value> {
    let mut schemas = meta_schemas(dialect);
    for (rtype, version) in types {
        schemas.insert(definition_name(rtype, version, &rtype.kind), kind_schema(store, rtype, version, dialect));
        schemas.insert(definition_name(rtype, version, &rtype.list_kind), list_schema(rtype, version, dialect));
    }
    schemas
}

fn info() -> Value {
    json!({"title": "Kubernetes", "version": "v1.33.0-simkube"})
}

/// `GET /openapi/v3/{api/v1 | apis/{group}/{version}}`.
pub(crate) fn v3_group_version(store: &StoreState, group: &str, version: &str) -> Result<Value, ApiError> {
    let types = served(store, group, version);
    if types.is_empty() {
        let path = if group.is_empty() { format!("api/{version}") } else { format!("apis/{group}/{version}") };
        return Err(ApiError::unknown_path(&format!("/openapi/v3/{path}")));
    }
    let mut paths = Map::new();
    for rtype in &types {
        type_paths(rtype, version, Dialect::V3, &mut paths);
    }
    let with_versions: Vec<(&ResourceType, String)> = types.iter().map(|t| (*t, version.to_string())).collect();
    Ok(json!({
        "openapi": "3.0.0",
        "info": info(),
        "paths": paths,
        "components": {"schemas": definitions(store, &with_versions, Dialect::V3)},
    }))
}

/// Every served group version, as `api/v1` or `apis/{group}/{version}`.
fn group_versions(store: &StoreState) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for rtype in store.types() {
        for version in &rtype.versions {
            let pair = (rtype.group.clone(), version.clone());
            if !pairs.contains(&pair) {
                pairs.push(pair);
            }
        }
    }
    pairs.sort();
    pairs
}

/// `GET /openapi/v3`: one entry per group version, each URL carrying a hash
/// of its document so clients cache it until it changes (a new CRD, an
/// edited schema).
pub(crate) fn v3_root(store: &StoreState) -> Value {
    let mut paths = Map::new();
    for (group, version) in group_versions(store) {
        let path = if group.is_empty() { format!("api/{version}") } else { format!("apis/{group}/{version}") };
        let Ok(document) = v3_group_version(store, &group, &version) else { continue };
        let mut hasher = DefaultHasher::new();
        document.to_string().hash(&mut hasher);
        let url = format!("/openapi/v3/{path}?hash={:016X}", hasher.finish());
        paths.insert(path, json!({"serverRelativeURL": url}));
    }
    json!({"paths": paths})
}

/// `GET /openapi/v2`: every served type in one Swagger 2.0 document.
pub(crate) fn v2(store: &StoreState) -> Value {
    let mut paths = Map::new();
    let mut types = Vec::new();
    for (group, version) in group_versions(store) {
        for rtype in served(store, &group, &version) {
            type_paths(rtype, &version, Dialect::V2, &mut paths);
            types.push((rtype, version.clone()));
        }
    }
    json!({
        "swagger": "2.0",
        "info": info(),
        "paths": paths,
        "definitions": definitions(store, &types, Dialect::V2),
    })
}

/// Whether an `Accept` header for `/openapi/v2` can take JSON.
pub(crate) fn accepts_json(accept: Option<&str>) -> bool {
    accept.is_none_or(|accept| {
        accept.split(',').any(|range| {
            let media = range.split(';').next().unwrap_or_default().trim();
            matches!(media, "application/json" | "application/*" | "*/*" | "")
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_definitions_as_upstream() {
        let server = ResourceType::namespaced("region.unikorn-cloud.org", "v1alpha1", "Server", "servers");
        assert_eq!(definition_name(&server, "v1alpha1", "Server"), "org.unikorn-cloud.region.v1alpha1.Server");
        assert_eq!(definition_name(&ResourceType::events(), "v1", "Event"), "io.k8s.api.events.v1.Event");
        assert_eq!(definition_name(&ResourceType::core_events(), "v1", "Event"), "io.k8s.api.core.v1.Event");
        assert_eq!(
            operation_id("patch", &server, "v1alpha1", "Namespaced", ""),
            "patchRegionUnikornCloudOrgV1alpha1NamespacedServer"
        );
    }

    #[test]
    fn v2_accepts_json_or_anything_but_not_protobuf_only() {
        assert!(accepts_json(None));
        assert!(accepts_json(Some("application/json")));
        assert!(accepts_json(Some("application/com.github.proto-openapi.spec.v2@v1.0+protobuf, */*")));
        assert!(!accepts_json(Some("application/com.github.proto-openapi.spec.v2@v1.0+protobuf")));
    }
}
