//! Two controller replicas and their leader Lease, modelled once per run from
//! the seed alone (every shard sees the same leadership, as every Server of a
//! cluster does): the algorithm of `adapters/kube/src/leader.rs` and
//! `fence.rs` on clocks that drift and disagree, with the leader crashing and
//! freezing. The engine then asks, at each step, which replica may act.
//!
//! - Each replica reads its own clock only: `local(t) = offset + t·(1 + drift)`,
//!   with |drift| and |offset| bounded ([`HaConfig`]). Durations are measured
//!   on that clock; no replica compares its clock with another's.
//! - Every retry period a replica reads the Lease: the holder renews it (and
//!   its fence extends to the send instant plus the renew deadline); a free
//!   Lease is taken; one whose record did not change for a lease duration, as
//!   seen on the reader's clock, is taken over.
//! - With the fence (production), a replica acts while its fence is open;
//!   without it, while it believes it leads: until it reads the Lease held by
//!   another (what kube-lease-manager does).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use server_simcloud::rng::SplitMix64;

use crate::config::SimTiming;

/// Replicas, Lease timings, clocks and the leader's troubles. Milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HaConfig {
    /// 1: one controller without election (acts whenever it is up); 2: two
    /// replicas electing a leader.
    pub replicas: u8,
    pub lease_duration: u64,
    pub renew_deadline: u64,
    pub retry_period: u64,
    /// Bound on each replica's clock rate error, parts per million: one of
    /// its seconds lasts between `1 - d` and `1 + d` true seconds. Safe
    /// while `renew_deadline / (1 - d) < lease_duration / (1 + d)`.
    pub max_clock_drift_ppm: u32,
    /// Bound on how far each replica's wall clock is off true time.
    pub max_clock_offset: u64,
    /// Times the leader freezes (a GC pause, a throttled or suspended VM)
    /// with its in-flight passes, resuming where it stopped.
    pub stalls: u32,
    pub stall_duration: u64,
    /// One API round trip: a resumed replica's first Lease read answers
    /// after it, and its watch catches up after at least that.
    pub api_round_trip: u64,
    /// Longest time from reading a pass's facts to its create call (the API
    /// round trips in between); each create pass draws its own.
    pub max_create_lag: u64,
    /// Production: a replica acts only until its renew deadline. Off (for a
    /// test): it acts while it believes it leads.
    pub fence: bool,
    /// Production: every write to a Server carries the resourceVersion the
    /// pass read, so a create is preceded in its pass by a guarded write
    /// (the create-issued note). Off (for a test): no precondition.
    pub guarded_writes: bool,
    /// Production: what a replica remembers (its lists of the provider, the
    /// uid index they make, and the create answers since) belongs to one
    /// leadership term and starts empty with the next. Off (for a test):
    /// the lists outlive the term.
    pub term_scoped_memory: bool,
    /// Production: the reference writer's finalizer lists belong to one
    /// term. Off (for a test): they outlive it, so a change they show made
    /// is not written even after another replica undid it.
    pub term_scoped_references: bool,
}

impl HaConfig {
    /// The deployment's defaults (`run`'s flags), two replicas, and one
    /// stall of the leader when there are faults.
    pub fn with_fault_rate(rate: f64) -> Self {
        HaConfig {
            replicas: 2,
            lease_duration: 15_000,
            renew_deadline: 10_000,
            retry_period: 2_000,
            max_clock_drift_ppm: 50_000,
            max_clock_offset: 2_000,
            stalls: if rate > 0.0 { 1 } else { 0 },
            stall_duration: 20_000,
            api_round_trip: 200,
            max_create_lag: 500,
            fence: true,
            guarded_writes: true,
            term_scoped_memory: true,
            term_scoped_references: true,
        }
    }
}

/// A change in one replica's state, at a true instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum ReplicaChange {
    /// The process dies (in-flight passes with it).
    Down,
    /// A fresh process: empty cache, relisted; not leading.
    Up,
    /// Frozen: nothing of it runs, its watch stops.
    Freeze,
    /// Resumed: what was due runs now, its cache catches up.
    Thaw,
    /// It may act from now on (a new term: it passes over every Server).
    Lead,
    /// It may no longer act.
    Unlead,
}

impl ReplicaChange {
    pub(crate) fn from_code(code: u32) -> Option<ReplicaChange> {
        [
            ReplicaChange::Down,
            ReplicaChange::Up,
            ReplicaChange::Freeze,
            ReplicaChange::Thaw,
            ReplicaChange::Lead,
            ReplicaChange::Unlead,
        ]
        .into_iter()
        .find(|change| *change as u32 == code)
    }
}

