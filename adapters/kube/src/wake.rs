//! The wake rule (DESIGN §6) as a stateful filter over the Server watch.
//!
//! kube-runtime's reconciler never sees the previous object, and its
//! `predicate_filter` hashes one object at a time, so a rising
//! ProviderCreateFailure edge cannot be told from a falling one there. This
//! filter remembers, per uid, the wake signals of the Server as last seen
//! (`server_core::WakeSignals`, a few bytes) and asks `server_core::wakes`
//! (the rule of `should_wake`) about each change: creation, a generation
//! change, the start of deletion and a rising edge get through; a falling
//! edge and status writes that leave the predicate unchanged do not.
//!
//! A pass reads its Server from the reflector's store, not from the event,
//! so a wake is only worth anything once the store holds the object that
//! caused it. The reflector applies a watch event before it reaches this
//! filter, except during a relist: it holds the relisted objects aside until
//! the last page is in (`InitDone`), and a pass triggered by a page before
//! that would read the copy from before the relist, or find nothing. So the
//! filter collects a relist and decides its wakes at `InitDone`, against the
//! Servers as seen before the relist, and a relist that breaks off before
//! its end changes nothing here.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::{Stream, StreamExt, future, stream};
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use server_core::{WakeSignals, wakes};
use tracing::warn;

use crate::cached::CachedServer;

/// What the filter remembers of a Server: the few signals the wake rule
/// reads (never a copy of the Server), and whether it could be read at all.
#[derive(Debug)]
struct Seen {
    signals: WakeSignals,
    readable: bool,
}

impl Seen {
    fn of(server: &CachedServer) -> Self {
        Seen { signals: server.wake_signals(), readable: server.content.is_ok() }
    }

    /// The wake rule; a Server that turns readable is as good as new.
    fn wakes_after(&self, previous: Option<&Seen>) -> bool {
        match previous {
            Some(previous) if !previous.readable && self.readable => true,
            previous => wakes(previous.map(|p| &p.signals), &self.signals),
        }
    }
}

/// A relisted Server: where the store holds it, its uid, and what it is.
type Relisted = (ObjectRef<CachedServer>, Option<String>, Seen);

/// Last-seen Servers by uid, and the Servers of a relist under way.
#[derive(Debug, Default)]
pub struct WakeFilter {
    last_seen: HashMap<String, Seen>,
    relist: Option<Vec<Relisted>>,
}

impl WakeFilter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one watch event, after the reflector applied it to the store;
    /// returns the Servers that must be reconciled now.
    pub fn on_event(&mut self, event: &Event<CachedServer>) -> Vec<ObjectRef<CachedServer>> {
        match event {
            Event::Apply(server) => {
                let reference = ObjectRef::from_obj(server);
                match server.uid() {
                    Some(uid) => self.observe(uid, Seen::of(server)).then_some(reference).into_iter().collect(),
                    // Not persisted by an API server; cannot be tracked, let it through.
                    None => vec![reference],
                }
            }
            Event::Delete(server) => {
                // The object is gone: nothing to reconcile, nothing to remember.
                if let Some(uid) = server.uid() {
                    self.last_seen.remove(&uid);
                }
                Vec::new()
            }
            Event::Init => {
                // A relist that broke off is dropped whole: the next one
                // compares against the same Servers as seen before.
                self.relist = Some(Vec::new());
                Vec::new()
            }
            Event::InitApply(server) => {
                let relisted = (ObjectRef::from_obj(server), server.uid(), Seen::of(server));
                self.relist.get_or_insert_with(Vec::new).push(relisted);
                Vec::new()
            }
            Event::InitDone => self.relist_done(),
        }
    }

    /// How many Servers the filter remembers.
    pub fn len(&self) -> usize {
        self.last_seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.last_seen.is_empty()
    }

    /// Decides the wakes of a whole relist: each Server against the copy seen
    /// before the watch was cut (a change missed in between still wakes).
    /// Servers deleted while the watch was down never get a Delete: only the
    /// relisted ones are remembered.
    fn relist_done(&mut self) -> Vec<ObjectRef<CachedServer>> {
        let relisted = self.relist.take().unwrap_or_default();
        let mut previous = std::mem::take(&mut self.last_seen);
        let mut wakes = Vec::new();
        for (reference, uid, server) in relisted {
            let Some(uid) = uid else {
                wakes.push(reference);
                continue;
            };
            if server.wakes_after(previous.remove(&uid).as_ref()) {
                wakes.push(reference);
            }
            self.last_seen.insert(uid, server);
        }
        wakes
    }

    fn observe(&mut self, uid: String, server: Seen) -> bool {
        let wake = server.wakes_after(self.last_seen.get(&uid));
        self.last_seen.insert(uid, server);
        wake
    }
}

