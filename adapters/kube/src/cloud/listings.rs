//! What the provider said about each Server without being asked about it
//! alone: every (namespace, region, identity) group's latest monitor list,
//! and the create answers this controller received since. A pass takes its
//! provider view from here when it can; whether that view is enough to act
//! on is server-core's rule (`live_read_needed`), not this module's.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use jiff::Timestamp;
use server_core::listing::ListedServers;
use server_core::port::ProviderServer;
use server_core::{ProviderView, record_shows_boot};

/// (namespace, region, identity): the servers one monitor list covers.
pub(crate) type GroupKey = (String, String, String);

/// The latest lists and answers, shared by the monitor (which fills it) and
/// the passes (which read it, and add their create answers).
#[derive(Clone, Debug, Default)]
pub(crate) struct ProviderListings {
    groups: Arc<Mutex<HashMap<GroupKey, Group>>>,
    /// Each group's servers as this term's monitor lists show them, between
    /// its polls: what the next list of changes is merged into.
    merged: Arc<Mutex<HashMap<GroupKey, ListedServers>>>,
    /// Groups where a pass made a change the provider does not date since
    /// their view was last taken out for a poll.
    undated: Arc<Mutex<HashSet<GroupKey>>>,
}

#[derive(Debug, Default)]
struct Group {
    /// Start of the latest complete list, if there was one.
    listed_at: Option<Timestamp>,
    /// Each uid that list showed, with its record; `None` when it showed
    /// several servers for the uid (no view is taken from that).
    listed: HashMap<String, Option<Arc<ProviderServer>>>,
    /// Create answers received since the list started, with when.
    answers: HashMap<String, (ProviderServer, Timestamp)>,
}

impl ProviderListings {
    fn groups(&self) -> MutexGuard<'_, HashMap<GroupKey, Group>> {
        // Maps replaced or updated in single statements: a panic cannot tear them.
        self.groups.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The group's servers as this term's lists show them, taken out for a
    /// poll to merge its list into (nothing, before the term's first list).
    /// A change a pass made since is told to it (`undated_change`).
    pub(crate) fn take_merged(&self, key: &GroupKey) -> ListedServers {
        let mut merged = self.merged.lock().unwrap_or_else(PoisonError::into_inner).remove(key).unwrap_or_default();
        if self.undated.lock().unwrap_or_else(PoisonError::into_inner).remove(key) {
            merged.undated_change();
        }
        merged
    }

    /// A pass made a change in the group the provider shows without dating
    /// it (`server_core::listing::changes_undated`): the group's next poll
    /// lists every server. Kept apart from the view, which a poll may hold.
    pub(crate) fn undated_change(&self, key: GroupKey) {
        self.undated.lock().unwrap_or_else(PoisonError::into_inner).insert(key);
    }

    /// Puts the group's servers back after a poll, its list merged or not.
    pub(crate) fn keep_merged(&self, key: GroupKey, servers: ListedServers) {
        self.merged.lock().unwrap_or_else(PoisonError::into_inner).insert(key, servers);
    }

    /// A complete list of the group's servers that started at `at`. An
    /// older list than the one held is ignored; answers older than it are
    /// covered by it.
    pub(crate) fn record_list(&self, key: GroupKey, at: Timestamp, records: Vec<Arc<ProviderServer>>) {
        let mut listed: HashMap<String, Option<Arc<ProviderServer>>> = HashMap::with_capacity(records.len());
        for record in records {
            listed.entry(record.server_uid.clone()).and_modify(|several| *several = None).or_insert(Some(record));
        }
        let mut groups = self.groups();
        let group = groups.entry(key).or_default();
        if group.listed_at.is_some_and(|held| held > at) {
            return;
        }
        group.listed_at = Some(at);
        group.listed = listed;
        group.answers.retain(|_, (_, answered)| *answered > at);
    }

    /// The provider answered the create for `uid` with `record` at `at`.
    pub(crate) fn record_answer(&self, key: GroupKey, uid: &str, record: ProviderServer, at: Timestamp) {
        let mut groups = self.groups();
        let group = groups.entry(key).or_default();
        group.answers.insert(uid.to_owned(), (record, at));
    }

    /// A delete was sent for `uid`: nothing held about it stands any more
    /// (until the next list, the uid reads as not listed).
    pub(crate) fn forget(&self, key: &GroupKey, uid: &str) {
        if let Some(group) = self.groups().get_mut(key) {
            group.answers.remove(uid);
            group.listed.remove(uid);
        }
    }

