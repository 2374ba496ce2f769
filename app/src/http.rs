//! The operator's HTTP endpoints: `/metrics` (Prometheus text format),
//! `/healthz` (the process serves) and `/readyz` (connected and running).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug)]
pub(crate) struct Endpoints {
    registry: Arc<Registry>,
    ready: Arc<AtomicBool>,
}

impl Endpoints {
    pub(crate) fn new(registry: Registry) -> Self {
        Endpoints { registry: Arc::new(registry), ready: Arc::new(AtomicBool::new(false)) }
    }

    pub(crate) fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    pub(crate) fn router(&self) -> Router {
        Router::new()
            .route("/metrics", get(metrics))
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(readyz))
            .with_state(self.clone())
    }

    /// Serves until `shutdown` resolves.
    pub(crate) async fn serve(
        &self,
        addr: SocketAddr,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
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

async fn readyz(State(endpoints): State<Endpoints>) -> impl IntoResponse {
    if endpoints.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}
