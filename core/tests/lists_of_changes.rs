//! The lists of changes (`server_core::listing`): once the provider stops
//! changing, one more poll shows every server as it is, whatever the
//! provider changed while earlier lists paged, and however its hosts'
//! clocks disagree (within the margin); and long after the last change, the
//! lists start after it.
//!
//! The property runs over a since rule, so it runs against server-core's
//! (it must hold) and against deliberately broken ones (it must catch them).
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use server_core::listing::{ListScope, ListedServers, ProviderListing, SinceRule, since};
use server_core::port::ProviderServer;
use support::must_catch;

/// Servers in the modelled project; a list reads them in two pages.
const SERVERS: u8 = 6;

/// One server as the provider holds it: its version (what a list shows of
/// it), when its last change was dated, and whether it is deleted.
#[derive(Clone, Copy, Debug)]
struct Row {
    version: u32,
    dated: i64,
    deleted: bool,
}

#[derive(Clone, Debug)]
enum Step {
    /// Server `id` is made, changed or deleted; the host dating it runs
    /// `skew` seconds off.
    Change { id: u8, delete: bool, skew: i64 },
    /// A poll whose second page is read `took` seconds after its first,
    /// with these changes in between, each after its wait.
    Poll { took: i64, between: Vec<(i64, (u8, bool, i64))> },
    /// Time passes.
    Wait(i64),
}

fn change() -> impl Strategy<Value = (u8, bool, i64)> {
    (0..SERVERS, prop::bool::weighted(0.25), -5i64..=5)
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => change().prop_map(|(id, delete, skew)| Step::Change { id, delete, skew }),
        2 => (0i64..120, prop::collection::vec((0i64..60, change()), 0..3)).prop_map(|(took, between)| Step::Poll { took, between }),
        1 => (1i64..200).prop_map(Step::Wait),
    ]
}

struct Provider {
    rows: BTreeMap<u8, Row>,
    now: i64,
    versions: u32,
}

impl Provider {
    fn change(&mut self, id: u8, delete: bool, skew: i64) {
        self.now += 1;
        self.versions += 1;
        let row = Row { version: self.versions, dated: self.now + skew, deleted: delete };
        if delete && self.rows.get(&id).is_none_or(|r| r.deleted) {
            return;
        }
        self.rows.insert(id, row);
    }

    /// One page: the servers in `ids` the scope shows, as Nova answers
    /// (deleted ones only in a list of changes).
    fn page(&self, scope: ListScope, ids: std::ops::Range<u8>, listing: &mut ProviderListing) {
        for (id, row) in self.rows.range(ids) {
            let shown = match scope {
                ListScope::Complete => !row.deleted,
                ListScope::ChangedSince(since) => row.dated >= since.as_second(),
            };
            if !shown {
                continue;
            }
            let dated = Timestamp::from_second(row.dated).unwrap();
            listing.latest_change = listing.latest_change.max(Some(dated));
            if row.deleted {
                listing.deleted.push(id.to_string());
            } else {
                listing.servers.push(ProviderServer {
                    id: id.to_string(),
                    image_id: Some(row.version.to_string()),
                    ..ProviderServer::default()
                });
            }
        }
    }

    /// One poll; answers the list it asked for.
    fn poll(&mut self, view: &mut ListedServers, took: i64, between: &[(i64, (u8, bool, i64))]) -> ListScope {
        let started = self.now;
        let scope = view.next_scope(Timestamp::from_second(started).unwrap());
        // The provider says its clock when it answers the first page.
        let mut listing =
            ProviderListing { provider_now: Some(Timestamp::from_second(started).unwrap()), ..Default::default() };
        if let ListScope::ChangedSince(since) = scope {
            listing.changed_since = Some(since);
        }
        self.page(scope, 0..SERVERS / 2, &mut listing);
        for &(wait, (id, delete, skew)) in between {
            self.now += wait;
            self.change(id, delete, skew);
        }
        self.now = self.now.max(started + took);
        self.page(scope, SERVERS / 2..SERVERS, &mut listing);
        view.apply(listing, Timestamp::from_second(started).unwrap(), Timestamp::from_second(self.now).unwrap());
        self.now += 1;
        scope
    }

    fn live(&self) -> BTreeMap<String, String> {
        self.rows.iter().filter(|(_, r)| !r.deleted).map(|(id, r)| (id.to_string(), r.version.to_string())).collect()
    }
}

fn shown(view: &ListedServers) -> BTreeMap<String, String> {
    view.servers().map(|s| (s.id.clone(), s.image_id.clone().unwrap_or_default())).collect()
}

/// After any history, one poll while the provider stands still shows it.
fn a_quiet_poll_shows_the_provider(rule: SinceRule) -> Result<(), String> {
    let mut runner = TestRunner::new(Config { cases: 512, failure_persistence: None, ..Config::default() });
    runner
        .run(&prop::collection::vec(step(), 1..24), |steps| {
            let mut provider = Provider { rows: BTreeMap::new(), now: 1_000_000, versions: 0 };
            let mut view = ListedServers::with_since_rule(rule);
            for step in &steps {
                match step {
                    Step::Change { id, delete, skew } => provider.change(*id, *delete, *skew),
                    Step::Poll { took, between } => {
                        provider.poll(&mut view, *took, between);
                    }
                    Step::Wait(seconds) => provider.now += seconds,
                }
            }
            provider.now += 1;
            let _ = provider.poll(&mut view, 0, &[]);
            prop_assert_eq!(shown(&view), provider.live(), "after {:?}", steps);
            // Long after the last change, a list of changes that follows
            // one starts after it: a past burst is not listed at every poll.
            // (Two polls five minutes apart: at most one is complete.)
            let last_change = provider.rows.values().map(|r| r.dated).max().unwrap_or(i64::MIN);
            for _ in 0..2 {
                provider.now += 300;
                let asked = provider.poll(&mut view, 0, &[]);
                let next = view.next_scope(Timestamp::from_second(provider.now).unwrap());
                if let (ListScope::ChangedSince(_), ListScope::ChangedSince(since)) = (asked, next) {
                    prop_assert!(since.as_second() > last_change, "{since} after {last_change}: {:?}", steps);
                }
            }
            Ok(())
        })
        .map_err(|e| e.to_string())
}

#[test]
fn a_quiet_poll_shows_every_server_as_the_provider_holds_it() {
    a_quiet_poll_shows_the_provider(since).unwrap();
}

/// Starts at the latest change: a host whose clock is behind dates a later
/// change earlier, and it is missed.
fn at_the_latest_change(latest: Timestamp, _took: Duration) -> Timestamp {
    latest
}

/// Leaves out the list's duration: a change on a page already read, dated
/// before the later pages' changes, is missed.
fn margin_only(latest: Timestamp, _took: Duration) -> Timestamp {
    since(latest, Duration::ZERO)
}

#[test]
fn the_property_catches_broken_since_rules() {
    must_catch(|| a_quiet_poll_shows_the_provider(at_the_latest_change));
    must_catch(|| a_quiet_poll_shows_the_provider(margin_only));
}