/// The leadership of a whole run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Timeline {
    /// (true instant, replica, change), in time order.
    pub(crate) changes: Vec<(u64, u8, ReplicaChange)>,
    /// Milliseconds during which two replicas could act at once.
    pub(crate) overlap_ms: u64,
    pub(crate) terms: u64,
    pub(crate) crashes: u64,
    pub(crate) stalls: u64,
}

/// One replica's clock: `local(t) = offset + t + t·ppm/10⁶`.
#[derive(Clone, Copy, Debug)]
struct Clock {
    offset: i64,
    ppm: i64,
}

impl Clock {
    fn local(self, t: u64) -> i64 {
        let t = i128::from(t);
        let local = i128::from(self.offset) + t + t * i128::from(self.ppm) / 1_000_000;
        i64::try_from(local).unwrap_or(i64::MAX)
    }

    /// The first true instant at which the local clock reads `local` or more.
    fn true_at(self, local: i64) -> u64 {
        let scaled = (i128::from(local) - i128::from(self.offset)) * 1_000_000;
        let rate = 1_000_000 + i128::from(self.ppm);
        let t = (scaled + rate - 1).div_euclid(rate);
        // Rounding may leave the clock a tick short of `local`.
        let mut t = u64::try_from(t.max(0)).unwrap_or(u64::MAX);
        while self.local(t) < local {
            t += 1;
        }
        t
    }

    /// True duration of `local` milliseconds of this clock, from `t`.
    fn after(self, t: u64, local: u64) -> u64 {
        self.true_at(self.local(t).saturating_add(i64::try_from(local).unwrap_or(i64::MAX))).max(t + 1)
    }
}

#[derive(Debug)]
struct Replica {
    clock: Clock,
    up: bool,
    frozen: bool,
    /// It believes it holds the Lease.
    holds: bool,
    /// Local instant before which its fence is open.
    fence_until: i64,
    /// The Lease record (version) it last saw change, and when (local).
    seen: Option<(u64, i64)>,
    acting: bool,
    acting_since: u64,
}

/// The election's own queue: (true instant, sequence, step, replica, argument).
type Agenda = BinaryHeap<Reverse<(u64, u64, Step, usize, i64)>>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    /// The elector's timer: read (and renew, take or watch) the Lease.
    Tick,
    /// The fence deadline set at a renewal passes (if not extended since).
    FenceEnds,
    Crash,
    Restart,
    Stall,
    Resume,
}

