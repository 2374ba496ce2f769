//! Routing, token checks, fault injection, request ids and the request log.
//! Requests are handled one at a time (a gate), so the model sees calls in
//! arrival order and a seeded run replays identically.

use std::future::Future;
use std::pin::Pin;
use std::sync::MutexGuard;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State as AxumState};
use axum::http::{HeaderMap, HeaderValue, Method};
use axum::response::Response;
use axum::routing::{get, post};
use jiff::Timestamp;
use server_core::port::CloudError;

use super::faults::Fault;
use super::state::State;
use super::{Op, OpenStackSim, RequestRecord, Service, glance, ironic, keystone, neutron, nova, reply, versions};
use server_simcloud::CloudModel;

pub(super) fn router(sim: OpenStackSim) -> Router {
    Router::new()
        // Version documents, answered without a token as Keystone, Nova and
        // Neutron answer them (clients discover before they authenticate).
        .route("/identity", get(endpoint(Op::IdentityVersions)))
        .route("/identity/", get(endpoint(Op::IdentityVersions)))
        .route("/identity/v3", get(endpoint(Op::IdentityVersion)))
        .route("/identity/v3/", get(endpoint(Op::IdentityVersion)))
        .route("/compute", get(endpoint(Op::ComputeVersions)))
        .route("/compute/", get(endpoint(Op::ComputeVersions)))
        .route("/compute/v2.1", get(endpoint(Op::ComputeVersion)))
        .route("/compute/v2.1/", get(endpoint(Op::ComputeVersion)))
        .route("/network", get(endpoint(Op::NetworkVersions)))
        .route("/network/", get(endpoint(Op::NetworkVersions)))
        .route("/network/v2.0/", get(endpoint(Op::NetworkVersion)))
        .route(
            "/identity/v3/auth/tokens",
            post(endpoint(Op::Token))
                .get(endpoint(Op::TokenValidate))
                .head(endpoint(Op::TokenValidate))
                .delete(endpoint(Op::TokenValidate)),
        )
        .route("/compute/v2.1/servers", get(endpoint(Op::ServerList)).post(endpoint(Op::ServerCreate)))
        .route("/compute/v2.1/servers/detail", get(endpoint(Op::ServerListDetail)))
        .route(
            "/compute/v2.1/servers/{id}",
            get(endpoint(Op::ServerGet)).put(endpoint(Op::ServerUpdate)).delete(endpoint(Op::ServerDelete)),
        )
        .route("/compute/v2.1/servers/{id}/action", post(endpoint(Op::ServerAction)))
        .route(
            "/compute/v2.1/servers/{id}/metadata",
            post(endpoint(Op::ServerMetadataUpdate))
                .get(endpoint(Op::ServerMetadata))
                .put(endpoint(Op::ServerMetadata)),
        )
        .route(
            "/compute/v2.1/servers/{id}/metadata/{key}",
            get(endpoint(Op::ServerMetadataItem))
                .put(endpoint(Op::ServerMetadataItem))
                .delete(endpoint(Op::ServerMetadataItem)),
        )
        .route(
            "/compute/v2.1/servers/{id}/tags",
            get(endpoint(Op::ServerTags)).put(endpoint(Op::ServerTags)).delete(endpoint(Op::ServerTags)),
        )
        .route(
            "/compute/v2.1/servers/{id}/tags/{tag}",
            get(endpoint(Op::ServerTag)).put(endpoint(Op::ServerTag)).delete(endpoint(Op::ServerTag)),
        )
        .route("/compute/v2.1/servers/{id}/os-interface", get(endpoint(Op::ServerInterfaces)))
        .route("/compute/v2.1/os-keypairs", get(endpoint(Op::KeypairList)).post(endpoint(Op::KeypairCreate)))
        .route("/compute/v2.1/os-keypairs/{name}", get(endpoint(Op::Keypair)).delete(endpoint(Op::Keypair)))
        .route("/compute/v2.1/flavors", get(endpoint(Op::FlavorList)))
        .route("/compute/v2.1/flavors/detail", get(endpoint(Op::FlavorListDetail)))
        .route("/compute/v2.1/flavors/{id}", get(endpoint(Op::FlavorGet)))
        .route("/compute/v2.1/limits", get(endpoint(Op::Limits)))
        .route("/baremetal/v1/nodes", get(endpoint(Op::BaremetalNodeList)))
        .route("/network/v2.0/ports", get(endpoint(Op::PortList)).post(endpoint(Op::PortCreate)))
        .route(
            "/network/v2.0/ports/{id}",
            get(endpoint(Op::PortGet)).put(endpoint(Op::PortUpdate)).delete(endpoint(Op::PortDelete)),
        )
        .route("/network/v2.0/floatingips", get(endpoint(Op::FloatingIpList)).post(endpoint(Op::FloatingIpCreate)))
        .route(
            "/network/v2.0/floatingips/{id}",
            get(endpoint(Op::FloatingIpGet)).put(endpoint(Op::FloatingIpUpdate)).delete(endpoint(Op::FloatingIpDelete)),
        )
        .route("/network/v2.0/networks", get(endpoint(Op::NetworkList)))
        .route("/network/v2.0/networks/{id}", get(endpoint(Op::NetworkGet)))
        .route("/network/v2.0/subnets", get(endpoint(Op::SubnetList)))
        .route("/network/v2.0/subnets/{id}", get(endpoint(Op::SubnetGet)))
        .route("/network/v2.0/routers", get(endpoint(Op::RouterList)))
        .route(
            "/network/v2.0/security-groups",
            get(endpoint(Op::SecurityGroupList)).post(endpoint(Op::SecurityGroupCreate)),
        )
        .route(
            "/network/v2.0/security-groups/{id}",
            get(endpoint(Op::SecurityGroupGet)).delete(endpoint(Op::SecurityGroupDelete)),
        )
        .route(
            "/network/v2.0/security-group-rules",
            get(endpoint(Op::SecurityGroupRuleList)).post(endpoint(Op::SecurityGroupRuleCreate)),
        )
        .route(
            "/network/v2.0/security-group-rules/{id}",
            get(endpoint(Op::SecurityGroupRuleGet)).delete(endpoint(Op::SecurityGroupRuleDelete)),
        )
        .route("/network/v2.0/extensions", get(endpoint(Op::ExtensionList)))
        .route("/network/v2.0/quotas/{id}", get(endpoint(Op::QuotaGet)))
        .route("/image", get(endpoint(Op::ImageVersions)))
        .route("/image/", get(endpoint(Op::ImageVersions)))
        .route("/image/v2/images", get(endpoint(Op::ImageList)))
        .route("/image/v2/images/{id}", get(endpoint(Op::ImageGet)))
        .fallback(|| async { reply::error(Service::Compute, 404, "The resource could not be found.") })
        .with_state(sim)
}

