//! Authenticated calls to a service endpoint from the token's catalog, with
//! the one token refresh on 401 that Keystone's token revocation calls for,
//! over the shared transport (`http`).

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{Method, StatusCode};
use server_core::port::{CloudError, IdentityContext, RequestGate};
use tracing::debug;

use crate::auth::{Auth, Token};
pub(crate) use crate::http::Http;
use crate::http::Reply;

/// Nova's microversion every compute call asks for.
pub(crate) const NOVA_MICROVERSION: &str = "2.90";

/// The same, as the `OpenStack-API-Version` header says it.
const COMPUTE_API_VERSION: &str = "compute 2.90";

/// Ironic's microversion the node list asks for: `fields` is from 1.8.
pub(crate) const IRONIC_MICROVERSION: &str = "1.8";

const X_AUTH_TOKEN: HeaderName = HeaderName::from_static("x-auth-token");
const NOVA_API_VERSION: HeaderName = HeaderName::from_static("x-openstack-nova-api-version");
const OPENSTACK_API_VERSION: HeaderName = HeaderName::from_static("openstack-api-version");
const IRONIC_API_VERSION: HeaderName = HeaderName::from_static("x-openstack-ironic-api-version");

/// The two services the port needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Service {
    Compute,
    Network,
    Baremetal,
}

impl Service {
    /// The service's endpoint in the token's catalog (Ironic's is optional).
    fn base(self, token: &Token) -> Option<&str> {
        match self {
            Service::Compute => Some(&token.endpoints.compute),
            Service::Network => Some(&token.endpoints.network),
            Service::Baremetal => token.endpoints.baremetal.as_deref(),
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
    /// The JSON body, encoded once: a re-sent call (after a 401) shares it.
    pub(crate) body: Option<Bytes>,
}

impl<'a> Call<'a> {
    pub(crate) fn new(operation: &'a str, service: Service, method: Method, path: impl Into<String>) -> Self {
        Call { operation, service, method, path: path.into(), query: Vec::new(), body: None }
    }

    pub(crate) fn query(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.query.push((key, value.into()));
        self
    }

    /// Sets the JSON body. Encoding cannot fail for the bodies the port
    /// builds (string keys only); were it to, the call is not sent.
    pub(crate) fn body(mut self, body: &impl serde::Serialize) -> Result<Self, CloudError> {
        let encoded = serde_json::to_vec(body).map_err(|e| CloudError::Unreachable {
            message: format!("{}: not sent: its body could not be encoded as JSON: {e}", self.operation),
        })?;
        self.body = Some(Bytes::from(encoded));
        Ok(self)
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
        let Some(deadline) = self.gate.admit(self.http.timeout()) else {
            debug!(operation = call.operation, "request not admitted by the term's gate");
            return Err(CloudError::Unreachable { message: format!("{}: {NOT_ADMITTED}", call.operation) });
        };
        let Some(base) = call.service.base(token).map(|base| base.trim_end_matches('/')) else {
            return Err(CloudError::Unreachable {
                message: format!("{}: not sent: the service catalog has no endpoint for it", call.operation),
            });
        };
        // A provider that asked to be left alone for a while is left alone:
        // whichever pass comes first (another wake, another Server of the
        // project) gets the rate limit back without a request.
        let key = (base.to_owned(), token.project_id.clone());
        if let Some(until) = self.http.quiet_until(&key) {
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
            .header(X_AUTH_TOKEN, token.header())
            .header(http::header::ACCEPT, HeaderValue::from_static("application/json"));
        if call.service == Service::Compute {
            request = request
                .header(NOVA_API_VERSION, HeaderValue::from_static(NOVA_MICROVERSION))
                .header(OPENSTACK_API_VERSION, HeaderValue::from_static(COMPUTE_API_VERSION));
        }
        if call.service == Service::Baremetal {
            request = request.header(IRONIC_API_VERSION, HeaderValue::from_static(IRONIC_MICROVERSION));
        }
        if !call.query.is_empty() {
            request = request.query(&call.query);
        }
        if let Some(body) = &call.body {
            request = request.body(body.clone());
        }
        let reply = self.http.send(call.operation, request).await?;
        if matches!(reply.status.as_u16(), 413 | 429)
            && let Some(wait) = reply.error(call.operation).retry_after()
        {
            self.http.keep_quiet(key, wait);
        }
        Ok(reply)
    }
}
