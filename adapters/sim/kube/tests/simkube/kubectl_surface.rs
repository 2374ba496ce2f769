//! What kubectl needs beyond kube-rs: OpenAPI v2 and v3 built from the CRD
//! schemas, core/v1 Events as a view of the events.k8s.io ones, Namespaces
//! and their lifecycle, server-side dry run, field validation and pruning.
//! Over real HTTP, as kubectl talks to it.

use serde_json::{Value, json};
use server_simkube::SimKube;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::sim;

/// One HTTP/1.0 exchange: (status code, response head, body as JSON).
async fn http(sim: &SimKube, method: &str, path: &str, content_type: &str, body: &Value) -> (u16, String, Value) {
    let served = sim.serve("127.0.0.1:0".parse().expect("address")).await.expect("serves");
    let mut stream = tokio::net::TcpStream::connect(served.addr()).await.expect("connects");
    let body = if body.is_null() { String::new() } else { body.to_string() };
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: sim\r\nAccept: application/json\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("sends");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("reads");
    served.shutdown();
    let (head, body) = response.split_once("\r\n\r\n").expect("a response head");
    let code = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).expect("a status code");
    (code, head.to_string(), serde_json::from_str(body).unwrap_or(Value::Null))
}

async fn get(sim: &SimKube, path: &str) -> (u16, Value) {
    let (code, _, body) = http(sim, "GET", path, "application/json", &Value::Null).await;
    (code, body)
}

const WIDGETS: &str = "/apis/test.simkube.io/v1/namespaces/default/widgets";

fn widget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "test.simkube.io/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec})
}

#[tokio::test]
async fn openapi_v3_describes_custom_resources_for_explain_and_validation() {
    let sim = sim();
    let (code, root) = get(&sim, "/openapi/v3").await;
    assert_eq!(code, 200);
    let url = root["paths"]["apis/test.simkube.io/v1"]["serverRelativeURL"].as_str().expect("the group is listed");
    assert!(url.starts_with("/openapi/v3/apis/test.simkube.io/v1?hash="), "{url}");
    assert!(root["paths"].get("api/v1").is_some(), "core types are listed");

    let (code, document) = get(&sim, url).await;
    assert_eq!(code, 200);
    let schema = &document["components"]["schemas"]["io.simkube.test.v1.Widget"];
    assert_eq!(
        schema["x-kubernetes-group-version-kind"],
        json!([{"group": "test.simkube.io", "version": "v1", "kind": "Widget"}])
    );
    assert_eq!(schema["properties"]["spec"]["properties"]["size"]["type"], "integer", "the CRD's own schema");
    assert_eq!(
        schema["properties"]["metadata"]["allOf"][0]["$ref"],
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    // kubectl's query parameter verifier reads the PATCH operation of the kind.
    let patch = &document["paths"]["/apis/test.simkube.io/v1/namespaces/{namespace}/widgets/{name}"]["patch"];
    assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Widget");
    let parameters: Vec<&str> =
        patch["parameters"].as_array().expect("parameters").iter().filter_map(|p| p["name"].as_str()).collect();
    for wanted in ["dryRun", "fieldValidation", "fieldManager"] {
        assert!(parameters.contains(&wanted), "{wanted} missing from {parameters:?}");
    }
    // No strategic merge patch for custom resources, as on a real server.
    assert!(patch["requestBody"]["content"].get("application/strategic-merge-patch+json").is_none());

    let (code, v2) = get(&sim, "/openapi/v2").await;
    assert_eq!(code, 200);
    assert_eq!(v2["swagger"], "2.0");
    assert_eq!(
        v2["definitions"]["io.simkube.test.v1.Widget"]["properties"]["spec"]["properties"]["size"]["type"],
        "integer"
    );
    assert_eq!(get(&sim, "/openapi/v3/apis/nothing.io/v1").await.0, 404);
}

#[tokio::test]
async fn the_v3_hash_changes_with_the_schema() {
    let sim = sim();
    let url = |root: &Value| root["paths"]["apis/test.simkube.io/v1"]["serverRelativeURL"].as_str().map(str::to_string);
    let before = url(&get(&sim, "/openapi/v3").await.1);
    let mut crd = sim.store().get("customresourcedefinitions", None, "widgets.test.simkube.io").expect("the CRD");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"] = json!("changed");
    sim.store().insert("customresourcedefinitions", crd).expect("CRD updated");
    assert_ne!(before, url(&get(&sim, "/openapi/v3").await.1), "a client cache keyed by the hash must refetch");
}

#[tokio::test]
async fn core_events_are_the_events_k8s_io_events() {
    let sim = sim();
    let event = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "w.1", "namespace": "default"},
        "regarding": {"kind": "Widget", "name": "w", "namespace": "default", "uid": "u-1"},
        "note": "attempt 2/3", "reason": "Retrying", "type": "Normal", "action": "Retry",
        "reportingController": "widget-controller", "reportingInstance": "pod-1",
        "eventTime": "2026-01-01T00:00:00.000000Z",
    });
    let (code, _, _) =
        http(&sim, "POST", "/apis/events.k8s.io/v1/namespaces/default/events", "application/json", &event).await;
    assert_eq!(code, 201);

    // kubectl describe's query.
    let selector =
        "involvedObject.kind=Widget,involvedObject.name=w,involvedObject.namespace=default,involvedObject.uid=u-1";
    let (code, list) =
        get(&sim, &format!("/api/v1/namespaces/default/events?fieldSelector={selector}&limit=500")).await;
    assert_eq!(code, 200);
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{list}");
    assert_eq!(items[0]["apiVersion"], "v1");
    assert_eq!(items[0]["message"], "attempt 2/3");
    assert_eq!(items[0]["involvedObject"]["uid"], "u-1");
    assert_eq!(items[0]["reportingComponent"], "widget-controller");
    let (_, other) = get(&sim, "/api/v1/namespaces/default/events?fieldSelector=involvedObject.uid=u-2").await;
    assert_eq!(other["items"], json!([]));

    // A write through the core view lands in the one store.
    let patch = json!({"message": "attempt 3/3"});
    let (code, _, _) =
        http(&sim, "PATCH", "/api/v1/namespaces/default/events/w.1", "application/merge-patch+json", &patch).await;
    assert_eq!(code, 200);
    let (_, stored) = get(&sim, "/apis/events.k8s.io/v1/namespaces/default/events/w.1").await;
    assert_eq!(stored["note"], "attempt 3/3");
    assert!(stored.get("message").is_none(), "{stored}");
    // Direct store access by plural still means the one Event type.
    assert_eq!(sim.store().list("events", Some("default")).len(), 1);
}

