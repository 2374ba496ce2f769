//! A model test of the trigger stream (`wake_stream` over kube-runtime's
//! reflector) against watch scripts proptest generates: changes delivered by
//! the watch, deletions, and watch cuts relisted on several pages with
//! changes made while the watch was down. A pass reads the store when its
//! wake comes out, as the controller does.
//!
//! The property: every time the store's copy of a Server changes in a way the
//! wake rule says wakes (against the copy it held before), a wake comes out
//! that reads that copy or a later one. The old filter, which judged each
//! relisted Server as its page arrived (while the store still held the copy
//! from before the relist), breaks it, and the test shows it does.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::{FutureExt, Stream, StreamExt, stream};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, reflector::store::Writer};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use server_core::model::{ConditionReason, ConditionStatus, ConditionType, Phase, set_condition};
use server_core::should_wake;
use tokio::sync::mpsc;

use super::wake_stream;
use crate::cached::CachedServer;
use crate::crd::{Server, ServerResourceSpec};

const NAMES: [&str; 4] = ["a", "b", "c", "d"];

/// What the API server holds of one Server.
#[derive(Clone, Debug, Default)]
struct Version {
    /// Removed and created again: a new object (a new uid).
    incarnation: u32,
    generation: i64,
    deleting: bool,
    errored: bool,
}

/// One step of a script.
#[derive(Clone, Debug)]
enum Step {
    /// The API server changes (or creates) a Server; the watch delivers it
    /// unless it is cut.
    Change(usize, Change),
    /// The Server is removed; the watch delivers the deletion unless cut.
    Remove(usize),
    /// The watch is cut: nothing reaches the store until the relist.
    Cut,
    /// The relist, `page_size` Servers a page, the controller running
    /// between pages (a round trip each).
    Relist { page_size: usize },
}

#[derive(Clone, Copy, Debug)]
enum Change {
    Spec,
    StartDeleting,
    Errored,
    Recovered,
}

fn arb_step() -> impl Strategy<Value = Step> {
    let change =
        prop_oneof![Just(Change::Spec), Just(Change::StartDeleting), Just(Change::Errored), Just(Change::Recovered)];
    prop_oneof![
        6 => (0..NAMES.len(), change).prop_map(|(i, c)| Step::Change(i, c)),
        1 => (0..NAMES.len()).prop_map(Step::Remove),
        2 => Just(Step::Cut),
        2 => (1usize..3).prop_map(|page_size| Step::Relist { page_size }),
    ]
}

/// The trigger stream under test: script events in, Servers to reconcile out.
type Wakes = Pin<Box<dyn Stream<Item = Arc<CachedServer>> + Send>>;

/// How the wake filter is fed the reflected events.
#[derive(Clone, Copy, Debug)]
enum Filter {
    /// Production: every event, relists decided at `InitDone`.
    Production,
    /// The old filter: each relisted Server judged as its page arrives.
    PerPage,
}

fn trigger(filter: Filter, events: mpsc::UnboundedReceiver<Event<CachedServer>>) -> (Store<CachedServer>, Wakes) {
    let (store, writer): (Store<CachedServer>, Writer<CachedServer>) = reflector::store();
    let mut events = events;
    let script = stream::poll_fn(move |cx| events.poll_recv(cx)).map(Ok::<_, watcher::Error>);
    let reflected = script.reflect(writer);
    let wakes: Wakes = match filter {
        Filter::Production => Box::pin(wake_stream(reflected, store.clone())),
        Filter::PerPage => {
            let old = reflected.filter_map(|event| {
                futures_util::future::ready(match event {
                    Ok(Event::InitApply(server)) => Some(Ok(Event::Apply(server))),
                    Ok(Event::Init | Event::InitDone) => None,
                    other => Some(other),
                })
            });
            Box::pin(wake_stream(old, store.clone()))
        }
    };
    (store, wakes)
}

struct World {
    events: mpsc::UnboundedSender<Event<CachedServer>>,
    wakes: Wakes,
    store: Store<CachedServer>,
    /// The API server: each Server's current version and resourceVersion.
    api: BTreeMap<usize, (Version, u64)>,
    rv: u64,
    incarnations: [u32; NAMES.len()],
    cut: bool,
    /// The store as last looked at, to see its transitions.
    stored: BTreeMap<usize, Arc<CachedServer>>,
    /// Per Server, the resourceVersion a wake is owed for.
    owed: BTreeMap<usize, u64>,
}

fn server(i: usize, version: &Version, rv: u64) -> CachedServer {
    let mut server = Server::new(NAMES[i], ServerResourceSpec::default());
    server.metadata.namespace = Some("ns".into());
    server.metadata.uid = Some(format!("uid-{}-{}", NAMES[i], version.incarnation));
    server.metadata.generation = Some(version.generation);
    server.metadata.resource_version = Some(rv.to_string());
    if version.deleting {
        server.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
    }
    let status = server.status.get_or_insert_with(Default::default);
    status.phase = Some(Phase::Building);
    let (health, reason) = if version.errored {
        (ConditionStatus::False, ConditionReason::Errored)
    } else {
        (ConditionStatus::False, ConditionReason::Degraded)
    };
    set_condition(&mut status.conditions, ConditionType::Healthy, health, reason, "", Timestamp::UNIX_EPOCH);
    CachedServer::new(server)
}

fn rv_of(server: &CachedServer) -> u64 {
    server.resource_version().and_then(|rv| rv.parse().ok()).unwrap_or_default()
}

