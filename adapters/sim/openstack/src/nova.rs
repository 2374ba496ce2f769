//! Nova (compute API v2.1) over the SimCloud model: servers are the model's,
//! addressed by the model's ids; names, flavors, metadata and the port come
//! from the create request the simulator kept for the Server uid.

use axum::http::{HeaderValue, StatusCode};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Value, json};
use server_core::model::{AllowedAddressPair, NetworkAttachment, Tag};
use server_core::port::{CreateRequest, Owner, PowerState, ProviderServer, ProviderStatus, ServerRef};

use super::handlers::{Ctx, Handled, model_error};
use super::state::{ServerBook, State, naive_utc, rfc3339};
use super::{Op, Service, reply};

/// Nova metadata keys tying a server to its Server.
const UID_KEY: &str = "unikorn:server-uid";
const NAMESPACE_KEY: &str = "unikorn:server-namespace";
const NAME_KEY: &str = "unikorn:server-name";
/// Nova's limits.
const METADATA_MAX: usize = 255;
const USER_DATA_MAX: usize = 65_535;

pub(super) fn handle(op: Op, ctx: &Ctx<'_>) -> Handled {
    let id = ctx.id.as_deref().unwrap_or_default();
    match op {
        Op::ServerList => list(ctx, false),
        Op::ServerListDetail => list(ctx, true),
        Op::ServerCreate => create(ctx),
        Op::ServerGet => show(ctx, id),
        Op::ServerDelete => delete(ctx, id),
        Op::ServerAction => action(ctx, id),
        Op::ServerMetadataUpdate => update_metadata(ctx, id),
        _ => (error(404, "The resource could not be found."), None),
    }
}

fn error(code: u16, message: &str) -> axum::response::Response {
    reply::error(Service::Compute, code, message)
}

fn not_found(id: &str) -> Handled {
    (error(404, &format!("Instance {id} could not be found.")), None)
}

/// `GET /servers[/detail]`: newest first, `osapi_max_limit` per page, a
/// `next` link while more remain.
fn list(ctx: &Ctx<'_>, detail: bool) -> Handled {
    let mut state = ctx.state();
    state.counters.server_lists += 1;
    let mut records = match ctx.model(|m| m.list(ctx.now, &ctx.project)) {
        Ok(records) => records,
        Err(e) => return model_error(ctx, Service::Compute, &e),
    };
    records.sort_by(|a, b| b.created.cmp(&a.created).then_with(|| b.id.cmp(&a.id)));
    let page_size = ctx.sim.config().page_size.max(1);
    let limit = match ctx.query("limit").map(str::parse::<usize>) {
        None => page_size,
        Some(Ok(limit)) => limit.min(page_size),
        Some(Err(_)) => return (error(400, "Invalid input for query parameters limit."), None),
    };
    let start = match ctx.query("marker") {
        None => 0,
        Some(marker) => match records.iter().position(|r| r.id == marker) {
            Some(i) => i + 1,
            None => return (error(400, &format!("marker [{marker}] not found")), None),
        },
    };
    let page: Vec<&ProviderServer> = records.iter().skip(start).take(limit).collect();
    // Nova links a next page whenever this one is full, even when nothing
    // follows (nova/api/openstack/common.py, `_get_collection_links`): a
    // client must stop on an empty page, not on a missing link.
    let more = page.len() == limit;
    let mut servers = Vec::with_capacity(page.len());
    for record in &page {
        state.ids.insert(record.id.clone(), record.server_uid.clone());
        servers.push(if detail { render(ctx, &state, record) } else { summary(ctx, &state, record) });
    }
    let mut body = json!({ "servers": servers });
    if let Some(last) = page.last().filter(|_| more) {
        let path = if detail { "servers/detail" } else { "servers" };
        body["servers_links"] = json!([{
            "rel": "next",
            "href": format!("{}/compute/v2.1/{path}?limit={limit}&marker={}", ctx.base_url, last.id),
        }]);
    }
    (reply::json(StatusCode::OK, body), None)
}

