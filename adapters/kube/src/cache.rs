//! Reflector caches: the Servers in scope (trimmed, see `cached`), whose
//! watch also feeds the wake rule, and the kinds a pass reads but does not
//! own: each consumed kind of `consumed::CONSUMED_KINDS` and the
//! OpenstackIdentities, one list and one watch per kind over the
//! controller's namespace scope for the operator's lifetime.
//!
//! Without them every pass would read the consumed kinds itself (five
//! requests, each list returning every object of the namespace: O(Servers)
//! per pass, O(Servers²) per resync). A cache lags the API server: an object it holds may be
//! outdated, and one it lacks may only be new. Writes built from it carry its
//! resourceVersion as precondition, so the first case ends in a Conflict and
//! a retry; the second is confirmed with a live read where acting on the
//! absence would be wrong (see `facts`).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use futures_util::future::{self, BoxFuture};
use futures_util::{FutureExt, StreamExt};
use kube::Client;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use server_core::model::ResourceKind;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tracing::info;

use crate::cached::CachedServer;
use crate::consumed::{CONSUMED_KINDS, Finalizers, Found, Keep, KindCache, reflect};
use crate::crd::OpenstackIdentity;
use crate::error::Error;
use crate::kube_api::{FixedBackoff, WatchSettings, scoped_api};
use crate::shutdown::Shutdown;
use crate::wake::wake_stream;

/// The Servers the wake rule lets through, for the controller.
pub(crate) type Wakes = UnboundedReceiver<Arc<CachedServer>>;

/// Read handles on the caches; cloning shares them.
#[derive(Clone, Debug)]
pub(crate) struct Caches {
    /// The Servers in scope, trimmed (see [`CachedServer`]).
    pub(crate) servers: Store<CachedServer>,
    /// The consumed kinds, one cache each (see [`CONSUMED_KINDS`]).
    consumed: BTreeMap<ResourceKind, Arc<dyn KindCache>>,
    /// The clouds' identity source, by identity ID.
    openstack_identities: Store<OpenstackIdentity>,
}

impl Caches {
    /// The caches of `namespace` (all namespaces when `None`), the wakes of
    /// the Server watch, and the future that fills them: it lists and
    /// watches each kind, retrying a failed watch as `watch` says, and never
    /// ends on its own.
    pub(crate) fn start(
        client: &Client,
        namespace: Option<&str>,
        watch: &WatchSettings,
        healthy: Arc<tokio::sync::watch::Sender<bool>>,
        observed: ServerObserved,
    ) -> (Caches, Wakes, impl Future<Output = ()> + Send + 'static) {
        let mut reflectors = Vec::new();
        let (servers, wakes) = watch_servers(client, namespace, watch, healthy, observed, &mut reflectors);
        let caches = Caches {
            servers,
            consumed: CONSUMED_KINDS
                .iter()
                .map(|ops| (ops.kind(), ops.cache(client, namespace, watch, &mut reflectors)))
                .collect(),
            openstack_identities: reflect(client, namespace, watch, &mut reflectors),
        };
        (caches, wakes, future::join_all(reflectors).map(|_| ()))
    }

    /// Resolves once every cache holds its initial list.
    async fn ready(&self) -> Result<(), reflector::store::WriterDropped> {
        tokio::try_join!(
            self.servers.wait_until_ready(),
            self.openstack_identities.wait_until_ready(),
            future::try_join_all(self.consumed.values().map(|cache| cache.ready())),
        )?;
        Ok(())
    }

    /// How far the cache of `kind` has caught up (see `freshness`).
    pub(crate) fn applied(&self, kind: ResourceKind) -> u64 {
        self.consumed.get(&kind).map_or(0, |cache| cache.applied())
    }

    pub(crate) fn openstack_identity(&self, namespace: &str, name: &str) -> Option<Arc<OpenstackIdentity>> {
        self.openstack_identities.get(&ObjectRef::new(name).within(namespace))
    }

    /// The cached objects of `kind` in `namespace` that `keep` accepts, in
    /// name order, with the finalizers `finalizers` picks.
    pub(crate) fn consumed(
        &self,
        kind: ResourceKind,
        namespace: &str,
        keep: Keep<'_>,
        finalizers: Finalizers<'_>,
    ) -> Vec<Found> {
        self.consumed.get(&kind).map(|cache| cache.select(namespace, keep, finalizers)).unwrap_or_default()
    }
}

/// The Server cache and the wakes of the wake rule, fed by one watch whose
/// future is pushed onto `reflectors`. A failing watch turns `healthy`
/// (the readiness) false until it delivers again.
fn watch_servers(
    client: &Client,
    namespace: Option<&str>,
    watch: &WatchSettings,
    healthy: Arc<tokio::sync::watch::Sender<bool>>,
    observed: ServerObserved,
    reflectors: &mut Vec<BoxFuture<'static, ()>>,
) -> (Store<CachedServer>, Wakes) {
    let config = watcher::Config::default().page_size(watch.server_page_size);
    let events =
        watcher(scoped_api::<CachedServer>(client.clone(), namespace), config).backoff(FixedBackoff(watch.retry));
    let (store, woken) = server_wakes(events, healthy, observed);
    let (sender, wakes) = unbounded_channel();
    reflectors.push(
        woken
            .for_each(move |server| {
                // Nobody takes wakes when only the monitor runs.
                let _ = sender.send(server);
                future::ready(())
            })
            .boxed(),
    );
    (store, wakes)
}

