//! The discrete-event loop: takes events in (time, sequence) order and runs
//! them against the in-memory Kubernetes side, the SimCloud model and the
//! rules. Nothing here reads a clock or a thread RNG.

use std::collections::BTreeMap;

use server_core::model::{CREATE_ISSUED_ANNOTATION, RETRY_ANNOTATION, UserData};
use server_core::{Options, Server};

use super::ShardResult;
use super::api_server::TrackedServer;
use super::api_server::{ApiServer, ServerPart};
use super::checker::Checker;
use super::config::SimConfig;
use super::explain::Explain;
use super::ha::{ReplicaChange, Timeline};
use super::queue::{EventKind, EventQueue, epoch_ms};
use super::replicas::{Replicas, WatchDelivery};
use super::report::KubeStats;
use super::rules::DecisionRules;
use super::term::Term;
use super::trace::Trace;
use super::world::{NOT_PENDING, REPLICAS, TENANT_SIZE, Tenant, new_server};
use server_simcloud::CloudModel;
use server_simcloud::rng::SplitMix64;

mod executor;
mod relist;

/// A slice of the Servers simulated on its own: its own queue, cloud model
/// and random streams. Shards share nothing, so they run on any number of
/// threads with the same result; the layout depends on the server count only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shard {
    pub(crate) index: usize,
    /// Global index of the shard's first Server (a multiple of the tenant size).
    pub(crate) first: usize,
    pub(crate) count: usize,
}

impl Shard {
    /// Shards of `size` Servers (rounded up to whole tenants, so tenants never
    /// straddle shards).
    pub(crate) fn layout(servers: usize, size: usize) -> Vec<Shard> {
        let size = size.max(1).div_ceil(TENANT_SIZE) * TENANT_SIZE;
        (0..servers.div_ceil(size))
            .map(|index| {
                let first = index * size;
                Shard { index, first, count: size.min(servers - first) }
            })
            .collect()
    }

    /// The seed of this shard's own random streams.
    fn seed(&self, seed: u64) -> u64 {
        server_simcloud::rng::mix(seed ^ server_simcloud::rng::mix(self.index as u64 + 1))
    }
}

/// One shard's simulation. Beyond its configuration, the step count, the
/// Kubernetes-side fault stream, the trace and the run's counters it holds
/// no state: it composes the owners (the API server, the controller
/// replicas, the cloud model, the event queue, the checker) and orchestrates
/// each event across them. Its fields are private to this module and its
/// children: the passes and the monitor (`executor`) and the relists
/// (`relist`).
#[derive(Debug)]
pub(crate) struct Engine {
    config: SimConfig,
    shard: Shard,
    rules: DecisionRules,
    options: Options,
    cloud: CloudModel,
    /// The stored Servers, their caches and the tenants' resources.
    api: ApiServer,
    /// Virtual time and the scheduled events.
    events: EventQueue,
    /// Kubernetes-side fault draws, in event order.
    faults: SplitMix64,
    step: u64,
    /// The controller replicas (only the first `config.ha.replicas` run).
    replicas: Replicas,
    trace: Trace,
    /// The invariants' memory and the violations found.
    checker: Checker,
    /// `--explain`'s log of one Server.
    explain: Explain,
    stats: KubeStats,
    /// Copies of Servers handed back by finished passes, reused by the next
    /// (see `world::copy_server`).
    spare_servers: Vec<Server>,
}

