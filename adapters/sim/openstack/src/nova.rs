//! Nova (compute API v2.1, microversions up to [`super::MAX_MICROVERSION`])
//! over the SimCloud model: servers are the model's, under UUIDs derived
//! from the model's ids; names, flavors, metadata, tags and the port come
//! from the create request the simulator kept for the Server uid. Records
//! take the shape of the microversion asked for.

use std::collections::{BTreeMap, BTreeSet};

use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::Response;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use jiff::Timestamp;
use serde_json::{Map, Value, json};
use server_core::model::{AllowedAddressPair, NetworkAttachment, Tag};
use server_core::port::{CreateRequest, Owner, PowerState, ProviderServer, ProviderStatus, ServerRef};
use server_simcloud::{ListPage, Shown};

use super::handlers::{Ctx, Handled, model_error};
use super::state::{
    ServerBook, SimKeypair, SimPort, State, fingerprint, fixed_ip_for, mac_for, model_id, naive_utc, nova_id, rfc3339,
};
use super::{Flavor, Op, Service, glance, reply};

/// Nova metadata keys tying a server to its Server.
const UID_KEY: &str = "unikorn:server-uid";
/// The Go controller's record of the Server's name on its servers.
const GO_SERVER_ID_KEY: &str = "serverID";
const NAMESPACE_KEY: &str = "unikorn:server-namespace";
const NAME_KEY: &str = "unikorn:server-name";
/// Nova's limits.
const METADATA_MAX: usize = 255;
const USER_DATA_MAX: usize = 65_535;
/// nova/objects/tag.py `MAX_TAG_LENGTH`, nova/objects/instance.py `MAX_TAG_COUNT`.
const TAG_MAX_LENGTH: usize = 60;
const TAG_MAX_COUNT: usize = 50;
const PORT_KIND: u16 = 0x0b07;

pub(super) fn handle(op: Op, ctx: &Ctx<'_>) -> Handled {
    let id = ctx.id.as_deref().unwrap_or_default();
    let method = ctx.method.clone();
    match op {
        Op::ServerList => list(ctx, false),
        Op::ServerListDetail => list(ctx, true),
        Op::ServerCreate => create(ctx),
        Op::ServerGet => show(ctx, id),
        Op::ServerUpdate => update(ctx, id),
        Op::ServerDelete => delete(ctx, id),
        Op::ServerAction => action(ctx, id),
        Op::ServerMetadataUpdate => update_metadata(ctx, id),
        Op::ServerMetadata if method == Method::PUT => replace_metadata(ctx, id),
        Op::ServerMetadata => show_metadata(ctx, id),
        Op::ServerMetadataItem => metadata_item(ctx, id),
        Op::ServerTags | Op::ServerTag if ctx.nova_microversion < (2, 26) => (version_not_found(), None),
        Op::ServerTags => tags(ctx, id),
        Op::ServerTag => tag(ctx, id),
        Op::ServerInterfaces => interfaces(ctx, id),
        Op::KeypairList => (list_keypairs(ctx), None),
        Op::KeypairCreate => (create_keypair(ctx), None),
        Op::Keypair if method == Method::DELETE => (delete_keypair(ctx, id), None),
        Op::Keypair => (show_keypair(ctx, id), None),
        Op::FlavorList => (list_flavors(ctx, false), None),
        Op::FlavorListDetail => (list_flavors(ctx, true), None),
        Op::FlavorGet => (show_flavor(ctx, id), None),
        Op::Limits => (limits(ctx), None),
        _ => (error(404, "The resource could not be found."), None),
    }
}

fn error(code: u16, message: &str) -> Response {
    reply::error(Service::Compute, code, message)
}

fn not_found(id: &str) -> Handled {
    (error(404, &format!("Instance {id} could not be found.")), None)
}

/// An endpoint the asked microversion does not have: Nova's
/// `VersionNotFoundForAPIMethod`, 404 (nova/api/openstack/wsgi.py).
fn version_not_found() -> Response {
    error(404, "The resource could not be found.")
}

/// A JSON request body, or Nova's 400 for one that is not.
fn body(ctx: &Ctx<'_>) -> Result<Value, Handled> {
    serde_json::from_slice(&ctx.body).map_err(|_| (error(400, "Malformed request body"), None))
}

/// The model's record of a server by its Nova id, under its Nova id, and
/// the Server uid it belongs to: 404 when Nova would not find it.
fn find(ctx: &Ctx<'_>, state: &State, id: &str) -> Result<(String, ProviderServer), Handled> {
    let Some(uid) = state.ids.get(id).cloned() else { return Err(not_found(id)) };
    match ctx.model(|m| m.get(ctx.now, &uid)) {
        Ok(Some(mut record)) => {
            record.id = nova_id(&record.id);
            if record.id == id { Ok((uid, record)) } else { Err(not_found(id)) }
        }
        Ok(None) => Err(not_found(id)),
        Err(e) => Err(model_error(ctx, Service::Compute, &e)),
    }
}

/// Query keys Nova's schema for `GET /servers` knows
/// (nova/api/openstack/compute/schemas/servers.py `index_query` and its
/// 2.26, 2.66 and 2.73 additions). From 2.75 any other key is refused 400
/// (`index_query_v275`, `additionalProperties: False`); before, ignored.
const LIST_KEYS: &[&str] = &[
    "user_id",
    "project_id",
    "tenant_id",
    "launch_index",
    "image_ref",
    "image",
    "kernel_id",
    "ramdisk_id",
    "hostname",
    "key_name",
    "power_state",
    "vm_state",
    "task_state",
    "host",
    "node",
    "flavor",
    "reservation_id",
    "launched_at",
    "terminated_at",
    "availability_zone",
    "name",
    "display_name",
    "description",
    "display_description",
    "locked_by",
    "uuid",
    "root_device_name",
    "config_drive",
    "access_ip_v4",
    "access_ip_v6",
    "auto_disk_config",
    "progress",
    "sort_key",
    "sort_dir",
    "all_tenants",
    "soft_deleted",
    "deleted",
    "status",
    "changes-since",
    "ip",
    "ip6",
    "created_at",
    "block_device_mapping",
    "services",
    "metadata",
    "system_metadata",
    "info_cache",
    "security_groups",
    "pci_devices",
    "limit",
    "marker",
    "tags",
    "tags-any",
    "not-tags",
    "not-tags-any",
    "changes-before",
    "locked",
];

/// The server statuses a `status` filter may name (nova/api/openstack/common.py
/// `_STATE_MAP`'s values).
const STATUSES: &[&str] = &[
    "ACTIVE",
    "BUILD",
    "REBUILD",
    "ERROR",
    "SHUTOFF",
    "SUSPENDED",
    "PAUSED",
    "RESCUE",
    "RESIZE",
    "VERIFY_RESIZE",
    "REVERT_RESIZE",
    "PASSWORD",
    "REBOOT",
    "HARD_REBOOT",
    "DELETED",
    "SOFT_DELETED",
    "SHELVED",
    "SHELVED_OFFLOADED",
    "MIGRATING",
    "UNKNOWN",
];

/// A `changes-since`/`changes-before` value: an ISO 8601 date-time, else
/// the schema's 400 (`'format': 'date-time'`).
fn date_time(ctx: &Ctx<'_>, key: &str) -> Result<Option<Timestamp>, Handled> {
    let Some(value) = ctx.query(key) else { return Ok(None) };
    let parsed = value.parse::<Timestamp>().ok().or_else(|| {
        // Nova also takes a date-time without an offset, as UTC.
        value
            .parse::<jiff::civil::DateTime>()
            .ok()
            .and_then(|t| t.to_zoned(jiff::tz::TimeZone::UTC).ok())
            .map(|z| z.timestamp())
    });
    match parsed {
        Some(t) => Ok(Some(t)),
        None => Err((
            error(
                400,
                &format!("Invalid input for query parameters {key}. Value: {value}. '{value}' is not a 'date-time'"),
            ),
            None,
        )),
    }
}

