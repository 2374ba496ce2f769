//! One shutdown signal shared by the controller and the monitor.

use std::future::Future;

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};

/// A cloneable future that resolves once shutdown is requested.
pub(crate) type Shutdown = Shared<BoxFuture<'static, ()>>;

pub(crate) fn shutdown(signal: impl Future<Output = ()> + Send + 'static) -> Shutdown {
    signal.boxed().shared()
}
