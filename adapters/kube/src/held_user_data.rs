//! User data the cache keeps for a Server's next create, within a budget.
//!
//! The cache leaves user data out (up to 48 KB of base64 in every watch
//! event of every Server). A first create takes it from the answer to its
//! note's write, the pass's first write of the Server; a retry's pass writes
//! its status first and reads the user data before acting: one GET per
//! retry. A Server that awaits a retry's create
//! (`server_core::awaits_retry_create`, while its failed server is deleted)
//! is about to need it, so its watch event's copy is kept, decoded, while
//! all such copies together stay under [`BUDGET`] bytes; past it the pass
//! reads it live. The copy goes with the cached object: the pass's own
//! status write (the retry cleared) brings the next version, which keeps
//! none.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use server_core::model::UserData;

/// Bytes of user data all cached Servers together may hold: 128 Servers
/// with 32 KB, a thousand with 4 KB. A Server past it costs one GET; 16 MiB
/// held 2-3 MB more at the peak of 10,000 Servers with 32 KB (docs/BENCH.md,
/// "Passes started at once").
pub const BUDGET: usize = 4 * 1024 * 1024;

/// What the cache's copies hold together.
static CACHE: Budget = Budget { limit: BUDGET, held: AtomicUsize::new(0) };

/// A limit on bytes held, and the bytes held now by its copies alive.
struct Budget {
    limit: usize,
    held: AtomicUsize,
}

/// A Server's user data, held for its next create; shared by the cached
/// object's clones, its bytes returned to the budget when the last goes.
#[derive(Clone)]
pub struct HeldUserData(Arc<Held>);

struct Held {
    data: UserData,
    budget: &'static Budget,
}

impl HeldUserData {
    /// Holds `data` if the budget has room for it.
    pub fn hold(data: UserData) -> Option<Self> {
        hold_within(data, &CACHE)
    }

    /// A copy for the pass that creates.
    pub fn user_data(&self) -> UserData {
        self.0.data.clone()
    }
}

fn hold_within(data: UserData, budget: &'static Budget) -> Option<HeldUserData> {
    let size = data.0.len();
    budget
        .held
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
            held.checked_add(size).filter(|total| *total <= budget.limit)
        })
        .ok()?;
    Some(HeldUserData(Arc::new(Held { data, budget })))
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.data.0.len(), Ordering::AcqRel);
    }
}

/// Never the bytes: user data does not reach a log.
impl std::fmt::Debug for HeldUserData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HeldUserData({} bytes)", self.0.data.0.len())
    }
}

impl PartialEq for HeldUserData {
    fn eq(&self, other: &Self) -> bool {
        self.0.data == other.0.data
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_bounds_what_is_held_and_a_dropped_copy_returns_its_bytes() {
        let budget: &'static Budget = Box::leak(Box::new(Budget { limit: 100, held: AtomicUsize::new(0) }));
        let first = hold_within(UserData(vec![1; 60]), budget).expect("room for 60 bytes");
        let shared = first.clone();
        assert!(hold_within(UserData(vec![2; 60]), budget).is_none(), "over the budget");
        drop(first);
        assert!(hold_within(UserData(vec![2; 60]), budget).is_none(), "a clone still holds it");
        drop(shared);
        let second = hold_within(UserData(vec![2; 60]), budget).expect("its bytes came back");
        assert_eq!(second.user_data(), UserData(vec![2; 60]));
        assert_eq!(format!("{second:?}"), "HeldUserData(60 bytes)");
    }
}
