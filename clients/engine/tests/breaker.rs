use std::num::NonZeroUsize;
use std::time::Duration;

use std::cell::Cell;

use rl_core::rule::{Algo, Rule};
use rl_engine::breaker::{Breaker, BreakerState, Pass};
use rl_engine::fallback::Fallback;
use rl_engine::policy::OnStoreError;
use rl_engine::Instant;

thread_local! {
    // Each test runs on a thread of its own: its clock starts at 1 s and moves by `advance`.
    static CLOCK: Cell<Instant> = const { Cell::new(Instant::from_micros(1_000_000)) };
}

fn now() -> Instant {
    CLOCK.with(Cell::get)
}

fn advance(d: Duration) {
    CLOCK.with(|c| c.set(c.get() + d));
}

const FALLBACK: OnStoreError = OnStoreError::Allow;

fn breaker() -> Breaker {
    Breaker::new(3, Duration::from_secs(1), Duration::from_secs(10))
}

/// Enters with a draw of 0 (always the store when anything may go there) and reports.
fn call(b: &Breaker, ok: bool) -> bool {
    match b.enter(now(), &FALLBACK, 0.0) {
        Pass::Store(c) => {
            if ok {
                b.report(c, true, now())
            } else {
                b.report(c, false, now())
            }
            true
        }
        Pass::Posture => false,
    }
}

#[test]
fn opens_after_consecutive_failures_only() {
    let b = breaker();
    assert!(call(&b, false));
    assert!(call(&b, false));
    assert!(call(&b, true)); // a success resets the count
    assert!(call(&b, false));
    assert!(call(&b, false));
    assert_eq!(b.state(now()), BreakerState::Closed);
    assert!(call(&b, false));
    assert_eq!(b.state(now()), BreakerState::Open);
    assert!(!call(&b, true), "an open breaker asks nobody");
    advance(Duration::from_millis(999));
    assert!(!call(&b, true));
    advance(Duration::from_millis(1));
    assert_eq!(b.state(now()), BreakerState::HalfOpen);
}

#[test]
fn half_open_lets_one_probe_at_a_time() {
    let b = breaker();
    for _ in 0..3 {
        call(&b, false);
    }
    advance(Duration::from_secs(1));
    let Pass::Store(probe) = b.enter(now(), &FALLBACK, 0.0) else {
        panic!("the first request after open is the probe")
    };
    assert!(probe.is_probe());
    assert!(matches!(b.enter(now(), &FALLBACK, 0.0), Pass::Posture));
    // A failed probe opens again for the whole period.
    b.report(probe, false, now());
    assert_eq!(b.state(now()), BreakerState::Open);
    advance(Duration::from_millis(999));
    assert!(!call(&b, true));
    advance(Duration::from_millis(1));

    // A cancelled probe frees the slot for the next request.
    let Pass::Store(probe) = b.enter(now(), &FALLBACK, 0.0) else {
        panic!("probe")
    };
    b.abandon(probe);
    let Pass::Store(probe) = b.enter(now(), &FALLBACK, 0.0) else {
        panic!("probe again")
    };
    assert!(probe.is_probe());
    b.report(probe, true, now());
    assert_eq!(b.state(now()), BreakerState::Ramping);
}

#[test]
fn ramp_sends_a_linearly_growing_share_to_the_store() {
    let b = breaker();
    for _ in 0..3 {
        call(&b, false);
    }
    advance(Duration::from_secs(1));
    let Pass::Store(probe) = b.enter(now(), &FALLBACK, 0.0) else {
        panic!("probe")
    };
    b.report(probe, true, now());

    let goes_to_store =
        |draw: f64, on: &OnStoreError| matches!(b.enter(now(), on, draw), Pass::Store(_));
    let fallback = OnStoreError::Fallback(Rule::new(Algo::Gcra, 1, 1000, None).unwrap());
    // At the start of the ramp nothing goes to the store except deny routes.
    assert!(!goes_to_store(0.0, &fallback));
    assert!(goes_to_store(0.99, &OnStoreError::Deny));
    advance(Duration::from_millis(2500));
    assert!(goes_to_store(0.2499, &fallback));
    assert!(!goes_to_store(0.25, &fallback));
    assert!(!goes_to_store(0.9, &OnStoreError::Allow));
    advance(Duration::from_millis(5000));
    assert!(goes_to_store(0.7499, &fallback));
    assert!(!goes_to_store(0.75, &fallback));
    assert_eq!(b.state(now()), BreakerState::Ramping);
    advance(Duration::from_millis(2500));
    assert_eq!(b.state(now()), BreakerState::Closed);
    assert!(goes_to_store(0.999, &fallback));

    // Failures during a ramp count toward opening again.
    let b = breaker();
    for _ in 0..3 {
        call(&b, false);
    }
    advance(Duration::from_secs(1));
    let Pass::Store(probe) = b.enter(now(), &FALLBACK, 0.0) else {
        panic!("probe")
    };
    b.report(probe, true, now());
    for _ in 0..3 {
        let Pass::Store(c) = b.enter(now(), &OnStoreError::Deny, 0.5) else {
            panic!("deny routes go to the store during the ramp")
        };
        b.report(c, false, now());
    }
    assert_eq!(b.state(now()), BreakerState::Open);
}

