//! Neutron (networking API v2.0): ports, floating IPs, the tenant networks
//! and security groups ports are made with (registered by the test, as the
//! unikorn network controllers would have made them), and the external
//! networks floating IPs come from. A port on an unknown network or with an
//! unknown security group is refused 404 as Neutron refuses it.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::handlers::Ctx;
use super::state::{SimFloatingIp, SimPort, State, fixed_ip_for, floating_ip_for, mac_for, rfc3339};
use super::{Op, Service, reply};

/// Id kinds (see `State::next_id`).
const PORT_KIND: u16 = 0x0b07;
const FLOATING_IP_KIND: u16 = 0x0f1b;

pub(super) fn handle(op: Op, ctx: &Ctx<'_>) -> Response {
    let id = ctx.id.as_deref().unwrap_or_default();
    let mut state = ctx.state();
    match op {
        Op::PortList => list_ports(ctx, &mut state),
        Op::PortCreate => create_port(ctx, &mut state),
        Op::PortGet => match state.ports.get(id).filter(|p| p.project_id == ctx.project) {
            Some(port) => reply::json(StatusCode::OK, json!({ "port": render_port(ctx, &state, port) })),
            None => port_not_found(id),
        },
        Op::PortUpdate => update_port(ctx, &mut state, id),
        Op::PortDelete => delete_port(ctx, &mut state, id),
        Op::FloatingIpList => list_floating_ips(ctx, &mut state),
        Op::FloatingIpCreate => create_floating_ip(ctx, &mut state),
        Op::FloatingIpGet => match state.floating_ips.get(id).filter(|f| f.project_id == ctx.project) {
            Some(ip) => reply::json(StatusCode::OK, json!({ "floatingip": render_floating_ip(&state, ip) })),
            None => floating_ip_not_found(id),
        },
        Op::FloatingIpDelete => delete_floating_ip(ctx, &mut state, id),
        Op::NetworkList => list_networks(ctx, &mut state),
        Op::SecurityGroupList => list_security_groups(ctx, &mut state),
        _ => error(404, "The resource could not be found."),
    }
}

fn error(code: u16, message: &str) -> Response {
    reply::error(Service::Network, code, message)
}

/// neutron-lib `exceptions.NetworkNotFound`.
fn network_not_found(id: &str) -> Response {
    reply::neutron_error(404, "NetworkNotFound", &format!("Network {id} could not be found."))
}

/// neutron `extensions/securitygroup.SecurityGroupNotFound`.
fn security_group_not_found(id: &str) -> Response {
    reply::neutron_error(404, "SecurityGroupNotFound", &format!("Security group {id} does not exist"))
}

/// A network a port of the caller's project may be made on: its own, or an
/// external one.
fn usable_network(ctx: &Ctx<'_>, state: &State, id: &str) -> bool {
    state.networks.get(id).is_some_and(|n| n.project_id == ctx.project)
        || ctx.sim.config().external_networks.iter().any(|n| n == id)
}

/// The first security group the caller's project does not have.
fn unknown_group<'a>(ctx: &Ctx<'_>, state: &State, groups: &'a [String]) -> Option<&'a str> {
    groups
        .iter()
        .find(|g| {
            g.as_str() != "default" && state.security_groups.get(g.as_str()).is_none_or(|s| s.project_id != ctx.project)
        })
        .map(String::as_str)
}

fn port_not_found(id: &str) -> Response {
    error(404, &format!("Port {id} could not be found."))
}

fn floating_ip_not_found(id: &str) -> Response {
    error(404, &format!("Floating IP {id} could not be found."))
}

/// Whether the Nova server booted with this port still exists.
fn attached(ctx: &Ctx<'_>, port: &SimPort) -> bool {
    port.bound_uid.as_deref().is_some_and(|uid| ctx.model(|m| m.truth(uid, ctx.now).live > 0))
}

