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

use std::future::Future;

use tokio::sync::{Semaphore, SemaphorePermit};

/// Passes started at once, per slot: how many may wait on references while
/// the slots work.
const ADMITTED_PER_SLOT: u16 = 8;

/// Passes started at once for `concurrency` slots.
pub(crate) fn admitted(concurrency: u16) -> u16 {
    concurrency.max(1).saturating_mul(ADMITTED_PER_SLOT)
}

/// The slots every pass of a controller shares.
#[derive(Debug)]
pub(crate) struct PassSlots {
    working: Semaphore,
}

impl PassSlots {
    pub(crate) fn new(concurrency: u16) -> Self {
        PassSlots { working: Semaphore::new(usize::from(concurrency.max(1))) }
    }

    /// Waits for a free slot; first come, first served.
    pub(crate) async fn acquire(&self) -> Slot<'_> {
        Slot { slots: self, permit: self.working.acquire().await.ok() }
    }

    #[cfg(test)]
    fn free(&self) -> usize {
        self.working.available_permits()
    }
}

/// A pass's slot. The semaphore is never closed, so the permit is `None`
/// only while given up.
#[derive(Debug)]
pub(crate) struct Slot<'a> {
    slots: &'a PassSlots,
    permit: Option<SemaphorePermit<'a>>,
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
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn passes_started_at_once_are_a_bounded_multiple_of_the_slots() {
        assert_eq!(admitted(32), 256);
        assert_eq!(admitted(0), ADMITTED_PER_SLOT);
        assert_eq!(admitted(u16::MAX), u16::MAX);
    }
}
