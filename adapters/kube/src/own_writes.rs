//! Read-your-writes for the Server cache: what this term last wrote to each
//! Server, so a pass or a monitor write does not act on a cached copy the
//! watch has not yet brought up to date. On kube-apiserver the watch lags the
//! write by up to about a second under load; a pass on the older copy decides
//! on stale facts (it repeats an Event its last pass sent) and its guarded
//! writes only earn 409s.
//!
//! resourceVersions are opaque: compared for equality, never ordered. A
//! cached copy at a version this term wrote over is certainly behind; at the
//! version it wrote, current; at any other version (another writer's, or one
//! a write without a precondition replaced) it may be either, so it counts as
//! behind only for [`UNKNOWN_VERSION_WAIT`] after the write, which bounds what
//! a lost watch event or a quick third writer can cost.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a cached copy at a version of unknown age is taken as behind
/// this term's last write.
pub(crate) const UNKNOWN_VERSION_WAIT: Duration = Duration::from_secs(2);
/// Past this many Servers the memory is cleared: at worst a pass meets a 409.
const MAX_SERVERS: usize = 200_000;
/// A pass writes a Server a few times; the oldest versions go first.
const MAX_REPLACED: usize = 8;

/// Per Server uid, this term's last writes.
#[derive(Debug, Default)]
pub(crate) struct OwnWrites {
    servers: Mutex<HashMap<String, Written>>,
}

#[derive(Debug)]
struct Written {
    /// The versions the last pass's writes (and the monitor's since) replaced.
    replaced: Vec<String>,
    /// The version the last write made.
    written: String,
    at: Instant,
}

impl OwnWrites {
    /// Whether the cache's copy of Server `uid`, at version `cached`, may be
    /// older than this term's last write to it. Once it is not, the Server
    /// is forgotten.
    pub(crate) fn cache_is_behind(&self, uid: &str, cached: &str, now: Instant) -> bool {
        let mut servers = self.servers.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(written) = servers.get(uid) else { return false };
        let behind = if written.written == cached {
            false
        } else if written.replaced.iter().any(|v| v == cached) {
            true
        } else {
            now.duration_since(written.at) < UNKNOWN_VERSION_WAIT
        };
        if !behind {
            servers.remove(uid);
        }
        behind
    }

    /// A watch event put Server `uid` at `version` in the cache: once that is
    /// the version this term last wrote, the cache holds the write and the
    /// Server is forgotten, so a Server is kept while the watch has yet to
    /// bring its write (or until its next pass looks), not for the term.
    pub(crate) fn observed(&self, uid: &str, version: &str) {
        let mut servers = self.servers.lock().unwrap_or_else(PoisonError::into_inner);
        if servers.get(uid).is_some_and(|written| written.written == version) {
            servers.remove(uid);
        }
    }

