//! The demo's closing report: a table for people, one JSON object for tools.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use super::verdict::Violation;

#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) servers: usize,
    pub(crate) seed: u64,
    pub(crate) max_attempts: i32,
    pub(crate) duration_seconds: f64,
    pub(crate) settled: bool,
    /// Servers grouped by the fate the cloud gave them and what became of them.
    pub(crate) outcomes: Vec<FateOutcome>,
    pub(crate) create_attempts: CreateAttempts,
    /// Event reason -> count (series folded in).
    pub(crate) events: BTreeMap<String, u64>,
    pub(crate) api_requests: ApiRequests,
    pub(crate) cloud_calls: BTreeMap<&'static str, u64>,
    pub(crate) invariants: Vec<InvariantVerdict>,
    pub(crate) violations: Vec<Violation>,
    /// `--timeout`, in seconds.
    pub(crate) timeout_seconds: f64,
    /// The Servers that had not settled when the run ended, and why.
    pub(crate) unsettled: Vec<Unsettled>,
}

/// A Server that had not reached the end its fate leads to, and where it stood.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub(crate) struct Unsettled {
    pub(crate) server: String,
    /// Its Available condition ("Provisioning: Waiting for ..."), bounded.
    pub(crate) standing: String,
}

/// How many unsettled Servers a line names before it counts the rest.
const NAMED: usize = 3;

/// `server-003 (Provisioning: ...), server-007 (...) and 4 more`.
pub(crate) fn name_unsettled(unsettled: &[Unsettled]) -> String {
    let mut named: Vec<String> =
        unsettled.iter().take(NAMED).map(|u| format!("{} ({})", u.server, u.standing)).collect();
    if unsettled.len() > NAMED {
        named.push(format!("and {} more", unsettled.len() - NAMED));
    }
    named.join(", ")
}

impl Report {
    /// Why the run failed, one reason a line; empty when it passed.
    pub(crate) fn failures(&self) -> Vec<String> {
        let mut reasons = Vec::new();
        if !self.violations.is_empty() {
            let invariants: std::collections::BTreeSet<u8> = self.violations.iter().map(|v| v.invariant).collect();
            let list: Vec<String> = invariants.iter().map(u8::to_string).collect();
            reasons.push(format!(
                "{} violation(s) of invariant(s) {} (listed above)",
                self.violations.len(),
                list.join(", ")
            ));
        }
        if !self.settled {
            reasons.push(format!(
                "{} of {} Servers did not settle within --timeout {}s: {}",
                self.unsettled.len(),
                self.servers,
                self.timeout_seconds,
                name_unsettled(&self.unsettled)
            ));
        }
        reasons
    }
}

#[derive(Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct FateOutcome {
    pub(crate) fate: String,
    pub(crate) outcome: String,
    pub(crate) servers: usize,
}

/// Every create call is exactly one of: accepted, refused, deduplicated, failed.
#[derive(Debug, Serialize)]
pub(crate) struct CreateAttempts {
    pub(crate) calls: u64,
    /// Made a new provider server.
    pub(crate) accepted: u64,
    /// Refused outright (quota).
    pub(crate) refused: u64,
    /// Answered with the server an earlier create of the same Server made.
    pub(crate) deduplicated: u64,
    /// Failed by an injected outage (503) without effect.
    pub(crate) failed: u64,
    pub(crate) max_accepted_per_server: u32,
}

#[derive(Debug, Serialize)]
pub(crate) struct ApiRequests {
    pub(crate) total: u64,
    pub(crate) per_server: f64,
    /// "verb resource" -> count.
    pub(crate) by_verb_and_resource: BTreeMap<String, u64>,
    pub(crate) faults_injected: u64,
}

#[derive(Debug, Serialize)]
pub(crate) struct InvariantVerdict {
    pub(crate) invariant: u8,
    pub(crate) statement: &'static str,
    pub(crate) holds: bool,
}

pub(crate) const INVARIANTS: [(u8, &str); 7] = [
    (1, "no retry delete of a server that ever booted"),
    (2, "providerCreateFailures <= max; parked at the cap"),
    (3, "provisionedAt never changes once set"),
    (4, "creates accepted per server <= max"),
    (5, "watch trigger and retry decision agree"),
    (6, "one provider server at most; nothing left after deletion"),
    (7, "unmodelled spec and status fields survive"),
];

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f)?;
        writeln!(
            f,
            "server-controller demo: {} servers, seed {}, max attempts {}, {:.1} s{}",
            self.servers,
            self.seed,
            self.max_attempts,
            self.duration_seconds,
            if self.settled { "" } else { " (timed out before every server settled)" }
        )?;
        writeln!(
            f,
            "  (the seed fixes which fate each Server gets; call faults and timing vary, so counts may differ between runs)"
        )?;
        writeln!(f, "\n  {:<52}{:<42}servers", "fate (what the cloud does)", "outcome")?;
        for row in &self.outcomes {
            writeln!(f, "  {:<52}{:<42}{:>7}", row.fate, row.outcome, row.servers)?;
        }
        let c = &self.create_attempts;
        writeln!(
            f,
            "\n  provider creates: {} calls = {} made a server + {} refused (quota) + {} answered with the existing server + {} failed (simulated outage)",
            c.calls, c.accepted, c.refused, c.deduplicated, c.failed
        )?;
        writeln!(
            f,
            "  at most {} servers made for one Server (the cap is {})",
            c.max_accepted_per_server, self.max_attempts
        )?;
        writeln!(f, "\n  event                                      count")?;
        for (reason, count) in &self.events {
            writeln!(f, "  {reason:<42}{count:>6}")?;
        }
        let a = &self.api_requests;
        writeln!(
            f,
            "\n  Kubernetes API requests by the operator: {} ({:.1} per server, {} faults injected)",
            a.total, a.per_server, a.faults_injected
        )?;
        for (what, count) in &a.by_verb_and_resource {
            writeln!(f, "    {what:<40}{count:>7}")?;
        }
        let calls: Vec<String> = self.cloud_calls.iter().map(|(k, v)| format!("{k} {v}")).collect();
        writeln!(f, "\n  cloud calls: {}", calls.join(", "))?;
        writeln!(f, "\n  invariants (DESIGN §12)")?;
        for verdict in &self.invariants {
            let mark = if verdict.holds { "holds" } else { "VIOLATED" };
            writeln!(f, "  {:>2}. {:<58}{mark}", verdict.invariant, verdict.statement)?;
        }
        for v in &self.violations {
            writeln!(f, "      invariant {} on {}: {}", v.invariant, v.server, v.message)?;
        }
        let failures = self.failures();
        if failures.is_empty() {
            return writeln!(f, "\n  verdict: PASS");
        }
        writeln!(f, "\n  verdict: FAIL")?;
        for reason in failures {
            writeln!(f, "    {reason}")?;
        }
        Ok(())
    }
}
