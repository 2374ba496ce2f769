//! A replica's leadership term and what it remembers while it acts, as
//! server-kube's `Term` (adapters/kube/src/term.rs) holds it: the monitor's
//! latest list of each tenant (its provider group) and the create answers
//! received since (adapters/kube/src/cloud/listings.rs), and the reference
//! writer's finalizer lists (adapters/kube/src/references.rs). A term is a value
//! made when the replica starts to act; nothing of an earlier term's memory
//! reaches it, so there is nothing to reset.

use std::collections::HashMap;

use jiff::Timestamp;
use server_core::ProviderView;
use server_core::model::ResourceKind;
use server_core::port::ProviderServer;

/// One leadership term of one replica.
#[derive(Debug, Default)]
pub(crate) struct Term {
    /// When the term began (virtual milliseconds).
    pub(crate) started: u64,
    /// The same instant in whole seconds, as list times are: a list of
    /// this term is never timed before it.
    pub(crate) started_second: Timestamp,
    pub(crate) listings: Listings,
    pub(crate) references: KnownReferences,
}

impl Term {
    pub(crate) fn new(started: u64, started_at: Timestamp) -> Self {
        Term {
            started,
            started_second: whole_second(started_at),
            listings: Listings::default(),
            references: KnownReferences::default(),
        }
    }
}

/// A consumed object a reference is held on: its tenant, kind and name.
pub(crate) type ReferenceTarget = (usize, ResourceKind, String);

/// Each consumed object's finalizers as this term's writes last left them,
/// as server-kube's reference writer keeps them (`Known`): a change they
/// already show is not written.
#[derive(Debug, Default)]
pub(crate) struct KnownReferences {
    known: HashMap<ReferenceTarget, Vec<String>>,
}

impl KnownReferences {
    pub(crate) fn get(&self, target: &ReferenceTarget) -> Option<&[String]> {
        self.known.get(target).map(Vec::as_slice)
    }

    pub(crate) fn set(&mut self, target: ReferenceTarget, finalizers: Vec<String>) {
        self.known.insert(target, finalizers);
    }

    /// A write whose answer was lost: the object is read again next time.
    pub(crate) fn forget(&mut self, target: &ReferenceTarget) {
        self.known.remove(target);
    }
}

/// `at` rounded down to its second, as server-kube's clock reads
/// (`kube_api::now`): a list timed so is never timed after its start.
pub(crate) fn whole_second(at: Timestamp) -> Timestamp {
    Timestamp::from_second(at.as_second()).unwrap_or(at)
}

/// Each tenant's latest list and the create answers since, by the tenant's
/// index in the shard; a tenant's Servers by their offset in it.
#[derive(Debug, Default)]
pub(crate) struct Listings {
    groups: Vec<Group>,
}

#[derive(Debug, Default)]
struct Group {
    /// Start of the latest complete list, if there was one.
    listed_at: Option<Timestamp>,
    entries: Vec<Entry>,
}

#[derive(Debug, Default)]
struct Entry {
    /// What the latest list showed: the listed server's version (equal
    /// versions, equal records) and record; `None`: not listed.
    listed: Option<(u64, ProviderServer)>,
    /// A create answer received after the list started, with when.
    answer: Option<(ProviderServer, Timestamp)>,
    /// A create or delete sent then whose outcome no answer or later list
    /// has told: the OpenStack index's "uncertain" (its absence proof does
    /// not hold, so a live read reads the cloud).
    in_doubt_since: Option<Timestamp>,
}

impl Listings {
    fn group(&mut self, tenant: usize, servers: usize) -> &mut Group {
        if self.groups.len() <= tenant {
            self.groups.resize_with(tenant + 1, Group::default);
        }
        let group = &mut self.groups[tenant];
        if group.entries.len() < servers {
            group.entries.resize_with(servers, Entry::default);
        }
        group
    }

