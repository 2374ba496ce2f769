//! Seeded fault injection, switchable at run time.
//!
//! Random faults are drawn from one seeded PRNG in request order, so a
//! sequential client sees the same faults for the same seed. Scripted faults
//! ([`Faults::fail_next`]) fire deterministically regardless of the rates.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::status::{ApiError, Subject};
use super::verb::Verb;

/// The error an injected fault answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// 409 Conflict (a lost optimistic-concurrency race).
    Conflict,
    /// 429 TooManyRequests, with `Retry-After: 1`.
    TooManyRequests,
    /// 500 InternalError.
    Internal,
    /// 410 Gone: on a watch, an ERROR event carrying a 410 `Status` (the
    /// client must relist); on other verbs, a 410 `Expired` response.
    Gone,
}

impl FaultKind {
    pub(crate) fn to_error(self, subject: Subject<'_>) -> ApiError {
        match self {
            Self::Conflict => ApiError::conflict(subject),
            Self::TooManyRequests => ApiError::too_many_requests(subject),
            Self::Internal => ApiError::internal("injected fault"),
            Self::Gone => ApiError::gone("too old resource version (injected fault)"),
        }
    }
}

/// Per-verb error probabilities, each in `[0, 1]`; their sum should not exceed 1.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ErrorRates {
    /// Probability of a 409 Conflict.
    pub conflict: f64,
    /// Probability of a 429 TooManyRequests.
    pub too_many_requests: f64,
    /// Probability of a 500 InternalError.
    pub internal: f64,
}

impl ErrorRates {
    fn pick(&self, draw: f64) -> Option<FaultKind> {
        let mut threshold = self.conflict;
        if draw < threshold {
            return Some(FaultKind::Conflict);
        }
        threshold += self.too_many_requests;
        if draw < threshold {
            return Some(FaultKind::TooManyRequests);
        }
        threshold += self.internal;
        (draw < threshold).then_some(FaultKind::Internal)
    }

    fn is_zero(&self) -> bool {
        self.conflict <= 0.0 && self.too_many_requests <= 0.0 && self.internal <= 0.0
    }
}

/// What faults to inject. The default injects none.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultConfig {
    /// Error probabilities per verb.
    pub error_rates: BTreeMap<Verb, ErrorRates>,
    /// Latency added to every request (before it is handled).
    pub latency: Duration,
    /// Up to this much more latency, uniformly drawn per request.
    pub latency_jitter: Duration,
    /// End every watch stream after this many object events.
    pub watch_cut_after: Option<u32>,
    /// After each object event, end the watch stream with this probability.
    pub watch_cut_probability: f64,
    /// Restrict faults to these resource labels (`servers`, `servers/status`);
    /// a plural also covers its `/status`. `None` = every resource.
    pub resources: Option<BTreeSet<String>>,
    /// Watches of these resources (plurals) send no change while held; the
    /// changes go out, in order, once released. kube-apiserver's watch
    /// cache delivers events behind etcd under load (what KEP-2340's
    /// consistent reads from cache wait out): a client's cache then lacks
    /// writes the API server has already answered.
    pub watches_held: BTreeSet<String>,
}

impl FaultConfig {
    /// No faults.
    pub fn none() -> Self {
        Self::default()
    }

    /// Sets the probability of `kind` for `verb` (`Gone` is scripted only: use [`Faults::fail_next`]).
    #[must_use]
    pub fn with_error_rate(mut self, verb: Verb, kind: FaultKind, rate: f64) -> Self {
        let rates = self.error_rates.entry(verb).or_default();
        match kind {
            FaultKind::Conflict => rates.conflict = rate,
            FaultKind::TooManyRequests => rates.too_many_requests = rate,
            FaultKind::Internal => rates.internal = rate,
            FaultKind::Gone => {}
        }
        self
    }

    /// Sets the same error rates for every verb.
    #[must_use]
    pub fn with_rates_for_all_verbs(mut self, rates: ErrorRates) -> Self {
        for verb in Verb::ALL {
            self.error_rates.insert(verb, rates);
        }
        self
    }

    /// Adds fixed latency plus uniform jitter to every request.
    #[must_use]
    pub fn with_latency(mut self, latency: Duration, jitter: Duration) -> Self {
        self.latency = latency;
        self.latency_jitter = jitter;
        self
    }

    /// Ends every watch stream after `events` object events.
    #[must_use]
    pub fn with_watch_cut_after(mut self, events: u32) -> Self {
        self.watch_cut_after = Some(events);
        self
    }

    /// Ends a watch stream after each object event with probability `probability`.
    #[must_use]
    pub fn with_watch_cut_probability(mut self, probability: f64) -> Self {
        self.watch_cut_probability = probability;
        self
    }

    /// Holds the watches of `resource` (see [`FaultConfig::watches_held`]).
    #[must_use]
    pub fn with_watch_held(mut self, resource: &str) -> Self {
        self.watches_held.insert(resource.to_owned());
        self
    }

    /// Restricts faults to the given resource labels.
    #[must_use]
    pub fn only_resources<I, S>(mut self, resources: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.resources = Some(resources.into_iter().map(Into::into).collect());
        self
    }

    fn covers(&self, resource: &str) -> bool {
        self.resources.as_ref().is_none_or(|set| {
            set.contains(resource) || resource.split_once('/').is_some_and(|(plural, _)| set.contains(plural))
        })
    }
}

/// A fault queued to fire on the next matching requests.
#[derive(Debug, Clone)]
struct ScriptedFault {
    verb: Verb,
    resource: Option<String>,
    kind: FaultKind,
    remaining: u32,
}

#[derive(Debug)]
struct FaultState {
    config: FaultConfig,
    rng: fastrand::Rng,
    scripted: Vec<ScriptedFault>,
}

