//! The adaptive in-flight limit: learned from the latency and outcome of the requests it
//! admitted, in rounds ("windows") of fresh samples.
//!
//! - A window is a cohort: the next `max(64, limit)` requests admitted after the limit last
//!   changed, and it closes when all of them have ended. So every verdict is about the current
//!   limit, not the one before it (a cut is not cut again by the queue it is draining), and its
//!   latencies are not only the quickest of the cohort (which closing at the first n ends would
//!   give, and with it a limit that creeps up).
//! - Its median latency, divided by the no-load latency, is the queueing ratio `r`. Above
//!   [`SHRINK_ABOVE`] the limit is cut in proportion (`limit * TARGET / r`, at most by half);
//!   below [`GROW_BELOW`] it grows, by up to a quarter the smaller `r` is, but only if the limit
//!   was used (a class reached its ceiling in the window): an idle limit learns nothing about
//!   headroom, and an unused one is not cut for a latency it did not cause.
//! - More than [`BAD_RATIO`] of failures or timeouts cuts it by that share (at most by half).
//! - The no-load latency is measured, never inferred from the loaded latency: every
//!   [`PROBE_EVERY`] (jittered by half either way, so gateways do not probe together) the limit
//!   standard and batch see drops to half until the in-flight count is under it and the next
//!   8 to [`PROBE_SAMPLES`] requests admitted have ended; their median is a measure, and the
//!   baseline is the median of the last three. A measure far from the baseline is confirmed by
//!   another probe within seconds, and so is a baseline after the limit has fallen to half of
//!   what it was (the backend may have got slower per request). A probe lasts at most
//!   [`PROBE_MAX`] and never waits for traffic (Envoy's gradient filter pins its limit to the
//!   minimum until a fixed number of samples arrive, and stalls when they do not); critical
//!   keeps the whole limit meanwhile. Since the baseline is only ever measured without a queue,
//!   a sustained overload cannot raise it, and the limit cannot creep up (the drift of
//!   Netflix's Gradient2, whose baseline is a long average of the loaded latency).

use std::time::Duration;

use super::End;
use crate::rng::Rng;
use crate::time::Instant;

/// Grow while the median is within this ratio of the no-load latency.
const GROW_BELOW: f64 = 1.05;
/// Cut when the median is beyond this ratio. Narrow enough to keep the in-flight count near a
/// backend's knee; wide enough, with cohorts of 64 or more and a baseline that is the median of
/// three probes, that noise does not read as a queue (the simulator chose these).
const SHRINK_ABOVE: f64 = 1.2;
/// Where a cut aims.
const TARGET: f64 = 1.1;
/// The growth per window of a used limit with no queue at all; less as the queue nears
/// [`GROW_BELOW`]. Fast, since a cut to `TARGET / r` undoes an overshoot in one window.
const GROWTH: f64 = 0.25;
/// Failures and timeouts beyond this share of a window's ends cut the limit.
const BAD_RATIO: f64 = 0.02;
/// A window's cohort, at least; and the limit.
const MIN_SAMPLES: u32 = 64;
/// A window closes after this long (or ten no-load latencies if longer), whoever is missing.
const MAX_WINDOW: Duration = Duration::from_secs(1);
/// Latencies kept per window (a uniform sample of them beyond this).
const KEPT: usize = 64;
const PROBE_EVERY: Duration = Duration::from_secs(30);
const PROBE_SAMPLES: u32 = 64;
const PROBE_MAX: Duration = Duration::from_secs(1);
const PROBES_KEPT: usize = 3;
/// A probe needs this many samples to replace the no-load latency.
const PROBE_MIN_SAMPLES: usize = 3;
/// After a cut to under half the limit the last probe saw, the baseline may be stale (the
/// backend got slower per request): probe again, no sooner than this after the last.
const EARLY_PROBE_AFTER: Duration = Duration::from_secs(2);
/// The first probe comes soon: the first window's latency may have been measured loaded.
const FIRST_PROBE: Duration = Duration::from_secs(2);

pub(super) struct Adaptive {
    min: f64,
    max: f64,
    limit: f64,
    /// Microseconds; `None` until the first window closes. The median of `probes`.
    no_load: Option<f64>,
    /// The last [`PROBES_KEPT`] measures, oldest first: one probe's error (a median of 8 to 64 has
    /// one of several percent) moves the baseline only if the next agrees.
    probes: Vec<f64>,
    /// The sequence number of the next admission.
    next_seq: u64,
    window: Window,
    probe: Probe,
    next_probe: Instant,
    last_probe: Instant,
    limit_at_probe: f64,
    /// Whether the clocks above were set from a call's instant (rather than the creation's).
    anchored: bool,
}

struct Window {
    start: Instant,
    cohort: Cohort,
    /// Every end but the abandoned, of the cohort or not.
    ends: u32,
    bad: u32,
    saturated: bool,
}

