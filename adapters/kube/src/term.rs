//! A leadership term and everything a replica remembers while it acts.
//!
//! Between two terms of this replica another replica may have led and
//! changed anything: created the server a list of ours called absent,
//! added the reference our last write removed. So what a replica learns by
//! acting (besides the watch caches, which follow the API server whatever
//! happens) belongs to one [`Term`]: it is made when the term starts, and
//! dropped when the term ends. A pass or a poll reaches the cloud, the API's
//! writes, the listings, the reference writer and the event series only
//! through the term it started in ([`Terms::current`]); there is no other
//! copy of them to forget to reset. DESIGN, "Availability", lists each
//! piece and why it is, or is not, term-scoped.

use std::sync::{Arc, Mutex, PoisonError};

use kube::Client;

use crate::cloud::{CloudRegistry, ProviderListings};
use crate::config::ControllerConfig;
use crate::events::EventPublisher;
use crate::fence::{Fence, fenced_client};
use crate::freshness::TermFloors;
use crate::metrics::Metrics;
use crate::own_writes::{OwnWrites, PassesInFlight};
use crate::references::ReferenceWriter;

/// One leadership term: what the replica may act through, and what it
/// learns while it does, all of it dropped with the term.
pub(crate) struct Term {
    /// The fence's count of this replica's terms (0 without election).
    pub(crate) number: u64,
    /// The API client of the term: reads as any, and each write sent only
    /// while this term lasts.
    pub(crate) client: Client,
    /// Each region's cloud port for this term: its memory of the cloud (the
    /// OpenStack uid index) starts empty, and each request it sends is
    /// checked against this term's fence.
    pub(crate) clouds: CloudRegistry,
    /// The monitor's lists and this term's create answers.
    pub(crate) listings: ProviderListings,
    /// The reference writer: the finalizer lists it last wrote or read.
    pub(crate) references: Arc<ReferenceWriter>,
    /// What a cache of a consumed kind must have caught up with to answer a
    /// release (this term's live lists and reference writes).
    pub(crate) floors: Arc<TermFloors>,
    /// The Event series this term continues.
    pub(crate) events: EventPublisher,
    /// What this term has said it could not read, per Server uid.
    pub(crate) unread_said: UnreadSaid,
    /// The versions of each Server this term's last pass wrote over.
    pub(crate) own_writes: OwnWrites,
    /// The Servers a pass of this term is acting on.
    pub(crate) passes: PassesInFlight,
}

/// What was said, per Server, about values it holds that could not be read
/// (read as something else), so each is said once, not on every pass.
#[derive(Debug, Default)]
pub(crate) struct UnreadSaid {
    said: Mutex<std::collections::HashMap<String, Vec<String>>>,
}

/// Past this many Servers the memory is cleared: at worst a Server's
/// unreadable values are said once more.
const MAX_UNREAD_SAID: usize = 50_000;

impl UnreadSaid {
    /// Whether `unread` (paths) of the Server `uid` is news: not said yet.
    /// An empty list forgets the Server (its values were fixed).
    pub(crate) fn first_time(&self, uid: &str, unread: &[String]) -> bool {
        let mut said = self.said.lock().unwrap_or_else(PoisonError::into_inner);
        if unread.is_empty() {
            said.remove(uid);
            return false;
        }
        if said.get(uid).is_some_and(|known| known.as_slice() == unread) {
            return false;
        }
        if said.len() >= MAX_UNREAD_SAID {
            said.clear();
        }
        said.insert(uid.to_owned(), unread.to_vec());
        true
    }
}

impl std::fmt::Debug for Term {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Term").field("number", &self.number).finish_non_exhaustive()
    }
}

/// Makes each term as it starts, and hands out the current one.
pub(crate) struct Terms {
    fence: Fence,
    /// The unfenced client each term's client wraps.
    client: Client,
    /// The clouds as registered; each term takes its own ports from them.
    clouds: CloudRegistry,
    config: ControllerConfig,
    metrics: Arc<dyn Metrics>,
    current: Mutex<Option<Arc<Term>>>,
}