fn render_port(ctx: &Ctx<'_>, state: &State, port: &SimPort) -> Value {
    let attached = attached(ctx, port);
    let device_id = match (&port.bound_uid, attached) {
        (Some(uid), true) => state.books.get(uid).and_then(|b| b.id.clone()).unwrap_or_default(),
        _ => String::new(),
    };
    json!({
        "id": port.id,
        "name": port.name,
        "description": port.description,
        "network_id": port.network_id,
        "project_id": port.project_id,
        "tenant_id": port.project_id,
        "mac_address": port.mac_address,
        "admin_state_up": true,
        "status": if attached { "ACTIVE" } else { "DOWN" },
        "device_id": device_id,
        "device_owner": if attached { "compute:nova" } else { "" },
        "fixed_ips": [{"subnet_id": format!("{}-subnet", port.network_id), "ip_address": port.ip_address}],
        "allowed_address_pairs": port.allowed_address_pairs.iter()
            .map(|(ip, mac)| json!({"ip_address": ip, "mac_address": mac}))
            .collect::<Vec<_>>(),
        "security_groups": port.security_groups,
        "port_security_enabled": true,
        "binding:vnic_type": "normal",
        "tags": [],
        "created_at": rfc3339(port.created),
        "updated_at": rfc3339(port.created),
        "revision_number": port.revision,
    })
}

fn list_ports(ctx: &Ctx<'_>, state: &mut State) -> Response {
    state.counters.port_lists += 1;
    let state: &State = state;
    let ports: Vec<Value> = state
        .ports
        .values()
        .filter(|p| p.project_id == ctx.project)
        .filter(|p| ctx.query("name").is_none_or(|name| p.name == name))
        .filter(|p| ctx.query("network_id").is_none_or(|network| p.network_id == network))
        .filter(|p| ctx.query("id").is_none_or(|id| p.id == id))
        .map(|p| render_port(ctx, state, p))
        .collect();
    paged(ctx, "ports", ports)
}

/// One page of a Neutron list, as Neutron pages it with
/// `pagination_max_limit` set (neutron/api/api_common.py
/// `PaginationNativeHelper`): items sorted by ID, those after `marker`, at
/// most `limit` (capped by the maximum), and a `<collection>_links` `next`
/// link (carrying the last ID as `marker`) when more remain. `fields` is
/// applied after the page is cut (the marker is always an ID).
fn paged(ctx: &Ctx<'_>, collection: &str, mut items: Vec<Value>) -> Response {
    items.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    if let Some(marker) = ctx.query("marker") {
        items.retain(|item| item["id"].as_str().is_some_and(|id| id > marker));
    }
    let max = ctx.sim.config().pagination_max_limit;
    let asked = ctx.query("limit").and_then(|l| l.parse::<usize>().ok()).filter(|l| *l > 0);
    let limit = match (asked, max) {
        (Some(asked), Some(max)) => Some(asked.min(max)),
        (asked, max) => asked.or(max),
    };
    let mut body = serde_json::Map::new();
    if let Some(limit) = limit
        && items.len() > limit
    {
        items.truncate(limit);
        let last = items.last().and_then(|item| item["id"].as_str()).unwrap_or_default().to_owned();
        let href = format!("/v2.0/{collection}?limit={limit}&marker={last}");
        body.insert(format!("{collection}_links"), json!([{ "rel": "next", "href": href }]));
    }
    let items: Vec<Value> = items.into_iter().map(|item| only_fields(ctx, item)).collect();
    body.insert(collection.to_owned(), Value::Array(items));
    reply::json(StatusCode::OK, Value::Object(body))
}

/// Security groups and address pairs of a port body, validated.
struct PortFields {
    security_groups: Option<Vec<String>>,
    allowed_address_pairs: Option<Vec<(String, Option<String>)>>,
}