    /// The latest view of `uid` in the group and when it was seen, if there
    /// is one: a create answer newer than the list's start, else the list's
    /// record or absence. A list pages through the project for seconds, so
    /// it may have read the answered server after the answer: when it shows
    /// that server booted, its record is the view (a boot is the latch's
    /// fact, and what the answer said before it is not), at the list's start.
    pub(crate) fn view(&self, key: &GroupKey, uid: &str) -> Option<(ProviderView, Timestamp)> {
        let groups = self.groups();
        let group = groups.get(key)?;
        if let Some((record, at)) = group.answers.get(uid) {
            let listed_boot = group
                .listed
                .get(uid)
                .and_then(Option::as_ref)
                .filter(|listed| listed.id == record.id && record_shows_boot(listed) && !record_shows_boot(record));
            return match (listed_boot, group.listed_at) {
                (Some(listed), Some(listed_at)) => Some((ProviderView::Present((**listed).clone()), listed_at)),
                _ => Some((ProviderView::Present(record.clone()), *at)),
            };
        }
        let at = group.listed_at?;
        match group.listed.get(uid) {
            Some(Some(record)) => Some((ProviderView::Present((**record).clone()), at)),
            Some(None) => None,
            None => Some((ProviderView::Absent, at)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> GroupKey {
        ("ns".into(), "region".into(), "identity".into())
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap_or_default()
    }

    fn record(uid: &str, id: &str) -> ProviderServer {
        ProviderServer { id: id.into(), server_uid: uid.into(), ..ProviderServer::default() }
    }

    fn shared(records: Vec<ProviderServer>) -> Vec<Arc<ProviderServer>> {
        records.into_iter().map(Arc::new).collect()
    }

    fn id_of(view: Option<(ProviderView, Timestamp)>) -> Option<(String, i64)> {
        match view? {
            (ProviderView::Present(record), at) => Some((record.id, at.as_second())),
            (_, at) => Some((String::new(), at.as_second())),
        }
    }

    #[test]
    fn a_change_the_provider_does_not_date_makes_the_next_poll_complete_even_while_one_runs() {
        use server_core::listing::{ListScope, ProviderListing};
        let listings = ProviderListings::default();
        let now = at(100);
        let mut merged = listings.take_merged(&key());
        let first = ProviderListing { latest_change: Some(at(90)), ..ProviderListing::complete(vec![]) };
        assert!(merged.apply(first, now, now));
        listings.keep_merged(key(), merged);
        // Marked while a poll holds the view: that poll's list is of
        // changes, the next poll's complete.
        let merged = listings.take_merged(&key());
        listings.undated_change(key());
        assert!(matches!(merged.next_scope(now), ListScope::ChangedSince(_)));
        listings.keep_merged(key(), merged);
        assert_eq!(listings.take_merged(&key()).next_scope(now), ListScope::Complete);
    }

    #[test]
    fn nothing_is_known_before_a_list_and_absence_is_the_lists() {
        let listings = ProviderListings::default();
        assert_eq!(listings.view(&key(), "u1"), None);
        listings.record_list(key(), at(10), shared(vec![record("u1", "a")]));
        assert_eq!(id_of(listings.view(&key(), "u1")), Some(("a".into(), 10)));
        assert_eq!(listings.view(&key(), "u2"), Some((ProviderView::Absent, at(10))));
        let other = ("ns".into(), "region".into(), "other".into());
        assert_eq!(listings.view(&other, "u1"), None);
    }

    #[test]
    fn a_create_answer_stands_until_a_list_that_started_after_it() {
        let listings = ProviderListings::default();
        listings.record_list(key(), at(10), shared(vec![]));
        listings.record_answer(key(), "u1", record("u1", "new"), at(12));
        assert_eq!(id_of(listings.view(&key(), "u1")), Some(("new".into(), 12)));
        // A list that started before the answer does not erase it.
        listings.record_list(key(), at(11), shared(vec![]));
        assert_eq!(id_of(listings.view(&key(), "u1")), Some(("new".into(), 12)));
        listings.record_list(key(), at(13), shared(vec![record("u1", "new")]));
        assert_eq!(id_of(listings.view(&key(), "u1")), Some(("new".into(), 13)));
        // An older list than the one held changes nothing.
        listings.record_list(key(), at(5), shared(vec![]));
        assert_eq!(id_of(listings.view(&key(), "u1")), Some(("new".into(), 13)));
    }

    /// A list that started before a create's answer and read the server
    /// booted (its page came after the answer) gives the view: the answer's
    /// BUILD would hide the boot from the pass a skipped latch write wakes.
    #[test]
    fn a_boot_a_list_read_after_the_answer_is_the_view() {
        let listings = ProviderListings::default();
        listings.record_answer(key(), "u1", record("u1", "new"), at(12));
        let booted = ProviderServer { launched_at: Some(at(13)), ..record("u1", "new") };
        listings.record_list(key(), at(11), shared(vec![booted]));
        match listings.view(&key(), "u1") {
            Some((ProviderView::Present(seen), when)) => {
                assert_eq!((seen.launched_at, when), (Some(at(13)), at(11)));
            }
            other => panic!("{other:?}"),
        }
        // Another server of the uid in the list is no boot of the answered one.
        listings.record_list(
            key(),
            at(11),
            shared(vec![ProviderServer { launched_at: Some(at(13)), ..record("u1", "old") }]),
        );
        assert_eq!(id_of(listings.view(&key(), "u1")), Some(("new".into(), 12)));
    }

    #[test]
    fn several_servers_for_a_uid_give_no_view_and_a_delete_forgets() {
        let listings = ProviderListings::default();
        listings.record_list(key(), at(10), shared(vec![record("u1", "a"), record("u1", "b"), record("u2", "c")]));
        assert_eq!(listings.view(&key(), "u1"), None);
        listings.forget(&key(), "u2");
        assert_eq!(listings.view(&key(), "u2"), Some((ProviderView::Absent, at(10))));
    }
}
