//! `deploy/base/rbac.yaml` grants exactly what the operator uses.
//!
//! The demo runs the real operator against SimKube, which counts every
//! request by verb and resource (`api_requests.by_verb_and_resource`, the
//! operator's requests only). Each (verb, resource) seen must be granted, and
//! each grant must have been seen: no wildcard, no verb on a resource the
//! operator never used.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// `(apiGroup, resource, verb)`.
type Grant = (String, String, String);

fn deploy_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/base").join(name)
}

/// The YAML documents of a file, as JSON values (empty documents dropped).
fn documents(name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(deploy_file(name)).unwrap();
    let documents: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    documents.into_iter().filter(|d| !d.is_null()).collect()
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| items.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

/// The ClusterRole's rules, flattened; panics on anything broader than a
/// plain (group, resource, verb) grant.
fn granted(role: &Value) -> BTreeSet<Grant> {
    let mut grants = BTreeSet::new();
    for rule in role["rules"].as_array().expect("rules") {
        assert!(rule.get("nonResourceURLs").is_none(), "non-resource URLs are not needed: {rule}");
        assert!(rule.get("resourceNames").is_none(), "resourceNames are not expected: {rule}");
        let (groups, resources, verbs) =
            (strings(&rule["apiGroups"]), strings(&rule["resources"]), strings(&rule["verbs"]));
        assert!(!groups.is_empty() && !resources.is_empty() && !verbs.is_empty(), "incomplete rule: {rule}");
        for value in groups.iter().chain(&resources).chain(&verbs) {
            assert!(!value.contains('*'), "wildcards grant more than the operator uses: {rule}");
        }
        for group in &groups {
            for resource in &resources {
                for verb in &verbs {
                    assert!(
                        grants.insert((group.clone(), resource.clone(), verb.clone())),
                        "granted twice: {verb} {group}/{resource}"
                    );
                }
            }
        }
    }
    grants
}

/// The API group of a SimKube resource label (`servers/status` -> the servers' group).
fn group_of(label: &str, custom: &BTreeMap<String, String>) -> String {
    let plural = label.split('/').next().unwrap_or(label);
    match plural {
        "events" => "events.k8s.io".into(),
        "leases" => "coordination.k8s.io".into(),
        "customresourcedefinitions" => "apiextensions.k8s.io".into(),
        _ => custom.get(plural).cloned().unwrap_or_else(|| panic!("unknown resource {label:?}")),
    }
}

/// What the operator did during a demo run, as (group, resource, verb).
/// 40 Servers, so that the rarest use is seen: a Server read live (`get
/// servers`) for user data its cached copy does not hold, which the passes'
/// timing decides. At 12 Servers, 5 runs in 13 read none; at 40, each of 6
/// runs read two or three.
fn used_by_the_operator() -> BTreeSet<Grant> {
    let output = Command::new(env!("CARGO_BIN_EXE_server-controller"))
        .args(["demo", "--servers", "40", "--output", "json", "--timeout", "180s"])
        .output()
        .expect("the demo runs");
    let report: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("demo JSON ({e}): {}", String::from_utf8_lossy(&output.stderr)));
    assert!(output.status.success(), "the demo failed: {report}");

    let custom: BTreeMap<String, String> =
        server_kube::all_crds().into_iter().map(|crd| (crd.spec.names.plural, crd.spec.group)).collect();
    let by_verb = report["api_requests"]["by_verb_and_resource"].as_object().expect("by_verb_and_resource");
    by_verb
        .keys()
        .filter_map(|key| key.split_once(' '))
        // Discovery documents are non-resource URLs every authenticated user may read.
        .filter(|(_, resource)| *resource != "discovery")
        .map(|(verb, resource)| (group_of(resource, &custom), resource.to_string(), verb.to_string()))
        .collect()
}

#[test]
fn rbac_grants_exactly_what_the_operator_uses() {
    let rbac = documents("rbac.yaml");
    let roles: Vec<&Value> = rbac.iter().filter(|d| d["kind"] == "ClusterRole").collect();
    assert_eq!(roles.len(), 1, "one ClusterRole");
    let mut granted = granted(roles[0]);
    granted.extend(leader_election_grants());
    let used = used_by_the_operator();
    assert!(
        used.iter().any(|(_, resource, _)| resource == "servers/status"),
        "the demo exercised the operator: {used:?}"
    );

    let missing: Vec<_> = used.difference(&granted).collect();
    assert!(missing.is_empty(), "used but not granted: {missing:?}");
    let unused: Vec<_> = granted.difference(&used).collect();
    assert!(unused.is_empty(), "granted but never used: {unused:?}");
}

