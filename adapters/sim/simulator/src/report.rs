//! What a run reports: outcomes, counts, speed, the trace hash and every
//! invariant violation with the seed and step that reproduce it.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use server_simcloud::Counters;

/// One broken invariant. `seed` and `step` reproduce it:
/// `server-controller simulate --servers N --seed SEED` stops at the same step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// DESIGN §12 number ("1".."13"), "patch" for an unappliable status
    /// patch, "park" for a park changed during an outage, "wake" for a wake
    /// no pass paid (the Server's change went unread), "term" for a pass
    /// that decided on a provider view listed before its replica's term.
    pub invariant: &'static str,
    pub seed: u64,
    /// The shard the Server was simulated in (fixed by the server count) and
    /// the step within it.
    pub shard: usize,
    pub step: u64,
    /// Virtual time of the step, in milliseconds since the run began.
    pub at_ms: u64,
    pub server: String,
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invariant {} violated at shard {} step {} (t={}ms, seed {}) on {}: {}",
            self.invariant, self.shard, self.step, self.at_ms, self.seed, self.server, self.message
        )
    }
}

/// Counts of what happened on the Kubernetes side.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KubeStats {
    pub reconcile_passes: u64,
    pub monitor_polls: u64,
    pub monitor_list_failures: u64,
    /// Monitor projections computed (an unchanged record over an unchanged
    /// status is not projected again).
    pub observations: u64,
    pub writes: u64,
    pub write_conflicts: u64,
    pub writes_dropped: u64,
    pub write_answers_lost: u64,
    /// Reference changes the writer's memory of its term already showed
    /// made (nothing sent).
    pub reference_writes_spared: u64,
    /// Live reads the term's uid index answered "absent" without a request.
    pub index_absent_answers: u64,
    pub stale_watch_deliveries: u64,
    pub controller_restarts: u64,
    pub user_deletes: u64,
    pub spec_edits: u64,
    /// Servers created with user data the core refuses (some fixed later).
    pub refused_user_data: u64,
    /// Of those, still refused at the end, the ones whose create note stands
    /// because a write of it failed (see `TrackedServer::note_orphaned`).
    pub orphaned_notes: u64,
    pub operator_resets: u64,
    pub servers_removed: u64,
    /// Ground truth: provider servers that booted and vanished before any
    /// observation persisted the boot, whose Server the controller then
    /// (legitimately, as far as it could know) created again.
    pub recreated_unobserved_boots: u64,
    /// Of the rest, provider servers a read had shown booted (a list or a
    /// get answered to the controller) before they vanished unlatched, whose
    /// Server was created again: a boot the controller could have latched.
    pub recreated_shown_boots: u64,
    /// Leadership terms of the controller replicas (the run's, not per shard).
    pub leader_terms: u64,
    /// Times the leader froze (the run's).
    pub leader_stalls: u64,
    /// Milliseconds two replicas could act at once (invariant 11: none).
    pub acting_overlap_ms: u64,
    /// Writes and cloud calls the fence refused.
    pub fenced_actions: u64,
    /// Rebuilds sent to the cloud (each accepted or refused there).
    pub rebuilds_sent: u64,
    /// Creates sent while a provider server of the Server existed (invariant 13: none).
    pub duplicate_creates: u64,
    /// Watch cuts relisted (the run's: every shard sees the same), the pages
    /// they fetched and the wakes they decided.
    pub relists: u64,
    pub relist_pages: u64,
    pub relist_wakes: u64,
    /// Passes woken because the monitor could not write a first latch.
    pub latch_wakes: u64,
    /// Provider servers another controller made, placed for the port to
    /// adopt (those still building that vanish before they boot apart).
    pub adoptable_servers: u64,
    pub adoptable_vanishing: u64,
    /// The user's pauses and unpauses (`spec.pause`).
    pub pauses: u64,
    pub unpauses: u64,
    /// Retry annotations an operator wrote (on parked or refused Servers).
    pub retry_requests: u64,
    /// Events emitted, by reason.
    pub events: BTreeMap<&'static str, u64>,
    /// Pass outcomes, by label (done, yield, terminal, error).
    pub pass_outcomes: BTreeMap<&'static str, u64>,
    /// Passes by where the provider view they decided on came from
    /// (`ProviderSource::label`): `listed` (the term's latest list or a
    /// create answer), the reason a listed view could not decide and the
    /// pass read live, or `unlisted` (no list held: read live).
    pub provider_reads: BTreeMap<&'static str, u64>,
}

