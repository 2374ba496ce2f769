//! The wake rule (DESIGN §6) as a stateful filter over the Server watch.
//!
//! kube-runtime's reconciler never sees the previous object, and its
//! `predicate_filter` hashes one object at a time, so a rising
//! ProviderCreateFailure edge cannot be told from a falling one there. This
//! filter remembers, per uid, the Server as last seen and asks
//! `server_core::should_wake` about each change: creation, a generation
//! change, the start of deletion and a rising edge get through; a falling
//! edge and status writes that leave the predicate unchanged do not.

use std::collections::{HashMap, HashSet};

use futures_util::{Stream, StreamExt, future};
use kube::ResourceExt;
use kube::runtime::watcher::{self, Event};
use server_core::model::Server as CoreServer;
use server_core::should_wake;

use crate::convert::core_server;
use crate::crd::Server;

/// Last-seen Servers by uid, and the uids seen during a relist.
#[derive(Debug, Default)]
pub struct WakeFilter {
    last_seen: HashMap<String, CoreServer>,
    relisted: Option<HashSet<String>>,
}

impl WakeFilter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one watch event; returns the Server if it must be reconciled.
    pub fn on_event(&mut self, event: Event<Server>) -> Option<Server> {
        match event {
            Event::Apply(server) => self.observe(server),
            Event::InitApply(server) => {
                if let (Some(relisted), Some(uid)) = (self.relisted.as_mut(), server.uid()) {
                    relisted.insert(uid);
                }
                // A relist after a cut watch compares against what was seen
                // before the cut, so a change missed in between still wakes.
                self.observe(server)
            }
            Event::Delete(server) => {
                // The object is gone: nothing to reconcile, nothing to remember.
                if let Some(uid) = server.uid() {
                    self.last_seen.remove(&uid);
                }
                None
            }
            Event::Init => {
                self.relisted = Some(HashSet::new());
                None
            }
            Event::InitDone => {
                // Servers deleted while the watch was down never get a Delete.
                if let Some(relisted) = self.relisted.take() {
                    self.last_seen.retain(|uid, _| relisted.contains(uid));
                }
                None
            }
        }
    }

    /// How many Servers the filter remembers.
    pub fn len(&self) -> usize {
        self.last_seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.last_seen.is_empty()
    }

    fn observe(&mut self, server: Server) -> Option<Server> {
        let Some(uid) = server.uid() else {
            // Not persisted by an API server; cannot be tracked, let it through.
            return Some(server);
        };
        let new = core_server(&server);
        let wake = should_wake(self.last_seen.get(&uid), &new);
        self.last_seen.insert(uid, new);
        wake.then_some(server)
    }
}

/// The trigger stream of the controller: watch events in, Servers to
/// reconcile out. Watch errors pass through for the controller's backoff.
pub fn wake_stream<S>(events: S) -> impl Stream<Item = Result<Server, watcher::Error>> + Send + 'static
where
    S: Stream<Item = Result<Event<Server>, watcher::Error>> + Send + 'static,
{
    let mut filter = WakeFilter::new();
    events.filter_map(move |event| {
        future::ready(match event {
            Ok(event) => filter.on_event(event).map(Ok),
            Err(error) => Some(Err(error)),
        })
    })
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use server_core::model::{ConditionReason, ConditionStatus, ConditionType, Phase, set_condition};

    use super::*;
    use crate::crd::ServerResourceSpec;

    fn server(uid: &str, generation: i64) -> Server {
        let mut server = Server::new("s", ServerResourceSpec::default());
        server.metadata.uid = Some(uid.into());
        server.metadata.generation = Some(generation);
        server.status = Some(Default::default());
        server
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
        filter.on_event(Event::Apply(server.clone())).is_some()
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
        assert!(filter.on_event(Event::Delete(deleting)).is_none(), "gone: nothing to do");
        assert!(filter.is_empty(), "state dropped on delete");
    }

    #[test]
    fn a_relist_wakes_only_what_changed_while_the_watch_was_down() {
        let mut filter = WakeFilter::new();
        woke(&mut filter, &server("u1", 1));
        woke(&mut filter, &server("u2", 1));
        woke(&mut filter, &server("u3", 1));
        assert!(filter.on_event(Event::Init).is_none());
        assert!(filter.on_event(Event::InitApply(server("u1", 1))).is_none(), "unchanged");
        assert!(filter.on_event(Event::InitApply(server("u2", 2))).is_some(), "spec changed meanwhile");
        assert!(filter.on_event(Event::InitDone).is_none());
        assert_eq!(filter.len(), 2, "u3 was deleted while the watch was down");
        assert!(woke(&mut filter, &server("u3", 1)), "a new u3 is a creation");
    }
}
