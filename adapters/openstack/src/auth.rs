//! Keystone v3: a project-scoped token per identity, with the compute and
//! network endpoints of the configured region from its catalog.
//!
//! Tokens are cached per (project, principal, secret) and renewed a margin
//! before Keystone's expiry, measured on the local monotonic clock from the
//! token's own lifetime (`expires_at - issued_at`), so clock skew between the
//! controller and Keystone does not matter. One Keystone request per identity
//! at a time: concurrent callers wait for it rather than each logging in.
//!
//! A login Keystone refuses is remembered per credential and not tried again
//! before a backoff (doubling from `loginBackoff`, capped at
//! `loginBackoffMax`): with a rotated password, N Servers must not make N
//! failed logins per pass, which could trip Keystone's
//! `lockout_failure_attempts` and lock the account. A new credential (the
//! secret is part of the key) is tried at once.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use http::Method;
use http::header::HeaderValue;
use jiff::Timestamp;
use serde::Deserialize;
use serde_json::json;
use server_core::port::{CloudError, Credentials, IdentityContext};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::config::{Interface, OpenStackConfig};
use crate::http::Http;
use crate::mapping::parse_time;

/// What Keystone needs to find endpoints and when to renew.
pub(crate) struct Auth {
    token_url: String,
    region: String,
    interface: Interface,
    refresh_margin: Duration,
    backoff: Duration,
    backoff_max: Duration,
    on_failure_streak: Option<FailureStreakHook>,
    slots: Mutex<HashMap<TokenKey, Slot>>,
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Auth")
            .field("token_url", &self.token_url)
            .field("region", &self.region)
            .field("backoff", &self.backoff)
            .field("backoff_max", &self.backoff_max)
            .finish_non_exhaustive()
    }
}

/// Called once when a credential's logins start failing (a streak), for the
/// operator's metric.
pub type FailureStreakHook = Arc<dyn Fn() + Send + Sync>;

type Slot = Arc<tokio::sync::Mutex<SlotState>>;

/// One credential's token, or its failed logins.
#[derive(Debug, Default)]
struct SlotState {
    token: Option<Arc<Token>>,
    failed: Option<FailedLogin>,
}

/// A streak of logins that failed (refused, or Keystone failing or out of
/// reach), and when to try again.
#[derive(Debug)]
struct FailedLogin {
    streak: u32,
    retry_at: Instant,
    /// What the last attempt failed with, answered again until `retry_at`.
    error: CloudError,
}

impl SlotState {
    /// Worth keeping: a token still fresh, or failures still remembered.
    fn worth_keeping(&self, forget_after: Duration) -> bool {
        self.token.as_ref().is_some_and(|t| t.fresh())
            || self.failed.as_ref().is_some_and(|f| Instant::now() < f.retry_at + forget_after)
    }
}

/// Who a token was issued to. The secret is part of the key so a rotated
/// credential never reuses a token obtained with the old one.
#[derive(Clone, PartialEq, Eq, Hash)]
struct TokenKey {
    project_id: String,
    principal: String,
    secret: String,
}

impl fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenKey").field("project_id", &self.project_id).finish_non_exhaustive()
    }
}

/// A scoped token and the endpoints it unlocks.
pub(crate) struct Token {
    value: HeaderValue,
    pub(crate) project_id: String,
    pub(crate) endpoints: Endpoints,
    pub(crate) expires_at: Option<Timestamp>,
    refresh_at: Instant,
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Token")
            .field("value", &"<redacted>")
            .field("project_id", &self.project_id)
            .field("endpoints", &self.endpoints)
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

impl Token {
    /// The `X-Auth-Token` value, marked sensitive so no Debug prints it.
    pub(crate) fn header(&self) -> HeaderValue {
        self.value.clone()
    }