/// A regex filter as Nova applies it for a non-admin (nova/compute/api.py
/// `get_all`, `_REGEX_FILTERS`... matched with `re.search`): an invalid
/// pattern matches nothing.
/// Nova's `name` and `ip` list filters are regular expressions matched
/// anywhere in the value, not equalities: the API maps `name` to
/// `display_name`, and the database query applies it with the database's
/// REGEXP operator, unanchored (nova/db/main/api.py `_regex_instance_filter`,
/// called from `instance_get_all_by_filters_sort`), so `name=server-a` also
/// lists `server-a-2`. A pattern the regex engine refuses matches nothing.
fn matches(pattern: &str, value: &str) -> bool {
    regex::Regex::new(pattern).is_ok_and(|re| re.is_match(value))
}

/// `GET /servers[/detail]`: newest first, `osapi_max_limit` per page, a
/// `next` link while more remain; `name`, `status`, `changes-since`,
/// `changes-before`, `ip`, `flavor`, `image` and the tag filters applied
/// (nova/api/openstack/compute/servers.py `_get_servers`). A page walks the
/// project's list order from its marker, as the database's sorted query
/// does, and costs the servers it passes, not the project's size.
fn list(ctx: &Ctx<'_>, detail: bool) -> Handled {
    let mut state = ctx.state();
    state.counters.server_lists += 1;
    if ctx.nova_microversion >= (2, 75)
        && let Some(unknown) = ctx.query_keys().find(|k| !LIST_KEYS.contains(k))
    {
        let message = format!(
            "Invalid input for query parameters {unknown}. Value: {}. Additional properties are not allowed ('{unknown}' was unexpected)",
            ctx.query(unknown).unwrap_or_default()
        );
        return (error(400, &message), None);
    }
    let since = match date_time(ctx, "changes-since") {
        Ok(t) => t,
        Err(refusal) => return refusal,
    };
    let before = match date_time(ctx, "changes-before") {
        Ok(t) => t,
        Err(refusal) => return refusal,
    };
    let statuses: Vec<String> = ctx.query_all("status").iter().map(|s| s.to_ascii_uppercase()).collect();
    if statuses.iter().any(|s| !STATUSES.contains(&s.as_str())) {
        // servers.py `_get_servers`: "Invalid status value" from 2.38,
        // an empty list before.
        if ctx.nova_microversion >= (2, 38) {
            return (error(400, "Invalid status value"), None);
        }
        return (reply::json(StatusCode::OK, json!({"servers": []})), None);
    }
    let tag_list = |key: &str| -> Option<Vec<String>> {
        ctx.query(key).map(|v| v.split(',').map(str::to_owned).filter(|t| !t.is_empty()).collect())
    };
    let (all_tags, any_tags, not_tags, not_any_tags) = if ctx.nova_microversion >= (2, 26) {
        (tag_list("tags"), tag_list("tags-any"), tag_list("not-tags"), tag_list("not-tags-any"))
    } else {
        (None, None, None, None)
    };
    let page_size = ctx.sim.config().page_size.max(1);
    let limit = match ctx.query("limit").map(str::parse::<usize>) {
        None => page_size,
        Some(Ok(limit)) => limit.min(page_size),
        Some(Err(_)) => return (error(400, "Invalid input for query parameters limit."), None),
    };
    let marker = ctx.query("marker");
    // Nova lists deleted servers only to a list of changes
    // (servers.py `_get_servers`: without `changes-since` or
    // `changes-before` it filters `deleted=False`).
    let with_deleted = since.is_some() || before.is_some();
    let keep = |shown: &Shown| {
        let record = &shown.record;
        // The model's record carries the model's id; books hold Nova's.
        let book = book_of_id(&state, &record.server_uid, &nova_id(&record.id));
        let name = book.map_or(record.server_uid.as_str(), |b| b.name.as_str());
        let tags = book.map(|b| &b.tags);
        let has = |t: &String| tags.is_some_and(|tags| tags.contains(t));
        let updated = Some(shown.changed).max(book.and_then(|b| b.updated));
        let status = if shown.deleted { "DELETED" } else { status_of(book, record) };
        let port = book.and_then(|b| b.port_id.as_ref()).and_then(|p| state.ports.get(p));
        ctx.query("name").is_none_or(|pattern| matches(pattern, name))
            && (statuses.is_empty() || statuses.iter().any(|s| s.as_str() == status))
            && since.is_none_or(|since| updated >= Some(since))
            && before.is_none_or(|before| updated <= Some(before))
            && ctx.query("ip").is_none_or(|pattern| port.is_some_and(|p| matches(pattern, &p.ip_address)))
            && ctx.query("flavor").is_none_or(|flavor| book.is_some_and(|b| b.flavor_id == flavor))
            && ctx.query("image").is_none_or(|image| book.is_some_and(|b| b.image_id == image))
            && all_tags.as_ref().is_none_or(|wanted| wanted.iter().all(has))
            && any_tags.as_ref().is_none_or(|wanted| wanted.iter().any(has))
            && not_tags.as_ref().is_none_or(|unwanted| !unwanted.iter().all(has))
            && not_any_tags.as_ref().is_none_or(|unwanted| !unwanted.iter().any(has))
    };
    let after = marker.map(model_id);
    let mut page = match ctx.model(|m| m.list_page(ctx.now, &ctx.project, after.as_deref(), limit, with_deleted, keep))
    {
        Ok(ListPage::Servers(records)) => records,
        Ok(ListPage::MarkerNotFound) => {
            return (error(400, &format!("marker [{}] not found", marker.unwrap_or_default())), None);
        }
        Err(e) => return model_error(ctx, Service::Compute, &e),
    };
    for Shown { record, deleted, .. } in &mut page {
        record.id = nova_id(&record.id);
        if !*deleted {
            state.ids.insert(record.id.clone(), record.server_uid.clone());
        }
    }
    // Nova links a next page whenever this one is full, even when nothing
    // follows (nova/api/openstack/common.py, `_get_collection_links`): a
    // client must stop on an empty page, not on a missing link.
    let more = limit > 0 && page.len() == limit;
    let mut servers = Vec::with_capacity(page.len());
    for shown in &page {
        let record = &shown.record;
        if shown.deleted {
            servers.push(if detail { render_deleted(ctx, shown) } else { summary_deleted(ctx, shown) });
            continue;
        }
        if detail {
            ctx.model(|m| m.mark_read(ctx.now, &record.server_uid));
        }
        servers.push(if detail { render(ctx, &state, record) } else { summary(ctx, &state, record) });
    }
    let mut body = json!({ "servers": servers });
    if let Some(last) = page.last().map(|shown| &shown.record).filter(|_| more) {
        let path = if detail { "servers/detail" } else { "servers" };
        // The link keeps the request's other parameters
        // (common.py `_get_next_link` -> `_update_link_prefix` on the
        // request's query with `marker` replaced).
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (key, value) in ctx.query_pairs().iter().filter(|(k, _)| k != "marker" && k != "limit") {
            query.append_pair(key, value);
        }
        query.append_pair("limit", &limit.to_string());
        query.append_pair("marker", &last.id);
        body["servers_links"] = json!([{
            "rel": "next",
            "href": format!("{}/compute/v2.1/{path}?{}", ctx.base_url, query.finish()),
        }]);
    }
    (reply::json(StatusCode::OK, body), None)
}

/// The book of a model record, when it describes this very server.
fn book_of<'s>(state: &'s State, record: &ProviderServer) -> Option<&'s ServerBook> {
    book_of_id(state, &record.server_uid, &record.id)
}

/// The book of the server `nova_id` of `uid`, when it describes that server.
fn book_of_id<'s>(state: &'s State, uid: &str, nova_id: &str) -> Option<&'s ServerBook> {
    state.books.get(uid).filter(|b| b.id.as_deref().is_none_or(|id| id == nova_id))
}

/// When Nova last changed the server: the latest of the cloud's own
/// changes (made, launched, failed, rebuilt) and the last request through
/// this API that changed it.
fn updated_at(ctx: &Ctx<'_>, book: Option<&ServerBook>, record: &ProviderServer) -> Option<Timestamp> {
    let changed = ctx.model(|m| m.changed_at(&record.server_uid, ctx.now));
    [record.created, record.launched_at, changed, book.and_then(|b| b.updated)].into_iter().flatten().max()
}

