//! Passes at once (`--concurrency`): a pass holds a slot while it reads its
//! facts, writes the Server and calls the cloud, and gives it up while it
//! waits on the reference writer. That wait loads nothing (the writer
//! lingers to gather the changes of many passes into one write of the
//! shared object), so other passes run meanwhile, and the more passes wait
//! on one object, the fewer writes of it.
//!
//! kube-runtime starts a bounded number of passes, a multiple of the slots
//! ([`admitted`]): a pass back from its references competes for a slot only
//! with those, never with every queued Server (which would start them all,
//! each then holding its decided pass while waiting, before any got its slot
//! back), and a queued Server costs the scheduler's entry, not a pass.
//!
//! A create carries its Server's user data from its note's write to the
//! provider's answer, most of that time waiting on reference writes (a
//! burst of new Servers: hundreds of passes at once). The
//! user data of the creates in flight share a budget in bytes
//! ([`USER_DATA_IN_FLIGHT`]): where user data is small it never binds, and
//! a burst of Servers with large user data holds a bounded amount of it,
//! not one copy per admitted pass.

use std::future::Future;

use tokio::sync::{Semaphore, SemaphorePermit};

/// Passes started at once, per slot: how many may wait on references while
/// the slots work. Each started pass holds its decided state and its I/O;
/// four per slot settle 1,000 and 10,000 Servers as soon as eight did, with
/// 2-3 MB less at the peak, but batch fewer changes of a shared object, so
/// deleting 10,000 takes 45-49 s, not 39 (docs/BENCH.md, "Passes started at
/// once").
const ADMITTED_PER_SLOT: u16 = 4;

/// Passes started at once for `concurrency` slots.
pub(crate) fn admitted(concurrency: u16) -> u16 {
    concurrency.max(1).saturating_mul(ADMITTED_PER_SLOT)
}

/// Bytes of user data the creates in flight may hold together: every
/// admitted pass (128) with 16 KB each, 64 creates with 32 KB. At 10,000
/// Servers with 32 KB this is 3-5 MB less at the peak than 8 MiB and
/// settles in 184 s, not 171 (docs/BENCH.md, "The start-up list and a
/// budget for user data in flight").
pub(crate) const USER_DATA_IN_FLIGHT: usize = 4 * 1024 * 1024;

/// What a create holds per byte of its user data: the rendered copy its
/// request sends, and the body it is read from or sent in.
const COPIES_PER_CREATE: usize = 2;

/// The budget is counted in KiB (a semaphore's permits are `u32`).
const KIB: usize = 1024;

/// The slots every pass of a controller shares, and the budget for the user
/// data of their creates.
#[derive(Debug)]
pub(crate) struct PassSlots {
    working: Semaphore,
    user_data: Semaphore,
}

impl PassSlots {
    pub(crate) fn new(concurrency: u16) -> Self {
        PassSlots {
            working: Semaphore::new(usize::from(concurrency.max(1))),
            user_data: Semaphore::new(USER_DATA_IN_FLIGHT / KIB),
        }
    }

    /// Waits for a free slot; first come, first served.
    pub(crate) async fn acquire(&self) -> Slot<'_> {
        Slot { slots: self, permit: self.working.acquire().await.ok(), user_data_room: None }
    }

    #[cfg(test)]
    fn free(&self) -> usize {
        self.working.available_permits()
    }
}

/// A pass's slot, and its create's room in the user-data budget. The
/// semaphores are never closed, so the slot's permit is `None` only while
/// given up.
#[derive(Debug)]
pub(crate) struct Slot<'a> {
    slots: &'a PassSlots,
    permit: Option<SemaphorePermit<'a>>,
    user_data_room: Option<SemaphorePermit<'a>>,
}

