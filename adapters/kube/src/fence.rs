//! The fence: whether this replica may act right now.
//!
//! With leader election, only the holder of the Lease may write to the API
//! or call the cloud, and only until its renew deadline: the elector extends
//! the fence after each successful renewal to *the time the renewal was
//! sent* plus the renew deadline, which is shorter than the lease duration,
//! so a leader that cannot renew stops acting before any other replica can
//! see its lease expire (DESIGN invariant 11). The fence is a deadline, not
//! a flag: it closes by itself when time passes, even if the elector is
//! stuck in a hanging request.
//!
//! The fence is enforced at the two doors every effect goes through: the
//! Kubernetes client ([`fenced_client`] refuses every write) and each
//! region's cloud port ([`FencedCloud`] refuses every call). Reads of the
//! API stay open, so a follower keeps its caches warm.

use std::sync::{Arc, Mutex, PoisonError};

use futures_util::Stream;
use kube::Client;
use kube::client::Body;
use server_core::port::{
    AttachedResource, CloudError, CloudPort, CreateRequest, DeleteProgress, IdentityContext, PortFuture,
    ProviderServer, ServerRef,
};
use tokio::sync::watch;
use tokio::time::Instant;

/// Why a write or a cloud call was not sent.
pub(crate) const NOT_LEADER: &str = "not sent: this replica does not hold the leader lease";

/// Whether this replica may act; clones share one fence.
#[derive(Clone)]
pub struct Fence {
    inner: Arc<FenceState>,
}

struct FenceState {
    /// Without leader election the fence is always open.
    always_open: bool,
    /// Acting is allowed strictly before this instant.
    until: Mutex<Option<Instant>>,
    /// Counts leadership terms: a new term starts when a closed fence opens.
    terms: watch::Sender<u64>,
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fence").field("always_open", &self.inner.always_open).field("holds", &self.holds()).finish()
    }
}

impl Fence {
    /// A fence that is always open: a single replica without election.
    pub fn open() -> Self {
        Self::new(true)
    }

    /// A closed fence, opened by an elector.
    pub fn closed() -> Self {
        Self::new(false)
    }

    fn new(always_open: bool) -> Self {
        Fence { inner: Arc::new(FenceState { always_open, until: Mutex::new(None), terms: watch::channel(0).0 }) }
    }

    /// Whether this replica may act now.
    pub fn holds(&self) -> bool {
        self.holds_at(Instant::now())
    }

    fn holds_at(&self, now: Instant) -> bool {
        self.inner.always_open || self.until().is_some_and(|until| now < until)
    }

    fn until(&self) -> Option<Instant> {
        *self.inner.until.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The instant the fence closes unless extended (`None` when closed or always open).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.until().filter(|until| Instant::now() < *until)
    }

    /// Opens the fence until `until` (or keeps it open that long); a fence
    /// that was closed starts a new term.
    pub(crate) fn extend(&self, until: Instant) {
        let now = Instant::now();
        if until <= now {
            return;
        }
        let was_holding = {
            let mut guard = self.inner.until.lock().unwrap_or_else(PoisonError::into_inner);
            let was_holding = guard.is_some_and(|current| now < current);
            *guard = Some(guard.map_or(until, |current| if was_holding { current.max(until) } else { until }));
            was_holding
        };
        if !was_holding {
            self.inner.terms.send_modify(|term| *term += 1);
        }
    }

    /// Closes the fence at once.
    pub(crate) fn revoke(&self) {
        *self.inner.until.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Leadership terms started so far (0 before the first).
    pub fn terms(&self) -> watch::Receiver<u64> {
        self.inner.terms.subscribe()
    }

    /// Yields once each time a new term starts: the new leader then passes
    /// over every Server (requeues of the previous leader died with it).
    pub(crate) fn new_terms(&self) -> impl Stream<Item = ()> + Send + 'static {
        let mut terms = self.terms();
        // A term that started before the stream did counts too.
        let started = *terms.borrow_and_update() > 0;
        futures_util::stream::unfold((terms, started), |(mut terms, pending)| async move {
            if !pending {
                terms.changed().await.ok()?;
            }
            Some(((), (terms, false)))
        })
    }
}