impl Engine {
    pub(crate) fn new(config: SimConfig, shard: Shard, rules: DecisionRules, trace: Trace) -> Self {
        let count = shard.count;
        let events = EventQueue::with_capacity(count * 2);
        let epoch = events.now_ts();
        let first_tenant = shard.first / TENANT_SIZE;
        let tenants = (0..count.div_ceil(TENANT_SIZE))
            .map(|t| {
                let first = t * TENANT_SIZE;
                Tenant::new(first_tenant + t, first, TENANT_SIZE.min(count - first), epoch)
            })
            .collect();
        let mut cloud = CloudModel::new(config.cloud);
        cloud.reseed_faults(shard.seed(config.seed));
        // Like fates, from the seed and the Server's index alone: one draw
        // per index of a stream of its own.
        let refused_base = SplitMix64::stream(config.seed, "refused-user-data").next_u64();
        let servers = (0..count)
            .map(|i| {
                let global = shard.first + i;
                let refused =
                    SplitMix64::new(refused_base.wrapping_add(global as u64)).chance(config.kube.refused_user_data);
                let server = new_server(global, global / TENANT_SIZE, refused);
                // Fates come from the seed and the uid alone: the same for
                // every shard layout.
                let fate = cloud.fate(&server.meta.uid).kind();
                let handle = cloud.handle(&server.meta.uid);
                TrackedServer::new(server, i / TENANT_SIZE, fate, handle)
            })
            .collect();
        let monitor_interval = std::time::Duration::from_millis(config.timing.monitor_interval);
        Engine {
            options: Options::with_max_attempts(config.max_attempts)
                .with_create_grace(config.timing.create_grace())
                .with_listed_view_max_age(Options::listed_view_max_age_for_interval(monitor_interval)),
            faults: SplitMix64::stream(shard.seed(config.seed), "kube-faults"),
            shard,
            checker: Checker::new(
                config.seed,
                shard.index,
                count,
                Options::with_max_attempts(config.max_attempts).max_attempts(),
                config.max_reported_violations,
            ),
            explain: Explain::new(config.explain.and_then(|server| server.checked_sub(shard.first))),
            spare_servers: Vec::new(),
            events,
            replicas: Replicas::new(usize::from(config.ha.replicas)),
            config,
            rules,
            cloud,
            api: ApiServer::new(servers, tenants),
            step: 0,
            trace,
            stats: KubeStats::default(),
        }
    }

    /// Schedules what the users, operators and the environment will do.
    pub(crate) fn plan(&mut self, timeline: &Timeline) {
        let mut rng = SplitMix64::stream(self.shard.seed(self.config.seed), "plan");
        let (timing, kube) = (self.config.timing, self.config.kube);
        self.stats.leader_terms = timeline.terms;
        self.stats.leader_stalls = timeline.stalls;
        self.stats.acting_overlap_ms = timeline.overlap_ms;
        let horizon = timing.horizon;
        for i in 0..self.api.len() {
            let arrival = rng.between(0, timing.arrival_window);
            self.events.push(arrival, EventKind::Arrive, i, 0);
            if rng.chance(kube.user_delete) {
                let at = arrival + rng.between(60_000, horizon.saturating_sub(arrival + 60_000).max(60_000));
                self.events.push(at, EventKind::UserDelete, i, 0);
            }
            if rng.chance(kube.spec_edit) {
                self.events.push(arrival + rng.between(30_000, horizon / 2), EventKind::SpecEdit, i, 0);
            }
            let refused_user_data =
                self.api.server(i).is_some_and(|tracked| tracked.stored().spec.user_data.as_ref().is_some_and(refused));
            self.stats.refused_user_data += u64::from(refused_user_data);
            if refused_user_data && rng.chance(0.5) {
                self.events.push(arrival + rng.between(60_000, 240_000), EventKind::SpecEdit, i, 0);
            }
            let refused = self.api.server(i).is_some_and(|tracked| tracked.fate == server_simcloud::FateKind::Refused);
            if refused && rng.chance(kube.refused_spec_fix) {
                self.events.push(arrival + rng.between(120_000, 300_000), EventKind::SpecEdit, i, 0);
            } else if refused && rng.chance(kube.refused_retry) {
                self.events.push(arrival + rng.between(120_000, 300_000), EventKind::RetryRequest, i, 0);
            }
            if rng.chance(kube.pause) {
                let at = arrival + rng.between(20_000, horizon / 2);
                self.events.push(at, EventKind::Pause, i, 1);
                self.events.push(at + rng.between(30_000, 180_000), EventKind::Pause, i, 0);
            }
            if rng.chance(kube.adoptable) {
                // Running since before the run, or still building and gone
                // before it boots, a while after its Server arrives.
                let vanish = rng.chance(kube.adoptable_vanish).then(|| arrival + rng.between(20_000, 90_000));
                self.place_adoptable(i, vanish);
            }
        }
        for t in 0..self.api.tenant_count() {
            self.events.push(rng.between(0, timing.monitor_interval), EventKind::Monitor, t, 0);
        }
        // Leadership, restarts and stalls hit every shard at the same
        // instants: one set of controller replicas.
        for &(at, replica, change) in &timeline.changes {
            self.events.push(at, EventKind::Replica, usize::from(replica), change as u32);
        }
        // The provider goes down with the first crash and stays unreachable a
        // while after a replica leads again: that leader's first passes over
        // parked Servers read no provider view.
        let first_crash =
            timeline.changes.iter().filter(|(_, _, change)| *change == ReplicaChange::Down).map(|c| c.0).min();
        let next_lead = |crash: u64| {
            timeline
                .changes
                .iter()
                .filter(|&&(at, _, change)| at >= crash && change == ReplicaChange::Lead)
                .map(|c| c.0)
                .min()
        };
        if let Some(crash) = first_crash
            && let Some(lead) = next_lead(crash)
            && kube.provider_outage > 0
        {
            let until = lead + kube.provider_outage;
            self.cloud.set_outage(Some(server_simcloud::Outage { from: epoch_ms(crash), until: epoch_ms(until) }));
        }
        if let Some(interval) = timing.resync_interval {
            self.events.push(interval, EventKind::Resync, 0, 0);
        }
        self.plan_relists();
    }

