//! Reflector caches: the Servers in scope (trimmed, see `cached`), whose
//! watch also feeds the wake rule, and the kinds a pass reads but does not own: Identities,
//! Networks, SecurityGroups, SSHCertificateAuthorities and
//! OpenstackIdentities, one list and one watch per kind over the controller's
//! namespace scope for the operator's lifetime.
//!
//! They replace the reads every pass used to make (five requests, each list
//! returning every object of the namespace: O(Servers) per pass, O(Servers²)
//! per resync). A cache lags the API server: an object it holds may be
//! outdated, and one it lacks may only be new. Writes built from it carry its
//! resourceVersion as precondition, so the first case ends in a Conflict and
//! a retry; the second is confirmed with a live read where acting on the
//! absence would be wrong (see `facts`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{self, BoxFuture};
use futures_util::{FutureExt, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use server_core::model::{IDENTITY_LABEL, ResourceKind};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tracing::{info, warn};

use crate::cached::CachedServer;
use crate::crd::{Identity, Network, OpenstackIdentity, SSHCertificateAuthority, SecurityGroup};
use crate::error::{Error, watch_error_summary};
use crate::kube_api::{FixedBackoff, scoped_api};
use crate::shutdown::Shutdown;
use crate::wake::wake_stream;

/// A namespaced kind the operator reads through the API or a cache.
pub(crate) trait ConsumedKind:
    Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> ConsumedKind for K where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// How the watches list and retry.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WatchSettings {
    /// Delay before re-establishing a failed watch.
    pub(crate) retry: Duration,
    /// Objects per page of a (re)list.
    pub(crate) page_size: u32,
}

impl WatchSettings {
    pub(crate) fn of(config: &crate::config::ControllerConfig) -> Self {
        WatchSettings { retry: config.watch_retry_interval, page_size: config.watch_page_size }
    }
}

/// The Servers the wake rule lets through, for the controller.
pub(crate) type Wakes = UnboundedReceiver<Arc<CachedServer>>;

