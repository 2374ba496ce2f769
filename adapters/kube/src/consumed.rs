//! The kinds the operator reads but does not own, as one table.
//!
//! [`CONSUMED_KINDS`] lists every kind a Server references (the core's
//! [`ResourceKind`]s), each through its [`ConsumedKind`] impl: the CRD type,
//! its core kind and what the core reads of an object. The caches, the
//! facts a pass gathers (cached and live), the CRDs a test API server serves and the RBAC grants ([`read_kinds`]) all come from
//! it. [`OpenstackIdentity`] is read too, as the OpenStack regions' identity source, but
//! never referenced.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasher, RandomState};
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use futures_util::future::BoxFuture;
use futures_util::{FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::ListParams;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, CustomResourceExt, Resource, ResourceExt};
use server_core::model::{Consumed, Detail, IDENTITY_LABEL, ResourceKind};
use tracing::warn;

use crate::crd::{
    Identity, Network, OpenstackIdentity, SSHCertificateAuthority, SecurityGroup, served_consumed_crd, server_crd,
};
use crate::error::{Error, watch_error_summary};
use crate::freshness::{CacheProgress, newest};
use crate::kube_api::{FixedBackoff, WatchSettings, scoped_api};

/// A namespaced kind the operator reads through the API or a cache.
pub(crate) trait NamespacedKind:
    Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> NamespacedKind for K where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// A kind a Server references: its CRD type, with the core's kind and what
/// the core reads of an object besides its name and finalizers.
pub(crate) trait ConsumedKind: NamespacedKind + CustomResourceExt {
    const KIND: ResourceKind;

    fn detail(&self) -> Detail {
        Detail::None
    }
}

impl ConsumedKind for Network {
    const KIND: ResourceKind = ResourceKind::Network;

    fn detail(&self) -> Detail {
        let provider_id = self.status.as_ref().and_then(|s| s.openstack.as_ref()).and_then(|o| o.network_id.clone());
        Detail::Network { provider_id: provider_id.filter(|id| !id.is_empty()) }
    }
}

impl ConsumedKind for SecurityGroup {
    const KIND: ResourceKind = ResourceKind::SecurityGroup;
}

impl ConsumedKind for SSHCertificateAuthority {
    const KIND: ResourceKind = ResourceKind::SshCertificateAuthority;

    fn detail(&self) -> Detail {
        Detail::SshCertificateAuthority { public_key: self.spec.public_key.clone() }
    }
}

impl ConsumedKind for Identity {
    const KIND: ResourceKind = ResourceKind::Identity;

    fn detail(&self) -> Detail {
        Detail::Identity {
            conditions: self.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default(),
            deleting: self.metadata.deletion_timestamp.is_some(),
        }
    }
}

/// Every kind a Server references. Adding one: its CRD type in `crd`, its
/// [`ConsumedKind`] impl above, and an entry here.
pub(crate) const CONSUMED_KINDS: [&dyn KindOps; 4] = [
    &Ops::<Network>(PhantomData),
    &Ops::<SecurityGroup>(PhantomData),
    &Ops::<SSHCertificateAuthority>(PhantomData),
    &Ops::<Identity>(PhantomData),
];

/// A consumed object as read: the core's view, the resourceVersion that
/// guards a write to it, and its identity label.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Found {
    pub(crate) resource: Consumed,
    pub(crate) resource_version: String,
    pub(crate) identity_label: Option<String>,
}

/// What the operator does with one consumed kind, without naming its type.
pub(crate) trait KindOps: Send + Sync {
    fn kind(&self) -> ResourceKind;
    /// The kind's resource name in the API (`networks`).
    fn plural(&self) -> String;
    fn crd(&self) -> CustomResourceDefinition;
    /// A cache of the kind over `namespace`, whose filling future is pushed
    /// onto `reflectors`.
    fn cache(
        &self,
        client: &Client,
        namespace: Option<&str>,
        watch: &WatchSettings,
        reflectors: &mut Vec<BoxFuture<'static, ()>>,
    ) -> Arc<dyn KindCache>;
    /// Every object of `namespace`, read live.
    fn list<'a>(&'a self, client: &'a Client, namespace: &'a str) -> BoxFuture<'a, Result<Listed, Error>>;
}