fn port_fields(port: &serde_json::Map<String, Value>) -> Result<PortFields, String> {
    let security_groups = match port.get("security_groups") {
        None => None,
        Some(Value::Array(groups)) => Some(
            groups
                .iter()
                .map(|g| g.as_str().map(str::to_owned).ok_or("Invalid input for security_groups."))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => return Err("Invalid input for security_groups.".into()),
    };
    let allowed_address_pairs = match port.get("allowed_address_pairs") {
        None => None,
        Some(Value::Array(pairs)) => {
            let mut parsed = Vec::with_capacity(pairs.len());
            for pair in pairs {
                let ip = pair.get("ip_address").and_then(Value::as_str).filter(|ip| !ip.is_empty());
                let Some(ip) = ip else {
                    return Err("AllowedAddressPair must contain ip_address".into());
                };
                let mac = pair.get("mac_address").and_then(Value::as_str).map(str::to_owned);
                parsed.push((ip.to_owned(), mac));
            }
            Some(parsed)
        }
        Some(_) => return Err("Invalid input for allowed_address_pairs.".into()),
    };
    Ok(PortFields { security_groups, allowed_address_pairs })
}

fn port_object(body: &[u8]) -> Result<serde_json::Map<String, Value>, String> {
    let request: Value = serde_json::from_slice(body).map_err(|_| "Malformed request body".to_owned())?;
    request.get("port").and_then(Value::as_object).cloned().ok_or_else(|| "Resource body required".to_owned())
}

fn with_macs(pairs: Vec<(String, Option<String>)>, mac: &str) -> Vec<(String, String)> {
    pairs.into_iter().map(|(ip, m)| (ip, m.unwrap_or_else(|| mac.to_owned()))).collect()
}

fn create_port(ctx: &Ctx<'_>, state: &mut State) -> Response {
    state.counters.port_creates += 1;
    let fields = port_object(&ctx.body).and_then(|port| port_fields(&port).map(|fields| (port, fields)));
    let (port, fields) = match fields {
        Ok(parsed) => parsed,
        Err(message) => return error(400, &message),
    };
    let Some(network_id) = port.get("network_id").and_then(Value::as_str).filter(|n| !n.is_empty()) else {
        return error(400, "Failed to parse request. Required attribute 'network_id' not specified");
    };
    if !usable_network(ctx, state, network_id) {
        return network_not_found(network_id);
    }
    if let Some(group) = fields.security_groups.as_deref().and_then(|groups| unknown_group(ctx, state, groups)) {
        return security_group_not_found(group);
    }
    let text = |key: &str| port.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    let id = state.next_id(PORT_KIND);
    let n = state.next_serial();
    let mac_address = mac_for(n);
    let port = SimPort {
        id: id.clone(),
        project_id: ctx.project.clone(),
        name: text("name"),
        description: text("description"),
        network_id: network_id.to_owned(),
        ip_address: fixed_ip_for(n),
        security_groups: fields.security_groups.unwrap_or_else(|| vec!["default".into()]),
        allowed_address_pairs: with_macs(fields.allowed_address_pairs.unwrap_or_default(), &mac_address),
        mac_address,
        bound_uid: None,
        created: ctx.now,
        revision: 1,
    };
    let body = json!({ "port": render_port(ctx, state, &port) });
    state.ports.insert(id, port);
    reply::json(StatusCode::CREATED, body)
}

fn update_port(ctx: &Ctx<'_>, state: &mut State, id: &str) -> Response {
    state.counters.port_updates += 1;
    let parsed = port_object(&ctx.body).and_then(|port| port_fields(&port).map(|fields| (port, fields)));
    let (body, fields) = match parsed {
        Ok(parsed) => parsed,
        Err(message) => return error(400, &message),
    };
    if body.contains_key("network_id") {
        return error(400, "Cannot update read-only attribute network_id");
    }
    if let Some(group) = fields.security_groups.as_deref().and_then(|groups| unknown_group(ctx, state, groups)) {
        return security_group_not_found(group);
    }
    let Some(port) = state.ports.get_mut(id).filter(|p| p.project_id == ctx.project) else {
        return port_not_found(id);
    };
    if let Some(name) = body.get("name").and_then(Value::as_str) {
        port.name = name.to_owned();
    }
    if let Some(description) = body.get("description").and_then(Value::as_str) {
        port.description = description.to_owned();
    }
    if let Some(groups) = fields.security_groups {
        port.security_groups = groups;
    }
    if let Some(pairs) = fields.allowed_address_pairs {
        port.allowed_address_pairs = with_macs(pairs, &port.mac_address);
    }
    port.revision += 1;
    let port = port.clone();
    reply::json(StatusCode::OK, json!({ "port": render_port(ctx, state, &port) }))
}

/// Deleting a port disassociates its floating IP, which stays allocated
/// (neutron/db/l3_db.py `disassociate_floatingips`): only deleting the
/// floating IP itself frees it.
fn delete_port(ctx: &Ctx<'_>, state: &mut State, id: &str) -> Response {
    state.counters.port_deletes += 1;
    let Some(port) = state.ports.get(id).filter(|p| p.project_id == ctx.project) else {
        return port_not_found(id);
    };
    if attached(ctx, port) {
        state.counters.ports_deleted_while_attached += 1;
    }
    state.ports.remove(id);
    for ip in state.floating_ips.values_mut().filter(|f| f.port_id.as_deref() == Some(id)) {
        ip.port_id = None;
    }
    reply::empty(StatusCode::NO_CONTENT)
}

fn render_floating_ip(state: &State, ip: &SimFloatingIp) -> Value {
    let port = ip.port_id.as_ref().and_then(|p| state.ports.get(p));
    json!({
        "id": ip.id,
        "floating_ip_address": ip.address,
        "floating_network_id": ip.network_id,
        "router_id": port.map(|_| "5e5e-sim-router"),
        "port_id": ip.port_id,
        "fixed_ip_address": port.map(|p| p.ip_address.as_str()),
        "status": if port.is_some() { "ACTIVE" } else { "DOWN" },
        "project_id": ip.project_id,
        "tenant_id": ip.project_id,
        "description": ip.description,
        "tags": [],
        "created_at": rfc3339(ip.created),
        "updated_at": rfc3339(ip.created),
        "revision_number": 1,
    })
}

fn list_floating_ips(ctx: &Ctx<'_>, state: &mut State) -> Response {
    state.counters.floating_ip_lists += 1;
    let state: &State = state;
    let ips: Vec<Value> = state
        .floating_ips
        .values()
        .filter(|f| f.project_id == ctx.project)
        .filter(|f| ctx.query("port_id").is_none_or(|port| f.port_id.as_deref() == Some(port)))
        .filter(|f| ctx.query("floating_network_id").is_none_or(|network| f.network_id == network))
        // `description` filters the list (Networking API v2.0 reference,
        // "List floating IPs": the `description` query parameter).
        .filter(|f| ctx.query("description").is_none_or(|description| f.description == description))
        .map(|f| render_floating_ip(state, f))
        .collect();
    paged(ctx, "floatingips", ips)
}

fn create_floating_ip(ctx: &Ctx<'_>, state: &mut State) -> Response {
    state.counters.floating_ip_creates += 1;
    let request: Value = match serde_json::from_slice(&ctx.body) {
        Ok(request) => request,
        Err(_) => return error(400, "Malformed request body"),
    };
    let body = &request["floatingip"];
    let Some(network_id) = body["floating_network_id"].as_str() else {
        return error(400, "Failed to parse request. Required attribute 'floating_network_id' not specified");
    };
    if !ctx.sim.config().external_networks.iter().any(|n| n == network_id) {
        return error(404, &format!("External network {network_id} could not be found."));
    }
    let port_id = body["port_id"].as_str().map(str::to_owned);
    if let Some(port_id) = &port_id {
        if state.ports.get(port_id).is_none_or(|p| p.project_id != ctx.project) {
            return port_not_found(port_id);
        }
        if let Some(existing) = state.floating_ip_of(port_id) {
            let message = format!(
                "Cannot associate floating IP with port {port_id}: it already has floating IP {}.",
                existing.address
            );
            return error(409, &message);
        }
    }
    let id = state.next_id(FLOATING_IP_KIND);
    let n = state.next_serial();
    let ip = SimFloatingIp {
        id: id.clone(),
        project_id: ctx.project.clone(),
        address: floating_ip_for(n),
        network_id: network_id.to_owned(),
        port_id,
        description: body["description"].as_str().unwrap_or_default().to_owned(),
        created: ctx.now,
    };
    let rendered = render_floating_ip(state, &ip);
    state.floating_ips.insert(id, ip);
    reply::json(StatusCode::CREATED, json!({ "floatingip": rendered }))
}

fn delete_floating_ip(ctx: &Ctx<'_>, state: &mut State, id: &str) -> Response {
    state.counters.floating_ip_deletes += 1;
    if state.floating_ips.get(id).is_none_or(|f| f.project_id != ctx.project) {
        return floating_ip_not_found(id);
    }
    state.floating_ips.remove(id);
    reply::empty(StatusCode::NO_CONTENT)
}

/// The project's tenant networks and the external ones, filtered by
/// `router:external`, `id` and `name` (exact, as Neutron filters). `fields`
/// is honoured as Neutron does: only those keys are returned.
fn list_networks(ctx: &Ctx<'_>, state: &mut State) -> Response {
    state.counters.network_lists += 1;
    let external = ctx.query("router:external").map(|v| v.eq_ignore_ascii_case("true"));
    let tenant = state.networks.values().filter(|n| n.project_id == ctx.project).map(|n| {
        json!({
            "id": n.id, "name": n.name, "router:external": false, "shared": false, "status": "ACTIVE",
            "admin_state_up": true, "subnets": [format!("{}-subnet", n.id)], "tags": [],
            "project_id": n.project_id, "tenant_id": n.project_id,
        })
    });
    let config = ctx.sim.config();
    let externals = config.external_networks.iter().map(|id| {
        let tags = config.external_network_tags.get(id).cloned().unwrap_or_default();
        json!({
            "id": id, "name": id, "router:external": true, "shared": false, "status": "ACTIVE",
            "admin_state_up": true, "subnets": [format!("{id}-subnet")], "tags": tags,
            "project_id": "admin", "tenant_id": "admin",
        })
    });
    let networks: Vec<Value> = tenant
        .chain(externals)
        .filter(|n| external.is_none_or(|wanted| n["router:external"] == wanted))
        .filter(|n| ctx.query("id").is_none_or(|wanted| n["id"] == wanted))
        .filter(|n| ctx.query("name").is_none_or(|wanted| n["name"] == wanted))
        .collect();
    paged(ctx, "networks", networks)
}

fn list_security_groups(ctx: &Ctx<'_>, state: &mut State) -> Response {
    state.counters.security_group_lists += 1;
    let groups: Vec<Value> = state
        .security_groups
        .values()
        .filter(|g| g.project_id == ctx.project)
        .filter(|g| ctx.query("name").is_none_or(|wanted| g.name == wanted))
        .map(|g| {
            json!({
                "id": g.id, "name": g.name, "description": "", "stateful": true, "tags": [],
                "project_id": g.project_id, "tenant_id": g.project_id, "security_group_rules": [],
                "revision_number": 1, "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
            })
        })
        .collect();
    paged(ctx, "security_groups", groups)
}

/// Neutron's `fields` query: only the named keys (all when none is named).
fn only_fields(ctx: &Ctx<'_>, item: Value) -> Value {
    let wanted = ctx.query_all("fields");
    match item {
        Value::Object(map) if !wanted.is_empty() => {
            Value::Object(map.into_iter().filter(|(k, _)| wanted.contains(&k.as_str())).collect())
        }
        other => other,
    }
}