/// Runs the election over `horizon` for the configured replicas.
pub(crate) fn elect(config: &HaConfig, seed: u64, restarts: u32, timing: &SimTiming) -> Timeline {
    let (restart_downtime, horizon) = (timing.restart_downtime, timing.horizon);
    let mut timeline = Timeline::default();
    let mut rng = SplitMix64::stream(seed, "restarts");
    let mut troubles = Vec::new();
    let restarts = u64::from(restarts);
    for r in 0..restarts {
        // Spread over the run, jittered, so they hit servers mid-flight.
        let slot = horizon / (restarts + 1);
        troubles.push((slot * (r + 1) + rng.between(0, slot / 4), Step::Crash));
    }
    let mut rng = SplitMix64::stream(seed, "stalls");
    let stalls = u64::from(config.stalls);
    for s in 0..stalls {
        // While Servers are being created: creates are in flight.
        let slot = timing.arrival_window.max(4) / (stalls + 1);
        troubles.push((slot * (s + 1) + rng.between(0, slot / 4), Step::Stall));
    }
    if config.replicas <= 1 {
        single(&mut timeline, &troubles, restart_downtime);
        return timeline;
    }
    let mut rng = SplitMix64::stream(seed, "clocks");
    let drift = i64::from(config.max_clock_drift_ppm);
    let offset = i64::try_from(config.max_clock_offset).unwrap_or(i64::MAX);
    let mut replicas: Vec<Replica> = (0..config.replicas)
        .map(|_| Replica {
            clock: Clock { offset: signed(&mut rng, offset), ppm: signed(&mut rng, drift) },
            up: true,
            frozen: false,
            holds: false,
            fence_until: i64::MIN,
            seen: None,
            acting: false,
            acting_since: 0,
        })
        .collect();
    let mut lease: (Option<usize>, u64) = (None, 0);
    let mut queue = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |queue: &mut Agenda, at, step, r, arg| {
        seq += 1;
        queue.push(Reverse((at, seq, step, r, arg)));
    };
    for (r, _) in replicas.iter().enumerate() {
        // The replicas start a moment apart.
        push(&mut queue, rng.between(0, config.retry_period), Step::Tick, r, 0);
    }
    for &(at, step) in &troubles {
        push(&mut queue, at, step, 0, 0);
    }
    while let Some(Reverse((now, _, step, r, arg))) = queue.pop() {
        if now > horizon {
            break;
        }
        match step {
            Step::Tick => {
                let Some(replica) = replicas.get_mut(r) else { continue };
                if !replica.up {
                    continue;
                }
                if replica.frozen {
                    // The timer fires at the resume; see Step::Resume.
                    continue;
                }
                let local = replica.clock.local(now);
                let next = replica.clock.after(now, config.retry_period);
                match lease.0 {
                    Some(holder) if holder == r && replica.holds => {
                        lease.1 += 1;
                        replica.fence_until = local + i64::try_from(config.renew_deadline).unwrap_or(i64::MAX);
                        let ends = replica.clock.true_at(replica.fence_until);
                        push(&mut queue, ends, Step::FenceEnds, r, replica.fence_until);
                    }
                    Some(holder) if holder != r => {
                        if replica.holds {
                            // It reads the Lease held by another: it lost it.
                            replica.holds = false;
                            set_acting(&mut timeline, replica, r, now, false);
                        }
                        let version = lease.1;
                        let taken = match replica.seen {
                            Some((seen, at)) if seen == version => {
                                local - at >= i64::try_from(config.lease_duration).unwrap_or(i64::MAX)
                            }
                            _ => {
                                replica.seen = Some((version, local));
                                false
                            }
                        };
                        if taken {
                            lease = (Some(r), lease.1 + 1);
                            take(&mut timeline, replica, r, now, local, config);
                            let ends = replica.clock.true_at(replica.fence_until);
                            push(&mut queue, ends, Step::FenceEnds, r, replica.fence_until);
                        }
                    }
                    _ => {
                        // Free (or held under its own name by a previous life).
                        lease = (Some(r), lease.1 + 1);
                        take(&mut timeline, replica, r, now, local, config);
                        let ends = replica.clock.true_at(replica.fence_until);
                        push(&mut queue, ends, Step::FenceEnds, r, replica.fence_until);
                    }
                }
                push(&mut queue, next, Step::Tick, r, 0);
            }
            Step::FenceEnds => {
                let Some(replica) = replicas.get_mut(r) else { continue };
                if config.fence && replica.fence_until == arg {
                    set_acting(&mut timeline, replica, r, now, false);
                }
            }
            Step::Crash | Step::Stall => {
                // The trouble hits whoever leads (the first replica if none).
                let victim = lease.0.unwrap_or(0);
                let Some(replica) = replicas.get_mut(victim) else { continue };
                if !replica.up || replica.frozen {
                    continue;
                }
                if step == Step::Crash {
                    timeline.crashes += 1;
                    replica.up = false;
                    replica.holds = false;
                    set_acting(&mut timeline, replica, victim, now, false);
                    timeline.changes.push((now, victim as u8, ReplicaChange::Down));
                    push(&mut queue, now + restart_downtime, Step::Restart, victim, 0);
                } else {
                    timeline.stalls += 1;
                    replica.frozen = true;
                    timeline.changes.push((now, victim as u8, ReplicaChange::Freeze));
                    push(&mut queue, now + config.stall_duration, Step::Resume, victim, 0);
                }
            }
            Step::Restart => {
                let Some(replica) = replicas.get_mut(r) else { continue };
                // A new pod: a new identity that holds nothing yet.
                replica.up = true;
                replica.seen = None;
                timeline.changes.push((now, r as u8, ReplicaChange::Up));
                if lease.0 == Some(r) {
                    // Its old identity's Lease is another holder to this one.
                    lease.0 = Some(usize::MAX);
                }
                push(&mut queue, now + config.retry_period, Step::Tick, r, 0);
            }
            Step::Resume => {
                let Some(replica) = replicas.get_mut(r) else { continue };
                replica.frozen = false;
                timeline.changes.push((now, r as u8, ReplicaChange::Thaw));
                // The timer fires at once; its read answers a round trip later.
                push(&mut queue, now + config.api_round_trip, Step::Tick, r, 0);
            }
        }
    }
    for (r, replica) in replicas.iter_mut().enumerate() {
        set_acting(&mut timeline, replica, r, horizon, false);
    }
    timeline.changes.sort_by_key(|&(at, r, change)| (at, change != ReplicaChange::Unlead, r));
    timeline.overlap_ms = overlap(&timeline.changes, horizon);
    timeline
}

/// One controller without election: it acts whenever it is up and not
/// frozen (its fence never closes).
fn single(timeline: &mut Timeline, troubles: &[(u64, Step)], restart_downtime: u64) {
    timeline.changes.push((0, 0, ReplicaChange::Lead));
    let mut troubles = troubles.to_vec();
    troubles.sort_unstable();
    let mut busy_until = 0;
    // Stalls are the election's concern: one controller only waits them out.
    for (at, step) in troubles {
        if at < busy_until || step != Step::Crash {
            continue;
        }
        timeline.crashes += 1;
        timeline.changes.push((at, 0, ReplicaChange::Down));
        timeline.changes.push((at, 0, ReplicaChange::Unlead));
        timeline.changes.push((at + restart_downtime, 0, ReplicaChange::Up));
        timeline.changes.push((at + restart_downtime, 0, ReplicaChange::Lead));
        timeline.terms += 1;
        busy_until = at + restart_downtime;
    }
    timeline.changes.sort_by_key(|&(at, r, change)| (at, change != ReplicaChange::Unlead, r));
}