    /// A complete list of `tenant` (of `servers` Servers) that started at
    /// `at`: `listed` gives each listed Server's offset and version, and
    /// `record` builds the record of an offset whose version moved since
    /// the list held (an unchanged one is kept). An older list than the one
    /// held is ignored; answers older than it are covered by it.
    pub(crate) fn record_list(
        &mut self,
        tenant: usize,
        servers: usize,
        at: Timestamp,
        listed: &[(usize, u64)],
        mut record: impl FnMut(usize) -> Option<ProviderServer>,
    ) {
        let group = self.group(tenant, servers);
        if group.listed_at.is_some_and(|held| held > at) {
            return;
        }
        group.listed_at = Some(at);
        let mut shown = vec![None; group.entries.len()];
        for &(offset, version) in listed {
            if let Some(slot) = shown.get_mut(offset) {
                *slot = Some(version);
            }
        }
        for (offset, (entry, version)) in group.entries.iter_mut().zip(shown).enumerate() {
            entry.listed = match (entry.listed.take(), version) {
                (Some((held, kept)), Some(version)) if held == version => Some((held, kept)),
                (_, Some(version)) => record(offset).map(|record| (version, record)),
                (_, None) => None,
            };
            if entry.answer.as_ref().is_some_and(|(_, answered)| *answered <= at) {
                entry.answer = None;
            }
            // A list that started in a later second than the doubt saw its outcome.
            if entry.in_doubt_since.is_some_and(|since| since < at) {
                entry.in_doubt_since = None;
            }
        }
    }

    /// The provider answered the create of the Server at `offset` with
    /// `record`, at `at`.
    pub(crate) fn record_answer(
        &mut self,
        tenant: usize,
        servers: usize,
        offset: usize,
        record: ProviderServer,
        at: Timestamp,
    ) {
        if let Some(entry) = self.group(tenant, servers).entries.get_mut(offset) {
            entry.answer = Some((record, at));
            entry.in_doubt_since = None;
        }
    }

    /// A create or delete of the Server at `offset` is about to be sent at
    /// `at`: until its answer or a later list, absence is not proven.
    pub(crate) fn mark_in_doubt(&mut self, tenant: usize, servers: usize, offset: usize, at: Timestamp) {
        if let Some(entry) = self.group(tenant, servers).entries.get_mut(offset) {
            entry.in_doubt_since = Some(at);
        }
    }

    /// What server-openstack's uid index answers without a request
    /// (`Project::known` giving `Absent`): the tenant was listed, the list
    /// did not show the Server, and no create or delete of it is in doubt
    /// since. Sound only while every create since the list was this
    /// term's own, which is why the index belongs to a term.
    pub(crate) fn proves_absent(&self, tenant: usize, offset: usize) -> bool {
        let Some(group) = self.groups.get(tenant) else { return false };
        let entry = group.entries.get(offset);
        group.listed_at.is_some()
            && entry
                .is_none_or(|entry| entry.listed.is_none() && entry.answer.is_none() && entry.in_doubt_since.is_none())
    }

    /// A delete was sent for the Server at `offset` at `at`: nothing held
    /// about it stands (until the next list, it reads as not listed, and
    /// its absence is in doubt).
    pub(crate) fn forget(&mut self, tenant: usize, offset: usize, at: Timestamp) {
        if let Some(entry) = self.groups.get_mut(tenant).and_then(|group| group.entries.get_mut(offset)) {
            *entry = Entry { in_doubt_since: Some(at), ..Entry::default() };
        }
    }

    /// The latest view of the Server at `offset` and when it was seen: a
    /// create answer newer than the list, else the list's record or absence.
    pub(crate) fn view(&self, tenant: usize, offset: usize) -> Option<(ProviderView, Timestamp)> {
        let group = self.groups.get(tenant)?;
        let entry = group.entries.get(offset);
        if let Some((record, at)) = entry.and_then(|entry| entry.answer.as_ref()) {
            return Some((ProviderView::Present(record.clone()), *at));
        }
        let at = group.listed_at?;
        match entry.and_then(|entry| entry.listed.as_ref()) {
            Some((_, record)) => Some((ProviderView::Present(record.clone()), at)),
            None => Some((ProviderView::Absent, at)),
        }
    }

    /// The record the latest list showed for the Server at `offset`.
    pub(crate) fn listed(&self, tenant: usize, offset: usize) -> Option<&ProviderServer> {
        let entry = self.groups.get(tenant)?.entries.get(offset)?;
        entry.listed.as_ref().map(|(_, record)| record)
    }
}