#[tokio::test]
async fn namespaces_exist_and_strict_admission_refuses_missing_ones() {
    let sim = SimKube::builder().strict_namespaces().build();
    let (code, list) = get(&sim, "/api/v1/namespaces").await;
    assert_eq!(code, 200);
    let names: Vec<&str> =
        list["items"].as_array().expect("items").iter().filter_map(|n| n["metadata"]["name"].as_str()).collect();
    assert_eq!(names, ["default", "kube-node-lease", "kube-public", "kube-system"]);
    assert_eq!(list["items"][0]["status"]["phase"], "Active");

    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}, "spec": {}});
    let (code, _, status) =
        http(&sim, "POST", "/apis/coordination.k8s.io/v1/namespaces/team-a/leases", "application/json", &lease).await;
    assert_eq!(code, 404, "{status}");
    assert_eq!(status["message"], "namespaces \"team-a\" not found");
    assert_eq!(status["details"], json!({"name": "team-a", "kind": "namespaces"}));

    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}});
    assert_eq!(http(&sim, "POST", "/api/v1/namespaces", "application/json", &namespace).await.0, 201);
    assert_eq!(
        http(&sim, "POST", "/apis/coordination.k8s.io/v1/namespaces/team-a/leases", "application/json", &lease).await.0,
        201
    );

    // Deleting a namespace deletes what it holds, then itself.
    assert_eq!(http(&sim, "DELETE", "/api/v1/namespaces/team-a", "application/json", &Value::Null).await.0, 200);
    assert_eq!(get(&sim, "/api/v1/namespaces/team-a").await.0, 404);
    assert!(sim.store().list("leases", Some("team-a")).is_empty());

    // kubectl's typed commands send protobuf, which SimKube cannot decode: 415, not a parse error.
    let (code, _, status) =
        http(&sim, "POST", "/api/v1/namespaces", "application/vnd.kubernetes.protobuf", &namespace).await;
    assert_eq!((code, status["reason"].as_str()), (415, Some("UnsupportedMediaType")));
}

