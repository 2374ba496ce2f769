//! The trace hash: FNV-1a over what happened at each step (event, decision,
//! action results), so two runs agree iff they did the same things in the
//! same order. With a replay check, the first run's per-step hashes are kept
//! and the second run compares against them step by step (invariant 9).

use server_simcloud::rng::Fnv1a;

#[derive(Debug, Default)]
pub(crate) struct Trace {
    hash: Fnv1a,
    /// Per-step running hash of the first run, when recording.
    recorded: Option<Vec<u64>>,
    /// Per-step running hash to compare against, when replaying.
    expected: Option<Vec<u64>>,
    /// First step whose hash differed from the recorded run.
    pub(crate) divergence: Option<u64>,
}

impl Trace {
    pub(crate) fn recording() -> Self {
        Trace { recorded: Some(Vec::new()), ..Trace::default() }
    }

    pub(crate) fn replaying(expected: Vec<u64>) -> Self {
        Trace { expected: Some(expected), ..Trace::default() }
    }

    pub(crate) fn add(&mut self, value: u64) {
        self.hash.write_u64(value);
    }

    /// Closes step `step` (0-based).
    pub(crate) fn end_step(&mut self, step: u64) {
        let hash = self.hash.finish();
        if let Some(recorded) = &mut self.recorded {
            recorded.push(hash);
        }
        if self.divergence.is_none()
            && let Some(expected) = &self.expected
        {
            let index = usize::try_from(step).unwrap_or(usize::MAX);
            if expected.get(index) != Some(&hash) {
                self.divergence = Some(step);
            }
        }
    }

    pub(crate) fn finish(&self) -> u64 {
        self.hash.finish()
    }

    pub(crate) fn take_recorded(&mut self) -> Vec<u64> {
        self.recorded.take().unwrap_or_default()
    }

    /// Steps recorded by the run being replayed.
    pub(crate) fn expected_steps(&self) -> Option<usize> {
        self.expected.as_ref().map(Vec::len)
    }
}