    fn fresh(&self) -> bool {
        Instant::now() < self.refresh_at
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Endpoints {
    /// Nova, as the catalog gives it (usually ending in `/v2.1`).
    pub(crate) compute: String,
    /// Neutron, ending in `/v2.0`.
    pub(crate) network: String,
    /// Ironic, ending in `/v1`, when the catalog has it (optional: only the
    /// phases of baremetal servers read it).
    pub(crate) baremetal: Option<String>,
}

impl Auth {
    pub(crate) fn new(config: &OpenStackConfig, on_failure_streak: Option<FailureStreakHook>) -> Self {
        Auth {
            token_url: config.token_url(),
            region: config.region.trim().to_owned(),
            interface: config.interface,
            refresh_margin: config.token_refresh_margin,
            backoff: config.login_backoff,
            backoff_max: config.login_backoff_max.max(config.login_backoff),
            on_failure_streak,
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// A fresh token for the identity, from the cache or from Keystone;
    /// while the credential's last login was refused and its backoff runs,
    /// that refusal again without asking Keystone.
    pub(crate) async fn token(&self, http: &Http, identity: &IdentityContext) -> Result<Arc<Token>, CloudError> {
        let slot = self.slot(key(identity)?);
        let mut state = slot.lock().await;
        if let Some(token) = state.token.as_ref().filter(|t| t.fresh()) {
            return Ok(token.clone());
        }
        if let Some(failed) = state.failed.as_ref().filter(|f| Instant::now() < f.retry_at) {
            let wait = failed.retry_at.saturating_duration_since(Instant::now());
            let note = format!(
                "; Keystone is not asked again with this credential for {}s (after {} failed logins)",
                wait.as_secs().max(1),
                failed.streak
            );
            return Err(with_note(&failed.error, &note));
        }
        match self.issue(http, identity).await {
            Ok(token) => {
                if let Some(failed) = state.failed.take() {
                    info!(
                        identity = %identity.identity_id,
                        refused_logins = failed.streak,
                        "Keystone accepted the credential again"
                    );
                }
                let token = Arc::new(token);
                state.token = Some(token.clone());
                Ok(token)
            }
            // A refused login, and a Keystone that fails (5xx) or cannot be
            // reached, back off alike per credential: N Servers must not make
            // N logins per pass against a Keystone that is down any more than
            // against one that refuses them.
            Err(error) => {
                let refused = matches!(error, CloudError::Auth { .. });
                let streak = state.failed.as_ref().map_or(0, |f| f.streak).saturating_add(1);
                let backoff = self.backoff_for(streak);
                if streak == 1 {
                    // One line per streak, not per Server or per attempt; no
                    // Keystone text (it may echo what was sent).
                    let what = match refused {
                        true => "Keystone refused the identity's login",
                        false => "Keystone failed or could not be reached for the identity's login",
                    };
                    warn!(
                        identity = %identity.identity_id,
                        project = %identity.project_id,
                        backoff_s = backoff.as_secs(),
                        "{what}; it is retried with backoff, not on every pass"
                    );
                    if refused && let Some(hook) = &self.on_failure_streak {
                        hook();
                    }
                }
                state.failed = Some(FailedLogin { streak, retry_at: Instant::now() + backoff, error: error.clone() });
                Err(error)
            }
        }
    }

    /// `backoff`, doubled for each further refusal, at most `backoff_max`.
    fn backoff_for(&self, streak: u32) -> Duration {
        let doublings = streak.saturating_sub(1).min(16);
        self.backoff.saturating_mul(1 << doublings).min(self.backoff_max)
    }

    /// Drops `stale` if it is still the cached token (another caller may have
    /// replaced it already).
    pub(crate) async fn invalidate(&self, identity: &IdentityContext, stale: &Token) {
        let Ok(key) = key(identity) else { return };
        let slot = self.slot(key);
        let mut state = slot.lock().await;
        if state.token.as_ref().is_some_and(|t| t.value == stale.value) {
            state.token = None;
        }
    }

    fn slot(&self, key: TokenKey) -> Slot {
        let mut slots = self.slots();
        if let Some(slot) = slots.get(&key) {
            return slot.clone();
        }
        // Identities come and go: forget the ones whose tokens lapsed and
        // whose refused logins are long past.
        let forget_after = self.backoff_max;
        slots.retain(|_, slot| match slot.try_lock() {
            Ok(state) => state.worth_keeping(forget_after),
            // In use right now: keep it.
            Err(_) => true,
        });
        slots.entry(key).or_default().clone()
    }

    fn slots(&self) -> MutexGuard<'_, HashMap<TokenKey, Slot>> {
        // The map holds no invariant a panic could break.
        self.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    async fn issue(&self, http: &Http, identity: &IdentityContext) -> Result<Token, CloudError> {
        const OPERATION: &str = "authenticating with Keystone";
        let started = Instant::now();
        let request = http.request(Method::POST, &self.token_url).json(&request_body(identity)?);
        let reply = http.send(OPERATION, request).await?;
        if !reply.is_success() {
            // 401 here is a credential Keystone does not accept: no refresh
            // helps. 400, 403 and 404 are refusals of the login too (never a
            // refused create): each says what a person must fix, and all of
            // them back off per credential as a 401 does.
            return Err(keystone_refusal(reply.status.as_u16(), reply.error(OPERATION)));
        }
        let request_id = reply.request_id();
        let value =
            reply.headers.get("x-subject-token").cloned().ok_or_else(|| {
                crate::error::malformed(OPERATION, request_id.as_deref(), "no X-Subject-Token header")
            })?;
        let body: TokenBody = reply.json(OPERATION)?;
        let token = self.token_from(value, body.token, started).map_err(|message| {
            let request = request_id.as_deref().map(|id| format!(" (request id {id})")).unwrap_or_default();
            CloudError::Auth { message: format!("{message}{request}") }
        })?;
        if !identity.project_id.is_empty() && token.project_id != identity.project_id {
            return Err(CloudError::Auth {
                message: format!(
                    "Keystone scoped the token to project {} but identity {} is for project {}",
                    token.project_id, identity.identity_id, identity.project_id
                ),
            });
        }
        info!(
            identity = %identity.identity_id,
            project = %token.project_id,
            expires_at = ?token.expires_at,
            "obtained Keystone token"
        );
        Ok(token)
    }

    pub(crate) fn token_from(
        &self,
        mut value: HeaderValue,
        body: TokenData,
        started: Instant,
    ) -> Result<Token, String> {
        value.set_sensitive(true);
        let project_id = body.project.map(|p| p.id).ok_or("Keystone returned a token without a project scope")?;
        let compute = self.endpoint(&body.catalog, "compute")?;
        let network = self.endpoint(&body.catalog, "network")?;
        let network = if network.trim_end_matches('/').ends_with("/v2.0") {
            network
        } else {
            format!("{}/v2.0", network.trim_end_matches('/'))
        };
        let baremetal = self.endpoint(&body.catalog, "baremetal").ok().map(|url| {
            let url = url.trim_end_matches('/');
            if url.ends_with("/v1") { url.to_owned() } else { format!("{url}/v1") }
        });
        let expires_at = body.expires_at.as_deref().and_then(parse_time);
        let issued_at = body.issued_at.as_deref().and_then(parse_time);
        let lifetime = match (issued_at, expires_at) {
            (Some(issued), Some(expires)) => duration_between(issued, expires),
            (None, Some(expires)) => duration_between(Timestamp::now(), expires),
            // No expiry at all: renew hourly anyway.
            _ => Duration::from_secs(3600),
        };
        // The margin never eats more than half a (short-lived) token's life.
        let margin = self.refresh_margin.min(lifetime / 2);
        debug!(lifetime_s = lifetime.as_secs(), margin_s = margin.as_secs(), "token lifetime");
        Ok(Token {
            value,
            project_id,
            endpoints: Endpoints { compute, network, baremetal },
            expires_at,
            refresh_at: started + (lifetime - margin),
        })
    }

    /// The URL of `service_type` for the configured region and interface.
    fn endpoint(&self, catalog: &[CatalogEntry], service_type: &str) -> Result<String, String> {
        let interface = self.interface.as_str();
        catalog
            .iter()
            .filter(|entry| entry.kind == service_type)
            .flat_map(|entry| &entry.endpoints)
            .find(|e| {
                e.interface == interface
                    && (e.region_id.as_deref() == Some(self.region.as_str())
                        || e.region.as_deref() == Some(self.region.as_str()))
            })
            .map(|e| e.url.clone())
            .ok_or_else(|| {
                format!("the service catalog has no {interface} {service_type} endpoint in region {}", self.region)
            })
    }
}

/// `error` with `note` appended to its message (its class unchanged).
fn with_note(error: &CloudError, note: &str) -> CloudError {
    let mut error = error.clone();
    match &mut error {
        CloudError::Auth { message }
        | CloudError::Unavailable { message, .. }
        | CloudError::Timeout { message }
        | CloudError::Unreachable { message }
        | CloudError::Refused { message, .. }
        | CloudError::Conflict { message }
        | CloudError::RateLimited { message, .. }
        | CloudError::NotPermitted { message }
        | CloudError::NotReady { message } => message.push_str(note),
        CloudError::BeforeCreate { .. } => {}
    }
    error
}

/// A token request Keystone answered with an error: 4xx is a refused login
/// ([`CloudError::Auth`], with what to fix), anything else stays what it is
/// (a 5xx passes).
fn keystone_refusal(status: u16, error: CloudError) -> CloudError {
    let fix = match status {
        400 => {
            "Keystone refused the token request as malformed (HTTP 400): check the OpenstackIdentity's credentials \
                (user or application credential ID, project ID) and the region's authURL"
        }
        401 => {
            "Keystone refused the credentials (HTTP 401): update the OpenstackIdentity's password or application \
                credential"
        }
        403 => {
            "Keystone forbade the login (HTTP 403): the user may be disabled or locked out, or hold no role on the \
                project; a Keystone administrator must fix the user"
        }
        404 => {
            "Keystone does not know the user, application credential or project (HTTP 404): correct the \
                OpenstackIdentity, or recreate what it names"
        }
        _ => return error,
    };
    match error {
        CloudError::Auth { message } | CloudError::Refused { message, .. } => {
            CloudError::Auth { message: format!("{fix}; {message}") }
        }
        other => other,
    }
}

fn duration_between(from: Timestamp, to: Timestamp) -> Duration {
    Duration::try_from(to.duration_since(from)).unwrap_or(Duration::ZERO)
}

fn key(identity: &IdentityContext) -> Result<TokenKey, CloudError> {
    let (principal, secret) = match &identity.credentials {
        Credentials::Password { user_id, password } => (format!("user:{user_id}"), password.clone()),
        Credentials::ApplicationCredential { id, secret } => (format!("application-credential:{id}"), secret.clone()),
        Credentials::None => {
            return Err(CloudError::Auth {
                message: format!("identity {} has no OpenStack credentials", identity.identity_id),
            });
        }
    };
    Ok(TokenKey { project_id: identity.project_id.clone(), principal, secret })
}

/// The Keystone v3 token request. A password is scoped to the identity's
/// project by ID (user and project IDs need no domain); an application
/// credential carries its project itself and must not name a scope.
pub(crate) fn request_body(identity: &IdentityContext) -> Result<serde_json::Value, CloudError> {
    match &identity.credentials {
        Credentials::Password { user_id, password } => {
            if identity.project_id.is_empty() {
                return Err(CloudError::Auth {
                    message: format!("identity {} has a password but no project to scope it to", identity.identity_id),
                });
            }
            Ok(json!({"auth": {
                "identity": {
                    "methods": ["password"],
                    "password": {"user": {"id": user_id, "password": password}},
                },
                "scope": {"project": {"id": identity.project_id}},
            }}))
        }
        Credentials::ApplicationCredential { id, secret } => Ok(json!({"auth": {
            "identity": {
                "methods": ["application_credential"],
                "application_credential": {"id": id, "secret": secret},
            },
        }})),
        Credentials::None => {
            Err(CloudError::Auth { message: format!("identity {} has no OpenStack credentials", identity.identity_id) })
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct TokenBody {
    pub(crate) token: TokenData,
}

#[derive(Deserialize)]
pub(crate) struct TokenData {
    #[serde(default)]
    expires_at: Option<String>,
    #[serde(default)]
    issued_at: Option<String>,
    #[serde(default)]
    pub(crate) project: Option<ProjectRef>,
    #[serde(default)]
    catalog: Vec<CatalogEntry>,
}

#[derive(Deserialize)]
pub(crate) struct ProjectRef {
    id: String,
}

#[derive(Deserialize)]
struct CatalogEntry {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    endpoints: Vec<CatalogEndpoint>,
}

#[derive(Deserialize)]
struct CatalogEndpoint {
    interface: String,
    #[serde(default)]
    region: Option<String>,
    #[serde(default)]
    region_id: Option<String>,
    url: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(credentials: Credentials) -> IdentityContext {
        IdentityContext {
            region_id: "r".into(),
            identity_id: "id1".into(),
            project_id: "proj".into(),
            credentials,
            ssh_key_name: None,
        }
    }

    #[test]
    fn password_is_scoped_to_the_project_and_application_credentials_are_not() -> Result<(), CloudError> {
        let body = request_body(&identity(Credentials::Password { user_id: "u".into(), password: "p".into() }))?;
        assert_eq!(body["auth"]["scope"]["project"]["id"], "proj");
        assert_eq!(body["auth"]["identity"]["password"]["user"]["id"], "u");
        let body = request_body(&identity(Credentials::ApplicationCredential { id: "ac".into(), secret: "s".into() }))?;
        assert_eq!(body["auth"]["identity"]["methods"][0], "application_credential");
        assert!(body["auth"].get("scope").is_none());
        assert!(matches!(request_body(&identity(Credentials::None)), Err(CloudError::Auth { .. })));
        Ok(())
    }

    /// Keystone's 4xx answers to a token request are refused logins, each
    /// saying what to fix; a 5xx passes.
    #[test]
    fn keystone_refusals_are_refused_logins_that_say_what_to_fix() {
        for (status, says) in
            [(400, "malformed"), (401, "refused the credentials"), (403, "disabled"), (404, "does not know")]
        {
            let error = keystone_refusal(status, CloudError::from_http(status, "authenticating with Keystone: no"));
            assert!(matches!(&error, CloudError::Auth { message } if message.contains(says)), "{status}: {error:?}");
        }
        let unavailable = keystone_refusal(503, CloudError::from_http(503, "authenticating with Keystone: down"));
        assert!(matches!(unavailable, CloudError::Unavailable { status: 503, .. }));
    }

    #[test]
    fn keys_never_print_secrets() -> Result<(), CloudError> {
        let key = key(&identity(Credentials::Password { user_id: "u".into(), password: "hunter2".into() }))?;
        assert!(!format!("{key:?}").contains("hunter2"));
        Ok(())
    }

    #[tokio::test]
    async fn catalog_endpoints_for_region_and_interface() -> Result<(), String> {
        let mut config = OpenStackConfig::new("http://ks/v3", "r2");
        config.token_refresh_margin = Duration::from_secs(600);
        let auth = Auth::new(&config, None);
        let body: TokenBody = serde_json::from_value(json!({"token": {
            "issued_at": "2025-01-01T00:00:00.000000Z",
            "expires_at": "2025-01-01T00:10:00.000000Z",
            "project": {"id": "proj"},
            "catalog": [
                {"type": "compute", "endpoints": [
                    {"interface": "public", "region_id": "r1", "url": "http://nova-r1/v2.1"},
                    {"interface": "internal", "region_id": "r2", "url": "http://nova-internal/v2.1"},
                    {"interface": "public", "region": "r2", "url": "http://nova-r2/v2.1"},
                ]},
                {"type": "network", "endpoints": [{"interface": "public", "region_id": "r2", "url": "http://neutron:9696/"}]},
            ],
        }}))
        .map_err(|e| e.to_string())?;
        let started = Instant::now();
        let token = auth.token_from(HeaderValue::from_static("tok"), body.token, started)?;
        assert_eq!(token.endpoints.compute, "http://nova-r2/v2.1");
        assert_eq!(token.endpoints.network, "http://neutron:9696/v2.0");
        assert!(token.header().is_sensitive());
        assert!(!format!("{token:?}").contains("tok\""));
        // A 10-minute token with a 10-minute margin renews at half-life.
        assert_eq!(token.refresh_at, started + Duration::from_secs(300));

        let no_network: TokenBody = serde_json::from_value(json!({"token": {
            "project": {"id": "proj"},
            "catalog": [{"type": "compute", "endpoints": [{"interface": "public", "region_id": "r2", "url": "http://n"}]}],
        }}))
        .map_err(|e| e.to_string())?;
        let error = auth.token_from(HeaderValue::from_static("t"), no_network.token, started).err();
        assert_eq!(error.as_deref(), Some("the service catalog has no public network endpoint in region r2"));
        Ok(())
    }
}
