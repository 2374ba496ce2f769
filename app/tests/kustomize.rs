//! `deploy/`: a kustomize base and an example overlay, built with the real
//! `kubectl kustomize`, checked as the API server would read each object
//! (its typed schema: an unknown or misplaced field is an error), with the
//! RBAC the operator needs and no more: the base's ClusterRole (which
//! `rbac.rs` checks against observed use) and one namespaced Role that reads
//! exactly the region Secret the Deployment names.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

fn deploy_dir(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy").join(path)
}

/// `kubectl kustomize DIR`, as YAML documents read into JSON values.
fn build(dir: &str) -> Vec<Value> {
    let output = Command::new("kubectl")
        .arg("kustomize")
        .arg(deploy_dir(dir))
        .output()
        .expect("kubectl runs (.ci/build-control-plane builds it)");
    assert!(output.status.success(), "kubectl kustomize {dir}: {}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8(output.stdout).unwrap();
    let documents: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    documents.into_iter().filter(|d| !d.is_null()).collect()
}

/// Paths in `original` whose value the typed round trip does not give back:
/// fields the kind's schema does not have, or values of the wrong shape.
fn lost_in_round_trip(original: &Value, typed: &Value, path: &str, lost: &mut Vec<String>) {
    match (original, typed) {
        (Value::Object(fields), Value::Object(typed_fields)) => {
            for (key, value) in fields {
                match typed_fields.get(key) {
                    Some(typed_value) => lost_in_round_trip(value, typed_value, &format!("{path}.{key}"), lost),
                    None => lost.push(format!("{path}.{key}")),
                }
            }
        }
        (Value::Array(items), Value::Array(typed_items)) if items.len() == typed_items.len() => {
            for (index, (item, typed_item)) in items.iter().zip(typed_items).enumerate() {
                lost_in_round_trip(item, typed_item, &format!("{path}[{index}]"), lost);
            }
        }
        (a, b) if a == b => {}
        _ => lost.push(format!("{path} ({original} read as {typed})")),
    }
}

fn check_as<T: serde::de::DeserializeOwned + serde::Serialize>(object: &Value) -> Result<(), String> {
    let typed: T = serde_json::from_value(object.clone()).map_err(|e| e.to_string())?;
    let back = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
    let mut lost = Vec::new();
    lost_in_round_trip(object, &back, "", &mut lost);
    if lost.is_empty() { Ok(()) } else { Err(format!("not in the schema: {lost:?}")) }
}

/// Checks one object against its kind's schema; every kind deploy/ ships is
/// known here, so a new one must be added deliberately.
fn check_schema(object: &Value) -> Result<(), String> {
    let kind = object["kind"].as_str().unwrap_or_default();
    match (object["apiVersion"].as_str().unwrap_or_default(), kind) {
        ("v1", "Namespace") => check_as::<Namespace>(object),
        ("v1", "ServiceAccount") => check_as::<ServiceAccount>(object),
        ("v1", "Service") => check_as::<Service>(object),
        ("v1", "Secret") => check_as::<Secret>(object),
        ("apps/v1", "Deployment") => check_as::<Deployment>(object),
        ("networking.k8s.io/v1", "NetworkPolicy") => check_as::<NetworkPolicy>(object),
        ("policy/v1", "PodDisruptionBudget") => check_as::<PodDisruptionBudget>(object),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => check_as::<ClusterRole>(object),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => check_as::<ClusterRoleBinding>(object),
        ("rbac.authorization.k8s.io/v1", "Role") => check_as::<Role>(object),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => check_as::<RoleBinding>(object),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => check_as::<CustomResourceDefinition>(object),
        (version, kind) => Err(format!("{version} {kind} is not a kind deploy/ is expected to ship")),
    }
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

#[test]
fn base_and_example_overlay_build_into_objects_valid_against_their_schemas() {
    for dir in ["base", "overlays/example"] {
        let objects = build(dir);
        assert!(objects.len() >= 7, "{dir}: {} objects", objects.len());
        for object in &objects {
            let name = format!("{} {}", object["kind"], object["metadata"]["name"]);
            check_schema(object).unwrap_or_else(|e| panic!("{dir}: {name}: {e}"));
            let namespaced = !matches!(
                object["kind"].as_str(),
                Some("Namespace" | "ClusterRole" | "ClusterRoleBinding" | "CustomResourceDefinition")
            );
            // Only the example's Region reader lives in the region controller's namespace.
            let region_reader = object["metadata"]["name"] == "server-controller-regions";
            if namespaced && !region_reader {
                assert_eq!(object["metadata"]["namespace"], "server-controller", "{dir}: {name}");
            }
        }
    }
}

#[test]
fn the_example_overlay_configures_a_region_the_operator_can_read() {
    let objects = build("overlays/example");
    let deployment = find(&objects, "Deployment", "server-controller");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "registry.example.com/unikorn/server-controller:0.1.0");
    let args: Vec<&str> = container["args"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    let flag = args.iter().find_map(|a| a.strip_prefix("--openstack-secret=")).expect("an --openstack-secret flag");
    let (region, secret) = flag.split_once('=').unwrap();
    let (namespace, secret_name) = secret.split_once('/').unwrap();
    assert_eq!((region, namespace), ("region-a", "server-controller"));

    // The Secret exists and holds a configuration the operator accepts.
    let secret = find(&objects, "Secret", secret_name);
    let data: BTreeMap<String, Vec<u8>> = secret["data"]
        .as_object()
        .expect("data")
        .iter()
        .map(|(key, value)| {
            use base64::Engine as _;
            (key.clone(), base64::engine::general_purpose::STANDARD.decode(value.as_str().unwrap()).unwrap())
        })
        .collect();
    let config = server_openstack::OpenStackConfig::from_secret_data(&data).expect("the example config parses");
    config.validate().expect("the example config is valid");

    // Secrets are readable only by that name, only in the operator's namespace.
    let mut secret_rules = Vec::new();
    for object in &objects {
        for rule in object["rules"].as_array().into_iter().flatten() {
            let resources = rule["resources"].as_array().unwrap();
            if resources.iter().any(|r| r == "secrets" || r == "*") {
                secret_rules.push((object["kind"].clone(), object["metadata"]["namespace"].clone(), rule.clone()));
            }
        }
    }
    assert_eq!(secret_rules.len(), 1, "{secret_rules:?}");
    let (kind, role_namespace, rule) = &secret_rules[0];
    assert_eq!((kind.as_str(), role_namespace.as_str()), (Some("Role"), Some("server-controller")));
    assert_eq!(rule["resourceNames"], serde_json::json!([secret_name]));
    assert_eq!(rule["verbs"], serde_json::json!(["get"]));

    // Regions are read in the namespace the flag names: list and watch, no more.
    let region_namespace =
        args.iter().find_map(|a| a.strip_prefix("--region-namespace=")).expect("a --region-namespace flag");
    let role = find(&objects, "Role", "server-controller-regions");
    assert_eq!(role["metadata"]["namespace"], region_namespace);
    assert_eq!(
        role["rules"],
        serde_json::json!([{"apiGroups": ["region.unikorn-cloud.org"], "resources": ["regions"], "verbs": ["list", "watch"]}])
    );
    let binding = find(&objects, "RoleBinding", "server-controller-regions");
    assert_eq!(binding["metadata"]["namespace"], region_namespace);
    assert_eq!(binding["subjects"][0]["name"], deployment["spec"]["template"]["spec"]["serviceAccountName"]);

    // The overlay adds no other rule to what the base grants.
    let base = build("base");
    assert_eq!(find(&objects, "ClusterRole", "server-controller"), find(&base, "ClusterRole", "server-controller"));
}

#[test]
fn the_metrics_port_is_a_service_reachable_only_from_monitoring() {
    let objects = build("base");
    let service = find(&objects, "Service", "server-controller-metrics");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
    let deployment = find(&objects, "Deployment", "server-controller");
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    for (key, value) in service["spec"]["selector"].as_object().unwrap() {
        assert_eq!(&labels[key], value, "the Service selects the operator's pods");
    }
    let policy = find(&objects, "NetworkPolicy", "server-controller");
    assert_eq!(policy["spec"]["policyTypes"], serde_json::json!(["Ingress"]));
    let ingress = policy["spec"]["ingress"].as_array().unwrap();
    assert_eq!(ingress.len(), 1);
    assert_eq!(ingress[0]["ports"], serde_json::json!([{"port": "http", "protocol": "TCP"}]));
}