/// Read handles on the caches; cloning shares them.
#[derive(Clone, Debug)]
pub(crate) struct Caches {
    /// The Servers in scope, trimmed (see [`CachedServer`]).
    pub(crate) servers: Store<CachedServer>,
    identities: Store<Identity>,
    networks: Store<Network>,
    security_groups: Store<SecurityGroup>,
    ssh_certificate_authorities: Store<SSHCertificateAuthority>,
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
    ) -> (Caches, Wakes, impl Future<Output = ()> + Send + 'static) {
        let mut reflectors = Vec::new();
        let (servers, wakes) = watch_servers(client, namespace, watch, healthy, &mut reflectors);
        let caches = Caches {
            servers,
            identities: reflect(client, namespace, watch, &mut reflectors),
            networks: reflect(client, namespace, watch, &mut reflectors),
            security_groups: reflect(client, namespace, watch, &mut reflectors),
            ssh_certificate_authorities: reflect(client, namespace, watch, &mut reflectors),
            openstack_identities: reflect(client, namespace, watch, &mut reflectors),
        };
        (caches, wakes, future::join_all(reflectors).map(|_| ()))
    }

    /// Resolves once every cache holds its initial list.
    async fn ready(&self) -> Result<(), reflector::store::WriterDropped> {
        tokio::try_join!(
            self.servers.wait_until_ready(),
            self.identities.wait_until_ready(),
            self.networks.wait_until_ready(),
            self.security_groups.wait_until_ready(),
            self.ssh_certificate_authorities.wait_until_ready(),
            self.openstack_identities.wait_until_ready(),
        )?;
        Ok(())
    }

    /// The cached metadata of one consumed object a reference is held on.
    pub(crate) fn consumed_meta(&self, kind: ResourceKind, namespace: &str, name: &str) -> Option<ObjectMeta> {
        fn meta<K: ConsumedKind>(store: &Store<K>, namespace: &str, name: &str) -> Option<ObjectMeta> {
            store.get(&ObjectRef::new(name).within(namespace)).map(|object| object.meta().clone())
        }
        match kind {
            ResourceKind::Network => meta(&self.networks, namespace, name),
            ResourceKind::SecurityGroup => meta(&self.security_groups, namespace, name),
            ResourceKind::SshCertificateAuthority => meta(&self.ssh_certificate_authorities, namespace, name),
            ResourceKind::Identity => meta(&self.identities, namespace, name),
        }
    }

    pub(crate) fn identity(&self, namespace: &str, name: &str) -> Option<Arc<Identity>> {
        self.identities.get(&ObjectRef::new(name).within(namespace))
    }

    pub(crate) fn openstack_identity(&self, namespace: &str, name: &str) -> Option<Arc<OpenstackIdentity>> {
        self.openstack_identities.get(&ObjectRef::new(name).within(namespace))
    }

    /// Networks of `namespace` with the identity label `identity_id`, by name.
    pub(crate) fn networks(&self, namespace: &str, identity_id: &str) -> Vec<Arc<Network>> {
        select(&self.networks, namespace, Some(identity_id))
    }

    /// Security groups of `namespace` with the identity label `identity_id`, by name.
    pub(crate) fn security_groups(&self, namespace: &str, identity_id: &str) -> Vec<Arc<SecurityGroup>> {
        select(&self.security_groups, namespace, Some(identity_id))
    }

    /// Every Network, SecurityGroup and Identity of `namespace` whose
    /// finalizers hold `finalizer` and whose identity is not `identity_id`:
    /// references left from before a Server's identity label changed.
    pub(crate) fn held_under_other_identities(
        &self,
        namespace: &str,
        identity_id: &str,
        finalizer: &str,
    ) -> Vec<(ResourceKind, String)> {
        let held = |meta: &ObjectMeta| meta.finalizers.as_ref().is_some_and(|f| f.iter().any(|f| f == finalizer));
        let foreign = |meta: &ObjectMeta| {
            meta.labels.as_ref().and_then(|l| l.get(IDENTITY_LABEL)).map(String::as_str) != Some(identity_id)
        };
        let networks = select(&self.networks, namespace, None)
            .into_iter()
            .filter(|n| foreign(&n.metadata) && held(&n.metadata))
            .map(|n| (ResourceKind::Network, n.name_any()));
        let groups = select(&self.security_groups, namespace, None)
            .into_iter()
            .filter(|g| foreign(&g.metadata) && held(&g.metadata))
            .map(|g| (ResourceKind::SecurityGroup, g.name_any()));
        let identities = select(&self.identities, namespace, None)
            .into_iter()
            .filter(|i| i.metadata.name.as_deref() != Some(identity_id) && held(&i.metadata))
            .map(|i| (ResourceKind::Identity, i.name_any()));
        networks.chain(groups).chain(identities).collect()
    }

    /// Every SSH certificate authority of `namespace`, by name.
    pub(crate) fn ssh_certificate_authorities(&self, namespace: &str) -> Vec<Arc<SSHCertificateAuthority>> {
        select(&self.ssh_certificate_authorities, namespace, None)
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
    reflectors: &mut Vec<BoxFuture<'static, ()>>,
) -> (Store<CachedServer>, Wakes) {
    let config = watcher::Config::default().page_size(watch.page_size);
    let events =
        watcher(scoped_api::<CachedServer>(client.clone(), namespace), config).backoff(FixedBackoff(watch.retry));
    let (store, woken) = server_wakes(events, healthy);
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

/// A Server cache fed by `events`, and the Servers the wake rule lets
/// through, read from that cache once it holds them.
pub(crate) fn server_wakes<S>(
    events: S,
    healthy: Arc<tokio::sync::watch::Sender<bool>>,
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
        Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
        Ok(_) if failing => {
            failing = false;
            healthy.send_replace(true);
        }
        Ok(_) => {}
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
    shutdown: Shutdown,
    work: W,
) -> Result<(), Error>
where
    W: FnOnce(Caches, Wakes) -> F,
    F: Future<Output = Result<(), Error>>,
{
    let (caches, wakes, reflectors) = Caches::start(client, namespace, watch, healthy);
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

/// One kind's cache, and the future filling it pushed onto `reflectors`.
fn reflect<K: ConsumedKind>(
    client: &Client,
    namespace: Option<&str>,
    watch: &WatchSettings,
    reflectors: &mut Vec<BoxFuture<'static, ()>>,
) -> Store<K> {
    let (store, writer) = reflector::store();
    let config = watcher::Config::default().page_size(watch.page_size);
    let events = watcher(scoped_api::<K>(client.clone(), namespace), config)
        .backoff(FixedBackoff(watch.retry))
        // Nothing reads managed fields; dropping them keeps the cache small.
        .modify(|object: &mut K| object.managed_fields_mut().clear())
        .reflect(writer);
    reflectors.push(
        events
            .for_each(|event| async move {
                if let Err(error) = event {
                    let error = watch_error_summary(&error);
                    warn!(kind = %K::kind(&()), %error, "watch of a consumed kind failed; the cache keeps its last state");
                }
            })
            .boxed(),
    );
    store
}

/// The cached objects of `namespace` (with identity label `identity_id` if
/// given), in name order as a list returns them, so passes are deterministic.
fn select<K: ConsumedKind>(store: &Store<K>, namespace: &str, identity_id: Option<&str>) -> Vec<Arc<K>> {
    let mut found = store.state_filter(|object| {
        object.meta().namespace.as_deref() == Some(namespace)
            && identity_id.is_none_or(|id| object.labels().get(IDENTITY_LABEL).is_some_and(|label| label == id))
    });
    found.sort_by(|a, b| a.meta().name.cmp(&b.meta().name));
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::NetworkSpec;

    fn network(namespace: &str, name: &str, identity: &str) -> Network {
        let mut network = Network::new(name, NetworkSpec::default());
        network.metadata.namespace = Some(namespace.into());
        network.metadata.labels = Some([(IDENTITY_LABEL.to_owned(), identity.to_owned())].into());
        network
    }

    #[test]
    fn selects_by_namespace_and_identity_in_name_order() {
        let (store, mut writer) = reflector::store::<Network>();
        writer.apply_watcher_event(&watcher::Event::Init);
        for object in [
            network("ns", "b", "id1"),
            network("ns", "a", "id1"),
            network("ns", "c", "id2"),
            network("other", "d", "id1"),
        ] {
            writer.apply_watcher_event(&watcher::Event::InitApply(object));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let names = |found: Vec<Arc<Network>>| found.iter().map(|n| n.name_any()).collect::<Vec<_>>();
        assert_eq!(names(select(&store, "ns", Some("id1"))), ["a", "b"]);
        assert_eq!(names(select(&store, "ns", None)), ["a", "b", "c"]);
        assert!(select(&store, "none", None).is_empty());
    }
}