/// `GET /servers/{id}`.
fn show(ctx: &Ctx<'_>, id: &str) -> Handled {
    let mut state = ctx.state();
    state.counters.server_gets += 1;
    let Some(uid) = state.ids.get(id).cloned() else { return not_found(id) };
    match ctx.model(|m| m.get(ctx.now, &uid)) {
        Ok(Some(record)) if record.id == id => {
            (reply::json(StatusCode::OK, json!({ "server": render(ctx, &state, &record) })), None)
        }
        Ok(_) => not_found(id),
        Err(e) => model_error(ctx, Service::Compute, &e),
    }
}

/// `DELETE /servers/{id}`: accepted at once; the model decides when it is gone.
fn delete(ctx: &Ctx<'_>, id: &str) -> Handled {
    let mut state = ctx.state();
    state.counters.server_deletes += 1;
    let Some(uid) = state.ids.get(id).cloned() else { return not_found(id) };
    match ctx.model(|m| m.get(ctx.now, &uid)) {
        Ok(Some(record)) if record.id == id => {}
        Ok(_) => return not_found(id),
        Err(e) => return model_error(ctx, Service::Compute, &e),
    }
    // Deferred delete applies to servers that launched; Nova deletes one that
    // never did outright (nova/compute/api.py, `_delete`: no `launched_at`
    // means a local delete, not a soft delete).
    let launched = ctx.model(|m| m.get(ctx.now, &uid)).ok().flatten().is_some_and(|r| r.launched_at.is_some());
    if ctx.sim.config().soft_delete && launched {
        let Some(book) = state.books.get_mut(&uid) else { return not_found(id) };
        if book.soft_deleted {
            return (error(409, &format!("Cannot 'delete' instance {id} while it is in vm_state soft-delete")), None);
        }
        book.soft_deleted = true;
        return (reply::empty(StatusCode::NO_CONTENT), None);
    }
    reclaim(ctx, &mut state, &uid)
}

/// `POST /servers/{id}/action` with `{"forceDelete": null}`: reclaims a
/// soft-deleted server now.
fn action(ctx: &Ctx<'_>, id: &str) -> Handled {
    let mut state = ctx.state();
    state.counters.server_actions += 1;
    let body: Value = serde_json::from_slice(&ctx.body).unwrap_or_default();
    if body.get("forceDelete").is_none() {
        return (error(400, "There is no such action in this simulator (only forceDelete)."), None);
    }
    let Some(uid) = state.ids.get(id).cloned() else { return not_found(id) };
    match ctx.model(|m| m.get(ctx.now, &uid)) {
        Ok(Some(record)) if record.id == id => {}
        Ok(_) => return not_found(id),
        Err(e) => return model_error(ctx, Service::Compute, &e),
    }
    if !state.books.get(&uid).is_some_and(|b| b.soft_deleted) {
        return (error(409, &format!("Cannot 'forceDelete' instance {id} while it is not soft-deleted")), None);
    }
    let (response, hold) = reclaim(ctx, &mut state, &uid);
    // Nova answers the action 202, not the delete's 204.
    if response.status().is_success() { (reply::empty(StatusCode::ACCEPTED), hold) } else { (response, hold) }
}

/// Hands the server to the model's delete timeline. Nova answers at once
/// and deletes later (nova/compute/api.py `_delete` casts
/// `terminate_instance` to the compute host): the server stays visible,
/// `task_state: deleting`, for at least the configured delay. Its port, made
/// by the caller, is left as it is: Nova deletes only ports it made itself
/// (nova/network/neutron.py `deallocate_for_instance`, `preserve_on_delete`).
fn reclaim(ctx: &Ctx<'_>, state: &mut State, uid: &str) -> Handled {
    let delay = ctx.sim.config().delete_delay;
    match ctx.model(|m| m.delete_after(ctx.now, uid, delay)) {
        Ok(_) => {
            if let Some(book) = state.books.get_mut(uid) {
                book.deleting = true;
                book.soft_deleted = false;
            }
            (reply::empty(StatusCode::NO_CONTENT), None)
        }
        Err(e) => model_error(ctx, Service::Compute, &e),
    }
}

