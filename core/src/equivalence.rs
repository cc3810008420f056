// Compiled only under #[cfg(test)] (see lib.rs), so this test code may unwrap.
//! Property tests: `gcra` and `bucket` take the same decision as a textbook model for any
//! sequence of requests.
//!
//! The model is ITU-T's virtual-scheduling GCRA, written independently of `rate`: the
//! theoretical arrival time advances by `cost * T` (T = period / limit) and a request conforms
//! when it arrives no earlier than `TAT + cost*T - burst*T`. Times are scaled by `limit` so T is
//! an exact integer.

use proptest::prelude::*;

use super::limiter::Limiter;
use super::rule::{Algo, Rule};

struct Model {
    limit: i128,
    period: i128,
    burst: i128,
    tat: i128, // µs × limit
}

impl Model {
    /// Returns (allowed, retry_after_ms).
    fn request(&mut self, now_us: u64, cost: u64, dry: bool) -> (bool, u64) {
        let now = i128::from(now_us) * self.limit;
        let tat = self.tat.max(now);
        let earliest = tat + i128::from(cost) * self.period - self.burst * self.period;
        if earliest > now {
            // Wait (earliest - now) / limit µs, rounded up to µs then to ms.
            let us = (earliest - now + self.limit - 1) / self.limit;
            return (false, ((us + 999) / 1000) as u64);
        }
        if !dry {
            self.tat = tat + i128::from(cost) * self.period;
        }
        (true, 0)
    }
}

fn rules() -> impl Strategy<Value = (u64, u64, u64)> {
    (
        1u64..50,
        prop_oneof![Just(1_000u64), 1_000u64..120_000_000],
        1u64..60,
    )
        .prop_filter("valid rule", |&(limit, period, burst)| {
            Rule::new(Algo::Gcra, limit, period, Some(burst)).is_ok()
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn gcra_bucket_and_model_agree(
        (limit, period, burst) in rules(),
        steps in prop::collection::vec((0u64..3_000_000, 1u64..60, any::<bool>()), 1..200),
    ) {
        let rule = Rule::new(Algo::Gcra, limit, period, Some(burst)).unwrap();
        let mut gcra = Limiter::new(Algo::Gcra, rule);
        let mut bucket = Limiter::new(Algo::Bucket, rule);
        let mut model = Model {
            limit: i128::from(limit),
            period: i128::from(period),
            burst: i128::from(burst),
            tat: 0,
        };
        let mut now = 1_764_000_000_000_000u64;
        for (dt, cost, dry) in steps {
            now += dt;
            let cost = cost.min(burst);
            let g = gcra.admit(Algo::Gcra, rule, cost, now, dry).unwrap();
            let b = bucket.admit(Algo::Bucket, rule, cost, now, dry).unwrap();
            let (allowed, retry) = model.request(now, cost, dry);
            prop_assert_eq!(g, b);
            prop_assert_eq!(g.allowed, allowed);
            prop_assert_eq!(g.retry_after_ms(), retry);
            prop_assert_eq!(gcra.full_at_us(), bucket.full_at_us());
        }
    }

    /// Waiting exactly `retry_after_ms` is always enough when nothing else spends.
    #[test]
    fn retry_after_is_sufficient(
        (limit, period, burst) in rules(),
        spend in 1u64..60,
        cost in 1u64..60,
    ) {
        let rule = Rule::new(Algo::Gcra, limit, period, Some(burst)).unwrap();
        let (spend, cost) = (spend.min(burst), cost.min(burst));
        let mut l = Limiter::new(Algo::Gcra, rule);
        let now = 1_764_000_000_123_457u64;
        l.admit(Algo::Gcra, rule, spend, now, false).unwrap();
        let d = l.admit(Algo::Gcra, rule, cost, now, false).unwrap();
        if !d.allowed {
            let later = now + d.retry_after_ms() * 1000;
            prop_assert!(l.admit(Algo::Gcra, rule, cost, later, false).unwrap().allowed);
        }
    }
}
