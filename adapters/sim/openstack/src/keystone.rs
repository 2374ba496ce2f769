//! Keystone v3 `POST /v3/auth/tokens`: password (the user by ID, or by
//! name with its domain) and application credentials, scoped to a project
//! by ID or by name with its domain, or to the domain, answered 201 with the token in
//! `X-Subject-Token` and a body carrying expiry, project, roles and catalog;
//! `GET /v3/auth/tokens` shows a token again.

use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use super::state::{IssuedToken, State, keystone_time};
use super::{OpenStackSimConfig, Service, reply};

/// A region whose endpoints lead nowhere: a client that ignores the region
/// filter fails loudly.
const DECOY_REGION: &str = "DecoyRegion";
const DECOY_URL: &str = "http://decoy.invalid";
/// The one domain.
const DOMAIN_ID: &str = "default";
const DOMAIN_NAME: &str = "Default";

enum Principal {
    Password { user_id: String },
    ApplicationCredential { id: String },
}

/// Whether a `{"id"}` or `{"name"}` domain reference names the one domain.
fn is_default_domain(domain: &Value) -> bool {
    domain["id"].as_str() == Some(DOMAIN_ID) || domain["name"].as_str() == Some(DOMAIN_NAME)
}

/// What a token is scoped to.
enum Scope {
    Unscoped,
    Project(String),
    /// The one domain (`default`).
    Domain,
}

/// The domain a scope names: `{"id"}` or `{"name"}`; only the one domain
/// exists, any other is 401 (keystone/auth/core.py `AuthInfo._lookup_domain`).
fn scoped_domain(domain: &Value) -> Result<(), Response> {
    if domain["id"].is_null() && domain["name"].is_null() {
        return Err(bad_request("Expecting to find id or name in domain."));
    }
    if is_default_domain(domain) { Ok(()) } else { Err(unauthorized()) }
}

/// The project a scope names: `{"id"}`, or `{"name", "domain"}`
/// (keystone/auth/core.py `AuthInfo._lookup_project`: a name needs its
/// domain, 400 without one; an unknown project is 401).
fn scoped_project(state: &State, project: &Value) -> Result<Option<String>, Response> {
    if project.is_null() {
        return Ok(None);
    }
    if let Some(id) = project["id"].as_str() {
        if !state.projects.is_empty() && !state.projects.contains_key(id) {
            return Err(unauthorized());
        }
        return Ok(Some(id.to_owned()));
    }
    let Some(name) = project["name"].as_str() else {
        return Err(bad_request("Expecting to find id or name in project."));
    };
    if project["domain"].is_null() {
        return Err(bad_request("Expecting to find domain in project."));
    }
    if !is_default_domain(&project["domain"]) {
        return Err(unauthorized());
    }
    if state.projects.is_empty() {
        return Ok(Some(name.to_owned()));
    }
    match state.projects.iter().find(|(_, n)| n.as_str() == name) {
        Some((id, _)) => Ok(Some(id.clone())),
        None => Err(unauthorized()),
    }
}