    /// Runs every event up to the horizon.
    pub(crate) fn run(&mut self) {
        let horizon = self.config.timing.horizon;
        while let Some(event) = self.events.pop() {
            if event.at > horizon {
                break;
            }
            self.events.advance_to(event.at);
            self.trace.add(event.at);
            self.trace.add(event.kind.code());
            self.trace.add(u64::from(event.target));
            let target = event.target as usize;
            let counted = match event.kind {
                EventKind::Arrive => self.arrive(target),
                EventKind::Reconcile => self.reconcile(target, event.arg),
                EventKind::Act => self.act(target, event.arg as usize),
                EventKind::Monitor => self.monitor(target),
                EventKind::CacheCatchUp => self.catch_up(target, event.arg as usize),
                EventKind::UserDelete => self.user_delete(target),
                EventKind::SpecEdit => self.spec_edit(target),
                EventKind::OperatorReset => self.operator_reset(target),
                EventKind::Replica => self.replica_change(target, event.arg),
                EventKind::Resync => self.resync(),
                EventKind::WatchCut => self.watch_cut(target),
                EventKind::RelistPage => self.relist_page(target, event.arg),
                EventKind::Pause => self.pause(target, event.arg == 1),
                EventKind::RetryRequest => self.retry_request(target),
            };
            if counted {
                self.trace.end_step(self.step);
                self.step += 1;
            }
        }
        self.events.advance_to(horizon);
    }

    fn violation(&mut self, invariant: &'static str, server: usize, message: String) {
        let name = self.api.server(server).map(|tracked| tracked.stored().meta.name.clone()).unwrap_or_default();
        self.checker.report(invariant, name, self.step, self.events.now(), message);
    }

    /// Records a line about Server `i` if it is the one explained.
    #[inline]
    fn note(&mut self, i: usize, line: impl FnOnce() -> String) {
        self.explain.note(i, self.step, self.events.now(), line);
    }

    /// kube-runtime keeps one pending reconcile per object, the earliest.
    /// The event's argument is the ticket, with the replica in its top bit.
    fn schedule_for(&mut self, i: usize, r: usize, at: u64) {
        if !self.replicas.is_up(r) {
            return;
        }
        let Some(tracked) = self.api.server_mut(i) else { return };
        if tracked.pending_at[r] <= at {
            return;
        }
        tracked.pending_at[r] = at;
        tracked.ticket[r] = tracked.ticket[r].wrapping_add(1) & TICKET_MASK;
        let ticket = tracked.ticket[r] | (u32::from(r == 1) << 31);
        self.events.push(at, EventKind::Reconcile, i, ticket);
    }