impl KubeStats {
    /// Adds another shard's counts.
    pub(crate) fn merge(&mut self, other: &KubeStats) {
        let KubeStats {
            reconcile_passes,
            monitor_polls,
            monitor_list_failures,
            observations,
            writes,
            write_conflicts,
            writes_dropped,
            write_answers_lost,
            reference_writes_spared,
            index_absent_answers,
            stale_watch_deliveries,
            controller_restarts,
            user_deletes,
            spec_edits,
            refused_user_data,
            orphaned_notes,
            operator_resets,
            servers_removed,
            recreated_unobserved_boots,
            recreated_shown_boots,
            leader_terms,
            leader_stalls,
            acting_overlap_ms,
            fenced_actions,
            rebuilds_sent,
            duplicate_creates,
            relists,
            relist_pages,
            relist_wakes,
            latch_wakes,
            adoptable_servers,
            adoptable_vanishing,
            pauses,
            unpauses,
            retry_requests,
            events,
            pass_outcomes,
            provider_reads,
        } = other;
        self.reconcile_passes += reconcile_passes;
        self.monitor_polls += monitor_polls;
        self.monitor_list_failures += monitor_list_failures;
        self.observations += observations;
        self.writes += writes;
        self.write_conflicts += write_conflicts;
        self.writes_dropped += writes_dropped;
        self.write_answers_lost += write_answers_lost;
        self.reference_writes_spared += reference_writes_spared;
        self.index_absent_answers += index_absent_answers;
        self.stale_watch_deliveries += stale_watch_deliveries;
        // One controller: every shard sees the same restarts.
        self.controller_restarts = self.controller_restarts.max(*controller_restarts);
        self.user_deletes += user_deletes;
        self.spec_edits += spec_edits;
        self.refused_user_data += refused_user_data;
        self.orphaned_notes += orphaned_notes;
        self.operator_resets += operator_resets;
        self.servers_removed += servers_removed;
        self.recreated_unobserved_boots += recreated_unobserved_boots;
        self.recreated_shown_boots += recreated_shown_boots;
        // One set of replicas: every shard sees the same leadership.
        self.leader_terms = self.leader_terms.max(*leader_terms);
        self.leader_stalls = self.leader_stalls.max(*leader_stalls);
        self.acting_overlap_ms = self.acting_overlap_ms.max(*acting_overlap_ms);
        self.fenced_actions += fenced_actions;
        self.rebuilds_sent += rebuilds_sent;
        self.duplicate_creates += duplicate_creates;
        self.relists = self.relists.max(*relists);
        self.relist_pages += relist_pages;
        self.relist_wakes += relist_wakes;
        self.latch_wakes += latch_wakes;
        self.adoptable_servers += adoptable_servers;
        self.adoptable_vanishing += adoptable_vanishing;
        self.pauses += pauses;
        self.unpauses += unpauses;
        self.retry_requests += retry_requests;
        merge_counts(&mut self.events, events);
        merge_counts(&mut self.pass_outcomes, pass_outcomes);
        merge_counts(&mut self.provider_reads, provider_reads);
    }

    /// Passes that decided on a listed view.
    pub fn listed_reads(&self) -> u64 {
        self.provider_reads.get("listed").copied().unwrap_or(0)
    }

    /// Passes that read the provider live because no list was held.
    pub fn unlisted_reads(&self) -> u64 {
        self.provider_reads.get("unlisted").copied().unwrap_or(0)
    }

    /// Passes whose listed view could not decide, by the reason they read
    /// live instead.
    pub fn live_after_listed(&self) -> BTreeMap<&'static str, u64> {
        self.provider_reads
            .iter()
            .filter(|(k, _)| !matches!(**k, "listed" | "unlisted"))
            .map(|(k, v)| (*k, *v))
            .collect()
    }
}

pub(crate) fn merge_counts(into: &mut BTreeMap<&'static str, u64>, from: &BTreeMap<&'static str, u64>) {
    for (key, count) in from {
        *into.entry(key).or_insert(0) += count;
    }
}