/// What to do to one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RequestFault {
    pub(crate) latency: Duration,
    pub(crate) error: Option<FaultKind>,
}

/// How one watch stream is to be cut.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct WatchCutPlan {
    pub(crate) after_events: Option<u32>,
    pub(crate) probability: f64,
}

/// Handle to switch faults at run time; clones share state.
#[derive(Debug, Clone)]
pub struct Faults {
    inner: Arc<Mutex<FaultState>>,
}

impl Faults {
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            inner: Arc::new(Mutex::new(FaultState {
                config: FaultConfig::none(),
                rng: fastrand::Rng::with_seed(seed),
                scripted: Vec::new(),
            })),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut FaultState) -> R) -> R {
        let mut guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut guard)
    }

    /// Replaces the fault configuration.
    pub fn set(&self, config: FaultConfig) {
        self.with(|s| s.config = config);
    }

    /// Edits the fault configuration in place.
    pub fn update(&self, edit: impl FnOnce(&mut FaultConfig)) {
        self.with(|s| edit(&mut s.config));
    }

    /// The current configuration.
    pub fn config(&self) -> FaultConfig {
        self.with(|s| s.config.clone())
    }

    /// Turns every fault off, scripted ones included.
    pub fn clear(&self) {
        self.with(|s| {
            s.config = FaultConfig::none();
            s.scripted.clear();
        });
    }

    /// Restarts the PRNG from `seed`.
    pub fn reseed(&self, seed: u64) {
        self.with(|s| s.rng = fastrand::Rng::with_seed(seed));
    }

    /// Whether watches of `resource` are held (see [`FaultConfig::watches_held`]).
    pub(crate) fn watch_held(&self, resource: &str) -> bool {
        self.with(|s| s.config.watches_held.contains(resource))
    }

    /// Fails the next `times` requests of `verb` on `resource` (any resource
    /// when `None`; a plural also matches its `/status`) with `kind`,
    /// regardless of the configured rates and resource restriction.
    pub fn fail_next(&self, verb: Verb, resource: Option<&str>, kind: FaultKind, times: u32) {
        self.with(|s| {
            s.scripted.push(ScriptedFault { verb, resource: resource.map(str::to_string), kind, remaining: times });
        });
    }

    /// Decides the fault for one request: scripted faults first, then rates.
    pub(crate) fn for_request(&self, verb: Verb, resource: &str) -> RequestFault {
        self.with(|s| {
            let mut fault = RequestFault::default();
            if let Some(scripted) = s.scripted.iter_mut().find(|f| {
                f.remaining > 0
                    && f.verb == verb
                    && f.resource
                        .as_deref()
                        .is_none_or(|r| r == resource || resource.split_once('/').is_some_and(|(p, _)| p == r))
            }) {
                scripted.remaining -= 1;
                fault.error = Some(scripted.kind);
            }
            s.scripted.retain(|f| f.remaining > 0);

            if !s.config.covers(resource) {
                return fault;
            }
            fault.latency = s.config.latency;
            if !s.config.latency_jitter.is_zero() {
                fault.latency += s.config.latency_jitter.mul_f64(s.rng.f64());
            }
            if fault.error.is_none()
                && let Some(rates) = s.config.error_rates.get(&verb).copied()
                && !rates.is_zero()
            {
                fault.error = rates.pick(s.rng.f64());
            }
            fault
        })
    }

    /// The cut plan for a new watch stream on `resource`.
    pub(crate) fn watch_plan(&self, resource: &str) -> WatchCutPlan {
        self.with(|s| {
            if !s.config.covers(resource) {
                return WatchCutPlan::default();
            }
            WatchCutPlan { after_events: s.config.watch_cut_after, probability: s.config.watch_cut_probability }
        })
    }

    /// One draw for a probabilistic watch cut.
    pub(crate) fn draw_cut(&self, probability: f64) -> bool {
        probability > 0.0 && self.with(|s| s.rng.f64() < probability)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_faults() {
        let config = FaultConfig::none().with_rates_for_all_verbs(ErrorRates {
            conflict: 0.2,
            too_many_requests: 0.2,
            internal: 0.2,
        });
        let draw = |seed| {
            let faults = Faults::new(seed);
            faults.set(config.clone());
            (0..200).map(|_| faults.for_request(Verb::Patch, "servers").error).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        let kinds: BTreeSet<_> = draw(7).into_iter().flatten().collect();
        assert_eq!(kinds.len(), 3, "all three kinds drawn: {kinds:?}");
    }

    #[test]
    fn scripted_faults_fire_exactly_n_times_on_matching_requests() {
        let faults = Faults::new(1);
        faults.fail_next(Verb::Patch, Some("servers"), FaultKind::Conflict, 2);
        assert_eq!(faults.for_request(Verb::Get, "servers").error, None);
        assert_eq!(faults.for_request(Verb::Patch, "networks").error, None);
        assert_eq!(faults.for_request(Verb::Patch, "servers/status").error, Some(FaultKind::Conflict));
        assert_eq!(faults.for_request(Verb::Patch, "servers").error, Some(FaultKind::Conflict));
        assert_eq!(faults.for_request(Verb::Patch, "servers").error, None);
    }

    #[test]
    fn resource_restriction_applies_to_rates() {
        let faults = Faults::new(1);
        faults
            .set(FaultConfig::none().with_error_rate(Verb::Get, FaultKind::Internal, 1.0).only_resources(["servers"]));
        assert_eq!(faults.for_request(Verb::Get, "networks").error, None);
        assert_eq!(faults.for_request(Verb::Get, "servers/status").error, Some(FaultKind::Internal));
    }
}
