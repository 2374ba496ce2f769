//! Object semantics through kube-rs's `Api`: CRUD, selectors, conflicts,
//! status subresource, generation, patches, finalizers, errors.

use std::sync::Arc;

use futures_util::{StreamExt, TryStreamExt};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, ResourceExt};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use crate::common::{Gadget, GadgetSpec, Widget, WidgetStatus, client, server_crd, sim, widget};

fn api_error(error: kube::Error) -> Box<kube::core::Status> {
    match error {
        kube::Error::Api(status) => status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn create_get_list_replace_delete() {
    let sim = sim();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "ns1");

    let created = widgets.create(&PostParams::default(), &widget("a", 1)).await.expect("create");
    assert!(created.uid().is_some_and(|uid| uid.len() == 36));
    assert!(created.creation_timestamp().is_some());
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(created.namespace().as_deref(), Some("ns1"));
    let first_rv = created.resource_version().expect("resourceVersion");

    let fetched = widgets.get("a").await.expect("get");
    assert_eq!(fetched, created);

    let list = widgets.list(&ListParams::default()).await.expect("list");
    assert_eq!(list.items.len(), 1);
    let list_rv: u64 = list.metadata.resource_version.expect("list resourceVersion").parse().expect("numeric");
    assert!(list_rv >= first_rv.parse::<u64>().expect("numeric"));

    let mut changed = fetched.clone();
    changed.spec.size = 2;
    let replaced = widgets.replace("a", &PostParams::default(), &changed).await.expect("replace");
    assert_eq!(replaced.spec.size, 2);
    assert_eq!(replaced.metadata.generation, Some(2));
    assert_eq!(replaced.uid(), created.uid());
    assert_ne!(replaced.resource_version(), created.resource_version());

    let deleted = widgets.delete("a", &DeleteParams::default()).await.expect("delete");
    assert!(deleted.is_left(), "without finalizers the object comes back");
    let gone = api_error(widgets.get("a").await.expect_err("deleted"));
    assert!(gone.is_not_found());
    assert_eq!(gone.code, 404);
    assert!(widgets.get_opt("a").await.expect("get_opt").is_none());

    // Other namespaces are separate.
    let other: Api<Widget> = Api::namespaced(client(&sim), "ns2");
    assert!(other.list(&ListParams::default()).await.expect("list").items.is_empty());
}

#[tokio::test]
async fn cluster_scoped_resources_and_generate_name() {
    let sim = sim();
    let gadgets: Api<Gadget> = Api::all(client(&sim));
    let mut gadget = Gadget::new("", GadgetSpec { mode: "on".into() });
    gadget.metadata.name = None;
    gadget.metadata.generate_name = Some("gadget-".into());
    let created = gadgets.create(&PostParams::default(), &gadget).await.expect("create with generateName");
    let name = created.name_any();
    assert!(name.starts_with("gadget-") && name.len() == "gadget-".len() + 5, "{name}");
    assert_eq!(created.namespace(), None);
    assert_eq!(gadgets.get(&name).await.expect("get").spec.mode, "on");
}

#[tokio::test]
async fn duplicate_create_is_already_exists() {
    let sim = sim();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    widgets.create(&PostParams::default(), &widget("a", 1)).await.expect("create");
    let status = api_error(widgets.create(&PostParams::default(), &widget("a", 1)).await.expect_err("duplicate"));
    assert!(status.is_already_exists());
    assert_eq!(status.code, 409);
    assert_eq!(status.details.expect("details").name, "a");
}

#[tokio::test]
async fn stale_resource_version_conflicts_on_replace_and_patch() {
    let sim = sim();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    let original = widgets.create(&PostParams::default(), &widget("a", 1)).await.expect("create");
    let mut first = original.clone();
    first.spec.size = 2;
    widgets.replace("a", &PostParams::default(), &first).await.expect("first writer wins");

    let mut second = original.clone();
    second.spec.size = 3;
    let status =
        api_error(widgets.replace("a", &PostParams::default(), &second).await.expect_err("second writer is stale"));
    assert!(status.is_conflict());
    assert_eq!(status.reason, "Conflict");

    // A merge patch carrying a stale resourceVersion is a precondition too.
    let stale = original.resource_version().expect("rv");
    let patch = json!({"metadata": {"resourceVersion": stale}, "spec": {"size": 4}});
    let status = api_error(
        widgets.patch("a", &PatchParams::default(), &Patch::Merge(&patch)).await.expect_err("stale precondition"),
    );
    assert!(status.is_conflict());

    // Without one, the patch applies to the latest state.
    let patched = widgets
        .patch("a", &PatchParams::default(), &Patch::Merge(json!({"spec": {"size": 4}})))
        .await
        .expect("unconditional patch");
    assert_eq!(patched.spec.size, 4);

    // A replace without a resourceVersion is invalid, as for real CRDs.
    let mut unversioned = patched.clone();
    unversioned.metadata.resource_version = None;
    let status = api_error(
        widgets.replace("a", &PostParams::default(), &unversioned).await.expect_err("resourceVersion required"),
    );
    assert!(status.is_invalid());
}

#[tokio::test]
async fn list_with_label_selectors_and_pages() {
    let sim = sim();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    for (name, labels) in [
        ("a", json!({"app": "web", "tier": "front"})),
        ("b", json!({"app": "web", "tier": "back"})),
        ("c", json!({"app": "db"})),
        ("d", json!({})),
    ] {
        let mut w = widget(name, 1);
        w.metadata.labels = serde_json::from_value(labels).expect("labels");
        widgets.create(&PostParams::default(), &w).await.expect("create");
    }
    let names = |selector: &'static str| {
        let widgets = widgets.clone();
        async move {
            widgets
                .list(&ListParams::default().labels(selector))
                .await
                .expect("list")
                .items
                .iter()
                .map(ResourceExt::name_any)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(names("app=web").await, ["a", "b"]);
    assert_eq!(names("app==web,tier=back").await, ["b"]);
    assert_eq!(names("app!=web").await, ["c", "d"]);
    assert_eq!(names("app in (db,web)").await, ["a", "b", "c"]);
    assert_eq!(names("app notin (web)").await, ["c", "d"]);
    assert_eq!(names("tier").await, ["a", "b"]);
    assert_eq!(names("!tier").await, ["c", "d"]);

    let status = api_error(widgets.list(&ListParams::default().labels("app in (web")).await.expect_err("bad selector"));
    assert_eq!(status.code, 400);

    // Pages of two, chained by continue tokens, cover everything once.
    let mut seen = Vec::new();
    let mut params = ListParams::default().limit(2);
    loop {
        let page = widgets.list(&params).await.expect("page");
        seen.extend(page.items.iter().map(ResourceExt::name_any));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    assert_eq!(seen, ["a", "b", "c", "d"]);
}

/// Continued pages read the first page's version, like kube-apiserver's
/// etcd3 storage; once that version is compacted a continue is 410 Expired,
/// with a token that resumes at the latest state.
#[tokio::test]
async fn continued_pages_form_one_snapshot_until_it_expires() {
    let sim = sim();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    for name in ["a", "b", "c", "d", "e"] {
        widgets.create(&PostParams::default(), &widget(name, 1)).await.expect("create");
    }
    let first = widgets.list(&ListParams::default().limit(2)).await.expect("page 1");
    let names = |items: &[Widget]| items.iter().map(ResourceExt::name_any).collect::<Vec<_>>();
    assert_eq!(names(&first.items), ["a", "b"]);
    let token = first.metadata.continue_.clone().expect("more remain");

    // Between the pages: a new object, a change, a deletion.
    widgets.create(&PostParams::default(), &widget("bb", 1)).await.expect("create");
    widgets.patch("c", &PatchParams::default(), &Patch::Merge(json!({"spec": {"size": 9}}))).await.expect("patch");
    widgets.delete("d", &DeleteParams::default()).await.expect("delete");

    let second = widgets.list(&ListParams::default().limit(2).continue_token(&token)).await.expect("page 2");
    assert_eq!(names(&second.items), ["c", "d"], "the snapshot: no bb, d still there");
    assert_eq!(second.items[0].spec.size, 1, "c as it was at the first page");
    assert_eq!(second.metadata.resource_version, first.metadata.resource_version);
    let next = second.metadata.continue_.clone().expect("e remains");

    sim.compact();
    let expired =
        api_error(widgets.list(&ListParams::default().limit(2).continue_token(&next)).await.expect_err("compacted"));
    assert_eq!((expired.code, expired.reason.as_str()), (410, "Expired"));
    let latest = expired.metadata.and_then(|m| m.continue_).expect("a token to resume at the latest state");
    let rest = widgets.list(&ListParams::default().limit(10).continue_token(&latest)).await.expect("resumed");
    assert_eq!(names(&rest.items), ["e"]);

    let invalid = api_error(widgets.list(&ListParams::default().continue_token("not-a-token")).await.expect_err("bad"));
    assert_eq!(invalid.code, 400);
}

#[tokio::test]
async fn status_subresource_and_generation_rules() {
    let sim = sim();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    let mut w = widget("a", 1);
    w.status = Some(WidgetStatus { phase: Some("Smuggled".into()), observed_generation: None });
    let created = widgets.create(&PostParams::default(), &w).await.expect("create");
    assert_eq!(created.status, None, "create cannot set status");

    // The main resource ignores status.
    let mut with_status = created.clone();
    with_status.status = Some(WidgetStatus { phase: Some("Ignored".into()), observed_generation: None });
    let replaced = widgets.replace("a", &PostParams::default(), &with_status).await.expect("replace");
    assert_eq!(replaced.status, None);
    assert_eq!(replaced.metadata.generation, Some(1));
    assert_eq!(replaced.resource_version(), created.resource_version(), "a no-op write changes nothing");

    // /status ignores everything but status, and never bumps generation.
    let patched = widgets
        .patch_status(
            "a",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"size": 99}, "metadata": {"labels": {"x": "y"}}, "status": {"phase": "Ready"}}),
            ),
        )
        .await
        .expect("patch status");
    assert_eq!(patched.spec.size, 1);
    assert!(patched.labels().is_empty());
    assert_eq!(patched.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Ready"));
    assert_eq!(patched.metadata.generation, Some(1));

    let mut status_write = patched.clone();
    status_write.status = Some(WidgetStatus { phase: Some("Replaced".into()), observed_generation: Some(1) });
    status_write.spec.size = 50;
    let replaced = widgets.replace_status("a", &PostParams::default(), &status_write).await.expect("replace status");
    assert_eq!(replaced.spec.size, 1);
    assert_eq!(replaced.status.as_ref().and_then(|s| s.observed_generation), Some(1));

    // Metadata-only changes keep the generation; spec changes bump it.
    let relabelled = widgets
        .patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"k": "v"}}})))
        .await
        .expect("relabel");
    assert_eq!(relabelled.metadata.generation, Some(1));
    let respecced = widgets
        .patch("a", &PatchParams::default(), &Patch::Merge(json!({"spec": {"color": "red"}})))
        .await
        .expect("spec change");
    assert_eq!(respecced.metadata.generation, Some(2));
    assert_eq!(
        respecced.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Replaced"),
        "status survives main-resource writes"
    );
    assert_eq!(widgets.get_status("a").await.expect("get status"), respecced);
}

