//! Fates: how the provider servers of one Server behave. A fate is fixed per
//! Server uid, drawn from the seed and the uid alone (so it does not depend on
//! the order calls arrive in), or scripted by a test.

use std::time::Duration;

use super::rng::{SplitMix64, fnv1a, mix};

/// What the cloud does with one Server's provider servers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fate {
    /// The first this-many create calls are refused outright (quota).
    pub refused_creates: u32,
    /// The first this-many accepted creates go BUILD -> ERROR before launch;
    /// [`Fate::FOREVER`] means every one does.
    pub failed_boots: u32,
    /// A server that launched goes ERROR this long after launch. It booted and
    /// may hold data: it must never be deleted to retry, nor recreated.
    pub error_after_launch: Option<Duration>,
    /// A server that launched vanishes this long after launch (deleted behind
    /// the operator's back).
    pub vanish_after_launch: Option<Duration>,
    /// BUILD -> ACTIVE (launched-at is set then).
    pub build_time: Duration,
    /// BUILD -> ERROR for a failing boot.
    pub fail_time: Duration,
    /// A delete is accepted at once and the server is gone this much later,
    /// so deletes take several polls when it is long.
    pub delete_time: Duration,
    /// The first this-many reads (get, or list) that concern this server fail.
    pub failed_reads: u32,
    /// The first this-many accepted rebuilds end in ERROR.
    pub failed_rebuilds: u32,
    /// REBUILD (a task under way) -> ACTIVE, or ERROR for a failing one.
    pub rebuild_time: Duration,
    /// A rebuild that succeeded goes ERROR this long after it settled.
    pub error_after_rebuild: Option<Duration>,
}

impl Fate {
    /// `failed_boots` value meaning "every boot fails".
    pub const FOREVER: u32 = u32::MAX;

    /// BUILD -> ACTIVE after `build_time`, then fine for ever.
    pub fn clean() -> Self {
        Fate {
            refused_creates: 0,
            failed_boots: 0,
            error_after_launch: None,
            vanish_after_launch: None,
            build_time: Duration::from_secs(30),
            fail_time: Duration::from_secs(20),
            delete_time: Duration::ZERO,
            failed_reads: 0,
            failed_rebuilds: 0,
            rebuild_time: Duration::from_secs(20),
            error_after_rebuild: None,
        }
    }

    /// The first `n` accepted rebuilds end in ERROR.
    pub fn with_failed_rebuilds(mut self, n: u32) -> Self {
        self.failed_rebuilds = n;
        self
    }

    pub fn with_rebuild_time(mut self, time: Duration) -> Self {
        self.rebuild_time = time;
        self
    }

    /// A rebuild that succeeded goes ERROR `after` it settled.
    pub fn with_error_after_rebuild(mut self, after: Duration) -> Self {
        self.error_after_rebuild = Some(after);
        self
    }

    /// The first `k` accepted creates fail before launch, then boots are clean.
    pub fn failing_boots(k: u32) -> Self {
        Fate { failed_boots: k, ..Fate::clean() }
    }

    /// Every accepted create fails before launch.
    pub fn failing_forever() -> Self {
        Fate::failing_boots(Fate::FOREVER)
    }

    /// Boots, then goes ERROR `after` launch (a data-bearing server).
    pub fn error_after_launch(after: Duration) -> Self {
        Fate { error_after_launch: Some(after), ..Fate::clean() }
    }

    /// Boots, then vanishes `after` launch.
    pub fn vanish_after_launch(after: Duration) -> Self {
        Fate { vanish_after_launch: Some(after), ..Fate::clean() }
    }

    /// The first `n` creates are refused (quota).
    pub fn refused(n: u32) -> Self {
        Fate { refused_creates: n, ..Fate::clean() }
    }

    pub fn with_build_time(mut self, time: Duration) -> Self {
        self.build_time = time;
        self
    }

    pub fn with_fail_time(mut self, time: Duration) -> Self {
        self.fail_time = time;
        self
    }

    pub fn with_delete_time(mut self, time: Duration) -> Self {
        self.delete_time = time;
        self
    }

    pub fn with_failed_reads(mut self, n: u32) -> Self {
        self.failed_reads = n;
        self
    }

    /// Whether the `attempt`-th accepted create (1-based) fails before launch.
    pub fn boot_fails(&self, attempt: u32) -> bool {
        attempt <= self.failed_boots
    }

