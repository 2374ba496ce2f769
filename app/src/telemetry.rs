//! Structured logs: text for people, JSON for log pipelines. `RUST_LOG`
//! overrides the default filter, except for what could quote an API
//! response: kube-client logs the whole body of a response it cannot decode
//! at WARN (every Server's user data, every OpenstackIdentity's password)
//! and error bodies at DEBUG, and kube-runtime's DEBUG logs carry decode
//! errors, which can quote a value. Those never reach the logs, whatever
//! `RUST_LOG` says; the operator's own logs say what failed.

use std::io::IsTerminal as _;

use tracing::{Level, Metadata};
use tracing_subscriber::filter::FilterFn;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

pub(crate) fn init(format: LogFormat, default_filter: &str) {
    // A second init (tests) keeps the first subscriber.
    let _ = tracing_subscriber::registry().with(layer(format, default_filter, std::io::stderr)).try_init();
}

/// The log layer: `RUST_LOG` (else `default_filter`) and the response-body
/// guard, then the formatter.
fn layer<W>(format: LogFormat, default_filter: &str, writer: W) -> Box<dyn Layer<Registry> + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    // Colour only for a person at a terminal: a redirected stderr (a file, a
    // pipe, a pod's log) gets plain text.
    let ansi = std::io::stderr().is_terminal();
    let fmt = tracing_subscriber::fmt::layer().with_ansi(ansi).with_writer(writer);
    let fmt: Box<dyn Layer<Registry> + Send + Sync> = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().flatten_event(true).boxed(),
    };
    // Both filters are global, not per-layer: what they turn off is never
    // recorded at all (a per-layer filter has the registry build every span
    // anyway and ask each layer about it on every enter and exit, about 8 %
    // of the operator's CPU under load).
    filter.and_then(FilterFn::new(never_a_response_body)).and_then(fmt).boxed()
}

/// Drops the kube client's and runtime's events that may quote a response.
fn never_a_response_body(metadata: &Metadata<'_>) -> bool {
    let target = metadata.target();
    if target.starts_with("kube_client") {
        return *metadata.level() <= Level::ERROR;
    }
    if target.starts_with("kube_runtime") {
        return *metadata.level() <= Level::INFO;
    }
    true
}

#[cfg(all(test, feature = "sim"))]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use kube::Api;
    use kube::api::ListParams;
    use serde_json::json;
    use server_kube::crd::{OpenstackIdentity, Server};
    use server_simkube::SimKube;

    use super::*;

    const MARKER: &str = "MARKER-c0ffee-user-data";

    /// Everything the layer writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().map_err(|_| std::io::Error::other("poisoned"))?.extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            self.0.lock().map(|bytes| String::from_utf8_lossy(&bytes).into_owned()).unwrap_or_default()
        }
    }

    /// A SimKube holding, next to objects carrying the marker, one Server
    /// and one OpenstackIdentity that do not decode into the strict types:
    /// listing them makes kube-client log the whole list response at WARN.
    fn world() -> SimKube {
        let sim = SimKube::new();
        for crd in server_kube::all_crds() {
            sim.install_crd(serde_json::to_value(crd).expect("CRDs serialize")).expect("CRDs install");
        }
        let user_data = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, MARKER);
        let store = sim.store();
        store
            .insert(
                "servers",
                json!({
                    "metadata": { "name": "healthy", "namespace": "ns" },
                    "spec": { "flavorID": "f", "image": { "id": "i" }, "userData": user_data },
                }),
            )
            .expect("seeded");
        store
            .insert(
                "servers",
                json!({
                    "metadata": { "name": "odd", "namespace": "ns" },
                    "spec": { "flavorID": "f", "image": { "id": "i" }, "userData": user_data },
                    "status": { "phase": "Hibernating", "conditions": [{ "type": "Healthy", "status": "Maybe",
                        "reason": "Errored", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z" }] },
                }),
            )
            .expect("seeded");
        store
            .insert(
                "openstackidentities",
                json!({
                    "metadata": { "name": "a", "namespace": "ns" },
                    "spec": { "projectID": "p", "userID": "u", "password": MARKER },
                }),
            )
            .expect("seeded");
        store
            .insert(
                "openstackidentities",
                json!({
                    "metadata": { "name": "b", "namespace": "ns" },
                    "spec": { "projectID": ["not", "a", "string"] },
                }),
            )
            .expect("seeded");
        sim
    }

    /// Lists both kinds with the strict types, under `layer`, at the most
    /// verbose filter; returns what was logged.
    async fn logs_of_failed_lists(layer: Box<dyn Layer<Registry> + Send + Sync>, captured: &Captured) -> String {
        let _guard = tracing_subscriber::registry().with(layer).set_default();
        let client = kube::Client::new(world().router(), "ns");
        let servers: Api<Server> = Api::namespaced(client.clone(), "ns");
        assert!(servers.list(&ListParams::default()).await.is_err(), "the strict Server list fails to decode");
        let identities: Api<OpenstackIdentity> = Api::namespaced(client, "ns");
        assert!(identities.list(&ListParams::default()).await.is_err(), "the strict identity list fails to decode");
        tracing::error!(target: "server_kube", "a line of our own");
        captured.text()
    }

    #[tokio::test]
    async fn no_response_body_reaches_the_logs_at_any_level() {
        let captured = Captured::default();
        let writer = captured.clone();
        let logs = logs_of_failed_lists(layer(LogFormat::Json, "trace", move || writer.clone()), &captured).await;
        assert!(logs.contains("a line of our own"), "the capture works: {logs}");
        assert!(!logs.contains(MARKER), "a response body reached the logs:\n{logs}");
    }

    #[tokio::test]
    async fn without_the_guard_kube_client_would_log_the_bodies() {
        let captured = Captured::default();
        let writer = captured.clone();
        let unguarded = tracing_subscriber::fmt::layer().with_writer(move || writer.clone()).boxed();
        let logs = logs_of_failed_lists(unguarded, &captured).await;
        assert!(
            logs.contains(MARKER),
            "the scenario does not make kube-client log a body: the test above proves nothing"
        );
    }
}
