//! SimKube against the reference: the same requests, sent to a real
//! kube-apiserver and to SimKube, both serving our CRDs, answer alike. Every
//! verb and path the operator and the kubectl tests use, and the bad ones
//! (a stale resourceVersion, an invalid body, an unknown field, a watch from
//! a compacted version, a bad continue token, a status write to the main
//! resource) are compared by status code, `reason`, `details` and the body's
//! shape. A difference fails the test unless [`KNOWN_LENIENCIES`] names it
//! with its reason.
//!
//! Needs the control plane of `.ci/build-control-plane` (skipped without it
//! outside CI).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use http_body_util::BodyExt as _;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};
use server_e2e::control_plane::{ControlPlane, control_plane_or_skip};
use server_sim_testbed::KubeBed;
use server_simkube::SimKube;

const NAMESPACE: &str = "diff";
const SERVERS: &str = "/apis/region.unikorn-cloud.org/v1alpha1/namespaces/diff/servers";
const FLAVOR: &str = "8c2b1d54-2a56-4bb3-9b0c-1d2f6e1f4a01";
const IMAGE: &str = "0e8d4f4c-58a4-4d55-93b5-0b65e1c7c3f2";

/// Differences kept on purpose, each with why: `(case, what differs, why)`.
const KNOWN_LENIENCIES: &[(&str, &str, &str)] = &[(
    "change an immutable field",
    "kube-apiserver refuses it (422, the CRD's CEL rule); SimKube accepts it",
    "SimKube does not run CEL rules (x-kubernetes-validations): the operator never writes a spec, and the real \
     server's own tests (tests/reference_*, app/tests/real_apiserver.rs) check the rules users meet",
)];

/// One request of the script.
struct Case {
    name: &'static str,
    method: &'static str,
    path: String,
    content_type: &'static str,
    accept: &'static str,
    body: Option<Value>,
}

/// The representation the operator asks a write's answer in (`server_writes`).
const METADATA_ONLY: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// `case` asking for its answer as the object's metadata alone.
fn as_metadata(case: Case) -> Case {
    Case { accept: METADATA_ONLY, ..case }
}

fn case(name: &'static str, method: &'static str, path: impl Into<String>, body: Option<Value>) -> Case {
    let content_type = match method {
        "PATCH" => "application/merge-patch+json",
        _ => "application/json",
    };
    Case { name, method, path: path.into(), content_type, accept: "application/json", body }
}

fn server(name: &str) -> Value {
    json!({
        "apiVersion": "region.unikorn-cloud.org/v1alpha1",
        "kind": "Server",
        "metadata": { "name": name, "namespace": NAMESPACE },
        "spec": { "flavorID": FLAVOR, "image": { "id": IMAGE } },
    })
}

/// The script; `{rv}` in a path or body is the first Server's current resourceVersion.
/// A Server holding a finalizer for each of `servers` others, as a shared
/// Network holds one reference per Server: etcd refuses a write over its
/// request limit (1.5 MiB) whatever the API server thinks of it.
fn referenced_by(name: &str, servers: usize) -> Value {
    let mut object = server(name);
    let finalizers: Vec<String> =
        (0..servers).map(|i| server_core::model::reference_finalizer(&format!("server-{i:05}"))).collect();
    object["metadata"]["finalizers"] = json!(finalizers);
    object
}

