//! Whether a consumed kind's cache can answer a release's read
//! (`Need::ConsumedBeforeRelease`) in place of a live list.
//!
//! The release must see every reference written before its pass began. A
//! cache lags the API server, but a watch delivers one resource's changes
//! in resourceVersion order, and resourceVersions of one resource compare
//! as integers (KEP-5504, stable in Kubernetes 1.35; etcd's revision, and
//! SimKube's one counter). So a cache whose store has applied a change at
//! or past version `v` holds every write to that kind up to `v`. Two floors
//! bound what the release must see:
//!
//! - **listed**: the highest version among the objects of a live list of
//!   the kind made in this term. Every write of an earlier term (this
//!   replica's or another's) was answered before this term began, so
//!   before that list: one to an object the list holds is at or below that
//!   object's version there (an object gone by then holds no reference).
//! - **added**: the version this term's reference writer was answered
//!   with when it added the releasing Server's reference (what the writer
//!   does to other Servers' references on the same objects is not waited
//!   for: it cannot change whether this one is there).
//!
//! A kind is covered once its cache has applied a change at or past both;
//! until this term listed it, or after a reference write of the kind got no
//! answer (it may land at a version nobody knows), it is read live. Shared
//! objects hold a reference per Server, so a live list per deleted Server
//! made deletion O(Servers²); with the floors it is one list per kind and
//! term, and the cache after that.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use kube::Resource;
use kube::runtime::watcher;
use server_core::model::ResourceKind;

/// The version of an object as an integer; `None` for one that is not a
/// positive integer (such a server's caches are never trusted here).
pub(crate) fn version_of(resource_version: Option<&str>) -> Option<u64> {
    resource_version?.parse().ok().filter(|version| *version > 0)
}

/// The highest version among `objects` (0 for none), or `None` when one of
/// them has a version that is not an integer.
pub(crate) fn newest<'a, K: Resource + 'a>(objects: impl IntoIterator<Item = &'a K>) -> Option<u64> {
    objects
        .into_iter()
        .try_fold(0, |newest, object| Some(newest.max(version_of(object.meta().resource_version.as_deref())?)))
}

/// How far one cache has caught up: the highest version among the changes
/// its store has applied (0 before it holds any).
#[derive(Debug, Default)]
pub(crate) struct CacheProgress {
    applied: AtomicU64,
    /// The highest version among the objects of a list being taken (a
    /// relist), applied to the store all at once when it is done.
    listing: AtomicU64,
}

impl CacheProgress {
    pub(crate) fn applied(&self) -> u64 {
        self.applied.load(Ordering::Acquire)
    }

    /// Records a watcher event after the store has applied it. A relist
    /// replaces the store at its end (`InitDone`), with objects that may be
    /// older than what the store held: its own highest version is then the
    /// cache's, not the maximum with the earlier one.
    pub(crate) fn observe<K: Resource>(&self, event: &watcher::Event<K>) {
        let version = |object: &K| version_of(object.meta().resource_version.as_deref()).unwrap_or(0);
        match event {
            watcher::Event::Apply(object) | watcher::Event::Delete(object) => {
                self.applied.fetch_max(version(object), Ordering::AcqRel);
            }
            watcher::Event::Init => self.listing.store(0, Ordering::Release),
            watcher::Event::InitApply(object) => {
                self.listing.fetch_max(version(object), Ordering::AcqRel);
            }
            watcher::Event::InitDone => {
                self.applied.store(self.listing.load(Ordering::Acquire), Ordering::Release);
            }
        }
    }
}

/// One kind's floor in a term.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct KindFloor {
    listed: Option<u64>,
    /// A reference write got no answer: it may land at any version.
    unknown_write: bool,
}

/// The floors of one leadership term (see the module docs); dropped with it.
#[derive(Debug, Default)]
pub(crate) struct TermFloors {
    state: Mutex<Floors>,
}

#[derive(Debug, Default)]
struct Floors {
    kinds: BTreeMap<ResourceKind, KindFloor>,
    /// Per kind and reference finalizer, the version of the last answered
    /// write of this term that added it. A release waits only for the
    /// writes of its own Server's reference: the writer keeps writing other
    /// Servers' references to the same shared objects, and waiting for the
    /// newest of those would keep a busy cache from ever answering.
    /// One entry per finalizer (a Server's), its versions by kind
    /// ([`kind_slot`]; 0 for none).
    added: HashMap<String, [u64; KINDS]>,
}

/// The consumed kinds a reference can be on.
const KINDS: usize = 4;

fn kind_slot(kind: ResourceKind) -> usize {
    match kind {
        ResourceKind::Network => 0,
        ResourceKind::SecurityGroup => 1,
        ResourceKind::SshCertificateAuthority => 2,
        ResourceKind::Identity => 3,
    }
}

