//! The HTTP transport: one hyper client (rustls on ring) with the
//! configured timeouts and the `Retry-After` quiet periods, shared by
//! Keystone's logins (`auth`) and the authenticated calls (`client`).
//!
//! hyper reads each connection [`READ_BUFFER_BYTES`] at a time. Left to
//! itself it grows a connection's read buffer up to about 400 KB when reads
//! fill it (a page of a list) and keeps it for the connection's life; the
//! operator holds a connection per concurrent call, and at 10,000 Servers
//! those buffers were 8 MB of its heap (heaptrack; BENCH.md "Memory"). The
//! read size also bounds an answer's head: headers past 16 KB fail the call.
//! Proxies come from the environment (`proxy`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde::de::DeserializeOwned;
use server_core::port::CloudError;
use tracing::debug;

use crate::config::{ConfigError, OpenStackConfig};
use crate::error::{self, Transport};
use crate::proxy::ProxiedConnector;

/// Bytes read from a connection at once: a Nova page of a thousand servers
/// is a few hundred reads, a single answer one or two.
pub(crate) const READ_BUFFER_BYTES: usize = 16 * 1024;

const USER_AGENT: &str = concat!("server-controller/", env!("CARGO_PKG_VERSION"));

type Connector = hyper_rustls::HttpsConnector<ProxiedConnector>;

/// Probes of an idle connection, so one a NAT or load balancer dropped is
/// found before a call is sent on it (an answer that never comes makes a
/// create's outcome unknown).
const TCP_KEEPALIVE: Duration = Duration::from_secs(15);

/// An idle pooled connection, its TLS state and its buffer, is closed after
/// this long.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// The shared HTTP client.
#[derive(Clone, Debug)]
pub(crate) struct Http {
    client: Client<Connector, Full<Bytes>>,
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
        let value = self.headers.get(header::DATE)?.to_str().ok()?;
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
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(config.connect_timeout));
        http.set_keepalive(Some(TCP_KEEPALIVE));
        http.set_nodelay(true);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls_config(config.ca_certificate.as_deref())?)
            .https_or_http()
            .enable_http1()
            .wrap_connector(ProxiedConnector::new(http, Matcher::from_env()));
        // OpenStack APIs do not redirect, and hyper follows no redirect: one
        // would re-send a password or a token to wherever it points. A
        // redirect is an error naming its target (see `Http::send`).
        let client = Client::builder(TokioExecutor::new())
            .http1_read_buf_exact_size(READ_BUFFER_BYTES)
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .build(connector);
        Ok(Http { client, timeout: config.request_timeout, quiet: Arc::default() })
    }

    pub(crate) fn request(&self, method: Method, url: &str) -> Request {
        Request { method, url: url.to_owned(), headers: HeaderMap::new(), query: Vec::new(), body: None, timeout: None }
    }

    /// Sends and reads the whole answer within the request's timeout (the
    /// configured one unless the request sets its own). Transport failures
    /// (including a body cut short) are timeouts: the call's outcome is
    /// unknown.
    pub(crate) async fn send(&self, operation: &str, request: Request) -> Result<Reply, CloudError> {
        let started = Instant::now();
        let timeout = request.timeout.unwrap_or(self.timeout);
        let request = request.into_http().map_err(|e| error::unsendable(operation, &e))?;
        let exchange = async {
            let response = self.client.request(request).await.map_err(Transport::Send)?;
            let (parts, body) = response.into_parts();
            let body = body.collect().await.map_err(Transport::Body)?.to_bytes();
            Ok::<_, Transport>((parts.status, parts.headers, body))
        };
        let (status, headers, body) = match tokio::time::timeout(timeout, exchange).await {
            Ok(exchanged) => exchanged.map_err(|e| error::from_transport(operation, &e))?,
            Err(_) => return Err(error::from_transport(operation, &Transport::NoAnswerInTime)),
        };
        if status.is_redirection() {
            return Err(error::redirected(operation, status, &headers));
        }
        debug!(
            operation,
            status = status.as_u16(),
            request_id = error::request_id(&headers).as_deref().unwrap_or(""),
            elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "openstack call"
        );
        Ok(Reply { status, headers, body: body.into() })
    }
}

/// A request being built: what `Http::send` sends.
#[derive(Debug)]
pub(crate) struct Request {
    method: Method,
    url: String,
    headers: HeaderMap,
    query: Vec<(&'static str, String)>,
    body: Option<Bytes>,
    timeout: Option<Duration>,
}

impl Request {
    /// The whole exchange's deadline, the answer's body included.
    pub(crate) fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    pub(crate) fn header(mut self, name: impl Into<HeaderName>, value: impl Into<HeaderValue>) -> Self {
        self.headers.append(name.into(), value.into());
        self
    }

    /// Query pairs, form-encoded after any the URL has.
    pub(crate) fn query(mut self, pairs: &[(&'static str, String)]) -> Self {
        self.query.extend_from_slice(pairs);
        self
    }

    pub(crate) fn json(self, body: &serde_json::Value) -> Self {
        self.body(Bytes::from(body.to_string()))
    }

    /// A JSON body, encoded already.
    pub(crate) fn body(mut self, body: Bytes) -> Self {
        self.body = Some(body);
        self
    }

    fn into_http(self) -> Result<http::Request<Full<Bytes>>, http::Error> {
        let mut url = self.url;
        if !self.query.is_empty() {
            let mut query = url::form_urlencoded::Serializer::new(String::new());
            query.extend_pairs(&self.query);
            url.push(if url.contains('?') { '&' } else { '?' });
            url.push_str(&query.finish());
        }
        let mut request = http::Request::builder().method(self.method).uri(url);
        if let Some(headers) = request.headers_mut() {
            *headers = self.headers;
            headers.insert(header::USER_AGENT, HeaderValue::from_static(USER_AGENT));
            if self.body.is_some() {
                headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            }
        }
        request.body(Full::new(self.body.unwrap_or_default()))
    }
}

/// rustls on ring, verifying with the platform's roots plus any configured CA.
/// Built here so the process never needs a global default crypto provider.
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
    use http::header::{DATE, HeaderMap, HeaderValue};

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
