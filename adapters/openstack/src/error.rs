//! OpenStack answers to [`CloudError`] classes, with the operation and the
//! request id in the message so an operator can find the call in the
//! service's logs.

use http::StatusCode;
use http::header::HeaderMap;
use server_core::port::CloudError;

/// Headers the services put their request id in (Nova sends both).
const REQUEST_ID_HEADERS: [&str; 2] = ["x-openstack-request-id", "x-compute-request-id"];

/// Longest provider message kept (error pages can be whole HTML documents).
const MAX_MESSAGE: usize = 512;

pub(crate) fn request_id(headers: &HeaderMap) -> Option<String> {
    REQUEST_ID_HEADERS.iter().find_map(|name| headers.get(*name).and_then(|v| v.to_str().ok()).map(str::to_owned))
}

/// The error of a non-success answer to `operation`.
///
/// 401 is [`CloudError::Auth`]; the token refresh has already been tried by
/// the time this runs. 404 is mapped by callers that treat it as "absent";
/// here it is a refusal like any other 4xx.
pub(crate) fn from_status(operation: &str, status: StatusCode, request_id: Option<&str>, body: &[u8]) -> CloudError {
    let detail = provider_message(body).unwrap_or_else(|| status.canonical_reason().unwrap_or("no reason").to_owned());
    let request = request_id.map(|id| format!(", request id {id}")).unwrap_or_default();
    let message = format!("{operation}: {detail} (HTTP {}{request})", status.as_u16());
    match neutron_error_type(body).as_deref().map(NeutronRefusal::of) {
        // Neutron answers 409 for quota and a full subnet: waiting does not
        // free either, so they are refusals, not conflicts to retry.
        Some(Some(NeutronRefusal::Refused)) if status == StatusCode::CONFLICT => {
            CloudError::Refused { status: status.as_u16(), message }
        }
        // What the port needs is not there (yet): wait, the create did not land.
        Some(Some(NeutronRefusal::NotThere)) if status == StatusCode::NOT_FOUND => CloudError::NotReady { message },
        // oslo.policy said no: a person must grant a role, nothing else helps.
        Some(Some(NeutronRefusal::Policy)) if status == StatusCode::FORBIDDEN => CloudError::NotPermitted { message },
        _ => CloudError::from_http(status.as_u16(), message),
    }
}

/// A 429, or a 413 that is a rate limit (Nova's `overLimit` fault, or any
/// 413 with `Retry-After`), as [`CloudError::RateLimited`] with how long the
/// provider asked to be left alone: the `Retry-After` header (seconds or an
/// HTTP date), else the body's `retryAfter` (Nova's `RateLimitFault`,
/// nova/api/openstack/wsgi.py, sends both). A 413 without either is a
/// request too large: a refusal, unchanged.
pub(crate) fn throttled(status: StatusCode, headers: &HeaderMap, body: &[u8], error: CloudError) -> CloudError {
    let header = headers.get(http::header::RETRY_AFTER).and_then(|v| v.to_str().ok()).and_then(retry_after);
    let over_limit = serde_json::from_slice::<serde_json::Value>(body).ok().and_then(|v| v.get("overLimit").cloned());
    let in_body = over_limit
        .as_ref()
        .and_then(|fault| fault.get("retryAfter"))
        .and_then(|v| v.as_u64().or_else(|| v.as_str().and_then(|s| s.trim().parse().ok())))
        .map(std::time::Duration::from_secs);
    let limited = status == StatusCode::TOO_MANY_REQUESTS
        || (status == StatusCode::PAYLOAD_TOO_LARGE && (over_limit.is_some() || header.is_some()));
    if !limited {
        return error;
    }
    let message = match error {
        CloudError::RateLimited { message, .. } | CloudError::Refused { message, .. } => message,
        other => return other,
    };
    CloudError::RateLimited { message, retry_after: header.or(in_body) }
}

/// A `Retry-After` value: delay-seconds, or an HTTP date (RFC 9110 10.2.3).
fn retry_after(value: &str) -> Option<std::time::Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(std::time::Duration::from_secs(seconds));
    }
    let at = jiff::fmt::rfc2822::parse(value).ok()?.timestamp();
    let wait = at.duration_since(jiff::Timestamp::now());
    Some(std::time::Duration::try_from(wait).unwrap_or(std::time::Duration::ZERO))
}