/// `POST /servers/{id}/metadata`: adds or replaces the given items, keeps
/// the others, answers the whole set.
fn update_metadata(ctx: &Ctx<'_>, id: &str) -> Handled {
    let mut state = ctx.state();
    state.counters.server_metadata_updates += 1;
    let body: Value = serde_json::from_slice(&ctx.body).unwrap_or_default();
    let items = match body.get("metadata").map(parse_metadata) {
        Some(Ok(items)) => items,
        Some(Err(message)) => return (error(400, &message), None),
        None => return (error(400, "Malformed request body: metadata is required"), None),
    };
    let Some(uid) = state.ids.get(id).cloned() else { return not_found(id) };
    match ctx.model(|m| m.get(ctx.now, &uid)) {
        Ok(Some(record)) if record.id == id => {}
        Ok(_) => return not_found(id),
        Err(e) => return model_error(ctx, Service::Compute, &e),
    }
    let Some(book) = state.books.get_mut(&uid) else { return not_found(id) };
    book.metadata.extend(items);
    let all: Map<String, Value> = book.metadata.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect();
    (reply::json(StatusCode::OK, json!({ "metadata": all })), None)
}

/// Nova's metadata schema (nova/api/validation/parameter_types.py,
/// `metadata`): keys `^[a-zA-Z0-9-_:. ]{1,255}$`, string values of at most
/// 255 characters; anything else fails the whole request.
fn parse_metadata(object: &Value) -> Result<std::collections::BTreeMap<String, String>, String> {
    let object = object.as_object().ok_or("Invalid input for field/attribute metadata.")?;
    let mut metadata = std::collections::BTreeMap::new();
    for (key, value) in object {
        let key_fits = (1..=METADATA_MAX).contains(&key.len())
            && key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b':' | b'.' | b' '));
        if !key_fits {
            return Err(format!(
                "Invalid input for field/attribute metadata. Value: {key}. Additional properties are not allowed \
                 ('{key}' was unexpected)"
            ));
        }
        let value = value
            .as_str()
            .filter(|v| v.chars().count() <= METADATA_MAX)
            .ok_or_else(|| format!("Invalid input for field/attribute {key}. Value must be a string of at most 255"))?;
        metadata.insert(key.clone(), value.to_owned());
    }
    Ok(metadata)
}

/// What a `POST /servers` body asks for, validated as Nova would.
struct Requested {
    name: String,
    flavor_id: String,
    image_id: String,
    port_id: Option<String>,
    network_id: Option<String>,
    metadata: std::collections::BTreeMap<String, String>,
    user_data: Option<Vec<u8>>,
    key_name: Option<String>,
}

