//! Every state a command can create encodes and loads back.
//!
//! Random sequences of every write (admissions of each algorithm and their conversions,
//! reservations and settlements, grants, acquires, releases, renewals and replayed lease
//! changes) with rules at their bounds, under a clock that jumps ahead and steps back. After
//! each step the state must decode to itself, both as this server's own (no clock) and as a
//! state from elsewhere checked against a clock that stepped back less than the tolerated skew.

use proptest::prelude::*;

use super::codec::{decode, encode};
use crate::core::ask::Ask;
use crate::core::limiter::Limiter;
use crate::core::reservations::MAX_KEEP_US;
use crate::core::rule::{
    Algo, Rule, MAX_CLOCK_SKEW_US, MAX_COUNT, MAX_LOG_LIMIT, MAX_PERIOD_US, MAX_SEMAPHORE_CAPACITY,
};

const T0: u64 = 1_764_000_000_000_000;

/// Rules at the edges of what `Rule::new` accepts for `algo`.
fn rules(algo: Algo) -> Vec<Rule> {
    let top = match algo {
        Algo::Log => MAX_LOG_LIMIT,
        Algo::Semaphore => MAX_SEMAPHORE_CAPACITY,
        _ => MAX_COUNT,
    };
    let mut out = Vec::new();
    for limit in [1, 2, 3, top] {
        for period in [1_000, 1_000_000, MAX_PERIOD_US] {
            let bursts: Vec<Option<u64>> = match algo {
                Algo::Gcra | Algo::Bucket => {
                    // The largest burst the refill bound allows, and one.
                    let most = u128::from(MAX_PERIOD_US) * u128::from(limit) / u128::from(period);
                    let most = u64::try_from(most).unwrap_or(MAX_COUNT).min(MAX_COUNT);
                    vec![Some(1), Some(most)]
                }
                _ => vec![None],
            };
            for burst in bursts {
                if let Ok(r) = Rule::new(algo, limit, period, burst) {
                    out.push(r);
                }
            }
        }
    }
    out
}