/// A client that sends reads as `client` would and refuses every write
/// (POST, PUT, PATCH, DELETE) while the fence does not hold.
pub(crate) fn fenced_client(client: Client, fence: Fence) -> Client {
    let namespace = client.default_namespace().to_owned();
    let service = tower::service_fn(move |request: http::Request<Body>| {
        let (client, fence) = (client.clone(), fence.clone());
        async move {
            if !is_read(request.method()) && !fence.holds() {
                return Err(tower::BoxError::from(NOT_LEADER));
            }
            client.send(request).await.map_err(tower::BoxError::from)
        }
    });
    Client::new(service, namespace)
}

fn is_read(method: &http::Method) -> bool {
    matches!(*method, http::Method::GET | http::Method::HEAD | http::Method::OPTIONS)
}

/// A cloud port that refuses every call while the fence does not hold.
/// The refusal is an answer that proves nothing was sent (a 503 from this
/// side of the wire); what the core makes of it are writes, which the
/// fenced client refuses too.
pub(crate) struct FencedCloud {
    pub(crate) cloud: Arc<dyn CloudPort>,
    pub(crate) fence: Fence,
}

impl FencedCloud {
    fn check(&self) -> Result<(), CloudError> {
        if self.fence.holds() {
            Ok(())
        } else {
            Err(CloudError::Unavailable { status: 503, message: NOT_LEADER.into() })
        }
    }
}

impl CloudPort for FencedCloud {
    fn create<'a>(
        &'a self,
        identity: &'a IdentityContext,
        request: &'a CreateRequest,
    ) -> PortFuture<'a, ProviderServer> {
        Box::pin(async move {
            self.check()?;
            self.cloud.create(identity, request).await
        })
    }

    fn delete<'a>(&'a self, identity: &'a IdentityContext, server: &'a ServerRef) -> PortFuture<'a, DeleteProgress> {
        Box::pin(async move {
            self.check()?;
            self.cloud.delete(identity, server).await
        })
    }

    fn get<'a>(
        &'a self,
        identity: &'a IdentityContext,
        server: &'a ServerRef,
    ) -> PortFuture<'a, Option<ProviderServer>> {
        Box::pin(async move {
            self.check()?;
            self.cloud.get(identity, server).await
        })
    }

    /// Settings are not a cloud call: a follower keeps them current too.
    fn apply_region_settings(&self, settings: &server_core::port::RegionSettings) {
        self.cloud.apply_region_settings(settings);
    }

    fn list<'a>(&'a self, identity: &'a IdentityContext) -> PortFuture<'a, Vec<ProviderServer>> {
        Box::pin(async move {
            self.check()?;
            self.cloud.list(identity).await
        })
    }

    fn attachments<'a>(
        &'a self,
        identity: &'a IdentityContext,
        server: &'a ServerRef,
    ) -> PortFuture<'a, Vec<AttachedResource>> {
        Box::pin(async move {
            self.check()?;
            self.cloud.attachments(identity, server).await
        })
    }

    fn release<'a>(&'a self, identity: &'a IdentityContext, resource: &'a AttachedResource) -> PortFuture<'a, ()> {
        Box::pin(async move {
            self.check()?;
            self.cloud.release(identity, resource).await
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::StreamExt;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_fence_closes_by_itself_at_its_deadline() {
        let fence = Fence::closed();
        assert!(!fence.holds());
        fence.extend(Instant::now() + Duration::from_secs(10));
        assert!(fence.holds());
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(fence.holds());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!fence.holds(), "a leader that was not renewed must stop at its deadline");
    }

    #[tokio::test(start_paused = true)]
    async fn extending_never_shortens_and_revoking_closes_at_once() {
        let fence = Fence::closed();
        fence.extend(Instant::now() + Duration::from_secs(10));
        fence.extend(Instant::now() + Duration::from_secs(5));
        tokio::time::advance(Duration::from_secs(7)).await;
        assert!(fence.holds());
        fence.revoke();
        assert!(!fence.holds());
        assert!(Fence::open().holds());
    }

    #[tokio::test(start_paused = true)]
    async fn a_term_starts_each_time_a_closed_fence_opens() {
        let fence = Fence::closed();
        let mut terms = fence.new_terms().boxed();
        fence.extend(Instant::now() + Duration::from_secs(10));
        fence.extend(Instant::now() + Duration::from_secs(11));
        assert_eq!(*fence.terms().borrow(), 1, "a renewal is not a new term");
        assert_eq!(terms.next().await, Some(()));
        tokio::time::advance(Duration::from_secs(20)).await;
        fence.extend(Instant::now() + Duration::from_secs(10));
        assert_eq!(*fence.terms().borrow(), 2, "reacquiring after expiry is a new term");
        assert_eq!(terms.next().await, Some(()));
    }
}