fn parse_create(body: &[u8], microversion: (u32, u32)) -> Result<Requested, String> {
    let request: Value = serde_json::from_slice(body).map_err(|_| "Malformed request body".to_owned())?;
    let server = request.get("server").and_then(Value::as_object).ok_or("Invalid input for field/attribute server.")?;
    let text = |key: &str| server.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
    let name = text("name").ok_or("Invalid input for field/attribute name.")?;
    let flavor_id = text("flavorRef").ok_or("Invalid input for field/attribute flavorRef.")?;
    let image_id = text("imageRef").ok_or("Invalid input for field/attribute imageRef.")?;
    let (mut port_id, mut network_id) = (None, None);
    match server.get("networks") {
        // Required since 2.37 (nova/api/openstack/compute/schemas/servers.py).
        None if microversion >= (2, 37) => {
            return Err("Invalid input for field/attribute server. 'networks' is a required property".into());
        }
        None | Some(Value::String(_)) => {}
        Some(Value::Array(networks)) => {
            let first = networks.first().and_then(Value::as_object);
            port_id = first.and_then(|n| n.get("port")).and_then(Value::as_str).map(str::to_owned);
            network_id = first.and_then(|n| n.get("uuid")).and_then(Value::as_str).map(str::to_owned);
        }
        Some(_) => return Err("Invalid input for field/attribute networks.".into()),
    }
    let metadata = match server.get("metadata") {
        Some(object) => parse_metadata(object)?,
        None => std::collections::BTreeMap::new(),
    };
    let key_name = match server.get("key_name") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) if !name.is_empty() && name.len() <= 255 => Some(name.clone()),
        Some(_) => return Err("Invalid input for field/attribute key_name.".into()),
    };
    let user_data = match server.get("user_data") {
        None | Some(Value::Null) => None,
        Some(Value::String(encoded)) => {
            if encoded.len() > USER_DATA_MAX {
                return Err(
                    "User data too large. User data must be no larger than 65535 bytes once base64 encoded.".into()
                );
            }
            Some(BASE64.decode(encoded).map_err(|_| "User data needs to be valid base 64.".to_owned())?)
        }
        Some(_) => return Err("Invalid input for field/attribute user_data.".into()),
    };
    Ok(Requested { name, flavor_id, image_id, port_id, network_id, metadata, user_data, key_name })
}

/// `POST /servers`: 202 with the new id. Nova itself is not idempotent; the
/// model is (one live server per uid), so a repeated create for a live uid is
/// counted as a duplicate a real Nova would have honoured.
fn create(ctx: &Ctx<'_>) -> Handled {
    let mut state = ctx.state();
    state.counters.server_creates += 1;
    let requested = match parse_create(&ctx.body, ctx.nova_microversion) {
        Ok(requested) => requested,
        Err(message) => return (error(400, &message), None),
    };
    // nova/api/openstack/compute/servers.py: an unknown keypair is a 400.
    if let Some(key) = requested.key_name.as_deref().filter(|k| !state.keypairs.contains(*k)) {
        return (error(400, &format!("Invalid key_name provided. Key pair '{key}' not found.")), None);
    }
    let uid = match requested.metadata.get(UID_KEY) {
        Some(uid) => uid.clone(),
        None => format!("anonymous-{}", state.next_serial()),
    };
    let (network, security_groups) = match &requested.port_id {
        Some(port_id) => {
            let Some(port) = state.ports.get(port_id).filter(|p| p.project_id == ctx.project) else {
                return (error(400, &format!("Port id {port_id} could not be found.")), None);
            };
            let in_use = port
                .bound_uid
                .as_deref()
                .is_some_and(|bound| bound != uid && ctx.model(|m| m.truth(bound, ctx.now).live > 0));
            if in_use {
                return (error(409, &format!("Port {port_id} is still in use.")), None);
            }
            let pairs = port
                .allowed_address_pairs
                .iter()
                .map(|(ip, mac)| AllowedAddressPair { cidr: ip.clone(), mac_address: Some(mac.clone()) })
                .collect();
            (
                NetworkAttachment { id: port.network_id.clone(), allowed_address_pairs: pairs },
                port.security_groups.clone(),
            )
        }
        None => {
            (NetworkAttachment { id: requested.network_id.clone().unwrap_or_default(), ..Default::default() }, vec![])
        }
    };
    let request = CreateRequest {
        server: ServerRef {
            namespace: requested.metadata.get(NAMESPACE_KEY).cloned().unwrap_or_default(),
            name: requested.metadata.get(NAME_KEY).cloned().unwrap_or_else(|| requested.name.clone()),
            uid: uid.clone(),
        },
        name: requested.name.clone(),
        flavor_id: requested.flavor_id.clone(),
        image_id: requested.image_id.clone(),
        networks: vec![network],
        network_ids: Default::default(),
        security_group_ids: security_groups,
        // Public addresses are Neutron floating IPs here, not the model's.
        public_ip: false,
        user_data: requested.user_data.clone(),
        tags: requested
            .metadata
            .iter()
            .filter(|(k, _)| !k.starts_with("unikorn:"))
            .map(|(k, v)| Tag { name: k.clone(), value: v.clone() })
            .collect(),
        identity_ssh_key: requested.key_name.is_some(),
        // The model keeps the metadata as tags; whom it belongs to is Nova's
        // record (`ServerBook::metadata`), not the model's.
        owner: Owner::default(),
    };
    let live_before = ctx.model(|m| m.truth(&uid, ctx.now).live > 0);
    if live_before {
        state.counters.duplicate_server_creates += 1;
    }
    let result = ctx.model(|m| m.create(ctx.now, &ctx.project, &request));
    // A new server exists after an accepted create, or after one whose
    // answer was lost (a timeout or a gateway's 504: it landed all the
    // same), told by the model's truth, not by the kind of answer.
    let live_after = ctx.model(|m| m.truth(&uid, ctx.now).live > 0);
    let made = match &result {
        Ok(record) if !live_before => Some(Some(record.id.clone())),
        Err(_) if !live_before && live_after => Some(None),
        _ => None,
    };
    if let Some(id) = made {
        if let Some(id) = &id {
            state.ids.insert(id.clone(), uid.clone());
        }
        if let Some(port) = requested.port_id.as_ref().and_then(|p| state.ports.get_mut(p)) {
            port.bound_uid = Some(uid.clone());
        }
        let book = ServerBook {
            id,
            project_id: ctx.project.clone(),
            name: requested.name,
            flavor_id: requested.flavor_id,
            image_id: requested.image_id,
            port_id: requested.port_id,
            metadata: requested.metadata,
            user_data: requested.user_data,
            key_name: requested.key_name,
            deleting: false,
            soft_deleted: false,
        };
        state.books.insert(uid, book);
    }
    match result {
        Ok(record) => {
            let href = format!("{}/compute/v2.1/servers/{}", ctx.base_url, record.id);
            let body = json!({"server": {
                "id": record.id,
                "links": [{"rel": "self", "href": href}],
                "OS-DCF:diskConfig": "MANUAL",
                "security_groups": [{"name": "default"}],
                "adminPass": "sim-admin-password",
            }});
            let mut response = reply::json(StatusCode::ACCEPTED, body);
            if let Ok(location) = HeaderValue::from_str(&href) {
                response.headers_mut().insert("location", location);
            }
            (response, None)
        }
        Err(e) => model_error(ctx, Service::Compute, &e),
    }
}

