//! Small helpers every loop of the operator shares, importing nothing of
//! this crate but its configuration: the Api of a namespace scope, how
//! watches list and retry, and the wall clock as Kubernetes stamps it.

use std::time::Duration;

use jiff::Timestamp;
use kube::runtime::utils::Backoff;
use kube::{Api, Client, Resource};

/// The Api of `namespace`, or of every namespace when `None`.
pub(crate) fn scoped_api<K>(client: Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(namespace) => Api::namespaced(client, namespace),
        None => Api::all(client),
    }
}

/// How the watches list and retry.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WatchSettings {
    /// Delay before re-establishing a failed watch.
    pub(crate) retry: Duration,
    /// Objects per page of a consumed kind's (re)list.
    pub(crate) page_size: u32,
    /// Servers per page of the Server watch's (re)list.
    pub(crate) server_page_size: u32,
}

impl WatchSettings {
    pub(crate) fn of(config: &crate::config::ControllerConfig) -> Self {
        WatchSettings {
            retry: config.watch_retry_interval,
            page_size: config.watch_page_size,
            server_page_size: config.server_watch_page_size,
        }
    }
}

/// A constant delay between watch retries (never exponential).
#[derive(Clone, Copy, Debug)]
pub(crate) struct FixedBackoff(pub(crate) Duration);

impl Iterator for FixedBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.0)
    }
}

impl Backoff for FixedBackoff {
    fn reset(&mut self) {}
}

/// The wall clock, to the second as Kubernetes timestamps are: what the
/// core decides with and what statuses and annotations carry.
pub(crate) fn now() -> Timestamp {
    let now = precise_now();
    Timestamp::from_second(now.as_second()).unwrap_or(now)
}

/// The wall clock to the microsecond, for what Kubernetes stamps finer
/// (`MicroTime`: Events, Leases) and for ordering within a second (a create
/// answer against its note). The adapter's one other reading of the clock.
pub(crate) fn precise_now() -> Timestamp {
    Timestamp::now()
}