#[tokio::test]
async fn json_patch_with_test_operations() {
    let sim = sim();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    widgets.create(&PostParams::default(), &widget("a", 1)).await.expect("create");
    // kube-core's own json_patch version, inferred from `Patch::Json`.
    let patch = || {
        Patch::<()>::Json(
            serde_json::from_value(json!([
                {"op": "test", "path": "/spec/size", "value": 1},
                {"op": "replace", "path": "/spec/size", "value": 2}
            ]))
            .expect("patch"),
        )
    };
    let patched = widgets.patch("a", &PatchParams::default(), &patch()).await.expect("test holds");
    assert_eq!(patched.spec.size, 2);
    let status = api_error(widgets.patch("a", &PatchParams::default(), &patch()).await.expect_err("test fails now"));
    assert_eq!(status.code, 422);
    assert_eq!(widgets.get("a").await.expect("get").spec.size, 2);
}

#[tokio::test]
async fn strategic_merge_and_apply_patches() {
    let sim = sim();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    let applied = widgets
        .patch(
            "a",
            &PatchParams::apply("test-manager"),
            &Patch::Apply(json!({"apiVersion": "test.simkube.io/v1", "kind": "Widget", "spec": {"size": 3}})),
        )
        .await
        .expect("apply creates");
    assert_eq!(applied.spec.size, 3);
    let patched = widgets
        .patch("a", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"color": "blue"}})))
        .await
        .expect("strategic merge");
    assert_eq!((patched.spec.size, patched.spec.color.as_deref()), (3, Some("blue")));
}

