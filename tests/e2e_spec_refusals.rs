//! A spec this controller does not act on, end to end: a Server pinned to a
//! physical host (`spec.infrastructureRef`, which the upstream CRD carries)
//! is parked before any create with a message naming the field and one
//! `SpecNotSupported` Warning event. The CRD
//! makes the pin immutable (kube-apiserver enforces its CEL rule), so the
//! advice is to delete and create again, which works.

use serde_json::json;
use server_e2e::cloud::Fate;
use server_e2e::openstack::Op;
use server_e2e::*;

cloud_scenarios!(a_host_pin_parks_before_any_create_and_a_new_server_without_it_runs);

async fn a_host_pin_parks_before_any_create_and_a_new_server_without_it_runs(kind: CloudKind) {
    let mut env = Env::new(kind, 83).await;
    let mut spec = Env::spec();
    spec["infrastructureRef"] = json!("compute-17");
    let uid = env.create_server("pinned", fast(Fate::clean()), spec);
    env.start();

    let parked = env
        .wait_server("pinned", "parked for its host pin", |s| {
            available_reason(s) == "Errored" && available_message(s).contains("spec.infrastructureRef")
        })
        .await;
    assert_eq!(env.park(&parked), Some(server_core::ParkKind::HostPinned));
    let namespace = parked.metadata.namespace.clone().unwrap_or_default();
    let message = available_message(&parked);
    assert!(message.ends_with(&format!("kubectl delete server pinned -n {namespace}")), "{message}");
    env.wait("the refusal's event", || env.event_count("pinned", "SpecNotSupported") == 1).await;
    let notes = env.event_notes("pinned", "SpecNotSupported");
    assert!(notes.iter().all(|note| note.contains("spec.infrastructureRef")), "{notes:?}");
    env.idle(3).await;
    assert_eq!(env.event_count("pinned", "SpecNotSupported"), 1, "the refusal is announced once");
    assert_eq!(env.truth(&uid).create_calls, 0, "the provider was asked to create a pinned server");
    if kind == CloudKind::OpenStack {
        assert_eq!(env.openstack_requests_by_op().get(&Op::ServerCreate), None, "Nova was asked to create");
    }

    env.delete_server("pinned").await;
    env.wait("the pinned Server is gone", || env.server("pinned").is_none()).await;
    let uid = env.create_server("unpinned", fast(Fate::clean()), Env::spec());
    env.wait_server("unpinned", "created without the pin", |s| {
        available_reason(s) == "Provisioned" && status(s).provisioned_at.is_some()
    })
    .await;
    assert_eq!(env.truth(&uid).creates_accepted, 1);
    env.assert_invariants();
    env.stop().await;
}