fn summary(ctx: &Ctx<'_>, state: &State, record: &ProviderServer) -> Value {
    let name = state.books.get(&record.server_uid).map_or(record.server_uid.as_str(), |b| b.name.as_str());
    json!({"id": record.id, "name": name, "links": links(ctx, &record.id)})
}

fn links(ctx: &Ctx<'_>, id: &str) -> Value {
    json!([
        {"rel": "self", "href": format!("{}/compute/v2.1/servers/{id}", ctx.base_url)},
        {"rel": "bookmark", "href": format!("{}/compute/servers/{id}", ctx.base_url)},
    ])
}

/// A server with details, as `GET /servers/{id}` shows it (API v2.1).
fn render(ctx: &Ctx<'_>, state: &State, record: &ProviderServer) -> Value {
    let book = state.books.get(&record.server_uid).filter(|b| b.id.as_deref().is_none_or(|id| id == record.id));
    let soft_deleted = book.is_some_and(|b| b.soft_deleted);
    let status = match &record.status {
        _ if soft_deleted => "SOFT_DELETED",
        ProviderStatus::Active => "ACTIVE",
        ProviderStatus::Build => "BUILD",
        ProviderStatus::Error => "ERROR",
        ProviderStatus::Rebuild => "REBUILD",
        ProviderStatus::Unknown => "UNKNOWN",
        ProviderStatus::Other(other) => other.as_str(),
    };
    let building = record.status == ProviderStatus::Build;
    let task_state = if book.is_some_and(|b| b.deleting) {
        Value::from("deleting")
    } else if building && record.queued {
        Value::from("scheduling")
    } else if building {
        Value::from("spawning")
    } else {
        Value::Null
    };
    let vm_state = match record.status {
        _ if soft_deleted => "soft-delete",
        ProviderStatus::Build => "building",
        ProviderStatus::Error => "error",
        _ => "active",
    };
    let power_state = match record.power_state {
        _ if soft_deleted => 4,
        PowerState::NoState => 0,
        PowerState::Running => 1,
        PowerState::Shutdown => 4,
        PowerState::Other => 3,
    };
    let metadata: Map<String, Value> = match book {
        Some(book) => book.metadata.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect(),
        None => [(UID_KEY.to_owned(), Value::from(record.server_uid.as_str()))].into_iter().collect(),
    };
    let port = book.and_then(|b| b.port_id.as_ref()).and_then(|p| state.ports.get(p));
    let mut server = json!({
        "id": record.id,
        "name": book.map_or(record.server_uid.as_str(), |b| b.name.as_str()),
        "status": status,
        "tenant_id": ctx.project,
        "user_id": "sim-user",
        "metadata": metadata,
        "hostId": if building && record.queued { "" } else { "5e5e-sim-host" },
        "image": {"id": book.map_or("", |b| b.image_id.as_str()), "links": []},
        "flavor": {"id": book.map_or("", |b| b.flavor_id.as_str()), "links": []},
        "created": record.created.map(rfc3339),
        "updated": rfc3339(ctx.now),
        "addresses": addresses(state, record, port),
        "accessIPv4": "",
        "accessIPv6": "",
        "links": links(ctx, &record.id),
        "OS-DCF:diskConfig": "MANUAL",
        "OS-EXT-AZ:availability_zone": if building && record.queued { "" } else { "nova" },
        "config_drive": "",
        "key_name": book.and_then(|b| b.key_name.as_deref()),
        "progress": 0,
        "security_groups": port.map_or(vec![], |p| p.security_groups.iter().map(|g| json!({"name": g})).collect()),
        "OS-EXT-STS:task_state": task_state,
        "OS-EXT-STS:vm_state": vm_state,
        "OS-EXT-STS:power_state": power_state,
        "OS-SRV-USG:launched_at": record.launched_at.map(naive_utc),
        "OS-SRV-USG:terminated_at": null,
        "os-extended-volumes:volumes_attached": [],
    });
    if record.status == ProviderStatus::Error {
        server["fault"] = json!({
            "code": 500,
            "message": "Build of instance aborted: simulated failure",
            "created": record.created.map(rfc3339),
        });
    }
    server
}

