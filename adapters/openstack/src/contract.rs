//! Contract tests against OpenStack's own API samples
//! (`fixtures/openstack-api-samples`, copied unchanged from the upstream API
//! references): every sample response parses with the client's types into
//! what the port needs, and every request body the adapter sends has only
//! attributes the samples show, with the JSON types they show, and Nova
//! metadata keys that Nova's schema accepts.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use server_core::model::{AllowedAddressPair, NetworkAttachment, Tag};
use server_core::port::{CreateRequest, Credentials, IdentityContext, Owner, ProviderStatus, ServerRef};

use crate::auth::{Auth, TokenBody, request_body};
use crate::compute::{CreatedEnvelope, ServerEnvelope, ServerList};
use crate::config::OpenStackConfig;
use server_core::provider_metadata::valid_metadata_key;

use crate::mapping::{self, ResolvedNetworking};
use crate::network::{FloatingIpEnvelope, FloatingIps, Networks, PortEnvelope, Ports, SecurityGroups};

type TestResult = Result<(), String>;

fn samples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/openstack-api-samples")
}

fn sample(relative: &str) -> Result<Value, String> {
    let path = samples().join(relative);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{relative}: {e}"))
}

fn parse<T: DeserializeOwned>(relative: &str) -> Result<T, String> {
    serde_json::from_value(sample(relative)?).map_err(|e| format!("{relative} does not parse: {e}"))
}

/// How each sample is read; a sample nobody reads fails the test, so a new
/// sample cannot be added without a check.
type Reader = fn(&str) -> TestResult;

const READERS: &[(&str, Reader)] = &[
    ("nova/server-create-req.json", request_sample),
    ("nova/v2.37_server-create-req.json", request_sample),
    ("nova/force-delete-post-req.json", request_sample),
    ("nova/server-create-resp.json", created),
    ("nova/v2.90_server-create-resp.json", created),
    ("nova/server-get-resp.json", server),
    ("nova/v2.90_server-get-resp.json", server),
    ("nova/v2.100_server-get-resp.json", server),
    ("nova/v2.71_server-get-down-cell-resp.json", down_cell_server),
    ("nova/servers-details-resp.json", server_list),
    ("nova/v2.90_servers-details-resp.json", server_list),
    ("nova/v2.100_servers-details-resp.json", server_list),
    ("nova/servers-list-resp.json", server_list),
    ("neutron/ports_port-create-request.json", request_sample),
    ("neutron/ports_port-create-response.json", port),
    ("neutron/ports_port-show-response.json", port),
    ("neutron/ports_port-update-response.json", port),
    ("neutron/ports_ports-list-response.json", ports),
    ("neutron/floatingips_floatingip-create-request.json", request_sample),
    ("neutron/floatingips_floatingip-create-response.json", floating_ip),
    ("neutron/floatingips_floating-ips-list-response.json", floating_ips),
    ("neutron/networks_networks-list-response.json", networks),
    ("neutron/networks_network-show-response.json", shown_only),
    ("neutron/security-groups_security-groups-list-response.json", security_groups),
    ("neutron/security-groups_security-group-show-response.json", shown_only),
    ("neutron/subnets_subnet-show-response.json", shown_only),
    ("keystone/auth_requests_project-id-password.json", request_sample),
    ("keystone/admin_auth-application-credential-id-request.json", request_sample),
    ("keystone/auth_responses_project-scoped-password.json", token),
    ("keystone/auth_responses_project-scoped-token.json", token),
    ("keystone/admin_auth-application-credential-response.json", token),
    ("keystone/admin_auth-password-project-scoped-response.json", token_with_catalog),
    ("keystone/admin_auth-token-scoped-response.json", token_with_catalog),
];

fn request_sample(relative: &str) -> TestResult {
    // Read as the shapes our own bodies are held to (see below).
    sample(relative).map(drop)
}

/// Samples of calls the adapter does not make; they must still be JSON.
fn shown_only(relative: &str) -> TestResult {
    sample(relative).map(drop)
}