type BoxedResponse = Pin<Box<dyn Future<Output = Response> + Send>>;

/// The axum handler of one endpoint.
#[allow(clippy::type_complexity)]
fn endpoint(
    op: Op,
) -> impl Fn(
    AxumState<OpenStackSim>,
    Method,
    Option<Path<Vec<(String, String)>>>,
    HeaderMap,
    RawQuery,
    Bytes,
) -> BoxedResponse
+ Clone
+ Send
+ Sync
+ 'static {
    move |AxumState(sim), method, path, headers, RawQuery(query), body| {
        let mut params = path.map(|Path(params)| params).unwrap_or_default().into_iter().map(|(_, value)| value);
        let request = Request { op, method, id: params.next(), sub: params.next(), headers, query, body };
        Box::pin(dispatch(sim, request))
    }
}

/// One HTTP request as routed.
struct Request {
    op: Op,
    method: Method,
    /// The path's first parameter (`{id}`, `{name}`).
    id: Option<String>,
    /// The path's second parameter (`{key}`, `{tag}`).
    sub: Option<String>,
    headers: HeaderMap,
    query: Option<String>,
    body: Bytes,
}

/// One request in the simulated cloud, as the endpoint modules see it.
pub(super) struct Ctx<'a> {
    pub(super) sim: &'a OpenStackSim,
    /// The project of the caller's token.
    pub(super) project: String,
    pub(super) now: Timestamp,
    /// `http://host:port` the caller reached us at (for links).
    pub(super) base_url: String,
    pub(super) id: Option<String>,
    /// The path's second parameter (a metadata key, a tag).
    pub(super) sub: Option<String>,
    pub(super) method: Method,
    query: Vec<(String, String)>,
    pub(super) body: Bytes,
    /// The compute microversion the request asked for (see
    /// [`microversion`]); 2.1 when it asked for none, as Nova defaults.
    pub(super) nova_microversion: (u32, u32),
}

