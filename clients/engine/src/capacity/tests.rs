use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::*;

const MS: u64 = 1_000;

fn at(ms: u64) -> Instant {
    Instant::from_micros(ms * MS)
}

fn fixed(n: u32, fair: bool) -> Capacity {
    Capacity::new(
        CapacitySpec {
            limit: LimitSpec::Fixed(n),
            max_wait: Duration::ZERO,
            fair,
        },
        1,
    )
}

fn adaptive(min: u32, max: u32, initial: u32) -> Capacity {
    Capacity::new(
        CapacitySpec {
            limit: LimitSpec::Adaptive { min, max, initial },
            max_wait: Duration::ZERO,
            fair: false,
        },
        7,
    )
}

fn permit(a: Admission) -> Permit {
    match a {
        Admission::Admitted(p) => p,
        Admission::Shed { .. } => panic!("shed"),
    }
}

fn done(ms: u64) -> End {
    End::Done {
        latency: Duration::from_millis(ms),
    }
}

#[test]
fn classes_have_ceilings_in_order_and_a_finish_frees_the_slot() {
    let cap = fixed(10, false);
    let t = at(0);
    // Batch stops at 8, standard at 9.
    let mut held: Vec<Permit> = (0..8)
        .map(|_| permit(cap.admit(Priority::Batch, None, t)))
        .collect();
    assert!(matches!(
        cap.admit(Priority::Batch, None, t),
        Admission::Shed { .. }
    ));
    held.push(permit(cap.admit(Priority::Standard, None, t)));
    assert!(matches!(
        cap.admit(Priority::Standard, None, t),
        Admission::Shed { .. }
    ));
    // Critical counts only itself: it takes the slots the nine lower requests will free, and
    // is refused when critical requests alone fill the limit.
    for _ in 0..10 {
        held.push(permit(cap.admit(Priority::Critical, None, t)));
    }
    let Admission::Shed { retry_after } = cap.admit(Priority::Critical, None, t) else {
        panic!("critical admitted past the limit");
    };
    assert!(retry_after >= RETRY_MIN && retry_after <= RETRY_MAX);
    let s = cap.stats();
    assert_eq!((s.limit, s.in_flight), (10, 19));
    assert_eq!(s.in_flight_by_priority, PerClass([10, 1, 8]));
    assert_eq!(s.shed, PerClass([1, 1, 1]));
    assert_eq!(s.admitted, PerClass([10, 1, 8]));
    for p in held.drain(..) {
        cap.finish(p, done(5), at(5));
    }
    assert_eq!(cap.stats().in_flight, 0);
    // Abandoned frees as well.
    let p = permit(cap.admit(Priority::Critical, None, at(6)));
    cap.finish(p, End::Abandoned, at(7));
    assert_eq!(cap.stats().in_flight, 0);
}

#[test]
fn a_critical_refusal_holds_batch_down_and_squeezes_standard() {
    let cap = fixed(20, false);
    let held: Vec<Permit> = (0..20)
        .map(|_| permit(cap.admit(Priority::Critical, None, at(0))))
        .collect();
    assert!(matches!(
        cap.admit(Priority::Critical, None, at(1)),
        Admission::Shed { .. }
    ));
    for p in held {
        cap.finish(p, done(1), at(2));
    }
    // Idle now, but a critical request was refused 1 ms ago: batch waits out the hold...
    let Admission::Shed { retry_after } = cap.admit(Priority::Batch, None, at(2)) else {
        panic!("batch admitted right after a critical shed");
    };
    assert!(retry_after >= Duration::from_millis(999), "{retry_after:?}");
    // ...and standard has 16 slots, not 18.
    let standard: Vec<Permit> = (0..16)
        .map(|_| permit(cap.admit(Priority::Standard, None, at(3))))
        .collect();
    assert!(matches!(
        cap.admit(Priority::Standard, None, at(3)),
        Admission::Shed { .. }
    ));
    // Critical keeps the rest.
    let c = permit(cap.admit(Priority::Critical, None, at(4)));
    cap.finish(c, done(1), at(5));
    for p in standard {
        cap.finish(p, done(1), at(5));
    }
    // Standard's refusal at 3 ms holds batch until 1003 ms; the squeeze ends at 1001 ms.
    assert!(matches!(
        cap.admit(Priority::Batch, None, at(1002)),
        Admission::Shed { .. }
    ));
    let standard: Vec<Permit> = (0..18)
        .map(|_| permit(cap.admit(Priority::Standard, None, at(1002))))
        .collect();
    for p in standard {
        cap.finish(p, done(1), at(1002));
    }
    let b = permit(cap.admit(Priority::Batch, None, at(1003)));
    cap.finish(b, done(1), at(1004));
}

