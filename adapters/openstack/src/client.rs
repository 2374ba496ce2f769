//! The HTTP layer: one reqwest client (rustls on ring), and authenticated
//! calls to a service endpoint from the token's catalog, with the one token
//! refresh on 401 that Keystone's token revocation calls for.

use std::sync::Arc;
use std::time::Instant;

use reqwest::header::HeaderMap;
use reqwest::{Method, RequestBuilder, StatusCode};
use serde::de::DeserializeOwned;
use server_core::port::{CloudError, IdentityContext, RequestGate};
use tracing::debug;

use crate::auth::{Auth, Token};
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

/// The two services the port needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Service {
    Compute,
    Network,
}

impl Service {
    fn base(self, token: &Token) -> &str {
        match self {
            Service::Compute => &token.endpoints.compute,
            Service::Network => &token.endpoints.network,
        }
    }
}

/// One identity's view of the cloud in one leadership term: calls carry
/// its token, and each request passes the term's gate before it is sent.
#[derive(Clone, Copy)]
pub(crate) struct Session<'a> {
    pub(crate) http: &'a Http,
    pub(crate) auth: &'a Auth,
    pub(crate) identity: &'a IdentityContext,
    pub(crate) gate: &'a dyn RequestGate,
}

impl std::fmt::Debug for Session<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("identity", self.identity).finish_non_exhaustive()
    }
}

/// A token that could not be had: the service request was never sent, so
/// its effect is none, whatever Keystone's failure was (a 5xx or a timeout
/// of the token request is no create of unknown fate). A refused login stays
/// what it is.
fn not_sent(call: &Call<'_>, error: CloudError) -> CloudError {
    match error {
        CloudError::Timeout { message } | CloudError::Unavailable { message, .. } => {
            CloudError::Unreachable { message: format!("{} (not sent, no token): {message}", call.operation) }
        }
        other => other,
    }
}

/// Why a request was not sent: the term's gate refused it.
pub(crate) const NOT_ADMITTED: &str = "not sent: this replica no longer holds the leader lease";

/// A service call, built by the compute and network modules.
#[derive(Debug)]
pub(crate) struct Call<'a> {
    pub(crate) operation: &'a str,
    pub(crate) service: Service,
    pub(crate) method: Method,
    /// Path below the service endpoint, starting with `/`.
    pub(crate) path: String,
    pub(crate) query: Vec<(&'static str, String)>,
    pub(crate) body: Option<serde_json::Value>,
}

impl<'a> Call<'a> {
    pub(crate) fn new(operation: &'a str, service: Service, method: Method, path: impl Into<String>) -> Self {
        Call { operation, service, method, path: path.into(), query: Vec::new(), body: None }
    }

    pub(crate) fn query(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.query.push((key, value.into()));
        self
    }

    pub(crate) fn body(mut self, body: serde_json::Value) -> Self {
        self.body = Some(body);
        self
    }
}

impl Session<'_> {
    /// Sends `call` with the identity's token. A 401 means the token was
    /// revoked or expired early: the token is dropped, a new one fetched and
    /// the call sent once more; a second 401 is an authentication failure.
    pub(crate) async fn send(&self, call: &Call<'_>) -> Result<Reply, CloudError> {
        let token = self.auth.token(self.http, self.identity).await.map_err(|e| not_sent(call, e))?;
        let reply = self.send_with(&token, call).await?;
        if reply.status != StatusCode::UNAUTHORIZED {
            return Ok(reply);
        }
        debug!(operation = call.operation, "token refused; authenticating again");
        self.auth.invalidate(self.identity, &token).await;
        let token = self.auth.token(self.http, self.identity).await.map_err(|e| not_sent(call, e))?;
        self.send_with(&token, call).await
    }

    /// Sends one request, if the term's gate admits it now, with the
    /// deadline the gate gives (never past the fence). Not admitted, it is
    /// not sent: its effect is none, as a refused connection's.
    async fn send_with(&self, token: &Token, call: &Call<'_>) -> Result<Reply, CloudError> {
        let Some(deadline) = self.gate.admit(self.http.timeout) else {
            debug!(operation = call.operation, "request not admitted by the term's gate");
            return Err(CloudError::Unreachable { message: format!("{}: {NOT_ADMITTED}", call.operation) });
        };
        let base = call.service.base(token).trim_end_matches('/');
        // A provider that asked to be left alone for a while is left alone:
        // whichever pass comes first (another wake, another Server of the
        // project) gets the rate limit back without a request.
        let key = (base.to_owned(), token.project_id.clone());
        let quiet = self.http.quiet.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key).copied();
        if let Some(until) = quiet.filter(|until| tokio::time::Instant::now() < *until) {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            return Err(CloudError::RateLimited {
                message: format!("{}: not sent: the provider asked to be left alone (Retry-After)", call.operation),
                retry_after: Some(left),
            });
        }
        let url = format!("{base}{}", call.path);
        let mut request = self
            .http
            .request(call.method.clone(), &url)
            .timeout(deadline)
            .header("X-Auth-Token", token.header())
            .header(reqwest::header::ACCEPT, "application/json");
        if call.service == Service::Compute {
            request = request
                .header("X-OpenStack-Nova-API-Version", crate::compute::NOVA_MICROVERSION)
                .header("OpenStack-API-Version", format!("compute {}", crate::compute::NOVA_MICROVERSION));
        }
        if !call.query.is_empty() {
            request = request.query(&call.query);
        }
        if let Some(body) = &call.body {
            request = request.json(body);
        }
        let reply = self.http.send(call.operation, request).await?;
        if matches!(reply.status.as_u16(), 413 | 429)
            && let Some(wait) = reply.error(call.operation).retry_after()
        {
            let until = tokio::time::Instant::now() + wait.min(MAX_QUIET);
            let mut quiet = self.http.quiet.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            quiet.retain(|_, at| tokio::time::Instant::now() < *at);
            quiet.insert(key, until);
        }
        Ok(reply)
    }
}
