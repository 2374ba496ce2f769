//! The cloud's proxy, read from the environment as curl and reqwest read it
//! (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY`, either case:
//! hyper-util's `Matcher::from_env`): each connection goes through an HTTP
//! `CONNECT` tunnel of the proxy its destination matches, or directly.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tower_service::Service;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Connects directly, or through the tunnel of the proxy that `matcher`
/// names for the destination.
#[derive(Clone, Debug)]
pub(crate) struct ProxiedConnector {
    direct: HttpConnector,
    matcher: Arc<Matcher>,
}

/// A proxy this transport cannot use; its URL is not quoted (it may carry
/// a password).
#[derive(Debug, thiserror::Error)]
#[error(
    "the proxy for this endpoint (HTTPS_PROXY, HTTP_PROXY or ALL_PROXY) is not an http:// URL; only http:// proxies are supported"
)]
struct UnsupportedProxy;

impl ProxiedConnector {
    pub(crate) fn new(direct: HttpConnector, matcher: Matcher) -> Self {
        ProxiedConnector { direct, matcher: Arc::new(matcher) }
    }
}

impl Service<Uri> for ProxiedConnector {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Either way the connection is made by a clone of `direct`, which is
        // always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, destination: Uri) -> Self::Future {
        let mut direct = self.direct.clone();
        let Some(intercept) = self.matcher.intercept(&destination) else {
            return Box::pin(async move { direct.call(destination).await.map_err(BoxError::from) });
        };
        if intercept.uri().scheme_str() != Some("http") {
            return Box::pin(async { Err(BoxError::from(UnsupportedProxy)) });
        }
        let mut tunnel = Tunnel::new(intercept.uri().clone(), direct);
        if let Some(authorization) = intercept.basic_auth() {
            tunnel = tunnel.with_auth(authorization.clone());
        }
        Box::pin(async move {
            // The tunnel's `CONNECT` names a port: the URL's, else its scheme's.
            let target = with_port(&destination)?;
            tunnel.call(target).await.map_err(BoxError::from)
        })
    }
}

fn with_port(uri: &Uri) -> Result<Uri, BoxError> {
    let host = uri.host().ok_or("an endpoint URL without a host")?;
    let port = uri.port_u16().unwrap_or(if uri.scheme_str() == Some("http") { 80 } else { 443 });
    let scheme = uri.scheme_str().unwrap_or("https");
    let host = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host.to_owned() };
    Ok(format!("{scheme}://{host}:{port}/").parse()?)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use http_body_util::{BodyExt, Empty};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// An origin answering every request with `ok`.
    async fn origin() -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let address = listener.local_addr().expect("its address");
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut request = [0; 4096];
                    let _ = stream.read(&mut request).await;
                    let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
                });
            }
        });
        address
    }

    /// A tunnelling proxy that records each request head it is sent.
    async fn proxy(heads: Arc<Mutex<Vec<String>>>) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let address = listener.local_addr().expect("its address");
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let heads = heads.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0; 1];
                    while !head.ends_with(b"\r\n\r\n") && client.read(&mut byte).await.is_ok_and(|n| n == 1) {
                        head.push(byte[0]);
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let target = head.split_whitespace().nth(1).unwrap_or_default().to_owned();
                    heads.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(head);
                    let Ok(mut upstream) = TcpStream::connect(target).await else { return };
                    let _ = client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n").await;
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                });
            }
        });
        address
    }

    async fn get(matcher: Matcher, url: &str) -> Result<String, BoxError> {
        let client = Client::builder(TokioExecutor::new())
            .build::<_, Empty<bytes::Bytes>>(ProxiedConnector::new(HttpConnector::new(), matcher));
        let answer = client.get(url.parse()?).await?;
        Ok(String::from_utf8(answer.into_body().collect().await?.to_bytes().to_vec())?)
    }

    #[tokio::test]
    async fn a_destination_the_proxy_variables_name_goes_through_the_proxys_tunnel() {
        let heads = Arc::default();
        let (origin, proxy) = (origin().await, proxy(Arc::clone(&heads)).await);
        let matcher = Matcher::builder().http(format!("http://user:secret@{proxy}")).build();
        assert_eq!(get(matcher, &format!("http://{origin}/v2.1/servers")).await.ok().as_deref(), Some("ok"));
        let heads = heads.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        assert_eq!(heads.len(), 1, "{heads:?}");
        assert!(heads[0].starts_with(&format!("CONNECT {origin} HTTP/1.1\r\n")), "{heads:?}");
        // user:secret, as the proxy URL gave them.
        assert!(heads[0].to_lowercase().contains("proxy-authorization: basic dxnlcjpzzwnyzxq="), "{heads:?}");
    }

    #[tokio::test]
    async fn a_destination_no_proxy_names_is_reached_directly() {
        let heads = Arc::default();
        let (origin, proxy) = (origin().await, proxy(Arc::clone(&heads)).await);
        let matcher = Matcher::builder().http(format!("http://{proxy}")).no("127.0.0.1").build();
        assert_eq!(get(matcher, &format!("http://{origin}/")).await.ok().as_deref(), Some("ok"));
        assert!(heads.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_empty());
    }

    #[tokio::test]
    async fn an_https_proxy_is_refused_without_quoting_its_url() {
        let matcher = Matcher::builder().http("https://user:secret@proxy.example:3128").build();
        let error = get(matcher, "http://127.0.0.1:9/").await.err();
        // The whole chain, as `error::from_transport` quotes it.
        let error =
            std::iter::successors(error.as_deref().map(|e| e as &(dyn std::error::Error + 'static)), |e| e.source())
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(": ");
        assert!(error.contains("only http:// proxies"), "{error}");
        assert!(!error.contains("secret"), "{error}");
    }
}
