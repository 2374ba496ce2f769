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
//! The fence is enforced at the two doors every effect goes through, for
//! one term at a time (`crate::term`): the Kubernetes client
//! ([`fenced_client`] checks every write as it is sent) and each region's
//! cloud port, which checks [`TermGate`] before every request it sends
//! (and [`FencedCloud`] before every call). A term's doors stay shut once
//! the term is over, even when a later term of the same replica has begun.
//! Reads of the API stay open, so a follower keeps its caches warm.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::Stream;
use kube::Client;
use kube::client::Body;
use server_core::port::{
    AttachedResource, CloudError, CloudPort, CreateRequest, DeleteProgress, IdentityContext, ListScope, PortFuture,
    ProviderListing, ProviderServer, RebuildRequest, RequestGate, ServerRef, Term,
};
use tokio::sync::watch;
use tokio::time::Instant;

/// Why a write or a cloud call was not sent.
pub(crate) const NOT_LEADER: &str = "not sent: this replica does not hold the leader lease";

/// The error a fenced client answers a write with when the fence is closed;
/// found by type (`error::api_cause`), never by its words.
#[derive(Debug, thiserror::Error)]
#[error("{NOT_LEADER}")]
pub(crate) struct NotLeader;

/// A request is not sent when the fence leaves it less than this (or less
/// than its own timeout, if shorter): it would be cut off before an answer
/// could come, and a create cut off is one of unknown fate.
pub(crate) const MIN_REQUEST_TIME: Duration = Duration::from_millis(500);

/// Whether this replica may act; clones share one fence.
#[derive(Clone)]
pub struct Fence {
    inner: Arc<FenceState>,
}

struct FenceState {
    /// Without leader election the fence is always open.
    always_open: bool,
    /// Until when acting is allowed, and which term that is.
    held: Mutex<Held>,
    /// Counts leadership terms: a new term starts when a closed fence opens.
    terms: watch::Sender<u64>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Held {
    /// Acting is allowed strictly before this instant.
    until: Option<Instant>,
    /// The term the fence is (or was last) open for; 0 before the first.
    term: u64,
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
        Fence { inner: Arc::new(FenceState { always_open, held: Mutex::default(), terms: watch::channel(0).0 }) }
    }

    /// Whether this replica may act now.
    pub fn holds(&self) -> bool {
        self.holds_at(Instant::now())
    }