impl std::fmt::Debug for Terms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terms").field("fence", &self.fence).finish_non_exhaustive()
    }
}

impl Terms {
    pub(crate) fn new(
        fence: Fence,
        client: Client,
        clouds: CloudRegistry,
        config: ControllerConfig,
        metrics: Arc<dyn Metrics>,
    ) -> Self {
        Terms { fence, client, clouds, config, metrics, current: Mutex::default() }
    }

    /// The clouds as registered (their Region settings are the process's).
    pub(crate) fn registered_clouds(&self) -> &CloudRegistry {
        &self.clouds
    }

    /// The term this replica acts in now, made on first use in the term;
    /// `None` (and the last term dropped) while it may not act.
    pub(crate) fn current(&self) -> Option<Arc<Term>> {
        let held = self.fence.held_term();
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(number) = held else {
            *current = None;
            return None;
        };
        match current.as_ref() {
            Some(term) if term.number == number => Some(term.clone()),
            _ => {
                let term = Arc::new(self.start(number));
                tracing::debug!(term = number, "a leadership term started: nothing remembered from an earlier one");
                *current = Some(term.clone());
                Some(term)
            }
        }
    }

    /// The Server watch brought Server `uid` at `version`: the term that
    /// acts now (none is started for it) learns its cache caught up.
    pub(crate) fn server_observed(&self, uid: &str, version: &str) {
        let current = self.current.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if let Some(term) = current {
            term.own_writes.observed(uid, version);
        }
    }