#[tokio::test]
async fn finalizers_delay_deletion_until_the_helper_removes_them() {
    use kube::runtime::controller::Action;
    use kube::runtime::finalizer::{Event, finalizer};

    let sim = sim();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    widgets.create(&PostParams::default(), &widget("a", 1)).await.expect("create");

    // First pass: the helper adds its finalizer with a JSON patch (test ops included).
    let fresh = Arc::new(widgets.get("a").await.expect("get"));
    finalizer(&widgets, "simkube.test/cleanup", fresh, |_| async { Ok::<_, std::io::Error>(Action::await_change()) })
        .await
        .expect("finalizer added");
    let with_finalizer = widgets.get("a").await.expect("get");
    assert_eq!(with_finalizer.finalizers(), ["simkube.test/cleanup"]);
    assert_eq!(with_finalizer.metadata.generation, Some(1));

    // Delete marks the object and bumps generation.
    let marked =
        widgets.delete("a", &DeleteParams::default()).await.expect("delete").left().expect("object still present");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(marked.metadata.generation, Some(2));
    let again =
        widgets.delete("a", &DeleteParams::default()).await.expect("second delete").left().expect("still present");
    assert_eq!(again.resource_version(), marked.resource_version(), "idempotent");

    // No new finalizers while deleting.
    let status = api_error(
        widgets
            .patch(
                "a",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": ["simkube.test/cleanup", "other"]}})),
            )
            .await
            .expect_err("new finalizer refused"),
    );
    assert!(status.is_invalid());

    // Cleanup pass: the helper removes the finalizer, and the object goes.
    let cleaned = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let fresh = Arc::new(widgets.get("a").await.expect("get"));
    let flag = cleaned.clone();
    finalizer(&widgets, "simkube.test/cleanup", fresh, |event| async move {
        if let Event::Cleanup(_) = event {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        Ok::<_, std::io::Error>(Action::await_change())
    })
    .await
    .expect("finalizer removed");
    assert!(cleaned.load(std::sync::atomic::Ordering::SeqCst));
    assert!(widgets.get_opt("a").await.expect("get_opt").is_none());
}

#[tokio::test]
async fn delete_preconditions_and_collections() {
    let sim = sim();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    for name in ["a", "b", "c"] {
        widgets.create(&PostParams::default(), &widget(name, 1)).await.expect("create");
    }
    let stale = DeleteParams {
        preconditions: Some(kube::api::Preconditions { resource_version: Some("1".into()), uid: None }),
        ..DeleteParams::default()
    };
    let status = api_error(widgets.delete("a", &stale).await.expect_err("stale"));
    assert!(status.is_conflict());

    let deleted = widgets
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .expect("delete collection")
        .left()
        .expect("a list of deleted objects");
    assert_eq!(deleted.items.len(), 3);
    assert!(widgets.list(&ListParams::default()).await.expect("list").items.is_empty());
}

#[tokio::test]
async fn recorder_events_become_a_series_on_repeat() {
    use k8s_openapi::api::events::v1::Event as K8sEvent;
    use kube::Resource;
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};

    let sim = sim();
    let client = client(&sim);
    let widgets: Api<Widget> = Api::namespaced(client.clone(), "default");
    let created = widgets.create(&PostParams::default(), &widget("a", 1)).await.expect("create");
    let recorder = Recorder::new(client.clone(), Reporter { controller: "simkube-test".into(), instance: None });
    let event = Event {
        type_: EventType::Warning,
        reason: "Broken".into(),
        note: Some("it broke".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    let reference = created.object_ref(&());
    recorder.publish(&event, &reference).await.expect("first publish creates");
    recorder.publish(&event, &reference).await.expect("second publish patches");

    let events: Api<K8sEvent> = Api::namespaced(client, "default");
    let list = events.list(&ListParams::default()).await.expect("list events");
    assert_eq!(list.items.len(), 1, "the repeat is merged into one event");
    let only = &list.items[0];
    assert_eq!(only.reason.as_deref(), Some("Broken"));
    assert_eq!(only.series.as_ref().map(|s| s.count), Some(2));
    assert_eq!(only.regarding.as_ref().and_then(|r| r.name.as_deref()), Some("a"));
    let counters = sim.counters();
    assert_eq!(counters.count(server_simkube::Verb::Create, "events"), 1);
    assert_eq!(counters.count(server_simkube::Verb::Patch, "events"), 1);
}

#[tokio::test]
async fn leases_are_served() {
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};

    let sim = sim();
    let leases: Api<Lease> = Api::namespaced(client(&sim), "kube-system");
    let mut lease = Lease::default();
    lease.metadata.name = Some("server-controller".into());
    lease.spec = Some(LeaseSpec {
        holder_identity: Some("pod-1".into()),
        lease_duration_seconds: Some(15),
        ..LeaseSpec::default()
    });
    let created = leases.create(&PostParams::default(), &lease).await.expect("create");
    let mut taken = created.clone();
    if let Some(spec) = taken.spec.as_mut() {
        spec.holder_identity = Some("pod-2".into());
    }
    let replaced = leases.replace("server-controller", &PostParams::default(), &taken).await.expect("take over");
    assert_eq!(replaced.spec.and_then(|s| s.holder_identity).as_deref(), Some("pod-2"));
    let status = api_error(
        leases
            .replace("server-controller", &PostParams::default(), &taken)
            .await
            .expect_err("a second takeover from the same version conflicts"),
    );
    assert!(status.is_conflict());
}

#[tokio::test]
async fn the_real_server_crd_is_served_with_undeclared_fields_pruned() {
    let sim = sim();
    let rtype = sim.install_crd(server_crd()).expect("Server CRD installs");
    assert!(rtype.namespaced && rtype.status_subresource);
    assert_eq!((rtype.kind.as_str(), rtype.plural.as_str()), ("Server", "servers"));

    let client = client(&sim);
    let gvk = GroupVersionKind::gvk("region.unikorn-cloud.org", "v1alpha1", "Server");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "servers");
    let servers: Api<DynamicObject> = Api::namespaced_with(client.clone(), "org-1", &resource);
    let mut server = DynamicObject::new("server-1", &resource);
    server.metadata.labels = Some([("regions.unikorn-cloud.org/region-id".to_string(), "r1".to_string())].into());
    // Values are validated as the real API server does: the chart's CRD
    // wants UUIDs, and every cause is named.
    server.data = json!({"spec": {"flavorID": "f", "image": {"id": "i"}}});
    let refused = servers.create(&PostParams::default(), &server).await.expect_err("a flavor that is no UUID");
    let kube::Error::Api(status) = refused else { panic!("an API error: {refused}") };
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        "Server.region.unikorn-cloud.org \"server-1\" is invalid: [spec.flavorID: Invalid value: \"f\": spec.flavorID in body must be of type uuid: \"f\", spec.image.id: Invalid value: \"i\": spec.image.id in body must be of type uuid: \"i\", <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]"
    );
    const FLAVOR: &str = "8c2b1d54-2a56-4bb3-9b0c-1d2f6e1f4a01";
    server.data = json!({"spec": {"flavorID": FLAVOR, "image": {"id": "0e8d4f4c-58a4-4d55-93b5-0b65e1c7c3f2"}, "futureField": {"kept": true}}});
    servers.create(&PostParams::default(), &server).await.expect("create");

    let incomplete_volume = Patch::Merge(json!({"status": {"volumes": [{"id": "v"}]}}));
    let refused = servers.patch_status("server-1", &PatchParams::default(), &incomplete_volume).await;
    assert!(matches!(refused, Err(kube::Error::Api(ref s)) if s.code == 422), "{refused:?}");
    let volume = json!({"id": "v", "message": "attached", "provisioningStatus": "Provisioned"});
    servers
        .patch_status(
            "server-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running", "volumes": [volume]}})),
        )
        .await
        .expect("status patch");
    servers
        .patch_status("server-1", &PatchParams::default(), &Patch::Merge(json!({"status": {"privateIP": "10.0.0.1"}})))
        .await
        .expect("second status patch");
    let stored = servers.get("server-1").await.expect("get");
    // The real CRD does not declare it, so the API server prunes it.
    assert_eq!(stored.data["spec"].get("futureField"), None);
    assert_eq!(stored.data["spec"]["flavorID"], FLAVOR);
    assert_eq!(stored.data["status"]["volumes"], json!([volume]));
    assert_eq!(stored.data["status"]["phase"], "Running");
    assert_eq!(stored.data["status"]["privateIP"], "10.0.0.1");

    // Discovery finds it, classic and aggregated.
    let (found, caps) = kube::discovery::pinned_kind(&client, &gvk).await.expect("pinned kind");
    assert_eq!(found.plural, "servers");
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
    assert!(caps.subresources.iter().any(|(sub, _)| sub.plural == "status"));
    for discovery in [
        kube::Discovery::new(client.clone()).run().await.expect("discovery"),
        kube::Discovery::new(client.clone()).run_aggregated().await.expect("aggregated discovery"),
    ] {
        let (found, _) = discovery.resolve_gvk(&gvk).expect("Server discovered");
        assert_eq!(found.plural, "servers");
        assert!(discovery.has_group("events.k8s.io"));
        assert!(discovery.has_group("coordination.k8s.io"));
        assert!(discovery.has_group("test.simkube.io"));
    }
    let version = client.apiserver_version().await.expect("version");
    assert_eq!(version.major, "1");

    // The CRD itself is readable, as on a real cluster.
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client);
    assert!(crds.get("servers.region.unikorn-cloud.org").await.is_ok());
}