/// A live list of one kind.
pub(crate) struct Listed {
    pub(crate) found: Vec<Found>,
    /// The highest resourceVersion among the objects (see `freshness`).
    pub(crate) newest: Option<u64>,
}

/// A cache of one consumed kind.
pub(crate) trait KindCache: Send + Sync + std::fmt::Debug {
    /// Resolves once the cache holds its initial list.
    fn ready(&self) -> BoxFuture<'_, Result<(), reflector::store::WriterDropped>>;
    /// The cached objects of `namespace` that `keep` accepts, in name order
    /// as a list returns them (so passes are deterministic), each with the
    /// finalizers `finalizers` picks. `keep` reads an object's metadata and
    /// may ask whether it holds a finalizer (answered from an index, not a
    /// scan of the list).
    fn select(&self, namespace: &str, keep: Keep<'_>, finalizers: Finalizers<'_>) -> Vec<Found>;
    /// The highest resourceVersion among the changes the cache has applied.
    fn applied(&self) -> u64;
}

/// Whether a cached object is wanted, from its metadata and a question:
/// does it hold this finalizer?
pub(crate) type Keep<'a> = &'a dyn Fn(&kube::api::ObjectMeta, &dyn Fn(&str) -> bool) -> bool;

/// Which finalizers of a consumed object a read copies. A shared Network
/// carries one reference finalizer per Server using it (thousands at
/// scale), and a pass reads only its own Server's: copying the whole list
/// into every pass's facts made each pass O(Servers sharing it).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Finalizers<'a> {
    /// The whole list (what a finalizer write must test against).
    All,
    /// Only this one, if present (what a pass's facts read).
    Only(&'a str),
}

struct Ops<K>(PhantomData<fn() -> K>);

fn found<K: ConsumedKind>(object: &K, finalizers: Vec<String>) -> Found {
    let meta = object.meta();
    Found {
        resource: Consumed { name: meta.name.clone().unwrap_or_default(), finalizers, detail: object.detail() },
        resource_version: meta.resource_version.clone().unwrap_or_default(),
        identity_label: object.labels().get(IDENTITY_LABEL).cloned(),
    }
}

impl<K: ConsumedKind> KindOps for Ops<K> {
    fn kind(&self) -> ResourceKind {
        K::KIND
    }

    fn plural(&self) -> String {
        K::plural(&()).into_owned()
    }

    fn crd(&self) -> CustomResourceDefinition {
        K::crd()
    }

    fn cache(
        &self,
        client: &Client,
        namespace: Option<&str>,
        watch: &WatchSettings,
        reflectors: &mut Vec<BoxFuture<'static, ()>>,
    ) -> Arc<dyn KindCache> {
        let progress = Arc::new(CacheProgress::default());
        let store = reflect_tracked::<K>(client, namespace, watch, reflectors, progress.clone());
        Arc::new(ConsumedCache::new(store, progress))
    }

    fn list<'a>(&'a self, client: &'a Client, namespace: &'a str) -> BoxFuture<'a, Result<Listed, Error>> {
        async move {
            let api: Api<K> = Api::namespaced(client.clone(), namespace);
            match api.list(&ListParams::default()).await {
                Ok(list) => Ok(Listed {
                    found: list.items.iter().map(|object| found(object, all_finalizers(object))).collect(),
                    newest: newest(&list.items),
                }),
                Err(source) => Err(Error::kube(format!("listing {} in namespace {namespace}", K::plural(&())), source)),
            }
        }
        .boxed()
    }
}

fn all_finalizers<K: Resource>(object: &K) -> Vec<String> {
    object.meta().finalizers.clone().unwrap_or_default()
}