/// What a `NeutronError.type` means beyond its HTTP status
/// (neutron-lib `exceptions`: `OverQuota`, `IpAddressGenerationFailure`,
/// `NetworkNotFound`, `SecurityGroupNotFound`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NeutronRefusal {
    /// Port or floating-IP quota, or no address left on the subnet.
    Refused,
    /// The network or security group a port names does not exist.
    NotThere,
    /// The policy engine refused the call (neutron-lib
    /// `exceptions.PolicyNotAuthorized`, HTTP 403).
    Policy,
}

impl NeutronRefusal {
    fn of(kind: &str) -> Option<Self> {
        match kind {
            "OverQuota" | "IpAddressGenerationFailure" => Some(NeutronRefusal::Refused),
            "NetworkNotFound" | "SecurityGroupNotFound" => Some(NeutronRefusal::NotThere),
            "PolicyNotAuthorized" => Some(NeutronRefusal::Policy),
            _ => None,
        }
    }
}

/// `NeutronError.type` of a Neutron error body.
fn neutron_error_type(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Body {
        #[serde(rename = "NeutronError")]
        error: Inner,
    }
    #[derive(serde::Deserialize)]
    struct Inner {
        #[serde(rename = "type")]
        kind: String,
    }
    serde_json::from_slice::<Body>(body).ok().map(|b| b.error.kind)
}