#[tokio::test]
async fn bad_requests_get_status_bodies() {
    use axum::http::Request;

    let sim = sim();
    let client = client(&sim);
    let status_of = |request: Request<Vec<u8>>| {
        let client = client.clone();
        async move { api_error(client.request_text(request).await.expect_err("must fail")) }
    };

    let bad_json = Request::post("/apis/test.simkube.io/v1/namespaces/default/widgets")
        .header("content-type", "application/json")
        .body(b"{not json".to_vec())
        .expect("request");
    let status = status_of(bad_json).await;
    assert_eq!((status.code, status.reason.as_str()), (400, "BadRequest"));

    // kube-apiserver's mux answers a path it does not serve in plain text,
    // not as a Status (tests/reference_simkube.rs compares the two).
    let unknown = Request::get("/apis/nothing.io/v1/namespaces/default/things").body(Vec::new()).expect("request");
    let status = status_of(unknown).await;
    assert_eq!(status.code, 404);
    assert!(status.message.contains("404 page not found"), "{status:?}");

    let bad_patch_type = Request::patch("/apis/test.simkube.io/v1/namespaces/default/widgets/a")
        .header("content-type", "text/plain")
        .body(b"x".to_vec())
        .expect("request");
    assert_eq!(status_of(bad_patch_type).await.code, 415);

    let outside_api = Request::get("/healthz").body(Vec::new()).expect("request");
    assert_eq!(status_of(outside_api).await.code, 404);

    let wrong_kind = Request::post("/apis/test.simkube.io/v1/namespaces/default/widgets")
        .header("content-type", "application/json")
        .body(br#"{"kind":"Gadget","metadata":{"name":"x"}}"#.to_vec())
        .expect("request");
    assert_eq!(status_of(wrong_kind).await.code, 400);

    let bad_name = Request::post("/apis/test.simkube.io/v1/namespaces/default/widgets")
        .header("content-type", "application/json")
        .body(br#"{"metadata":{"name":"Not_Valid"},"spec":{"size":1}}"#.to_vec())
        .expect("request");
    assert_eq!(status_of(bad_name).await.code, 422);

    // Dynamic access to an uninstalled type is a plain-text 404 too.
    let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("nothing.io", "v1", "Thing"), "things");
    let things: Api<DynamicObject> = Api::namespaced_with(client, "default", &resource);
    let status = api_error(things.list(&ListParams::default()).await.expect_err("unknown"));
    assert_eq!(status.code, 404);
}

#[tokio::test]
async fn store_handle_reads_and_writes_without_http() {
    let sim = sim();
    let store = sim.store();
    store
        .insert(
            "widgets",
            json!({
                "metadata": {"name": "seeded", "namespace": "default", "finalizers": ["keep"]},
                "spec": {"size": 5},
                "status": {"phase": "Seeded"}
            }),
        )
        .expect("insert keeps status");
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    let seen = widgets.get("seeded").await.expect("visible over HTTP");
    assert_eq!(seen.status.and_then(|s| s.phase).as_deref(), Some("Seeded"));
    assert_eq!(sim.counters().count(server_simkube::Verb::Get, "widgets"), 1);

    let modified = store
        .modify("widgets", Some("default"), "seeded", |object| {
            object["status"]["phase"] = json!("Tampered");
        })
        .expect("modify");
    assert_eq!(modified["status"]["phase"], "Tampered");
    store.delete("widgets.test.simkube.io", Some("default"), "seeded").expect("delete marks");
    assert!(store.get("widgets", Some("default"), "seeded").is_some(), "finalizer holds it");
    store.remove("widgets", Some("default"), "seeded").expect("force removal");
    assert!(store.list("widgets", None).is_empty());
    assert!(store.get("nothing", None, "x").is_none());
}

#[tokio::test]
async fn faults_are_seeded_scripted_and_counted() {
    use server_simkube::{ErrorRates, FaultConfig, FaultKind, SimKube, Verb};

    let sim = sim();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    widgets.create(&PostParams::default(), &widget("a", 1)).await.expect("create");

    sim.faults().fail_next(Verb::Patch, Some("widgets"), FaultKind::Conflict, 1);
    let patch = Patch::Merge(json!({"spec": {"size": 2}}));
    let status = api_error(widgets.patch("a", &PatchParams::default(), &patch).await.expect_err("scripted conflict"));
    assert!(status.is_conflict());
    assert_eq!(widgets.get("a").await.expect("get").spec.size, 1, "nothing written");
    widgets.patch("a", &PatchParams::default(), &patch).await.expect("fault spent");

    sim.faults().fail_next(Verb::Get, None, FaultKind::TooManyRequests, 1);
    let status = api_error(widgets.get("a").await.expect_err("throttled"));
    assert_eq!((status.code, status.reason.as_str()), (429, "TooManyRequests"));

    let counters = sim.counters();
    assert_eq!(counters.count(Verb::Patch, "widgets"), 2);
    assert_eq!(counters.count(Verb::Create, "widgets"), 1);
    assert_eq!(counters.total_faults(), 2);
    assert_eq!(counters.responses_by_code.get(&409), Some(&1));

    // Same seed, same sequence of outcomes.
    let outcomes = |seed: u64| async move {
        let sim = SimKube::builder().seed(seed).build();
        sim.install_crd(serde_json::to_value(<Widget as kube::CustomResourceExt>::crd()).expect("crd"))
            .expect("install");
        let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
        widgets.create(&PostParams::default(), &widget("a", 1)).await.expect("create");
        sim.faults().set(FaultConfig::none().with_rates_for_all_verbs(ErrorRates {
            conflict: 0.2,
            too_many_requests: 0.1,
            internal: 0.1,
        }));
        let mut codes = Vec::new();
        for _ in 0..40 {
            codes.push(match widgets.get("a").await {
                Ok(_) => 200,
                Err(error) => api_error(error).code,
            });
        }
        codes
    };
    let first = outcomes(11).await;
    assert_eq!(first, outcomes(11).await);
    assert_ne!(first, outcomes(12).await);
    assert!(first.contains(&200) && first.contains(&409) && first.contains(&500));
}

#[tokio::test]
async fn latency_is_added_and_switchable() {
    use server_simkube::FaultConfig;
    use std::time::{Duration, Instant};

    let sim = sim();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    sim.faults().set(FaultConfig::none().with_latency(Duration::from_millis(150), Duration::ZERO));
    let started = Instant::now();
    widgets.list(&ListParams::default()).await.expect("list");
    assert!(started.elapsed() >= Duration::from_millis(150));
    sim.faults().clear();
    let started = Instant::now();
    widgets.list(&ListParams::default()).await.expect("list");
    assert!(started.elapsed() < Duration::from_millis(150));
}

#[tokio::test]
async fn serves_on_a_loopback_port() {
    let sim = sim();
    let served = sim.serve("127.0.0.1:0".parse().expect("addr")).await.expect("bind");
    assert!(served.url().starts_with("http://127.0.0.1:"));
    let config = kube::Config::new(served.url().parse().expect("uri"));
    let client = kube::Client::try_from(config).expect("client");
    let widgets: Api<Widget> = Api::namespaced(client, "default");
    widgets.create(&PostParams::default(), &widget("tcp", 1)).await.expect("create over TCP");
    let list = widgets.list(&ListParams::default()).await.expect("list");
    assert_eq!(list.items.len(), 1);

    // Watches stream over chunked HTTP/1.1 too.
    let version = list.metadata.resource_version.expect("resourceVersion");
    let mut events = widgets
        .watch(&kube::api::WatchParams::default().timeout(5).disable_bookmarks(), &version)
        .await
        .expect("watch over TCP")
        .boxed();
    widgets.create(&PostParams::default(), &widget("tcp-2", 1)).await.expect("create");
    let event = crate::common::within("event over TCP", events.try_next()).await.expect("event").expect("open");
    assert!(matches!(event, kube::api::WatchEvent::Added(w) if w.name_any() == "tcp-2"));
    served.shutdown();
}

#[tokio::test]
async fn metadata_only_calls_and_await_condition() {
    use kube::runtime::wait::{await_condition, conditions};

    let sim = sim();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    let created = widgets.create(&PostParams::default(), &widget("a", 1)).await.expect("create");
    widgets.create(&PostParams::default(), &widget("b", 1)).await.expect("create");

    let meta = widgets.get_metadata("a").await.expect("get_metadata");
    assert_eq!(meta.metadata.uid, created.metadata.uid);
    let metas = widgets.list_metadata(&ListParams::default()).await.expect("list_metadata");
    assert_eq!(metas.items.len(), 2);

    // await_condition watches one object through a metadata.name field selector.
    let uid = created.metadata.uid.clone().expect("uid");
    let api = widgets.clone();
    let deleted = tokio::spawn(async move { await_condition(api, "a", conditions::is_deleted(&uid)).await });
    widgets.delete("b", &DeleteParams::default()).await.expect("delete b");
    widgets.delete("a", &DeleteParams::default()).await.expect("delete a");
    crate::common::within("a deleted", deleted).await.expect("task").expect("condition");
}

#[tokio::test]
async fn request_bodies_are_counted_by_verb_and_resource() {
    use server_simkube::Verb;

    let sim = sim();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    widgets.create(&PostParams::default(), &widget("a", 1)).await.expect("create");
    let patch = json!({"spec": {"size": 2, "color": "a colour long enough to be told apart"}});
    widgets.patch("a", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch");
    widgets.get("a").await.expect("get");

    let counters = sim.counters();
    let sent = serde_json::to_vec(&patch).expect("encode").len() as u64;
    assert_eq!(counters.body_bytes.get(&(Verb::Patch, "widgets".to_owned())), Some(&sent));
    let created = counters.body_bytes.get(&(Verb::Create, "widgets".to_owned())).copied().unwrap_or(0);
    assert!(created > 0, "the create's body is counted");
    assert!(!counters.body_bytes.contains_key(&(Verb::Get, "widgets".to_owned())), "reads send no body");
    assert_eq!(counters.total_body_bytes(), sent + created);
}

/// A write that changes nothing keeps its resourceVersion, as kube-apiserver
/// skips such an update (no etcd write, no watch event), and is counted as
/// a request the client could have left out.
#[tokio::test]
async fn writes_that_change_nothing_are_counted_and_keep_the_resource_version() {
    use server_simkube::Verb;

    let sim = sim();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    let created = widgets.create(&PostParams::default(), &widget("a", 1)).await.expect("create");
    let patch = json!({"spec": {"size": 2}});
    let changed = widgets.patch("a", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch");
    assert_ne!(changed.metadata.resource_version, created.metadata.resource_version);
    let same = widgets.patch("a", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch again");
    assert_eq!(same.metadata.resource_version, changed.metadata.resource_version, "nothing changed");

    let counters = sim.counters();
    assert_eq!(counters.no_op(Verb::Patch, "widgets"), 1, "the second patch alone: {:?}", counters.no_op_writes);
    assert_eq!(counters.no_op(Verb::Create, "widgets"), 0);
}