/// The definition of an inversion this module guarantees: no batch admission within [`HOLD`]
/// after a higher-class request was refused. A random mix against a fixed limit, without fair
/// share (whose refusals are by share, not for room).
#[test]
fn no_priority_inversion_under_a_random_mix() {
    let cap = fixed(20, false);
    let rng = Rng::new(3);
    let mut inflight: VecDeque<(u64, Permit)> = VecDeque::new();
    let mut last_shed = PerClass([None::<u64>; 3]);
    let mut sheds = 0;
    for step in 0..200_000u64 {
        let now_ms = step / 10;
        while inflight.front().is_some_and(|(end, _)| *end <= now_ms) {
            if let Some((_, p)) = inflight.pop_front() {
                cap.finish(p, done(3), at(now_ms));
            }
        }
        let p = Priority::ALL[(rng.u64() % 3) as usize];
        let tenant = Tenant {
            id: rng.u64() % 7,
            weight: 1 + (rng.u64() % 3) as u32,
        };
        match cap.admit(p, Some(tenant), at(now_ms)) {
            Admission::Admitted(permit) => {
                let lower = if p == Priority::Batch { 2 } else { 0 };
                for higher in Priority::ALL.iter().take(lower) {
                    if let Some(t) = last_shed.get(*higher) {
                        assert!(
                            now_ms >= t + 1000,
                            "{p:?} admitted {}ms after a {higher:?} shed",
                            now_ms - t
                        );
                    }
                }
                inflight.push_back((now_ms + 2 + rng.u64() % 4, permit));
            }
            Admission::Shed { .. } => {
                sheds += 1;
                *last_shed.get_mut(p) = Some(now_ms);
            }
        }
    }
    assert!(sheds > 1000, "the mix never overloaded the limit: {sheds}");
}

#[test]
fn near_the_ceiling_a_tenant_above_its_weighted_share_is_shed_and_one_below_is_not() {
    let cap = fixed(20, true);
    let heavy = Tenant { id: 1, weight: 1 };
    let light = Tenant { id: 2, weight: 4 };
    let t = at(0);
    // The heavy tenant takes 17 slots while there is no pressure.
    let mut held: Vec<Permit> = (0..17)
        .map(|_| permit(cap.admit(Priority::Critical, Some(heavy), t)))
        .collect();
    held.push(permit(cap.admit(Priority::Critical, Some(light), t)));
    // 18 of 20: within the reserve (2) of the ceiling. The heavy one (17 of 18, share 1/5) is
    // shed; the light one (1 of 18, share 4/5) is admitted up to the limit.
    assert!(matches!(
        cap.admit(Priority::Critical, Some(heavy), t),
        Admission::Shed { .. }
    ));
    for _ in 0..2 {
        held.push(permit(cap.admit(Priority::Critical, Some(light), t)));
    }
    assert!(matches!(
        cap.admit(Priority::Critical, Some(light), t),
        Admission::Shed { .. }
    ));
    // Without fairness the heavy tenant would have been admitted.
    let unfair = fixed(20, false);
    let other: Vec<Permit> = (0..18)
        .map(|_| permit(unfair.admit(Priority::Critical, Some(heavy), t)))
        .collect();
    for p in other {
        unfair.finish(p, done(1), at(1));
    }
    for p in held {
        cap.finish(p, done(1), at(1));
    }
    assert!(
        cap.lock().tenants.is_empty(),
        "an entry leaves with its last request"
    );
}

#[test]
fn the_tenant_table_is_bounded() {
    let cap = fixed(u32::MAX, true);
    let mut held = Vec::new();
    for id in 0..(MAX_TENANTS as u64 + 100) {
        held.push(permit(cap.admit(
            Priority::Standard,
            Some(Tenant { id, weight: 0 }),
            at(0),
        )));
    }
    assert_eq!(cap.lock().tenants.len(), MAX_TENANTS);
    for p in held {
        cap.finish(p, done(1), at(1));
    }
    assert!(cap.lock().tenants.is_empty());
    assert_eq!(*cap.lock().weights.get(Priority::Standard), 0);
}