/// A deleted server as a list of changes shows it: status DELETED, dated
/// its deletion, with nothing of what it held (its metadata, addresses and
/// groups went with it; the controller reads no more than the id, the
/// status and the date).
fn render_deleted(ctx: &Ctx<'_>, shown: &Shown) -> Value {
    let record = &shown.record;
    json!({
        "id": record.id,
        "name": "",
        "status": "DELETED",
        "tenant_id": ctx.project,
        "user_id": "sim-user",
        "metadata": {},
        "hostId": "",
        "image": "",
        "flavor": {},
        "created": record.created.map(rfc3339),
        "updated": rfc3339(shown.changed),
        "addresses": {},
        "links": links(ctx, &record.id),
        "OS-EXT-STS:task_state": null,
        "OS-EXT-STS:vm_state": "deleted",
        "OS-EXT-STS:power_state": 0,
        "OS-SRV-USG:launched_at": record.launched_at.map(naive_utc),
        "OS-SRV-USG:terminated_at": naive_utc(shown.changed),
    })
}

/// A deleted server in a list without details.
fn summary_deleted(ctx: &Ctx<'_>, shown: &Shown) -> Value {
    json!({ "id": shown.record.id, "name": "", "links": links(ctx, &shown.record.id) })
}

/// `GET /servers/{id}`.
fn show(ctx: &Ctx<'_>, id: &str) -> Handled {
    let mut state = ctx.state();
    state.counters.server_gets += 1;
    match find(ctx, &state, id) {
        Ok((uid, record)) => {
            ctx.model(|m| m.mark_read(ctx.now, &uid));
            (reply::json(StatusCode::OK, json!({ "server": render(ctx, &state, &record) })), None)
        }
        Err(refusal) => refusal,
    }
}

/// `PUT /servers/{id}`: `name`, `description` (2.19) and `hostname`
/// (2.90); anything else is refused by Nova's schema
/// (nova/api/openstack/compute/schemas/servers.py `update`, `update_v219`,
/// `update_v290`). Answers the whole server.
fn update(ctx: &Ctx<'_>, id: &str) -> Handled {
    let mut state = ctx.state();
    let request = match body(ctx) {
        Ok(request) => request,
        Err(refusal) => return refusal,
    };
    let Some(fields) = request.get("server").and_then(Value::as_object) else {
        return (error(400, "Invalid input for field/attribute server."), None);
    };
    let v = ctx.nova_microversion;
    for key in fields.keys() {
        let known = matches!(key.as_str(), "name" | "accessIPv4" | "accessIPv6" | "OS-DCF:diskConfig")
            || (key == "description" && v >= (2, 19))
            || (key == "hostname" && v >= (2, 90));
        if !known {
            let message = format!(
                "Invalid input for field/attribute server. Value: {request}. Additional properties are not allowed ('{key}' was unexpected)"
            );
            return (error(400, &message), None);
        }
    }
    let name = match fields.get("name") {
        None => None,
        Some(Value::String(name)) if !name.trim().is_empty() && name.chars().count() <= 255 => Some(name.clone()),
        Some(_) => return (error(400, "Invalid input for field/attribute name."), None),
    };
    let description = match fields.get("description") {
        None => None,
        Some(Value::Null) => Some(None),
        Some(Value::String(d)) if d.chars().count() <= 255 => Some(Some(d.clone())),
        Some(_) => return (error(400, "Invalid input for field/attribute description."), None),
    };
    let hostname = match fields.get("hostname").map(valid_hostname) {
        None => None,
        Some(Ok(hostname)) => Some(hostname),
        Some(Err(message)) => return (error(400, &message), None),
    };
    let (uid, record) = match find(ctx, &state, id) {
        Ok(found) => found,
        Err(refusal) => return refusal,
    };
    let Some(book) = state.books.get_mut(&uid) else { return not_found(id) };
    if let Some(name) = name {
        book.name = name;
    }
    if let Some(description) = description {
        book.description = description;
    }
    if let Some(hostname) = hostname {
        book.hostname = hostname;
    }
    book.updated = Some(ctx.now);
    (reply::json(StatusCode::OK, json!({ "server": render(ctx, &state, &record) })), None)
}

/// 2.90's `hostname`: an RFC 1123 label of at most 63 characters
/// (nova/api/validation/parameter_types.py `fqdn`... `hostname`).
fn valid_hostname(value: &Value) -> Result<String, String> {
    let hostname = value.as_str().unwrap_or_default();
    let fits = (1..=63).contains(&hostname.len())
        && hostname.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        && !hostname.starts_with('-')
        && !hostname.ends_with('-');
    if fits {
        Ok(hostname.to_owned())
    } else {
        Err(format!("Invalid input for field/attribute hostname. Value: {value}."))
    }
}

/// The hostname Nova derives from a display name (nova/utils.py
/// `sanitize_hostname`): lower case, spaces and underscores as dashes,
/// other characters dropped, at most 63 characters, no leading or trailing
/// dot or dash; an empty result is `Server-<id>`.
fn sanitize_hostname(name: &str, id: &str) -> String {
    let mapped: String = name
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c == ' ' || c == '_' { '-' } else { c })
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
        .take(63)
        .collect();
    let trimmed = mapped.trim_matches(|c| c == '-' || c == '.');
    if trimmed.is_empty() { format!("Server-{id}") } else { trimmed.to_owned() }
}

/// `DELETE /servers/{id}`: accepted at once; the model decides when it is gone.
fn delete(ctx: &Ctx<'_>, id: &str) -> Handled {
    let mut state = ctx.state();
    state.counters.server_deletes += 1;
    let (uid, record) = match find(ctx, &state, id) {
        Ok(found) => found,
        Err(refusal) => return refusal,
    };
    // Deferred delete applies to servers that launched; Nova deletes one that
    // never did outright (nova/compute/api.py, `_delete`: no `launched_at`
    // means a local delete, not a soft delete).
    if ctx.sim.config().soft_delete && record.launched_at.is_some() {
        let Some(book) = state.books.get_mut(&uid) else { return not_found(id) };
        if book.soft_deleted {
            return (error(409, &format!("Cannot 'delete' instance {id} while it is in vm_state soft-delete")), None);
        }
        book.soft_deleted = true;
        return (reply::empty(StatusCode::NO_CONTENT), None);
    }
    reclaim(ctx, &mut state, &uid)
}

/// `POST /servers/{id}/action`: `{"forceDelete": null}` reclaims a
/// soft-deleted server now; `{"rebuild": {"imageRef": ...}}` rebuilds it.
fn action(ctx: &Ctx<'_>, id: &str) -> Handled {
    let body: Value = serde_json::from_slice(&ctx.body).unwrap_or_default();
    if let Some(rebuild) = body.get("rebuild") {
        return rebuild_server(ctx, id, rebuild);
    }
    let mut state = ctx.state();
    state.counters.server_actions += 1;
    if body.get("forceDelete").is_none() {
        return (error(400, "There is no such action in this simulator (only forceDelete and rebuild)."), None);
    }
    let uid = match find(ctx, &state, id) {
        Ok((uid, _)) => uid,
        Err(refusal) => return refusal,
    };
    if !state.books.get(&uid).is_some_and(|b| b.soft_deleted) {
        return (error(409, &format!("Cannot 'forceDelete' instance {id} while it is not soft-deleted")), None);
    }
    let (response, hold) = reclaim(ctx, &mut state, &uid);
    // Nova answers the action 202, not the delete's 204.
    if response.status().is_success() { (reply::empty(StatusCode::ACCEPTED), hold) } else { (response, hold) }
}

/// The `rebuild` action (nova/api/openstack/compute/servers.py
/// `_action_rebuild`): `imageRef` is required and, with images registered,
/// must name one the project sees (400); a server with a task under way or still building is
/// refused with 409 (compute/api.py `rebuild` checks vm_state ACTIVE,
/// STOPPED or ERROR and task_state None). Accepted, the server's image and
/// task change together and the answer is 202 with the server, which still
/// shows what it was before the task began (`status` from before).
fn rebuild_server(ctx: &Ctx<'_>, id: &str, rebuild: &Value) -> Handled {
    let mut state = ctx.state();
    state.counters.server_actions += 1;
    state.counters.server_rebuilds += 1;
    let Some(image_id) = rebuild.get("imageRef").and_then(Value::as_str).filter(|i| !i.is_empty()) else {
        return (error(400, "Invalid input for field/attribute imageRef. Value: None."), None);
    };
    let (uid, before) = match find(ctx, &state, id) {
        Ok(found) => found,
        Err(refusal) => return refusal,
    };
    // As for a create: checked once images are registered.
    let visible = state.images.get(image_id).is_some_and(|(image, _)| glance::visible(image, &ctx.project));
    if !state.images.is_empty() && !visible {
        return (error(400, &format!("Image {image_id} could not be found.")), None);
    }
    if let Err(e) = ctx.model(|m| m.rebuild(ctx.now, &uid, image_id)) {
        return model_error(ctx, Service::Compute, &e);
    }
    if let Some(book) = state.books.get_mut(&uid) {
        book.image_id = image_id.to_owned();
    }
    (reply::json(StatusCode::ACCEPTED, json!({"server": render(ctx, &state, &before)})), None)
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
                // task_state `deleting` is a change of the instance.
                book.updated = Some(ctx.now);
            }
            (reply::empty(StatusCode::NO_CONTENT), None)
        }
        Err(e) => model_error(ctx, Service::Compute, &e),
    }
}

