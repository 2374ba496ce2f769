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
    /// The grace of an issued create, in cloud request timeouts. The client's
    /// timeout does not bound how long Nova's API worker keeps processing a
    /// create it gave up on (creates of 40 s were seen behind a 5 s timeout),
    /// and counting one too early sends a second create that can make a
    /// second server once the first lands. So the margin is wide: a create
    /// answered with a timeout or 5xx keeps its Server waiting up to ten
    /// timeouts before it is counted lost (a shorter cloud timeout shortens it).
    pub const GRACE_PER_TIMEOUT: u32 = 10;
    /// [`Options::GRACE_PER_TIMEOUT`] times the default 60 s request timeout.
    pub const DEFAULT_CREATE_GRACE: Duration = Duration::from_secs(600);
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
    fn the_create_grace_is_ten_request_timeouts_and_saturates() {
        assert_eq!(Options::grace_for_timeout(Duration::from_secs(60)), Options::DEFAULT_CREATE_GRACE);
        assert_eq!(Options::grace_for_timeout(Duration::from_secs(5)), Duration::from_secs(50));
        assert_eq!(Options::grace_for_timeout(Duration::MAX), Duration::MAX);
    }

    /// A listed view may be as old as two monitor intervals (one missed
    /// poll), never less than two seconds (list and pass times are whole
    /// seconds), and a huge interval saturates instead of overflowing.
    #[test]
    fn the_listed_view_max_age_is_two_monitor_intervals_and_at_least_two_seconds() {
        let max_age = Options::listed_view_max_age_for_interval;
        assert_eq!(max_age(Duration::from_secs(30)), Options::DEFAULT_LISTED_VIEW_MAX_AGE);
        assert_eq!(max_age(Duration::from_secs(5)), Duration::from_secs(10));
        assert_eq!(max_age(Duration::from_millis(500)), Options::MIN_LISTED_VIEW_MAX_AGE);
        assert_eq!(max_age(Duration::MAX), Duration::MAX);
    }
}