    fn holds_at(&self, now: Instant) -> bool {
        self.inner.always_open || self.until().is_some_and(|until| now < until)
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.inner.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn until(&self) -> Option<Instant> {
        self.held().until
    }

    /// The term this replica acts in now, if it may act (always 0 without
    /// leader election).
    pub(crate) fn held_term(&self) -> Option<u64> {
        let held = *self.held();
        (self.inner.always_open || held.until.is_some_and(|until| Instant::now() < until)).then_some(held.term)
    }

    /// Whether `term` is the term this replica acts in now.
    pub(crate) fn holds_term(&self, term: u64) -> bool {
        self.admit(term, Duration::ZERO).is_some()
    }

    /// Whether the fence is open without an election (it never closes).
    pub(crate) fn always_open(&self) -> bool {
        self.inner.always_open
    }

    /// How long an act of `term` taking `timeout` may run if it starts now:
    /// `None` when `term` is over (the fence closed, or opened again for a
    /// later term) or the fence leaves less than [`MIN_REQUEST_TIME`] (or
    /// `timeout`, if shorter); else `timeout`, cut to end when the fence
    /// closes unless renewed. Never a deadline past the fence, which closes
    /// lease duration − renew deadline before another replica may start.
    pub(crate) fn admit(&self, term: u64, timeout: Duration) -> Option<Duration> {
        if self.inner.always_open {
            return Some(timeout);
        }
        let held = *self.held();
        let left = held.until?.checked_duration_since(Instant::now())?;
        (held.term == term && left >= timeout.min(MIN_REQUEST_TIME)).then_some(timeout.min(left))
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
        let started = {
            let mut held = self.held();
            let was_holding = held.until.is_some_and(|current| now < current);
            held.until = Some(held.until.map_or(until, |current| if was_holding { current.max(until) } else { until }));
            if !was_holding {
                held.term += 1;
            }
            (!was_holding).then_some(held.term)
        };
        if let Some(term) = started {
            self.inner.terms.send_replace(term);
        }
    }

    /// Closes the fence at once.
    pub(crate) fn revoke(&self) {
        self.held().until = None;
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

/// A client that sends reads as `client` would and sends a write (POST, PUT,
/// PATCH, DELETE) only while `term` is the term this replica acts in, each
/// write checked as it is sent and given up when the fence closes.
pub(crate) fn fenced_client(client: Client, fence: Fence, term: u64) -> Client {
    let namespace = client.default_namespace().to_owned();
    let service = tower::service_fn(move |request: http::Request<Body>| {
        let (client, fence) = (client.clone(), fence.clone());
        async move {
            if is_read(request.method()) {
                return client.send(request).await.map_err(tower::BoxError::from);
            }
            let Some(left) = fence.admit(term, Duration::MAX) else {
                return Err(tower::BoxError::from(NotLeader));
            };
            match tokio::time::timeout(left, client.send(request)).await {
                Ok(sent) => sent.map_err(tower::BoxError::from),
                Err(_) => Err(tower::BoxError::from("no answer before this replica's fence closed")),
            }
        }
    });
    Client::new(service, namespace)
}

fn is_read(method: &http::Method) -> bool {
    matches!(*method, http::Method::GET | http::Method::HEAD | http::Method::OPTIONS)
}

/// The gate a term's cloud ports check before each request they send.
#[derive(Clone, Debug)]
pub(crate) struct TermGate {
    pub(crate) fence: Fence,
    pub(crate) term: u64,
}

impl RequestGate for TermGate {
    fn admit(&self, timeout: Duration) -> Option<Duration> {
        self.fence.admit(self.term, timeout)
    }
}

/// A cloud port of one term that refuses every call once that term is
/// over. The port itself checks each request it sends (one call may be
/// many); this check covers ports whose call is one request. The refusal
/// is an answer that proves nothing was sent (a 503 from this side of the
/// wire); what the core makes of it are writes, which the term's client
/// refuses too.
pub(crate) struct FencedCloud {
    pub(crate) cloud: Arc<dyn CloudPort>,
    pub(crate) gate: TermGate,
}

impl FencedCloud {
    fn check(&self) -> Result<(), CloudError> {
        if self.gate.fence.holds_term(self.gate.term) {
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

    fn rebuild<'a>(&'a self, identity: &'a IdentityContext, request: &'a RebuildRequest) -> PortFuture<'a, ()> {
        Box::pin(async move {
            self.check()?;
            self.cloud.rebuild(identity, request).await
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

    /// Not a cloud call: what the term's port remembers.
    fn boot_read(&self, identity: &IdentityContext, uid: &str) -> Option<jiff::Timestamp> {
        self.cloud.boot_read(identity, uid)
    }

    /// Settings are not a cloud call: a follower keeps them current too.
    fn apply_region_settings(&self, settings: &server_core::port::RegionSettings) {
        self.cloud.apply_region_settings(settings);
    }

    fn list<'a>(&'a self, identity: &'a IdentityContext, scope: ListScope) -> PortFuture<'a, ProviderListing> {
        Box::pin(async move {
            self.check()?;
            self.cloud.list(identity, scope).await
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

    fn networking<'a>(
        &'a self,
        identity: &'a IdentityContext,
        query: &'a server_core::port::NetworkingQuery,
    ) -> PortFuture<'a, server_core::port::Networking> {
        Box::pin(async move {
            self.check()?;
            self.cloud.networking(identity, query).await
        })
    }

    fn update_port<'a>(
        &'a self,
        identity: &'a IdentityContext,
        update: &'a server_core::port::PortUpdate,
    ) -> PortFuture<'a, ()> {
        Box::pin(async move {
            self.check()?;
            self.cloud.update_port(identity, update).await
        })
    }

    fn ensure_floating_ip<'a>(
        &'a self,
        identity: &'a IdentityContext,
        request: &'a server_core::port::FloatingIpRequest,
    ) -> PortFuture<'a, ()> {
        Box::pin(async move {
            self.check()?;
            self.cloud.ensure_floating_ip(identity, request).await
        })
    }

    /// Already one term's port.
    fn for_term(&self, term: &Term) -> Arc<dyn CloudPort> {
        let gate = TermGate { fence: self.gate.fence.clone(), term: term.number };
        Arc::new(FencedCloud { cloud: self.cloud.for_term(term), gate })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::StreamExt;
    use kube::api::{Api, Patch, PatchParams};
    use server_core::{ApiCause, NotSent};

    use super::*;
    use crate::error::api_cause;

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

    #[tokio::test(start_paused = true)]
    async fn a_request_is_admitted_only_in_its_term_and_never_past_the_fence() {
        let fence = Fence::closed();
        let thirty = Duration::from_secs(30);
        assert_eq!(fence.admit(1, thirty), None, "closed");
        fence.extend(Instant::now() + Duration::from_secs(10));
        assert_eq!(fence.admit(1, thirty), Some(Duration::from_secs(10)), "cut to the fence");
        assert_eq!(fence.admit(1, Duration::from_secs(2)), Some(Duration::from_secs(2)));
        tokio::time::advance(Duration::from_millis(9_700)).await;
        assert_eq!(fence.admit(1, thirty), None, "too little left to wait for an answer");
        assert_eq!(fence.admit(1, Duration::from_millis(200)), Some(Duration::from_millis(200)));
        tokio::time::advance(Duration::from_secs(1)).await;
        fence.extend(Instant::now() + Duration::from_secs(10));
        assert_eq!(fence.admit(1, thirty), None, "term 1 is over, though this replica leads again");
        assert!(fence.admit(2, thirty).is_some());
        assert_eq!(Fence::open().admit(0, thirty), Some(thirty));
    }

    /// A client that would answer every request; the fence must stop writes
    /// before it.
    fn answering_client() -> Client {
        let service = tower::service_fn(|_request: http::Request<Body>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(Body::empty()))
        });
        Client::new(service, "ns")
    }

    #[tokio::test]
    async fn a_write_past_the_fence_is_not_sent_and_says_so_by_type() {
        let client = fenced_client(answering_client(), Fence::closed(), 1);
        let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client, "ns");
        let patch = Patch::Merge(serde_json::json!({"data": {"k": "v"}}));
        let error = api.patch("cm", &PatchParams::default(), &patch).await.err();
        let cause = error.as_ref().map(api_cause);
        assert_eq!(cause, Some(ApiCause::NotSent(NotSent::NotLeading)), "{error:?}");
    }
}
