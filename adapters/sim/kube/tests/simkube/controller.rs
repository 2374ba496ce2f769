//! A tiny kube-runtime `Controller` reconciling against SimKube.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, ResourceExt};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{self, Event, finalizer};
use kube::runtime::watcher;
use serde_json::{Value, json};
use server_simkube::{FaultConfig, FaultKind, SimKube, Verb};

use crate::common::{Widget, client, sim, widget};

const FINALIZER: &str = "simkube.test/cleanup";

struct Context {
    client: Client,
    cleaned_up: Mutex<Vec<String>>,
}

async fn reconcile(object: Arc<Widget>, context: Arc<Context>) -> Result<Action, finalizer::Error<kube::Error>> {
    let namespace = object.namespace().unwrap_or_default();
    let api: Api<Widget> = Api::namespaced(context.client.clone(), &namespace);
    finalizer(&api, FINALIZER, object, |event| async {
        match event {
            Event::Apply(widget) => {
                let status = json!({"status": {
                    "phase": "Ready",
                    "observedGeneration": widget.metadata.generation,
                }});
                api.patch_status(&widget.name_any(), &PatchParams::default(), &Patch::Merge(status)).await?;
                Ok(Action::await_change())
            }
            Event::Cleanup(widget) => {
                if let Ok(mut cleaned) = context.cleaned_up.lock() {
                    cleaned.push(widget.name_any());
                }
                Ok(Action::await_change())
            }
        }
    })
    .await
}

fn error_policy(_object: Arc<Widget>, _error: &finalizer::Error<kube::Error>, _context: Arc<Context>) -> Action {
    Action::requeue(Duration::from_millis(20))
}

/// Whether the widget's status reports its current generation as reconciled.
fn reconciled(object: &Value) -> bool {
    object["status"]["phase"] == "Ready" && object["status"]["observedGeneration"] == object["metadata"]["generation"]
}

async fn run_scenario(sim: SimKube) {
    let client = client(&sim);
    let context = Arc::new(Context { client: client.clone(), cleaned_up: Mutex::new(Vec::new()) });
    let controller = Controller::new(Api::<Widget>::all(client.clone()), watcher::Config::default())
        .run(reconcile, error_policy, context.clone())
        .for_each(|_| async {});
    let running = tokio::spawn(controller);

    let names = [("ns-a", "one"), ("ns-a", "two"), ("ns-b", "three")];
    for (namespace, name) in names {
        let api: Api<Widget> = Api::namespaced(client.clone(), namespace);
        api.create(&PostParams::default(), &widget(name, 1)).await.expect("create");
    }
    let store = sim.store();
    const LIMIT: Duration = Duration::from_secs(5);
    for (namespace, name) in names {
        store
            .wait_for("widgets", Some(namespace), name, LIMIT, |w| {
                reconciled(w) && w["metadata"]["finalizers"] == json!([FINALIZER])
            })
            .await
            .unwrap_or_else(|| panic!("{namespace}/{name} reconciled with its finalizer"));
    }

    // A spec change (new generation) is reconciled again.
    store
        .patch("widgets", Some("ns-a"), "one", &server_simkube::Patch::merge(json!({"spec": {"size": 2}})))
        .expect("spec change");
    store
        .wait_for("widgets", Some("ns-a"), "one", LIMIT, |w| w["metadata"]["generation"] == 2 && reconciled(w))
        .await
        .expect("generation 2 reconciled");

    // Deletion runs cleanup, then the finalizer goes and so does the object.
    let api: Api<Widget> = Api::namespaced(client.clone(), "ns-b");
    api.delete("three", &DeleteParams::default()).await.expect("delete");
    assert!(store.wait_for_absent("widgets", Some("ns-b"), "three", LIMIT).await, "the deleted widget is gone");
    let cleaned = context.cleaned_up.lock().map(|c| c.clone()).unwrap_or_default();
    // Cleanup may run more than once when removing the finalizer fails (faults).
    assert!(!cleaned.is_empty() && cleaned.iter().all(|name| name == "three"), "{cleaned:?}");
    running.abort();
}

#[tokio::test]
async fn controller_reconciles_status_and_cleans_up() {
    let sim = sim();
    run_scenario(sim.clone()).await;
    let counters = sim.counters();
    assert!(counters.count(Verb::Patch, "widgets/status") >= 4);
    assert!(counters.count(Verb::Patch, "widgets") >= 4, "finalizer add and remove");
    assert_eq!(counters.total_faults(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_converges_under_conflicts_and_cut_watches() {
    let sim = sim();
    sim.faults().set(
        FaultConfig::none()
            .with_error_rate(Verb::Patch, FaultKind::Conflict, 0.3)
            .with_error_rate(Verb::Patch, FaultKind::Internal, 0.1)
            .with_watch_cut_after(2),
    );
    run_scenario(sim.clone()).await;
    let counters = sim.counters();
    assert!(counters.total_faults() > 0, "{counters:?}");
    assert!(counters.watch_cuts > 0, "{counters:?}");
}
