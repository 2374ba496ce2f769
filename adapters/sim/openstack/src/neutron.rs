//! Neutron (networking API v2.0): ports, floating IPs, the tenant networks
//! and security groups ports are made with (registered by the test, as the
//! unikorn network controllers would have made them), their subnets, the
//! external networks floating IPs come from, and each project's `default`
//! security group. Lists are filtered, validated and paged as Neutron does
//! it with `filter-validation` and native pagination.

use std::net::Ipv4Addr;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::handlers::Ctx;
use super::indexed::Identified;
use super::state::{SimFloatingIp, SimNamed, SimPort, SimRule, State, fixed_ip_for, floating_ip_for, mac_for, rfc3339};
use super::{Op, Service, reply};

/// Id kinds (see `State::next_id`).
const PORT_KIND: u16 = 0x0b07;
const FLOATING_IP_KIND: u16 = 0x0f1b;
/// The router between every project's networks and the external ones.
const ROUTER_ID: &str = "5e5e0e0e-0000-4000-8000-000000000001";
/// Every tenant subnet's range (the addresses `fixed_ip_for` hands out),
/// and the external networks'.
const TENANT_CIDR: &str = "172.16.0.0/12";
const EXTERNAL_CIDR: &str = "100.64.0.0/10";
const TIMESTAMP: &str = "2026-01-01T00:00:00Z";

