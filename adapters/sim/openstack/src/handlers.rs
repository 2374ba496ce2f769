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
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use axum::routing::{get, post};
use jiff::Timestamp;
use server_core::port::CloudError;

use super::faults::Fault;
use super::state::State;
use super::{Op, OpenStackSim, RequestRecord, Service, keystone, neutron, nova, reply};
use server_simcloud::CloudModel;

pub(super) fn router(sim: OpenStackSim) -> Router {
    Router::new()
        .route("/identity/v3/auth/tokens", post(endpoint(Op::Token)))
        .route("/compute/v2.1/servers", get(endpoint(Op::ServerList)).post(endpoint(Op::ServerCreate)))
        .route("/compute/v2.1/servers/detail", get(endpoint(Op::ServerListDetail)))
        .route("/compute/v2.1/servers/{id}", get(endpoint(Op::ServerGet)).delete(endpoint(Op::ServerDelete)))
        .route("/compute/v2.1/servers/{id}/action", post(endpoint(Op::ServerAction)))
        .route("/compute/v2.1/servers/{id}/metadata", post(endpoint(Op::ServerMetadataUpdate)))
        .route("/network/v2.0/ports", get(endpoint(Op::PortList)).post(endpoint(Op::PortCreate)))
        .route(
            "/network/v2.0/ports/{id}",
            get(endpoint(Op::PortGet)).put(endpoint(Op::PortUpdate)).delete(endpoint(Op::PortDelete)),
        )
        .route("/network/v2.0/floatingips", get(endpoint(Op::FloatingIpList)).post(endpoint(Op::FloatingIpCreate)))
        .route(
            "/network/v2.0/floatingips/{id}",
            get(endpoint(Op::FloatingIpGet)).delete(endpoint(Op::FloatingIpDelete)),
        )
        .route("/network/v2.0/networks", get(endpoint(Op::NetworkList)))
        .route("/network/v2.0/security-groups", get(endpoint(Op::SecurityGroupList)))
        .fallback(|| async { reply::error(Service::Compute, 404, "The resource could not be found.") })
        .with_state(sim)
}

type BoxedResponse = Pin<Box<dyn Future<Output = Response> + Send>>;

/// The axum handler of one endpoint.
#[allow(clippy::type_complexity)]
fn endpoint(
    op: Op,
) -> impl Fn(AxumState<OpenStackSim>, Option<Path<String>>, HeaderMap, RawQuery, Bytes) -> BoxedResponse
+ Clone
+ Send
+ Sync
+ 'static {
    move |AxumState(sim), path, headers, RawQuery(query), body| {
        Box::pin(dispatch(sim, op, path.map(|Path(id)| id), headers, query, body))
    }
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
    query: Vec<(String, String)>,
    pub(super) body: Bytes,
    /// `X-OpenStack-Nova-API-Version` (2.1 when absent, as Nova defaults).
    pub(super) nova_microversion: (u32, u32),
}

impl Ctx<'_> {
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

async fn dispatch(
    sim: OpenStackSim,
    op: Op,
    id: Option<String>,
    headers: HeaderMap,
    query: Option<String>,
    body: Bytes,
) -> Response {
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
            handle(&sim, op, id.clone(), &headers, query, body).await
        }
        Some(Fault::LoseAnswer(delay)) => {
            sim.state().counters.injected_faults += 1;
            let (response, hold) = handle(&sim, op, id.clone(), &headers, query, body).await;
            (response, Some(hold.map_or(delay, |hold| hold.max(delay))))
        }
        None => handle(&sim, op, id.clone(), &headers, query, body).await,
    };
    let status = response.status().as_u16();
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

async fn handle(
    sim: &OpenStackSim,
    op: Op,
    id: Option<String>,
    headers: &HeaderMap,
    query: Option<String>,
    body: Bytes,
) -> Handled {
    let _gate = sim.shared.gate.lock().await;
    let now = sim.cloud().now();
    let base_url = base_url(sim, headers);
    if op == Op::Token {
        return (keystone::issue(&mut sim.state(), sim.config(), &base_url, now, &body), None);
    }
    let token = headers.get("x-auth-token").and_then(|v| v.to_str().ok());
    let project = keystone::validate(&sim.state(), token, now);
    let Some(project) = project else {
        sim.state().counters.unauthorized += 1;
        return (reply::unauthorized(op.service()), None);
    };
    let query = query.map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect()).unwrap_or_default();
    let nova_microversion = microversion(headers);
    let ctx = Ctx { sim, project, now, base_url, id, query, body, nova_microversion };
    match op.service() {
        Service::Compute => nova::handle(op, &ctx),
        Service::Network => (neutron::handle(op, &ctx), None),
        Service::Identity => (reply::error(Service::Identity, 404, "The resource could not be found."), None),
    }
}

/// The compute microversion asked for; 2.1 when none or unreadable.
fn microversion(headers: &HeaderMap) -> (u32, u32) {
    let asked = headers.get("x-openstack-nova-api-version").and_then(|v| v.to_str().ok());
    asked
        .and_then(|v| v.trim().split_once('.'))
        .and_then(|(major, minor)| Some((major.parse().ok()?, minor.parse().ok()?)))
        .unwrap_or((2, 1))
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
