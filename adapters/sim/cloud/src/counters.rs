//! What the simulated cloud counts: calls by verb, what the calls did, and the
//! per-Server ground truth checkers compare the controller's behaviour with.

use serde::Serialize;

/// Calls by verb and what came of them, since the cloud was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    pub create_calls: u64,
    pub delete_calls: u64,
    pub get_calls: u64,
    pub list_calls: u64,
    /// Creates that made a new provider server.
    pub creates_accepted: u64,
    /// Creates answered with the uid's existing server (idempotency).
    pub creates_deduplicated: u64,
    /// Creates refused outright (quota).
    pub creates_refused: u64,
    /// Creates that made a server but whose answer was lost (timeout).
    pub creates_lost_answer: u64,
    /// Calls failed by fault injection (timeouts, 5xx).
    pub injected_failures: u64,
    /// Delete requests that started a server's deletion.
    pub deletions_started: u64,
    /// Deletions started on a server that had launched.
    pub launched_deleted: u64,
    /// Servers that vanished behind the operator's back (so far).
    pub vanished: u64,
    /// Calls failed by the configured provider outage.
    pub outage_failures: u64,
    pub rebuild_calls: u64,
    /// Rebuilds the cloud accepted (the image changed, a task began).
    pub rebuilds_accepted: u64,
}

impl Counters {
    /// Adds another cloud's counters (the simulator sums its shards').
    pub fn merge(&mut self, other: &Counters) {
        let Counters {
            create_calls,
            delete_calls,
            get_calls,
            list_calls,
            creates_accepted,
            creates_deduplicated,
            creates_refused,
            creates_lost_answer,
            injected_failures,
            deletions_started,
            launched_deleted,
            vanished,
            outage_failures,
            rebuild_calls,
            rebuilds_accepted,
        } = *other;
        self.create_calls += create_calls;
        self.delete_calls += delete_calls;
        self.get_calls += get_calls;
        self.list_calls += list_calls;
        self.creates_accepted += creates_accepted;
        self.creates_deduplicated += creates_deduplicated;
        self.creates_refused += creates_refused;
        self.creates_lost_answer += creates_lost_answer;
        self.injected_failures += injected_failures;
        self.deletions_started += deletions_started;
        self.launched_deleted += launched_deleted;
        self.vanished += vanished;
        self.outage_failures += outage_failures;
        self.rebuild_calls += rebuild_calls;
        self.rebuilds_accepted += rebuilds_accepted;
    }
}

/// The cloud's truth about one Server (one uid), at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UidTruth {
    /// Provider servers of this uid that exist now. Invariant 6: at most 1.
    pub live: u32,
    /// Whether the live server (if any) has launched.
    pub live_launched: bool,
    /// Whether any provider server of this uid ever launched.
    pub ever_launched: bool,
    pub create_calls: u32,
    /// Creates that made a provider server (invariant 4 counts these).
    pub creates_accepted: u32,
    pub creates_refused: u32,
    pub delete_calls: u32,
    /// Deletions started on a provider server that had launched
    /// (invariant 1: none of them may be on the retry path).
    pub launched_deleted: u32,
    /// Rebuilds accepted for this uid's servers.
    pub rebuilds_accepted: u32,
    /// Rebuilds accepted onto the image the server already ran: a second
    /// rebuild for one target (the protocol never sends one).
    pub rebuilds_repeated: u32,
    /// Creates accepted after a server of this uid had launched: a booted
    /// server recreated (a Server's data lost with the server it booted on).
    pub creates_after_launch: u32,
    /// Of those, creates after a launch some read showed (a get, a list, a
    /// create's answer): the controller could have known the server booted.
    /// The rest followed a boot no read showed (it vanished between reads),
    /// which no controller can tell from a server that never booted.
    pub creates_after_boot_read: u32,
}