impl Ctx<'_> {
    /// Every query key, in order (repeated keys repeated).
    pub(super) fn query_keys(&self) -> impl Iterator<Item = &str> {
        self.query.iter().map(|(k, _)| k.as_str())
    }

    /// The query as it came, for links that keep it.
    pub(super) fn query_pairs(&self) -> &[(String, String)] {
        &self.query
    }

    pub(super) fn query(&self, key: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Every value of a repeated query key (`fields=id&fields=name`).
    pub(super) fn query_all(&self, key: &str) -> Vec<&str> {
        self.query.iter().filter(|(k, _)| k == key).map(|(_, v)| v.as_str()).collect()
    }

    /// The simulator's state. Lock order: state, then model (never the reverse).
    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        self.sim.state()
    }

    pub(super) fn model<R>(&self, f: impl FnOnce(&mut CloudModel) -> R) -> R {
        self.sim.cloud().with_model(f)
    }

    /// How long a lost answer is held back (see `lost_answer_hang`).
    pub(super) fn hang(&self) -> Option<Duration> {
        self.sim.config().lost_answer_hang
    }
}

/// The answer and how long to hold it back after the effect.
pub(super) type Handled = (Response, Option<Duration>);

async fn dispatch(sim: OpenStackSim, request: Request) -> Response {
    let op = request.op;
    let id = request.id.clone();
    let fault = sim.state().faults.take(op);
    let (mut response, hold) = match fault {
        Some(Fault::Status(code)) => {
            let mut state = sim.state();
            state.counters.injected_faults += 1;
            if op == Op::Token {
                state.counters.token_requests += 1;
            }
            let response = if code == 401 {
                reply::unauthorized(op.service())
            } else {
                reply::error(op.service(), code, &format!("Injected fault: HTTP {code}."))
            };
            (response, None)
        }
        Some(Fault::RateLimit { status, retry_after }) => {
            sim.state().counters.injected_faults += 1;
            (reply::rate_limited(op.service(), status, retry_after), None)
        }
        Some(Fault::Neutron { status, kind }) => {
            sim.state().counters.injected_faults += 1;
            (reply::neutron_error(status, kind.as_str(), kind.message()), None)
        }
        Some(Fault::Delay(delay)) => {
            tokio::time::sleep(delay).await;
            handle(&sim, request).await
        }
        Some(Fault::LoseAnswer(delay)) => {
            sim.state().counters.injected_faults += 1;
            let (response, hold) = handle(&sim, request).await;
            (response, Some(hold.map_or(delay, |hold| hold.max(delay))))
        }
        None => handle(&sim, request).await,
    };
    let status = response.status().as_u16();
    // The answer's date on the cloud's clock, as any HTTP origin server
    // sends it (RFC 9110 §6.6.1): the one clock a client can read Nova's
    // `updated` dates against.
    let date = sim.cloud().now().to_zoned(jiff::tz::TimeZone::UTC).strftime("%a, %d %b %Y %H:%M:%S GMT").to_string();
    if let Ok(value) = HeaderValue::from_str(&date) {
        response.headers_mut().insert(axum::http::header::DATE, value);
    }
    {
        let mut state = sim.state();
        let serial = state.next_serial();
        let request_id = format!("req-5e5e0000-0000-4000-8000-{serial:012x}");
        if let Ok(value) = HeaderValue::from_str(&request_id) {
            if op.service() == Service::Compute {
                response.headers_mut().insert("x-compute-request-id", value.clone());
            }
            response.headers_mut().insert("x-openstack-request-id", value);
        }
        state.log.push(RequestRecord { op, id, status });
    }
    if let Some(hold) = hold {
        tokio::time::sleep(hold).await;
    }
    response
}

async fn handle(sim: &OpenStackSim, request: Request) -> Handled {
    let Request { op, method, id, sub, headers, query, body } = request;
    let _gate = sim.shared.gate.lock().await;
    let now = sim.cloud().now();
    let base_url = base_url(sim, &headers);
    if let Some(document) = versions::document(op, sim.config(), &base_url) {
        return (document, None);
    }
    if op == Op::Token {
        return (keystone::issue(&mut sim.state(), sim.config(), &base_url, now, &body), None);
    }
    let token = headers.get("x-auth-token").and_then(|v| v.to_str().ok());
    // Any valid token may show itself or another (a domain-scoped one too).
    if op == Op::TokenValidate && keystone::valid(&sim.state(), token, now) {
        let subject = headers.get("x-subject-token").and_then(|v| v.to_str().ok());
        if method == Method::DELETE {
            return (keystone::revoke(&mut sim.state(), subject, now), None);
        }
        return (keystone::show(&sim.state(), subject, now, method == Method::HEAD), None);
    }
    let project = keystone::validate(&sim.state(), token, now);
    let Some(project) = project else {
        sim.state().counters.unauthorized += 1;
        return (reply::unauthorized(op.service()), None);
    };
    let query = query.map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect()).unwrap_or_default();
    let nova_microversion = if op.service() == Service::Compute {
        match microversion(&headers, sim.config().max_microversion) {
            Ok(version) => version,
            Err(refusal) => return (refusal, None),
        }
    } else {
        (2, 1)
    };
    let ctx = Ctx { sim, project, now, base_url, id, sub, method, query, body, nova_microversion };
    match op.service() {
        Service::Compute => {
            let (mut response, hold) = nova::handle(op, &ctx);
            versions::announce(&mut response, nova_microversion);
            (response, hold)
        }
        Service::Network => (neutron::handle(op, &ctx), None),
        Service::Image => (glance::handle(op, &ctx), None),
        Service::Baremetal => ironic::handle(op, &ctx),
        Service::Identity => (reply::error(Service::Identity, 404, "The resource could not be found."), None),
    }
}