    fn arrive(&mut self, i: usize) -> bool {
        let Some(rv) = self.api.create(i) else { return false };
        self.note(i, || "created by the user".into());
        self.absent_from_cut_caches(i);
        let Some(tracked) = self.api.server(i) else { return false };
        // ADDED reaches each controller whose watch runs: creation always
        // wakes it (a cut watch learns of it from its relist).
        if (self.rules.should_wake)(None, tracked.stored()) {
            let at = self.events.now() + self.config.timing.wake_delay;
            for r in 0..self.replicas.count() {
                if self.replicas.acts(r) && !self.replicas.watch_is_cut(r) {
                    self.owe_wake(i, rv);
                    self.schedule_for(i, r, at);
                }
            }
        }
        true
    }

    /// A replica woke for Server `i` at resourceVersion `rv`: a pass must
    /// read that version or a later one (checked at the end, see
    /// `final_checks`). A wake whose pass reads an older copy, or finds none,
    /// is lost: nothing wakes that Server again until a resync or a new
    /// leader's term.
    fn owe_wake(&mut self, i: usize, rv: u64) {
        self.checker.owe_wake(i, rv, self.events.now());
    }

    /// A held-back watch delivery lands in replica `r`'s cache: it jumps to
    /// the latest copy, and the wake rule compares the two, as a relist would.
    fn catch_up(&mut self, i: usize, r: usize) -> bool {
        // A cut watch delivers nothing: its relist brings the cache level.
        if self.replicas.watch_is_cut(r) {
            return false;
        }
        let Some(tracked) = self.api.server_mut(i) else { return false };
        let Some(lagging) = tracked.lagging.get_mut(r).and_then(Option::take) else { return false };
        self.note(i, || format!("replica {r}'s cache caught up"));
        let Some(tracked) = self.api.server_mut(i) else { return false };
        let wake = tracked.exists() && (self.rules.should_wake)(lagging.copy(), tracked.stored());
        let rv = tracked.rv();
        if wake && self.replicas.acts(r) {
            self.owe_wake(i, rv);
            let at = self.events.now() + self.config.timing.wake_delay;
            self.schedule_for(i, r, at);
        }
        true
    }

    /// Every change to a stored Server goes through here: the API server
    /// applies it (see [`ApiServer::write`]), the checker and the watches see
    /// it, then the API server's shadow copy is brought level. Returns the
    /// new resourceVersion.
    fn commit(
        &mut self,
        i: usize,
        part: ServerPart,
        change: &dyn Fn(&mut Server) -> Result<(), String>,
    ) -> Result<u64, String> {
        let (old_rv, new_rv) = self.api.write(i, change)?;
        self.after_write(i, old_rv);
        self.api.level(i, part);
        Ok(new_rv)
    }

    /// Bookkeeping after any write to a stored Server (ours, the monitor's, the
    /// user's, an operator's): checks invariants 2 and 3 on the stored status
    /// and delivers the watch event, possibly late.
    /// `tracked.before_write()` is the Server before the write here (see [`ApiServer::write`]).
    fn after_write(&mut self, i: usize, old_rv: u64) {
        let Some(tracked) = self.api.server_mut(i) else { return };
        let found = self.checker.check_write(i, &tracked.before_write().status, &tracked.stored().status);
        let mut wakes = [false; REPLICAS];
        let mut held_back = false;
        for (r, wake) in wakes.iter_mut().enumerate().take(self.replicas.count()) {
            let Some(lagging) = tracked.lagging.get(r) else { continue };
            let watch = self.replicas.watch_delivery(r);
            if watch == WatchDelivery::Down || lagging.is_some() {
                // Nobody watching (a restart relists), or already lagging
                // (the catch-up or the relist will compare).
                continue;
            }
            let WatchDelivery::Running { acting } = watch else {
                // Its watch is stopped: it catches up after it resumes, or
                // its relist brings the change.
                tracked.hold_back(r, old_rv);
                continue;
            };
            if self.faults.chance(self.config.kube.stale_watch) {
                let lag = self.faults.between(1, self.config.timing.max_watch_lag);
                tracked.hold_back(r, old_rv);
                self.stats.stale_watch_deliveries += 1;
                self.events.push(self.events.now() + lag, EventKind::CacheCatchUp, i, r as u32);
                held_back = true;
                continue;
            }
            *wake = acting && (self.rules.should_wake)(Some(tracked.before_write()), tracked.stored());
        }
        for (invariant, message) in found {
            self.violation(invariant, i, message);
        }
        if self.explain.is_on(i) {
            let line = self
                .api
                .server(i)
                .map(|tracked| super::explain::server(tracked.stored(), tracked.rv()))
                .unwrap_or_default();
            self.note(i, || format!("stored {line} (a watch held back: {held_back}, wakes: {wakes:?})"));
        }
        let rv = self.api.server(i).map_or(0, |tracked| tracked.rv());
        for (r, wake) in wakes.into_iter().enumerate() {
            if wake {
                self.owe_wake(i, rv);
                let at = self.events.now() + self.config.timing.wake_delay;
                self.schedule_for(i, r, at);
            }
        }
    }

