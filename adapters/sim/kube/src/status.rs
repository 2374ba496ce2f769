//! Kubernetes `Status` error bodies.
//!
//! Every failure SimKube reports, over HTTP or through the [`crate::StoreHandle`],
//! is an [`ApiError`]: the same fields the real API server puts in a `Status`
//! (`kind: Status, apiVersion: v1, status: Failure`), so kube-rs parses it into
//! `kube::Error::Api` and helpers such as `is_conflict()` work unchanged.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// A Kubernetes API error: HTTP code, machine-readable reason and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code (404, 409, ...).
    pub code: u16,
    /// `Status.reason`, e.g. `NotFound`, `Conflict`, `AlreadyExists`.
    pub reason: &'static str,
    /// Human-readable message, shaped like the real API server's.
    pub message: String,
    /// `Status.details` (boxed: every `Result` here carries this type).
    pub details: Box<Details>,
}

/// `Status.details`: what the error is about.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Details {
    /// `Status.details.name`.
    pub name: String,
    /// `Status.details.group`.
    pub group: String,
    /// `Status.details.kind` (the resource plural, as the API server reports
    /// it, or the Kind for a 422 `Invalid`).
    pub kind: String,
    /// `Status.details.retryAfterSeconds` (0 = absent).
    pub retry_after_seconds: u32,
    /// `Status.details.causes`: `(reason, message, field)` of each violation
    /// of a 422 `Invalid`.
    pub causes: Vec<(String, String, String)>,
    /// Served as kube-apiserver's mux serves an unknown path: plain text.
    pub plain_text: bool,
}

/// The resource an error is about, for `Status.details`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Subject<'a> {
    pub(crate) group: &'a str,
    pub(crate) plural: &'a str,
    pub(crate) name: &'a str,
}

impl<'a> Subject<'a> {
    pub(crate) fn new(group: &'a str, plural: &'a str, name: &'a str) -> Self {
        Self { group, plural, name }
    }