impl World {
    fn new(filter: Filter) -> Self {
        let (events, receiver) = mpsc::unbounded_channel();
        let (store, wakes) = trigger(filter, receiver);
        let mut world = World {
            events,
            wakes,
            store,
            api: BTreeMap::new(),
            rv: 0,
            incarnations: [0; NAMES.len()],
            cut: false,
            stored: BTreeMap::new(),
            owed: BTreeMap::new(),
        };
        // The initial list: empty.
        world.send(Event::Init);
        world.send(Event::InitDone);
        world.run_controller();
        world
    }

    fn cached(&self, i: usize) -> Option<CachedServer> {
        self.api.get(&i).map(|(version, rv)| server(i, version, *rv))
    }

    /// The watch delivers one event.
    fn send(&mut self, event: Event<CachedServer>) {
        let _ = self.events.send(event);
    }

    /// The controller runs (a round trip to the API server passes): wakes
    /// come out and read the store; then what the store's changes owe and
    /// what the wakes paid are recorded.
    fn run_controller(&mut self) {
        let mut read = Vec::new();
        while let Some(Some(server)) = self.wakes.next().now_or_never() {
            read.push(server);
        }
        for (i, name) in NAMES.iter().enumerate() {
            let reference = ObjectRef::<CachedServer>::new(name).within("ns");
            let now = self.store.get(&reference);
            let before = self.stored.get(&i);
            let changed = match (&now, before) {
                (Some(now), Some(before)) => rv_of(now) != rv_of(before),
                (now, before) => now.is_some() != before.is_some(),
            };
            if changed {
                match &now {
                    Some(now) => {
                        // The oracle asks the rule about whole Servers, not the filter's signals.
                        let previous = before.map(|b| full_view(b));
                        if should_wake(previous.as_ref(), &full_view(now)) {
                            self.owed.insert(i, rv_of(now));
                        }
                        self.stored.insert(i, now.clone());
                    }
                    None => {
                        self.stored.remove(&i);
                        self.owed.remove(&i);
                    }
                }
            }
        }
        for server in read {
            let i = NAMES.iter().position(|n| *n == server.name_any()).unwrap_or_default();
            if self.owed.get(&i).is_some_and(|owed| rv_of(&server) >= *owed) {
                self.owed.remove(&i);
            }
        }
    }

    fn step(&mut self, step: &Step) {
        match step {
            Step::Change(i, change) => {
                self.rv += 1;
                let incarnation = self.incarnations[*i];
                let (version, rv) =
                    self.api.entry(*i).or_insert_with(|| (Version { incarnation, ..Version::default() }, 0));
                match change {
                    Change::Spec => version.generation += 1,
                    Change::StartDeleting if !version.deleting => {
                        version.deleting = true;
                        version.generation += 1;
                    }
                    Change::StartDeleting => {}
                    Change::Errored => version.errored = true,
                    Change::Recovered => version.errored = false,
                }
                *rv = self.rv;
                if !self.cut
                    && let Some(server) = self.cached(*i)
                {
                    self.send(Event::Apply(server));
                    self.run_controller();
                }
            }
            Step::Remove(i) => {
                if let Some(server) = self.cached(*i) {
                    self.api.remove(i);
                    self.incarnations[*i] += 1;
                    if !self.cut {
                        self.send(Event::Delete(server));
                        self.run_controller();
                    }
                }
            }
            Step::Cut => self.cut = true,
            Step::Relist { page_size } => {
                self.send(Event::Init);
                let listed: Vec<usize> = self.api.keys().copied().collect();
                // The last page comes with InitDone; a round trip before each other.
                for (n, page) in listed.chunks(*page_size).enumerate() {
                    if n > 0 {
                        self.run_controller();
                    }
                    for i in page {
                        if let Some(server) = self.cached(*i) {
                            self.send(Event::InitApply(server));
                        }
                    }
                }
                self.send(Event::InitDone);
                self.run_controller();
                self.cut = false;
            }
        }
    }

    /// A relist at the end brings the store level; then nothing may be owed.
    fn settle(&mut self) -> Result<(), TestCaseError> {
        self.step(&Step::Relist { page_size: 1 });
        prop_assert!(self.owed.is_empty(), "wakes owed and never paid: {:?}", self.owed);
        Ok(())
    }
}

fn scripts_pay_every_wake(filter: Filter) -> Result<(), String> {
    let config = Config { cases: 256, failure_persistence: None, ..Config::default() };
    let result = TestRunner::new(config).run(&prop::collection::vec(arb_step(), 1..40), |steps| {
        let mut world = World::new(filter);
        for step in &steps {
            world.step(step);
        }
        world.settle()
    });
    match result {
        Ok(()) => Ok(()),
        Err(TestError::Fail(reason, steps)) => Err(format!("{reason}; minimal script: {steps:?}")),
        Err(TestError::Abort(reason)) => Err(format!("aborted: {reason}")),
    }
}

#[test]
fn every_wake_reads_what_woke_it_through_relists_on_several_pages() {
    if let Err(failure) = scripts_pay_every_wake(Filter::Production) {
        panic!("{failure}");
    }
}

#[test]
fn the_old_per_page_filter_is_caught() {
    assert!(scripts_pay_every_wake(Filter::PerPage).is_err(), "the property did not catch the per-page filter");
}

/// The whole core view of a cached Server (metadata alone if unreadable).
fn full_view(server: &CachedServer) -> server_core::Server {
    server.core().unwrap_or_else(|| server_core::Server { meta: server.meta_only().meta, ..Default::default() })
}
