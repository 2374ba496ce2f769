//! A shared object at etcd's request limit, end to end: a Network whose
//! reference finalizers fill the 1.5 MiB etcd takes cannot hold one more.
//! A Server on it waits before its create, a `ReferenceNotWritten` Warning
//! naming the Network and etcd's refusal, and nothing is sent to the cloud
//! (its status stays unwritten: see DESIGN, reference edges); once room is made
//! on the Network, the Server is created as any other. On SimKube, whose
//! refusal `tests/reference_simkube.rs` compares with kube-apiserver's on
//! etcd (the real server's managedFields make the stored object larger
//! than what a test can size exactly).

use serde_json::{Value, json};
use server_e2e::cloud::Fate;
use server_e2e::*;

simkube_scenarios!(a_server_on_a_network_full_of_references_waits_and_is_created_once_there_is_room);

/// etcd's default `--max-request-bytes`.
const ETCD_MAX_REQUEST_BYTES: usize = 1536 * 1024;

/// Fills `object`'s finalizers with others' references until one more
/// reference, of `next_name`, no longer fits in etcd: the bytes left are
/// fewer than that reference's.
fn fill_to_the_limit(object: &mut Value, next_name: &str) {
    let reference = |name: &str| server_core::model::reference_finalizer(name);
    let encoded = |object: &Value| serde_json::to_vec(object).map_or(0, |bytes| bytes.len());
    // A reference in the list costs its length, two quotes and a comma.
    let next = reference(next_name).len() + 3;
    let filler = |n: usize| reference(&format!("filler-{n:06}"));
    let per_filler = filler(0).len() + 3;
    object["metadata"]["finalizers"] = json!([]);
    let count = (ETCD_MAX_REQUEST_BYTES - encoded(object) - next) / per_filler;
    let mut finalizers: Vec<String> = (0..count).map(filler).collect();
    object["metadata"]["finalizers"] = json!(finalizers);
    // One last reference sized to leave half of what the next one needs.
    let gap = ETCD_MAX_REQUEST_BYTES - encoded(object);
    let pad = gap - 3 - next / 2 - reference("").len();
    finalizers.push(reference(&"p".repeat(pad)));
    object["metadata"]["finalizers"] = json!(finalizers);
    let left = ETCD_MAX_REQUEST_BYTES - encoded(object);
    assert!(left < next, "{left} bytes left: one more reference ({next}) would fit");
}

async fn a_server_on_a_network_full_of_references_waits_and_is_created_once_there_is_room(kind: CloudKind) {
    let mut env = Env::new(kind, 97).await;
    env.edit("networks", NETWORK, |network| fill_to_the_limit(network, "late"));
    let uid = env.create_server("late", fast(Fate::clean()), Env::spec());
    env.start();

    env.wait("the refusal's event", || env.event_count("late", "ReferenceNotWritten") > 0).await;
    let notes = env.event_notes("late", "ReferenceNotWritten");
    assert!(
        notes.iter().all(|note| note.contains(&format!("network {NETWORK}")) && note.contains("request is too large")),
        "{notes:?}"
    );
    env.idle(2).await;
    assert_eq!(env.truth(&uid).create_calls, 0, "a create was sent without the Network's reference");
    let waiting = env.server("late").map(|s| available_reason(&s));
    assert_ne!(waiting.as_deref(), Some("Provisioned"));

    // Room is made: the Servers the fillers stood for are gone.
    env.edit("networks", NETWORK, |network| {
        if let Some(finalizers) = network["metadata"]["finalizers"].as_array_mut() {
            finalizers.truncate(finalizers.len() / 2);
        }
    });
    env.wait_server("late", "created once the Network has room", |s| {
        available_reason(s) == "Provisioned" && status(s).provisioned_at.is_some()
    })
    .await;
    assert_eq!(env.truth(&uid).creates_accepted, 1);
    let reference = server_core::model::reference_finalizer("late");
    assert!(env.finalizers("networks", NETWORK).contains(&reference));
    env.assert_invariants();
    env.stop().await;
}