    /// A short label for reports ("clean", "failing-boots", ...).
    pub fn kind(&self) -> FateKind {
        if self.refused_creates > 0 {
            FateKind::Refused
        } else if self.failed_boots == Fate::FOREVER {
            FateKind::FailingForever
        } else if self.failed_boots > 0 {
            FateKind::FailingBoots
        } else if self.error_after_launch.is_some() {
            FateKind::ErrorAfterLaunch
        } else if self.vanish_after_launch.is_some() {
            FateKind::VanishAfterLaunch
        } else {
            FateKind::Clean
        }
    }
}

impl Default for Fate {
    fn default() -> Self {
        Fate::clean()
    }
}

/// The headline of a fate, for counting outcomes by fate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FateKind {
    Clean,
    FailingBoots,
    FailingForever,
    ErrorAfterLaunch,
    VanishAfterLaunch,
    Refused,
}

impl FateKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FateKind::Clean => "clean",
            FateKind::FailingBoots => "failing-boots",
            FateKind::FailingForever => "failing-forever",
            FateKind::ErrorAfterLaunch => "error-after-launch",
            FateKind::VanishAfterLaunch => "vanish-after-launch",
            FateKind::Refused => "refused",
        }
    }
}

/// An inclusive range of durations a fate draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub low: Duration,
    pub high: Duration,
}

impl Span {
    pub const fn secs(low: u64, high: u64) -> Self {
        Span { low: Duration::from_secs(low), high: Duration::from_secs(high) }
    }

    pub const fn millis(low: u64, high: u64) -> Self {
        Span { low: Duration::from_millis(low), high: Duration::from_millis(high) }
    }

    fn draw(&self, rng: &mut SplitMix64) -> Duration {
        let (low, high) = (duration_ms(self.low), duration_ms(self.high));
        Duration::from_millis(rng.between(low, high))
    }
}

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// How long things take in the cloud.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub build: Span,
    pub fail: Span,
    /// After launch, until a data-bearing ERROR or a vanish.
    pub after_launch: Span,
    pub delete: Span,
    /// Deletes of servers with a slow-delete fate.
    pub slow_delete: Span,
}

impl Timing {
    /// Cloud-like times, for the simulator's virtual clock.
    pub const REALISTIC: Timing = Timing {
        build: Span::secs(20, 60),
        fail: Span::secs(10, 40),
        after_launch: Span::secs(60, 300),
        delete: Span::secs(0, 5),
        slow_delete: Span::secs(15, 60),
    };

    /// Seconds rather than minutes, for demos and tests on a real clock.
    pub const FAST: Timing = Timing {
        build: Span::millis(500, 2_000),
        fail: Span::millis(300, 1_500),
        after_launch: Span::secs(5, 15),
        delete: Span::millis(0, 200),
        slow_delete: Span::millis(1_000, 3_000),
    };
}

impl Default for Timing {
    fn default() -> Self {
        Timing::REALISTIC
    }
}

/// The share of Servers given each faulty fate; the rest are clean. Shares are
/// exclusive (a server has one headline fate); slow deletes come on top.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FateMix {
    pub refused: f64,
    pub failing_boots: f64,
    /// k for failing boots is drawn uniformly from `1..=max_failing_boots`.
    pub max_failing_boots: u32,
    pub failing_forever: f64,
    pub error_after_launch: f64,
    pub vanish_after_launch: f64,
    pub slow_delete: f64,
    /// Rebuilds (of any fate) that end in ERROR, and that go ERROR after
    /// they succeeded: drawn on top of the headline fate.
    pub failing_rebuild: f64,
    pub error_after_rebuild: f64,
    pub timing: Timing,
}

impl FateMix {
    /// The default fault rate: three servers in ten get a faulty fate.
    pub const DEFAULT_FAULT_RATE: f64 = 0.3;

    /// Every server clean.
    pub fn clean() -> Self {
        FateMix::with_fault_rate(0.0)
    }

    /// `rate` of the servers (0..=1) get a faulty fate, spread over the kinds
    /// in fixed proportions.
    pub fn with_fault_rate(rate: f64) -> Self {
        let rate = if rate.is_finite() { rate.clamp(0.0, 1.0) } else { 0.0 };
        FateMix {
            failing_boots: rate * 0.35,
            max_failing_boots: 3,
            failing_forever: rate * 0.10,
            error_after_launch: rate * 0.20,
            vanish_after_launch: rate * 0.15,
            refused: rate * 0.20,
            slow_delete: rate,
            failing_rebuild: rate * 0.3,
            error_after_rebuild: rate * 0.1,
            timing: Timing::REALISTIC,
        }
    }

