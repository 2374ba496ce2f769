//! The Kubernetes client: kube's own stack (`kube::Client::try_from`: the
//! connect, read and write timeouts, kube's retry of a busy server, the
//! auth and extra-header layers), with each connection's HTTP/1 read buffer
//! held to [`READ_BUFFER_BYTES`].
//!
//! hyper grows a connection's read buffer (up to about 400 KB) when a read
//! fills it, and keeps it while the connection idles in the pool. The
//! operator's concurrent passes, reference writes and watches open a
//! connection each, so at 10,000 Servers about a hundred connections held
//! 13 MB of buffers (heaptrack; BENCH.md "Memory"). A fixed read size costs a
//! large answer a few more reads and the operator nothing else; it also
//! bounds an answer's head (kube-apiserver's are well under 1 KB).
//!
//! kube's tracing layer (a debug span per request, an error log per failed
//! one) is left out: a failed call reaches the pass or loop that made it,
//! which logs it with what it was for.

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;
use kube::client::retry::RetryPolicy;
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};

/// Bytes hyper reads from a connection at once: an answer or a watch event
/// of a Server with 32 KB of user data fits in three reads.
pub(crate) const READ_BUFFER_BYTES: usize = 16 * 1024;

/// A client for `config`. A proxy, or an exec plugin (whose client
/// certificate expires, which kube tracks inside its own builder), takes
/// kube's own stack unchanged.
pub(crate) fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    if config.proxy_url.is_some() || config.auth_info.exec.is_some() {
        return kube::Client::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let mut connector = hyper_timeout::TimeoutConnector::new(config.rustls_https_connector_with_connector(http)?);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let hyper = hyper_util::client::legacy::Builder::new(TokioExecutor::new())
        .http1_read_buf_exact_size(READ_BUFFER_BYTES)
        .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.default_retry.then(|| RetryLayer::new(RetryPolicy::server_retry())))
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(hyper);
    Ok(kube::Client::new(service, config.default_namespace))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Api;

    use super::{READ_BUFFER_BYTES, client};

    /// An answer many read buffers long arrives whole, headers and body.
    #[tokio::test]
    async fn an_answer_larger_than_the_read_buffer_is_read_whole() {
        let value = "x".repeat(64 * READ_BUFFER_BYTES);
        let body = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "big", "namespace": "default", "resourceVersion": "7"},
            "data": {"big": value},
        })
        .to_string();
        let app = axum::Router::new().route(
            "/api/v1/namespaces/default/configmaps/big",
            axum::routing::get(move || async move { ([("content-type", "application/json")], body) }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let address = listener.local_addr().expect("its address");
        tokio::spawn(async move { axum::serve(listener, app).await });
        let url = format!("http://{address}").parse().expect("a URL");
        let client = client(kube::Config::new(url)).expect("a client");
        let read = Api::<ConfigMap>::namespaced(client, "default").get("big").await.expect("the ConfigMap");
        assert_eq!(read.data.and_then(|mut data| data.remove("big")), Some(value));
        assert_eq!(read.metadata.resource_version.as_deref(), Some("7"));
    }
}