    /// The object leaves the API server (its last finalizer went, or it had
    /// none). Invariant 6: nothing of it may remain.
    fn remove(&mut self, i: usize) {
        let Some(tracked) = self.api.remove(i) else { return };
        self.stats.servers_removed += 1;
        let handle = tracked.handle;
        let finalizer = server_core::model::reference_finalizer(&tracked.stored().meta.name);
        let tenant = tracked.tenant;
        let live = self.cloud.truth_of(handle, self.events.now_ts()).live;
        if live > 0 {
            self.violation("6", i, format!("Server removed while {live} provider server(s) of it exist"));
        }
        let held: Vec<String> = self
            .api
            .tenant(tenant)
            .map(|t| t.resources().filter(|r| r.has_finalizer(&finalizer)).map(|r| r.name.clone()).collect())
            .unwrap_or_default();
        if !held.is_empty() {
            self.violation("6", i, format!("Server removed while its reference finalizer remains on {held:?}"));
        }
    }

    fn user_delete(&mut self, i: usize) -> bool {
        let Some(tracked) = self.api.server_mut(i) else { return false };
        if !tracked.exists() || tracked.stored().meta.deleting {
            return false;
        }
        self.stats.user_deletes += 1;
        self.note(i, || "the user deletes it".into());
        let Some(tracked) = self.api.server_mut(i) else { return false };
        if tracked.stored().meta.finalizers.is_empty() {
            self.remove(i);
            return true;
        }
        // Setting deletionTimestamp on an object with finalizers bumps its generation.
        let _ = self.commit(i, ServerPart::Meta, &|s| {
            s.meta.deleting = true;
            s.meta.generation += 1;
            Ok(())
        });
        true
    }

    fn spec_edit(&mut self, i: usize) -> bool {
        let Some(tracked) = self.api.server_mut(i) else { return false };
        if !tracked.exists() || tracked.stored().meta.deleting {
            return false;
        }
        self.stats.spec_edits += 1;
        self.note(i, || "the user edits its spec".into());
        let fixed_user_data = super::world::user_data(self.shard.first + i);
        let _ = self.commit(i, ServerPart::MetaAndSpec, &|s| {
            let spec = &mut s.spec;
            // User data cloud-init would refuse is written whole (the
            // others already are this script).
            spec.user_data = Some(fixed_user_data.clone());
            spec.flavor_id = if spec.flavor_id == "m1.small" { "m1.large".into() } else { "m1.small".into() };
            // A new image: a booted server is rebuilt onto it.
            spec.image.id = if spec.image.id == "image-1" { "image-2".into() } else { "image-1".into() };
            // Swap network and security group, so the old ones get pruned.
            for network in &mut spec.networks {
                network.id = if network.id == "net-a" { "net-b".into() } else { "net-a".into() };
            }
            for group in &mut spec.security_groups {
                group.id = if group.id == "sg-a" { "sg-b".into() } else { "sg-a".into() };
            }
            s.meta.generation += 1;
            Ok(())
        });
        true
    }

