//! The event queue: a min-heap of (time, sequence) so events at the same
//! virtual instant run in the order they were scheduled, deterministically.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// What happens at an instant. Server-scoped events carry the Server index;
/// `Monitor` carries the tenant index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum EventKind {
    /// The user creates the Server.
    Arrive,
    /// A reconcile pass (from a wake, a requeue, a new term or a resync); the
    /// argument is the ticket it was scheduled with and the replica.
    Reconcile,
    /// A monitor poll of one tenant (identity).
    Monitor,
    /// A held-back watch delivery reaches a replica's cache (the argument).
    CacheCatchUp,
    /// The user deletes the Server.
    UserDelete,
    /// The user edits the Server's spec.
    SpecEdit,
    /// An operator resets providerCreateFailures.
    OperatorReset,
    /// A controller replica changes (dies, restarts, freezes, resumes, gains
    /// or loses the right to act); the target is the replica, the argument
    /// the change.
    Replica,
    /// A pass that decided to create runs its actions (its create call goes
    /// out); the argument is the replica.
    Act,
    /// Every Server is reconciled again.
    Resync,
    /// A replica's Server watch is cut (the target is the replica): it
    /// relists after a gap.
    WatchCut,
    /// A page of a replica's relist arrives; the argument is the relist's
    /// epoch and the page number.
    RelistPage,
}

impl EventKind {
    pub(crate) fn code(self) -> u64 {
        self as u64
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Event {
    pub(crate) at: u64,
    pub(crate) seq: u64,
    pub(crate) kind: EventKind,
    pub(crate) target: u32,
    pub(crate) arg: u32,
}

#[derive(Debug, Default)]
pub(crate) struct Queue {
    heap: BinaryHeap<Reverse<Event>>,
    seq: u64,
}

impl Queue {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Queue { heap: BinaryHeap::with_capacity(capacity), seq: 0 }
    }

    pub(crate) fn push(&mut self, at: u64, kind: EventKind, target: usize, arg: u32) {
        self.seq += 1;
        let target = u32::try_from(target).unwrap_or(u32::MAX);
        self.heap.push(Reverse(Event { at, seq: self.seq, kind, target, arg }));
    }

    pub(crate) fn pop(&mut self) -> Option<Event> {
        self.heap.pop().map(|Reverse(event)| event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_then_scheduling_order() {
        let mut queue = Queue::default();
        queue.push(20, EventKind::Monitor, 0, 0);
        queue.push(10, EventKind::Reconcile, 1, 0);
        queue.push(10, EventKind::Arrive, 2, 0);
        let order: Vec<(u64, usize)> = std::iter::from_fn(|| queue.pop()).map(|e| (e.at, e.target as usize)).collect();
        assert_eq!(order, [(10, 1), (10, 2), (20, 0)]);
    }
}
