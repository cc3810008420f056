//! A deterministic simulator of capacity protection on a virtual clock: a backend with `slots`
//! servers, a lognormal service time that grows past a knee, and a FIFO queue; Poisson arrivals
//! of a priority mix from Zipf-skewed tenants; a contender deciding each admission. What it
//! measures is in [`Report`]; the README has the tables and how to read them.

pub mod contenders;
mod metrics;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::time::Duration;

use rl_engine::capacity::{End, Priority, Tenant};
use rl_engine::rng::Rng;
use rl_engine::Instant;

pub use contenders::Contender;
use contenders::Ticket;
pub use metrics::Report;

/// The median service time, and the lognormal's sigma.
pub const SERVICE_MS: f64 = 10.0;
pub const SIGMA: f64 = 0.5;
/// A completion later than this after its arrival is not goodput (and reads as a timeout).
pub const DEADLINE: Duration = Duration::from_secs(1);
/// Past this share of its slots busy, the backend slows: each request started then takes
/// `1 + KNEE_SLOPE * (busy - knee) / slots` times longer.
pub const KNEE: f64 = 0.8;
pub const KNEE_SLOPE: f64 = 2.0;
pub const TENANTS: usize = 50;
pub const ZIPF_S: f64 = 1.0;
/// The priority mix: critical, standard, batch.
pub const MIX: [f64; 3] = [0.2, 0.5, 0.3];

pub struct Scenario {
    pub name: &'static str,
    pub secs: u64,
    /// Offered load as a multiple of the capacity at the start.
    pub load: f64,
    /// `(from second, slots)`, the first from 0.
    pub slots: Vec<(u64, u32)>,
}

impl Scenario {
    pub fn steady(name: &'static str, secs: u64, load: f64, slots: u32) -> Scenario {
        Scenario {
            name,
            secs,
            load,
            slots: vec![(0, slots)],
        }
    }

    fn slots_at(&self, us: u64) -> u32 {
        let s = us / 1_000_000;
        self.slots
            .iter()
            .rev()
            .find(|(from, _)| *from <= s)
            .map_or(1, |(_, n)| *n)
    }
}

/// The backend's best throughput, requests a second, with `slots` slots: the knee makes it
/// peak before every slot is busy.
pub fn capacity(slots: u32) -> f64 {
    let mean_s = SERVICE_MS / 1e3 * (SIGMA * SIGMA / 2.0).exp();
    (1..=slots)
        .map(|b| f64::from(b) / (mean_s * slowdown(b, slots)))
        .fold(0.0, f64::max)
}

fn slowdown(busy: u32, slots: u32) -> f64 {
    let knee = KNEE * f64::from(slots);
    1.0 + KNEE_SLOPE * (f64::from(busy) - knee).max(0.0) / f64::from(slots)
}

/// The p99 of the service time with no queue and no knee.
pub fn unloaded_p99_ms() -> f64 {
    SERVICE_MS * (2.326 * SIGMA).exp()
}

struct Req {
    ticket: Ticket,
    arrived: u64,
    priority: Priority,
    tenant: usize,
}

fn normal(rng: &Rng) -> f64 {
    let u1 = rng.f64().max(1e-12);
    let u2 = rng.f64();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

fn zipf_cdf() -> Vec<f64> {
    let w: Vec<f64> = (1..=TENANTS)
        .map(|k| 1.0 / (k as f64).powf(ZIPF_S))
        .collect();
    let total: f64 = w.iter().sum();
    w.iter()
        .scan(0.0, |acc, x| {
            *acc += x / total;
            Some(*acc)
        })
        .collect()
}

/// A tenant's plan weight: one in five is on a plan four times the others'.
pub fn weight(tenant: usize) -> u32 {
    if tenant.is_multiple_of(5) {
        4
    } else {
        1
    }
}

/// Runs a scenario against a contender, deterministically from `seed`.
pub fn run(sc: &Scenario, c: &mut dyn Contender, seed: u64) -> Report {
    let rng = Rng::new(seed);
    let cdf = zipf_cdf();
    let end_us = sc.secs * 1_000_000;
    let rate = sc.load * capacity(sc.slots_at(0));
    let mut m = Report::new(sc, unloaded_p99_ms());
    let mut reqs: HashMap<u64, Req> = HashMap::new();
    let mut done: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    let mut queue: VecDeque<u64> = VecDeque::new();
    let mut busy = 0u32;
    let mut next_id = 0u64;
    let mut next_arrival = 0u64;
    let mut next_sample = 0u64;
    let start = |id: u64, now: u64, busy: &mut u32, done: &mut BinaryHeap<Reverse<(u64, u64)>>| {
        *busy += 1;
        let slots = sc.slots_at(now);
        let s = SERVICE_MS * 1e3 * (SIGMA * normal(&rng)).exp() * slowdown(*busy, slots);
        done.push(Reverse((now + s as u64, id)));
    };
    loop {
        let completion = done.peek().map(|Reverse((t, _))| *t);
        let now = match completion {
            Some(t) if t <= next_arrival => t,
            _ => next_arrival,
        };
        if now >= end_us {
            break;
        }
        while next_sample <= now {
            m.sample_limit(c.limit());
            next_sample += 1_000_000;
        }
        if completion == Some(now) && now <= next_arrival {
            let Some(Reverse((_, id))) = done.pop() else {
                break;
            };
            busy -= 1;
            if let Some(r) = reqs.remove(&id) {
                let latency = Duration::from_micros(now - r.arrived);
                let end = if latency <= DEADLINE {
                    End::Done { latency }
                } else {
                    End::TimedOut { latency }
                };
                c.finish(r.ticket, end, Instant::from_micros(now));
                m.completed(now, r.priority, r.tenant, latency);
            }
            while busy < sc.slots_at(now) {
                let Some(id) = queue.pop_front() else { break };
                start(id, now, &mut busy, &mut done);
            }
        } else {
            let gap = -(1.0 - rng.f64()).ln() / rate * 1e6;
            next_arrival += gap.max(1.0) as u64;
            let u = rng.f64();
            let priority = if u < MIX[0] {
                Priority::Critical
            } else if u < MIX[0] + MIX[1] {
                Priority::Standard
            } else {
                Priority::Batch
            };
            let v = rng.f64();
            let tenant = cdf.iter().position(|c| v <= *c).unwrap_or(TENANTS - 1);
            let t = Tenant {
                id: tenant as u64,
                weight: weight(tenant),
            };
            m.arrived(priority, tenant);
            match c.admit(priority, t, Instant::from_micros(now)) {
                Some(ticket) => {
                    m.admitted(now, priority);
                    next_id += 1;
                    reqs.insert(
                        next_id,
                        Req {
                            ticket,
                            arrived: now,
                            priority,
                            tenant,
                        },
                    );
                    if busy < sc.slots_at(now) {
                        start(next_id, now, &mut busy, &mut done);
                    } else {
                        queue.push_back(next_id);
                    }
                }
                None => m.shed(now, priority),
            }
        }
    }
    m.finish(sc)
}