    /// A provider server another controller made for Server `i` before
    /// the run: running (booted at the start), or, with `vanish`, still
    /// building and gone at that instant before it boots.
    fn place_adoptable(&mut self, i: usize, vanish: Option<u64>) {
        let Some(tracked) = self.api.server(i) else { return };
        let uid = tracked.stored().meta.uid.clone();
        let Some(tenant) = self.api.tenant(tracked.tenant) else { return };
        let start = self.events.now_ts();
        let launch = vanish.is_none().then_some(start);
        let vanish = vanish.map(epoch_ms).and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok());
        self.cloud.place_adoptable(start, &tenant.identity.project_id, &uid, launch, vanish);
        self.stats.adoptable_servers += 1;
        self.stats.adoptable_vanishing += u64::from(vanish.is_some());
    }

    /// The user sets (`on`) or clears `spec.pause`.
    fn pause(&mut self, i: usize, on: bool) -> bool {
        let Some(tracked) = self.api.server(i) else { return false };
        if !tracked.exists() || tracked.stored().spec.pause == on || (on && tracked.stored().meta.deleting) {
            return false;
        }
        if on {
            self.stats.pauses += 1;
        } else {
            self.stats.unpauses += 1;
        }
        self.note(i, || format!("the user sets spec.pause to {on}"));
        let _ = self.commit(i, ServerPart::MetaAndSpec, &|s| {
            s.spec.pause = on;
            s.meta.generation += 1;
            Ok(())
        });
        true
    }

    /// An operator asks for a retry of a Server the provider refused: the
    /// retry annotation, consumed by the next pass.
    fn retry_request(&mut self, i: usize) -> bool {
        let Some(tracked) = self.api.server(i) else { return false };
        if !tracked.exists() || tracked.stored().meta.deleting {
            return false;
        }
        self.annotate_retry(i);
        true
    }

    /// Writes the retry annotation on Server `i` (`kubectl annotate`: no
    /// resourceVersion precondition); its creates count from here (4).
    fn annotate_retry(&mut self, i: usize) {
        let creates = match self.api.server(i) {
            Some(tracked) => self.cloud.truth_of(tracked.handle, self.events.now_ts()).creates_accepted,
            None => return,
        };
        self.stats.retry_requests += 1;
        self.note(i, || "an operator annotates it to retry".into());
        let written = self.commit(i, ServerPart::Meta, &|s| {
            s.meta.annotations.insert(RETRY_ANNOTATION.to_owned(), "sim".to_owned());
            Ok(())
        });
        self.checker.operator_reset(i, written.ok(), creates);
    }

    fn operator_reset(&mut self, i: usize) -> bool {
        let creates = {
            let Some(tracked) = self.api.server(i) else { return false };
            self.cloud.truth_of(tracked.handle, self.events.now_ts()).creates_accepted
        };
        let max = self.options.max_attempts();
        let Some(tracked) = self.api.server_mut(i) else { return false };
        tracked.reset_scheduled = false;
        // An operator resets what the stored status shows parked.
        if !tracked.exists() || tracked.stored().meta.deleting || tracked.stored().status.provider_create_failures < max
        {
            return false;
        }
        self.stats.operator_resets += 1;
        if self.faults.chance(self.config.kube.retry_by_annotation) {
            self.annotate_retry(i);
            return true;
        }
        self.note(i, || "an operator resets providerCreateFailures".into());
        // kubectl patch --subresource=status: no resourceVersion precondition.
        let reset = self.commit(i, ServerPart::Status, &|s| {
            s.status.provider_create_failures = 0;
            Ok(())
        });
        self.checker.operator_reset(i, reset.ok(), creates);
        true
    }

    /// An operator resets a Server the checker saw parked, later, sometimes.
    fn maybe_schedule_reset(&mut self, i: usize) {
        let Some(tracked) = self.api.server_mut(i) else { return };
        if tracked.reset_scheduled || !self.faults.chance(self.config.kube.operator_reset) {
            return;
        }
        tracked.reset_scheduled = true;
        let at = self.events.now() + self.faults.between(30_000, 120_000);
        self.events.push(at, EventKind::OperatorReset, i, 0);
    }

    /// A replica dies, comes back, freezes, resumes, gains or loses the
    /// right to act (see `ha`).
    fn replica_change(&mut self, r: usize, change: u32) -> bool {
        if r >= self.replicas.count() {
            return false;
        }
        let Some(change) = ReplicaChange::from_code(change) else { return false };
        self.trace.add(change as u64);
        match change {
            ReplicaChange::Down => {
                self.replicas.go_down(r);
                self.stats.controller_restarts += 1;
                // Its in-flight passes die with it; its cache and queue go
                // (the next leader's term passes over every Server).
                for tracked in self.api.servers_mut() {
                    tracked.in_flight[r] = None;
                    tracked.lagging[r] = None;
                    tracked.pending_at[r] = NOT_PENDING;
                }
            }
            // A fresh process: a cache listed from the API server.
            ReplicaChange::Up => self.replicas.come_up(r),
            ReplicaChange::Freeze => self.replicas.freeze(r),
            ReplicaChange::Thaw => {
                // What came due while it was frozen runs now, in order...
                for (kind, target, arg) in self.replicas.thaw(r) {
                    self.events.push(self.events.now(), kind, target, arg);
                }
                // ...and its watch catches up once the API answers again.
                let round_trip = self.config.ha.api_round_trip;
                for i in 0..self.api.len() {
                    if self.api.server(i).is_some_and(|tracked| tracked.lagging[r].is_some()) {
                        let at = self.events.now() + round_trip + self.faults.between(0, round_trip);
                        self.events.push(at, EventKind::CacheCatchUp, i, r as u32);
                    }
                }
            }
            ReplicaChange::Lead => {
                let term = Term::new(self.events.now(), self.events.now_ts());
                let earlier = self.replicas.start_term(r, term);
                // The broken variants tests switch on: an earlier term's
                // lists, or its reference memory, outlive it.
                let ha = self.config.ha;
                if let Some(term) = self.replicas.term_mut(r) {
                    if !ha.term_scoped_memory {
                        term.listings = earlier.listings;
                    }
                    if !ha.term_scoped_references {
                        term.references = earlier.references;
                    }
                }
                // A new term passes over every Server.
                self.wake_all_for(r);
            }
            ReplicaChange::Unlead => self.replicas.stop_acting(r),
        }
        true
    }

    /// Whether an event of replica `r` must wait for it to resume; if so it
    /// is kept and re-run then.
    fn postpone(&mut self, r: usize, kind: EventKind, target: usize, arg: u32) -> bool {
        self.replicas.postpone(r, (kind, target, arg))
    }

    fn resync(&mut self) -> bool {
        if let Some(interval) = self.config.timing.resync_interval {
            self.events.push(self.events.now() + interval.max(1), EventKind::Resync, 0, 0);
        }
        self.wake_all();
        true
    }

    fn wake_all(&mut self) {
        for r in 0..self.replicas.count() {
            if self.replicas.acts(r) {
                self.wake_all_for(r);
            }
        }
    }

    fn wake_all_for(&mut self, r: usize) {
        for i in 0..self.api.len() {
            if self.api.server(i).is_some_and(|tracked| tracked.exists()) {
                let at = self.events.now() + self.faults.between(0, 2_000);
                self.schedule_for(i, r, at);
            }
        }
    }

    /// Final state of a Server, for the outcome counts: the project's one
    /// classifier ([`server_core::lifecycle()`]) for every Server that exists.
    fn outcome_of(&self, tracked: &TrackedServer) -> &'static str {
        if !tracked.exists() {
            return if tracked.rv() == 0 { "never-created" } else { "deleted" };
        }
        server_core::lifecycle(tracked.stored(), &self.options).as_str()
    }
}

