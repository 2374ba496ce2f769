//! Passes at once (`--concurrency`): a pass holds a slot while it reads its
//! facts, writes the Server and calls the cloud, and gives it up while it
//! waits on the reference writer. That wait loads nothing (the writer
//! lingers to gather the changes of many passes into one write of the
//! shared object), so other passes run meanwhile, and the more passes wait
//! on one object, the fewer writes of it.
//!
//! Passes are admitted a bounded number at a time, a multiple of the slots:
//! a pass back from its references competes for a slot only with those,
//! never with every queued Server (which would start them all, each then
//! holding its decided pass while waiting, before any got its slot back).

use std::future::Future;

use tokio::sync::{Semaphore, SemaphorePermit};

/// Passes admitted at once, per slot: how many may wait on references while
/// the slots work.
const ADMITTED_PER_SLOT: usize = 8;

/// The slots every pass of a controller shares.
#[derive(Debug)]
pub(crate) struct PassSlots {
    admitted: Semaphore,
    working: Semaphore,
}

impl PassSlots {
    pub(crate) fn new(concurrency: u16) -> Self {
        let slots = usize::from(concurrency.max(1));
        PassSlots { admitted: Semaphore::new(slots * ADMITTED_PER_SLOT), working: Semaphore::new(slots) }
    }

    /// Waits to be admitted and for a free slot; first come, first served.
    pub(crate) async fn acquire(&self) -> Slot<'_> {
        let admitted = self.admitted.acquire().await.ok();
        let working = self.working.acquire().await.ok();
        Slot { slots: self, _admitted: admitted, working }
    }

    #[cfg(test)]
    fn free(&self) -> (usize, usize) {
        (self.admitted.available_permits(), self.working.available_permits())
    }
}

/// A pass's slot. The semaphores are never closed, so each permit is
/// `None` only while given up.
#[derive(Debug)]
pub(crate) struct Slot<'a> {
    slots: &'a PassSlots,
    _admitted: Option<SemaphorePermit<'a>>,
    working: Option<SemaphorePermit<'a>>,
}

impl Slot<'_> {
    /// Runs `wait` without the slot (still admitted), then takes a slot
    /// again before the pass goes on.
    pub(crate) async fn released_while<F: Future>(&mut self, wait: F) -> F::Output {
        self.working = None;
        let output = wait.await;
        self.working = self.slots.working.acquire().await.ok();
        output
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_pass_waiting_on_references_lets_another_run_and_takes_a_slot_back_after() {
        let slots = PassSlots::new(1);
        let mut first = slots.acquire().await;
        assert_eq!(slots.free(), (ADMITTED_PER_SLOT - 1, 0));
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let waiting = first.released_while(async {
            released.await.ok();
        });
        let other = async {
            let second = slots.acquire().await;
            assert_eq!(slots.free(), (ADMITTED_PER_SLOT - 2, 0), "the other pass holds the only slot");
            drop(second);
            release.send(()).ok();
        };
        tokio::join!(waiting, other);
        assert_eq!(slots.free(), (ADMITTED_PER_SLOT - 1, 0), "the first pass holds a slot again");
        drop(first);
        assert_eq!(slots.free(), (ADMITTED_PER_SLOT, 1));
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
    async fn passes_waiting_on_references_are_bounded_and_one_back_goes_before_new_ones() {
        let slots = PassSlots::new(1);
        let mut waiting = Vec::new();
        for _ in 0..ADMITTED_PER_SLOT {
            let mut slot = slots.acquire().await;
            slot.working = None;
            waiting.push(slot);
        }
        let newcomer = tokio::time::timeout(std::time::Duration::from_millis(20), slots.acquire()).await;
        assert!(newcomer.is_err(), "no pass is admitted past the bound");
        let back = tokio::time::timeout(std::time::Duration::from_millis(20), slots.working.acquire()).await;
        assert!(back.is_ok(), "a pass back from its references gets the free slot");
    }
}
