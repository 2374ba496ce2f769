//! Answers in each service's own shape: Keystone `{"error": {...}}`, Nova
//! `{"itemNotFound": {"code", "message"}}`, Neutron `{"NeutronError": {...}}`.

use axum::Json;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::Service;

pub(super) fn json(status: StatusCode, body: Value) -> Response {
    (status, Json(body)).into_response()
}

pub(super) fn empty(status: StatusCode) -> Response {
    status.into_response()
}

/// An error answer of `service` with `code` and `message`.
pub(super) fn error(service: Service, code: u16, message: &str) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = match service {
        Service::Identity => json!({"error": {
            "code": code,
            "message": message,
            "title": status.canonical_reason().unwrap_or("Error"),
        }}),
        Service::Compute => json!({ nova_fault_key(code): {"code": code, "message": message} }),
        Service::Network => json!({"NeutronError": {
            "type": neutron_error_type(code),
            "message": message,
            "detail": "",
        }}),
        // Glance's webob exceptions rendered as JSON (webob/exc.py
        // `WSGIHTTPException.json_formatter`): the status line as `code`.
        Service::Image => json!({
            "code": format!("{code} {}", status.canonical_reason().unwrap_or("Error")),
            "title": status.canonical_reason().unwrap_or("Error"),
            "message": message,
        }),
        // Ironic's WSME fault: the fault serialized into `error_message`
        // (ironic/api/hooks.py `PublicUrlHook`, wsme's faultstring).
        Service::Baremetal => baremetal_fault(code, message),
    };
    let mut response = json(status, body);
    if code == 429 || code == 413 {
        response.headers_mut().insert("retry-after", HeaderValue::from_static("1"));
    }
    response
}

/// A rate limit (413 or 429) asking the client to wait `retry_after`
/// seconds: the `Retry-After` header on every service, and Nova's
/// `overLimit` fault with `retryAfter` (nova/api/openstack/wsgi.py
/// `RateLimitFault`).
pub(super) fn rate_limited(service: Service, code: u16, retry_after: u32) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
    let message = "This request was rate-limited.";
    let body = match service {
        Service::Compute => {
            json!({"overLimit": {"code": code, "message": message, "retryAfter": retry_after.to_string()}})
        }
        Service::Network => json!({"NeutronError": {"type": "HTTPTooManyRequests", "message": message, "detail": ""}}),
        Service::Identity => json!({"error": {"code": code, "message": message, "title": "Too Many Requests"}}),
        Service::Image => {
            json!({"code": format!("{code} Too Many Requests"), "title": "Too Many Requests", "message": message})
        }
        Service::Baremetal => baremetal_fault(code, message),
    };
    let mut response = json(status, body);
    if let Ok(value) = HeaderValue::from_str(&retry_after.to_string()) {
        response.headers_mut().insert("retry-after", value);
    }
    response
}

/// The token refusal keystonemiddleware answers on every service, in
/// Keystone's shape whatever the service (keystonemiddleware/auth_token,
/// `_reject_request`).
pub(super) fn unauthorized(_service: Service) -> Response {
    let mut response = error(Service::Identity, 401, "The request you have made requires authentication.");
    response.headers_mut().insert("www-authenticate", HeaderValue::from_static("Keystone uri=\"/identity\""));
    response
}

/// A Neutron error of a given `NeutronError.type`.
pub(super) fn neutron_error(code: u16, kind: &str, message: &str) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json(status, json!({"NeutronError": {"type": kind, "message": message, "detail": ""}}))
}

fn nova_fault_key(code: u16) -> &'static str {
    match code {
        400 => "badRequest",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "itemNotFound",
        409 => "conflictingRequest",
        413 | 429 => "overLimit",
        501 => "notImplemented",
        503 => "serviceUnavailable",
        _ => "computeFault",
    }
}

fn neutron_error_type(code: u16) -> &'static str {
    match code {
        400 => "HTTPBadRequest",
        401 => "HTTPUnauthorized",
        403 => "HTTPForbidden",
        404 => "HTTPNotFound",
        409 => "HTTPConflict",
        429 => "HTTPTooManyRequests",
        503 => "HTTPServiceUnavailable",
        _ => "HTTPInternalServerError",
    }
}

/// Ironic's error body: the WSME fault as a JSON string in `error_message`.
fn baremetal_fault(code: u16, message: &str) -> serde_json::Value {
    let kind = if code < 500 { "Client" } else { "Server" };
    let fault = json!({"faultstring": message, "faultcode": kind, "debuginfo": null});
    json!({ "error_message": fault.to_string() })
}