    #[cfg(test)]
    fn held(&self) -> usize {
        self.servers.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// A write of Server `uid` made version `to`, over `from` when it was
    /// guarded by it (`None`: unknown). `first` when it is a pass's first
    /// write: an earlier pass's versions are then forgotten.
    pub(crate) fn wrote(&self, uid: &str, from: Option<&str>, to: &str, first: bool, now: Instant) {
        if uid.is_empty() || to.is_empty() {
            return;
        }
        let mut servers = self.servers.lock().unwrap_or_else(PoisonError::into_inner);
        if servers.len() >= MAX_SERVERS && !servers.contains_key(uid) {
            servers.clear();
        }
        let entry = servers.entry(uid.to_owned()).or_insert_with(|| Written {
            replaced: Vec::new(),
            written: String::new(),
            at: now,
        });
        if first {
            entry.replaced.clear();
        }
        // A write that changed nothing (the same note again) keeps the
        // version: the API server answers with it and sends no event.
        if let Some(from) = from.filter(|from| !from.is_empty() && *from != to) {
            if entry.replaced.len() >= MAX_REPLACED {
                entry.replaced.remove(0);
            }
            entry.replaced.push(from.to_owned());
        }
        entry.written = to.to_owned();
        entry.at = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write that changed nothing is answered with the version it was
    /// guarded by, and no watch event follows: the cache at that version is
    /// current, never waited on.
    #[test]
    fn a_write_that_changed_nothing_leaves_its_version_current() {
        let writes = OwnWrites::default();
        let now = Instant::now();
        writes.wrote("uid-a", Some("5"), "6", true, now);
        writes.wrote("uid-a", Some("6"), "6", false, now);
        let much_later = now + 10 * UNKNOWN_VERSION_WAIT;
        assert!(writes.cache_is_behind("uid-a", "5", much_later));
        assert!(!writes.cache_is_behind("uid-a", "6", much_later));
    }

    #[test]
    fn a_version_this_term_wrote_over_is_behind_until_the_cache_has_the_write() {
        let writes = OwnWrites::default();
        let now = Instant::now();
        assert!(!writes.cache_is_behind("uid-a", "5", now), "nothing written: any copy is current");
        // One pass: 5 -> 6 -> 7.
        writes.wrote("uid-a", Some("5"), "6", true, now);
        writes.wrote("uid-a", Some("6"), "7", false, now);
        let much_later = now + 10 * UNKNOWN_VERSION_WAIT;
        assert!(writes.cache_is_behind("uid-a", "5", much_later), "a replaced version is behind however long");
        assert!(writes.cache_is_behind("uid-a", "6", much_later));
        assert!(!writes.cache_is_behind("uid-b", "5", now), "another Server is not held up");
        assert!(!writes.cache_is_behind("uid-a", "7", now), "the written version is current");
        assert!(!writes.cache_is_behind("uid-a", "5", now), "and the Server is forgotten");
    }

    #[test]
    fn a_server_is_forgotten_once_the_watch_brings_the_version_written() {
        let writes = OwnWrites::default();
        let now = Instant::now();
        writes.wrote("uid-a", Some("5"), "6", true, now);
        writes.wrote("uid-a", Some("6"), "7", false, now);
        writes.observed("uid-a", "6");
        assert!(writes.cache_is_behind("uid-a", "6", now), "a version written over is not the write");
        writes.observed("uid-b", "7");
        assert_eq!(writes.held(), 1, "another Server's version forgets nothing");
        writes.observed("uid-a", "7");
        assert_eq!(writes.held(), 0);
    }

    #[test]
    fn a_version_of_unknown_age_waits_a_bounded_time() {
        let writes = OwnWrites::default();
        let now = Instant::now();
        // A write without a precondition: what it replaced is not known.
        writes.wrote("uid-a", None, "9", true, now);
        assert!(writes.cache_is_behind("uid-a", "8", now + Duration::from_millis(100)));
        assert!(!writes.cache_is_behind("uid-a", "10", now + UNKNOWN_VERSION_WAIT), "never held up for good");
    }

    #[test]
    fn a_new_pass_forgets_the_versions_an_earlier_pass_replaced() {
        let writes = OwnWrites::default();
        let now = Instant::now();
        writes.wrote("uid-a", Some("5"), "6", true, now);
        writes.wrote("uid-a", Some("9"), "10", true, now);
        let later = now + UNKNOWN_VERSION_WAIT;
        assert!(writes.cache_is_behind("uid-a", "9", later));
        assert!(!writes.cache_is_behind("uid-a", "5", later));
    }
}

/// The Servers a pass of this term is acting on right now. The monitor
/// leaves them to the pass: its status patch landing between the pass's
/// status write and its annotation write would fail the latter, and the
/// pass's Event (announced by the annotation) would be sent again.
#[derive(Debug, Default)]
pub(crate) struct PassesInFlight {
    uids: Mutex<std::collections::HashSet<String>>,
}

impl PassesInFlight {
    /// Marks a pass on Server `uid` until the returned guard is dropped.
    pub(crate) fn start<'a>(&'a self, uid: &str) -> InFlight<'a> {
        self.uids.lock().unwrap_or_else(PoisonError::into_inner).insert(uid.to_owned());
        InFlight { passes: self, uid: uid.to_owned() }
    }

    /// Whether a pass on Server `uid` is acting now.
    pub(crate) fn acting_on(&self, uid: &str) -> bool {
        self.uids.lock().unwrap_or_else(PoisonError::into_inner).contains(uid)
    }
}

/// A pass in flight; dropping it (however the pass ends) clears the mark.
#[derive(Debug)]
pub(crate) struct InFlight<'a> {
    passes: &'a PassesInFlight,
    uid: String,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.passes.uids.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.uid);
    }
}

#[cfg(test)]
mod in_flight_tests {
    use super::PassesInFlight;

    #[test]
    fn a_pass_is_in_flight_until_its_guard_is_dropped() {
        let passes = PassesInFlight::default();
        let guard = passes.start("uid-a");
        assert!(passes.acting_on("uid-a"));
        assert!(!passes.acting_on("uid-b"));
        drop(guard);
        assert!(!passes.acting_on("uid-a"));
    }
}
