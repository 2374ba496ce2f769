//! Keystone v3 `POST /v3/auth/tokens`: password (by user ID, project-scoped
//! by ID) and application credentials, answered 201 with the token in
//! `X-Subject-Token` and a body carrying expiry, project and catalog.

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

enum Principal {
    Password { user_id: String },
    ApplicationCredential { id: String },
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
    let scope_project = auth["scope"]["project"]["id"].as_str();
    let (principal, project_id) = if methods == ["password"] {
        let user = &auth["identity"]["password"]["user"];
        let (Some(user_id), Some(password)) = (user["id"].as_str(), user["password"].as_str()) else {
            return bad_request("Expecting to find id and password in user.");
        };
        let accepted = match state.users.get(user_id) {
            Some(expected) => expected == password,
            None => state.users.is_empty() && !password.is_empty(),
        };
        if !accepted {
            return rejected(state);
        }
        (Principal::Password { user_id: user_id.to_owned() }, scope_project.map(str::to_owned))
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
    state.tokens.insert(token.clone(), IssuedToken { project_id: project_id.clone(), expires_at });
    state.counters.tokens_issued += 1;

    let domain = json!({"id": "default", "name": "Default"});
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
    // An unscoped token carries neither project nor catalog.
    if let Some(project_id) = &project_id {
        body["project"] = json!({"id": project_id, "name": project_id, "domain": domain});
        body["is_domain"] = json!(false);
        body["roles"] =
            json!([{"id": "sim-role-member", "name": "member"}, {"id": "sim-role-reader", "name": "reader"}]);
        body["catalog"] = catalog(&config.region, base_url);
    }
    let mut response = reply::json(StatusCode::CREATED, json!({ "token": body }));
    if let Ok(value) = HeaderValue::from_str(&token) {
        response.headers_mut().insert("x-subject-token", value);
    }
    response
}

/// The project of a valid token: known, not revoked, not expired.
pub(super) fn validate(state: &State, token: Option<&str>, now: Timestamp) -> Option<String> {
    let issued = state.tokens.get(token?)?;
    (issued.expires_at > now).then(|| issued.project_id.clone()).flatten()
}

fn catalog(region: &str, base_url: &str) -> Value {
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
    json!([
        service("identity", "keystone", "/identity"),
        service("compute", "nova", "/compute/v2.1"),
        // Neutron's catalog entry is unversioned; clients append /v2.0.
        service("network", "neutron", "/network"),
    ])
}

fn bad_request(message: &str) -> Response {
    reply::error(Service::Identity, 400, message)
}

fn rejected(state: &mut State) -> Response {
    state.counters.token_rejections += 1;
    reply::error(Service::Identity, 401, "The request you have made requires authentication.")
}
