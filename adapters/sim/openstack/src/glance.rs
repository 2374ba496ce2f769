//! Glance (Image API v2), read-only: `GET /v2/images` and
//! `GET /v2/images/{id}` over the images the test registered
//! ([`OpenStackSim::add_image`](super::OpenStackSim::add_image)), all
//! active, shaped, filtered, sorted and paged as glance/api/v2/images.py
//! answers them.

use axum::http::StatusCode;
use axum::response::Response;
use jiff::Timestamp;
use serde_json::{Map, Value, json};

use super::handlers::Ctx;
use super::state::rfc3339;
use super::{Image, Op, Service, reply};

/// glance-api.conf `limit_param_default` and `api_limit_max`.
const LIMIT_DEFAULT: usize = 25;
const LIMIT_MAX: usize = 1000;

/// Query keys that are not filters (images.py `RequestDeserializer.index`).
const NOT_FILTERS: &[&str] = &["limit", "marker", "sort_key", "sort_dir", "sort"];
/// Keys that filter on an image's own attributes, not on its properties.
const ATTRIBUTE_FILTERS: &[&str] = &["name", "visibility", "status", "owner", "id", "member_status", "os_hidden"];
const VISIBILITIES: &[&str] = &["public", "private", "shared", "community", "all"];
const STATUSES: &[&str] =
    &["queued", "saving", "active", "killed", "deleted", "pending_delete", "deactivated", "uploading", "importing"];
const SORT_KEYS: &[&str] =
    &["name", "status", "container_format", "disk_format", "size", "id", "created_at", "updated_at"];

pub(super) fn handle(op: Op, ctx: &Ctx<'_>) -> Response {
    match op {
        Op::ImageList => list(ctx),
        Op::ImageGet => {
            let id = ctx.id.as_deref().unwrap_or_default();
            let state = ctx.state();
            match state.images.get(id).filter(|(image, _)| visible(image, &ctx.project)) {
                Some((image, created)) => reply::json(StatusCode::OK, render(image, *created)),
                None => not_found(id),
            }
        }
        _ => error(404, "The resource could not be found."),
    }
}

/// Whether `project` sees `image` (glance/db/__init__.py `is_image_visible`):
/// public and community images to all, the others to their owner (shared
/// images to their members too, which are not modelled).
pub(super) fn visible(image: &Image, project: &str) -> bool {
    matches!(image.visibility.as_str(), "public" | "community") || image.owner.as_deref() == Some(project)
}

fn error(code: u16, message: &str) -> Response {
    reply::error(Service::Image, code, message)
}

/// images.py `show`: `ImageNotFound` -> 404.
fn not_found(id: &str) -> Response {
    error(404, &format!("No image found with ID {id}"))
}

/// An image as images.py `ResponseSerializer._format_image` renders it
/// (the api-ref's "Show image" response): its attributes, `self`, `file`,
/// `schema`, and each additional property as a top-level key. `checksum`
/// and `os_hash_value` have MD5's and SHA-512's shape, not their value.
fn render(image: &Image, created: Timestamp) -> Value {
    let digest = digest(&image.id);
    let mut body = Map::new();
    for (key, value) in &image.properties {
        body.insert(key.clone(), json!(value));
    }
    let attributes = json!({
        "id": image.id,
        "name": image.name,
        "status": "active",
        "visibility": image.visibility,
        "protected": false,
        "os_hidden": false,
        "owner": image.owner,
        "checksum": digest[..32],
        "os_hash_algo": "sha512",
        "os_hash_value": digest,
        "size": image.size,
        "virtual_size": null,
        "min_disk": image.min_disk,
        "min_ram": image.min_ram,
        "disk_format": image.disk_format,
        "container_format": image.container_format,
        "tags": [],
        "created_at": rfc3339(created),
        "updated_at": rfc3339(created),
        "self": format!("/v2/images/{}", image.id),
        "file": format!("/v2/images/{}/file", image.id),
        "schema": "/v2/schemas/image",
    });
    if let Value::Object(attributes) = attributes {
        body.extend(attributes);
    }
    Value::Object(body)
}

/// 128 hex digits derived from `text` (FNV-1a, repeated with a counter).
fn digest(text: &str) -> String {
    (0u8..4)
        .map(|round| {
            let mut hash: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
            for byte in text.bytes().chain([round]) {
                hash ^= u128::from(byte);
                hash = hash.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
            }
            format!("{hash:032x}")
        })
        .collect()
}