fn script() -> Vec<Case> {
    let one = format!("{SERVERS}/one");
    let mut unknown_field = server("strict");
    unknown_field["spec"]["flavourID"] = json!(FLAVOR);
    let mut invalid = server("invalid");
    invalid["spec"]["flavorID"] = json!("m1.small");
    let mut stale = server("one");
    stale["metadata"]["resourceVersion"] = json!("1");
    let mut no_version = server("one");
    no_version["spec"]["pause"] = json!(true);
    vec![
        case("create", "POST", SERVERS, Some(server("one"))),
        case("create again", "POST", SERVERS, Some(server("one"))),
        case("create a second", "POST", SERVERS, Some(server("two"))),
        case("get", "GET", one.clone(), None),
        case("get missing", "GET", format!("{SERVERS}/missing"), None),
        case("list", "GET", SERVERS, None),
        case("list a page", "GET", format!("{SERVERS}?limit=1"), None),
        case("list with a bad continue token", "GET", format!("{SERVERS}?limit=1&continue=not-a-token"), None),
        case("create with an invalid field", "POST", SERVERS, Some(invalid)),
        case(
            "create with an unknown field, strict",
            "POST",
            format!("{SERVERS}?fieldValidation=Strict"),
            Some(unknown_field.clone()),
        ),
        case("create with an unknown field, default", "POST", SERVERS, Some(unknown_field)),
        case("replace with a stale resourceVersion", "PUT", one.clone(), Some(stale)),
        case("replace without a resourceVersion", "PUT", one.clone(), Some(no_version)),
        case("merge-patch the spec", "PATCH", one.clone(), Some(json!({ "spec": { "pause": true } }))),
        case("merge-patch that changes nothing", "PATCH", one.clone(), Some(json!({ "spec": { "pause": true } }))),
        case("merge-patch an invalid spec", "PATCH", one.clone(), Some(json!({ "spec": { "flavorID": "x" } }))),
        case(
            "merge-patch with a stale resourceVersion",
            "PATCH",
            one.clone(),
            Some(json!({ "metadata": { "resourceVersion": "1" }, "spec": { "pause": false } })),
        ),
        case("status on the main resource", "PATCH", one.clone(), Some(json!({ "status": { "phase": "Running" } }))),
        case(
            "spec on the status subresource",
            "PATCH",
            format!("{one}/status"),
            Some(json!({ "spec": { "pause": false }, "status": { "phase": "Pending" } })),
        ),
        as_metadata(case(
            "merge-patch the status, answered as metadata",
            "PATCH",
            format!("{one}/status"),
            Some(json!({ "status": { "phase": "Running" } })),
        )),
        as_metadata(case(
            "merge-patch an annotation, answered as metadata",
            "PATCH",
            one.clone(),
            Some(json!({ "metadata": { "annotations": { "example.com/note": "x" } } })),
        )),
        as_metadata(case(
            "merge-patch the status with a stale resourceVersion, answered as metadata",
            "PATCH",
            format!("{one}/status"),
            Some(json!({ "metadata": { "resourceVersion": "1" }, "status": { "phase": "Pending" } })),
        )),
        as_metadata(case("get, answered as metadata", "GET", one.clone(), None)),
        case("status of a missing Server", "PATCH", format!("{SERVERS}/missing/status"), Some(json!({ "status": {} }))),
        case(
            "change an immutable field",
            "PATCH",
            format!("{SERVERS}/two"),
            Some(json!({ "spec": { "infrastructureRef": "host-2" } })),
        ),
        case(
            "delete with a stale resourceVersion precondition",
            "DELETE",
            format!("{SERVERS}/two"),
            Some(json!({ "kind": "DeleteOptions", "apiVersion": "v1", "preconditions": { "resourceVersion": "1" } })),
        ),
        case("add a finalizer", "PATCH", one.clone(), Some(json!({ "metadata": { "finalizers": ["example.com/x"] } }))),
        case(
            "delete with a wrong uid precondition",
            "DELETE",
            format!("{SERVERS}/two"),
            Some(json!({ "kind": "DeleteOptions", "apiVersion": "v1", "preconditions": { "uid": "not-its-uid" } })),
        ),
        case("delete with a finalizer", "DELETE", one.clone(), None),
        case("get while deleting", "GET", one.clone(), None),
        case(
            "new finalizer while deleting",
            "PATCH",
            one.clone(),
            Some(json!({ "metadata": { "finalizers": ["example.com/x", "example.com/y"] } })),
        ),
        case("last finalizer removed", "PATCH", one.clone(), Some(json!({ "metadata": { "finalizers": null } }))),
        case("get after removal", "GET", one, None),
        case("delete missing", "DELETE", format!("{SERVERS}/missing"), None),
        case(
            "watch from a compacted version",
            "GET",
            format!("{SERVERS}?watch=true&resourceVersion=1&timeoutSeconds=1"),
            None,
        ),
        case("bad JSON", "POST", SERVERS, Some(Value::String("{not json".into()))),
        case("30,000 finalizers (1.4 MB)", "POST", SERVERS, Some(referenced_by("held", 30_000))),
        case(
            "40,000 finalizers (1.9 MB): over etcd's request limit",
            "POST",
            SERVERS,
            Some(referenced_by("over", 40_000)),
        ),
        case("unknown resource", "GET", "/apis/region.unikorn-cloud.org/v1alpha1/namespaces/diff/widgets", None),
    ]
}

/// What is compared of an answer.
#[derive(Debug, PartialEq, Eq, Clone)]
struct Shape {
    code: u16,
    kind: String,
    reason: String,
    details: BTreeSet<String>,
    /// For a Server: whether `spec.pause` and `status.phase` are set, what
    /// the writes to each did. For a list: how many items, and whether it continues.
    facts: Vec<String>,
}

async fn send(client: &Client, case: &Case) -> (Shape, String, Value) {
    let mut request = http::Request::builder().method(case.method).uri(&case.path);
    request = request.header("content-type", case.content_type).header("accept", case.accept);
    let body = match &case.body {
        Some(Value::String(raw)) => raw.clone().into_bytes(),
        Some(value) => value.to_string().into_bytes(),
        None => Vec::new(),
    };
    let request = request.body(kube::client::Body::from(body)).unwrap();
    let response = client.send(request).await.unwrap_or_else(|e| panic!("{}: no answer: {e}", case.name));
    let code = response.status().as_u16();
    let bytes = response.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    // A watch answers a stream of events: compare its first.
    let text = String::from_utf8_lossy(&bytes);
    let first = text.lines().next().unwrap_or_default();
    // kube-apiserver indents the Status it answers a request for metadata
    // alone: one JSON value over several lines.
    let value: Value = serde_json::from_str(first).or_else(|_| serde_json::from_str(&text)).unwrap_or(Value::Null);
    (shape(code, &value), first.chars().take(600).collect(), value)
}