/// The requests admitted with sequence numbers `first..first + size`, and their latencies.
struct Cohort {
    first: u64,
    size: u32,
    ended: u32,
    sampled: u32,
    kept: Vec<u64>,
}

enum Probe {
    Idle,
    /// The limit is halved; waiting for the in-flight count to fall under it.
    Draining {
        since: Instant,
    },
    /// Collecting the latencies of a cohort admitted under the halved limit.
    Measuring {
        since: Instant,
        cohort: Cohort,
    },
}

impl Cohort {
    fn new(first: u64, size: u32) -> Cohort {
        Cohort {
            first,
            size,
            ended: 0,
            sampled: 0,
            kept: Vec::with_capacity(KEPT.min(size as usize)),
        }
    }

    /// Counts the end of request `seq` if it is a member; keeps a uniform sample of the
    /// members' latencies (reservoir sampling).
    fn end(&mut self, seq: u64, latency: Option<Duration>, rng: &Rng) {
        let member = seq >= self.first && seq - self.first < u64::from(self.size);
        if !member {
            return;
        }
        self.ended = self.ended.saturating_add(1);
        let Some(l) = latency else { return };
        self.sampled = self.sampled.saturating_add(1);
        if self.kept.len() < KEPT {
            self.kept.push(micros(l));
        } else {
            let slot = rng.u64() % u64::from(self.sampled);
            if let Some(s) = usize::try_from(slot)
                .ok()
                .and_then(|i| self.kept.get_mut(i))
            {
                *s = micros(l);
            }
        }
    }

    fn complete(&self) -> bool {
        self.ended >= self.size
    }

    /// Whether every member admitted so far has ended: only then is the median not merely
    /// that of the quickest.
    fn whole(&self, next_seq: u64) -> bool {
        let admitted = next_seq.wrapping_sub(self.first).min(u64::from(self.size));
        u64::from(self.ended) >= admitted
    }
}

