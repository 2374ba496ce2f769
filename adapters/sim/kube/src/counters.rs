//! Request counters, by verb and resource, for tests and the demo.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::verb::Verb;

/// A `(verb, resource)` pair; the resource is the plural, with `/status` for the subresource
/// (`servers`, `servers/status`), or `discovery` for discovery documents.
pub type RequestKey = (Verb, String);

/// A point-in-time copy of the counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CounterSnapshot {
    /// Requests received, by verb and resource (faulted ones included).
    pub requests: BTreeMap<RequestKey, u64>,
    /// Requests answered with an injected fault, by verb and resource.
    pub injected_faults: BTreeMap<RequestKey, u64>,
    /// Request body bytes received, by verb and resource: what clients wrote
    /// (patch, update and create bodies; reads carry none).
    pub body_bytes: BTreeMap<RequestKey, u64>,
    /// Responses sent, by HTTP status code (watch streams count once, as 200).
    pub responses_by_code: BTreeMap<u16, u64>,
    /// Requests handled (not faulted), by verb, resource and the HTTP status
    /// they were answered with: 409 are lost optimistic-concurrency races,
    /// 422 on a JSON patch a failed `test`.
    pub answers: BTreeMap<(Verb, String, u16), u64>,
    /// Request body bytes received, by verb and resource (handled requests).
    pub bytes_received: BTreeMap<RequestKey, u64>,
    /// Writes that changed nothing (no new resourceVersion, no event), by
    /// verb and resource: requests a client could have left out.
    pub no_op_writes: BTreeMap<RequestKey, u64>,
    /// Watch streams cut by fault injection.
    pub watch_cuts: u64,
    /// Watch streams ended with a `410 Gone` ERROR event.
    pub watch_gones: u64,
}

impl CounterSnapshot {
    /// Requests of `verb` on `resource` (exact resource label, e.g. `servers/status`).
    pub fn count(&self, verb: Verb, resource: &str) -> u64 {
        self.requests.get(&(verb, resource.to_string())).copied().unwrap_or(0)
    }

    /// All requests.
    pub fn total(&self) -> u64 {
        self.requests.values().sum()
    }

    /// All requests of one verb, on any resource.
    pub fn total_for_verb(&self, verb: Verb) -> u64 {
        self.requests.iter().filter(|((v, _), _)| *v == verb).map(|(_, count)| count).sum()
    }

    /// All requests on one resource label, by any verb.
    pub fn total_for_resource(&self, resource: &str) -> u64 {
        self.requests.iter().filter(|((_, r), _)| r == resource).map(|(_, count)| count).sum()
    }

    /// Handled requests of `verb` on `resource` answered with `code`.
    pub fn answered(&self, verb: Verb, resource: &str, code: u16) -> u64 {
        self.answers.get(&(verb, resource.to_string(), code)).copied().unwrap_or(0)
    }

    /// Handled requests answered 409 Conflict, on any resource.
    pub fn conflicts(&self) -> u64 {
        self.answers.iter().filter(|((_, _, code), _)| *code == 409).map(|(_, count)| count).sum()
    }

    /// Request body bytes received for `verb` on `resource`.
    pub fn bytes(&self, verb: Verb, resource: &str) -> u64 {
        self.bytes_received.get(&(verb, resource.to_string())).copied().unwrap_or(0)
    }

    /// All request body bytes received, on any verb and resource.
    pub fn total_body_bytes(&self) -> u64 {
        self.body_bytes.values().sum()
    }

    /// Writes of `verb` on `resource` that changed nothing.
    pub fn no_op(&self, verb: Verb, resource: &str) -> u64 {
        self.no_op_writes.get(&(verb, resource.to_string())).copied().unwrap_or(0)
    }

    /// All injected faults.
    pub fn total_faults(&self) -> u64 {
        self.injected_faults.values().sum()
    }
}

/// Shared, thread-safe counters.
#[derive(Debug, Clone, Default)]
pub(crate) struct Counters {
    inner: Arc<Mutex<CounterSnapshot>>,
}

impl Counters {
    fn with<R>(&self, f: impl FnOnce(&mut CounterSnapshot) -> R) -> R {
        // A panic elsewhere must not take the counters down with it.
        let mut guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut guard)
    }

    pub(crate) fn record_request(&self, verb: Verb, resource: &str) {
        self.with(|c| *c.requests.entry((verb, resource.to_string())).or_default() += 1);
    }

    pub(crate) fn record_body(&self, verb: Verb, resource: &str, bytes: usize) {
        if bytes > 0 {
            let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
            self.with(|c| *c.body_bytes.entry((verb, resource.to_string())).or_default() += bytes);
        }
    }

    pub(crate) fn record_fault(&self, verb: Verb, resource: &str) {
        self.with(|c| *c.injected_faults.entry((verb, resource.to_string())).or_default() += 1);
    }

    pub(crate) fn record_answer(&self, verb: Verb, resource: &str, code: u16, body_bytes: usize) {
        self.with(|c| {
            *c.answers.entry((verb, resource.to_string(), code)).or_default() += 1;
            let bytes = u64::try_from(body_bytes).unwrap_or(u64::MAX);
            let total = c.bytes_received.entry((verb, resource.to_string())).or_default();
            *total = total.saturating_add(bytes);
        });
    }

    pub(crate) fn record_no_op(&self, verb: Verb, resource: &str) {
        self.with(|c| *c.no_op_writes.entry((verb, resource.to_string())).or_default() += 1);
    }

    pub(crate) fn record_response(&self, code: u16) {
        self.with(|c| *c.responses_by_code.entry(code).or_default() += 1);
    }

    pub(crate) fn record_watch_cut(&self) {
        self.with(|c| c.watch_cuts += 1);
    }

    pub(crate) fn record_watch_gone(&self) {
        self.with(|c| c.watch_gones += 1);
    }

    pub(crate) fn snapshot(&self) -> CounterSnapshot {
        self.with(|c| c.clone())
    }

    pub(crate) fn reset(&self) {
        self.with(|c| *c = CounterSnapshot::default());
    }
}
