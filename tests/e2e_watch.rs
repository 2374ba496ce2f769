//! The Server watch end to end: a relist that spans pages (the harness lists
//! two Servers a page) still wakes every Server that changed while the watch
//! was down, with the state the relist brought; and a Server this controller
//! cannot read is reported on itself without holding back any other.

use serde_json::json;
use server_core::model::SERVER_FINALIZER;
use server_e2e::cloud::Fate;
use server_e2e::simkube::{FaultConfig, FaultKind, Verb};
use server_e2e::*;

// Cuts every watch, refuses the API while Servers change, then compacts
// SimKube's history so the watch finds its version gone (410) and relists:
// SimKube's fault injection and compaction.
simkube_scenarios!(a_relist_on_several_pages_wakes_what_changed_while_the_watch_was_down);
cloud_scenarios!(an_unreadable_server_is_reported_on_itself_and_the_others_converge);

fn provisioned(server: &server_kube::crd::Server) -> bool {
    available_reason(server) == "Provisioned" && status(server).provisioned_at.is_some()
}

async fn a_relist_on_several_pages_wakes_what_changed_while_the_watch_was_down(kind: CloudKind) {
    let mut env = Env::new(kind, 41).await;
    let names = ["b1", "b2", "b3", "b4", "b5"];
    let uids: Vec<String> =
        names.iter().map(|name| env.create_server(name, fast(Fate::clean()), Env::spec())).collect();
    env.start();
    for name in names {
        env.wait_server(name, "provisioned", provisioned).await;
    }

    // Cut the Server watch and keep it down: no list, no watch of Servers.
    let down = FaultConfig::none()
        .with_error_rate(Verb::List, FaultKind::Internal, 1.0)
        .with_error_rate(Verb::Watch, FaultKind::Internal, 1.0)
        .only_resources(["servers"]);
    env.sim().faults().set(down);
    env.sim().end_watches();
    env.idle(2).await;

    // Meanwhile, on what will be the relist's first page: a new Server, and
    // the deletion of an old one. The history of it is compacted away, so
    // the watch cannot resume: it relists, on three pages.
    let new = env.create_server("a-new", fast(Fate::clean()), Env::spec());
    env.delete_server("b1").await;
    env.sim().compact();
    let gones = env.counters().watch_gones;
    env.sim().faults().set(FaultConfig::none());
    env.wait("the watch found its version compacted", || env.counters().watch_gones > gones).await;

    env.wait_server("a-new", "provisioned after the relist", provisioned).await;
    env.wait("b1 deleted after the relist", || env.server("b1").is_none()).await;
    env.assert_released(&uids[0]);
    for name in &names[1..] {
        let server = env.server(name).unwrap_or_else(|| panic!("{name} is gone"));
        assert!(provisioned(&server) && has_finalizer(&server, SERVER_FINALIZER), "{name} untouched");
    }
    assert_eq!(env.truth(&new).creates_accepted, 1);
    env.assert_invariants();
}

async fn an_unreadable_server_is_reported_on_itself_and_the_others_converge(kind: CloudKind) {
    let mut env = Env::new(kind, 43).await;
    // What the CRD lets a status hold and this controller cannot read: a
    // failure count past int32 (kube-apiserver does not enforce the CRD's
    // `format: int32`). Condition statuses are open too: "Maybe" means
    // nothing to this controller. (A phase outside the CRD's enum, which
    // SimKube's store edit let this scenario write, kube-apiserver refuses.)
    let odd_status = json!({
        "providerCreateFailures": 3_000_000_000_u64,
        "conditions": [{ "type": "Healthy", "status": "Maybe", "reason": "Errored",
            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z" }],
    });
    let odd = env.create_server("a-odd", fast(Fate::clean()), Env::spec());
    env.edit_server("a-odd", |server| server["status"] = odd_status.clone());
    let names = ["b1", "b2", "b3"];
    for name in names {
        env.create_server(name, fast(Fate::clean()), Env::spec());
    }
    env.start();
    for name in names {
        env.wait_server(name, "provisioned and healthy", |s| {
            provisioned(s) && condition(s, "Healthy").is_some_and(|c| c.0 == "True")
        })
        .await;
    }
    // A Server created after the start is reconciled too.
    env.create_server("b4", fast(Fate::clean()), Env::spec());
    env.wait_server("b4", "provisioned", provisioned).await;
    env.wait("the unreadable Server is reported on itself", || {
        env.event_count("a-odd", server_core::reconcile::EventReason::ServerUnreadable.as_str()) >= 1
    })
    .await;
    let stored = env.server_json("a-odd").unwrap_or_default();
    assert_eq!(stored["status"], odd_status, "left alone");
    assert_eq!(env.truth(&odd).creates_accepted, 0);
    env.assert_invariants();
}