    pub fn with_timing(mut self, timing: Timing) -> Self {
        self.timing = timing;
        self
    }

    /// The fate of the Server with this uid under this seed. Pure: the same
    /// (seed, uid) always gets the same fate.
    pub fn draw(&self, seed: u64, uid: &str) -> Fate {
        let mut rng = SplitMix64::new(mix(seed) ^ fnv1a(uid.as_bytes()));
        let t = &self.timing;
        let mut fate = Fate {
            build_time: t.build.draw(&mut rng),
            fail_time: t.fail.draw(&mut rng),
            delete_time: t.delete.draw(&mut rng),
            ..Fate::clean()
        };
        let after_launch = t.after_launch.draw(&mut rng);
        let k = rng.between(1, u64::from(self.max_failing_boots.max(1)));
        let slow = rng.next_f64() < self.slow_delete;
        let slow_delete = t.slow_delete.draw(&mut rng);
        let mut pick = rng.next_f64();
        let mut take = |share: f64| {
            let hit = pick < share;
            pick -= share;
            hit
        };
        if take(self.refused) {
            fate.refused_creates = 1;
        } else if take(self.failing_boots) {
            fate.failed_boots = u32::try_from(k).unwrap_or(1);
        } else if take(self.failing_forever) {
            fate.failed_boots = Fate::FOREVER;
        } else if take(self.error_after_launch) {
            fate.error_after_launch = Some(after_launch);
        } else if take(self.vanish_after_launch) {
            fate.vanish_after_launch = Some(after_launch);
        }
        if slow {
            fate.delete_time = slow_delete;
        }
        // Drawn after the rest, so the draws above stay what they were.
        fate.rebuild_time = t.build.draw(&mut rng);
        let rebuild = rng.next_f64();
        if rebuild < self.failing_rebuild {
            fate.failed_rebuilds = 1;
        } else if rebuild < self.failing_rebuild + self.error_after_rebuild {
            fate.error_after_rebuild = Some(after_launch);
        }
        fate
    }
}

impl Default for FateMix {
    fn default() -> Self {
        FateMix::with_fault_rate(FateMix::DEFAULT_FAULT_RATE)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn draws_are_pure_in_seed_and_uid() {
        let mix = FateMix::default();
        assert_eq!(mix.draw(1, "uid-1"), mix.draw(1, "uid-1"));
        let differs = (0..50).any(|i| mix.draw(1, &format!("u{i}")) != mix.draw(2, &format!("u{i}")));
        assert!(differs);
    }

    #[test]
    fn clean_mix_draws_only_clean_fates() {
        let mix = FateMix::clean();
        for i in 0..200 {
            let fate = mix.draw(9, &format!("u{i}"));
            assert_eq!(fate.kind(), FateKind::Clean);
            assert!(fate.delete_time <= Timing::REALISTIC.delete.high);
        }
    }

    #[test]
    fn default_mix_has_every_kind_in_roughly_its_share() {
        let mix = FateMix::default();
        let mut counts = BTreeMap::new();
        for i in 0..10_000 {
            *counts.entry(mix.draw(3, &format!("uid-{i}")).kind()).or_insert(0u32) += 1;
        }
        let clean = counts.get(&FateKind::Clean).copied().unwrap_or(0);
        assert!((6_700..7_300).contains(&clean), "{counts:?}");
        for kind in [
            FateKind::FailingBoots,
            FateKind::FailingForever,
            FateKind::ErrorAfterLaunch,
            FateKind::VanishAfterLaunch,
            FateKind::Refused,
        ] {
            assert!(counts.get(&kind).copied().unwrap_or(0) > 100, "{kind:?}: {counts:?}");
        }
    }

    #[test]
    fn boot_failures_count_attempts() {
        let fate = Fate::failing_boots(2);
        assert!(fate.boot_fails(1) && fate.boot_fails(2) && !fate.boot_fails(3));
        assert!(Fate::failing_forever().boot_fails(1_000));
        assert!(!Fate::clean().boot_fails(1));
    }
}