impl TermFloors {
    fn with<R>(&self, f: impl FnOnce(&mut Floors) -> R) -> R {
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A live list of `kind` whose newest object is at `version` (0 for an
    /// empty list; `None` when a version is not an integer), begun after
    /// every write this term knows of: a write with no answer is past too
    /// (at worst it landed later, which a live list could not see either).
    pub(crate) fn listed(&self, kind: ResourceKind, version: Option<u64>) {
        self.with(|floors| {
            let floor = floors.kinds.entry(kind).or_default();
            if let Some(version) = version {
                floor.listed = Some(floor.listed.map_or(version, |listed| listed.max(version)));
                floor.unknown_write = false;
            }
        });
    }

    /// This term's write adding (`add`) or removing `finalizer` on an object
    /// of `kind` was answered at `version`. Once removed, what a cache shows
    /// of the reference can only make a release remove it again, which the
    /// writer finds already done: nothing to wait for.
    pub(crate) fn written(&self, kind: ResourceKind, finalizer: &str, add: bool, version: Option<u64>) {
        self.with(|floors| match version {
            None => floors.kinds.entry(kind).or_default().unknown_write = true,
            Some(version) if add => {
                let floor = &mut floors.added.entry(finalizer.to_owned()).or_default()[kind_slot(kind)];
                *floor = (*floor).max(version);
            }
            Some(_) => {
                if let Some(versions) = floors.added.get_mut(finalizer) {
                    versions[kind_slot(kind)] = 0;
                    if versions.iter().all(|version| *version == 0) {
                        floors.added.remove(finalizer);
                    }
                }
            }
        });
    }

    /// This term's reference write to an object of `kind` got no answer.
    pub(crate) fn write_unanswered(&self, kind: ResourceKind) {
        self.with(|floors| floors.kinds.entry(kind).or_default().unknown_write = true);
    }

    /// Whether a cache of `kind` that has applied changes up to `applied`
    /// holds every write of `finalizer` a release must see.
    pub(crate) fn covers(&self, kind: ResourceKind, finalizer: &str, applied: u64) -> bool {
        self.with(|floors| match floors.kinds.get(&kind) {
            Some(KindFloor { listed: Some(listed), unknown_write: false }) => {
                let added = floors.added.get(finalizer).map_or(0, |versions| versions[kind_slot(kind)]);
                applied >= (*listed).max(added)
            }
            _ => false,
        })
    }
}

#[cfg(test)]
mod tests {
    use kube::api::ObjectMeta;

    use super::*;
    use crate::crd::Network;

    const NETWORK: ResourceKind = ResourceKind::Network;

    fn at(version: u64) -> Network {
        let mut network = Network::new("n", Default::default());
        network.metadata = ObjectMeta { resource_version: Some(version.to_string()), ..network.metadata };
        network
    }

    #[test]
    fn a_kind_is_covered_only_past_this_terms_list_and_its_own_reference_writes() {
        let floors = TermFloors::default();
        assert!(!floors.covers(NETWORK, "f", u64::MAX), "not listed in this term: read live");
        floors.listed(NETWORK, Some(10));
        assert!(!floors.covers(NETWORK, "f", 9));
        assert!(floors.covers(NETWORK, "f", 10));
        floors.written(NETWORK, "f", true, Some(15));
        assert!(!floors.covers(NETWORK, "f", 14), "the cache has not applied the reference's write");
        assert!(floors.covers(NETWORK, "f", 15));
        assert!(floors.covers(NETWORK, "g", 10), "another Server's reference write is not waited for");
        assert!(!floors.covers(ResourceKind::Identity, "f", 15), "floors are per kind");
        floors.written(NETWORK, "f", false, Some(20));
        assert!(floors.covers(NETWORK, "f", 10), "a removed reference is not waited for");
    }

    #[test]
    fn a_write_without_an_answer_is_read_live_until_the_next_list() {
        let floors = TermFloors::default();
        floors.listed(NETWORK, Some(10));
        floors.write_unanswered(NETWORK);
        assert!(!floors.covers(NETWORK, "f", u64::MAX));
        floors.listed(NETWORK, Some(20));
        assert!(floors.covers(NETWORK, "f", 20));
        floors.written(NETWORK, "f", true, None);
        assert!(!floors.covers(NETWORK, "f", u64::MAX), "an answer without a version is no answer");
        floors.listed(NETWORK, Some(30));
        floors.listed(NETWORK, None);
        assert!(floors.covers(NETWORK, "f", 30), "a list without a version changes nothing");
    }

    #[test]
    fn versions_that_are_not_positive_integers_are_never_trusted() {
        assert_eq!(version_of(Some("42")), Some(42));
        for odd in [None, Some(""), Some("0"), Some("abc"), Some("-3"), Some("1.5")] {
            assert_eq!(version_of(odd), None, "{odd:?}");
        }
        assert_eq!(newest([&at(3), &at(9), &at(4)]), Some(9));
        assert_eq!(newest::<Network>([]), Some(0), "an empty list holds nothing to wait for");
        let mut odd = at(5);
        odd.metadata.resource_version = Some("x".into());
        assert_eq!(newest([&at(3), &odd]), None);
    }

    #[test]
    fn progress_follows_applied_changes_and_a_relist_replaces_it() {
        let progress = CacheProgress::default();
        progress.observe(&watcher::Event::InitApply(at(7)));
        assert_eq!(progress.applied(), 0, "a list being taken is not in the store yet");
        progress.observe(&watcher::Event::<Network>::InitDone);
        assert_eq!(progress.applied(), 7);
        progress.observe(&watcher::Event::Apply(at(12)));
        progress.observe(&watcher::Event::Delete(at(11)));
        assert_eq!(progress.applied(), 12);
        // A relist answered from an older snapshot takes the cache back.
        progress.observe(&watcher::Event::<Network>::Init);
        progress.observe(&watcher::Event::InitApply(at(9)));
        assert_eq!(progress.applied(), 12, "the old store serves until the relist is done");
        progress.observe(&watcher::Event::<Network>::InitDone);
        assert_eq!(progress.applied(), 9);
    }
}
