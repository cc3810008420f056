//! [`Wide`], the 128-bit integer the rate states (`gcra`, `bucket`) are kept in.
//!
//! A leaf, so that the algorithms and the limiter that holds their states both import it.

/// A 128-bit integer kept as two words, so that the limiter keeps 8-byte alignment and stays
/// small (an `i128` field would pad every key's value to 16-byte alignment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Wide([u64; 2]);

impl Wide {
    pub fn get(self) -> i128 {
        (i128::from(self.0[0] as i64) << 64) | i128::from(self.0[1])
    }

    pub fn new(v: i128) -> Wide {
        Wide([(v >> 64) as i64 as u64, v as u64])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_round_trips() {
        for v in [0, 1, -1, i128::MAX, i128::MIN, 1 << 100, -(1 << 90) + 7] {
            assert_eq!(Wide::new(v).get(), v);
        }
    }
}