impl Engine {
    /// What this shard contributes to the report.
    pub(crate) fn result(&self) -> ShardResult {
        let mut outcomes = BTreeMap::new();
        let mut fates = BTreeMap::new();
        for tracked in self.api.servers() {
            *outcomes.entry(self.outcome_of(tracked)).or_insert(0) += 1;
            *fates.entry(tracked.fate.as_str()).or_insert(0) += 1;
        }
        ShardResult {
            steps: self.step,
            now: self.events.now(),
            trace_hash: self.trace.finish(),
            outcomes,
            fates,
            cloud: self.cloud.counters(),
            kube: self.stats.clone(),
            violation_count: self.checker.violation_count(),
            violations: self.checker.violations().to_vec(),
            explain: self.explain.log().to_vec(),
        }
    }

    /// The per-step hashes a recording run kept, and its trace hash.
    pub(crate) fn take_recorded_trace(&mut self) -> (Vec<u64>, u64) {
        (self.trace.take_recorded(), self.trace.finish())
    }

    /// Invariant 9 on a replaying run: it took the same steps as the run
    /// recorded (whose trace hash was `first_hash`), step by step.
    pub(crate) fn check_replay(&mut self, first_hash: u64) {
        let diverged = self.trace.divergence.or_else(|| {
            let same_length = self.trace.expected_steps() == usize::try_from(self.step).ok();
            (!same_length || self.trace.finish() != first_hash).then_some(self.step)
        });
        if let Some(step) = diverged {
            self.step = step;
            self.violation("9", 0, format!("the replay with the same seed diverged at step {step}"));
        }
    }

