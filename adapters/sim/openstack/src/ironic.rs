//! Ironic (Bare Metal API v1), read-only: `GET /v1/nodes`, the nodes
//! deploying the project's servers of the baremetal flavors the simulator is
//! configured with (`OpenStackSimConfig::baremetal_flavors`), one node per
//! server, shaped as ironic/api/controllers/v1/node.py lists them.
//!
//! A node's `provision_state` follows its server as Ironic's does under
//! Nova's ironic driver (nova/virt/ironic/driver.py `spawn`, ironic's
//! deploy states): `available` while Nova has not begun deploying (the node
//! is picked, the build is still scheduling), `wait call-back` while it
//! deploys, `active` once the server runs, `deploy failed` on an ERROR.
//! Visibility is Ironic's project-scoped node policy: a project sees the
//! nodes it leases (`lessee`, here the server's project).

use axum::http::StatusCode;
use serde_json::{Map, Value, json};
use server_core::port::{ProviderServer, ProviderStatus};

use super::handlers::{Ctx, Handled, model_error};
use super::state::nova_id;
use super::{Op, Service, reply};

/// Query keys the node list takes here (node.py `NodesController.get_all`).
const KEYS: &[&str] = &["associated", "instance_uuid", "fields", "limit", "marker", "detail"];

pub(super) fn handle(op: Op, ctx: &Ctx<'_>) -> Handled {
    match op {
        Op::BaremetalNodeList => list(ctx),
        _ => (reply::error(Service::Baremetal, 404, "The resource could not be found."), None),
    }
}

/// The node's provision state, from its server's record.
fn provision_state(record: &ProviderServer) -> &'static str {
    match record.status {
        ProviderStatus::Build if record.queued => "available",
        ProviderStatus::Build | ProviderStatus::Rebuild => "wait call-back",
        ProviderStatus::Error => "deploy failed",
        _ => "active",
    }
}

fn list(ctx: &Ctx<'_>) -> Handled {
    if let Some(unknown) = ctx.query_keys().find(|key| !KEYS.contains(key)) {
        return (reply::error(Service::Baremetal, 400, &format!("Unknown argument: \"{unknown}\"")), None);
    }
    let records = match ctx.model(|m| m.list(ctx.now, &ctx.project)) {
        Ok(records) => records,
        Err(e) => return model_error(ctx, Service::Baremetal, &e),
    };
    let baremetal = &ctx.sim.config().baremetal_flavors;
    let state = ctx.state();
    let associated = ctx.query("associated").map(|value| value.eq_ignore_ascii_case("true"));
    let fields: Option<Vec<&str>> = ctx.query("fields").map(|fields| fields.split(',').collect());
    let mut nodes: Vec<Value> = records
        .iter()
        .filter(|record| state.books.get(&record.server_uid).is_some_and(|book| baremetal.contains(&book.flavor_id)))
        .filter(|record| ctx.query("instance_uuid").is_none_or(|wanted| wanted == nova_id(&record.id)))
        // Every node here has an instance: `associated=false` lists none.
        .filter(|_| associated != Some(false))
        .map(|record| {
            // The node's UUID beside its instance's (Nova's id of the server).
            let instance = nova_id(&record.id);
            json!({
                "uuid": format!("0de5{}", instance.chars().skip(4).collect::<String>()),
                "instance_uuid": instance,
                "provision_state": provision_state(record),
                "power_state": if record.status == ProviderStatus::Active { "power on" } else { "power off" },
                "maintenance": false,
                "name": Value::Null,
                "links": [],
            })
        })
        .collect();
    if let Some(fields) = fields {
        for node in &mut nodes {
            if let Value::Object(all) = node {
                let kept: Map<String, Value> = all
                    .iter()
                    .filter(|(key, _)| fields.contains(&key.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                *node = Value::Object(kept);
            }
        }
    }
    (reply::json(StatusCode::OK, json!({ "nodes": nodes })), None)
}