fn take(timeline: &mut Timeline, replica: &mut Replica, r: usize, now: u64, local: i64, config: &HaConfig) {
    replica.holds = true;
    replica.seen = None;
    replica.fence_until = local + i64::try_from(config.renew_deadline).unwrap_or(i64::MAX);
    timeline.terms += 1;
    set_acting(timeline, replica, r, now, true);
}

fn set_acting(timeline: &mut Timeline, replica: &mut Replica, r: usize, now: u64, acting: bool) {
    if replica.acting == acting {
        return;
    }
    replica.acting = acting;
    if acting {
        replica.acting_since = now;
        timeline.changes.push((now, r as u8, ReplicaChange::Lead));
    } else if now > replica.acting_since {
        timeline.changes.push((now, r as u8, ReplicaChange::Unlead));
    } else {
        // An empty term: drop its Lead.
        if let Some(position) = timeline
            .changes
            .iter()
            .rposition(|&(at, who, change)| at == now && usize::from(who) == r && change == ReplicaChange::Lead)
        {
            timeline.changes.remove(position);
        }
    }
}

/// Total time two or more replicas could act at once (a frozen one does
/// nothing until it resumes).
fn overlap(changes: &[(u64, u8, ReplicaChange)], horizon: u64) -> u64 {
    let mut acting = [false; 256];
    let mut frozen = [false; 256];
    let mut since = 0;
    let mut total = 0;
    for &(at, r, change) in changes {
        let at = at.min(horizon);
        let effective = acting.iter().zip(&frozen).filter(|&(&a, &f)| a && !f).count();
        if effective > 1 {
            total += at - since;
        }
        since = at;
        let r = usize::from(r);
        match change {
            ReplicaChange::Lead => acting[r] = true,
            ReplicaChange::Unlead => acting[r] = false,
            ReplicaChange::Freeze => frozen[r] = true,
            ReplicaChange::Thaw => frozen[r] = false,
            ReplicaChange::Down | ReplicaChange::Up => {}
        }
    }
    total
}

/// A draw in `-bound..=bound`.
fn signed(rng: &mut SplitMix64, bound: i64) -> i64 {
    let bound = bound.max(0);
    let span = u64::try_from(bound).unwrap_or(0) * 2;
    i64::try_from(rng.between(0, span)).unwrap_or(0) - bound
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_measure_durations_within_their_drift() {
        let clock = Clock { offset: -1_500, ppm: 50_000 };
        let start = 10_000;
        let lasted = clock.after(start, 10_000) - start;
        // 10 local seconds on a clock 5% fast take about 9.52 true seconds.
        assert!((9_520..=9_525).contains(&lasted), "{lasted}");
        assert!(clock.local(clock.true_at(123_456)) >= 123_456);
        assert!(clock.local(clock.true_at(123_456) - 1) < 123_456);
    }

    #[test]
    fn the_fenced_election_never_lets_two_act_at_once() {
        for seed in 0..40 {
            for stall_duration in [5_000, 13_000, 20_000] {
                let config = HaConfig { stalls: 2, stall_duration, ..HaConfig::with_fault_rate(0.3) };
                let timeline = elect(&config, seed, 2, &SimTiming::default());
                assert_eq!(timeline.overlap_ms, 0, "seed {seed}: {timeline:?}");
                assert!(timeline.terms >= 3, "seed {seed}: the troubles moved no leadership: {timeline:?}");
            }
        }
    }

    #[test]
    fn without_the_fence_a_resumed_leader_acts_beside_its_successor() {
        let config = HaConfig { fence: false, ..HaConfig::with_fault_rate(0.3) };
        let timeline = elect(&config, 1, 0, &SimTiming::default());
        // Until its first read after the resume answers.
        assert!(timeline.overlap_ms > 0 && timeline.overlap_ms <= config.api_round_trip, "{timeline:?}");
    }

    #[test]
    fn clocks_drifting_past_the_bound_break_the_fence() {
        // 10 s / 0.7 > 15 s / 1.3: the stalled leader's fence outlives the
        // lease as the follower measures it.
        let config =
            HaConfig { max_clock_drift_ppm: 300_000, stall_duration: 13_000, ..HaConfig::with_fault_rate(0.3) };
        let broken = (0..40).any(|seed| elect(&config, seed, 0, &SimTiming::default()).overlap_ms > 0);
        assert!(broken, "no seed drew clocks far enough apart");
    }
}
