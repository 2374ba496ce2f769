//! The controller replicas as the Servers see them: which are up, frozen
//! and acting (from `ha`'s timeline), the events each postponed while
//! frozen, and each one's Server watch, running or cut and relisting.

use super::queue::EventKind;
use super::term::Term;
use super::world::REPLICAS;

/// An event of a replica kept while it is frozen: (kind, target, argument).
pub(crate) type Postponed = (EventKind, usize, u32);

/// The replicas of one shard (only the first `count` run).
#[derive(Debug)]
pub(crate) struct Replicas {
    states: [ReplicaState; REPLICAS],
    count: usize,
}

/// One controller replica.
#[derive(Debug, Default)]
struct ReplicaState {
    up: bool,
    frozen: bool,
    /// Its fence is open (or, without the fence, it believes it leads).
    acting: bool,
    /// Its events that came due while it was frozen.
    postponed: Vec<Postponed>,
    /// Its Server watch is cut and relisting (see `relist`).
    relist: Option<Relist>,
    /// The epoch of its latest relist.
    relist_epoch: u16,
    /// Its current (or last) leadership term and what it remembers.
    term: Term,
}

/// What becomes of a write's watch event at one replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WatchDelivery {
    /// The process is down: it lists afresh when it comes up.
    Down,
    /// Frozen or relisting: the event waits for it to resume, or its relist
    /// brings the change.
    Stopped,
    /// Delivered (perhaps late); `acting`: the replica takes wakes.
    Running { acting: bool },
}

impl Replicas {
    /// `count` replicas (1 or 2), every one up, none acting yet.
    pub(crate) fn new(count: usize) -> Self {
        let up = || ReplicaState { up: true, ..ReplicaState::default() };
        Replicas { states: [up(), up()], count: count.clamp(1, REPLICAS) }
    }

    /// How many replicas run.
    #[inline]
    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// Replica `r`'s process is up.
    #[inline]
    pub(crate) fn is_up(&self, r: usize) -> bool {
        self.states.get(r).is_some_and(|replica| replica.up)
    }

    /// Replica `r` may act: its writes and cloud calls pass the fence.
    #[inline]
    pub(crate) fn may_act(&self, r: usize) -> bool {
        self.states.get(r).is_some_and(|replica| replica.acting)
    }

    /// Replica `r` takes wakes and runs passes now.
    #[inline]
    pub(crate) fn acts(&self, r: usize) -> bool {
        self.states.get(r).is_some_and(|replica| replica.up && !replica.frozen && replica.acting)
    }

    /// The first replica that acts now.
    #[inline]
    pub(crate) fn first_acting(&self) -> Option<usize> {
        (0..self.count).find(|&r| self.acts(r))
    }

    /// What a write's watch event meets at replica `r`.
    #[inline]
    pub(crate) fn watch_delivery(&self, r: usize) -> WatchDelivery {
        match self.states.get(r) {
            Some(replica) if replica.up && !replica.frozen && replica.relist.is_none() => {
                WatchDelivery::Running { acting: replica.acting }
            }
            Some(replica) if replica.up => WatchDelivery::Stopped,
            _ => WatchDelivery::Down,
        }
    }

    /// Whether an event of replica `r` must wait for it to resume; if so it
    /// is kept and handed back by [`Replicas::thaw`].
    #[inline]
    pub(crate) fn postpone(&mut self, r: usize, event: Postponed) -> bool {
        let Some(replica) = self.states.get_mut(r) else { return false };
        if replica.frozen {
            replica.postponed.push(event);
        }
        replica.frozen
    }

    /// Replica `r`'s process dies: what it postponed and its relist go.
    pub(crate) fn go_down(&mut self, r: usize) {
        if let Some(replica) = self.states.get_mut(r) {
            replica.up = false;
            replica.postponed.clear();
            replica.relist = None;
            // The process's memory dies with it.
            replica.term = Term::default();
        }
    }

    /// A fresh process of replica `r`.
    pub(crate) fn come_up(&mut self, r: usize) {
        if let Some(replica) = self.states.get_mut(r) {
            replica.up = true;
        }
    }

    pub(crate) fn freeze(&mut self, r: usize) {
        if let Some(replica) = self.states.get_mut(r) {
            replica.frozen = true;
        }
    }

    /// Replica `r` resumes; returns what came due meanwhile, in order.
    pub(crate) fn thaw(&mut self, r: usize) -> Vec<Postponed> {
        let Some(replica) = self.states.get_mut(r) else { return Vec::new() };
        replica.frozen = false;
        std::mem::take(&mut replica.postponed)
    }

    /// Replica `r` loses the right to act; its term is over (no pass or
    /// poll of it runs, and the next term replaces it).
    pub(crate) fn stop_acting(&mut self, r: usize) {
        if let Some(replica) = self.states.get_mut(r) {
            replica.acting = false;
        }
    }

    /// Replica `r` gains the right to act under `term`, which replaces
    /// whatever the replica remembered; the term it replaces is returned.
    pub(crate) fn start_term(&mut self, r: usize, term: Term) -> Term {
        match self.states.get_mut(r) {
            Some(replica) => {
                replica.acting = true;
                std::mem::replace(&mut replica.term, term)
            }
            None => term,
        }
    }

    /// Replica `r`'s current term.
    #[inline]
    pub(crate) fn term(&self, r: usize) -> Option<&Term> {
        self.states.get(r).map(|replica| &replica.term)
    }

    /// Replica `r`'s current term, to remember in.
    #[inline]
    pub(crate) fn term_mut(&mut self, r: usize) -> Option<&mut Term> {
        self.states.get_mut(r).map(|replica| &mut replica.term)
    }

    /// Replica `r`'s Server watch is cut and relisting: a write reaches its
    /// cache only through the relist.
    #[inline]
    pub(crate) fn watch_is_cut(&self, r: usize) -> bool {
        self.states.get(r).is_some_and(|replica| replica.relist.is_some())
    }

    /// Cuts replica `r`'s watch and starts its relist, under a new epoch
    /// (returned); `None` if it is down or relisting already.
    pub(crate) fn start_relist(&mut self, r: usize, seen_at_page: Vec<u64>) -> Option<u16> {
        let replica = self.states.get_mut(r)?;
        if !replica.up || replica.relist.is_some() {
            return None;
        }
        let epoch = replica.relist_epoch.wrapping_add(1);
        replica.relist_epoch = epoch;
        replica.relist = Some(Relist { epoch, seen_at_page });
        Some(epoch)
    }

    /// Replica `r`'s relist under way.
    pub(crate) fn relist_mut(&mut self, r: usize) -> Option<&mut Relist> {
        self.states.get_mut(r).and_then(|replica| replica.relist.as_mut())
    }

    /// The epoch of replica `r`'s relist under way.
    pub(crate) fn relist_epoch(&self, r: usize) -> Option<u16> {
        self.states.get(r).and_then(|replica| replica.relist.as_ref()).map(|relist| relist.epoch)
    }

    /// Replica `r`'s relist is done: its watch runs again.
    pub(crate) fn finish_relist(&mut self, r: usize) -> Option<Relist> {
        self.states.get_mut(r).and_then(|replica| replica.relist.take())
    }
}

/// A relist under way on one replica.
#[derive(Debug, Default)]
pub(crate) struct Relist {
    /// Tells a page of this relist from one of an earlier, broken-off relist.
    pub(crate) epoch: u16,
    /// Under the old rule, the resourceVersion each Server was seen at as its
    /// page arrived (0: not listed yet).
    pub(crate) seen_at_page: Vec<u64>,
}