fn created(relative: &str) -> TestResult {
    let created: CreatedEnvelope = parse(relative)?;
    if created.server.id.is_empty() { Err(format!("{relative}: no id")) } else { Ok(()) }
}

fn server(relative: &str) -> TestResult {
    let server = parse::<ServerEnvelope>(relative)?.server;
    let record = mapping::provider_server(&server);
    let ok = !record.id.is_empty()
        && record.status == ProviderStatus::Active
        && record.created.is_some()
        && record.launched_at.is_some()
        && record.private_ip.is_some()
        && record.mac_address.is_some()
        && !server.down_cell();
    if ok { Ok(()) } else { Err(format!("{relative}: read as {record:?}")) }
}

fn down_cell_server(relative: &str) -> TestResult {
    let server = parse::<ServerEnvelope>(relative)?.server;
    if server.down_cell() && server.server_uid().is_none() && server.go_server_name().is_none() {
        Ok(())
    } else {
        Err(format!("{relative}: a down-cell record must be read as such: {server:?}"))
    }
}

fn server_list(relative: &str) -> TestResult {
    let list: ServerList = parse(relative)?;
    if list.servers.is_empty() || list.servers.iter().any(|s| s.id.is_empty()) {
        return Err(format!("{relative}: servers without ids"));
    }
    // Every sample list is a full page of one with a next link.
    if !list.servers_links.iter().any(|l| l.rel == "next") {
        return Err(format!("{relative}: the next link was not read"));
    }
    Ok(())
}

fn port(relative: &str) -> TestResult {
    let port = parse::<PortEnvelope>(relative)?.port;
    if port.id.is_empty() || port.network_id.is_empty() { Err(format!("{relative}: {port:?}")) } else { Ok(()) }
}

fn ports(relative: &str) -> TestResult {
    let ports: Ports = parse(relative)?;
    if ports.ports.is_empty() { Err(format!("{relative}: no ports")) } else { Ok(()) }
}

fn floating_ip(relative: &str) -> TestResult {
    let ip = parse::<FloatingIpEnvelope>(relative)?.floatingip;
    if ip.floating_ip_address.is_none() { Err(format!("{relative}: {ip:?}")) } else { Ok(()) }
}

fn floating_ips(relative: &str) -> TestResult {
    let ips: FloatingIps = parse(relative)?;
    if ips.floatingips.is_empty() { Err(format!("{relative}: none")) } else { Ok(()) }
}

fn networks(relative: &str) -> TestResult {
    let networks: Networks = parse(relative)?;
    if networks.networks.iter().any(|n| n.id.is_empty() || n.name.is_empty()) {
        Err(format!("{relative}: networks without id or name"))
    } else {
        Ok(())
    }
}

fn security_groups(relative: &str) -> TestResult {
    let groups: SecurityGroups = parse(relative)?;
    if groups.security_groups.iter().any(|g| g.id.is_empty() || g.name.is_empty()) {
        Err(format!("{relative}: groups without id or name"))
    } else {
        Ok(())
    }
}

fn token(relative: &str) -> TestResult {
    let body: TokenBody = parse(relative)?;
    if body.token.project.is_none() { Err(format!("{relative}: no project scope read")) } else { Ok(()) }
}

fn token_with_catalog(relative: &str) -> TestResult {
    token(relative)?;
    let body: TokenBody = parse(relative)?;
    let auth = Auth::new(&OpenStackConfig::new("http://keystone/v3", "RegionOne"), None);
    let token = auth
        .token_from(http::header::HeaderValue::from_static("t"), body.token, tokio::time::Instant::now())
        .map_err(|e| format!("{relative}: {e}"))?;
    if token.endpoints.compute.is_empty() || !token.endpoints.network.ends_with("/v2.0") {
        return Err(format!("{relative}: endpoints {:?}", token.endpoints));
    }
    Ok(())
}

