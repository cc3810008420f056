//! What a run measures.

use std::time::Duration;

use rl_engine::capacity::Priority;

use crate::{capacity, weight, Scenario, DEADLINE, SERVICE_MS, TENANTS};

const BUCKET_US: u64 = 250_000;
/// A step has settled once every bucket for this long (2 s) has goodput within 10 % of the
/// new capacity and a median latency under twice the median service time (a queue growing
/// without bound serves at capacity too, but not within the deadline for long).
const SETTLED_FOR: usize = 8;

pub struct Report {
    /// Completions within the deadline, as a share of what the backend could have served.
    pub goodput: f64,
    pub critical_p99_ms: f64,
    /// Critical p99 over the unloaded p99.
    pub critical_p99_ratio: f64,
    /// Seconds (of the clock) in which a critical request was shed and a batch one admitted.
    pub inversions_second: u64,
    /// Seconds in which a request of any class was shed and one of a lower class admitted.
    pub inversions_any_second: u64,
    /// Batch admissions less than a second after a critical request was shed.
    pub inversions_hold: u64,
    /// Batch admissions less than a second after a standard request was shed.
    pub batch_after_standard: u64,
    /// Standard admissions less than a second after a critical request was shed (the engine
    /// squeezes standard then rather than holding it: counted, not promised).
    pub standard_after_critical: u64,
    /// Jain's index of the tenants' goodput over their weighted max-min fair share, the
    /// lowest of the classes.
    pub jain: f64,
    /// Per capacity step after the start: seconds until settled, `None` if never.
    pub settle: Vec<Option<f64>>,
    /// The limit, once a second.
    pub limits: Vec<u32>,
    unloaded_p99: f64,
    good: u64,
    critical: Vec<u32>,
    demand: [[u64; TENANTS]; 3],
    served: [[u64; TENANTS]; 3],
    shed_in: Vec<[bool; 3]>,
    admitted_in: Vec<[bool; 3]>,
    last_shed: [Option<u64>; 3],
    buckets: Vec<(u64, Vec<u32>)>,
}

impl Report {
    pub(crate) fn new(sc: &Scenario, unloaded_p99: f64) -> Report {
        let secs = sc.secs as usize + 1;
        Report {
            goodput: 0.0,
            critical_p99_ms: 0.0,
            critical_p99_ratio: 0.0,
            inversions_second: 0,
            inversions_any_second: 0,
            inversions_hold: 0,
            batch_after_standard: 0,
            standard_after_critical: 0,
            jain: 1.0,
            settle: Vec::new(),
            limits: Vec::new(),
            unloaded_p99,
            good: 0,
            critical: Vec::new(),
            demand: [[0; TENANTS]; 3],
            served: [[0; TENANTS]; 3],
            shed_in: vec![[false; 3]; secs],
            admitted_in: vec![[false; 3]; secs],
            last_shed: [None; 3],
            buckets: if sc.slots.len() > 1 {
                (0..secs * 4).map(|_| (0, Vec::new())).collect()
            } else {
                Vec::new()
            },
        }
    }

    pub(crate) fn sample_limit(&mut self, l: Option<u32>) {
        if let Some(l) = l {
            self.limits.push(l);
        }
    }

    pub(crate) fn arrived(&mut self, p: Priority, tenant: usize) {
        self.demand[p.index()][tenant] += 1;
    }

    pub(crate) fn admitted(&mut self, now: u64, p: Priority) {
        self.admitted_in[(now / 1_000_000) as usize][p.index()] = true;
        let recent = |t: Option<u64>| t.is_some_and(|t| now < t + 1_000_000);
        match p {
            Priority::Batch if recent(self.last_shed[0]) => self.inversions_hold += 1,
            Priority::Batch if recent(self.last_shed[1]) => self.batch_after_standard += 1,
            Priority::Standard if recent(self.last_shed[0]) => self.standard_after_critical += 1,
            _ => {}
        }
    }

    pub(crate) fn shed(&mut self, now: u64, p: Priority) {
        self.shed_in[(now / 1_000_000) as usize][p.index()] = true;
        self.last_shed[p.index()] = Some(now);
    }

