//! The engine's randomness, injected: a SplitMix64 sequence from a seed the driver chooses
//! (from the operating system in production, fixed in tests), shared lock-free by every
//! request. Used for jitter, the ramp's draw, log sampling, holder and reservation ids; none of
//! these needs to be unpredictable, only spread.

use std::sync::atomic::{AtomicU64, Ordering};

pub struct Rng {
    state: AtomicU64,
}

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng {
            state: AtomicU64::new(seed),
        }
    }

    pub fn u64(&self) -> u64 {
        let mut z = self
            .state
            .fetch_add(GOLDEN, Ordering::Relaxed)
            .wrapping_add(GOLDEN);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn f64(&self) -> f64 {
        // The top 53 bits fill a double's mantissa exactly.
        (self.u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_in_range_and_spread() {
        let rng = Rng::new(7);
        let draws: Vec<f64> = (0..10_000).map(|_| rng.f64()).collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
        let below_half = draws.iter().filter(|d| **d < 0.5).count();
        assert!((4_500..5_500).contains(&below_half), "{below_half}");
        assert_ne!(Rng::new(1).u64(), Rng::new(2).u64());
        assert_eq!(Rng::new(3).u64(), Rng::new(3).u64());
    }
}