/// A consumed kind's cache: the reflector's store, and for each object the
/// positions of its finalizers by hash. A shared object carries one
/// reference finalizer per Server using it (10,000 on an Identity all
/// Servers share), so scanning the list in every pass made passes
/// O(Servers) and the operator's CPU O(Servers²). An index is built at most
/// once per version of an object, when a pass first asks: no more work than
/// decoding that version from its watch event.
pub(crate) struct ConsumedCache<K: NamespacedKind, S = RandomState> {
    store: Store<K>,
    progress: Arc<CacheProgress>,
    indexes: Mutex<HashMap<ObjectRef<K>, FinalizerIndex<K>>>,
    hasher: S,
}

/// Where each finalizer of one version of an object sits, by its hash.
struct FinalizerIndex<K> {
    /// The version indexed. A `Weak` keeps its allocation, so a new version
    /// is never mistaken for it.
    of: Weak<K>,
    /// Hash → the first position of a finalizer with that hash.
    positions: HashMap<u64, usize>,
}

impl<K: NamespacedKind, S> std::fmt::Debug for ConsumedCache<K, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumedCache").field("kind", &K::kind(&())).finish_non_exhaustive()
    }
}

impl<K: NamespacedKind> ConsumedCache<K> {
    pub(crate) fn new(store: Store<K>, progress: Arc<CacheProgress>) -> Self {
        ConsumedCache::with_hasher(store, progress, RandomState::new())
    }
}

impl<K: NamespacedKind, S: BuildHasher> ConsumedCache<K, S> {
    fn with_hasher(store: Store<K>, progress: Arc<CacheProgress>, hasher: S) -> Self {
        ConsumedCache { store, progress, indexes: Mutex::default(), hasher }
    }

    /// Whether `object` (a version the store holds) carries `wanted`.
    fn has_finalizer(&self, object: &Arc<K>, wanted: &str) -> bool {
        let list = object.meta().finalizers.as_deref().unwrap_or_default();
        let mut indexes = self.indexes.lock().unwrap_or_else(PoisonError::into_inner);
        let reference = ObjectRef::from_obj(object.as_ref());
        let indexes_this_version = |index: &FinalizerIndex<K>| std::ptr::eq(index.of.as_ptr(), Arc::as_ptr(object));
        if indexes.len() > PRUNE_INDEXES_PAST && !indexes.get(&reference).is_some_and(indexes_this_version) {
            // Objects gone from the store (or replaced by a newer version) lose their index.
            indexes.retain(|_, index| index.of.strong_count() > 0);
        }
        let index = match indexes.entry(reference) {
            Entry::Occupied(entry) if indexes_this_version(entry.get()) => entry.into_mut(),
            Entry::Occupied(mut entry) => {
                entry.insert(FinalizerIndex::of(object, list, &self.hasher));
                entry.into_mut()
            }
            Entry::Vacant(entry) => entry.insert(FinalizerIndex::of(object, list, &self.hasher)),
        };
        match index.positions.get(&self.hasher.hash_one(wanted)) {
            None => false,
            Some(&position) if list.get(position).is_some_and(|f| f == wanted) => true,
            // Another finalizer with the same hash: only a scan can tell.
            Some(_) => list.iter().any(|f| f == wanted),
        }
    }
}

impl<K> FinalizerIndex<K> {
    /// The index of `object`'s finalizers `list`.
    fn of(object: &Arc<K>, list: &[String], hasher: &impl BuildHasher) -> Self {
        let mut positions = HashMap::with_capacity(list.len());
        for (position, finalizer) in list.iter().enumerate() {
            positions.entry(hasher.hash_one(finalizer.as_str())).or_insert(position);
        }
        FinalizerIndex { of: Arc::downgrade(object), positions }
    }
}

/// Indexes kept before the ones of vanished versions are dropped.
const PRUNE_INDEXES_PAST: usize = 256;