#[test]
fn every_sample_is_read_by_the_client() -> TestResult {
    let mut files = Vec::new();
    for service in ["nova", "neutron", "keystone"] {
        let dir = samples().join(service);
        for entry in std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
            let entry = entry.map_err(|e| e.to_string())?;
            files.push(format!("{service}/{}", entry.file_name().to_string_lossy()));
        }
    }
    files.sort();
    let mut failures = Vec::new();
    for file in &files {
        match READERS.iter().find(|(name, _)| name == file) {
            Some((name, read)) => {
                if let Err(error) = read(name) {
                    failures.push(error);
                }
            }
            None => failures.push(format!("{file}: no reader; say how the client reads it")),
        }
    }
    if failures.is_empty() { Ok(()) } else { Err(failures.join("\n")) }
}

// ---------------------------------------------------------------- requests

/// Whether `ours` has only attributes some of `shapes` have at the same
/// place, with the same JSON type (an attribute a sample shows as null may
/// be any scalar). `free` names object paths whose keys are the user's
/// (Nova metadata): their keys are checked by [`valid_metadata_key`].
fn conforms(ours: &Value, shapes: &[&Value], path: &str, free: &[&str], errors: &mut Vec<String>) {
    match ours {
        Value::Object(map) => {
            let objects: Vec<&serde_json::Map<String, Value>> = shapes.iter().filter_map(|s| s.as_object()).collect();
            if objects.is_empty() && !shapes.iter().any(|s| s.is_null()) {
                errors.push(format!("{path}: an object where the samples have {shapes:?}"));
                return;
            }
            for (key, value) in map {
                let child = format!("{path}.{key}");
                if free.contains(&path) {
                    if !valid_metadata_key(key) || value.as_str().is_none_or(|v| v.chars().count() > 255) {
                        errors.push(format!("{child}: Nova's metadata schema refuses it"));
                    }
                    continue;
                }
                let found: Vec<&Value> = objects.iter().filter_map(|o| o.get(key)).collect();
                if found.is_empty() {
                    errors.push(format!("{child}: no sample has this attribute"));
                } else {
                    conforms(value, &found, &child, free, errors);
                }
            }
        }
        Value::Array(items) => {
            let elements: Vec<&Value> = shapes.iter().filter_map(|s| s.as_array()).flatten().collect();
            if !shapes.iter().any(|s| s.is_array()) {
                errors.push(format!("{path}: an array where the samples have {shapes:?}"));
            }
            for (i, item) in items.iter().enumerate() {
                if !elements.is_empty() {
                    conforms(item, &elements, &format!("{path}[{i}]"), free, errors);
                }
            }
        }
        scalar => {
            let same = |s: &&Value| {
                s.is_null()
                    || std::mem::discriminant(*s) == std::mem::discriminant(scalar)
                    || (s.is_number() && scalar.is_number())
            };
            if !shapes.iter().any(same) {
                errors.push(format!("{path}: {scalar} where the samples have {shapes:?}"));
            }
        }
    }
}

fn check(ours: &Value, shapes: &[Value], free: &[&str]) -> TestResult {
    let mut errors = Vec::new();
    conforms(ours, &shapes.iter().collect::<Vec<_>>(), "", free, &mut errors);
    if errors.is_empty() { Ok(()) } else { Err(format!("{ours:#}\n{}", errors.join("\n"))) }
}

fn request() -> CreateRequest {
    CreateRequest {
        server: ServerRef { namespace: "ns".into(), name: "web".into(), uid: "uid-1".into() },
        name: "web".into(),
        flavor_id: "flavor".into(),
        image_id: "image".into(),
        networks: vec![NetworkAttachment {
            id: "net".into(),
            allowed_address_pairs: vec![
                AllowedAddressPair { cidr: "10.0.0.0/24".into(), mac_address: None },
                AllowedAddressPair { cidr: "10.0.1.1".into(), mac_address: Some("fa:16:3e:00:00:01".into()) },
            ],
        }],
        security_group_ids: vec!["web".into()],
        network_ids: Default::default(),
        public_ip: true,
        user_data: Some(b"#cloud-config\n".to_vec()),
        // As the core hands them to the port: converted, unfit ones left out.
        tags: server_core::provider_metadata::provider_tags(&[
            Tag { name: "compute.unikorn-cloud.org/workload".into(), value: "batch".into() },
            Tag { name: "team".into(), value: "blue".into() },
            Tag { name: "owner@example.com".into(), value: "dropped".into() },
            Tag { name: "clé".into(), value: "dropped".into() },
        ])
        .tags,
        identity_ssh_key: true,
        owner: Owner { organization_id: "org".into(), project_id: "proj".into(), region_id: "region".into() },
        first_create: true,
    }
}

