//! A tiny deterministic PRNG (SplitMix64) and a stable string hash (FNV-1a).
//!
//! Everything random in the simulated cloud and the simulator comes from here,
//! seeded explicitly: the same seed replays the same run, bit for bit, on any
//! machine. No thread RNG, no OS entropy.

/// SplitMix64: small, fast, statistically fine for fault injection, and its
/// output sequence is fixed by the algorithm (no crate version can change it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// An independent stream for a named purpose, so adding draws to one
    /// stream never shifts another (fates stay put when fault rates change).
    pub fn stream(seed: u64, purpose: &str) -> Self {
        SplitMix64::new(mix(seed ^ fnv1a(purpose.as_bytes())))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.state)
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        // 53 random bits: exactly representable, never 1.0.
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p` (clamped to `[0, 1]`).
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.next_f64() < p
    }

    /// Uniform in `[low, high]` (inclusive); `low` when the range is empty.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        if high <= low {
            return low;
        }
        let span = high - low + 1;
        // Modulo bias is negligible for the spans used here (< 2^32).
        low + self.next_u64() % span
    }
}

/// The SplitMix64 finaliser: a bijective avalanche of 64 bits.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a over bytes: stable across runs, platforms and Rust versions
/// (unlike `DefaultHasher`).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash = Fnv1a::new();
    hash.write(bytes);
    hash.finish()
}

/// Incremental FNV-1a, used for trace hashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fnv1a(u64);

impl Fnv1a {
    pub fn new() -> Self {
        Fnv1a(FNV_OFFSET)
    }

    pub fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(FNV_PRIME);
        }
    }

    pub fn write_u64(&mut self, value: u64) {
        self.write(&value.to_le_bytes());
    }

    pub fn finish(&self) -> u64 {
        self.0
    }
}

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a::new()
    }
}

/// As a `Hasher`, FNV-1a gives hash maps keyed by short strings fixed,
/// seed-free hashing (no OS entropy anywhere in a simulated run).
impl std::hash::Hasher for Fnv1a {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        Fnv1a::write(self, bytes);
    }
}

/// `HashMap` builder using [`Fnv1a`].
pub type FnvBuild = std::hash::BuildHasherDefault<Fnv1a>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(SplitMix64::new(8).next_u64(), xs[0]);
    }

    #[test]
    fn known_splitmix_output() {
        // Reference value of SplitMix64 seeded with 0 (first output).
        assert_eq!(SplitMix64::new(0).next_u64(), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn floats_and_ranges_stay_in_bounds() {
        let mut rng = SplitMix64::new(1);
        for _ in 0..10_000 {
            let f = rng.next_f64();
            assert!((0.0..1.0).contains(&f));
            let n = rng.between(3, 5);
            assert!((3..=5).contains(&n));
        }
        assert_eq!(rng.between(9, 2), 9);
        assert!(!rng.chance(0.0));
    }

    #[test]
    fn fnv_is_stable() {
        assert_eq!(fnv1a(b""), FNV_OFFSET);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
