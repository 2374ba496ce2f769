//! Version discovery documents (what keystoneauth reads before its first
//! call) and Nova's microversion headers on every compute answer.

use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::{Op, OpenStackSimConfig, reply};

/// The document `op` serves, if it is a version document.
pub(super) fn document(op: Op, config: &OpenStackSimConfig, base_url: &str) -> Option<Response> {
    let response = match op {
        // keystone/api/discovery.py `get_versions`: 300 Multiple Choices,
        // `{"versions": {"values": [...]}}`, `Location` the preferred one.
        Op::IdentityVersions => {
            let mut response =
                reply::json(StatusCode::MULTIPLE_CHOICES, json!({"versions": {"values": [identity_v3(base_url)]}}));
            if let Ok(location) = HeaderValue::from_str(&format!("{base_url}/identity/v3/")) {
                response.headers_mut().insert("location", location);
            }
            response
        }
        // discovery.py `get_version_v3`.
        Op::IdentityVersion => reply::json(StatusCode::OK, json!({"version": identity_v3(base_url)})),
        // nova/api/openstack/compute/versions.py `Versions.index` and
        // views/versions.py `build_versions`: 200, both versions, v2.1 with
        // its microversion range (`version` the maximum).
        Op::ComputeVersions => reply::json(
            StatusCode::OK,
            json!({"versions": [
                compute_v20(base_url),
                compute_v21(base_url, config.max_microversion),
            ]}),
        ),
        // versions.py `VersionsV2.index` (`build_version`): the v2.1 document
        // with its self link first.
        Op::ComputeVersion => {
            let mut version = compute_v21(base_url, config.max_microversion);
            version["media-types"] = json!([{
                "base": "application/json",
                "type": "application/vnd.openstack.compute+json;version=2.1",
            }]);
            if let Some(links) = version["links"].as_array_mut() {
                links.push(json!({"rel": "describedby", "type": "text/html", "href": "http://docs.openstack.org/"}));
            }
            reply::json(StatusCode::OK, json!({ "version": version }))
        }
        // neutron/pecan_wsgi/controllers/root.py `RootController.index`:
        // 200, one CURRENT v2.0.
        Op::NetworkVersions => reply::json(
            StatusCode::OK,
            json!({"versions": [{
                "id": "v2.0",
                "status": "CURRENT",
                "links": [{"rel": "self", "href": format!("{base_url}/network/v2.0/")}],
            }]}),
        ),
        // root.py `V2Controller.index`: the core collections, each with its
        // link (`/v2.0` without the slash is 404 there, and here).
        Op::NetworkVersion => {
            let resources: Vec<Value> = NETWORK_RESOURCES
                .iter()
                .map(|(name, collection)| {
                    json!({
                        "name": name,
                        "collection": collection,
                        "links": [{"rel": "self", "href": format!("{base_url}/network/v2.0/{collection}")}],
                    })
                })
                .collect();
            reply::json(StatusCode::OK, json!({ "resources": resources }))
        }
        // glance/api/versions.py `Controller.index`: 300 Multiple Choices,
        // the newest v2 minor CURRENT, the others SUPPORTED, each linking
        // the unversioned-minor `/v2/`.
        Op::ImageVersions => {
            let versions: Vec<Value> = (0..=IMAGE_MINOR_MAX)
                .rev()
                .map(|minor| {
                    json!({
                        "id": format!("v2.{minor}"),
                        "status": if minor == IMAGE_MINOR_MAX { "CURRENT" } else { "SUPPORTED" },
                        "links": [{"rel": "self", "href": format!("{base_url}/image/v2/")}],
                    })
                })
                .collect();
            reply::json(StatusCode::MULTIPLE_CHOICES, json!({ "versions": versions }))
        }
        _ => return None,
    };
    Some(response)
}

/// The newest Image API v2 minor version listed (v2.17, Glance 2025.1).
const IMAGE_MINOR_MAX: u32 = 17;

/// Neutron's core collections (root.py `_CORE_RESOURCES`) less
/// `subnetpools`, which this simulator does not serve.
const NETWORK_RESOURCES: &[(&str, &str)] = &[("network", "networks"), ("subnet", "subnets"), ("port", "ports")];

fn identity_v3(base_url: &str) -> Value {
    json!({
        "id": "v3.14",
        "status": "stable",
        "updated": "2020-04-07T00:00:00Z",
        "links": [{"rel": "self", "href": format!("{base_url}/identity/v3/")}],
        "media-types": [{"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}],
    })
}

fn compute_v20(base_url: &str) -> Value {
    json!({
        "id": "v2.0",
        "status": "DEPRECATED",
        "version": "",
        "min_version": "",
        "updated": "2025-07-04T12:00:00Z",
        "links": [{"rel": "self", "href": format!("{base_url}/compute/v2/")}],
    })
}

fn compute_v21(base_url: &str, max: (u32, u32)) -> Value {
    json!({
        "id": "v2.1",
        "status": "CURRENT",
        "version": format!("{}.{}", max.0, max.1),
        "min_version": "2.1",
        "updated": "2013-07-23T11:33:21Z",
        "links": [{"rel": "self", "href": format!("{base_url}/compute/v2.1/")}],
    })
}

/// Nova's answer headers naming the microversion it answered at, on
/// successes and faults alike (nova/api/openstack/wsgi.py
/// `Resource.__call__` and `Fault.__call__`): `OpenStack-API-Version:
/// compute X`, `X-OpenStack-Nova-API-Version: X`, and `Vary` on both.
pub(super) fn announce(response: &mut Response, version: (u32, u32)) {
    let headers = response.headers_mut();
    let (major, minor) = version;
    if let Ok(value) = HeaderValue::from_str(&format!("compute {major}.{minor}")) {
        headers.insert("openstack-api-version", value);
    }
    if let Ok(value) = HeaderValue::from_str(&format!("{major}.{minor}")) {
        headers.insert("x-openstack-nova-api-version", value);
    }
    headers.append("vary", HeaderValue::from_static("OpenStack-API-Version"));
    headers.append("vary", HeaderValue::from_static("X-OpenStack-Nova-API-Version"));
}