pub(super) fn issue(
    state: &mut State,
    config: &OpenStackSimConfig,
    base_url: &str,
    now: Timestamp,
    body: &[u8],
) -> Response {
    state.counters.token_requests += 1;
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return bad_request("The request body is not valid JSON.");
    };
    let auth = &request["auth"];
    let methods: Vec<&str> =
        auth["identity"]["methods"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    // keystone/auth/core.py `AuthInfo._validate_and_normalize_scope_data`:
    // a project or a domain, not both (400).
    let scope = auth["scope"].as_object();
    let scoped = match (scope.and_then(|s| s.get("project")), scope.and_then(|s| s.get("domain"))) {
        (Some(_), Some(_)) => Err(bad_request("Specifying project and domain scope is not allowed.")),
        (Some(project), None) => scoped_project(state, project).map(|p| p.map_or(Scope::Unscoped, Scope::Project)),
        (None, Some(domain)) => scoped_domain(domain).map(|()| Scope::Domain),
        (None, None) => Ok(Scope::Unscoped),
    };
    let scope = match scoped {
        Ok(scope) => scope,
        Err(refusal) => {
            state.counters.token_rejections += u64::from(refusal.status() == StatusCode::UNAUTHORIZED);
            return refusal;
        }
    };
    let (principal, scope) = if methods == ["password"] {
        let user = &auth["identity"]["password"]["user"];
        let Some(password) = user["password"].as_str() else {
            return bad_request("Expecting to find password in user.");
        };
        // keystone/auth/plugins/core.py `UserAuthInfo._validate_and_normalize_auth_data`:
        // a user by name needs its domain (400 without one). Users' names
        // are their IDs here.
        let user_id = match (user["id"].as_str(), user["name"].as_str()) {
            (Some(id), _) => id,
            (None, Some(name)) if !user["domain"].is_null() => {
                if !is_default_domain(&user["domain"]) {
                    return rejected(state);
                }
                name
            }
            (None, Some(_)) => return bad_request("Expecting to find domain in user."),
            (None, None) => return bad_request("Expecting to find id or name in user."),
        };
        let accepted = match state.users.get(user_id) {
            Some(expected) => expected == password,
            None => state.users.is_empty() && !password.is_empty(),
        };
        if !accepted {
            return rejected(state);
        }
        // A scope on a project or domain the user holds no role on is
        // refused 401 (keystone/models/token_model.py `_validate_token_resources`
        // and `roles`: "User X has no access to project Y" / "to domain Y").
        let refused = match &scope {
            Scope::Project(project) => {
                !state.projects.is_empty() && !state.grants.contains(&(user_id.to_owned(), project.clone()))
            }
            Scope::Domain => !state.domain_grants.contains(&(user_id.to_owned(), DOMAIN_ID.to_owned())),
            Scope::Unscoped => false,
        };
        if refused {
            return rejected(state);
        }
        (Principal::Password { user_id: user_id.to_owned() }, scope)
    } else if methods == ["application_credential"] {
        let credential = &auth["identity"]["application_credential"];
        let (Some(id), Some(secret)) = (credential["id"].as_str(), credential["secret"].as_str()) else {
            return bad_request("Expecting to find id and secret in application_credential.");
        };
        let project = match state.application_credentials.get(id) {
            Some((expected, project)) if expected == secret => project.clone(),
            _ => return rejected(state),
        };
        // Keystone refuses a scope on an application credential token.
        if !auth["scope"].is_null() {
            return rejected(state);
        }
        (Principal::ApplicationCredential { id: id.to_owned() }, Scope::Project(project))
    } else {
        return bad_request("Expecting exactly one of password or application_credential methods.");
    };

    let ttl = SignedDuration::try_from(config.token_ttl).unwrap_or(SignedDuration::from_hours(1));
    let expires_at = now.checked_add(ttl).unwrap_or(Timestamp::MAX);
    let serial = state.next_serial();
    let token = format!("gAAAAAsim{serial:016x}");

    let domain = json!({"id": DOMAIN_ID, "name": DOMAIN_NAME});
    let (method, user_id) = match &principal {
        Principal::Password { user_id } => ("password", user_id.clone()),
        Principal::ApplicationCredential { .. } => ("application_credential", "application-credential-user".into()),
    };
    let mut body = json!({
        "methods": [method],
        "user": {"id": user_id, "name": user_id, "domain": domain, "password_expires_at": null},
        "audit_ids": [format!("sim-audit-{serial}")],
        "issued_at": keystone_time(now),
        "expires_at": keystone_time(expires_at),
    });
    if let Principal::ApplicationCredential { id } = &principal {
        body["application_credential"] = json!({"id": id, "name": id, "restricted": true});
    }
    // An unscoped token carries neither project nor catalog; a domain-scoped
    // one its domain, roles and catalog (keystone/common/render_token.py
    // `render_token_response_from_model`).
    match &scope {
        Scope::Project(project_id) => {
            let name = state.projects.get(project_id).map_or(project_id.as_str(), String::as_str);
            body["project"] = json!({"id": project_id, "name": name, "domain": domain});
            body["is_domain"] = json!(false);
            body["roles"] =
                json!([{"id": "sim-role-member", "name": "member"}, {"id": "sim-role-reader", "name": "reader"}]);
            body["catalog"] = catalog(config, base_url);
        }
        Scope::Domain => {
            body["domain"] = domain.clone();
            body["roles"] = json!([{"id": "sim-role-admin", "name": "admin"}]);
            body["catalog"] = catalog(config, base_url);
        }
        Scope::Unscoped => {}
    }
    let project_id = match scope {
        Scope::Project(project_id) => Some(project_id),
        Scope::Domain | Scope::Unscoped => None,
    };
    let body = json!({ "token": body });
    state.tokens.insert(token.clone(), IssuedToken { project_id: project_id.clone(), expires_at, body: body.clone() });
    state.counters.tokens_issued += 1;
    let mut response = reply::json(StatusCode::CREATED, body);
    if let Ok(value) = HeaderValue::from_str(&token) {
        response.headers_mut().insert("x-subject-token", value);
    }
    response
}

/// `GET /v3/auth/tokens` (`HEAD`: the status alone): the subject token's
/// body as it was issued, 404 for a token unknown or expired
/// (keystone/api/auth.py `AuthTokenResource.get`, `TokenNotFound`).
pub(super) fn show(state: &State, subject: Option<&str>, now: Timestamp, head: bool) -> Response {
    let issued = subject.and_then(|s| state.tokens.get(s).map(|t| (s, t))).filter(|(_, t)| t.expires_at > now);
    let Some((subject, issued)) = issued else {
        return reply::error(Service::Identity, 404, "Could not find token.");
    };
    let mut response =
        if head { reply::empty(StatusCode::OK) } else { reply::json(StatusCode::OK, issued.body.clone()) };
    if let Ok(value) = HeaderValue::from_str(subject) {
        response.headers_mut().insert("x-subject-token", value);
    }
    response
}