impl Slot<'_> {
    /// Runs `wait` without the slot, then takes a slot again before the
    /// pass goes on.
    pub(crate) async fn released_while<F: Future>(&mut self, wait: F) -> F::Output {
        self.permit = None;
        let output = wait.await;
        self.permit = self.slots.working.acquire().await.ok();
        output
    }

    /// Waits, without the slot, until the budget has room for a create
    /// whose user data is `bytes` long, and holds that room until
    /// [`Slot::give_back_user_data`] or the pass ends; a pass that holds
    /// room already keeps it. User data larger than the whole budget takes
    /// all of it.
    pub(crate) async fn hold_user_data(&mut self, bytes: usize) {
        if self.user_data_room.is_some() {
            return;
        }
        let budget = &self.slots.user_data;
        let kib = bytes.saturating_mul(COPIES_PER_CREATE).div_ceil(KIB).clamp(1, USER_DATA_IN_FLIGHT / KIB);
        let wanted = u32::try_from(kib).unwrap_or(u32::MAX);
        self.user_data_room = match budget.try_acquire_many(wanted) {
            Ok(permit) => Some(permit),
            Err(_) => self.released_while(budget.acquire_many(wanted)).await.ok(),
        };
    }

    /// Gives the create's room back: its request is answered.
    pub(crate) fn give_back_user_data(&mut self) {
        self.user_data_room = None;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_pass_waiting_on_references_lets_another_run_and_takes_a_slot_back_after() {
        let slots = PassSlots::new(1);
        let mut first = slots.acquire().await;
        assert_eq!(slots.free(), 0);
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let waiting = first.released_while(async {
            released.await.ok();
        });
        let other = async {
            let second = slots.acquire().await;
            assert_eq!(slots.free(), 0, "the other pass holds the only slot");
            drop(second);
            release.send(()).ok();
        };
        tokio::join!(waiting, other);
        assert_eq!(slots.free(), 0, "the first pass holds a slot again");
        drop(first);
        assert_eq!(slots.free(), 1);
    }

    #[tokio::test]
    async fn no_more_passes_than_slots_run_at_once() {
        let slots = PassSlots::new(2);
        let _a = slots.acquire().await;
        let _b = slots.acquire().await;
        let third = tokio::time::timeout(std::time::Duration::from_millis(20), slots.acquire()).await;
        assert!(third.is_err(), "a third pass waits");
    }

    #[tokio::test]
    async fn a_create_with_large_user_data_waits_for_room_without_its_slot() {
        let slots = PassSlots::new(4);
        let half = USER_DATA_IN_FLIGHT / COPIES_PER_CREATE / 2;
        let (mut first, mut second, mut third) = (slots.acquire().await, slots.acquire().await, slots.acquire().await);
        first.hold_user_data(half).await;
        second.hold_user_data(half).await;
        let mut waiting = std::pin::pin!(third.hold_user_data(half));
        let waited = tokio::time::timeout(Duration::from_millis(20), &mut waiting).await;
        assert!(waited.is_err(), "a third such create waits for room");
        assert_eq!(slots.free(), 2, "and gives its slot up while it waits");
        first.give_back_user_data();
        waiting.await;
        assert_eq!(slots.free(), 1, "it holds its slot again");
    }

    #[tokio::test]
    async fn a_pass_holding_room_keeps_it_and_gives_it_back_once() {
        let slots = PassSlots::new(2);
        let (mut first, mut second) = (slots.acquire().await, slots.acquire().await);
        let all = USER_DATA_IN_FLIGHT / COPIES_PER_CREATE;
        first.hold_user_data(all).await;
        let again = tokio::time::timeout(Duration::from_millis(20), first.hold_user_data(all)).await;
        assert!(again.is_ok(), "a pass asking again keeps the room it holds");
        let waited = tokio::time::timeout(Duration::from_millis(20), second.hold_user_data(1)).await;
        assert!(waited.is_err(), "the budget is taken");
        first.give_back_user_data();
        let after = tokio::time::timeout(Duration::from_millis(20), second.hold_user_data(all)).await;
        assert!(after.is_ok(), "room given back is room for the next create");
    }

    #[tokio::test]
    async fn creates_with_small_user_data_never_wait_for_room() {
        let slots = PassSlots::new(admitted(32));
        let mut passes = Vec::new();
        for _ in 0..admitted(32) {
            let mut slot = slots.acquire().await;
            let held = tokio::time::timeout(Duration::from_millis(20), slot.hold_user_data(8 * 1024)).await;
            held.expect("every admitted create of 8 KB fits at once");
            passes.push(slot);
        }
    }

    #[tokio::test]
    async fn user_data_larger_than_the_budget_takes_all_of_it() {
        let slots = PassSlots::new(2);
        let (mut first, mut second) = (slots.acquire().await, slots.acquire().await);
        let huge = tokio::time::timeout(Duration::from_millis(20), first.hold_user_data(usize::MAX)).await;
        huge.expect("an empty budget has room for it");
        let waited = tokio::time::timeout(Duration::from_millis(20), second.hold_user_data(1)).await;
        assert!(waited.is_err(), "nothing else fits beside it");
    }

    #[test]
    fn passes_started_at_once_are_a_bounded_multiple_of_the_slots() {
        assert_eq!(admitted(32), 128);
        assert_eq!(admitted(0), ADMITTED_PER_SLOT);
        assert_eq!(admitted(u16::MAX), u16::MAX);
    }
}