fn metadata_json(metadata: &BTreeMap<String, String>) -> Value {
    Value::Object(metadata.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect())
}

/// The book of the server `id`, for an edit.
fn book_mut<'s>(ctx: &Ctx<'_>, state: &'s mut State, id: &str) -> Result<&'s mut ServerBook, Handled> {
    let (uid, _) = find(ctx, state, id)?;
    state.books.get_mut(&uid).ok_or_else(|| not_found(id))
}

/// `POST /servers/{id}/metadata`: adds or replaces the given items, keeps
/// the others, answers the whole set (server_metadata.py `create`).
fn update_metadata(ctx: &Ctx<'_>, id: &str) -> Handled {
    write_metadata(ctx, id, |metadata, items| metadata.extend(items))
}

/// A metadata write: the validated body merged into the server's metadata
/// by `apply`; answers the whole set.
fn write_metadata(
    ctx: &Ctx<'_>,
    id: &str,
    apply: impl FnOnce(&mut BTreeMap<String, String>, BTreeMap<String, String>),
) -> Handled {
    let mut state = ctx.state();
    state.counters.server_metadata_updates += 1;
    let items = match metadata_body(ctx) {
        Ok(items) => items,
        Err(refusal) => return refusal,
    };
    let book = match book_mut(ctx, &mut state, id) {
        Ok(book) => book,
        Err(refusal) => return refusal,
    };
    apply(&mut book.metadata, items);
    book.updated = Some(ctx.now);
    (reply::json(StatusCode::OK, json!({ "metadata": metadata_json(&book.metadata) })), None)
}

/// `{"metadata": {...}}`, validated.
fn metadata_body(ctx: &Ctx<'_>) -> Result<BTreeMap<String, String>, Handled> {
    let request = body(ctx)?;
    match request.get("metadata").map(parse_metadata) {
        Some(Ok(items)) => Ok(items),
        Some(Err(message)) => Err((error(400, &message), None)),
        None => Err((error(400, "Malformed request body: metadata is required"), None)),
    }
}

/// `GET /servers/{id}/metadata`.
fn show_metadata(ctx: &Ctx<'_>, id: &str) -> Handled {
    let mut state = ctx.state();
    match book_mut(ctx, &mut state, id) {
        Ok(book) => (reply::json(StatusCode::OK, json!({ "metadata": metadata_json(&book.metadata) })), None),
        Err(refusal) => refusal,
    }
}

/// `PUT /servers/{id}/metadata`: replaces the whole set
/// (nova/api/openstack/compute/server_metadata.py `update_all`).
fn replace_metadata(ctx: &Ctx<'_>, id: &str) -> Handled {
    write_metadata(ctx, id, |metadata, items| *metadata = items)
}

/// `GET|PUT|DELETE /servers/{id}/metadata/{key}` (server_metadata.py
/// `show`, `update`, `delete`): a PUT body is `{"meta": {key: value}}`
/// with exactly the key of the path (400 otherwise); an absent key is 404
/// "Metadata item was not found".
fn metadata_item(ctx: &Ctx<'_>, id: &str) -> Handled {
    let key = ctx.sub.clone().unwrap_or_default();
    let mut state = ctx.state();
    let put = if ctx.method == Method::PUT {
        let request = match body(ctx) {
            Ok(request) => request,
            Err(refusal) => return refusal,
        };
        let meta = match request.get("meta").map(parse_metadata) {
            Some(Ok(meta)) => meta,
            Some(Err(message)) => return (error(400, &message), None),
            None => return (error(400, "Malformed request body"), None),
        };
        if meta.len() != 1 || !meta.contains_key(&key) {
            return (error(400, "Request body and URI mismatch"), None);
        }
        Some(meta)
    } else {
        None
    };
    let method = ctx.method.clone();
    let book = match book_mut(ctx, &mut state, id) {
        Ok(book) => book,
        Err(refusal) => return refusal,
    };
    let missing = || (error(404, "Metadata item was not found"), None);
    match put {
        Some(meta) => {
            book.metadata.extend(meta.clone());
            book.updated = Some(ctx.now);
            (reply::json(StatusCode::OK, json!({ "meta": metadata_json(&meta) })), None)
        }
        None if method == Method::DELETE => {
            if book.metadata.remove(&key).is_none() {
                return missing();
            }
            book.updated = Some(ctx.now);
            (reply::empty(StatusCode::NO_CONTENT), None)
        }
        None => match book.metadata.get(&key) {
            Some(value) => (reply::json(StatusCode::OK, json!({"meta": { key.clone(): value }})), None),
            None => missing(),
        },
    }
}

/// Nova's tag rules (nova/api/validation/parameter_types.py `tag`): 1 to
/// 60 characters, no `/` or `,`.
fn valid_tag(tag: &str) -> bool {
    (1..=TAG_MAX_LENGTH).contains(&tag.chars().count()) && !tag.contains(['/', ','])
}

/// `GET|PUT|DELETE /servers/{id}/tags` (2.26; nova/api/openstack/compute/
/// server_tags.py `index`, `update_all`, `delete_all`).
fn tags(ctx: &Ctx<'_>, id: &str) -> Handled {
    let mut state = ctx.state();
    let replacement = if ctx.method == Method::PUT {
        let request = match body(ctx) {
            Ok(request) => request,
            Err(refusal) => return refusal,
        };
        let tags: Option<Vec<String>> = request
            .get("tags")
            .and_then(Value::as_array)
            .and_then(|tags| tags.iter().map(|t| t.as_str().filter(|t| valid_tag(t)).map(str::to_owned)).collect());
        match tags {
            Some(tags) if tags.len() <= TAG_MAX_COUNT => Some(tags.into_iter().collect::<BTreeSet<_>>()),
            Some(_) => {
                return (
                    error(400, &format!("The number of tags exceeded the per-server limit {TAG_MAX_COUNT}")),
                    None,
                );
            }
            None => return (error(400, "Invalid input for field/attribute tags."), None),
        }
    } else {
        None
    };
    let method = ctx.method.clone();
    let book = match book_mut(ctx, &mut state, id) {
        Ok(book) => book,
        Err(refusal) => return refusal,
    };
    match replacement {
        Some(tags) => {
            book.tags = tags;
            book.updated = Some(ctx.now);
            (reply::json(StatusCode::OK, json!({ "tags": book.tags })), None)
        }
        None if method == Method::DELETE => {
            book.tags.clear();
            book.updated = Some(ctx.now);
            (reply::empty(StatusCode::NO_CONTENT), None)
        }
        None => (reply::json(StatusCode::OK, json!({ "tags": book.tags })), None),
    }
}

/// `GET|PUT|DELETE /servers/{id}/tags/{tag}` (server_tags.py `show`,
/// `update`, `delete`): a PUT answers 201 with `Location` for a new tag,
/// 204 for one already there; an absent tag is 404.
fn tag(ctx: &Ctx<'_>, id: &str) -> Handled {
    let tag = ctx.sub.clone().unwrap_or_default();
    let mut state = ctx.state();
    let method = ctx.method.clone();
    if method == Method::PUT && !valid_tag(&tag) {
        return (error(400, &format!("Invalid input for field/attribute tag. Value: {tag}.")), None);
    }
    let base_url = ctx.base_url.clone();
    let book = match book_mut(ctx, &mut state, id) {
        Ok(book) => book,
        Err(refusal) => return refusal,
    };
    let missing = || (error(404, &format!("Tag {tag} could not be found.")), None);
    if method == Method::PUT {
        if book.tags.contains(&tag) {
            return (reply::empty(StatusCode::NO_CONTENT), None);
        }
        if book.tags.len() >= TAG_MAX_COUNT {
            return (error(400, &format!("The number of tags exceeded the per-server limit {TAG_MAX_COUNT}")), None);
        }
        book.tags.insert(tag.clone());
        book.updated = Some(ctx.now);
        let mut response = reply::empty(StatusCode::CREATED);
        let location = format!("{base_url}/compute/v2.1/servers/{id}/tags/{}", super::handlers::escape(&tag));
        if let Ok(location) = HeaderValue::from_str(&location) {
            response.headers_mut().insert("location", location);
        }
        (response, None)
    } else if method == Method::DELETE {
        if !book.tags.remove(&tag) {
            return missing();
        }
        book.updated = Some(ctx.now);
        (reply::empty(StatusCode::NO_CONTENT), None)
    } else if book.tags.contains(&tag) {
        (reply::empty(StatusCode::NO_CONTENT), None)
    } else {
        missing()
    }
}