fn shape(code: u16, value: &Value) -> Shape {
    let (value, mut facts) = match value.get("type").and_then(Value::as_str) {
        Some(kind) if value.get("object").is_some() => (&value["object"], vec![format!("watch event {kind}")]),
        _ => (value, Vec::new()),
    };
    let mut details = BTreeSet::new();
    if let Some(found) = value["details"].as_object() {
        for (key, field) in found {
            match key.as_str() {
                "causes" => {
                    for cause in field.as_array().into_iter().flatten() {
                        details.insert(format!("cause {} {}", cause["reason"], cause["field"]));
                    }
                }
                "uid" => {
                    details.insert("uid".into());
                }
                _ => {
                    details.insert(format!("{key}={field}"));
                }
            }
        }
    }
    if value["kind"] == "Server" {
        facts.push(format!("pause={}", value["spec"]["pause"]));
        facts.push(format!("phase={}", value["status"]["phase"]));
        facts.push(format!("finalizers={}", value["metadata"]["finalizers"]));
        facts.push(format!("deleting={}", value["metadata"]["deletionTimestamp"].is_string()));
    }
    if value["kind"] == "PartialObjectMetadata" {
        facts.push(format!("apiVersion={}", value["apiVersion"]));
        facts.push(format!("name={}", value["metadata"]["name"]));
        facts.push(format!("annotations={}", value["metadata"]["annotations"]));
        facts.push(format!("has spec={}, has status={}", value.get("spec").is_some(), value.get("status").is_some()));
    }
    if let Some(items) = value["items"].as_array() {
        facts.push(format!("items={}", items.len()));
        facts.push(format!("continues={}", value["metadata"]["continue"].as_str().is_some_and(|c| !c.is_empty())));
    }
    if value["kind"] == "Status" && value["code"].is_u64() {
        facts.push(format!("status code={}", value["code"]));
    }
    Shape {
        code,
        kind: value["kind"].as_str().unwrap_or_default().to_owned(),
        reason: value["reason"].as_str().unwrap_or_default().to_owned(),
        details,
        facts,
    }
}

/// Each case's answer: its shape, and the start of its body (printed on a difference).
/// A Server answer also says whether its resourceVersion is the one the
/// last answer for that Server carried: a write that changes nothing keeps
/// it (no new version, no watch event), and one that changes something
/// does not.
async fn run_script(client: &Client) -> Vec<(Shape, String)> {
    let mut shapes = Vec::new();
    let mut versions = std::collections::HashMap::new();
    for case in script() {
        let (mut shape, body, value) = send(client, &case).await;
        if value["kind"] == "Server" || value["kind"] == "PartialObjectMetadata" {
            let name = value["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            let version = value["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_owned();
            let same = versions.insert(name, version.clone()).is_some_and(|last| last == version);
            shape.facts.push(format!("same resourceVersion as the last answer={same}"));
        }
        shapes.push((shape, body));
    }
    shapes
}

async fn reference_client(plane: &ControlPlane) -> Client {
    let kubeconfig = Kubeconfig::read_from(plane.kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.unwrap();
    Client::try_from(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simkube_answers_as_kube_apiserver_does() {
    let Some(plane) = control_plane_or_skip() else { return };
    plane.kubectl_ok(&["create", "namespace", NAMESPACE]);
    let crd = serde_json::to_string(&server_kube::crd::server_crd()).unwrap();
    let applied = plane.kubectl_with_input(&["apply", "--server-side", "-f", "-"], &crd);
    server_e2e::control_plane::expect_success("installing the Server CRD", &applied);
    plane.kubectl_ok(&["wait", "--for=condition=Established", "--timeout=60s", "crd/servers.region.unikorn-cloud.org"]);
    // A new CRD's first writes can race its storage's start.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let reference = run_script(&reference_client(&plane).await).await;

    let bed = KubeBed::serve(SimKube::builder().seed(1).build(), ([127, 0, 0, 1], 0).into(), NAMESPACE).await.unwrap();
    let simkube = run_script(&bed.client).await;

    let mut differences = Vec::new();
    for ((case, (theirs, their_body)), (ours, our_body)) in script().iter().zip(&reference).zip(&simkube) {
        if theirs == ours {
            if std::env::var_os("REFERENCE_VERBOSE").is_some() {
                eprintln!("same {}: {theirs:?}\n    {their_body}", case.name);
            }
            continue;
        }
        let known = KNOWN_LENIENCIES.iter().any(|(name, _, _)| *name == case.name);
        eprintln!(
            "{} {}: {}\n  kube-apiserver: {theirs:?}\n    {their_body}\n  SimKube:        {ours:?}\n    {our_body}",
            if known { "known" } else { "DIFFERS" },
            case.name,
            case.method
        );
        if !known {
            differences.push(case.name);
        }
    }
    assert!(differences.is_empty(), "SimKube answers unlike kube-apiserver {}: {differences:?}", plane.version);
}