/// The trigger stream of the controller: watch events in (already applied to
/// `store` by its reflector), Servers to reconcile out, as the store holds
/// them. Watch errors are logged; the watcher retries on its own backoff.
pub fn wake_stream<S>(events: S, store: Store<CachedServer>) -> impl Stream<Item = Arc<CachedServer>> + Send + 'static
where
    S: Stream<Item = Result<Event<CachedServer>, watcher::Error>> + Send + 'static,
{
    let mut filter = WakeFilter::new();
    events.flat_map(move |event| {
        let wakes = match event {
            Ok(event) => filter.on_event(&event),
            Err(error) => {
                warn!(error = %crate::error::watch_error_summary(&error), "watching Servers failed; retrying");
                Vec::new()
            }
        };
        // Gone from the store since (deleted): nothing to reconcile.
        let store = store.clone();
        stream::iter(wakes).filter_map(move |reference| future::ready(store.get(&reference)))
    })
}

#[cfg(test)]
mod relist_model;

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use server_core::model::{ConditionReason, ConditionStatus, ConditionType, Phase, set_condition};

    use super::*;
    use crate::crd::{Server, ServerResourceSpec};

    fn server(uid: &str, generation: i64) -> Server {
        let mut server = Server::new(uid, ServerResourceSpec::default());
        server.metadata.uid = Some(uid.into());
        server.metadata.generation = Some(generation);
        server.status = Some(Default::default());
        server
    }

    fn cached(server: Server) -> CachedServer {
        CachedServer::new(server)
    }

    fn health(mut server: Server, status: ConditionStatus, reason: ConditionReason) -> Server {
        let st = server.status.get_or_insert_with(Default::default);
        st.phase = Some(Phase::Building);
        set_condition(&mut st.conditions, ConditionType::Healthy, status, reason, "", Timestamp::UNIX_EPOCH);
        server
    }

    fn errored(server: Server) -> Server {
        health(server, ConditionStatus::False, ConditionReason::Errored)
    }

    fn woke(filter: &mut WakeFilter, server: &Server) -> bool {
        !filter.on_event(&Event::Apply(cached(server.clone()))).is_empty()
    }

    #[test]
    fn creation_wakes_and_a_repeat_does_not() {
        let mut filter = WakeFilter::new();
        assert!(woke(&mut filter, &server("u1", 1)));
        assert!(!woke(&mut filter, &server("u1", 1)));
    }

    #[test]
    fn status_writes_that_leave_the_predicate_do_not_wake() {
        let mut filter = WakeFilter::new();
        woke(&mut filter, &server("u1", 1));
        let mut written = server("u1", 1);
        if let Some(status) = written.status.as_mut() {
            status.private_ip = Some("10.0.0.1".into());
            status.phase = Some(Phase::Running);
        }
        assert!(!woke(&mut filter, &written));
        let degraded = health(server("u1", 1), ConditionStatus::False, ConditionReason::Degraded);
        assert!(!woke(&mut filter, &degraded));
    }

    #[test]
    fn a_rising_edge_wakes_and_a_falling_edge_does_not() {
        let mut filter = WakeFilter::new();
        woke(&mut filter, &server("u1", 1));
        assert!(woke(&mut filter, &errored(server("u1", 1))), "rising");
        assert!(!woke(&mut filter, &errored(server("u1", 1))), "still failed");
        let reset = health(server("u1", 1), ConditionStatus::Unknown, ConditionReason::Provisioning);
        assert!(!woke(&mut filter, &reset), "falling");
        assert!(woke(&mut filter, &errored(server("u1", 1))), "rising again");
    }

    #[test]
    fn generation_and_deletion_wake() {
        let mut filter = WakeFilter::new();
        woke(&mut filter, &server("u1", 1));
        assert!(woke(&mut filter, &server("u1", 2)), "spec change");
        let mut deleting = server("u1", 2);
        deleting.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert!(woke(&mut filter, &deleting), "deletion starts");
        assert!(filter.on_event(&Event::Delete(cached(deleting))).is_empty(), "gone: nothing to do");
        assert!(filter.is_empty(), "state dropped on delete");
    }

    #[test]
    fn a_relist_wakes_only_what_changed_while_the_watch_was_down() {
        let mut filter = WakeFilter::new();
        woke(&mut filter, &server("u1", 1));
        woke(&mut filter, &server("u2", 1));
        woke(&mut filter, &server("u3", 1));
        assert!(filter.on_event(&Event::Init).is_empty());
        assert!(filter.on_event(&Event::InitApply(cached(server("u1", 1)))).is_empty(), "decided at the end");
        assert!(filter.on_event(&Event::InitApply(cached(server("u2", 2)))).is_empty(), "decided at the end");
        let woken = filter.on_event(&Event::InitDone);
        assert_eq!(woken, [ObjectRef::from_obj(&cached(server("u2", 2)))], "only the spec change meanwhile");
        assert_eq!(filter.len(), 2, "u3 was deleted while the watch was down");
        assert!(woke(&mut filter, &server("u3", 1)), "a new u3 is a creation");
    }

    #[test]
    fn a_relist_that_breaks_off_is_decided_by_the_next_one() {
        let mut filter = WakeFilter::new();
        woke(&mut filter, &server("u1", 1));
        filter.on_event(&Event::Init);
        filter.on_event(&Event::InitApply(cached(server("u1", 2))));
        // Page 2 failed (e.g. 410 Expired): the watcher starts over.
        filter.on_event(&Event::Init);
        filter.on_event(&Event::InitApply(cached(server("u1", 2))));
        assert_eq!(filter.on_event(&Event::InitDone).len(), 1, "the spec change still wakes");
    }
}