/// Addresses appear once Nova has allocated networking (after scheduling):
/// the port's fixed IP and MAC, and the floating IP associated with it.
fn addresses(state: &State, record: &ProviderServer, port: Option<&super::state::SimPort>) -> Value {
    if record.status == ProviderStatus::Build && record.queued {
        return json!({});
    }
    let entry = |addr: &str, kind: &str, mac: Option<&str>| json!({"addr": addr, "version": 4, "OS-EXT-IPS:type": kind, "OS-EXT-IPS-MAC:mac_addr": mac});
    match port {
        Some(port) => {
            let mut list = vec![entry(&port.ip_address, "fixed", Some(&port.mac_address))];
            if let Some(ip) = state.floating_ip_of(&port.id) {
                list.push(entry(&ip.address, "floating", Some(&port.mac_address)));
            }
            // Nova keys addresses by the network's name, not its id.
            json!({ state.network_name(&port.network_id): list })
        }
        // Servers made without a port (e.g. through the model directly).
        None => {
            let mut list = Vec::new();
            if let Some(ip) = &record.private_ip {
                list.push(entry(ip, "fixed", record.mac_address.as_deref()));
            }
            if let Some(ip) = &record.public_ip {
                list.push(entry(ip, "floating", record.mac_address.as_deref()));
            }
            json!({ "private": list })
        }
    }
}