    /// Invariant 6 once more at the end: nothing of a removed Server remains,
    /// however late a stale pass acted.
    pub(crate) fn final_checks(&mut self) {
        self.check_owed_wakes();
        for i in 0..self.api.len() {
            let Some(tracked) = self.api.server(i) else { continue };
            let stored = tracked.stored();
            let refused_noted = tracked.exists()
                && stored.meta.annotations.contains_key(CREATE_ISSUED_ANNOTATION)
                && stored.spec.user_data.as_ref().is_some_and(refused);
            match (refused_noted, tracked.note_orphaned) {
                (true, true) => self.stats.orphaned_notes += 1,
                // No create carries refused user data (`check_user_data_sent`),
                // so a note standing now stands for none, and no failed
                // write explains it.
                (true, false) => {
                    self.violation("user-data", i, "a create note stands on a Server whose user data is refused".into())
                }
                (false, _) => {}
            }
            let Some(tracked) = self.api.server(i) else { continue };
            if tracked.exists() || tracked.rv() == 0 {
                continue;
            }
            let live = self.cloud.truth_of(tracked.handle, self.events.now_ts()).live;
            if live > 0 {
                self.violation("6", i, format!("{live} provider server(s) remain for a removed Server at the end"));
            }
        }
    }
}

impl Engine {
    /// A wake no pass paid within [`WAKE_DEADLINE_MS`] is lost: the Server's
    /// change (a deletion, a creation, a failure edge) went unread, and
    /// nothing wakes it before a resync.
    fn check_owed_wakes(&mut self) {
        for i in 0..self.api.len() {
            let Some(tracked) = self.api.server(i) else { continue };
            let Some((rv, at)) = self.checker.owed_wake(i) else { continue };
            if tracked.exists() && at.saturating_add(WAKE_DEADLINE_MS) <= self.events.now() {
                self.violation(
                    "wake",
                    i,
                    format!("woken for resourceVersion {rv} at t={at}ms, and no pass read that version since"),
                );
            }
        }
    }
}

/// Whether the core refuses `user_data` (cloud-init would not run it).
fn refused(user_data: &UserData) -> bool {
    server_core::user_data::render_user_data(Some(&user_data.0), None).is_err()
}

/// How long a wake may wait for its pass before it counts as lost: far
/// beyond a pass's wake delay, a create in flight and a stalled leader (whose
/// lease, and with it its wakes, passes on meanwhile).
const WAKE_DEADLINE_MS: u64 = 60_000;

/// Tickets keep the top bit for the replica.
const TICKET_MASK: u32 = u32::MAX >> 1;

/// A Reconcile event's ticket and replica.
pub(crate) fn ticket_of(arg: u32) -> (u32, usize) {
    (arg & TICKET_MASK, usize::from(arg > TICKET_MASK))
}