    fn start(&self, number: u64) -> Term {
        let client = if self.fence.always_open() {
            self.client.clone()
        } else {
            fenced_client(self.client.clone(), self.fence.clone(), number)
        };
        let config = &self.config;
        let floors = Arc::new(TermFloors::default());
        Term {
            number,
            clouds: self.clouds.for_term(&self.fence, number),
            listings: ProviderListings::default(),
            references: ReferenceWriter::new(
                client.clone(),
                config.reference_patch,
                self.metrics.clone(),
                floors.clone(),
            ),
            floors,
            events: EventPublisher::new(client.clone(), config.reporting_instance.clone()),
            unread_said: UnreadSaid::default(),
            own_writes: OwnWrites::default(),
            passes: PassesInFlight::default(),
            client,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use jiff::Timestamp;
    use kube::client::Body;
    use server_core::ProviderView;
    use server_core::port::{
        AttachedResource, CloudError, CloudPort, CreateRequest, DeleteProgress, IdentityContext, ListScope, PortFuture,
        ProviderListing, ProviderServer, RebuildRequest, ServerRef, Term as PortTerm,
    };
    use tokio::time::Instant;

    use super::*;
    use crate::RegionCloud;

    /// A port that records the terms it was taken for; every call succeeds.
    #[derive(Default)]
    struct Recording {
        terms: Arc<Mutex<Vec<u64>>>,
    }

    impl CloudPort for Recording {
        fn create<'a>(&'a self, _: &'a IdentityContext, _: &'a CreateRequest) -> PortFuture<'a, ProviderServer> {
            Box::pin(async { Ok(ProviderServer::default()) })
        }
        fn delete<'a>(&'a self, _: &'a IdentityContext, _: &'a ServerRef) -> PortFuture<'a, DeleteProgress> {
            Box::pin(async { Ok(DeleteProgress::Gone) })
        }
        fn rebuild<'a>(&'a self, _: &'a IdentityContext, _: &'a RebuildRequest) -> PortFuture<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn get<'a>(&'a self, _: &'a IdentityContext, _: &'a ServerRef) -> PortFuture<'a, Option<ProviderServer>> {
            Box::pin(async { Ok(None) })
        }
        fn boot_read(&self, _: &IdentityContext, _: &str) -> Option<jiff::Timestamp> {
            None
        }
        fn list<'a>(&'a self, _: &'a IdentityContext, _: ListScope) -> PortFuture<'a, ProviderListing> {
            Box::pin(async { Ok(ProviderListing::default()) })
        }
        fn attachments<'a>(
            &'a self,
            _: &'a IdentityContext,
            _: &'a ServerRef,
        ) -> PortFuture<'a, Vec<AttachedResource>> {
            Box::pin(async { Ok(Vec::new()) })
        }
        fn release<'a>(&'a self, _: &'a IdentityContext, _: &'a AttachedResource) -> PortFuture<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn networking<'a>(
            &'a self,
            _: &'a IdentityContext,
            _: &'a server_core::port::NetworkingQuery,
        ) -> PortFuture<'a, server_core::port::Networking> {
            Box::pin(async { Ok(server_core::port::Networking::default()) })
        }
        fn update_port<'a>(
            &'a self,
            _: &'a IdentityContext,
            _: &'a server_core::port::PortUpdate,
        ) -> PortFuture<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn ensure_floating_ip<'a>(
            &'a self,
            _: &'a IdentityContext,
            _: &'a server_core::port::FloatingIpRequest,
        ) -> PortFuture<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn for_term(&self, term: &PortTerm) -> Arc<dyn CloudPort> {
            self.terms.lock().unwrap_or_else(PoisonError::into_inner).push(term.number);
            Arc::new(Recording { terms: self.terms.clone() })
        }
    }

    /// A client no test sends anything with.
    fn client() -> Client {
        let service = tower::service_fn(|_: http::Request<Body>| async {
            Err::<http::Response<Body>, tower::BoxError>("no API server in this test".into())
        });
        Client::new(service, "default")
    }

    #[test]
    fn what_could_not_be_read_is_said_once_per_server_until_it_changes() {
        let said = UnreadSaid::default();
        let paths = vec!["status.conditions[0].status".to_owned()];
        assert!(said.first_time("u1", &paths));
        assert!(!said.first_time("u1", &paths), "not on every pass");
        assert!(said.first_time("u2", &paths), "another Server");
        assert!(!said.first_time("u1", &[]), "fixed: nothing to say");
        assert!(said.first_time("u1", &paths), "broken again: said again");
    }

    fn key() -> crate::cloud::GroupKey {
        ("ns".into(), "region".into(), "identity".into())
    }

    #[tokio::test(start_paused = true)]
    async fn each_term_starts_with_nothing_remembered_and_acts_only_while_it_lasts() {
        let fence = Fence::closed();
        let port = Recording::default();
        let taken = port.terms.clone();
        let clouds = CloudRegistry::new().with("region", RegionCloud::openstack(Arc::new(port)));
        let terms =
            Terms::new(fence.clone(), client(), clouds, ControllerConfig::default(), Arc::new(crate::NoMetrics));
        assert!(terms.current().is_none(), "no term before the lease is held");

        fence.extend(Instant::now() + Duration::from_secs(10));
        let first = terms.current().expect("a term while leading");
        assert!(Arc::ptr_eq(&first, &terms.current().expect("the same term")), "one term, one memory");
        first.listings.record_list(key(), Timestamp::UNIX_EPOCH, Vec::new());
        assert_eq!(first.listings.view(&key(), "t"), Some((ProviderView::Absent, Timestamp::UNIX_EPOCH)));

        fence.revoke();
        assert!(terms.current().is_none(), "the term is dropped when leadership is lost");
        fence.extend(Instant::now() + Duration::from_secs(10));
        let second = terms.current().expect("leading again");
        assert_eq!((first.number, second.number), (1, 2));
        assert_eq!(second.listings.view(&key(), "t"), None, "the earlier term's list is not the new term's");
        assert!(!Arc::ptr_eq(&first.references, &second.references), "nor its reference writer");
        assert_eq!(*taken.lock().unwrap_or_else(PoisonError::into_inner), vec![1, 2], "a port per term");

        // The first term's cloud is shut although this replica leads again.
        let identity = IdentityContext::default();
        let old = first.clouds.get("region").expect("the region").port.clone();
        let refused = old.list(&identity, ListScope::Complete).await;
        assert!(matches!(refused, Err(CloudError::Unavailable { status: 503, .. })), "{refused:?}");
        let new = second.clouds.get("region").expect("the region").port.clone();
        assert!(new.list(&identity, ListScope::Complete).await.is_ok());
    }
}
