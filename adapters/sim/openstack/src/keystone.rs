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

/// Whether the scope names a domain (`{"domain": {"id"}}` or `{"name"}`):
/// the one domain, else 401 (keystone/auth/core.py `_lookup_domain`:
/// `DomainNotFound` -> Unauthorized); both a project and a domain are 400
/// (`AuthInfo._validate_and_normalize_scope_data`). Domain role
/// assignments are not modelled: every user holds one on the domain.
fn scoped_domain(scope: &Value) -> Result<bool, Response> {
    let domain = &scope["domain"];
    if domain.is_null() {
        return Ok(false);
    }
    if !scope["project"].is_null() {
        return Err(bad_request("Expecting to find project or domain in scope, not both."));
    }
    if domain["id"].is_null() && domain["name"].is_null() {
        return Err(bad_request("Expecting to find id or name in domain."));
    }
    if !is_default_domain(domain) {
        return Err(unauthorized());
    }
    Ok(true)
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
    let scope_project = match scoped_project(state, &auth["scope"]["project"]) {
        Ok(project) => project,
        Err(refusal) => {
            state.counters.token_rejections += u64::from(refusal.status() == StatusCode::UNAUTHORIZED);
            return refusal;
        }
    };
    let scope_domain = match scoped_domain(&auth["scope"]) {
        Ok(domain) => domain,
        Err(refusal) => {
            state.counters.token_rejections += u64::from(refusal.status() == StatusCode::UNAUTHORIZED);
            return refusal;
        }
    };
    let (principal, project_id) = if methods == ["password"] {
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
        // A scope on a project the user holds no role on is refused 401
        // (keystone/models/token_model.py: "User X has no access to project Y").
        if let Some(project) = &scope_project
            && !state.projects.is_empty()
            && !state.grants.contains(&(user_id.to_owned(), project.clone()))
        {
            return rejected(state);
        }
        (Principal::Password { user_id: user_id.to_owned() }, scope_project)
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
        (Principal::ApplicationCredential { id: id.to_owned() }, Some(project))
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
    // one carries the domain, roles and the catalog, and no project
    // (keystone/token/token_formatters.py, the `domain` scope of the
    // api-ref's "Password authentication with scoped authorization").
    let roles = json!([{"id": "sim-role-member", "name": "member"}, {"id": "sim-role-reader", "name": "reader"}]);
    if let Some(project_id) = &project_id {
        let name = state.projects.get(project_id).map_or(project_id.as_str(), String::as_str);
        body["project"] = json!({"id": project_id, "name": name, "domain": domain});
        body["is_domain"] = json!(false);
        body["roles"] = roles;
        body["catalog"] = catalog(config, base_url);
    } else if scope_domain {
        body["domain"] = domain.clone();
        body["roles"] = roles;
        body["catalog"] = catalog(config, base_url);
    }
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

/// The project of a valid token: known, not revoked, not expired.
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
        // Glance answers its version document only: servers are booted from
        // an image ID. The Go controller builds an image client at start
        // and exits when the catalog has no such entry (gophercloud's
        // `ErrEndpointNotFound`).
        service("image", "glance", "/image"),
    ];
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
    fn a_domain_scope_gives_the_catalog_and_no_project() {
        let config = OpenStackSimConfig::default();
        let (status, body) = token(&config, json!({"domain": {"id": "default"}}));
        assert_eq!(status, StatusCode::CREATED);
        assert_eq!(body["token"]["domain"]["id"], "default");
        assert!(body["token"]["project"].is_null());
        assert_eq!(types(&body["token"]["catalog"]), ["identity", "compute", "network", "image"]);
        let cinder = OpenStackSimConfig { block_storage_in_catalog: true, ..OpenStackSimConfig::default() };
        let (_, body) = token(&cinder, json!({"domain": {"id": "default"}}));
        assert_eq!(types(&body["token"]["catalog"]).last(), Some(&"block-storage"));
        assert_eq!(token(&config, json!({"domain": {"name": "Default"}})).0, StatusCode::CREATED);
        assert_eq!(token(&config, json!({"domain": {"id": "other"}})).0, StatusCode::UNAUTHORIZED);
        let both = json!({"domain": {"id": "default"}, "project": {"id": "p"}});
        assert_eq!(token(&config, both).0, StatusCode::BAD_REQUEST);
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
