//! Micro-benchmarks of the pure core decision of `RL.ADMIT`: no Redis, no allocation, no clock.
//!
//! `cargo bench --bench core`
//!
//! The numbers bound what the core can cost inside a call; the end-to-end comparison with
//! `INCR` and a Lua script is `benches/e2e.sh`.

// A benchmark stops at its first surprise: it may unwrap, expect, panic and index (the
// workspace's lints forbid them outside tests, and a benchmark is not run by its test harness).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use rl_core::limiter::Limiter;
use rl_core::request::admit::parse_admit;
use rl_core::rule::{Algo, Rule};

/// A fixed wall-clock instant (2025-11-24), so runs are reproducible.
const T0: u64 = 1_764_000_000_000_000;

fn parse(c: &mut Criterion) {
    let mut group = c.benchmark_group("parse_admit");
    // What the end-to-end bench sends after the key.
    let plain: [&[u8]; 2] = [b"1000000", b"1s"];
    group.bench_function("limit period", |b| {
        b.iter(|| parse_admit(black_box(&plain[..])))
    });
    let full: [&[u8]; 8] = [
        b"2", b"1s", b"BURST", b"20", b"COST", b"3", b"ALGO", b"bucket",
    ];
    group.bench_function("limit period BURST COST ALGO", |b| {
        b.iter(|| parse_admit(black_box(&full[..])))
    });
    group.finish();
}

/// `Limiter::admit` on a warm key, admitted and refused, for each algorithm.
fn admit(c: &mut Criterion) {
    let mut group = c.benchmark_group("limiter_admit");
    for algo in [Algo::Gcra, Algo::Bucket] {
        // Admitted: 1,000,000 per second, the rule of the end-to-end bench.
        let rule = Rule::new(algo, 1_000_000, 1_000_000, None).unwrap_or_else(|e| panic!("{e}"));
        let mut now = T0;
        let mut warm = Limiter::new(algo, rule);
        group.bench_function(format!("{} admitted", algo.name()), |b| {
            b.iter(|| {
                // One µs per call refills one unit: the key never runs dry.
                now += 1;
                let d = warm.admit(algo, rule, 1, black_box(now), false);
                debug_assert!(matches!(d, Ok(ref d) if d.allowed));
                d
            })
        });

        // Refused: 1 per hour with a burst of 1, already spent; time does not move enough.
        let rule = Rule::new(algo, 1, 3_600_000_000, None).unwrap_or_else(|e| panic!("{e}"));
        let mut spent = Limiter::new(algo, rule);
        let first = spent.admit(algo, rule, 1, T0, false);
        assert!(matches!(first, Ok(d) if d.allowed));
        group.bench_function(format!("{} refused", algo.name()), |b| {
            b.iter(|| {
                let d = spent.admit(algo, rule, 1, black_box(T0 + 1_000), false);
                debug_assert!(matches!(d, Ok(ref d) if !d.allowed));
                d
            })
        });

        // A fresh key: what the command does for an absent key (build, then admit).
        group.bench_function(format!("{} new key", algo.name()), |b| {
            b.iter(|| {
                let mut l = Limiter::new(algo, black_box(rule));
                l.admit(algo, rule, 1, black_box(T0), false)
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("parse_and_admit");
    let args: [&[u8]; 2] = [b"1000000", b"1s"];
    let mut now = T0;
    let rule = Rule::new(Algo::Gcra, 1_000_000, 1_000_000, None).unwrap_or_else(|e| panic!("{e}"));
    let mut warm = Limiter::new(Algo::Gcra, rule);
    group.bench_function("gcra admitted", |b| {
        b.iter(|| {
            now += 1;
            let req = parse_admit(black_box(&args[..]))?;
            warm.admit_ask(req.ask, now)
        })
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50)
}

criterion_group! {
    name = benches;
    config = config();
    targets = parse, admit
}
criterion_main!(benches);