/// The compute microversion a request asks for, as Nova reads it
/// (nova/api/openstack/wsgi.py `Request.set_api_version_request`, through
/// microversion_parse `get_version`): `OpenStack-API-Version: compute X`
/// first, then the legacy `X-OpenStack-Nova-API-Version`; none is 2.1,
/// `latest` the maximum. A string not `Major.Minor`
/// (nova/api/openstack/api_version_request.py: `^([1-9]\d*)\.([1-9]\d*|0)$`)
/// is 400 `InvalidAPIVersionString`; a version outside 2.1..=max is 406
/// `InvalidGlobalAPIVersion` (wsgi.py `Resource.__call__`).
fn microversion(headers: &HeaderMap, max: (u32, u32)) -> Result<(u32, u32), Response> {
    let standard = headers.get_all("openstack-api-version").iter().filter_map(|v| v.to_str().ok()).find_map(|value| {
        value.split(',').find_map(|pair| {
            let mut words = pair.split_whitespace();
            match (words.next(), words.next()) {
                (Some(service), Some(version)) if service.eq_ignore_ascii_case("compute") => Some(version.to_owned()),
                _ => None,
            }
        })
    });
    let legacy =
        || headers.get("x-openstack-nova-api-version").and_then(|v| v.to_str().ok()).map(|v| v.trim().to_owned());
    let Some(asked) = standard.or_else(legacy) else { return Ok((2, 1)) };
    if asked == "latest" {
        return Ok(max);
    }
    let parse = |part: &str, zero: bool| {
        let digits = !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
        let leading = part.starts_with('0') && !(zero && part == "0");
        if digits && !leading { part.parse::<u32>().ok() } else { None }
    };
    let parsed = asked.split_once('.').and_then(|(major, minor)| Some((parse(major, false)?, parse(minor, true)?)));
    let Some(version) = parsed else {
        let message = format!("API Version String {asked} is of invalid format. Must be of format MajorNum.MinorNum.");
        return Err(reply::error(Service::Compute, 400, &message));
    };
    if version < (2, 1) || version > max {
        let message = format!(
            "Version {}.{} is not supported by the API. Minimum is 2.1 and maximum is {}.{}.",
            version.0, version.1, max.0, max.1
        );
        return Err(reply::error(Service::Compute, 406, &message));
    }
    Ok(version)
}

fn base_url(sim: &OpenStackSim, headers: &HeaderMap) -> String {
    if let Some(url) = &sim.config().public_url {
        return url.trim_end_matches('/').to_owned();
    }
    let host = headers.get("host").and_then(|h| h.to_str().ok()).unwrap_or("localhost");
    format!("http://{host}")
}

/// A model error as the service would answer it. A lost answer (the model's
/// timeout) is a gateway timeout, held back when so configured.
pub(super) fn model_error(ctx: &Ctx<'_>, service: Service, error: &CloudError) -> Handled {
    match error {
        CloudError::Refused { status, message } => (reply::error(service, *status, message), None),
        CloudError::Unavailable { status, message } => (reply::error(service, *status, message), None),
        CloudError::Conflict { message } => (reply::error(service, 409, message), None),
        CloudError::RateLimited { message, .. } => (reply::error(service, 429, message), None),
        CloudError::Auth { .. } => (reply::unauthorized(service), None),
        CloudError::NotPermitted { message } => (reply::error(service, 403, message), None),
        CloudError::NotReady { message } => (reply::error(service, 404, message), None),
        // A backend the service cannot reach: what a load balancer in front
        // of the service answers (the model never produces it today).
        CloudError::Unreachable { message } => (reply::error(service, 503, message), None),
        CloudError::Timeout { .. } => {
            let response = reply::error(service, 504, "Gateway Timeout: the backend did not answer in time.");
            (response, ctx.hang())
        }
        // A client's account of its own steps (the model never produces it):
        // what its step failed with.
        CloudError::BeforeCreate { source, .. } => model_error(ctx, service, source),
    }
}

/// A value as one percent-encoded URL path segment.
pub(super) fn escape(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
