/// Knobs of the reconcile rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Total provider create attempts before a server is parked
    /// (`provider-create-max-attempts`); values below 1 mean 1.
    pub provider_create_max_attempts: i32,
}

impl Options {
    pub const DEFAULT_MAX_ATTEMPTS: i32 = 3;

    pub fn with_max_attempts(max: i32) -> Self {
        Options { provider_create_max_attempts: max }
    }

    /// The effective cap, never below one attempt.
    pub fn max_attempts(&self) -> i32 {
        self.provider_create_max_attempts.max(1)
    }
}

impl Default for Options {
    fn default() -> Self {
        Options { provider_create_max_attempts: Self::DEFAULT_MAX_ATTEMPTS }
    }
}
