//! The HTTP transport: one reqwest client (rustls on ring) with the
//! configured timeout and the `Retry-After` quiet periods, shared by
//! Keystone's logins (`auth`) and the authenticated calls (`client`).

use std::sync::Arc;
use std::time::Instant;

use reqwest::header::HeaderMap;
use reqwest::{Method, RequestBuilder, StatusCode};
use serde::de::DeserializeOwned;
use server_core::port::CloudError;
use tracing::debug;

use crate::config::{ConfigError, OpenStackConfig};
use crate::error;

/// The shared HTTP client.
#[derive(Clone, Debug)]
pub(crate) struct Http {
    client: reqwest::Client,
    /// The configured request timeout, which the term's gate may shorten.
    timeout: std::time::Duration,
    /// Until when each (service endpoint, project) asked to be left alone
    /// (`Retry-After` on a rate limit): no request to it is sent before.
    quiet: Arc<std::sync::Mutex<std::collections::HashMap<(String, String), tokio::time::Instant>>>,
}

/// The longest a `Retry-After` keeps requests back.
const MAX_QUIET: std::time::Duration = std::time::Duration::from_secs(300);

/// A complete answer: status, headers and the whole body.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Vec<u8>,
}

impl Reply {
    pub(crate) fn request_id(&self) -> Option<String> {
        error::request_id(&self.headers)
    }

    /// The answer's `Date` (RFC 9110 §6.6.1, an IMF-fixdate): the
    /// server's clock when it answered.
    pub(crate) fn date(&self) -> Option<jiff::Timestamp> {
        let value = self.headers.get(reqwest::header::DATE)?.to_str().ok()?;
        jiff::fmt::rfc2822::parse(value).ok().map(|zoned| zoned.timestamp())
    }

    pub(crate) fn is_success(&self) -> bool {
        self.status.is_success()
    }

    pub(crate) fn is_not_found(&self) -> bool {
        self.status == StatusCode::NOT_FOUND
    }

    /// The body of a successful answer as `T`; any other answer as its error.
    pub(crate) fn json<T: DeserializeOwned>(&self, operation: &str) -> Result<T, CloudError> {
        if !self.is_success() {
            return Err(self.error(operation));
        }
        serde_json::from_slice(&self.body).map_err(|e| error::malformed(operation, self.request_id().as_deref(), e))
    }

    /// Success without a body of interest.
    pub(crate) fn ok(&self, operation: &str) -> Result<(), CloudError> {
        if self.is_success() { Ok(()) } else { Err(self.error(operation)) }
    }

    pub(crate) fn error(&self, operation: &str) -> CloudError {
        let error = error::from_status(operation, self.status, self.request_id().as_deref(), &self.body);
        error::throttled(self.status, &self.headers, &self.body, error)
    }
}

impl Http {
    /// The configured request timeout, which a term's gate may shorten.
    pub(crate) fn timeout(&self) -> std::time::Duration {
        self.timeout
    }

    /// Until when the endpoint and project in `key` asked to be left alone,
    /// if that is still ahead.
    pub(crate) fn quiet_until(&self, key: &(String, String)) -> Option<tokio::time::Instant> {
        let quiet = self.quiet.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        quiet.get(key).copied().filter(|until| tokio::time::Instant::now() < *until)
    }

    /// Leaves the endpoint and project in `key` alone for `wait` (a
    /// `Retry-After`), at most [`MAX_QUIET`].
    pub(crate) fn keep_quiet(&self, key: (String, String), wait: std::time::Duration) {
        let until = tokio::time::Instant::now() + wait.min(MAX_QUIET);
        let mut quiet = self.quiet.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        quiet.retain(|_, at| tokio::time::Instant::now() < *at);
        quiet.insert(key, until);
    }

    pub(crate) fn new(config: &OpenStackConfig) -> Result<Self, ConfigError> {
        let client = reqwest::Client::builder()
            // OpenStack APIs do not redirect; following one would re-send a
            // password or a token to wherever it points. A redirect is an
            // error naming its target (see `Http::send`).
            .redirect(reqwest::redirect::Policy::none())
            .tls_backend_preconfigured(tls_config(config.ca_certificate.as_deref())?)
            .timeout(config.request_timeout)
            .connect_timeout(config.connect_timeout)
            .user_agent(concat!("server-controller/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ConfigError::Client(e.to_string()))?;
        Ok(Http { client, timeout: config.request_timeout, quiet: Arc::default() })
    }

    pub(crate) fn request(&self, method: Method, url: &str) -> RequestBuilder {
        self.client.request(method, url)
    }

    /// Sends and reads the whole answer. Transport failures (including a body
    /// cut short) are timeouts: the call's outcome is unknown.
    pub(crate) async fn send(&self, operation: &str, request: RequestBuilder) -> Result<Reply, CloudError> {
        let started = Instant::now();
        let response = request.send().await.map_err(|e| error::from_transport(operation, &e))?;
        let status = response.status();
        let headers = response.headers().clone();
        if status.is_redirection() {
            return Err(error::redirected(operation, status, &headers));
        }
        let body = response.bytes().await.map_err(|e| error::from_transport(operation, &e))?.to_vec();
        debug!(
            operation,
            status = status.as_u16(),
            request_id = error::request_id(&headers).as_deref().unwrap_or(""),
            elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "openstack call"
        );
        Ok(Reply { status, headers, body })
    }
}

/// rustls on ring, verifying with the platform's roots plus any configured CA.
/// Built here rather than by reqwest so the process never needs a global
/// default crypto provider.
fn tls_config(ca_pem: Option<&str>) -> Result<rustls::ClientConfig, ConfigError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = match ca_pem {
        Some(pem) => {
            let extra = CertificateDer::pem_slice_iter(pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ConfigError::CaCertificate(e.to_string()))?;
            if extra.is_empty() {
                return Err(ConfigError::CaCertificate("no certificate in the PEM text".into()));
            }
            rustls_platform_verifier::Verifier::new_with_extra_roots(extra, provider.clone())
        }
        None => rustls_platform_verifier::Verifier::new(provider.clone()),
    }
    .map_err(|e| ConfigError::CaCertificate(e.to_string()))?;
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError::Client(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    Ok(config)
}

/// A provider id as one URL path segment (ids are UUIDs, but nothing read
/// from an API goes into a path unescaped).
pub(crate) fn segment(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use reqwest::header::{DATE, HeaderMap, HeaderValue};

    use super::*;

    fn reply_dated(date: &'static str) -> Reply {
        let mut headers = HeaderMap::new();
        headers.insert(DATE, HeaderValue::from_static(date));
        Reply { status: StatusCode::OK, headers, body: Vec::new() }
    }

    #[test]
    fn the_answers_date_is_read_as_http_writes_it_and_a_bad_one_is_none() {
        let date = reply_dated("Fri, 04 Dec 2026 18:45:01 GMT").date();
        assert_eq!(date, "2026-12-04T18:45:01Z".parse().ok());
        assert_eq!(reply_dated("yesterday").date(), None);
        assert_eq!(Reply { status: StatusCode::OK, headers: HeaderMap::new(), body: Vec::new() }.date(), None);
    }
}