    /// `plural.group` (or just `plural` for the core group), as in API server messages.
    fn qualified(&self) -> String {
        if self.group.is_empty() { self.plural.to_string() } else { format!("{}.{}", self.plural, self.group) }
    }
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self { code, reason, message: message.into(), details: Box::default() }
    }

    fn about(mut self, subject: Subject<'_>) -> Self {
        self.details.name = subject.name.to_string();
        self.details.group = subject.group.to_string();
        self.details.kind = subject.plural.to_string();
        self
    }

    pub(crate) fn not_found(subject: Subject<'_>) -> Self {
        let message = format!("{} \"{}\" not found", subject.qualified(), subject.name);
        Self::new(404, "NotFound", message).about(subject)
    }

    /// 404 for a path that names no served resource: kube-apiserver's mux
    /// answers it in plain text, `404 page not found`, not as a `Status`.
    pub(crate) fn unknown_path(path: &str) -> Self {
        let mut error =
            Self::new(404, "NotFound", format!("the server could not find the requested resource ({path})"));
        error.details.plain_text = true;
        error
    }

    pub(crate) fn already_exists(subject: Subject<'_>) -> Self {
        let message = format!("{} \"{}\" already exists", subject.qualified(), subject.name);
        Self::new(409, "AlreadyExists", message).about(subject)
    }

    /// A delete precondition that does not hold (upstream
    /// `apiserver/pkg/storage` `NewInvalidObjError` through the registry:
    /// 409 `Conflict` about the Kind).
    pub(crate) fn precondition_failed(
        kind: &str,
        subject: Subject<'_>,
        field: &str,
        wanted: &str,
        recorded: &str,
    ) -> Self {
        let consequence = if field == "UID" { "deleted and then recreated" } else { "modified" };
        let message = format!(
            "Operation cannot be fulfilled on {kind}.{} \"{}\": the {field} in the precondition ({wanted}) does not match the {field} in record ({recorded}). The object might have been {consequence}",
            subject.group, subject.name
        );
        let mut error = Self::new(409, "Conflict", message).about(subject);
        error.details.kind = kind.to_string();
        error
    }

    /// The optimistic-concurrency failure: a stale resourceVersion or uid precondition.
    pub(crate) fn conflict(subject: Subject<'_>) -> Self {
        let message = format!(
            "Operation cannot be fulfilled on {} \"{}\": the object has been modified; please apply your changes to the latest version and try again",
            subject.qualified(),
            subject.name
        );
        Self::new(409, "Conflict", message).about(subject)
    }

    pub(crate) fn invalid(subject: Subject<'_>, detail: &str) -> Self {
        let message = format!("{} \"{}\" is invalid: {detail}", subject.qualified(), subject.name);
        Self::new(422, "Invalid", message).about(subject)
    }

    /// 422 `Invalid` for a custom resource whose values break its schema:
    /// `Kind.group "name" is invalid: <cause>` or `[<cause>, <cause>]`, the
    /// causes also in `details.causes` (upstream `apierrors.NewInvalid`).
    pub(crate) fn invalid_fields(kind: &str, subject: Subject<'_>, causes: &[crate::validation::Cause]) -> Self {
        let described: Vec<String> = causes.iter().map(crate::validation::Cause::describe).collect();
        let detail = match described.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let message = format!("{kind}.{} \"{}\" is invalid: {detail}", subject.group, subject.name);
        let mut error = Self::new(422, "Invalid", message).about(subject);
        error.details.kind = kind.to_string();
        let causes = causes.iter().map(|c| (c.reason.to_string(), c.message.clone(), c.field.clone())).collect();
        error.details.causes = causes;
        error
    }

    /// 422 without a reason, as the API server answers a JSON patch that cannot apply.
    pub(crate) fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(422, "", message)
    }

    /// 403, as admission refuses a write (e.g. into a terminating namespace).
    pub(crate) fn forbidden(subject: Subject<'_>, detail: &str) -> Self {
        let message = format!("{} \"{}\" is forbidden: {detail}", subject.qualified(), subject.name);
        Self::new(403, "Forbidden", message).about(subject)
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub(crate) fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(406, "NotAcceptable", message)
    }

    pub(crate) fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub(crate) fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {content_type:?})"
            ),
        )
    }

    /// 415 for a create or update body SimKube cannot decode.
    pub(crate) fn unsupported_body(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "SimKube decodes application/json request bodies only (got {content_type:?}); kubectl apply sends JSON"
            ),
        )
    }

    pub(crate) fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub(crate) fn too_many_requests(subject: Subject<'_>) -> Self {
        let mut error = Self::new(
            429,
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later",
        )
        .about(subject);
        error.details.retry_after_seconds = 1;
        error
    }

    /// What kube-apiserver answers when etcd refuses a write over its
    /// `--max-request-bytes`: 500, etcd's words, no reason (measured on
    /// kube-apiserver v1.34 and etcd v3.6).
    pub(crate) fn etcd_request_too_large() -> Self {
        Self::new(500, "", "etcdserver: request is too large")
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", format!("Internal error occurred: {}", message.into()))
    }

    /// The `Status` object, as JSON.
    pub fn to_status(&self) -> Value {
        let mut details = serde_json::Map::new();
        for (key, value) in [("name", &self.details.name), ("group", &self.details.group), ("kind", &self.details.kind)]
        {
            if !value.is_empty() {
                details.insert(key.to_string(), Value::String(value.clone()));
            }
        }
        if self.details.retry_after_seconds > 0 {
            details.insert("retryAfterSeconds".to_string(), Value::from(self.details.retry_after_seconds));
        }
        if !self.details.causes.is_empty() {
            let causes = self
                .details
                .causes
                .iter()
                .map(|(reason, message, field)| json!({"reason": reason, "message": message, "field": field}))
                .collect();
            details.insert("causes".to_string(), Value::Array(causes));
        }
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "code": self.code,
        });
        // `reason` is `omitempty` in metav1.Status.
        if !self.reason.is_empty() {
            status["reason"] = Value::from(self.reason);
        }
        if !details.is_empty() {
            status["details"] = Value::Object(details);
        }
        status
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if self.details.plain_text {
            return (code, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], "404 page not found\n")
                .into_response();
        }
        let mut response = (code, axum::Json(self.to_status())).into_response();
        if self.details.retry_after_seconds > 0 {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(self.details.retry_after_seconds));
        }
        response
    }
}
