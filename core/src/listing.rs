//! Which list a monitor poll asks the provider for, and the provider's
//! servers as the lists taken so far show them (DESIGN §11, "Lists of
//! changes").
//!
//! A poll after the first asks only for the servers changed since the last
//! it saw (Nova's `changes-since`, which shows deleted servers too), so a
//! steady poll costs what changed, not the project's size. A complete list
//! replaces everything: the first of each leadership term (the view is the
//! term's), and one every [`COMPLETE_LIST_EVERY`], which also brings what
//! the provider changes without dating it (Nova does not date a floating
//! IP's association: it changes the network cache, not the instance). While
//! a baremetal server builds, every list is complete: its progress is its
//! Ironic node's, and Nova dates none of it.
//!
//! The provider dates changes on its own clock, so where the next list
//! starts is read off that clock, never this process's: the later of the
//! latest date the last list showed and the provider's clock when it
//! answered (HTTP `Date`), less that list's duration (a server changed on a
//! page already read is dated before the changes later pages show) and
//! [`SINCE_MARGIN`] (the hosts that date changes disagree a little). A
//! provider that does not say its clock: the start moves on by the time
//! that passed here between the lists' starts (durations agree where
//! instants may not), so a burst of changes long past is not listed at
//! every poll. A complete list sets the start afresh, so no drift between
//! the clocks adds up past one [`COMPLETE_LIST_EVERY`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::port::{AttachedResource, ProviderServer, ProviderStatus};
use crate::reconcile::Action;

/// How often a poll lists every server rather than the changes.
pub const COMPLETE_LIST_EVERY: Duration = Duration::from_secs(600);

/// How far before the latest change the provider showed the next list of
/// changes starts, besides the last list's duration.
pub const SINCE_MARGIN: Duration = Duration::from_secs(30);

/// What a list covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListScope {
    /// Every server of the project.
    Complete,
    /// The servers changed (made, changed or deleted) at or after this time
    /// of the provider's clock.
    ChangedSince(Timestamp),
}

/// A list's answer. A port that cannot list changes answers a complete
/// list to any ask.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProviderListing {
    /// `None`: complete.
    pub changed_since: Option<Timestamp>,
    /// The servers that exist.
    pub servers: Vec<ProviderServer>,
    /// The provider IDs of servers the list shows deleted.
    pub deleted: Vec<String>,
    /// The latest change the list dates (the provider's clock), deleted
    /// servers' included; `None` when it dates none.
    pub latest_change: Option<Timestamp>,
    /// The provider's clock when it answered the list's first page (HTTP
    /// `Date`), if it said.
    pub provider_now: Option<Timestamp>,
}

impl ProviderListing {
    /// A complete list of `servers`, dating no change.
    pub fn complete(servers: Vec<ProviderServer>) -> Self {
        ProviderListing { servers, ..ProviderListing::default() }
    }
}

/// Where a list of changes after a list may start, from the latest change
/// that list showed and how long it took.
pub type SinceRule = fn(Timestamp, Duration) -> Timestamp;

/// The rule: the latest change, less the list's duration and
/// [`SINCE_MARGIN`], in whole seconds down (Nova dates to the second).
pub fn since(latest_change: Timestamp, last_list_took: Duration) -> Timestamp {
    let back = SignedDuration::try_from(last_list_took.saturating_add(SINCE_MARGIN)).unwrap_or(SignedDuration::MAX);
    whole_seconds_down(latest_change.checked_sub(back).unwrap_or(Timestamp::MIN))
}

fn whole_seconds_down(at: Timestamp) -> Timestamp {
    let whole = at.as_second() - i64::from(at.subsec_nanosecond() < 0);
    Timestamp::from_second(whole).unwrap_or(at)
}

/// Whether what `action` changes shows in its server's record without the
/// provider dating it, so that no list of changes would show it: a
/// floating IP associated or released (Nova refreshes the instance's
/// network cache, not the instance, so `updated` stays). After one, the
/// next list is complete ([`ListedServers::undated_change`]).
pub fn changes_undated(action: &Action) -> bool {
    matches!(action, Action::EnsureFloatingIp(_) | Action::ReleaseAttachment(AttachedResource::FloatingIp { .. }))
}

/// The servers of one project as the lists of a term show them.
#[derive(Clone, Debug)]
pub struct ListedServers {
    /// Shared with what is built from them (the driver's view for passes).
    by_id: HashMap<String, Arc<ProviderServer>>,
    /// When (this process's clock) the latest complete list started.
    complete_at: Option<Timestamp>,
    /// Where the next list of changes starts (the provider's clock), and
    /// when (this process's clock) the list it was read from started.
    since: Option<(Timestamp, Timestamp)>,
    /// A change the provider does not date was made since the last
    /// complete list.
    undated: bool,
    since_rule: SinceRule,
}