/// `GET /servers/{id}/os-interface` (nova/api/openstack/compute/
/// attach_interfaces.py `index`): the server's port.
fn interfaces(ctx: &Ctx<'_>, id: &str) -> Handled {
    let state = ctx.state();
    let uid = match find(ctx, &state, id) {
        Ok((uid, _)) => uid,
        Err(refusal) => return refusal,
    };
    let port = state.books.get(&uid).and_then(|b| b.port_id.as_ref()).and_then(|p| state.ports.get(p));
    let attachments: Vec<Value> = port
        .map(|port| {
            let mut attachment = json!({
                "port_state": "ACTIVE",
                "fixed_ips": [{"subnet_id": state.subnet_id(&port.network_id), "ip_address": port.ip_address}],
                "port_id": port.id,
                "net_id": port.network_id,
                "mac_addr": port.mac_address,
            });
            // 2.70 adds the attachment's device `tag`.
            if ctx.nova_microversion >= (2, 70) {
                attachment["tag"] = Value::Null;
            }
            attachment
        })
        .into_iter()
        .collect();
    (reply::json(StatusCode::OK, json!({ "interfaceAttachments": attachments })), None)
}

/// Nova's metadata schema (nova/api/validation/parameter_types.py,
/// `metadata`): keys `^[a-zA-Z0-9-_:. ]{1,255}$`, string values of at most
/// 255 characters; anything else fails the whole request.
fn parse_metadata(object: &Value) -> Result<BTreeMap<String, String>, String> {
    let object = object.as_object().ok_or("Invalid input for field/attribute metadata.")?;
    let mut metadata = BTreeMap::new();
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

/// Where a create asks to be attached.
enum Attach {
    /// `networks: "auto"`, `"none"` or absent before 2.37.
    Nothing,
    /// `{"port": id}`: the caller's port.
    Port(String),
    /// `{"uuid": network, "fixed_ip"?}`: Nova makes the port.
    Network { id: String, fixed_ip: Option<String> },
}

/// What a `POST /servers` body asks for, validated as Nova would.
struct Requested {
    name: String,
    flavor_id: String,
    image_id: String,
    attach: Attach,
    metadata: BTreeMap<String, String>,
    user_data: Option<Vec<u8>>,
    key_name: Option<String>,
    description: Option<String>,
    hostname: Option<String>,
    tags: BTreeSet<String>,
    /// Security group names (for a port Nova makes).
    security_groups: Vec<String>,
}

/// Top-level `server` keys of Nova's create schema up to 2.90
/// (nova/api/openstack/compute/schemas/servers.py `create`, `create_v219`,
/// `create_v232`, `create_v237`, `create_v252`, `create_v257`,
/// `create_v263`, `create_v274`, `create_v290`), with the version each
/// appeared at; unknown keys are refused (`additionalProperties: False`).
const CREATE_KEYS: &[(&str, (u32, u32))] = &[
    ("name", (2, 1)),
    ("imageRef", (2, 1)),
    ("flavorRef", (2, 1)),
    ("adminPass", (2, 1)),
    ("metadata", (2, 1)),
    ("networks", (2, 1)),
    ("OS-DCF:diskConfig", (2, 1)),
    ("accessIPv4", (2, 1)),
    ("accessIPv6", (2, 1)),
    ("availability_zone", (2, 1)),
    ("block_device_mapping", (2, 1)),
    ("block_device_mapping_v2", (2, 1)),
    ("config_drive", (2, 1)),
    ("key_name", (2, 1)),
    ("min_count", (2, 1)),
    ("max_count", (2, 1)),
    ("return_reservation_id", (2, 1)),
    ("security_groups", (2, 1)),
    ("user_data", (2, 1)),
    ("personality", (2, 1)),
    ("description", (2, 19)),
    ("tags", (2, 52)),
    ("trusted_image_certificates", (2, 63)),
    ("host", (2, 74)),
    ("hypervisor_hostname", (2, 74)),
    ("hostname", (2, 90)),
];

fn parse_create(body: &[u8], microversion: (u32, u32)) -> Result<Requested, String> {
    let request: Value = serde_json::from_slice(body).map_err(|_| "Malformed request body".to_owned())?;
    let server = request.get("server").and_then(Value::as_object).ok_or("Invalid input for field/attribute server.")?;
    if let Some(key) =
        server.keys().find(|k| !CREATE_KEYS.iter().any(|(known, since)| k == known && microversion >= *since))
    {
        return Err(format!(
            "Invalid input for field/attribute server. Additional properties are not allowed ('{key}' was unexpected)"
        ));
    }
    let text = |key: &str| server.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
    let name = text("name").ok_or("Invalid input for field/attribute name.")?;
    let flavor_id = text("flavorRef").ok_or("Invalid input for field/attribute flavorRef.")?;
    let image_id = text("imageRef").ok_or("Invalid input for field/attribute imageRef.")?;
    let attach = match server.get("networks") {
        // Required since 2.37 (nova/api/openstack/compute/schemas/servers.py).
        None if microversion >= (2, 37) => {
            return Err("Invalid input for field/attribute server. 'networks' is a required property".into());
        }
        None => Attach::Nothing,
        Some(Value::String(s)) if microversion >= (2, 37) && (s == "auto" || s == "none") => Attach::Nothing,
        Some(Value::Array(networks)) => match networks.first().and_then(Value::as_object) {
            None if networks.is_empty() => Attach::Nothing,
            None => return Err("Invalid input for field/attribute networks.".into()),
            Some(first) => match (first.get("port").and_then(Value::as_str), first.get("uuid").and_then(Value::as_str))
            {
                (Some(port), _) => Attach::Port(port.to_owned()),
                (None, Some(network)) => Attach::Network {
                    id: network.to_owned(),
                    fixed_ip: first.get("fixed_ip").and_then(Value::as_str).map(str::to_owned),
                },
                (None, None) => {
                    return Err("Bad networks format: network uuid is not in proper format".into());
                }
            },
        },
        Some(_) => return Err("Invalid input for field/attribute networks.".into()),
    };
    let metadata = match server.get("metadata") {
        Some(object) => parse_metadata(object)?,
        None => BTreeMap::new(),
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
    let description = match server.get("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(d)) if d.chars().count() <= 255 => Some(d.clone()),
        Some(_) => return Err("Invalid input for field/attribute description.".into()),
    };
    let hostname = server.get("hostname").map(valid_hostname).transpose()?;
    let tags = match server.get("tags") {
        None => BTreeSet::new(),
        Some(Value::Array(tags)) if tags.len() <= TAG_MAX_COUNT => tags
            .iter()
            .map(|t| t.as_str().filter(|t| valid_tag(t)).map(str::to_owned))
            .collect::<Option<BTreeSet<_>>>()
            .ok_or("Invalid input for field/attribute tags.")?,
        Some(_) => return Err("Invalid input for field/attribute tags.".into()),
    };
    let security_groups = match server.get("security_groups") {
        None => Vec::new(),
        Some(Value::Array(groups)) => groups
            .iter()
            .map(|g| g.get("name").and_then(Value::as_str).map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or("Invalid input for field/attribute security_groups.")?,
        Some(_) => return Err("Invalid input for field/attribute security_groups.".into()),
    };
    Ok(Requested {
        name,
        flavor_id,
        image_id,
        attach,
        metadata,
        user_data,
        key_name,
        description,
        hostname,
        tags,
        security_groups,
    })
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
    // nova/api/openstack/compute/servers.py `create`: an unknown flavor is
    // `FlavorNotFound` -> 400 (only when flavors are registered, see
    // `OpenStackSim::add_flavor`).
    if !state.flavors.is_empty() && !state.flavors.contains_key(&requested.flavor_id) {
        return (error(400, &format!("Flavor {} could not be found.", requested.flavor_id)), None);
    }
    // servers.py `create`: an image Glance does not have is `ImageNotFound`
    // -> 400 (only when images are registered, see `OpenStackSim::add_image`).
    let image_visible = state.images.get(&requested.image_id).is_some_and(|(i, _)| glance::visible(i, &ctx.project));
    if !state.images.is_empty() && !image_visible {
        return (error(400, &format!("Image {} could not be found.", requested.image_id)), None);
    }
    // nova/api/openstack/compute/servers.py: an unknown keypair is a 400.
    if let Some(key) = requested.key_name.as_deref().filter(|k| !state.keypairs.contains_key(*k)) {
        return (error(400, &format!("Invalid key_name provided. Key pair '{key}' not found.")), None);
    }
    let attributed = requested.metadata.get(GO_SERVER_ID_KEY).and_then(|id| state.uids_by_server_id.get(id));
    let uid = match requested.metadata.get(UID_KEY).or(attributed) {
        Some(uid) => uid.clone(),
        None => {
            let uid = format!("anonymous-{}", state.next_serial());
            if let Some(fate) = state.fates_by_name.get(&requested.name) {
                ctx.model(|m| m.script(&uid, fate.clone()));
            }
            uid
        }
    };
    // A network Nova makes a port on: the caller's own or an external one
    // (nova/network/neutron.py `_validate_requested_network_ids`:
    // `NetworkNotFound` -> 400).
    let mut nova_port = None;
    let (network, security_groups) = match &requested.attach {
        Attach::Port(port_id) => {
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
        Attach::Network { id, fixed_ip } => {
            let known = state.networks.get(id).is_some_and(|n| n.project_id == ctx.project)
                || ctx.sim.config().external_networks.iter().any(|n| n == id);
            if !known {
                return (error(400, &format!("Network {id} could not be found.")), None);
            }
            // The port's groups: those named, else the project's default
            // (nova/network/neutron.py `_process_security_groups`: an unknown
            // name is 400 `SecurityGroupNotFound`).
            let mut groups = Vec::new();
            for name in &requested.security_groups {
                let group = state.security_groups.values().find(|g| g.project_id == ctx.project && &g.name == name);
                match group {
                    Some(group) => groups.push(group.id.clone()),
                    None if name == "default" => groups.push(state.default_group(&ctx.project)),
                    None => return (error(400, &format!("Security group {name} not found for project.")), None),
                }
            }
            if groups.is_empty() {
                groups.push(state.default_group(&ctx.project));
            }
            nova_port = Some((id.clone(), fixed_ip.clone(), groups.clone()));
            (NetworkAttachment { id: id.clone(), ..Default::default() }, groups)
        }
        Attach::Nothing => (NetworkAttachment::default(), vec![]),
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
        // The port, if any, was made before this request reached Nova.
        first_create: false,
    };
    let live_before = ctx.model(|m| m.truth(&uid, ctx.now).live > 0);
    if live_before {
        state.counters.duplicate_server_creates += 1;
    }
    let result = ctx.model(|m| m.create(ctx.now, &ctx.project, &request)).map(|mut record| {
        record.id = nova_id(&record.id);
        record
    });
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
        let port_id = match (&requested.attach, nova_port) {
            (Attach::Port(port_id), _) => {
                state.ports.update(port_id, |port| port.bound_uid = Some(uid.clone()));
                Some(port_id.clone())
            }
            (_, Some((network_id, fixed_ip, groups))) => {
                Some(make_port(ctx, &mut state, &uid, network_id, fixed_ip, groups))
            }
            _ => None,
        };
        let hostname = requested
            .hostname
            .clone()
            .unwrap_or_else(|| sanitize_hostname(&requested.name, id.as_deref().unwrap_or_default()));
        let book = ServerBook {
            id,
            project_id: ctx.project.clone(),
            name: requested.name,
            flavor_id: requested.flavor_id,
            image_id: requested.image_id,
            port_id,
            metadata: requested.metadata,
            user_data: requested.user_data,
            key_name: requested.key_name,
            description: requested.description,
            hostname,
            tags: requested.tags,
            updated: Some(ctx.now),
            deleting: false,
            soft_deleted: false,
        };
        state.books.insert(uid, book);
    }
    match result {
        Ok(record) => {
            let href = format!("{}/compute/v2.1/servers/{}", ctx.base_url, record.id);
            let groups: Vec<Value> = state
                .books
                .get(&record.server_uid)
                .and_then(|b| b.port_id.as_ref())
                .and_then(|p| state.ports.get(p))
                .map(|p| p.security_groups.iter().map(|g| json!({"name": state.group_name(g)})).collect())
                .unwrap_or_default();
            let body = json!({"server": {
                "id": record.id,
                "links": links(ctx, &record.id),
                "OS-DCF:diskConfig": "MANUAL",
                "security_groups": groups,
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

/// The port Nova makes for a server booted on a network: no name,
/// `device_owner: compute:<az>`, deleted with the server
/// (nova/network/neutron.py `_create_port_minimal`, `preserve_on_delete`
/// unset).
fn make_port(
    ctx: &Ctx<'_>,
    state: &mut State,
    uid: &str,
    network_id: String,
    fixed_ip: Option<String>,
    security_groups: Vec<String>,
) -> String {
    let id = state.next_id(PORT_KIND);
    let n = state.next_serial();
    let port = SimPort {
        id: id.clone(),
        project_id: ctx.project.clone(),
        name: String::new(),
        description: String::new(),
        network_id,
        ip_address: fixed_ip.unwrap_or_else(|| fixed_ip_for(n)),
        security_groups,
        allowed_address_pairs: Vec::new(),
        mac_address: mac_for(n),
        bound_uid: Some(uid.to_owned()),
        nova_made: true,
        created: ctx.now,
        revision: 1,
    };
    state.ports.insert(port);
    id
}

fn summary(ctx: &Ctx<'_>, state: &State, record: &ProviderServer) -> Value {
    let name = book_of(state, record).map_or(record.server_uid.as_str(), |b| b.name.as_str());
    json!({"id": record.id, "name": name, "links": links(ctx, &record.id)})
}

fn links(ctx: &Ctx<'_>, id: &str) -> Value {
    json!([
        {"rel": "self", "href": format!("{}/compute/v2.1/servers/{id}", ctx.base_url)},
        {"rel": "bookmark", "href": format!("{}/compute/servers/{id}", ctx.base_url)},
    ])
}

/// The status Nova shows.
fn status_of<'r>(book: Option<&ServerBook>, record: &'r ProviderServer) -> &'r str {
    match &record.status {
        _ if book.is_some_and(|b| b.soft_deleted) => "SOFT_DELETED",
        ProviderStatus::Active => "ACTIVE",
        ProviderStatus::Build => "BUILD",
        ProviderStatus::Error => "ERROR",
        ProviderStatus::Rebuild => "REBUILD",
        ProviderStatus::Unknown => "UNKNOWN",
        ProviderStatus::Other(other) => other.as_str(),
    }
}

/// A server with details, as `GET /servers/{id}` shows it at the request's
/// microversion (nova/api/openstack/compute/views/servers.py `show`): 2.9
/// `locked`, 2.19 `description`, 2.26 `tags`, 2.47 the flavor embedded
/// instead of linked, 2.63 `trusted_image_certificates`, 2.71
/// `server_groups`, 2.73 `locked_reason`, 2.90 `OS-EXT-SRV-ATTR:hostname`
/// (the `v2.90_server-get-resp.json` sample's fields).
fn render(ctx: &Ctx<'_>, state: &State, record: &ProviderServer) -> Value {
    let book = book_of(state, record);
    let soft_deleted = book.is_some_and(|b| b.soft_deleted);
    let status = status_of(book, record);
    let building = record.status == ProviderStatus::Build;
    let task_state = if book.is_some_and(|b| b.deleting) {
        Value::from("deleting")
    } else if record.task_in_flight {
        Value::from("rebuild_spawning")
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
    let flavor_id = book.map_or("", |b| b.flavor_id.as_str());
    let v = ctx.nova_microversion;
    let flavor = if v >= (2, 47) {
        let known = state.flavors.get(flavor_id);
        json!({
            "vcpus": known.map_or(1, |f| f.vcpus),
            "ram": known.map_or(512, |f| f.ram),
            "disk": known.map_or(1, |f| f.disk),
            "ephemeral": 0,
            "swap": 0,
            "original_name": known.map_or(flavor_id, |f| f.name.as_str()),
            "extra_specs": {},
        })
    } else {
        json!({"id": flavor_id, "links": [{"rel": "bookmark", "href": format!("{}/compute/flavors/{flavor_id}", ctx.base_url)}]})
    };
    let mut server = json!({
        "id": record.id,
        "name": book.map_or(record.server_uid.as_str(), |b| b.name.as_str()),
        "status": status,
        "tenant_id": ctx.project,
        "user_id": "sim-user",
        "metadata": metadata,
        "hostId": if building && record.queued { "" } else { "5e5e-sim-host" },
        "image": {"id": record.image_id.as_deref().unwrap_or_else(|| book.map_or("", |b| b.image_id.as_str())), "links": []},
        "flavor": flavor,
        "created": record.created.map(rfc3339),
        "updated": updated_at(ctx, book, record).map(rfc3339),
        "addresses": addresses(state, record, port),
        "accessIPv4": "",
        "accessIPv6": "",
        "links": links(ctx, &record.id),
        "OS-DCF:diskConfig": "MANUAL",
        "OS-EXT-AZ:availability_zone": if building && record.queued { "" } else { "nova" },
        "config_drive": "",
        "key_name": book.and_then(|b| b.key_name.as_deref()),
        "progress": 0,
        // Nova shows a server's groups by name (views/servers.py
        // `_get_security_groups`... nova/network/security_group_api.py
        // `get_instance_security_groups`).
        "security_groups": port.map_or(vec![], |p| p.security_groups.iter().map(|g| json!({"name": state.group_name(g)})).collect()),
        "OS-EXT-STS:task_state": task_state,
        "OS-EXT-STS:vm_state": vm_state,
        "OS-EXT-STS:power_state": power_state,
        "OS-SRV-USG:launched_at": record.launched_at.map(naive_utc),
        "OS-SRV-USG:terminated_at": null,
        "os-extended-volumes:volumes_attached": [],
    });
    let mut versioned = |since: (u32, u32), key: &str, value: Value| {
        if v >= since {
            server[key] = value;
        }
    };
    versioned((2, 9), "locked", json!(false));
    versioned((2, 19), "description", json!(book.and_then(|b| b.description.as_deref())));
    versioned((2, 26), "tags", json!(book.map(|b| b.tags.iter().collect::<Vec<_>>()).unwrap_or_default()));
    versioned((2, 63), "trusted_image_certificates", Value::Null);
    versioned((2, 71), "server_groups", json!([]));
    versioned((2, 73), "locked_reason", Value::Null);
    versioned((2, 90), "OS-EXT-SRV-ATTR:hostname", json!(book.map_or("", |b| b.hostname.as_str())));
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
fn addresses(state: &State, record: &ProviderServer, port: Option<&SimPort>) -> Value {
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

/// A keypair as Nova shows it; `detail` adds what `GET /os-keypairs/{name}`
/// adds to a list item (nova/api/openstack/compute/keypairs.py `_view_builder`).
fn render_keypair(ctx: &Ctx<'_>, name: &str, keypair: &SimKeypair, detail: bool) -> Value {
    let mut rendered = json!({"name": name, "public_key": keypair.public_key, "fingerprint": keypair.fingerprint});
    if ctx.nova_microversion >= (2, 2) {
        rendered["type"] = json!(keypair.kind);
    }
    if detail {
        rendered["user_id"] = json!("sim-user");
        rendered["id"] = json!(1);
        rendered["created_at"] = json!(naive_utc(keypair.created));
        rendered["deleted"] = json!(false);
        rendered["deleted_at"] = Value::Null;
        rendered["updated_at"] = Value::Null;
    }
    rendered
}

/// `GET /os-keypairs`: `{"keypairs": [{"keypair": {...}}]}`.
fn list_keypairs(ctx: &Ctx<'_>) -> Response {
    let state = ctx.state();
    let keypairs: Vec<Value> =
        state.keypairs.iter().map(|(name, k)| json!({"keypair": render_keypair(ctx, name, k, false)})).collect();
    reply::json(StatusCode::OK, json!({ "keypairs": keypairs }))
}

/// `POST /os-keypairs` (keypairs.py `create`): 200 before 2.2, 201 from
/// it; a name of 1 to 255 of `[a-zA-Z0-9 _.-]` (`keypair_name` from 2.92 is
/// stricter), 409 for a name in use; without `public_key` Nova generates
/// the pair and answers the private key once (up to 2.91). The generated
/// key here is a placeholder, not a usable key.
fn create_keypair(ctx: &Ctx<'_>) -> Response {
    let request = match body(ctx) {
        Ok(request) => request,
        Err((refusal, _)) => return refusal,
    };
    let Some(fields) = request.get("keypair").and_then(Value::as_object) else {
        return error(400, "Invalid input for field/attribute keypair.");
    };
    let name = fields.get("name").and_then(Value::as_str).unwrap_or_default();
    let name_fits = (1..=255).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b' ' | b'_' | b'.' | b'-'))
        && name.trim() == name;
    if !name_fits {
        return error(400, &format!("Invalid input for field/attribute name. Value: {name}."));
    }
    let kind = match fields.get("type").and_then(Value::as_str) {
        None => "ssh",
        Some(kind @ ("ssh" | "x509")) if ctx.nova_microversion >= (2, 2) => kind,
        Some(_) => return error(400, "Invalid input for field/attribute type."),
    };
    let mut state = ctx.state();
    if state.keypairs.contains_key(name) {
        return error(409, &format!("Key pair '{name}' already exists."));
    }
    let (public_key, private_key) = match fields.get("public_key").and_then(Value::as_str) {
        Some(key) => {
            // nova/crypto.py `generate_fingerprint`: a key it cannot read is
            // `InvalidKeypair` -> 400.
            let mut words = key.split_whitespace();
            let readable = words.next().is_some_and(|w| w.starts_with("ssh-") || w.starts_with("ecdsa-"))
                && words.next().is_some_and(|w| BASE64.decode(w).is_ok());
            if !readable {
                return error(400, "Keypair data is invalid: failed to generate fingerprint");
            }
            (key.to_owned(), None)
        }
        None => {
            let n = state.next_serial();
            let public = format!("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFNpbXVsYXRlZCBrZXkg{n:08x} Generated-by-Nova");
            let private = format!(
                "-----BEGIN OPENSSH PRIVATE KEY-----\nsimulated-private-key-{n:08x}\n-----END OPENSSH PRIVATE KEY-----\n"
            );
            (public, Some(private))
        }
    };
    let keypair =
        SimKeypair { fingerprint: fingerprint(&public_key), public_key, kind: kind.to_owned(), created: ctx.now };
    let mut rendered = render_keypair(ctx, name, &keypair, false);
    if ctx.nova_microversion >= (2, 10) {
        rendered["user_id"] = json!("sim-user");
    }
    if let Some(private) = private_key {
        rendered["private_key"] = json!(private);
    }
    state.keypairs.insert(name.to_owned(), keypair);
    let status = if ctx.nova_microversion >= (2, 2) { StatusCode::CREATED } else { StatusCode::OK };
    reply::json(status, json!({ "keypair": rendered }))
}

fn keypair_not_found(name: &str) -> Response {
    error(404, &format!("Keypair {name} not found for user sim-user"))
}

fn show_keypair(ctx: &Ctx<'_>, name: &str) -> Response {
    let state = ctx.state();
    match state.keypairs.get(name) {
        Some(keypair) => reply::json(StatusCode::OK, json!({"keypair": render_keypair(ctx, name, keypair, true)})),
        None => keypair_not_found(name),
    }
}

/// `DELETE /os-keypairs/{name}`: 202 before 2.2, 204 from it.
fn delete_keypair(ctx: &Ctx<'_>, name: &str) -> Response {
    let mut state = ctx.state();
    if state.keypairs.remove(name).is_none() {
        return keypair_not_found(name);
    }
    reply::empty(if ctx.nova_microversion >= (2, 2) { StatusCode::NO_CONTENT } else { StatusCode::ACCEPTED })
}

fn render_flavor(ctx: &Ctx<'_>, flavor: &Flavor, detail: bool) -> Value {
    let links = json!([
        {"rel": "self", "href": format!("{}/compute/v2.1/flavors/{}", ctx.base_url, flavor.id)},
        {"rel": "bookmark", "href": format!("{}/compute/flavors/{}", ctx.base_url, flavor.id)},
    ]);
    let mut rendered = json!({"id": flavor.id, "name": flavor.name, "links": links});
    // 2.55 adds `description` to every flavor view.
    if ctx.nova_microversion >= (2, 55) {
        rendered["description"] = Value::Null;
    }
    if detail {
        rendered["vcpus"] = json!(flavor.vcpus);
        rendered["ram"] = json!(flavor.ram);
        rendered["disk"] = json!(flavor.disk);
        rendered["OS-FLV-EXT-DATA:ephemeral"] = json!(0);
        rendered["OS-FLV-DISABLED:disabled"] = json!(false);
        rendered["os-flavor-access:is_public"] = json!(true);
        rendered["swap"] = json!("");
        rendered["rxtx_factor"] = json!(1.0);
        // 2.61 embeds the extra specs.
        if ctx.nova_microversion >= (2, 61) {
            rendered["extra_specs"] = json!({});
        }
    }
    rendered
}

/// `GET /flavors[/detail]` (nova/api/openstack/compute/flavors.py).
/// `GET /flavors[/detail]` query keys (nova/api/openstack/compute/schemas/
/// flavors.py `index_query`; from 2.75 any other key is 400).
const FLAVOR_LIST_KEYS: &[&str] = &["limit", "marker", "is_public", "minRam", "minDisk", "sort_key", "sort_dir"];
/// The `sort_key` enum of the same schema.
const FLAVOR_SORT_KEYS: &[&str] = &[
    "created_at",
    "description",
    "disabled",
    "ephemeral_gb",
    "flavorid",
    "id",
    "is_public",
    "memory_mb",
    "name",
    "root_gb",
    "rxtx_factor",
    "swap",
    "updated_at",
    "vcpu_weight",
    "vcpus",
];

/// `GET /flavors[/detail]` (nova/api/openstack/compute/flavors.py
/// `_get_flavors`): `minRam` and `minDisk` filters (not an integer: 400),
/// sorted by `sort_key` (default `flavorid`) and `sort_dir` (default `asc`;
/// another value of either 400, the schema's enums), paged like servers:
/// `osapi_max_limit` a page, `marker` (not found: 400), a `next` link in
/// `flavors_links` whenever a page is full (common.py
/// `_get_collection_links`).
fn list_flavors(ctx: &Ctx<'_>, detail: bool) -> Response {
    let state = ctx.state();
    let invalid = |key: &str| {
        let value = ctx.query(key).unwrap_or_default();
        error(400, &format!("Invalid input for query parameters {key}. Value: {value}."))
    };
    if ctx.nova_microversion >= (2, 75)
        && let Some(unknown) = ctx.query_keys().find(|k| !FLAVOR_LIST_KEYS.contains(k))
    {
        return invalid(unknown);
    }
    let sort_key = ctx.query("sort_key").unwrap_or("flavorid");
    if !FLAVOR_SORT_KEYS.contains(&sort_key) {
        return invalid("sort_key");
    }
    let descending = match ctx.query("sort_dir").unwrap_or("asc") {
        "asc" => false,
        "desc" => true,
        _ => return invalid("sort_dir"),
    };
    let minimum = |key: &str| match ctx.query(key).map(str::parse::<u32>) {
        None => Ok(0),
        Some(Ok(value)) => Ok(value),
        Some(Err(_)) => Err(error(400, &format!("Invalid {key} filter [{}]", ctx.query(key).unwrap_or_default()))),
    };
    let (min_ram, min_disk) = match (minimum("minRam"), minimum("minDisk")) {
        (Ok(ram), Ok(disk)) => (ram, disk),
        (Err(refusal), _) | (_, Err(refusal)) => return refusal,
    };
    let mut flavors: Vec<&Flavor> = state.flavors.values().filter(|f| f.ram >= min_ram && f.disk >= min_disk).collect();
    flavors.sort_by(|a, b| {
        let order = match sort_key {
            "name" => a.name.cmp(&b.name),
            "memory_mb" => a.ram.cmp(&b.ram),
            "vcpus" => a.vcpus.cmp(&b.vcpus),
            "root_gb" => a.disk.cmp(&b.disk),
            // Columns not modelled are equal; flavorid breaks ties.
            _ => std::cmp::Ordering::Equal,
        }
        .then_with(|| a.id.cmp(&b.id));
        if descending { order.reverse() } else { order }
    });
    let page_size = ctx.sim.config().page_size.max(1);
    let limit = match ctx.query("limit").map(str::parse::<usize>) {
        None => page_size,
        Some(Ok(limit)) => limit.min(page_size),
        Some(Err(_)) => return invalid("limit"),
    };
    let start = match ctx.query("marker") {
        None => 0,
        Some(marker) => match flavors.iter().position(|f| f.id == marker) {
            Some(i) => i + 1,
            None => return error(400, &format!("marker [{marker}] not found")),
        },
    };
    let page: Vec<&Flavor> = flavors.into_iter().skip(start).take(limit).collect();
    let mut body = json!({ "flavors": page.iter().map(|f| render_flavor(ctx, f, detail)).collect::<Vec<_>>() });
    if let Some(last) = page.last().filter(|_| limit > 0 && page.len() == limit) {
        let path = if detail { "flavors/detail" } else { "flavors" };
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (key, value) in ctx.query_pairs().iter().filter(|(k, _)| k != "marker" && k != "limit") {
            query.append_pair(key, value);
        }
        query.append_pair("limit", &limit.to_string());
        query.append_pair("marker", &last.id);
        body["flavors_links"] = json!([{
            "rel": "next",
            "href": format!("{}/compute/v2.1/{path}?{}", ctx.base_url, query.finish()),
        }]);
    }
    reply::json(StatusCode::OK, body)
}

fn show_flavor(ctx: &Ctx<'_>, id: &str) -> Response {
    let state = ctx.state();
    match state.flavors.get(id) {
        Some(flavor) => reply::json(StatusCode::OK, json!({"flavor": render_flavor(ctx, flavor, true)})),
        None => error(404, &format!("Flavor {id} could not be found.")),
    }
}

/// `GET /limits` (nova/api/openstack/compute/views/limits.py): Nova's
/// default quotas and what the project uses of them; from 2.36 without the
/// network-proxy keys (floating IPs, security groups).
fn limits(ctx: &Ctx<'_>) -> Response {
    let state = ctx.state();
    let servers = ctx.model(|m| m.list(ctx.now, &ctx.project)).map(|r| r.len()).unwrap_or_default();
    let mut absolute = json!({
        "maxTotalInstances": 10,
        "maxTotalCores": 20,
        "maxTotalRAMSize": 51_200,
        "maxServerMeta": 128,
        "maxImageMeta": 128,
        "maxPersonality": 5,
        "maxPersonalitySize": 10_240,
        "maxTotalKeypairs": 100,
        "maxServerGroups": 10,
        "maxServerGroupMembers": 10,
        "totalInstancesUsed": servers,
        "totalCoresUsed": servers,
        "totalRAMUsed": servers * 512,
        "totalServerGroupsUsed": 0,
    });
    if ctx.nova_microversion < (2, 36) {
        absolute["maxTotalFloatingIps"] = json!(10);
        absolute["totalFloatingIpsUsed"] =
            json!(state.floating_ips.values().filter(|f| f.project_id == ctx.project).count());
        absolute["maxSecurityGroups"] = json!(10);
        absolute["maxSecurityGroupRules"] = json!(20);
        absolute["totalSecurityGroupsUsed"] = json!(0);
    }
    // 2.57 drops the personality limits.
    if let Some(object) = absolute.as_object_mut().filter(|_| ctx.nova_microversion >= (2, 57)) {
        object.remove("maxPersonality");
        object.remove("maxPersonalitySize");
    }
    reply::json(StatusCode::OK, json!({"limits": {"rate": [], "absolute": absolute}}))
}
