//! Virtual time and the events scheduled in it: a min-heap of (time,
//! sequence) so events at the same virtual instant run in the order they
//! were scheduled, deterministically. Nothing reads a clock.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use jiff::Timestamp;

/// Virtual time zero: 2025-06-01T00:00:00Z, in milliseconds.
const EPOCH_MS: i64 = 1_748_736_000_000;

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
    /// The user pauses the Server (argument 1) or unpauses it (0).
    Pause,
    /// An operator annotates the Server to request a retry.
    RetryRequest,
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

/// The simulation's clock and agenda: the current virtual instant and every
/// event scheduled after it. The engine moves the clock to each event it
/// takes.
#[derive(Debug)]
pub(crate) struct EventQueue {
    heap: BinaryHeap<Reverse<Event>>,
    seq: u64,
    /// Milliseconds since virtual time zero.
    now: u64,
    /// The same instant as a timestamp, for the rules and the cloud model.
    now_ts: Timestamp,
}

impl Default for EventQueue {
    fn default() -> Self {
        EventQueue::with_capacity(0)
    }
}

impl EventQueue {
    /// An empty agenda at virtual time zero.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        EventQueue { heap: BinaryHeap::with_capacity(capacity), seq: 0, now: 0, now_ts: timestamp_at(0) }
    }

    /// Milliseconds since virtual time zero.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        self.now
    }

    /// The current instant as a timestamp.
    #[inline]
    pub(crate) fn now_ts(&self) -> Timestamp {
        self.now_ts
    }

    /// Moves the clock to `now`: the instant of the event just taken, or
    /// the horizon at the end.
    #[inline]
    pub(crate) fn advance_to(&mut self, now: u64) {
        self.now = now;
        self.now_ts = timestamp_at(now);
    }

    #[inline]
    pub(crate) fn push(&mut self, at: u64, kind: EventKind, target: usize, arg: u32) {
        self.seq += 1;
        let target = u32::try_from(target).unwrap_or(u32::MAX);
        self.heap.push(Reverse(Event { at, seq: self.seq, kind, target, arg }));
    }

    /// The earliest event (the first scheduled among those at one instant).
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<Event> {
        self.heap.pop().map(|Reverse(event)| event)
    }
}

/// Virtual instant `at` (milliseconds since virtual time zero) as a timestamp.
#[inline]
pub(crate) fn timestamp_at(at: u64) -> Timestamp {
    Timestamp::from_millisecond(epoch_ms(at)).unwrap_or(Timestamp::MAX)
}

/// Virtual instant `at` in milliseconds since the Unix epoch.
#[inline]
pub(crate) fn epoch_ms(at: u64) -> i64 {
    EPOCH_MS.saturating_add(i64::try_from(at).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_then_scheduling_order() {
        let mut queue = EventQueue::default();
        queue.push(20, EventKind::Monitor, 0, 0);
        queue.push(10, EventKind::Reconcile, 1, 0);
        queue.push(10, EventKind::Arrive, 2, 0);
        let order: Vec<(u64, usize)> = std::iter::from_fn(|| queue.pop()).map(|e| (e.at, e.target as usize)).collect();
        assert_eq!(order, [(10, 1), (10, 2), (20, 0)]);
    }

    #[test]
    fn the_clock_starts_at_virtual_time_zero_and_moves_on() {
        let mut queue = EventQueue::default();
        assert_eq!(queue.now_ts().as_millisecond(), EPOCH_MS);
        queue.advance_to(1_500);
        assert_eq!((queue.now(), queue.now_ts().as_millisecond()), (1_500, EPOCH_MS + 1_500));
    }
}
