//! Serving a sim's axum router on a loopback TCP port, shared by SimKube and
//! the OpenStack simulator.

use std::net::SocketAddr;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A sim served on a TCP port. Dropping the handle leaves it serving.
#[derive(Debug)]
pub struct ServeHandle {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

/// Serves `router` on `addr` (port 0 picks a free port) until
/// [`ServeHandle::shutdown`] or the end of the runtime.
pub async fn serve(router: axum::Router, addr: SocketAddr) -> std::io::Result<ServeHandle> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let (shutdown, signal) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                if signal.await.is_err() {
                    // Handle dropped without shutdown(): keep serving.
                    std::future::pending::<()>().await;
                }
            })
            .await
    });
    Ok(ServeHandle { addr, shutdown: Some(shutdown), task })
}

impl ServeHandle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, e.g. for a kube `Config`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting connections; requests in flight finish on their own
    /// (open watches at their timeout or when their client goes away).
    pub fn shutdown(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            // The server task may already be gone; nothing to signal then.
            let _ = shutdown.send(());
        }
    }

    /// Whether the server task has ended.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}
