//! A replica's Server watch cut and relisted on several pages, as
//! kube-runtime's watcher and reflector do it: the watch drops, the watcher
//! backs off and its resumed watch is refused with 410 Gone, then it lists
//! again with `limit`/`continue`, one API round trip per page. The store keeps
//! the copies from before the relist until the last page is in (`InitDone`),
//! then holds the relisted ones; nothing reaches it in between.
//!
//! The wake filter decides a relist's wakes at `InitDone` against the Servers
//! as seen before (adapters/kube/src/wake.rs); [`RelistWakes::PerPage`] is the
//! old rule, for a test to show the checker catching the passes it triggers
//! on the store's pre-relist copies (the owed-wake check, `Engine::owe_wake`).

use super::Engine;
use crate::config::RelistWakes;
use crate::queue::EventKind;
use crate::world::Lagging;

impl Engine {
    /// Schedules each replica's watch cuts, the same instants in every shard
    /// (one controller): the first while Servers arrive, the others later.
    pub(super) fn plan_relists(&mut self) {
        let mut rng = server_simcloud::rng::SplitMix64::stream(self.config.seed, "relists");
        let timing = self.config.timing;
        for r in 0..self.replicas.count() {
            for n in 0..self.config.kube.relists {
                // Late in the arrival window, after the leader's troubles
                // (whose new terms pass over every Server anyway).
                let at = if n == 0 {
                    rng.between(timing.arrival_window * 3 / 4, timing.arrival_window)
                } else {
                    rng.between(timing.arrival_window, timing.horizon.saturating_sub(120_000))
                };
                self.events.push(at, EventKind::WatchCut, r, 0);
            }
        }
    }

    /// Replica `r`'s watch drops: its cache stops following the API server
    /// until a relist completes.
    pub(super) fn watch_cut(&mut self, r: usize) -> bool {
        // A process that is down relists when it comes up; one relisting
        // already goes on with it.
        if !self.replicas.is_up(r) || self.replicas.watch_is_cut(r) {
            return false;
        }
        let seen_at_page = match self.config.relist_wakes {
            RelistWakes::AtInitDone => Vec::new(),
            RelistWakes::PerPage => vec![0; self.api.len()],
        };
        let Some(epoch) = self.replicas.start_relist(r, seen_at_page) else { return false };
        self.stats.relists += 1;
        let at = self.events.now() + self.config.kube.watch_gap + self.config.ha.api_round_trip;
        self.events.push(at, EventKind::RelistPage, r, u32::from(epoch) << 16);
        true
    }

    /// A page of replica `r`'s relist arrives (`arg`: epoch and page).
    pub(super) fn relist_page(&mut self, r: usize, arg: u32) -> bool {
        if self.postpone(r, EventKind::RelistPage, r, arg) {
            return false;
        }
        let (epoch, page) = ((arg >> 16) as u16, (arg & 0xffff) as usize);
        if self.replicas.relist_epoch(r) != Some(epoch) {
            // A relist that broke off (its process died).
            return false;
        }
        self.stats.relist_pages += 1;
        let size = self.config.kube.list_page_size.max(1);
        let (first, end) = (page * size, ((page + 1) * size).min(self.api.len()));
        if self.config.relist_wakes == RelistWakes::PerPage {
            for i in first..end {
                self.wake_as_listed(i, r);
            }
        }
        if end >= self.api.len() {
            self.relist_done(r);
        } else {
            let next = u32::from(epoch) << 16 | u32::try_from(page + 1).unwrap_or(u32::MAX) & 0xffff;
            self.events.push(self.events.now() + self.config.ha.api_round_trip, EventKind::RelistPage, r, next);
        }
        true
    }

    /// The old rule: a listed Server is compared with the copy seen before
    /// and remembered at once, while the store still holds that copy.
    fn wake_as_listed(&mut self, i: usize, r: usize) {
        let Some(tracked) = self.api.server(i) else { return };
        if !tracked.exists() {
            return;
        }
        let seen = match tracked.lagging[r].as_deref() {
            Some(lagging) => lagging.copy(),
            None => Some(tracked.stored()),
        };
        let wake = (self.rules.should_wake)(seen, tracked.stored());
        let rv = tracked.rv();
        if let Some(relist) = self.replicas.relist_mut(r)
            && let Some(slot) = relist.seen_at_page.get_mut(i)
        {
            *slot = rv;
        }
        if wake && self.replicas.acts(r) {
            self.stats.relist_wakes += 1;
            let at = self.events.now() + self.config.timing.wake_delay;
            self.schedule_for(i, r, at);
        }
    }

    /// `InitDone`: the store swaps to the relisted copies and the watch
    /// resumes. Each Server whose copy changed is judged by the wake rule
    /// against the copy the cache held before; under the old rule, only what
    /// changed since its page was seen (a watch event after `InitDone`) or
    /// was not listed wakes.
    fn relist_done(&mut self, r: usize) {
        let Some(relist) = self.replicas.finish_relist(r) else { return };
        let acts = self.replicas.acts(r);
        for i in 0..self.api.len() {
            let Some(tracked) = self.api.server_mut(i) else { continue };
            let Some(before) = tracked.lagging[r].take() else { continue };
            if !tracked.exists() {
                continue;
            }
            let due = (self.rules.should_wake)(before.copy(), tracked.stored());
            let wake = match relist.seen_at_page.get(i) {
                Some(&seen) if seen != 0 => seen != tracked.rv(),
                _ => due,
            };
            let rv = tracked.rv();
            if due && acts {
                self.owe_wake(i, rv);
            }
            if wake && acts {
                self.stats.relist_wakes += 1;
                let at = self.events.now() + self.config.timing.wake_delay;
                self.schedule_for(i, r, at);
            }
        }
    }

    /// A Server created while replica `r`'s watch is cut is not in its cache.
    pub(super) fn absent_from_cut_caches(&mut self, i: usize) {
        for r in 0..self.replicas.count() {
            if self.replicas.watch_is_cut(r)
                && let Some(tracked) = self.api.server_mut(i)
            {
                tracked.lagging[r] = Some(Box::new(Lagging::Absent));
            }
        }
    }
}