impl<K: ConsumedKind, S: BuildHasher + Send + Sync> KindCache for ConsumedCache<K, S> {
    fn ready(&self) -> BoxFuture<'_, Result<(), reflector::store::WriterDropped>> {
        self.store.wait_until_ready().boxed()
    }

    fn select(&self, namespace: &str, keep: Keep<'_>, finalizers: Finalizers<'_>) -> Vec<Found> {
        let mut selected = self.store.state();
        selected.retain(|object| {
            let holds = |finalizer: &str| self.has_finalizer(object, finalizer);
            object.meta().namespace.as_deref() == Some(namespace) && keep(object.meta(), &holds)
        });
        selected.sort_by(|a, b| a.meta().name.cmp(&b.meta().name));
        selected
            .iter()
            .map(|object| {
                let finalizers = match finalizers {
                    Finalizers::All => all_finalizers(object.as_ref()),
                    Finalizers::Only(wanted) if self.has_finalizer(object, wanted) => vec![wanted.to_owned()],
                    Finalizers::Only(_) => Vec::new(),
                };
                found(object.as_ref(), finalizers)
            })
            .collect()
    }

    fn applied(&self) -> u64 {
        self.progress.applied()
    }
}

/// One kind's cache, and the future filling it pushed onto `reflectors`.
pub(crate) fn reflect<K: NamespacedKind>(
    client: &Client,
    namespace: Option<&str>,
    watch: &WatchSettings,
    reflectors: &mut Vec<BoxFuture<'static, ()>>,
) -> Store<K> {
    reflect_tracked(client, namespace, watch, reflectors, Arc::default())
}

/// As [`reflect`], recording in `progress` how far the store has caught up.
fn reflect_tracked<K: NamespacedKind>(
    client: &Client,
    namespace: Option<&str>,
    watch: &WatchSettings,
    reflectors: &mut Vec<BoxFuture<'static, ()>>,
    progress: Arc<CacheProgress>,
) -> Store<K> {
    let (store, writer) = reflector::store();
    let config = watcher::Config::default().page_size(watch.page_size);
    let events = watcher(scoped_api::<K>(client.clone(), namespace), config)
        .backoff(FixedBackoff(watch.retry))
        // Nothing reads managed fields; dropping them keeps the cache small.
        .modify(|object: &mut K| object.managed_fields_mut().clear())
        .reflect(writer)
        // After the store applied the event: progress never runs ahead of it.
        .inspect_ok(move |event| progress.observe(event));
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

/// What the operator may do with a kind it reads but does not own: the
/// ClusterRole's rules for it (`deploy/base/rbac.yaml`, checked against
/// this list by the app's RBAC test).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadKind {
    pub group: String,
    /// The resource name in the API (`networks`).
    pub plural: String,
    /// Whether Servers reference it (a finalizer patch), or only read it.
    pub referenced: bool,
}

impl ReadKind {
    /// The verbs the operator uses on it: a cache lists and watches, a live
    /// list confirms what a cache lacks, and a reference is a merge patch.
    pub fn verbs(&self) -> &'static [&'static str] {
        if self.referenced { &["list", "watch", "patch"] } else { &["list", "watch"] }
    }
}

/// Every kind the operator reads but does not own: the consumed kinds, then
/// the identity source (OpenstackIdentity).
pub fn read_kinds() -> Vec<ReadKind> {
    let group = |crd: &CustomResourceDefinition| crd.spec.group.clone();
    let mut kinds: Vec<ReadKind> = CONSUMED_KINDS
        .iter()
        .map(|ops| ReadKind { group: group(&ops.crd()), plural: ops.plural(), referenced: true })
        .collect();
    kinds.push(ReadKind {
        group: group(&OpenstackIdentity::crd()),
        plural: OpenstackIdentity::plural(&()).into_owned(),
        referenced: false,
    });
    kinds
}

/// The consumed kinds' CRDs and OpenstackIdentity's, for serving them from
/// a test or demo API server.
pub fn consumed_crds() -> Vec<CustomResourceDefinition> {
    let mut crds: Vec<_> = CONSUMED_KINDS.iter().map(|ops| ops.crd()).collect();
    crds.push(OpenstackIdentity::crd());
    crds.into_iter().map(served_consumed_crd).collect()
}

