use std::time::Duration;

/// Knobs of the reconcile rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Total provider create attempts before a server is parked
    /// (`provider-create-max-attempts`); values below 1 mean 1.
    pub provider_create_max_attempts: i32,
    /// How long after an issued create its provider server's absence is not
    /// yet evidence that the create was lost: the create may still be in
    /// flight (a slow Nova answers after the client gave up). The binary sets
    /// it to [`Options::GRACE_PER_TIMEOUT`] times the cloud request timeout.
    pub create_grace: Duration,
    /// How old a listed provider view may be and still decide a pass that
    /// changes nothing at the provider (see
    /// [`live_read_needed`](super::live_read_needed)). The binary sets it to
    /// [`Options::LISTS_PER_MAX_AGE`] monitor intervals: one missed poll.
    pub listed_view_max_age: Duration,
}

impl Options {
    pub const DEFAULT_MAX_ATTEMPTS: i32 = 3;
    /// The grace of an issued create, in cloud request timeouts: the
    /// create's own request, then as long again for a Nova API worker still
    /// processing it after the client gave up or a gateway answered 5xx
    /// (Nova records the server before it answers 202, so a create that
    /// landed is listed from then on). It was 10: every create answered
    /// with a 5xx then kept its Server waiting 10 minutes at the default
    /// timeout, yielding every interval.
    pub const GRACE_PER_TIMEOUT: u32 = 2;
    /// [`Options::GRACE_PER_TIMEOUT`] times the default 60 s request timeout.
    pub const DEFAULT_CREATE_GRACE: Duration = Duration::from_secs(120);
    /// The oldest listed view that may decide a pass, in monitor intervals.
    pub const LISTS_PER_MAX_AGE: u32 = 2;
    /// The least maximum age: list and pass times are whole seconds.
    pub const MIN_LISTED_VIEW_MAX_AGE: Duration = Duration::from_secs(2);
    /// [`Options::LISTS_PER_MAX_AGE`] times the default 30 s monitor interval.
    pub const DEFAULT_LISTED_VIEW_MAX_AGE: Duration = Duration::from_secs(60);

    pub fn with_max_attempts(max: i32) -> Self {
        Options { provider_create_max_attempts: max, ..Options::default() }
    }

    /// The grace for a cloud request timeout of `timeout`.
    pub fn grace_for_timeout(timeout: Duration) -> Duration {
        timeout.saturating_mul(Self::GRACE_PER_TIMEOUT)
    }

    pub fn with_create_grace(mut self, grace: Duration) -> Self {
        self.create_grace = grace;
        self
    }

    /// The oldest listed view for a monitor polling every `interval`: at
    /// least [`Options::MIN_LISTED_VIEW_MAX_AGE`], since the times compared
    /// are whole seconds.
    pub fn listed_view_max_age_for_interval(interval: Duration) -> Duration {
        interval.saturating_mul(Self::LISTS_PER_MAX_AGE).max(Self::MIN_LISTED_VIEW_MAX_AGE)
    }

    pub fn with_listed_view_max_age(mut self, max_age: Duration) -> Self {
        self.listed_view_max_age = max_age;
        self
    }

    /// The effective cap, never below one attempt.
    pub fn max_attempts(&self) -> i32 {
        self.provider_create_max_attempts.max(1)
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            provider_create_max_attempts: Self::DEFAULT_MAX_ATTEMPTS,
            create_grace: Self::DEFAULT_CREATE_GRACE,
            listed_view_max_age: Self::DEFAULT_LISTED_VIEW_MAX_AGE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An issued create's grace is a fixed number of request timeouts (the
    /// default timeout gives the default grace), and a huge timeout
    /// saturates instead of overflowing.
    #[test]
    fn the_create_grace_is_two_request_timeouts_and_saturates() {
        assert_eq!(Options::grace_for_timeout(Duration::from_secs(60)), Options::DEFAULT_CREATE_GRACE);
        assert_eq!(Options::grace_for_timeout(Duration::from_secs(5)), Duration::from_secs(10));
        assert_eq!(Options::grace_for_timeout(Duration::MAX), Duration::MAX);
    }
}