fn median(values: &mut [u64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mid = values.len() / 2;
    let (_, m, _) = values.select_nth_unstable(mid);
    Some(*m as f64)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// `base` jittered uniformly by half either way.
fn jittered(base: Duration, rng: &Rng) -> Duration {
    base.mul_f64(0.5 + rng.f64())
}

impl Adaptive {
    /// `min <= initial <= max` is the policy's to check; here they are only put in order.
    pub(super) fn new(min: u32, max: u32, initial: u32, now: Instant, rng: &Rng) -> Adaptive {
        let min = f64::from(min.max(1));
        let max = f64::from(max).max(min);
        let limit = f64::from(initial).clamp(min, max);
        Adaptive {
            min,
            max,
            limit,
            no_load: None,
            probes: Vec::with_capacity(PROBES_KEPT),
            next_seq: 0,
            window: Window {
                start: now,
                cohort: Cohort::new(0, MIN_SAMPLES),
                ends: 0,
                bad: 0,
                saturated: false,
            },
            probe: Probe::Idle,
            next_probe: now + jittered(FIRST_PROBE, rng),
            last_probe: now,
            limit_at_probe: limit,
            anchored: false,
        }
    }

    /// The limit.
    pub(super) fn limit(&self) -> u32 {
        // In range by construction (min..=max of u32 values); `as` saturates regardless.
        self.limit.round() as u32
    }

    /// Whether standard and batch see a halved limit: a refusal then is the probe's.
    pub(super) fn probing(&self) -> bool {
        !matches!(self.probe, Probe::Idle)
    }

    /// The limit standard and batch see: halved during a probe. Critical keeps the whole
    /// limit: a probe never refuses it, and it is too small a share to hide the queue.
    pub(super) fn probe_limit(&self) -> u32 {
        match self.probe {
            Probe::Idle => self.limit(),
            _ => (self.limit * 0.5).max(self.min).round() as u32,
        }
    }

    pub(super) fn no_load(&self) -> Option<Duration> {
        self.no_load.map(|us| Duration::from_micros(us as u64))
    }

    /// Numbers an admission, for the cohorts.
    pub(super) fn admitted(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq = seq.wrapping_add(1);
        seq
    }

    /// A class reached its ceiling: the limit is in use, so headroom may be learned.
    pub(super) fn saturated(&mut self) {
        self.window.saturated = true;
    }

    /// Starts, advances or ends a probe; called before every admission.
    pub(super) fn tick(&mut self, now: Instant, in_flight: u32, rng: &Rng) {
        if !self.anchored {
            // Created by a driver without the time: everything is timed from the first call.
            self.anchored = true;
            self.next_probe = now + jittered(FIRST_PROBE, rng);
            self.last_probe = now;
            self.restart(now);
        }
        match &mut self.probe {
            Probe::Idle => {
                if now >= self.next_probe {
                    self.probe = Probe::Draining { since: now };
                    self.tick(now, in_flight, rng);
                }
            }
            Probe::Draining { since } => {
                let since = *since;
                if now.duration_since(since) >= PROBE_MAX {
                    self.end_probe(now, rng);
                } else if in_flight <= self.probe_limit() {
                    self.probe = Probe::Measuring {
                        since,
                        // Two rounds of the halved limit at most: a probe at a small limit
                        // must end within PROBE_MAX too, or it would never measure.
                        cohort: Cohort::new(
                            self.next_seq,
                            self.probe_limit().saturating_mul(2).clamp(8, PROBE_SAMPLES),
                        ),
                    };
                }
            }
            Probe::Measuring { since, cohort } => {
                if now.duration_since(*since) >= PROBE_MAX || cohort.complete() {
                    self.end_probe(now, rng);
                }
            }
        }
    }

    fn end_probe(&mut self, now: Instant, rng: &Rng) {
        let mut disagrees = false;
        if let Probe::Measuring { cohort, .. } = &mut self.probe {
            if cohort.kept.len() >= PROBE_MIN_SAMPLES && cohort.whole(self.next_seq) {
                if let Some(m) = median(&mut cohort.kept) {
                    self.measured(m);
                    // A measure far from the baseline kept is confirmed (or not) soon, not in
                    // half a minute: the backend may have changed.
                    disagrees = self.no_load.is_some_and(|b| (m - b).abs() > 0.25 * b);
                }
            }
        }
        self.probe = Probe::Idle;
        self.last_probe = now;
        self.limit_at_probe = self.limit;
        let every = if disagrees {
            EARLY_PROBE_AFTER
        } else {
            PROBE_EVERY
        };
        self.next_probe = now + jittered(every, rng);
        self.restart(now);
    }

    /// A new window, its cohort the next admissions.
    fn measured(&mut self, us: f64) {
        if self.probes.len() >= PROBES_KEPT {
            self.probes.remove(0);
        }
        self.probes.push(us);
        let mut sorted = self.probes.clone();
        sorted.sort_by(f64::total_cmp);
        self.no_load = sorted.get(sorted.len() / 2).copied();
    }

    fn restart(&mut self, now: Instant) {
        let size = MIN_SAMPLES.max(self.limit as u32);
        self.window = Window {
            start: now,
            cohort: Cohort::new(self.next_seq, size),
            ends: 0,
            bad: 0,
            saturated: false,
        };
    }

    /// The request admitted as `seq` ended at `now`.
    pub(super) fn on_end(&mut self, seq: u64, end: &End, now: Instant, rng: &Rng) {
        let (latency, bad) = match end {
            End::Done { latency } => (Some(*latency), false),
            End::TimedOut { latency } => (Some(*latency), true),
            // A fast error says nothing of queueing; a slow one is counted by its status.
            End::Failed { .. } => (None, true),
            End::Abandoned => (None, false),
        };
        match &mut self.probe {
            Probe::Measuring { cohort, .. } => {
                cohort.end(seq, latency, rng);
                if cohort.complete() {
                    self.end_probe(now, rng);
                }
                return;
            }
            Probe::Draining { .. } => return,
            Probe::Idle => {}
        }
        let longest = MAX_WINDOW.max(self.no_load().unwrap_or_default() * 10);
        let w = &mut self.window;
        w.cohort.end(seq, latency, rng);
        if matches!(end, End::Abandoned) {
            return;
        }
        w.ends = w.ends.saturating_add(1);
        if bad {
            w.bad = w.bad.saturating_add(1);
        }
        let elapsed = now.duration_since(w.start);
        let failing = w.ends >= MIN_SAMPLES && f64::from(w.bad) > BAD_RATIO * f64::from(w.ends);
        if w.cohort.complete() || failing || elapsed >= longest {
            self.close(now);
        }
    }

    fn close(&mut self, now: Instant) {
        let bad_ratio = f64::from(self.window.bad) / f64::from(self.window.ends.max(1));
        let med = if self.window.cohort.whole(self.next_seq) {
            median(&mut self.window.cohort.kept)
        } else {
            None
        };
        let saturated = self.window.saturated;
        let mut cut = false;
        if bad_ratio > BAD_RATIO {
            self.limit *= (1.0 - bad_ratio).max(0.5);
            cut = true;
        } else if let Some(med) = med {
            match self.no_load {
                None => self.measured(med),
                Some(base) if base > 0.0 => {
                    let r = med / base;
                    // An unused limit is not what made the latency: it is not cut for it.
                    if r > SHRINK_ABOVE && saturated {
                        self.limit *= (TARGET / r).max(0.5);
                        cut = true;
                    } else if r < GROW_BELOW && saturated {
                        let headroom = ((GROW_BELOW - r) / (GROW_BELOW - 1.0)).min(1.0);
                        self.limit += (self.limit * GROWTH * headroom).max(1.0);
                    }
                }
                Some(_) => self.measured(med),
            }
        }
        self.limit = self.limit.clamp(self.min, self.max);
        if cut
            && self.limit < self.limit_at_probe * 0.5
            && now.duration_since(self.last_probe) >= EARLY_PROBE_AFTER
        {
            self.next_probe = now;
        }
        self.restart(now);
    }
}