/// Every CRD the controller touches: Server first, then the kinds it reads.
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    let mut crds = vec![server_crd()];
    crds.extend(consumed_crds());
    crds.push(crate::crd::region_crd());
    crds
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_core_kind_has_one_entry() {
        for kind in ResourceKind::ALL {
            assert_eq!(CONSUMED_KINDS.iter().filter(|ops| ops.kind() == kind).count(), 1, "{kind:?}");
        }
        assert_eq!(CONSUMED_KINDS.len(), ResourceKind::ALL.len());
    }

    fn network(finalizers: &[String], resource_version: u64) -> Network {
        let mut network = Network::new("shared", Default::default());
        network.metadata.namespace = Some("ns".into());
        network.metadata.resource_version = Some(resource_version.to_string());
        network.metadata.finalizers = Some(finalizers.to_vec());
        network
    }

    /// Every finalizer hashes alike: each lookup is a collision.
    #[derive(Clone, Default)]
    struct Colliding;

    impl BuildHasher for Colliding {
        type Hasher = CollidingHasher;
        fn build_hasher(&self) -> CollidingHasher {
            CollidingHasher
        }
    }

    struct CollidingHasher;

    impl std::hash::Hasher for CollidingHasher {
        fn finish(&self) -> u64 {
            7
        }
        fn write(&mut self, _: &[u8]) {}
    }

    /// A pass reads whether its own finalizer is on a shared object, and only
    /// that; a finalizer write reads the whole list; a new version of the
    /// object is read anew. The same with every hash colliding.
    fn own_finalizers_are_read_from_the_current_version<S: BuildHasher + Send + Sync>(hasher: S) {
        let shared: Vec<String> = (0..1000).map(|i| format!("server.unikorn-cloud.org/s-{i}")).collect();
        let (store, mut writer) = reflector::store();
        let cache = ConsumedCache::with_hasher(store, Arc::default(), hasher);
        let select = |finalizers| cache.select("ns", &|_, _| true, finalizers);
        writer.apply_watcher_event(&watcher::Event::Apply(network(&shared, 1)));
        let own = select(Finalizers::Only("server.unikorn-cloud.org/s-7"));
        assert_eq!(own[0].resource.finalizers, ["server.unikorn-cloud.org/s-7"]);
        assert!(select(Finalizers::Only("server.unikorn-cloud.org/other"))[0].resource.finalizers.is_empty());
        assert_eq!(select(Finalizers::All)[0].resource.finalizers, shared, "a finalizer write tests the whole list");

        // s-7's reference was released; s-1000's added.
        let mut next: Vec<String> = shared.iter().filter(|f| !f.ends_with("/s-7")).cloned().collect();
        next.push("server.unikorn-cloud.org/s-1000".into());
        writer.apply_watcher_event(&watcher::Event::Apply(network(&next, 2)));
        assert!(select(Finalizers::Only("server.unikorn-cloud.org/s-7"))[0].resource.finalizers.is_empty());
        let added = select(Finalizers::Only("server.unikorn-cloud.org/s-1000"));
        assert_eq!(added[0].resource.finalizers, ["server.unikorn-cloud.org/s-1000"]);
        assert_eq!(added[0].resource_version, "2");
        assert!(cache.select("other-ns", &|_, _| true, Finalizers::All).is_empty());
    }

    #[test]
    fn a_pass_reads_only_its_own_finalizer_of_a_shared_object() {
        own_finalizers_are_read_from_the_current_version(RandomState::new());
    }

    #[test]
    fn a_hash_collision_is_settled_by_the_list_itself() {
        own_finalizers_are_read_from_the_current_version(Colliding);
    }

    #[test]
    fn read_kinds_are_the_consumed_crds() {
        let plurals: Vec<String> = read_kinds().into_iter().map(|kind| kind.plural).collect();
        assert_eq!(
            plurals,
            ["networks", "securitygroups", "sshcertificateauthorities", "identities", "openstackidentities"]
        );
    }
}