/// Told of a Server the watch changed (its uid and resourceVersion) once the
/// cache holds that copy. Not of a relist's objects: the store takes them in
/// only when the relist ends, and until then serves the copies from before.
pub(crate) type ServerObserved = Arc<dyn Fn(&str, &str) + Send + Sync>;

/// A Server cache fed by `events`, and the Servers the wake rule lets
/// through, read from that cache once it holds them. `observed` hears of
/// each Server a watch event changed in the cache.
pub(crate) fn server_wakes<S>(
    events: S,
    healthy: Arc<tokio::sync::watch::Sender<bool>>,
    observed: ServerObserved,
) -> (Store<CachedServer>, impl futures_util::Stream<Item = Arc<CachedServer>> + Send + 'static)
where
    S: futures_util::Stream<Item = Result<watcher::Event<CachedServer>, watcher::Error>> + Send + 'static,
{
    let (store, writer) = reflector::store();
    // Only a failure of a ready operator is taken back; readiness itself is
    // the caller's to declare.
    let mut failing = false;
    let events = events.reflect(writer).inspect(move |event| match event {
        Err(_) => {
            healthy.send_if_modified(|ready| {
                failing |= *ready;
                std::mem::replace(ready, false)
            });
        }
        Ok(event) => {
            if let watcher::Event::Apply(server) = event
                && let (Some(uid), Some(version)) = (&server.metadata.uid, &server.metadata.resource_version)
            {
                observed(uid, version);
            }
            if failing && !matches!(event, watcher::Event::Init | watcher::Event::InitApply(_)) {
                failing = false;
                healthy.send_replace(true);
            }
        }
    });
    let woken = wake_stream(events, store.clone());
    (store, woken)
}

/// Runs `work` over filled caches of `namespace` and the Server wakes: starts the reflectors,
/// waits until every cache holds its initial list (or for `shutdown`, then
/// returns without running `work`), runs `work` and stops the reflectors once
/// it returns, so they live exactly as long as the loops reading them.
pub(crate) async fn with_caches<W, F>(
    client: &Client,
    namespace: Option<&str>,
    watch: &WatchSettings,
    healthy: Arc<tokio::sync::watch::Sender<bool>>,
    observed: ServerObserved,
    shutdown: Shutdown,
    work: W,
) -> Result<(), Error>
where
    W: FnOnce(Caches, Wakes) -> F,
    F: Future<Output = Result<(), Error>>,
{
    let (caches, wakes, reflectors) = Caches::start(client, namespace, watch, healthy, observed);
    let work = async {
        tokio::select! {
            ready = caches.ready() => ready.map_err(|e| Error::Cache(e.to_string()))?,
            () = shutdown => return Ok(()),
        }
        info!(namespace = namespace.unwrap_or("<all>"), "caches of consumed resources ready");
        work(caches.clone(), wakes).await
    };
    tokio::select! {
        result = work => result,
        // Watchers retry forever; this only guards against a future change.
        () = reflectors => Err(Error::Cache("the watches of consumed resources ended".into())),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use futures_util::{StreamExt, stream};

    use super::*;
    use crate::crd::{Server, ServerResourceSpec};

    fn at(uid: &str, version: &str) -> CachedServer {
        let mut server = Server::new(uid, ServerResourceSpec::default());
        server.metadata.uid = Some(uid.into());
        server.metadata.resource_version = Some(version.into());
        server.metadata.namespace = Some("ns".into());
        CachedServer::new(server)
    }

    /// A relisted copy is observed only through a later change: while the
    /// relist runs, the store still serves the copy from before it.
    #[tokio::test]
    async fn only_changes_the_store_holds_are_observed() {
        let events = stream::iter([
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(at("uid-a", "6"))),
            Ok(watcher::Event::InitDone),
            Ok(watcher::Event::Apply(at("uid-b", "7"))),
            Ok(watcher::Event::Delete(at("uid-c", "8"))),
        ]);
        let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
        let record = seen.clone();
        let observed: ServerObserved = Arc::new(move |uid, version| {
            record.lock().expect("not poisoned").push((uid.to_owned(), version.to_owned()))
        });
        let (_store, woken) = server_wakes(events, Arc::new(tokio::sync::watch::channel(true).0), observed);
        woken.for_each(|_| async {}).await;
        assert_eq!(*seen.lock().expect("not poisoned"), vec![("uid-b".to_owned(), "7".to_owned())]);
    }
}