/// A 3xx answer: OpenStack APIs do not redirect, so the endpoint is wrong
/// (or something in between is). Not followed; the target is named so the
/// configuration can be fixed (its query string left out).
pub(crate) fn redirected(operation: &str, status: StatusCode, headers: &HeaderMap) -> CloudError {
    let target = headers
        .get(http::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(|l| l.split(['?', '#']).next().unwrap_or_default().to_owned())
        .unwrap_or_else(|| "an unnamed location".into());
    CloudError::Auth {
        message: format!(
            "{operation}: the endpoint answered HTTP {} redirecting to {target}; redirects are not followed \
             (credentials would go with them): configure the final URL",
            status.as_u16()
        ),
    }
}

/// Why no usable answer arrived.
#[derive(Debug)]
pub(crate) enum Transport {
    /// Nothing answered, or the answer did not end, within the timeout.
    NoAnswerInTime,
    /// The request was not sent or not answered: no connection, a failed
    /// handshake, a connection closed before the answer's head.
    Send(hyper_util::client::legacy::Error),
    /// The answer's body was cut short or unreadable.
    Body(hyper::Error),
}

/// A transport failure: no usable answer arrived, so the outcome is unknown.
/// Connection failures count as timeouts too (transient, never a refusal).
pub(crate) fn from_transport(operation: &str, failure: &Transport) -> CloudError {
    let (what, error): (_, Option<&(dyn std::error::Error + 'static)>) = match failure {
        Transport::NoAnswerInTime => ("no answer in time", None),
        Transport::Send(error) if error.is_connect() => ("connection failed", Some(error)),
        Transport::Send(error) => ("request failed", Some(error)),
        Transport::Body(error) => ("answer unreadable", Some(error)),
    };
    if let Some(certificate) = error.and_then(certificate_failure) {
        // The handshake failed: nothing was sent. A person must fix trust.
        return CloudError::Unreachable {
            message: format!(
                "{operation}: TLS certificate verification failed ({certificate}); configure the CA that signed the \
                 endpoint's certificate (caCertificate) or correct the endpoint"
            ),
        };
    }
    // The URL is left out: it may carry query filters with server uids, and the
    // operation already says which call it was.
    let source = error.and_then(std::error::Error::source).map(|s| format!(": {s}")).unwrap_or_default();
    CloudError::Timeout { message: format!("{operation}: {what}{source}") }
}

/// A request that could not be written (an endpoint URL from the catalog
/// or the configuration that is not one): nothing was sent.
pub(crate) fn unsendable(operation: &str, error: &http::Error) -> CloudError {
    CloudError::Unreachable { message: format!("{operation}: not sent: the request is not valid HTTP ({error})") }
}

/// The certificate error a TLS handshake failed with, if that is why
/// `error` happened: rustls' `InvalidCertificate`, found by type down the
/// source chain. An `io::Error` answers `source()` with its inner error's
/// source, hiding the inner error (the connector nests two), so each is
/// opened here.
fn certificate_failure(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(error);
    // A chain is short; the bound only guards against a cycle.
    for _ in 0..32 {
        let current = next?;
        if let Some(rustls::Error::InvalidCertificate(reason)) = current.downcast_ref::<rustls::Error>() {
            return Some(format!("{reason:?}"));
        }
        let opened = current
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .map(|inner| inner as &(dyn std::error::Error + 'static));
        next = opened.or_else(|| current.source());
    }
    None
}

/// An answer that arrived but cannot be understood (a provider bug or a proxy
/// in the way). It is treated as unavailability, so callers retry.
pub(crate) fn malformed(operation: &str, request_id: Option<&str>, detail: impl std::fmt::Display) -> CloudError {
    let request = request_id.map(|id| format!(", request id {id}")).unwrap_or_default();
    CloudError::Unavailable { status: 502, message: format!("{operation}: malformed answer: {detail}{request}") }
}

/// The human message in an OpenStack error body. The services disagree on the
/// shape: Nova `{"itemNotFound": {"code": 404, "message": ...}}`, Neutron
/// `{"NeutronError": {"type": ..., "message": ...}}`, Keystone
/// `{"error": {"code": 401, "message": ..., "title": ...}}`, and some proxies
/// answer plain text.
pub(crate) fn provider_message(body: &[u8]) -> Option<String> {
    let message = match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Object(map)) => map
            .values()
            .find_map(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
            .or_else(|| map.get("message").and_then(|m| m.as_str()).map(str::to_owned))
            .or_else(|| map.get("faultstring").and_then(|m| m.as_str()).map(str::to_owned))?,
        Ok(_) => return None,
        Err(_) => String::from_utf8_lossy(body).trim().to_owned(),
    };
    let message = message.split_whitespace().collect::<Vec<_>>().join(" ");
    if message.is_empty() {
        return None;
    }
    Some(truncate(message))
}

fn truncate(mut message: String) -> String {
    if message.len() > MAX_MESSAGE {
        let mut cut = MAX_MESSAGE;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push('…');
    }
    message
}

#[cfg(test)]
mod tests {
    use http::header::HeaderValue;

    use super::*;

    #[test]
    fn messages_of_each_service_shape() {
        let nova = br#"{"itemNotFound": {"code": 404, "message": "Instance x could not be found."}}"#;
        assert_eq!(provider_message(nova).as_deref(), Some("Instance x could not be found."));
        let neutron =
            br#"{"NeutronError": {"type": "PortNotFound", "message": "Port y could not be found.", "detail": ""}}"#;
        assert_eq!(provider_message(neutron).as_deref(), Some("Port y could not be found."));
        let keystone = br#"{"error": {"code": 401, "message": "The request you have made requires authentication.", "title": "Unauthorized"}}"#;
        assert_eq!(provider_message(keystone).as_deref(), Some("The request you have made requires authentication."));
        assert_eq!(
            provider_message(b"<html>\n 502   Bad Gateway </html>").as_deref(),
            Some("<html> 502 Bad Gateway </html>")
        );
        assert_eq!(provider_message(b""), None);
        let long = "é".repeat(1000);
        assert!(provider_message(long.as_bytes()).is_some_and(|m| m.len() <= MAX_MESSAGE + 3));
    }

    #[test]
    fn statuses_keep_their_class_and_carry_the_request_id() {
        let mut headers = HeaderMap::new();
        headers.insert("x-compute-request-id", HeaderValue::from_static("req-abc"));
        let id = request_id(&headers);
        let body = br#"{"forbidden": {"code": 403, "message": "Quota exceeded for instances"}}"#;
        let error = from_status("creating server", StatusCode::FORBIDDEN, id.as_deref(), body);
        assert!(
            matches!(&error, CloudError::Refused { status: 403, message } if message.contains("req-abc") && message.contains("Quota exceeded"))
        );
        assert!(from_status("x", StatusCode::CONFLICT, None, b"").is_transient());
        assert!(from_status("x", StatusCode::TOO_MANY_REQUESTS, None, b"").is_transient());
        assert!(from_status("x", StatusCode::BAD_GATEWAY, None, b"").is_transient());
        assert!(matches!(from_status("x", StatusCode::UNAUTHORIZED, None, b""), CloudError::Auth { .. }));
        assert!(malformed("x", None, "eof").is_transient());
    }

    #[test]
    fn neutron_error_types_decide_over_the_status() {
        let body = |kind: &str| format!(r#"{{"NeutronError": {{"type": "{kind}", "message": "m", "detail": ""}}}}"#);
        let quota = from_status("creating port", StatusCode::CONFLICT, None, body("OverQuota").as_bytes());
        assert!(matches!(quota, CloudError::Refused { status: 409, .. }));
        let full = from_status("x", StatusCode::CONFLICT, None, body("IpAddressGenerationFailure").as_bytes());
        assert!(matches!(full, CloudError::Refused { status: 409, .. }));
        let in_use = from_status("x", StatusCode::CONFLICT, None, body("PortInUse").as_bytes());
        assert!(matches!(in_use, CloudError::Conflict { .. }));
        let policy = from_status("creating port", StatusCode::FORBIDDEN, None, body("PolicyNotAuthorized").as_bytes());
        assert!(matches!(policy, CloudError::NotPermitted { .. }) && !policy.is_transient(), "{policy:?}");
        let no_network = from_status("x", StatusCode::NOT_FOUND, None, body("NetworkNotFound").as_bytes());
        assert!(matches!(no_network, CloudError::NotReady { .. }) && no_network.is_transient());
        // The type decides, never the words of the message.
        let worded =
            br#"{"NeutronError": {"type": "HTTPConflict", "message": "Quota exceeded (OverQuota)", "detail": ""}}"#;
        assert!(from_status("x", StatusCode::CONFLICT, None, worded).is_transient());
    }

    /// 429 and a 413 `overLimit` are rate limits carrying `Retry-After`
    /// (header first, else Nova's `retryAfter`); a plain 413 stays a refusal.
    #[test]
    fn rate_limits_carry_how_long_to_wait_and_a_plain_413_is_a_refusal() {
        let limited = |status: StatusCode, header: Option<&'static str>, body: &[u8]| {
            let mut headers = HeaderMap::new();
            if let Some(value) = header {
                headers.insert("retry-after", HeaderValue::from_static(value));
            }
            throttled(status, &headers, body, from_status("creating server", status, None, body))
        };
        let over = br#"{"overLimit": {"code": 413, "message": "This request was rate-limited.", "retryAfter": "30"}}"#;
        let e = limited(StatusCode::PAYLOAD_TOO_LARGE, None, over);
        assert_eq!(e.retry_after(), Some(std::time::Duration::from_secs(30)), "{e:?}");
        assert!(e.is_transient());
        let e = limited(StatusCode::PAYLOAD_TOO_LARGE, Some("12"), over);
        assert_eq!(e.retry_after(), Some(std::time::Duration::from_secs(12)));
        let e = limited(StatusCode::TOO_MANY_REQUESTS, Some("30"), b"");
        assert_eq!(e.retry_after(), Some(std::time::Duration::from_secs(30)));
        let e = limited(StatusCode::TOO_MANY_REQUESTS, Some("Wed, 21 Oct 2015 07:28:00 GMT"), b"");
        assert_eq!(e.retry_after(), Some(std::time::Duration::ZERO), "a date past is no wait: {e:?}");
        let e = limited(StatusCode::TOO_MANY_REQUESTS, Some("soon"), b"");
        assert!(matches!(e, CloudError::RateLimited { retry_after: None, .. }));
        let too_large = limited(StatusCode::PAYLOAD_TOO_LARGE, None, b"body too large");
        assert!(matches!(too_large, CloudError::Refused { status: 413, .. }), "{too_large:?}");
    }

    /// A handshake that failed on the certificate is told apart by type, however
    /// deep it is wrapped; other I/O failures are not.
    #[test]
    fn a_certificate_failure_is_found_down_the_source_chain() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("client error (Connect)")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let rustls_error = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let wrapped = Outer(std::io::Error::new(std::io::ErrorKind::InvalidData, rustls_error));
        assert_eq!(certificate_failure(&wrapped).as_deref(), Some("UnknownIssuer"));
        let refused = Outer(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused"));
        assert_eq!(certificate_failure(&refused), None);
    }

    #[test]
    fn a_redirect_names_its_target_without_the_query() {
        let mut headers = HeaderMap::new();
        headers.insert("location", HeaderValue::from_static("http://elsewhere:9999/v3/auth/tokens?x=secret"));
        let error = redirected("authenticating", StatusCode::TEMPORARY_REDIRECT, &headers);
        assert!(
            matches!(&error, CloudError::Auth { message } if message.contains("http://elsewhere:9999/v3/auth/tokens") && !message.contains("secret"))
        );
    }
}