#[tokio::test]
async fn a_namespace_with_finalized_objects_terminates_until_they_go() {
    let sim = sim();
    let mut held = widget("held", json!({"size": 1}));
    held["metadata"]["namespace"] = json!("team-b");
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    sim.store().create("widgets", held).expect("created");
    sim.store().delete("namespaces", None, "team-b").expect("deletion starts");
    let namespace = sim.store().get("namespaces", None, "team-b").expect("still there");
    assert_eq!(namespace["status"]["phase"], "Terminating");
    let error = sim.store().create("widgets", {
        let mut late = widget("late", json!({"size": 1}));
        late["metadata"]["namespace"] = json!("team-b");
        late
    });
    assert_eq!(error.map_err(|e| e.code), Err(403), "no new content in a terminating namespace");

    sim.store()
        .patch(
            "widgets",
            Some("team-b"),
            "held",
            &server_simkube::Patch::Merge(server_simkube::PatchKind::Merge, json!({"metadata": {"finalizers": null}})),
        )
        .expect("finalizer removed");
    assert!(sim.store().get("namespaces", None, "team-b").is_none(), "the empty namespace goes");
}

#[tokio::test]
async fn dry_run_writes_answer_without_storing() {
    let sim = sim();
    let version = sim.resource_version();
    let (code, _, created) =
        http(&sim, "POST", &format!("{WIDGETS}?dryRun=All"), "application/json", &widget("w", json!({"size": 1})))
            .await;
    assert_eq!(code, 201);
    assert_eq!(created["metadata"]["name"], "w");
    assert!(created["metadata"]["uid"].is_string());
    assert_eq!(get(&sim, &format!("{WIDGETS}/w")).await.0, 404, "nothing stored");
    assert_eq!(sim.resource_version(), version, "no resourceVersion consumed");

    assert_eq!(http(&sim, "POST", WIDGETS, "application/json", &widget("w", json!({"size": 1}))).await.0, 201);
    let patch = json!({"spec": {"size": 2}});
    let (code, _, patched) =
        http(&sim, "PATCH", &format!("{WIDGETS}/w?dryRun=All"), "application/merge-patch+json", &patch).await;
    assert_eq!(code, 200);
    assert_eq!((patched["spec"]["size"].as_i64(), patched["metadata"]["generation"].as_i64()), (Some(2), Some(2)));
    assert_eq!(get(&sim, &format!("{WIDGETS}/w")).await.1["spec"]["size"], 1);

    let (code, _, _) = http(&sim, "DELETE", &format!("{WIDGETS}/w?dryRun=All"), "application/json", &Value::Null).await;
    assert_eq!(code, 200);
    assert_eq!(get(&sim, &format!("{WIDGETS}/w")).await.0, 200, "still there");
    let (code, _, status) =
        http(&sim, "PATCH", &format!("{WIDGETS}/w?dryRun=Some"), "application/merge-patch+json", &patch).await;
    assert_eq!((code, status["reason"].as_str()), (400, Some("BadRequest")));
}

#[tokio::test]
async fn undeclared_fields_are_refused_warned_about_or_pruned() {
    let sim = sim();
    let typo = widget("w", json!({"size": 1, "colour": "red"}));
    let (code, _, status) =
        http(&sim, "POST", &format!("{WIDGETS}?fieldValidation=Strict"), "application/json", &typo).await;
    assert_eq!(code, 400);
    let message = status["message"].as_str().unwrap_or_default();
    assert!(message.ends_with("strict decoding error: unknown field \"spec.colour\""), "{message}");

    let (code, head, created) = http(&sim, "POST", WIDGETS, "application/json", &typo).await;
    assert_eq!(code, 201);
    assert!(head.to_lowercase().contains("warning: 299 - \"unknown field \\\"spec.colour\\\"\""), "{head}");
    assert_eq!(created["spec"], json!({"size": 1}), "pruned");

    let (code, head, _) = http(
        &sim,
        "PATCH",
        &format!("{WIDGETS}/w?fieldValidation=Ignore"),
        "application/merge-patch+json",
        &json!({"spec": {"colour": "blue"}}),
    )
    .await;
    assert_eq!(code, 200);
    assert!(!head.to_lowercase().contains("warning"), "{head}");
    assert_eq!(get(&sim, &format!("{WIDGETS}/w")).await.1["spec"], json!({"size": 1}));
}