#[test]
fn late_outcomes_of_calls_let_through_before_opening_are_ignored() {
    let b = breaker();
    let Pass::Store(late) = b.enter(now(), &FALLBACK, 0.0) else {
        panic!("closed")
    };
    for _ in 0..3 {
        call(&b, false);
    }
    b.report(late, true, now());
    assert_eq!(b.state(now()), BreakerState::Open);
}

#[test]
fn zero_ramp_closes_at_once() {
    let b = Breaker::new(1, Duration::ZERO, Duration::ZERO);
    assert!(call(&b, false));
    let Pass::Store(probe) = b.enter(now(), &FALLBACK, 0.0) else {
        panic!("probe")
    };
    assert!(probe.is_probe());
    b.report(probe, true, now());
    assert_eq!(b.state(now()), BreakerState::Closed);
}

#[test]
fn fallback_decides_with_the_module_arithmetic_per_key() {
    const S: u64 = 1_000_000;
    const T0: u64 = 1_764_000_000 * S;
    // 2 per second, bursts of 20.
    let f = Fallback::new(
        Rule::new(Algo::Gcra, 2, S, Some(20)).unwrap(),
        NonZeroUsize::new(2).unwrap(),
        usize::MAX,
    );
    for i in 0..20 {
        assert!(
            f.admit("u17", 1, Instant::from_micros(T0)).allowed,
            "call {i}"
        );
    }
    let d = f.admit("u17", 1, Instant::from_micros(T0));
    assert!(!d.allowed);
    assert_eq!(d.retry_after_ms(), 500);
    // Another key has its own limiter.
    assert!(f.admit("u18", 1, Instant::from_micros(T0)).allowed);
    assert!(f.admit("u17", 1, Instant::from_micros(T0 + S / 2)).allowed);
    // Bounded: a third key evicts the least recently used (u18), which starts full again.
    assert!(f.admit("u19", 1, Instant::from_micros(T0)).allowed);
    assert!(
        !f.admit("u17", 1, Instant::from_micros(T0 + S / 2)).allowed,
        "u17 kept its state"
    );
    let d = f.admit("u18", 1, Instant::from_micros(T0));
    assert_eq!((d.allowed, d.remaining), (true, 19));
    // A cost above the capacity (policy validation keeps routes from it) is refused.
    assert!(!f.admit("u20", 21, Instant::from_micros(T0)).allowed);
    assert_eq!(f.rule().burst(), 20);
}

mod breaker_properties {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Enter { draw: f64, deny: bool },
        Finish { which: usize, ok: bool },
        Cancel { which: usize },
        Advance { ms: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0.0f64..1.0, any::<bool>()).prop_map(|(draw, deny)| Op::Enter { draw, deny }),
            (0usize..8, any::<bool>()).prop_map(|(which, ok)| Op::Finish { which, ok }),
            (0usize..8).prop_map(|which| Op::Cancel { which }),
            (0u64..400).prop_map(|ms| Op::Advance { ms }),
        ]
    }

    proptest! {
        /// Whatever happens, at most one probe is in flight, an open breaker lets nothing
        /// through, and `failures` consecutive failures of a closed breaker open it (calls
        /// let through before its last opening count for nothing).
        #[test]
        fn one_probe_at_most_and_nothing_through_while_open(ops in proptest::collection::vec(op(), 1..300)) {
            let b = Breaker::new(3, Duration::from_millis(500), Duration::from_millis(1000));
            let fallback = OnStoreError::Allow;
            let mut now = Instant::from_micros(1_000_000);
            let mut calls = Vec::new();
            let mut closed_failures = 0;
            // How often the breaker has opened: a call remembers the count it entered under.
            let mut openings = 0u32;
            for op in ops {
                match op {
                    Op::Enter { draw, deny } => {
                        let before = b.state(now);
                        let on = if deny { OnStoreError::Deny } else { fallback };
                        match b.enter(now, &on, draw) {
                            Pass::Store(c) => {
                                prop_assert!(before != BreakerState::Open);
                                calls.push((c, openings));
                            }
                            Pass::Posture => prop_assert!(before != BreakerState::Closed),
                        }
                        prop_assert!(calls.iter().filter(|(c, _)| c.is_probe()).count() <= 1);
                    }
                    Op::Finish { which, ok } if which < calls.len() => {
                        let (c, entered) = calls.remove(which);
                        let before = b.state(now);
                        let counted =
                            before == BreakerState::Closed && !c.is_probe() && entered == openings;
                        b.report(c, ok, now);
                        if before != BreakerState::Open && b.state(now) == BreakerState::Open {
                            openings += 1;
                        }
                        if counted {
                            closed_failures = if ok { 0 } else { closed_failures + 1 };
                            if closed_failures == 3 {
                                prop_assert_eq!(b.state(now), BreakerState::Open);
                                closed_failures = 0;
                            }
                        } else {
                            closed_failures = 0;
                        }
                    }
                    Op::Cancel { which } if which < calls.len() => b.abandon(calls.remove(which).0),
                    Op::Finish { .. } | Op::Cancel { .. } => {}
                    Op::Advance { ms } => now += Duration::from_millis(ms),
                }
            }
        }
    }
}