/// The result of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub servers: usize,
    pub seed: u64,
    pub max_attempts: i32,
    pub fault_rate: f64,
    pub steps: u64,
    pub virtual_seconds: f64,
    pub wall_seconds: f64,
    pub steps_per_second: f64,
    /// FNV-1a over the run's events and decisions, hex.
    pub trace_hash: String,
    /// Final state of each Server, by label.
    pub outcomes: BTreeMap<&'static str, u64>,
    /// Cloud fates drawn, by kind.
    pub fates: BTreeMap<&'static str, u64>,
    /// Creates the provider accepted (each made a provider server).
    pub create_attempts: u64,
    pub cloud: Counters,
    pub kube: KubeStats,
    pub violation_count: u64,
    pub violations: Vec<Violation>,
    /// The step log of the Server named by `SimConfig::explain`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub explain: Vec<String>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.violation_count == 0
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "simulated {} servers, seed {}, max attempts {}, fault rate {}",
            self.servers, self.seed, self.max_attempts, self.fault_rate
        )?;
        writeln!(
            f,
            "steps: {} in {:.2}s wall ({:.0} steps/s), {:.0}s virtual",
            self.steps, self.wall_seconds, self.steps_per_second, self.virtual_seconds
        )?;
        writeln!(f, "trace hash: {}", self.trace_hash)?;
        writeln!(f, "outcomes: {}", join(&self.outcomes))?;
        writeln!(f, "fates: {}", join(&self.fates))?;
        let c = &self.cloud;
        writeln!(
            f,
            "cloud: {} create attempts accepted ({} calls, {} refused, {} deduplicated, {} landed with the answer lost), {} deletes, {} gets, {} lists, {} injected failures ({} in the outage)",
            self.create_attempts,
            c.create_calls,
            c.creates_refused,
            c.creates_deduplicated,
            c.creates_lost_answer,
            c.delete_calls,
            c.get_calls,
            c.list_calls,
            c.injected_failures,
            c.outage_failures
        )?;
        writeln!(
            f,
            "rebuilds: {} sent, {} accepted by the cloud; events: {} rebuilding, {} rebuilt, {} failed and parked",
            self.kube.rebuilds_sent,
            c.rebuilds_accepted,
            self.kube.events.get("ProviderServerRebuilding").copied().unwrap_or(0),
            self.kube.events.get("ProviderServerRebuilt").copied().unwrap_or(0),
            self.kube.events.get("ProviderServerRebuildFailed").copied().unwrap_or(0),
        )?;
        let k = &self.kube;
        writeln!(
            f,
            "kube: {} passes, {} polls, {} writes ({} conflicts, {} dropped, {} answers lost, {} reference writes spared), {} stale watches, {} restarts, {} user deletes, {} spec edits, {} Servers with refused user data ({} left with a create note a failed write left standing), {} operator resets",
            k.reconcile_passes,
            k.monitor_polls,
            k.writes,
            k.write_conflicts,
            k.writes_dropped,
            k.write_answers_lost,
            k.reference_writes_spared,
            k.stale_watch_deliveries,
            k.controller_restarts,
            k.user_deletes,
            k.spec_edits,
            k.refused_user_data,
            k.orphaned_notes,
            k.operator_resets
        )?;
        writeln!(
            f,
            "leadership: {} terms, {} leader stalls, {} ms with two replicas acting, {} actions fenced, {} duplicate creates",
            k.leader_terms, k.leader_stalls, k.acting_overlap_ms, k.fenced_actions, k.duplicate_creates
        )?;
        writeln!(
            f,
            "watch: {} relists on {} pages, {} wakes decided by them; {} passes woken for a first latch the monitor could not write",
            k.relists, k.relist_pages, k.relist_wakes, k.latch_wakes
        )?;
        let after = k.live_after_listed();
        writeln!(
            f,
            "provider reads: {} listed, {} live after listed ({}), {} unlisted; {} live reads answered absent by the term's index",
            k.listed_reads(),
            after.values().sum::<u64>(),
            join(&after),
            k.unlisted_reads(),
            k.index_absent_answers
        )?;
        writeln!(
            f,
            "users and operators: {} pauses, {} unpauses, {} retry requests, {} provider servers to adopt ({} vanishing before boot)",
            k.pauses, k.unpauses, k.retry_requests, k.adoptable_servers, k.adoptable_vanishing
        )?;
        writeln!(
            f,
            "booted servers lost before a latch and recreated: {} shown booted to the controller, {} never shown",
            k.recreated_shown_boots, k.recreated_unobserved_boots
        )?;
        writeln!(f, "events: {}", join(&k.events))?;
        writeln!(f, "violations: {}", self.violation_count)?;
        for violation in &self.violations {
            writeln!(f, "  {violation}")?;
        }
        if !self.explain.is_empty() {
            writeln!(f, "explain:")?;
            for line in &self.explain {
                writeln!(f, "  {line}")?;
            }
        }
        Ok(())
    }
}

fn join(counts: &BTreeMap<&'static str, u64>) -> String {
    let parts: Vec<String> = counts.iter().map(|(k, v)| format!("{k}={v}")).collect();
    parts.join(" ")
}