/// `DELETE /v3/auth/tokens`: revokes the subject token, 204; 404 for one
/// unknown or expired (keystone/api/auth.py `AuthTokenResource.delete`).
/// Service calls with it are refused 401 from then on.
pub(super) fn revoke(state: &mut State, subject: Option<&str>, now: Timestamp) -> Response {
    let live = subject.filter(|s| state.tokens.get(*s).is_some_and(|t| t.expires_at > now));
    match live {
        Some(subject) => {
            let subject = subject.to_owned();
            state.tokens.remove(&subject);
            reply::empty(StatusCode::NO_CONTENT)
        }
        None => reply::error(Service::Identity, 404, "Could not find token."),
    }
}

/// Whether a token is known, not revoked and not expired, whatever its scope.
pub(super) fn valid(state: &State, token: Option<&str>, now: Timestamp) -> bool {
    token.and_then(|token| state.tokens.get(token)).is_some_and(|issued| issued.expires_at > now)
}

/// The project of a valid project-scoped token.
pub(super) fn validate(state: &State, token: Option<&str>, now: Timestamp) -> Option<String> {
    let issued = state.tokens.get(token?)?;
    (issued.expires_at > now).then(|| issued.project_id.clone()).flatten()
}

fn catalog(config: &OpenStackSimConfig, base_url: &str) -> Value {
    let region = config.region.as_str();
    let service = |kind: &str, name: &str, path: &str| {
        let mut endpoints: Vec<Value> = ["public", "internal", "admin"]
            .iter()
            .map(|interface| {
                json!({
                    "id": format!("sim-{name}-{interface}"),
                    "interface": interface,
                    "region": region,
                    "region_id": region,
                    "url": format!("{base_url}{path}"),
                })
            })
            .collect();
        if !config.decoy_region {
            return json!({"id": format!("sim-{name}"), "type": kind, "name": name, "endpoints": endpoints});
        }
        endpoints.insert(
            0,
            json!({
                "id": format!("sim-{name}-decoy"),
                "interface": "public",
                "region": DECOY_REGION,
                "region_id": DECOY_REGION,
                "url": format!("{DECOY_URL}{path}"),
            }),
        );
        json!({"id": format!("sim-{name}"), "type": kind, "name": name, "endpoints": endpoints})
    };
    let mut services = vec![
        service("identity", "keystone", "/identity"),
        service("compute", "nova", "/compute/v2.1"),
        // Neutron's catalog entry is unversioned; clients append /v2.0.
        service("network", "neutron", "/network"),
        // Glance's too; clients append /v2 (devstack's `image` entry).
        service("image", "glance", "/image"),
    ];
    // Listed, not served: the Go controller builds a block-storage client
    // at start and exits when the catalog has none (gophercloud's
    // `ErrEndpointNotFound`).
    // Ironic, when the simulator has baremetal flavors.
    if !config.baremetal_flavors.is_empty() {
        services.push(service("baremetal", "ironic", "/baremetal"));
    }
    if config.block_storage_in_catalog {
        services.push(service("block-storage", "cinderv3", "/volume/v3"));
    }
    Value::Array(services)
}

fn bad_request(message: &str) -> Response {
    reply::error(Service::Identity, 400, message)
}

fn rejected(state: &mut State) -> Response {
    state.counters.token_rejections += 1;
    unauthorized()
}

fn unauthorized() -> Response {
    reply::error(Service::Identity, 401, "The request you have made requires authentication.")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(config: &OpenStackSimConfig, scope: Value) -> (StatusCode, Value) {
        let mut state = State::default();
        let body = json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {"id": "admin", "password": "secret"}}},
            "scope": scope,
        }});
        let response = issue(&mut state, config, "http://sim", Timestamp::UNIX_EPOCH, body.to_string().as_bytes());
        let status = response.status();
        let body = state.tokens.values().next().map(|t| t.body.clone()).unwrap_or(Value::Null);
        (status, body)
    }

    fn types(catalog: &Value) -> Vec<&str> {
        catalog.as_array().into_iter().flatten().filter_map(|s| s["type"].as_str()).collect()
    }

    #[test]
    fn block_storage_is_listed_only_when_configured() {
        let (_, body) = token(&OpenStackSimConfig::default(), json!({"project": {"id": "p"}}));
        assert_eq!(types(&body["token"]["catalog"]), ["identity", "compute", "network", "image"]);
        let cinder = OpenStackSimConfig { block_storage_in_catalog: true, ..OpenStackSimConfig::default() };
        let (_, body) = token(&cinder, json!({"project": {"id": "p"}}));
        assert_eq!(types(&body["token"]["catalog"]).last(), Some(&"block-storage"));
    }

    #[test]
    fn the_decoy_region_is_listed_first_unless_switched_off() {
        let first_region = |config: &OpenStackSimConfig| {
            let (_, body) = token(config, json!({"project": {"id": "p"}}));
            body["token"]["catalog"][1]["endpoints"][0]["region"].as_str().map(str::to_owned)
        };
        assert_eq!(first_region(&OpenStackSimConfig::default()).as_deref(), Some(DECOY_REGION));
        let single = OpenStackSimConfig { decoy_region: false, ..OpenStackSimConfig::default() };
        assert_eq!(first_region(&single).as_deref(), Some("RegionOne"));
    }
}