/// Nova's `POST /servers` schema for what the samples at hand do not show
/// (nova/api/openstack/compute/schemas/servers.py): `networks` as a list of
/// `{"port": <uuid>}` (required since 2.37) and `key_name`.
fn nova_schema_extras() -> Value {
    json!({"server": {"networks": [{"port": "uuid", "uuid": "uuid"}], "key_name": "name"}})
}

#[test]
fn the_server_create_body_fits_the_samples_and_novas_metadata_schema() -> TestResult {
    let body = mapping::tests::body_value(&request(), "port-1", Some("identity-key"));
    if body["server"]["key_name"] != "identity-key" {
        return Err(format!("no key_name in {body}"));
    }
    let shapes =
        [sample("nova/server-create-req.json")?, sample("nova/v2.37_server-create-req.json")?, nova_schema_extras()];
    check(&body, &shapes, &[".server.metadata"])?;
    let keys: Vec<&String> = body["server"]["metadata"].as_object().map(|m| m.keys().collect()).unwrap_or_default();
    if !keys.iter().any(|k| *k == "compute:workload") || keys.iter().any(|k| k.contains('@')) {
        return Err(format!("tags not converted or not dropped: {keys:?}"));
    }
    Ok(())
}

#[test]
fn neutron_bodies_fit_the_samples() -> TestResult {
    let request = request();
    let ids = ResolvedNetworking { network_id: "n".into(), security_group_ids: vec!["g".into()] };
    let port = mapping::port_body(&request, &request.networks[0], &ids);
    // Writable attributes the create request sample leaves out are shown,
    // with their types, by the port's own record.
    let port_shapes =
        [sample("neutron/ports_port-create-request.json")?, sample("neutron/ports_port-show-response.json")?];
    check(&port, &port_shapes, &[])?;
    let floating = json!({"floatingip": {"floating_network_id": "n", "port_id": "p", "description": "Server ns/web"}});
    check(&floating, &[sample("neutron/floatingips_floatingip-create-request.json")?], &[])
}

#[test]
fn keystone_and_force_delete_bodies_fit_the_samples() -> TestResult {
    let identity = |credentials| IdentityContext {
        region_id: "r".into(),
        identity_id: "i".into(),
        project_id: "p".into(),
        credentials,
        ssh_key_name: None,
    };
    let password = request_body(&identity(Credentials::Password { user_id: "u".into(), password: "pw".into() }))
        .map_err(|e| e.to_string())?;
    check(&password, &[sample("keystone/auth_requests_project-id-password.json")?], &[])?;
    let credential = request_body(&identity(Credentials::ApplicationCredential { id: "a".into(), secret: "s".into() }))
        .map_err(|e| e.to_string())?;
    check(&credential, &[sample("keystone/admin_auth-application-credential-id-request.json")?], &[])?;
    check(&json!({"forceDelete": null}), &[sample("nova/force-delete-post-req.json")?], &[])
}

#[test]
fn the_shape_check_refuses_what_the_samples_do_not_show() {
    let shapes = [json!({"port": {"name": "x", "allowed_address_pairs": [{"ip_address": "1"}]}})];
    assert!(check(&json!({"port": {"name": "y"}}), &shapes, &[]).is_ok());
    assert!(check(&json!({"port": {"nmae": "y"}}), &shapes, &[]).is_err());
    assert!(check(&json!({"port": {"name": 3}}), &shapes, &[]).is_err());
    assert!(check(&json!({"port": {"allowed_address_pairs": [{"ip": "1"}]}}), &shapes, &[]).is_err());
    assert!(check(&json!({"m": {"a/b": "c"}}), &[json!({"m": {}})], &[".m"]).is_err());
    assert!(Path::new(&samples()).is_dir());
}