impl Default for ListedServers {
    fn default() -> Self {
        ListedServers::with_since_rule(since)
    }
}

impl ListedServers {
    /// Starts from nothing with another rule for where lists of changes
    /// start (the tests check their property against broken ones).
    pub fn with_since_rule(since_rule: SinceRule) -> Self {
        ListedServers { by_id: HashMap::new(), complete_at: None, since: None, undated: false, since_rule }
    }

    /// The list a poll at `now` (this process's clock) asks for: complete
    /// when there is none yet, when the last is [`COMPLETE_LIST_EVERY`]
    /// old, when no list dated a change, or while a baremetal server
    /// builds (its progress is its Ironic node's, which Nova does not
    /// date), or after a change the provider does not date; else the
    /// changes since.
    pub fn next_scope(&self, now: Timestamp) -> ListScope {
        if self.undated {
            return ListScope::Complete;
        }
        let node_deploying = |s: &ProviderServer| s.status == ProviderStatus::Build && s.ironic.is_some();
        if self.servers().any(node_deploying) {
            return ListScope::Complete;
        }
        match (self.complete_at, self.since) {
            (Some(complete_at), Some((since, _)))
                if now.duration_since(complete_at)
                    < SignedDuration::try_from(COMPLETE_LIST_EVERY).unwrap_or_default() =>
            {
                ListScope::ChangedSince(whole_seconds_down(since))
            }
            _ => ListScope::Complete,
        }
    }

    /// Takes in a list that started at `started` and ended at `ended` (this
    /// process's clock). A list of changes with no complete list before it
    /// is left out: it says nothing of the servers it does not show.
    /// Answers whether the list was taken in.
    pub fn apply(&mut self, listing: ProviderListing, started: Timestamp, ended: Timestamp) -> bool {
        let ProviderListing { changed_since, servers, deleted, latest_change, provider_now } = listing;
        let took = ended.duration_since(started).unsigned_abs();
        // Either is no later than the provider's clock at the list's end.
        let shown = latest_change.max(provider_now).map(|latest| (self.since_rule)(latest, took));
        match changed_since {
            None => {
                self.by_id = servers.into_iter().map(|server| (server.id.clone(), Arc::new(server))).collect();
                self.complete_at = Some(started);
                self.undated = false;
                self.since = shown.map(|since| (since, started));
            }
            Some(_) if self.complete_at.is_none() => return false,
            Some(_) => {
                for server in servers {
                    self.by_id.insert(server.id.clone(), Arc::new(server));
                }
                for id in &deleted {
                    self.by_id.remove(id);
                }
                let moved_on = self.since.and_then(|(since, at)| since.saturating_add(started.duration_since(at)).ok());
                self.since = moved_on.max(shown).map(|since| (since, started));
            }
        }
        true
    }

    /// A change the provider does not date ([`changes_undated`]) was made
    /// before now: the next list is complete.
    pub fn undated_change(&mut self) {
        self.undated = true;
    }

    /// Every server the lists show, in no order.
    pub fn servers(&self) -> impl Iterator<Item = &ProviderServer> {
        self.by_id.values().map(|server| &**server)
    }

    /// Every server the lists show, shared, in no order.
    pub fn shared_servers(&self) -> impl Iterator<Item = &Arc<ProviderServer>> {
        self.by_id.values()
    }

