//! DESIGN §12 invariants 1–7, checked against the sims' ground truth.

use serde::Serialize;
use server_core::model::{ConditionReason, ConditionType, reference_finalizer};
use server_core::provider_create_failure;
use server_simcloud::SimCloud;

use super::observer::Observer;
use super::world::{NAMESPACE, World};

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Violation {
    pub(crate) invariant: u8,
    pub(crate) server: String,
    pub(crate) message: String,
}

/// What Neutron holds at the end: ports (ID, name) and floating IPs (ID,
/// the port each is associated with).
#[derive(Debug, Default)]
pub(crate) struct Neutron {
    pub(crate) ports: Vec<(String, String)>,
    pub(crate) floating_ips: Vec<(String, Option<String>)>,
}

pub(crate) fn check(
    world: &World,
    cloud: &SimCloud,
    observer: &Observer,
    max_attempts: i32,
    neutron: Option<&Neutron>,
    settled: bool,
) -> Vec<Violation> {
    let max = max_attempts.max(1);
    let mut violations = Vec::new();
    let mut violation = |invariant: u8, server: &str, message: String| {
        violations.push(Violation { invariant, server: server.to_owned(), message });
    };
    let store = world.store();
    let consumed: Vec<_> = server_kube::read_kinds()
        .into_iter()
        .filter(|kind| kind.referenced)
        .flat_map(|kind| store.list(&kind.plural, Some(NAMESPACE)))
        .collect();

    for (name, history) in &observer.servers {
        let truth = cloud.truth(&history.uid);
        // 1. No delete on the retry path of a server that ever booted: the
        //    only launched server the cloud may delete is the user's.
        if truth.launched_deleted > 0 && !history.deleted_by_user {
            violation(1, name, format!("{} launched provider server(s) deleted", truth.launched_deleted));
        }
        // 2. The counter never exceeds the cap; at the cap the server is parked.
        if history.max_failures > max {
            violation(2, name, format!("providerCreateFailures reached {} (max {max})", history.max_failures));
        }
        if let Some(server) = &history.latest
            && !history.gone
            && server.status.provider_create_failures >= max
            && provider_create_failure(server)
        {
            let parked =
                server.status.condition(ConditionType::Available).is_some_and(|c| c.reason == ConditionReason::Errored);
            if !parked {
                violation(2, name, "at the cap but not parked (Available is not Errored)".into());
            }
        }
        // 3. provisionedAt, once set, never changes.
        if let Some(changed) = history.provisioned_at_changed_to {
            violation(3, name, format!("provisionedAt changed from {:?} to {changed:?}", history.provisioned_at));
        }
        // 4. Creates accepted by the provider stay within the cap.
        if i64::from(truth.creates_accepted) > i64::from(max) {
            violation(4, name, format!("{} creates accepted (max {max})", truth.creates_accepted));
        }
        // 5. The watch and the retry machine agree: a failure the watch saw
        //    was acted on (counted, retrying or parked), never left idle.
        //    Judged on a settled run only: a run cut short by --timeout
        //    may end between a failure and the pass that acts on it (the
        //    verdict then names the Servers that did not settle).
        if let Some(server) = &history.latest
            && settled
            && !history.gone
            && provider_create_failure(server)
            && !server.status.provider_create_retrying
            && server.status.provider_create_failures < max
        {
            violation(5, name, "a provider create failure was never acted on".into());
        }
        // 6. Never two provider servers; after deletion nothing remains.
        if history.max_live_provider_servers > 1 {
            violation(6, name, format!("{} provider servers at once", history.max_live_provider_servers));
        }
        if history.gone {
            if truth.live > 0 {
                violation(6, name, "the Server is gone but its provider server lives".into());
            }
            let finalizer = reference_finalizer(name);
            for object in &consumed {
                let holds = object["metadata"]["finalizers"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|f| f.as_str() == Some(finalizer.as_str())));
                if holds {
                    let held = object["metadata"]["name"].as_str().unwrap_or_default();
                    violation(6, name, format!("reference finalizer left on {held}"));
                }
            }
        }
        // 7. Fields the operator does not model survive its writes.
        if let Some(json) = &history.latest_json
            && history.unmodelled_fields
            && !history.gone
            && (json["spec"].get("volumes").is_none() || json["status"].get("volumes").is_none())
        {
            violation(7, name, "an unmodelled spec or status field was lost".into());
        }
    }
    // 6, at the provider: a port or floating IP no Server owns is a leak
    // (DESIGN "Every provider resource is released"), never a statistic.
    if let Some(neutron) = neutron {
        let owned = |port_name: &str| {
            port_name
                .strip_prefix("server-")
                .and_then(|name| observer.servers.get(name))
                .is_some_and(|history| !history.gone)
        };
        for (id, name) in neutron.ports.iter().filter(|(_, name)| !owned(name)) {
            let server = name.strip_prefix("server-").unwrap_or(name);
            violation(6, server, format!("port {id} ({name}) outlived its Server"));
        }
        for (id, port) in &neutron.floating_ips {
            let held = port.as_ref().and_then(|port| neutron.ports.iter().find(|(p, _)| p == port));
            if held.is_none_or(|(_, name)| !owned(name)) {
                violation(6, "-", format!("floating IP {id} is held by no Server's port"));
            }
        }
    }
    violations
}