#[derive(Debug, Clone)]
enum Op {
    /// The clock moves by this many µs (negative: it steps back).
    Clock(i64),
    Admit {
        rule: usize,
        algo: usize,
        cost: u8,
        dry: bool,
    },
    Reserve {
        rule: usize,
        id: u8,
        cost: u8,
        keep_max: bool,
    },
    Settle {
        id: u8,
        actual: u8,
        forget: bool,
    },
    Grant {
        rule: usize,
        want: u8,
    },
    Acquire {
        rule: usize,
        holder: Option<u8>,
    },
    Release {
        holder: u8,
    },
    Renew {
        holder: u8,
        longest: bool,
    },
    LeaseSet {
        rule: usize,
        holder: u8,
        expiry_max: bool,
        remove: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let hour = 3_600_000_000i64;
    prop_oneof![
        prop_oneof![-hour / 4..hour, Just(MAX_PERIOD_US as i64), 0..2_000_000i64]
            .prop_map(Op::Clock),
        (0usize..64, 0usize..2, any::<u8>(), any::<bool>()).prop_map(|(rule, algo, cost, dry)| {
            Op::Admit {
                rule,
                algo,
                cost,
                dry,
            }
        }),
        (0usize..64, 0u8..4, any::<u8>(), any::<bool>()).prop_map(|(rule, id, cost, keep_max)| {
            Op::Reserve {
                rule,
                id,
                cost,
                keep_max,
            }
        }),
        (0u8..4, any::<u8>(), any::<bool>()).prop_map(|(id, actual, forget)| Op::Settle {
            id,
            actual,
            forget
        }),
        (0usize..64, any::<u8>()).prop_map(|(rule, want)| Op::Grant { rule, want }),
        (0usize..64, proptest::option::of(0u8..6))
            .prop_map(|(rule, holder)| Op::Acquire { rule, holder }),
        (0u8..6).prop_map(|holder| Op::Release { holder }),
        (0u8..6, any::<bool>()).prop_map(|(holder, longest)| Op::Renew { holder, longest }),
        (0usize..64, 0u8..6, any::<bool>(), any::<bool>()).prop_map(
            |(rule, holder, expiry_max, remove)| Op::LeaseSet {
                rule,
                holder,
                expiry_max,
                remove
            }
        ),
    ]
}

/// A cost of 1, the whole capacity, or something between, from a byte.
fn cost_of(rule: &Rule, b: u8) -> u64 {
    match b % 3 {
        0 => 1,
        1 => rule.burst(),
        _ => (u64::from(b) % rule.burst()).max(1),
    }
}

fn run(family: usize, ops: &[Op]) -> Result<(), TestCaseError> {
    // The algorithms that convert into each other share a key.
    let algos: &[Algo] = match family % 4 {
        0 => &[Algo::Gcra, Algo::Bucket],
        1 => &[Algo::Window, Algo::Sliding],
        2 => &[Algo::Log],
        _ => &[Algo::Semaphore],
    };
    let rules_of: Vec<Vec<Rule>> = algos.iter().map(|a| rules(*a)).collect();
    let pick = |algo: usize, i: usize| {
        let rs = &rules_of[algo % rules_of.len()];
        (algos[algo % algos.len()], rs[i % rs.len()])
    };
    let (algo0, rule0) = pick(0, 0);
    let mut l = Limiter::new(algo0, rule0);
    let mut now = T0;
    // The latest the clock has been: a state is checked against a clock at most one skew
    // behind it.
    let mut latest = T0;
    let holder = |h: u8| format!("h{h}").into_bytes();
    for op in ops {
        match op.clone() {
            Op::Clock(d) => {
                now = now
                    .saturating_add_signed(d)
                    .max(latest.saturating_sub(MAX_CLOCK_SKEW_US / 2));
                latest = latest.max(now);
            }
            Op::Admit {
                rule,
                algo,
                cost,
                dry,
            } => {
                let (a, r) = pick(algo, rule);
                let _ = l.admit(a, r, cost_of(&r, cost), now, dry);
            }
            Op::Reserve {
                rule,
                id,
                cost,
                keep_max,
            } => {
                let (a, r) = pick(rule, rule);
                let keep = if keep_max { MAX_KEEP_US } else { 1_000 };
                let id = [b'r', id];
                let _ = l.reserve_ask(Ask::new(a, r, cost_of(&r, cost)), &id, keep, now);
            }
            Op::Settle { id, actual, forget } => {
                let actual = if actual > 200 {
                    MAX_COUNT
                } else {
                    u64::from(actual)
                };
                let _ = l.settle_then(&[b'r', id], actual, now, forget);
            }
            Op::Grant { rule, want } => {
                let (a, r) = pick(rule, rule);
                let _ = l.grant(a, r, u64::from(want).max(1), 1_000_000, now);
            }
            Op::Acquire { rule, holder: h } => {
                let (_, r) = pick(0, rule);
                let h = h.map(holder);
                let _ = l.acquire(r, h.as_deref(), now, false);
            }
            Op::Release { holder: h } => {
                let _ = l.release(&holder(h), now);
            }
            Op::Renew { holder: h, longest } => {
                let lease = if longest { MAX_PERIOD_US } else { 1_000 };
                let _ = l.renew(&holder(h), lease, now);
            }
            Op::LeaseSet {
                rule,
                holder: h,
                expiry_max,
                remove,
            } => {
                let (_, r) = pick(0, rule);
                let expiry = match (remove, expiry_max) {
                    (true, _) => 0,
                    (false, true) => now + MAX_PERIOD_US,
                    (false, false) => now + 1_000,
                };
                let next = l.next_lease_id() + 1;
                let _ = l.apply_lease(r, &holder(h), expiry, now, next);
            }
        }
        let bytes = encode(&l);
        let own = decode(bytes.as_bytes(), None);
        prop_assert_eq!(own.as_ref(), Ok(&l), "own state after {:?}", op);
        let foreign = decode(bytes.as_bytes(), Some(now));
        prop_assert_eq!(foreign.as_ref(), Ok(&l), "foreign state after {:?}", op);
        if !l.is_void() {
            prop_assert!(
                l.peek(now).remaining <= l.rule().burst(),
                "remaining above capacity"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_reachable_state_round_trips(family in 0usize..4, ops in prop::collection::vec(op(), 1..60)) {
        run(family, &ops)?;
    }
}

#[test]
fn a_semaphore_at_the_largest_capacity_round_trips_and_takes_no_more() {
    let rule = Rule::new(Algo::Semaphore, MAX_SEMAPHORE_CAPACITY, MAX_PERIOD_US, None).unwrap();
    let mut l = Limiter::new(Algo::Semaphore, rule);
    // The longest holders, so that the payload is as large as it can be.
    let name = |i: u64| format!("holder-{i:06}-{}", "x".repeat(242));
    for i in 0..MAX_SEMAPHORE_CAPACITY {
        l.apply_lease(rule, name(i).as_bytes(), T0 + MAX_PERIOD_US, T0, i)
            .unwrap();
    }
    let before = l.clone();
    let e = l
        .apply_lease(rule, b"one-more", T0 + 1_000, T0, 0)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "ERR the key keeps 100000 leases already (the largest capacity)"
    );
    assert_eq!(l, before, "a refused replay changes nothing");
    // Renewing one that holds a lease, and removing one, still work at the bound.
    l.apply_lease(rule, name(7).as_bytes(), 0, T0, 1).unwrap();
    assert!(l.apply_lease(rule, b"one-more", T0 + 1_000, T0, 2).is_ok());
    let bytes = encode(&l);
    assert_eq!(decode(bytes.as_bytes(), None), Ok(l.clone()));
    assert_eq!(decode(bytes.as_bytes(), Some(T0)), Ok(l));
}

#[test]
fn a_lease_expiry_no_acquire_could_write_is_refused() {
    let rule = Rule::new(Algo::Semaphore, 3, 60_000_000, None).unwrap();
    let mut l = Limiter::new(Algo::Semaphore, rule);
    for expiry in [T0, T0 - 1, T0 + MAX_PERIOD_US + 1, u64::MAX] {
        let e = l.apply_lease(rule, b"h", expiry, T0, 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "ERR expiry_us must be 0 or after now_us by at most 3650d"
        );
    }
    assert!(l.apply_lease(rule, b"h", T0 + MAX_PERIOD_US, T0, 1).is_ok());
}