/// The grants on the kinds the operator reads but does not own are
/// server-kube's table of them (`read_kinds`): a consumed kind added without
/// its grant, or a grant left from a removed one, fails here without a demo.
#[test]
fn the_grants_on_read_kinds_are_the_tables() {
    let rbac = documents("rbac.yaml");
    let roles: Vec<&Value> = rbac.iter().filter(|d| d["kind"] == "ClusterRole").collect();
    assert_eq!(roles.len(), 1, "one ClusterRole");
    let kinds = server_kube::read_kinds();
    let groups: BTreeSet<&str> = kinds.iter().map(|kind| kind.group.as_str()).collect();
    let granted: BTreeSet<Grant> = granted(roles[0])
        .into_iter()
        // The Server's own grants are checked against use above.
        .filter(|(group, resource, _)| groups.contains(group.as_str()) && resource.split('/').next() != Some("servers"))
        .collect();
    let expected: BTreeSet<Grant> = kinds
        .iter()
        .flat_map(|kind| kind.verbs().iter().map(|verb| (kind.group.clone(), kind.plural.clone(), (*verb).to_owned())))
        .collect();
    assert_eq!(granted, expected, "deploy/base/rbac.yaml's rules for the consumed kinds and OpenstackIdentities");
}

/// The leader Lease grants: a Role in the operator's namespace, bound to its
/// service account, holding leases and nothing else.
fn leader_election_grants() -> BTreeSet<Grant> {
    let documents = documents("leader-election-rbac.yaml");
    let account = documents_of("rbac.yaml", "ServiceAccount");
    let role = documents.iter().find(|d| d["kind"] == "Role").expect("a Role for the Lease");
    assert_eq!(role["metadata"]["namespace"], account["metadata"]["namespace"], "the Lease is the operator's own");
    let binding = documents.iter().find(|d| d["kind"] == "RoleBinding").expect("a RoleBinding for the Lease");
    assert_eq!(binding["metadata"]["namespace"], account["metadata"]["namespace"]);
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["name"], account["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["namespace"], account["metadata"]["namespace"]);
    let grants = granted(role);
    assert!(grants.iter().all(|(group, resource, _)| group == "coordination.k8s.io" && resource == "leases"));
    grants
}

fn documents_of(file: &str, kind: &str) -> Value {
    documents(file).into_iter().find(|d| d["kind"] == kind).unwrap_or_else(|| panic!("no {kind} in {file}"))
}

#[test]
fn binding_and_deployment_use_the_service_account() {
    let rbac = documents("rbac.yaml");
    let find = |kind: &str| rbac.iter().find(|d| d["kind"] == kind).unwrap_or_else(|| panic!("no {kind} in rbac.yaml"));
    let account = find("ServiceAccount");
    let (name, namespace) = (&account["metadata"]["name"], &account["metadata"]["namespace"]);
    assert!(
        rbac.iter().any(|d| d["kind"] == "Namespace" && d["metadata"]["name"] == *namespace),
        "the namespace is created"
    );

    let binding = find("ClusterRoleBinding");
    assert_eq!(binding["roleRef"]["kind"], "ClusterRole");
    assert_eq!(binding["roleRef"]["name"], find("ClusterRole")["metadata"]["name"]);
    let subjects = binding["subjects"].as_array().expect("subjects");
    assert_eq!(subjects.len(), 1, "bound to the operator only");
    assert_eq!(subjects[0]["kind"], "ServiceAccount");
    assert_eq!((&subjects[0]["name"], &subjects[0]["namespace"]), (name, namespace));

    let deployment =
        documents("deployment.yaml").into_iter().find(|d| d["kind"] == "Deployment").expect("a Deployment");
    assert_eq!(&deployment["metadata"]["namespace"], namespace);
    assert_eq!(&deployment["spec"]["template"]["spec"]["serviceAccountName"], name);
}