/// `GET /v2/images` (images.py `ImagesController.index`,
/// `RequestDeserializer.index`, `ResponseSerializer.index`):
/// - visibility: without the filter public, shared and the project's own
///   images, not community ones; `all` every visible one; another value 400.
/// - `name`, `status`, `owner`, `id` filter exactly; any other key that is
///   not `limit`, `marker` or a sort key filters on the additional
///   property of that name.
/// - sorted by `sort_key` (default `created_at`), `sort_dir` (default
///   `desc`), then by id; an unknown key or direction 400.
/// - `limit` (default 25, at most 1000; not a non-negative integer 400),
///   `marker` (an image not found 400); a full page carries `next`, a
///   relative link keeping the query with the last image as marker; `first`
///   the query without the marker.
fn list(ctx: &Ctx<'_>) -> Response {
    let limit = match ctx.query("limit") {
        None => LIMIT_DEFAULT,
        Some(value) => match value.parse::<i64>() {
            Ok(limit) if limit < 0 => return error(400, "limit param must be positive"),
            Ok(limit) => usize::try_from(limit).unwrap_or(LIMIT_MAX).min(LIMIT_MAX),
            Err(_) => return error(400, "limit param must be an integer"),
        },
    };
    let visibility = ctx.query("visibility");
    if let Some(visibility) = visibility.filter(|v| !VISIBILITIES.contains(v)) {
        return error(400, &format!("Invalid visibility value: {visibility}"));
    }
    if let Some(status) = ctx.query("status").filter(|s| !STATUSES.contains(s)) {
        return error(400, &format!("Invalid status value: {status}"));
    }
    let sort_key = ctx.query("sort_key").unwrap_or("created_at");
    if !SORT_KEYS.contains(&sort_key) {
        return error(
            400,
            &format!("Invalid sort key: {sort_key}. It must be one of the following: {}.", SORT_KEYS.join(", ")),
        );
    }
    let descending = match ctx.query("sort_dir").unwrap_or("desc") {
        "desc" => true,
        "asc" => false,
        other => return error(400, &format!("Invalid sort direction: {other}")),
    };

    let state = ctx.state();
    let mut images: Vec<(Value, &Image)> = state
        .images
        .values()
        .filter(|(image, _)| visible(image, &ctx.project))
        .filter(|(image, _)| match visibility {
            None => image.visibility != "community",
            Some("all") => true,
            Some(wanted) => image.visibility == wanted,
        })
        .filter(|(image, _)| {
            ctx.query_pairs().iter().all(|(key, value)| match key.as_str() {
                "name" => image.name == *value,
                "status" => value == "active",
                "owner" => image.owner.as_deref() == Some(value.as_str()),
                "id" => image.id == *value,
                key if NOT_FILTERS.contains(&key) || ATTRIBUTE_FILTERS.contains(&key) => true,
                property => image.properties.get(property) == Some(value),
            })
        })
        .map(|(image, created)| (render(image, *created), image))
        .collect();
    images.sort_by(|(a, _), (b, _)| {
        let order = compare(&a[sort_key], &b[sort_key]).then_with(|| a["id"].as_str().cmp(&b["id"].as_str()));
        if descending { order.reverse() } else { order }
    });
    if let Some(marker) = ctx.query("marker") {
        let Some(at) = images.iter().position(|(_, image)| image.id == marker) else {
            return error(400, &format!("No image found with ID {marker}"));
        };
        images.drain(..=at);
    }
    images.truncate(limit);

    let query = |marker: Option<&str>| {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (key, value) in ctx.query_pairs().iter().filter(|(k, _)| k != "marker") {
            query.append_pair(key, value);
        }
        if let Some(marker) = marker {
            query.append_pair("marker", marker);
        }
        query.finish()
    };
    let first = query(None);
    let mut body = json!({
        "images": images.iter().map(|(rendered, _)| rendered.clone()).collect::<Vec<_>>(),
        "first": if first.is_empty() { "/v2/images".to_owned() } else { format!("/v2/images?{first}") },
        "schema": "/v2/schemas/images",
    });
    if !images.is_empty()
        && images.len() == limit
        && let Some((_, last)) = images.last()
    {
        body["next"] = json!(format!("/v2/images?{}", query(Some(&last.id))));
    }
    reply::json(StatusCode::OK, body)
}

/// Orders two attribute values: numbers as numbers, the rest as text.
fn compare(a: &Value, b: &Value) -> std::cmp::Ordering {
    match (a.as_u64(), b.as_u64()) {
        (Some(a), Some(b)) => a.cmp(&b),
        _ => a.as_str().cmp(&b.as_str()),
    }
}