    pub(crate) fn completed(&mut self, now: u64, p: Priority, tenant: usize, latency: Duration) {
        let us = latency.as_micros() as u32;
        if latency <= DEADLINE {
            self.good += 1;
            self.served[p.index()][tenant] += 1;
            if let Some(b) = self.buckets.get_mut((now / BUCKET_US) as usize) {
                b.0 += 1;
                b.1.push(us);
            }
        }
        if p == Priority::Critical {
            self.critical.push(us);
        }
    }

    pub(crate) fn finish(mut self, sc: &Scenario) -> Report {
        let mut possible = 0.0;
        for s in 0..sc.secs {
            possible += capacity(sc.slots_at(s * 1_000_000));
        }
        self.goodput = self.good as f64 / possible;
        self.critical.sort_unstable();
        let p99 = self
            .critical
            .get(self.critical.len() * 99 / 100)
            .copied()
            .unwrap_or(0);
        self.critical_p99_ms = f64::from(p99) / 1e3;
        self.critical_p99_ratio = self.critical_p99_ms / self.unloaded_p99;
        self.inversions_second = self
            .shed_in
            .iter()
            .zip(&self.admitted_in)
            .filter(|(shed, admitted)| shed[0] && admitted[2])
            .count() as u64;
        self.inversions_any_second = self
            .shed_in
            .iter()
            .zip(&self.admitted_in)
            .filter(|(shed, admitted)| (0..3).any(|h| shed[h] && (h + 1..3).any(|l| admitted[l])))
            .count() as u64;
        self.jain = (0..3)
            .filter_map(|c| jain(&self.demand[c], &self.served[c]))
            .fold(1.0, f64::min);
        self.settle = sc.slots[1..]
            .iter()
            .enumerate()
            .map(|(i, (from, slots))| {
                let until = sc.slots.get(i + 2).map_or(sc.secs, |(t, _)| *t);
                self.settled(*from, until, capacity(*slots))
            })
            .collect();
        self
    }

    fn settled(&mut self, from: u64, until: u64, cap: f64) -> Option<f64> {
        let first = (from * 4) as usize;
        let last = (until * 4) as usize;
        let want = cap * BUCKET_US as f64 / 1e6;
        let ok: Vec<bool> = (first..last)
            .map(|b| {
                let Some((n, lat)) = self.buckets.get_mut(b) else {
                    return false;
                };
                lat.sort_unstable();
                let med = lat.get(lat.len() / 2).copied().unwrap_or(u32::MAX);
                let near = (*n as f64 - want).abs() <= 0.1 * want;
                near && f64::from(med) <= 2.0 * SERVICE_MS * 1e3
            })
            .collect();
        (0..ok.len().saturating_sub(SETTLED_FOR))
            .find(|&k| ok[k..k + SETTLED_FOR].iter().all(|x| *x))
            .map(|k| k as f64 * BUCKET_US as f64 / 1e6)
    }
}

/// Jain's index of `served / fair` over the tenants with a fair share, where `fair` is the
/// weighted max-min fair division of what the class was served, each tenant capped by its
/// demand. `None` for a class with fewer than two such tenants.
fn jain(demand: &[u64; TENANTS], served: &[u64; TENANTS]) -> Option<f64> {
    let total: f64 = served.iter().sum::<u64>() as f64;
    let mut fair = [0.0; TENANTS];
    let mut open: Vec<usize> = (0..TENANTS).filter(|t| demand[*t] > 0).collect();
    let mut left = total;
    while !open.is_empty() && left > 1e-9 {
        let w: f64 = open.iter().map(|t| f64::from(weight(*t))).sum();
        let per = left / w;
        let (capped, rest): (Vec<usize>, Vec<usize>) = open
            .iter()
            .partition(|t| demand[**t] as f64 - fair[**t] <= per * f64::from(weight(**t)));
        if capped.is_empty() {
            for t in &rest {
                fair[*t] += per * f64::from(weight(*t));
            }
            break;
        }
        for t in &capped {
            left -= demand[*t] as f64 - fair[*t];
            fair[*t] = demand[*t] as f64;
        }
        open = rest;
    }
    let x: Vec<f64> = (0..TENANTS)
        .filter(|t| fair[*t] >= 1.0)
        .map(|t| served[t] as f64 / fair[t])
        .collect();
    if x.len() < 2 {
        return None;
    }
    let sum: f64 = x.iter().sum();
    let sq: f64 = x.iter().map(|v| v * v).sum();
    Some(sum * sum / (x.len() as f64 * sq))
}