#[test]
fn odd_inputs_do_not_panic() {
    for spec in [
        LimitSpec::Fixed(0),
        LimitSpec::Adaptive {
            min: 0,
            max: 0,
            initial: 0,
        },
        LimitSpec::Adaptive {
            min: 9,
            max: 3,
            initial: 100,
        },
        LimitSpec::Adaptive {
            min: 1,
            max: u32::MAX,
            initial: u32::MAX,
        },
    ] {
        let cap = Capacity::new(
            CapacitySpec {
                limit: spec,
                max_wait: Duration::MAX,
                fair: true,
            },
            0,
        );
        let rng = Rng::new(5);
        let mut held = Vec::new();
        for i in 0..5_000u64 {
            // Time jumps around, backwards too.
            let now = Instant::from_micros(rng.u64() % (u64::MAX / 2) * (i % 2));
            let p = Priority::ALL[(rng.u64() % 3) as usize];
            let tenant = Some(Tenant {
                id: rng.u64() % 5,
                weight: rng.u64() as u32,
            });
            if let Admission::Admitted(permit) = cap.admit(p, tenant, now) {
                held.push(permit);
            }
            if rng.u64().is_multiple_of(2) {
                if let Some(permit) = held.pop() {
                    let l = Duration::from_micros(rng.u64());
                    let end = [
                        End::Done { latency: l },
                        End::Failed { latency: l },
                        End::TimedOut { latency: l },
                        End::Abandoned,
                    ][(rng.u64() % 4) as usize];
                    cap.finish(permit, end, now);
                }
            }
        }
        let s = cap.stats();
        assert_eq!(s.in_flight as usize, held.len());
        assert!(s.limit >= 1);
    }
}

/// A backend with `slots` servers and a FIFO queue before them; a service time uniform in
/// [0.5, 1.5) of `service_ms`; open-loop arrivals of standard requests.
struct Backend {
    slots: u32,
    service_ms: f64,
    busy: u32,
    queue: VecDeque<(Instant, Permit)>,
    /// Completions: (end, start, permit).
    ends: BinaryHeap<Reverse<(Instant, Instant, u64)>>,
    permits: std::collections::HashMap<u64, Permit>,
    next_id: u64,
    latencies: Vec<u64>,
    fail: bool,
}

impl Backend {
    fn new(slots: u32, service_ms: f64) -> Backend {
        Backend {
            slots,
            service_ms,
            busy: 0,
            queue: VecDeque::new(),
            ends: BinaryHeap::new(),
            permits: Default::default(),
            next_id: 0,
            latencies: Vec::new(),
            fail: false,
        }
    }

    fn start(&mut self, admitted_at: Instant, now: Instant, permit: Permit, rng: &Rng) {
        self.busy += 1;
        let service = Duration::from_secs_f64(self.service_ms * (0.5 + rng.f64()) / 1000.0);
        self.next_id += 1;
        self.permits.insert(self.next_id, permit);
        self.ends
            .push(Reverse((now + service, admitted_at, self.next_id)));
    }

    /// Runs from `from` to `to` with arrivals every `1/rate` s (jittered); returns sheds.
    fn run(&mut self, cap: &Capacity, from: u64, to: u64, rate: f64, rng: &Rng) -> u64 {
        let gap_us = 1e6 / rate;
        let mut next_arrival = from as f64 * 1e3;
        let mut shed = 0;
        loop {
            let next_end = self.ends.peek().map(|Reverse((t, _, _))| *t);
            let arrival = Instant::from_micros(next_arrival as u64);
            if arrival >= at(to) && next_end.is_none_or(|e| e >= at(to)) {
                return shed;
            }
            if next_end.is_some_and(|e| e <= arrival) {
                let Some(Reverse((now, started, id))) = self.ends.pop() else {
                    unreachable!()
                };
                self.busy -= 1;
                let latency = now.duration_since(started);
                self.latencies.push(latency.as_micros() as u64);
                if let Some(p) = self.permits.remove(&id) {
                    let end = if self.fail {
                        End::Failed { latency }
                    } else {
                        End::Done { latency }
                    };
                    cap.finish(p, end, now);
                }
                if self.busy < self.slots {
                    if let Some((admitted, p)) = self.queue.pop_front() {
                        self.start(admitted, now, p, rng);
                    }
                }
            } else {
                next_arrival += gap_us * (0.5 + rng.f64());
                match cap.admit(Priority::Standard, None, arrival) {
                    Admission::Admitted(p) if self.busy < self.slots => {
                        self.start(arrival, arrival, p, rng)
                    }
                    Admission::Admitted(p) => self.queue.push_back((arrival, p)),
                    Admission::Shed { .. } => shed += 1,
                }
            }
        }
    }

    fn median_since(&mut self, from: usize) -> f64 {
        let mut l = self.latencies.split_off(from.min(self.latencies.len()));
        l.sort_unstable();
        l.get(l.len() / 2).copied().unwrap_or(0) as f64 / 1e3
    }
}