    /// How many servers the lists show.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether the lists show no server.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap_or_default()
    }

    fn server(id: &str) -> ProviderServer {
        ProviderServer { id: id.into(), server_uid: format!("uid-{id}"), ..ProviderServer::default() }
    }

    fn ids(view: &ListedServers) -> Vec<String> {
        let mut ids: Vec<String> = view.servers().map(|s| s.id.clone()).collect();
        ids.sort();
        ids
    }

    #[test]
    fn the_first_list_is_complete_and_later_ones_ask_for_changes_from_the_providers_dates() {
        let mut view = ListedServers::default();
        assert_eq!(view.next_scope(at(100)), ListScope::Complete);
        let first = ProviderListing { latest_change: Some(at(5_000)), ..ProviderListing::complete(vec![server("a")]) };
        assert!(view.apply(first, at(100), at(104)));
        // 5,000 on the provider's clock, less the 4 s the list took and the margin.
        assert_eq!(view.next_scope(at(110)), ListScope::ChangedSince(at(5_000 - 4 - 30)));
        let changes = ProviderListing {
            changed_since: Some(at(4_966)),
            servers: vec![server("b")],
            deleted: vec!["a".into()],
            latest_change: Some(at(5_010)),
            provider_now: None,
        };
        assert!(view.apply(changes, at(110), at(111)));
        assert_eq!(ids(&view), ["b"]);
        assert_eq!(view.next_scope(at(120)), ListScope::ChangedSince(at(5_010 - 1 - 30)));
        // With nothing new, the start moves on by the 10 s between the
        // lists' starts: a burst of changes long past is not listed again.
        let quiet = ProviderListing { changed_since: Some(at(4_979)), ..Default::default() };
        assert!(view.apply(quiet, at(120), at(121)));
        assert_eq!(view.next_scope(at(130)), ListScope::ChangedSince(at(4_979 + 10)));
        // An older date than that does not move it back.
        let stale =
            ProviderListing { changed_since: Some(at(4_989)), latest_change: Some(at(4_000)), ..Default::default() };
        assert!(view.apply(stale, at(130), at(131)));
        assert_eq!(view.next_scope(at(140)), ListScope::ChangedSince(at(4_989 + 10)));
        // The provider's own clock, when it says, counts as a change shown.
        let dated =
            ProviderListing { changed_since: Some(at(4_999)), provider_now: Some(at(6_000)), ..Default::default() };
        assert!(view.apply(dated, at(140), at(142)));
        assert_eq!(view.next_scope(at(150)), ListScope::ChangedSince(at(6_000 - 2 - 30)));
        // Ten minutes after the complete list, the next is complete again.
        assert_eq!(view.next_scope(at(100 + 600)), ListScope::Complete);
    }

    #[test]
    fn while_a_baremetal_server_builds_every_list_is_complete() {
        let mut view = ListedServers::default();
        let deploying = ProviderServer {
            status: ProviderStatus::Build,
            ironic: Some(crate::baremetal::ProvisionState::Deploying),
            ..server("a")
        };
        let listing = ProviderListing { latest_change: Some(at(50)), ..ProviderListing::complete(vec![deploying]) };
        assert!(view.apply(listing, at(100), at(101)));
        assert_eq!(view.next_scope(at(110)), ListScope::Complete);
        let vm = ProviderServer { status: ProviderStatus::Build, ..server("a") };
        let listing = ProviderListing { latest_change: Some(at(50)), ..ProviderListing::complete(vec![vm]) };
        assert!(view.apply(listing, at(110), at(111)));
        assert!(matches!(view.next_scope(at(120)), ListScope::ChangedSince(_)));
    }

    #[test]
    fn after_a_change_the_provider_does_not_date_the_next_list_is_complete() {
        let mut view = ListedServers::default();
        let listing = ProviderListing { latest_change: Some(at(50)), ..ProviderListing::complete(vec![server("a")]) };
        assert!(view.apply(listing.clone(), at(100), at(101)));
        view.undated_change();
        assert_eq!(view.next_scope(at(110)), ListScope::Complete);
        // A list of changes does not answer it; a complete one does.
        let changes = ProviderListing { changed_since: Some(at(20)), ..ProviderListing::default() };
        assert!(view.apply(changes, at(110), at(111)));
        assert_eq!(view.next_scope(at(120)), ListScope::Complete);
        assert!(view.apply(listing, at(120), at(121)));
        assert!(matches!(view.next_scope(at(130)), ListScope::ChangedSince(_)));
        let ip = crate::port::FloatingIpRequest::default();
        assert!(changes_undated(&Action::EnsureFloatingIp(ip)));
        assert!(changes_undated(&Action::ReleaseAttachment(AttachedResource::FloatingIp { id: "f".into() })));
        assert!(!changes_undated(&Action::ReleaseAttachment(AttachedResource::Port { id: "p".into() })));
    }

    #[test]
    fn changes_without_a_complete_list_before_them_are_left_out() {
        let mut view = ListedServers::default();
        let changes =
            ProviderListing { changed_since: Some(at(1)), servers: vec![server("a")], ..ProviderListing::default() };
        assert!(!view.apply(changes, at(10), at(11)));
        assert!(view.is_empty());
        assert_eq!(view.next_scope(at(12)), ListScope::Complete);
    }

    #[test]
    fn a_list_that_dates_nothing_is_followed_by_a_complete_one() {
        let mut view = ListedServers::default();
        assert!(view.apply(ProviderListing::complete(vec![server("a")]), at(10), at(11)));
        assert_eq!(view.len(), 1);
        assert_eq!(view.next_scope(at(20)), ListScope::Complete);
    }

    #[test]
    fn since_is_in_whole_seconds_and_never_overflows() {
        let latest = Timestamp::from_millisecond(100_700).unwrap_or_default();
        assert_eq!(since(latest, Duration::from_millis(200)), at(70));
        let early = Timestamp::from_millisecond(10_700).unwrap_or_default();
        assert_eq!(since(early, Duration::from_millis(200)), at(-20));
        assert_eq!(since(Timestamp::MIN, Duration::MAX), Timestamp::MIN);
    }
}
