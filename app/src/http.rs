//! The operator's HTTP endpoints: `/metrics` (Prometheus text format),
//! `/healthz` (the reconcile loop's watchdog) and `/readyz` (the Server
//! store and the caches are filled and the loops run; a follower is ready,
//! it can take over).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use server_kube::Health;

#[derive(Clone, Debug)]
pub(crate) struct Endpoints {
    registry: Arc<Registry>,
    ready: Arc<AtomicBool>,
    health: Health,
}

impl Endpoints {
    pub(crate) fn new(registry: Registry, health: Health) -> Self {
        Endpoints { registry: Arc::new(registry), ready: Arc::new(AtomicBool::new(false)), health }
    }

    pub(crate) fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    pub(crate) fn router(&self) -> Router {
        Router::new()
            .route("/metrics", get(metrics))
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .with_state(self.clone())
    }

    /// Serves on `listener` (bound by the caller, so a port in use is a
    /// startup error) until `shutdown` resolves.
    pub(crate) async fn serve(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        tracing::info!(addr = %listener.local_addr()?, "serving /metrics, /healthz and /readyz");
        axum::serve(listener, self.router()).with_graceful_shutdown(shutdown).await
    }
}

async fn metrics(State(endpoints): State<Endpoints>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &endpoints.registry) {
        Ok(()) => ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], body)
            .into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics").into_response(),
    }
}

async fn healthz(State(endpoints): State<Endpoints>) -> impl IntoResponse {
    match endpoints.health.check() {
        Ok(()) => (StatusCode::OK, "ok".to_owned()),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, reason),
    }
}

async fn readyz(State(endpoints): State<Endpoints>) -> impl IntoResponse {
    if endpoints.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}