#[test]
fn the_adaptive_limit_finds_the_backend_and_holds_latency_near_no_load() {
    let cap = adaptive(2, 1000, 10);
    let rng = Rng::new(11);
    // 100 slots of 10 ms: 10,000 a second. Offered 20,000 a second.
    let mut b = Backend::new(100, 10.0);
    b.run(&cap, 0, 10_000, 20_000.0, &rng);
    let s = cap.stats();
    // Standard requests fill the limit less its reserve; held a little past the 100 slots.
    assert!((100..=160).contains(&s.limit), "{s:?}");
    let no_load = s.no_load.expect("measured").as_secs_f64() * 1e3;
    assert!((9.0..11.0).contains(&no_load), "{no_load}");
    let mark = b.latencies.len();
    let shed = b.run(&cap, 10_000, 20_000, 20_000.0, &rng);
    let median = b.median_since(mark);
    assert!(median < 10.0 * 1.3, "median {median} ms");
    // About half is shed: the backend serves what it can.
    assert!((80_000..120_000).contains(&shed), "{shed}");
}

#[test]
fn it_grows_only_when_used_and_stays_in_range() {
    let cap = adaptive(4, 50, 10);
    let rng = Rng::new(12);
    let mut b = Backend::new(1000, 10.0);
    // 200 a second of 10 ms: 2 in flight, far under 10: the limit has no reason to move.
    b.run(&cap, 0, 30_000, 200.0, &rng);
    assert_eq!(cap.stats().limit, 10);
    // Much more than the backend's 1000 slots would take: grows, up to max only.
    b.run(&cap, 30_000, 40_000, 50_000.0, &rng);
    assert_eq!(cap.stats().limit, 50);
}

#[test]
fn it_shrinks_quickly_when_capacity_halves_and_regrows_when_restored() {
    let cap = adaptive(2, 1000, 100);
    let rng = Rng::new(13);
    let mut b = Backend::new(100, 10.0);
    b.run(&cap, 0, 10_000, 20_000.0, &rng);
    b.slots = 50;
    b.run(&cap, 10_000, 12_000, 20_000.0, &rng);
    let l = cap.stats().limit;
    assert!((50..=80).contains(&l), "2 s after halving: {l}");
    b.slots = 100;
    b.run(&cap, 12_000, 14_000, 20_000.0, &rng);
    let l = cap.stats().limit;
    assert!((100..=160).contains(&l), "2 s after restoring: {l}");
}

#[test]
fn failures_cut_the_limit() {
    let cap = adaptive(2, 1000, 100);
    let rng = Rng::new(14);
    let mut b = Backend::new(1000, 10.0);
    b.run(&cap, 0, 2_000, 5_000.0, &rng);
    let before = cap.stats().limit;
    b.fail = true;
    b.run(&cap, 2_000, 2_300, 5_000.0, &rng);
    let after = cap.stats().limit;
    assert!(after < before / 4, "{before} -> {after}");
}

#[test]
fn it_does_not_drift_upward_under_sustained_overload() {
    let cap = adaptive(2, 10_000, 10);
    let rng = Rng::new(15);
    let mut b = Backend::new(50, 10.0);
    b.run(&cap, 0, 20_000, 20_000.0, &rng);
    let early = cap.stats();
    // Ten simulated minutes at four times the capacity.
    let mut most = 0;
    for m in 0..10u64 {
        b.run(
            &cap,
            20_000 + m * 60_000,
            20_000 + (m + 1) * 60_000,
            20_000.0,
            &rng,
        );
        most = most.max(cap.stats().limit);
    }
    let late = cap.stats();
    assert!(most <= 80, "peaked at {most}");
    assert!(late.limit <= early.limit + 10, "{early:?} -> {late:?}");
    let (e, l) = (early.no_load.unwrap(), late.no_load.unwrap());
    assert!(
        l.as_secs_f64() < e.as_secs_f64() * 1.2,
        "no-load {e:?} -> {l:?}"
    );
}

#[test]
fn it_re_probes_when_requests_get_costlier_and_does_not_stall_at_the_minimum() {
    let cap = adaptive(2, 1000, 50);
    let rng = Rng::new(16);
    let mut b = Backend::new(100, 10.0);
    b.run(&cap, 0, 10_000, 20_000.0, &rng);
    // A deploy makes every request three times as slow: the backend's capacity in flight is
    // the same 100 slots, its no-load latency 30 ms.
    b.service_ms = 30.0;
    b.run(&cap, 10_000, 40_000, 20_000.0, &rng);
    let s = cap.stats();
    let no_load = s.no_load.unwrap().as_secs_f64() * 1e3;
    // Measured by small probes (8 to 64 requests) while the limit was low: within a sixth.
    assert!((25.0..35.0).contains(&no_load), "{no_load}");
    assert!((100..=160).contains(&s.limit), "{s:?}");
}