pub(super) fn handle(op: Op, ctx: &Ctx<'_>) -> Response {
    let id = ctx.id.as_deref().unwrap_or_default();
    let mut state = ctx.state();
    prune_nova_ports(ctx, &mut state);
    match op {
        Op::PortList => list_ports(ctx, &mut state),
        Op::PortCreate => create_port(ctx, &mut state),
        Op::PortGet => match state.ports.get(id).filter(|p| p.project_id == ctx.project) {
            Some(port) => {
                reply::json(StatusCode::OK, json!({ "port": only_fields(ctx, render_port(ctx, &state, port)) }))
            }
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
        Op::FloatingIpUpdate => update_floating_ip(ctx, &mut state, id),
        Op::FloatingIpDelete => delete_floating_ip(ctx, &mut state, id),
        Op::NetworkList => {
            state.counters.network_lists += 1;
            paged(ctx, "networks", NETWORK_FILTERS, networks(ctx, &state))
        }
        Op::NetworkGet => match networks(ctx, &state).into_iter().find(|n| n["id"] == id) {
            Some(network) => reply::json(StatusCode::OK, json!({ "network": only_fields(ctx, network) })),
            None => network_not_found(id),
        },
        Op::SubnetList => paged(ctx, "subnets", SUBNET_FILTERS, subnets(ctx, &state)),
        Op::SubnetGet => match subnets(ctx, &state).into_iter().find(|s| s["id"] == id) {
            Some(subnet) => reply::json(StatusCode::OK, json!({ "subnet": only_fields(ctx, subnet) })),
            None => reply::neutron_error(404, "SubnetNotFound", &format!("Subnet {id} could not be found.")),
        },
        Op::RouterList => paged(ctx, "routers", ROUTER_FILTERS, routers(ctx)),
        Op::SecurityGroupList => {
            state.counters.security_group_lists += 1;
            // Listing makes the project's default group, as Neutron does
            // (neutron/db/securitygroups_db.py `get_security_groups` ->
            // `_ensure_default_security_group`).
            state.default_group(&ctx.project);
            paged(ctx, "security_groups", SECURITY_GROUP_FILTERS, security_groups(ctx, &state))
        }
        Op::SecurityGroupCreate => create_security_group(ctx, &mut state),
        Op::SecurityGroupDelete => delete_security_group(ctx, &mut state, id),
        Op::SecurityGroupRuleList => {
            state.default_group(&ctx.project);
            paged(ctx, "security_group_rules", RULE_FILTERS, security_group_rules(ctx, &state))
        }
        Op::SecurityGroupRuleCreate => create_security_group_rule(ctx, &mut state),
        Op::SecurityGroupRuleGet => match state.security_group_rules.get(id).filter(|r| r.project_id == ctx.project) {
            Some(rule) => {
                reply::json(StatusCode::OK, json!({ "security_group_rule": only_fields(ctx, render_rule(rule)) }))
            }
            None => rule_not_found(id),
        },
        Op::SecurityGroupRuleDelete => {
            if state.security_group_rules.get(id).is_none_or(|r| r.project_id != ctx.project) {
                return rule_not_found(id);
            }
            state.security_group_rules.remove(id);
            reply::empty(StatusCode::NO_CONTENT)
        }
        Op::SecurityGroupGet => {
            state.default_group(&ctx.project);
            match security_groups(ctx, &state).into_iter().find(|g| g["id"] == id) {
                Some(group) => reply::json(StatusCode::OK, json!({ "security_group": only_fields(ctx, group) })),
                None => security_group_not_found(id),
            }
        }
        Op::ExtensionList => extensions(),
        Op::QuotaGet => quota(ctx, id),
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

/// neutron-lib `exceptions.PortNotFound`.
fn port_not_found(id: &str) -> Response {
    reply::neutron_error(404, "PortNotFound", &format!("Port {id} could not be found."))
}

/// neutron-lib `exceptions/l3.FloatingIPNotFound`.
fn floating_ip_not_found(id: &str) -> Response {
    reply::neutron_error(404, "FloatingIPNotFound", &format!("Floating IP {id} could not be found"))
}

/// Ports Nova made for servers that are gone: Nova deletes them with the
/// server (nova/network/neutron.py `deallocate_for_instance`).
fn prune_nova_ports(ctx: &Ctx<'_>, state: &mut State) {
    let gone: Vec<String> = state.ports.nova_made().filter(|p| !attached(ctx, p)).map(|p| p.id.clone()).collect();
    for id in gone {
        state.ports.remove(&id);
        state.floating_ips.disassociate(&id);
    }
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
        .find(|g| state.security_groups.get(g.as_str()).is_none_or(|s| s.project_id != ctx.project))
        .map(String::as_str)
}

/// Whether the Nova server booted with this port still exists.
fn attached(ctx: &Ctx<'_>, port: &SimPort) -> bool {
    port.bound_uid.as_deref().is_some_and(|uid| ctx.model(|m| m.truth(uid, ctx.now).live > 0))
}

/// The server a port is bound to (`""` when none), and whether it is.
fn device_of(ctx: &Ctx<'_>, state: &State, port: &SimPort) -> (String, bool) {
    let attached = attached(ctx, port);
    let device_id = match (&port.bound_uid, attached) {
        (Some(uid), true) => state.books.get(uid).and_then(|b| b.id.clone()).unwrap_or_default(),
        _ => String::new(),
    };
    (device_id, attached)
}

/// Whether the port may show one of `devices` as its device: bound to a
/// server of that id (attached or not), or one of them is `""`. Asks no
/// more of the cloud than the books, so a list by device reads the cloud's
/// truth only for the ports bound to it.
fn bound_to_any(state: &State, port: &SimPort, devices: &[&str]) -> bool {
    devices.contains(&"")
        || port
            .bound_uid
            .as_ref()
            .and_then(|uid| state.books.get(uid))
            .and_then(|book| book.id.as_deref())
            .is_some_and(|id| devices.contains(&id))
}

fn render_port(ctx: &Ctx<'_>, state: &State, port: &SimPort) -> Value {
    let (device_id, attached) = device_of(ctx, state, port);
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
        "fixed_ips": [{"subnet_id": state.subnet_id(&port.network_id), "ip_address": port.ip_address}],
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

/// Query keys every list takes besides its filters (neutron/api/v2/base.py
/// `Controller._items`: the skips of `get_filters`).
const NON_FILTERS: &[&str] = &["fields", "sort_key", "sort_dir", "limit", "marker", "page_reverse"];
/// The `standard-attr-tag` filters.
const TAG_FILTERS: &[&str] = &["tags", "tags-any", "not-tags", "not-tags-any"];
/// Attributes each collection may be filtered on (`is_filter` in
/// neutron-lib's api/definitions for ports, floating IPs, networks,
/// subnets, routers and security groups, with the extensions served here).
const PORT_FILTERS: &[&str] = &[
    "id",
    "name",
    "network_id",
    "project_id",
    "tenant_id",
    "mac_address",
    "admin_state_up",
    "status",
    "device_id",
    "device_owner",
    "fixed_ips",
    "description",
    "security_groups",
    "binding:vnic_type",
    "port_security_enabled",
    "revision_number",
    "created_at",
    "updated_at",
];
const FLOATING_IP_FILTERS: &[&str] = &[
    "id",
    "floating_ip_address",
    "floating_network_id",
    "router_id",
    "port_id",
    "fixed_ip_address",
    "status",
    "project_id",
    "tenant_id",
    "description",
    "revision_number",
    "created_at",
    "updated_at",
];
const NETWORK_FILTERS: &[&str] = &[
    "id",
    "name",
    "admin_state_up",
    "status",
    "shared",
    "router:external",
    "project_id",
    "tenant_id",
    "description",
    "revision_number",
    "mtu",
    "created_at",
    "updated_at",
];
const SUBNET_FILTERS: &[&str] = &[
    "id",
    "name",
    "network_id",
    "cidr",
    "ip_version",
    "gateway_ip",
    "enable_dhcp",
    "project_id",
    "tenant_id",
    "description",
    "subnetpool_id",
    "revision_number",
];
const ROUTER_FILTERS: &[&str] =
    &["id", "name", "status", "admin_state_up", "project_id", "tenant_id", "description", "revision_number"];
const SECURITY_GROUP_FILTERS: &[&str] =
    &["id", "name", "description", "project_id", "tenant_id", "stateful", "revision_number", "shared"];

/// Whether an item's attribute matches one filter value, as Neutron
/// compares after converting the query string to the attribute's type
/// (booleans `true`/`false`/`1`/`0`, numbers, strings exactly: a `name` or
/// `description` filter is an equality, neutron/db/_model_query.py
/// `apply_filters`, `column.in_(value)`, unlike Nova's pattern); a list
/// attribute matches when it holds the value; `fixed_ips` takes
/// `ip_address=X` or `subnet_id=Y` (neutron-lib `convert_kvp_list_to_dict`).
fn attribute_matches(attribute: &Value, wanted: &str) -> bool {
    match attribute {
        Value::String(s) => s == wanted,
        Value::Bool(b) => match wanted.to_ascii_lowercase().as_str() {
            "true" | "1" => *b,
            "false" | "0" => !*b,
            _ => false,
        },
        Value::Number(n) => n.to_string() == wanted,
        Value::Array(items) => items.iter().any(|item| match (item, wanted.split_once('=')) {
            (Value::Object(fields), Some((key, value))) => fields.get(key).is_some_and(|v| v == value),
            (other, _) => attribute_matches(other, wanted),
        }),
        _ => false,
    }
}

/// Whether an item whose string attribute holds `value` can pass a filter
/// asking for `wanted` (no filter, or one of its values equal): only to
/// skip rendering the items that cannot, so a list by name or device costs
/// the matches, not every port of the project. [`filtered`] decides.
fn admits(wanted: &[&str], value: &str) -> bool {
    wanted.is_empty() || wanted.contains(&value)
}

/// What a list filters, in ID order: the items `lookup` finds for the
/// values of an indexed filter when it names any, else `all`.
fn candidates<'a, T: Identified, I: Iterator<Item = &'a T>>(
    wanted: &[&str],
    lookup: impl Fn(&str) -> I,
    all: impl Iterator<Item = &'a T> + 'a,
) -> Box<dyn Iterator<Item = &'a T> + 'a> {
    if wanted.is_empty() {
        return Box::new(all);
    }
    let mut found: Vec<&T> = wanted.iter().flat_map(|value| lookup(value)).collect();
    found.sort_by(|a, b| a.id().cmp(b.id()));
    found.dedup_by(|a, b| a.id() == b.id());
    Box::new(found.into_iter())
}

/// Applies the list's filters; a key that is neither a filter of the
/// collection nor a paging or `fields` key is refused 400, as Neutron's
/// `filter-validation` extension refuses it (neutron/api/api_common.py
/// `get_filters_from_dict`: "[...] is invalid attribute for filtering").
/// Repeated values of one key are alternatives.
fn filtered(ctx: &Ctx<'_>, allowed: &[&str], items: Vec<Value>) -> Result<Vec<Value>, Response> {
    let mut keys: Vec<&str> = ctx.query_keys().filter(|k| !NON_FILTERS.contains(k)).collect();
    keys.dedup();
    let invalid: Vec<String> =
        keys.iter().filter(|k| !allowed.contains(k) && !TAG_FILTERS.contains(k)).map(|k| format!("'{k}'")).collect();
    if !invalid.is_empty() {
        return Err(error(400, &format!("[{}] is invalid attribute for filtering", invalid.join(", "))));
    }
    let keep = |item: &Value| {
        keys.iter().all(|key| {
            let values = ctx.query_all(key);
            let tags: Vec<&str> = values.iter().flat_map(|v| v.split(',')).collect();
            let has = |tag: &&str| item["tags"].as_array().is_some_and(|t| t.iter().any(|x| x == *tag));
            match *key {
                "tags" => tags.iter().all(has),
                "tags-any" => tags.iter().any(has),
                "not-tags" => !tags.iter().all(has),
                "not-tags-any" => !tags.iter().any(has),
                _ => values.iter().any(|wanted| attribute_matches(&item[*key], wanted)),
            }
        })
    };
    Ok(items.into_iter().filter(keep).collect())
}

/// One page of a Neutron list, filtered (see [`filtered`]) and paged as
/// Neutron pages with native pagination (neutron/api/api_common.py
/// `get_limit_and_marker`, `PaginationNativeHelper`,
/// `get_pagination_links`): items sorted by ID, those after `marker`, at
/// most `limit` (capped by `pagination_max_limit`, which is also the limit
/// when none is asked); with a limit, a `next` link whenever the page is
/// full and a `previous` link always, absolute, keeping the request's other
/// parameters. A limit that is not a non-negative integer is 400. `fields`
/// is applied after the page is cut.
fn paged(ctx: &Ctx<'_>, collection: &str, allowed: &[&str], items: Vec<Value>) -> Response {
    let mut items = match filtered(ctx, allowed, items) {
        Ok(items) => items,
        Err(refusal) => return refusal,
    };
    items.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    let asked = match ctx.query("limit").map(str::parse::<usize>) {
        None => 0,
        Some(Ok(limit)) => limit,
        Some(Err(_)) => {
            let value = ctx.query("limit").unwrap_or_default();
            return error(400, &format!("Bad limit request: Limit must be an integer 0 or greater and not '{value}'."));
        }
    };
    let limit = match ctx.sim.config().pagination_max_limit.filter(|max| *max > 0) {
        Some(max) if asked == 0 => max,
        Some(max) => asked.min(max),
        None => asked,
    };
    let marker = ctx.query("marker").filter(|_| limit > 0);
    if let Some(marker) = marker {
        items.retain(|item| item["id"].as_str().is_some_and(|id| id > marker));
    }
    let mut body = Map::new();
    if limit > 0 {
        items.truncate(limit);
        let link = |rel: &str, marker: Option<&str>| {
            let mut query = form_urlencoded::Serializer::new(String::new());
            for (key, value) in ctx.query_pairs().iter().filter(|(k, _)| k != "marker" && k != "page_reverse") {
                query.append_pair(key, value);
            }
            if let Some(marker) = marker {
                query.append_pair("marker", marker);
            }
            if rel == "previous" {
                query.append_pair("page_reverse", "True");
            }
            // The link's path is the request's (`security-groups`), not the
            // collection's key (`security_groups`).
            let path = collection.replace('_', "-");
            let href = format!("{}/network/v2.0/{path}?{}", ctx.base_url, query.finish());
            json!({"rel": rel, "href": href})
        };
        let first = items.first().and_then(|item| item["id"].as_str());
        let last = items.last().and_then(|item| item["id"].as_str());
        let mut links = Vec::new();
        if items.len() >= limit {
            links.push(link("next", last));
        }
        links.push(link("previous", first));
        body.insert(format!("{collection}_links"), Value::Array(links));
    }
    let items: Vec<Value> = items.into_iter().map(|item| only_fields(ctx, item)).collect();
    body.insert(collection.to_owned(), Value::Array(items));
    reply::json(StatusCode::OK, Value::Object(body))
}

fn list_ports(ctx: &Ctx<'_>, state: &mut State) -> Response {
    state.counters.port_lists += 1;
    let state: &State = state;
    let (ids, names, networks) = (ctx.query_all("id"), ctx.query_all("name"), ctx.query_all("network_id"));
    let devices = ctx.query_all("device_id");
    let ports: Vec<Value> = candidates(&names, |name| state.ports.named(name), state.ports.values())
        .filter(|p| p.project_id == ctx.project)
        .filter(|p| {
            admits(&ids, &p.id)
                && admits(&names, &p.name)
                && admits(&networks, &p.network_id)
                && (devices.is_empty()
                    || bound_to_any(state, p, &devices) && admits(&devices, &device_of(ctx, state, p).0))
        })
        .map(|p| render_port(ctx, state, p))
        .collect();
    paged(ctx, "ports", PORT_FILTERS, ports)
}

/// Refuses attributes a body may not carry: Neutron answers 400
/// "Unrecognized attribute(s)" for attributes no loaded extension defines
/// (neutron/api/v2/base.py `prepare_request_body` -> neutron-lib
/// `attributes.AttributeInfo.verify_attributes`). The simulator also
/// refuses here attributes Neutron has but it does not model.
fn verify_attributes(body: &Map<String, Value>, known: &[&str]) -> Result<(), String> {
    let unknown: Vec<&str> = body.keys().map(String::as_str).filter(|k| !known.contains(k)).collect();
    if unknown.is_empty() { Ok(()) } else { Err(format!("Unrecognized attribute(s) '{}'", unknown.join(", "))) }
}

const PORT_CREATE_ATTRIBUTES: &[&str] = &[
    "name",
    "description",
    "network_id",
    "security_groups",
    "allowed_address_pairs",
    "fixed_ips",
    "admin_state_up",
    "port_security_enabled",
    "binding:vnic_type",
    "project_id",
    "tenant_id",
];
const PORT_UPDATE_ATTRIBUTES: &[&str] = &[
    "name",
    "description",
    "security_groups",
    "allowed_address_pairs",
    "admin_state_up",
    "port_security_enabled",
    "binding:vnic_type",
    "network_id",
];

/// Security groups and address pairs of a port body, validated.
struct PortFields {
    security_groups: Option<Vec<String>>,
    allowed_address_pairs: Option<Vec<(String, Option<String>)>>,
}

fn port_fields(port: &Map<String, Value>) -> Result<PortFields, String> {
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
    // A value of the wrong type for one of the harmless flags.
    for flag in ["admin_state_up", "port_security_enabled"] {
        if port.get(flag).is_some_and(|v| !v.is_boolean()) {
            return Err(format!("Invalid input for {flag}. Reason: '{}' is not a valid boolean value.", port[flag]));
        }
    }
    Ok(PortFields { security_groups, allowed_address_pairs })
}

fn port_object(body: &[u8], known: &[&str]) -> Result<Map<String, Value>, String> {
    let request: Value = serde_json::from_slice(body).map_err(|_| "Malformed request body".to_owned())?;
    let port = request.get("port").and_then(Value::as_object).cloned().ok_or("Resource body required")?;
    verify_attributes(&port, known)?;
    Ok(port)
}

fn with_macs(pairs: Vec<(String, Option<String>)>, mac: &str) -> Vec<(String, String)> {
    pairs.into_iter().map(|(ip, m)| (ip, m.unwrap_or_else(|| mac.to_owned()))).collect()
}

/// Whether an address is in a tenant subnet's range.
fn in_tenant_subnet(ip: &str) -> bool {
    ip.parse::<Ipv4Addr>().is_ok_and(|ip| ip.octets()[0] == 172 && (16..=31).contains(&ip.octets()[1]))
}

/// The fixed IP a port create asks for, validated as Neutron's IPAM does
/// (neutron/db/ipam_backend_mixin.py `_validate_fixed_ips`, ipam/driver):
/// a subnet of another network is 400 `InvalidInput`, an address outside
/// the subnet 400 `InvalidIpForSubnet`, an address in use on the network
/// 409 `IpAddressAlreadyAllocated`. The simulator models one fixed IP per
/// port.
fn requested_fixed_ip(state: &State, network_id: &str, port: &Map<String, Value>) -> Result<Option<String>, Response> {
    let Some(fixed_ips) = port.get("fixed_ips") else { return Ok(None) };
    let Some(entries) = fixed_ips.as_array() else {
        return Err(error(400, "Invalid input for fixed_ips. Reason: Invalid data format for fixed IP."));
    };
    let Some(entry) = entries.first() else { return Ok(None) };
    if entries.len() > 1 {
        return Err(error(400, "Invalid input for fixed_ips: the simulator models one fixed IP per port."));
    }
    let subnet = state.subnet_id(network_id);
    if let Some(asked) = entry.get("subnet_id").and_then(Value::as_str)
        && asked != subnet
    {
        let message = format!(
            "Invalid input for operation: Failed to create port on network {network_id}, because fixed_ips included invalid subnet {asked}."
        );
        return Err(reply::neutron_error(400, "InvalidInput", &message));
    }
    let Some(ip) = entry.get("ip_address").and_then(Value::as_str) else { return Ok(None) };
    if !in_tenant_subnet(ip) {
        let message = format!("IP address {ip} is not a valid IP for the specified subnet.");
        return Err(reply::neutron_error(400, "InvalidIpForSubnet", &message));
    }
    if state.ports.holds_address(network_id, ip) {
        let message = format!("IP address {ip} already allocated in subnet {subnet}");
        return Err(reply::neutron_error(409, "IpAddressAlreadyAllocated", &message));
    }
    Ok(Some(ip.to_owned()))
}

fn create_port(ctx: &Ctx<'_>, state: &mut State) -> Response {
    state.counters.port_creates += 1;
    let fields =
        port_object(&ctx.body, PORT_CREATE_ATTRIBUTES).and_then(|port| port_fields(&port).map(|fields| (port, fields)));
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
    let fixed_ip = match requested_fixed_ip(state, network_id, &port) {
        Ok(ip) => ip,
        Err(refusal) => return refusal,
    };
    // Without `security_groups` a port gets the project's default group
    // (securitygroups_db.py `_ensure_default_security_group_on_port`).
    let security_groups = match fields.security_groups {
        Some(groups) => groups,
        None => vec![state.default_group(&ctx.project)],
    };
    let text = |key: &str| port.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    let id = state.next_id(PORT_KIND);
    let mut n = state.next_serial();
    let ip_address = match fixed_ip {
        Some(ip) => ip,
        None => loop {
            let candidate = fixed_ip_for(n);
            if !state.ports.holds_address(network_id, &candidate) {
                break candidate;
            }
            n = state.next_serial();
        },
    };
    let mac_address = mac_for(n);
    let port = SimPort {
        id: id.clone(),
        project_id: ctx.project.clone(),
        name: text("name"),
        description: text("description"),
        network_id: network_id.to_owned(),
        ip_address,
        security_groups,
        allowed_address_pairs: with_macs(fields.allowed_address_pairs.unwrap_or_default(), &mac_address),
        mac_address,
        bound_uid: None,
        nova_made: false,
        created: ctx.now,
        revision: 1,
    };
    let body = json!({ "port": render_port(ctx, state, &port) });
    state.ports.insert(port);
    reply::json(StatusCode::CREATED, body)
}

fn update_port(ctx: &Ctx<'_>, state: &mut State, id: &str) -> Response {
    state.counters.port_updates += 1;
    let parsed =
        port_object(&ctx.body, PORT_UPDATE_ATTRIBUTES).and_then(|port| port_fields(&port).map(|fields| (port, fields)));
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
    if state.ports.get(id).is_none_or(|p| p.project_id != ctx.project) {
        return port_not_found(id);
    }
    let updated = state.ports.update(id, |port| {
        update_port_fields(port, &body, fields);
        port.clone()
    });
    let Some(port) = updated else { return port_not_found(id) };
    reply::json(StatusCode::OK, json!({ "port": render_port(ctx, state, &port) }))
}

/// The fields a `PUT /ports/{id}` sets.
fn update_port_fields(port: &mut SimPort, body: &Map<String, Value>, fields: PortFields) {
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
    state.floating_ips.disassociate(id);
    reply::empty(StatusCode::NO_CONTENT)
}

fn render_floating_ip(state: &State, ip: &SimFloatingIp) -> Value {
    let port = ip.port_id.as_ref().and_then(|p| state.ports.get(p));
    json!({
        "id": ip.id,
        "floating_ip_address": ip.address,
        "floating_network_id": ip.network_id,
        "router_id": port.map(|_| ROUTER_ID),
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
    let (ids, descriptions, ports) = (ctx.query_all("id"), ctx.query_all("description"), ctx.query_all("port_id"));
    let found = if ports.is_empty() {
        candidates(&descriptions, |d| state.floating_ips.described(d), state.floating_ips.values())
    } else {
        candidates(&ports, |port| state.floating_ips.on_port(port), state.floating_ips.values())
    };
    let ips: Vec<Value> = found
        .filter(|f| f.project_id == ctx.project)
        .filter(|f| {
            admits(&ids, &f.id)
                && admits(&descriptions, &f.description)
                && admits(&ports, f.port_id.as_deref().unwrap_or_default())
        })
        .map(|f| render_floating_ip(state, f))
        .collect();
    paged(ctx, "floatingips", FLOATING_IP_FILTERS, ips)
}

/// A port a floating IP may be associated with: the caller's, without a
/// floating IP of its own already (neutron/db/l3_db.py
/// `_check_and_get_fip_assoc`: 409 `FloatingIPPortAlreadyAssociated`).
fn associable(ctx: &Ctx<'_>, state: &State, port_id: &str, floating_ip_id: Option<&str>) -> Result<(), Response> {
    let Some(port) = state.ports.get(port_id).filter(|p| p.project_id == ctx.project) else {
        return Err(port_not_found(port_id));
    };
    if let Some(existing) = state.floating_ip_of(port_id).filter(|f| Some(f.id.as_str()) != floating_ip_id) {
        let message = format!(
            "Cannot associate floating IP {} ({}) with port {port_id} using fixed IP {}, as that fixed IP already has a floating IP on external network {}.",
            existing.address,
            floating_ip_id.unwrap_or_default(),
            port.ip_address,
            existing.network_id
        );
        return Err(reply::neutron_error(409, "FloatingIPPortAlreadyAssociated", &message));
    }
    Ok(())
}

const FLOATING_IP_CREATE_ATTRIBUTES: &[&str] =
    &["floating_network_id", "port_id", "fixed_ip_address", "description", "project_id", "tenant_id"];
const FLOATING_IP_UPDATE_ATTRIBUTES: &[&str] = &["port_id", "fixed_ip_address", "description"];

fn floating_ip_object(body: &[u8], known: &[&str]) -> Result<Map<String, Value>, Response> {
    let request: Value = serde_json::from_slice(body).map_err(|_| error(400, "Malformed request body"))?;
    let object = request
        .get("floatingip")
        .and_then(Value::as_object)
        .cloned()
        .ok_or_else(|| error(400, "Resource body required"))?;
    verify_attributes(&object, known).map_err(|message| error(400, &message))?;
    Ok(object)
}

fn create_floating_ip(ctx: &Ctx<'_>, state: &mut State) -> Response {
    state.counters.floating_ip_creates += 1;
    let body = match floating_ip_object(&ctx.body, FLOATING_IP_CREATE_ATTRIBUTES) {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    let Some(network_id) = body.get("floating_network_id").and_then(Value::as_str) else {
        return error(400, "Failed to parse request. Required attribute 'floating_network_id' not specified");
    };
    if !ctx.sim.config().external_networks.iter().any(|n| n == network_id) {
        // neutron-lib `exceptions.NetworkNotFound` (l3_db.py
        // `create_floatingip` looks the external network up first).
        return network_not_found(network_id);
    }
    let port_id = body.get("port_id").and_then(Value::as_str).map(str::to_owned);
    if let Some(port_id) = &port_id
        && let Err(refusal) = associable(ctx, state, port_id, None)
    {
        return refusal;
    }
    let id = state.next_id(FLOATING_IP_KIND);
    let n = state.next_serial();
    let ip = SimFloatingIp {
        id: id.clone(),
        project_id: ctx.project.clone(),
        address: floating_ip_for(n),
        network_id: network_id.to_owned(),
        port_id,
        description: body.get("description").and_then(Value::as_str).unwrap_or_default().to_owned(),
        created: ctx.now,
    };
    let rendered = render_floating_ip(state, &ip);
    state.floating_ips.insert(ip);
    reply::json(StatusCode::CREATED, json!({ "floatingip": rendered }))
}

/// `PUT /floatingips/{id}`: `port_id` associates (a port) or disassociates
/// (`null`); `description` is kept (neutron/db/l3_db.py `update_floatingip`).
fn update_floating_ip(ctx: &Ctx<'_>, state: &mut State, id: &str) -> Response {
    let body = match floating_ip_object(&ctx.body, FLOATING_IP_UPDATE_ATTRIBUTES) {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    if state.floating_ips.get(id).is_none_or(|f| f.project_id != ctx.project) {
        return floating_ip_not_found(id);
    }
    let port_id = match body.get("port_id") {
        None => None,
        Some(Value::Null) => Some(None),
        Some(Value::String(port_id)) => {
            if let Err(refusal) = associable(ctx, state, port_id, Some(id)) {
                return refusal;
            }
            Some(Some(port_id.clone()))
        }
        Some(other) => {
            return error(400, &format!("Invalid input for port_id. Reason: '{other}' is not a valid UUID."));
        }
    };
    let description = body.get("description").and_then(Value::as_str);
    let updated = state.floating_ips.update(id, |ip| {
        if let Some(port_id) = port_id {
            ip.port_id = port_id;
        }
        if let Some(description) = description {
            ip.description = description.to_owned();
        }
        ip.clone()
    });
    let Some(ip) = updated else { return floating_ip_not_found(id) };
    reply::json(StatusCode::OK, json!({ "floatingip": render_floating_ip(state, &ip) }))
}

fn delete_floating_ip(ctx: &Ctx<'_>, state: &mut State, id: &str) -> Response {
    state.counters.floating_ip_deletes += 1;
    if state.floating_ips.get(id).is_none_or(|f| f.project_id != ctx.project) {
        return floating_ip_not_found(id);
    }
    state.floating_ips.remove(id);
    reply::empty(StatusCode::NO_CONTENT)
}

/// The project's tenant networks and the external ones.
fn networks(ctx: &Ctx<'_>, state: &State) -> Vec<Value> {
    let network = |id: &str, name: &str, project: &str, external: bool, tags: Vec<String>| {
        json!({
            "id": id, "name": name, "router:external": external, "shared": false, "status": "ACTIVE",
            "admin_state_up": true, "subnets": [state.subnet_id(id)], "tags": tags, "description": "",
            "mtu": 1450, "project_id": project, "tenant_id": project, "revision_number": 1,
            "created_at": TIMESTAMP, "updated_at": TIMESTAMP,
        })
    };
    let tenant = state
        .networks
        .values()
        .filter(|n| n.project_id == ctx.project)
        .map(|n| network(&n.id, &n.name, &n.project_id, false, vec![]));
    let config = ctx.sim.config();
    let externals = config.external_networks.iter().map(|id| {
        let tags = config.external_network_tags.get(id).cloned().unwrap_or_default();
        network(id, id, "admin", true, tags)
    });
    tenant.chain(externals).collect()
}

/// One subnet per network (`TENANT_CIDR`, or `EXTERNAL_CIDR` on an
/// external network).
fn subnets(ctx: &Ctx<'_>, state: &State) -> Vec<Value> {
    networks(ctx, state)
        .iter()
        .map(|network| {
            let external = network["router:external"] == true;
            let (cidr, gateway, pool) = if external {
                (EXTERNAL_CIDR, "100.64.0.1", json!([{"start": "100.64.0.2", "end": "100.127.255.254"}]))
            } else {
                (TENANT_CIDR, "172.16.0.1", json!([{"start": "172.16.0.2", "end": "172.31.255.254"}]))
            };
            json!({
                "id": network["subnets"][0], "name": "", "network_id": network["id"], "cidr": cidr,
                "ip_version": 4, "gateway_ip": gateway, "enable_dhcp": !external, "allocation_pools": pool,
                "dns_nameservers": [], "host_routes": [], "description": "", "tags": [], "subnetpool_id": null,
                "ipv6_ra_mode": null, "ipv6_address_mode": null, "service_types": [],
                "project_id": network["project_id"], "tenant_id": network["project_id"], "revision_number": 1,
                "created_at": TIMESTAMP, "updated_at": TIMESTAMP,
            })
        })
        .collect()
}

/// The router floating IPs are reached through, the caller's, gatewayed to
/// the first external network.
fn routers(ctx: &Ctx<'_>) -> Vec<Value> {
    let gateway = ctx.sim.config().external_networks.first().map(|network| json!({"network_id": network}));
    vec![json!({
        "id": ROUTER_ID, "name": "router", "status": "ACTIVE", "admin_state_up": true, "description": "",
        "external_gateway_info": gateway, "routes": [], "tags": [], "project_id": ctx.project,
        "tenant_id": ctx.project, "revision_number": 1, "created_at": TIMESTAMP, "updated_at": TIMESTAMP,
    })]
}

/// The project's security groups, each with its rules.
fn security_groups(ctx: &Ctx<'_>, state: &State) -> Vec<Value> {
    state
        .security_groups
        .values()
        .filter(|g| g.project_id == ctx.project)
        .map(|g| {
            let rules: Vec<Value> =
                state.security_group_rules.values().filter(|r| r.security_group_id == g.id).map(render_rule).collect();
            json!({
                "id": g.id, "name": g.name, "description": g.description, "stateful": true, "shared": false,
                "tags": [], "project_id": g.project_id, "tenant_id": g.project_id, "security_group_rules": rules,
                "revision_number": 1, "created_at": TIMESTAMP, "updated_at": TIMESTAMP,
            })
        })
        .collect()
}

fn render_rule(rule: &SimRule) -> Value {
    json!({
        "id": rule.id, "security_group_id": rule.security_group_id, "direction": rule.direction,
        "ethertype": rule.ethertype, "protocol": rule.protocol, "port_range_min": rule.port_range_min,
        "port_range_max": rule.port_range_max, "remote_ip_prefix": rule.remote_ip_prefix,
        "remote_group_id": rule.remote_group_id, "remote_address_group_id": null, "normalized_cidr": rule.remote_ip_prefix,
        "description": rule.description, "project_id": rule.project_id, "tenant_id": rule.project_id,
        "revision_number": 0, "created_at": TIMESTAMP, "updated_at": TIMESTAMP, "tags": [],
    })
}

/// The project's security group rules.
fn security_group_rules(ctx: &Ctx<'_>, state: &State) -> Vec<Value> {
    state.security_group_rules.values().filter(|r| r.project_id == ctx.project).map(render_rule).collect()
}

/// neutron `extensions/securitygroup.SecurityGroupRuleNotFound`.
fn rule_not_found(id: &str) -> Response {
    reply::neutron_error(404, "SecurityGroupRuleNotFound", &format!("Security group rule {id} does not exist"))
}

/// The object under `key` of a request body, its attributes checked.
fn body_object(body: &[u8], key: &str, known: &[&str]) -> Result<Map<String, Value>, Response> {
    let request: Value = serde_json::from_slice(body).map_err(|_| error(400, "Malformed request body"))?;
    let object =
        request.get(key).and_then(Value::as_object).cloned().ok_or_else(|| error(400, "Resource body required"))?;
    verify_attributes(&object, known).map_err(|message| error(400, &message))?;
    Ok(object)
}

const SECURITY_GROUP_CREATE_ATTRIBUTES: &[&str] = &["name", "description", "stateful", "project_id", "tenant_id"];

/// `POST /security-groups` (securitygroups_db.py `create_security_group`):
/// 201 with the group and its two egress rules (IPv4, IPv6); a second
/// group named `default` 409 `SecurityGroupDefaultAlreadyExists`; another
/// project's id 403 (policy `create_security_group`, a non-admin).
fn create_security_group(ctx: &Ctx<'_>, state: &mut State) -> Response {
    let body = match body_object(&ctx.body, "security_group", SECURITY_GROUP_CREATE_ATTRIBUTES) {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    let text = |key: &str| body.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    if ["project_id", "tenant_id"].iter().any(|key| body.get(*key).is_some_and(|p| p.as_str() != Some(&ctx.project))) {
        return error(
            403,
            "(rule:create_security_group and (rule:create_security_group:tenant_id)) is disallowed by policy",
        );
    }
    let name = text("name");
    state.default_group(&ctx.project);
    if name == "default" {
        return reply::neutron_error(
            409,
            "SecurityGroupDefaultAlreadyExists",
            "Default security group already exists.",
        );
    }
    let id = state.next_id(0x05e6);
    let group = SimNamed { id: id.clone(), name, project_id: ctx.project.clone(), description: text("description") };
    for ethertype in ["IPv4", "IPv6"] {
        state.add_rule(SimRule::open(&group, "egress", ethertype));
    }
    state.security_groups.insert(id.clone(), group);
    match security_groups(ctx, state).into_iter().find(|g| g["id"] == id.as_str()) {
        Some(group) => reply::json(StatusCode::CREATED, json!({ "security_group": group })),
        None => security_group_not_found(&id),
    }
}

/// `DELETE /security-groups/{id}` (securitygroups_db.py
/// `delete_security_group`): 204, its rules with it; the `default` group
/// 409 `SecurityGroupCannotRemoveDefault`, one a port uses 409
/// `SecurityGroupInUse`.
fn delete_security_group(ctx: &Ctx<'_>, state: &mut State, id: &str) -> Response {
    let Some(group) = state.security_groups.get(id).filter(|g| g.project_id == ctx.project) else {
        return security_group_not_found(id);
    };
    if group.name == "default" {
        return reply::neutron_error(
            409,
            "SecurityGroupCannotRemoveDefault",
            "Insufficient rights for removing default security group.",
        );
    }
    if state.ports.values().any(|p| p.security_groups.iter().any(|g| g == id)) {
        return reply::neutron_error(409, "SecurityGroupInUse", &format!("Security Group {id} in use."));
    }
    state.security_groups.remove(id);
    state.security_group_rules.retain(|_, r| r.security_group_id != id);
    reply::empty(StatusCode::NO_CONTENT)
}

const RULE_CREATE_ATTRIBUTES: &[&str] = &[
    "security_group_id",
    "direction",
    "ethertype",
    "protocol",
    "port_range_min",
    "port_range_max",
    "remote_ip_prefix",
    "remote_group_id",
    "description",
    "project_id",
    "tenant_id",
];
const RULE_FILTERS: &[&str] = &[
    "id",
    "security_group_id",
    "direction",
    "ethertype",
    "protocol",
    "port_range_min",
    "port_range_max",
    "remote_ip_prefix",
    "remote_group_id",
    "description",
    "project_id",
    "tenant_id",
    "revision_number",
];
/// Protocols by name (neutron-lib constants `IP_PROTOCOL_MAP`, in part).
const PROTOCOLS: &[&str] = &["tcp", "udp", "icmp", "icmpv6", "ipv6-icmp", "sctp", "gre", "esp", "ah", "vrrp", "any"];

/// `POST /security-group-rules` (securitygroups_db.py
/// `create_security_group_rule`, `_validate_security_group_rule`,
/// `_check_for_duplicate_rules`): `security_group_id` and `direction`
/// (`ingress`/`egress`) required, `ethertype` `IPv4` by default; a protocol
/// by name or number 0-255, else 400 `SecurityGroupRuleInvalidProtocol`; a
/// port range needs a protocol (400 `SecurityGroupProtocolRequiredWithPorts`),
/// for TCP, UDP and SCTP both ends, min <= max (400
/// `SecurityGroupInvalidPortRange`), neither 0 (400
/// `SecurityGroupInvalidPortValue`), for ICMP a type and code 0-255 (400
/// `SecurityGroupInvalidIcmpValue`, `SecurityGroupMissingIcmpType`); a remote prefix and a remote group
/// together 400 `SecurityGroupRemoteGroupAndRemoteIpPrefix`; a prefix of
/// the other ethertype 400 `SecurityGroupRuleParameterConflict`; an
/// unknown group 404; a duplicate 409 `SecurityGroupRuleExists`.
fn create_security_group_rule(ctx: &Ctx<'_>, state: &mut State) -> Response {
    let body = match body_object(&ctx.body, "security_group_rule", RULE_CREATE_ATTRIBUTES) {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    let text = |key: &str| body.get(key).and_then(Value::as_str).map(str::to_owned);
    let Some(group_id) = text("security_group_id") else {
        return error(400, "Failed to parse request. Required attribute 'security_group_id' not specified");
    };
    let direction = match text("direction").as_deref() {
        Some(direction @ ("ingress" | "egress")) => direction.to_owned(),
        Some(other) => {
            return error(400, &format!("Invalid input for direction. Reason: {other} is not in valid_values."));
        }
        None => return error(400, "Failed to parse request. Required attribute 'direction' not specified"),
    };
    let ethertype = match text("ethertype").as_deref() {
        None => "IPv4".to_owned(),
        Some(ethertype @ ("IPv4" | "IPv6")) => ethertype.to_owned(),
        Some(other) => {
            return error(400, &format!("Invalid input for ethertype. Reason: {other} is not in valid_values."));
        }
    };
    let protocol = match body.get("protocol") {
        None | Some(Value::Null) => None,
        Some(Value::String(p)) if PROTOCOLS.contains(&p.to_ascii_lowercase().as_str()) => Some(p.to_ascii_lowercase()),
        Some(Value::String(p)) if p.parse::<u8>().is_ok() => Some(p.clone()),
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n <= 255) => Some(n.to_string()),
        Some(other) => {
            let message = format!(
                "Security group rule protocol {} not supported. Only protocol values [{}] and integer representations [0 to 255] are supported.",
                other.as_str().map_or_else(|| other.to_string(), str::to_owned),
                PROTOCOLS.join(", ")
            );
            return reply::neutron_error(400, "SecurityGroupRuleInvalidProtocol", &message);
        }
    };
    let port = |key: &str| match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_u64()
            .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n <= 65_535)
            .map(Some)
            .ok_or_else(|| {
                error(400, &format!("Invalid input for {key}. Reason: '{value}' is not a valid port number."))
            }),
    };
    let (min, max) = match (port("port_range_min"), port("port_range_max")) {
        (Ok(min), Ok(max)) => (min, max),
        (Err(refusal), _) | (_, Err(refusal)) => return refusal,
    };
    if (min.is_some() || max.is_some()) && protocol.is_none() {
        return reply::neutron_error(
            400,
            "SecurityGroupProtocolRequiredWithPorts",
            "Must also specify protocol if port range is given.",
        );
    }
    // `_validate_port_range`: TCP, UDP and SCTP need both ends, neither 0,
    // min <= max; ICMP's are a type and a code, each 0-255, no code
    // without a type.
    let ported = matches!(protocol.as_deref(), Some("tcp" | "udp" | "sctp" | "6" | "17" | "132"));
    let icmp = matches!(protocol.as_deref(), Some("icmp" | "icmpv6" | "ipv6-icmp" | "1" | "58"));
    if ported && (min.is_some() || max.is_some()) {
        if let Some(zero) = [min, max].into_iter().flatten().find(|p| *p == 0) {
            let message = format!("Invalid value for port {zero}.");
            return reply::neutron_error(400, "SecurityGroupInvalidPortValue", &message);
        }
        if !matches!((min, max), (Some(min), Some(max)) if min <= max) {
            return reply::neutron_error(
                400,
                "SecurityGroupInvalidPortRange",
                "For TCP/UDP protocols, port_range_min must be <= port_range_max",
            );
        }
    }
    if icmp {
        for (key, field, value) in [("port_range_min", "type", min), ("port_range_max", "code", max)] {
            if let Some(value) = value.filter(|v| *v > 255) {
                let message = format!("Invalid value for ICMP {key} ({field}): {value}. It must be 0 to 255.");
                return reply::neutron_error(400, "SecurityGroupInvalidIcmpValue", &message);
            }
        }
        if let (None, Some(code)) = (min, max) {
            let message =
                format!("ICMP code (port-range-max) {code} is provided but ICMP type (port-range-min) is missing.");
            return reply::neutron_error(400, "SecurityGroupMissingIcmpType", &message);
        }
    }
    let remote_ip_prefix = text("remote_ip_prefix");
    let remote_group_id = text("remote_group_id");
    if remote_ip_prefix.is_some() && remote_group_id.is_some() {
        return reply::neutron_error(
            400,
            "SecurityGroupRemoteGroupAndRemoteIpPrefix",
            "Only remote_ip_prefix or remote_group_id may be provided.",
        );
    }
    if let Some(prefix) = &remote_ip_prefix {
        let v6 = prefix.contains(':');
        let valid = prefix.split_once('/').map_or(prefix.as_str(), |(ip, _)| ip).parse::<std::net::IpAddr>().is_ok();
        if !valid {
            return error(
                400,
                &format!("Invalid input for remote_ip_prefix. Reason: '{prefix}' is not a valid IP subnet."),
            );
        }
        if v6 != (ethertype == "IPv6") {
            return reply::neutron_error(
                400,
                "SecurityGroupRuleParameterConflict",
                &format!("Conflicting value ethertype {ethertype} for CIDR {prefix}"),
            );
        }
    }
    let Some(group) = state.security_groups.get(&group_id).filter(|g| g.project_id == ctx.project).cloned() else {
        return security_group_not_found(&group_id);
    };
    if let Some(remote) = &remote_group_id
        && state.security_groups.get(remote).is_none_or(|g| g.project_id != ctx.project)
    {
        return security_group_not_found(remote);
    }
    let rule = SimRule {
        protocol,
        port_range_min: min,
        port_range_max: max,
        remote_ip_prefix,
        remote_group_id,
        description: text("description").unwrap_or_default(),
        ..SimRule::open(&group, &direction, &ethertype)
    };
    if let Some(existing) = state.security_group_rules.values().find(|r| r.same_as(&rule)) {
        let message = format!("Security group rule already exists. Rule id is {}.", existing.id);
        return reply::neutron_error(409, "SecurityGroupRuleExists", &message);
    }
    let id = state.add_rule(rule);
    match state.security_group_rules.get(&id) {
        Some(rule) => reply::json(StatusCode::CREATED, json!({ "security_group_rule": render_rule(rule) })),
        None => rule_not_found(&id),
    }
}

/// `GET /extensions`: the extensions whose behaviour this simulator has.
fn extensions() -> Response {
    let served = [
        ("filter-validation", "Filter parameters validation"),
        ("pagination", "Pagination support"),
        ("sorting", "Sorting support"),
        ("security-group", "security-group"),
        ("router", "Neutron L3 Router"),
        ("external-net", "Neutron external network"),
        ("allowed-address-pairs", "Allowed Address Pairs"),
        ("port-security", "Port Security"),
        ("project-id", "project_id field enabled"),
        ("standard-attr-description", "standard-attr-description"),
        ("standard-attr-revisions", "Resource revision numbers"),
        ("standard-attr-timestamp", "Resource timestamps"),
        ("binding", "Port Binding"),
        ("quotas", "Quota management support"),
    ];
    let extensions: Vec<Value> = served
        .iter()
        .map(|(alias, name)| json!({"alias": alias, "name": name, "description": name, "links": [], "updated": TIMESTAMP}))
        .collect();
    reply::json(StatusCode::OK, json!({ "extensions": extensions }))
}

/// `GET /quotas/{project_id}`: Neutron's default quotas
/// (neutron/conf/quota.py); another project's is refused to a non-admin.
fn quota(ctx: &Ctx<'_>, project_id: &str) -> Response {
    if project_id != ctx.project {
        return reply::neutron_error(
            403,
            "HTTPForbidden",
            "Non-admin is not authorized to access quotas for another project",
        );
    }
    reply::json(
        StatusCode::OK,
        json!({"quota": {
            "network": 100, "subnet": 100, "subnetpool": -1, "port": 500, "router": 10, "floatingip": 50,
            "security_group": 10, "security_group_rule": 100, "rbac_policy": 10,
        }}),
    )
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
