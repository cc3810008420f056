//! What a run counted (units arrived and admitted per tenant, region and 100 ms slot) and what
//! is read from it, over the measured time only.

use crate::{
    Scenario, BURST, EVERY_MS, LIMIT, PERIOD_MS, REGIONS, RESERVE, SLOT_MS, TENANTS, WARMUP_MS,
};

pub struct Counts {
    slots: usize,
    arrived: Vec<u32>,
    admitted: Vec<u32>,
    /// What each region enforced at the start of each slot (`None`: no regional limit).
    enforced: Vec<Option<u64>>,
}

/// One contender's results in one scenario.
#[derive(Debug, Clone)]
pub struct Report {
    /// The most any tenant's regions admitted together in a window of `EVERY_MS` (sliding by
    /// 100 ms) beyond what one global limiter could: `LIMIT * EVERY_MS / PERIOD_MS + BURST`.
    /// Negative when every window stayed under it.
    pub window_over: i64,
    /// The same window's peak, as a multiple of `LIMIT * EVERY_MS / PERIOD_MS`.
    pub window_peak: f64,
    /// The most any tenant admitted in a window of 60 s (sliding by `EVERY_MS`; the whole run
    /// if shorter) beyond `LIMIT` per period and one burst, as a share of `LIMIT` per period
    /// over the window (negative when under).
    pub over_run: f64,
    /// Admitted (capped at the reference) over the reference: for each tenant and window of
    /// `EVERY_MS`, the smaller of the pool (`LIMIT - RESERVE` per period) and its demand.
    pub utilization: f64,
    /// For each shift of demand: seconds until every region of every tenant is served (it
    /// enforces at least 90 % of its demand share of the pool, or of its demand if less) and
    /// stays so for two reports (or to the next shift); `None` if it never is. (A contender without regional
    /// limits, the ideal bucket, is always served.)
    pub converge: Vec<Option<f64>>,
    /// The share of the measured time in which every region was served so.
    pub served: f64,
    /// Regions of a tenant that had demand (5 units or more in a 1 s bin) and admitted nothing
    /// in that bin: how many (tenant, region) pairs, and the longest such stretch in seconds.
    pub starved_pairs: usize,
    pub starved_secs: f64,
    /// The most any tenant's regions enforced at once, summed, as a multiple of the limit
    /// (`None` for the ideal bucket, which has no regional limits).
    pub most_enforced: Option<f64>,
    /// The most units the regions' limits summed above the limit in one cycle of reports
    /// (the excess of their sum integrated over the cycle): what the reserve must cover.
    pub excess_units: Option<f64>,
}

/// The long window the overshoot over time is measured in.
pub const RUN_WINDOW_MS: u64 = 60_000;
pub const WINDOW_ALLOWANCE: u64 = LIMIT * EVERY_MS / PERIOD_MS + BURST;
/// The reserve's units in a window of `EVERY_MS`.
pub const RESERVE_UNITS: u64 = RESERVE * EVERY_MS / PERIOD_MS;

impl Counts {
    pub fn new(end_ms: u64) -> Counts {
        let slots = (end_ms / SLOT_MS) as usize;
        let n = TENANTS * REGIONS * slots;
        Counts {
            slots,
            arrived: vec![0; n],
            admitted: vec![0; n],
            enforced: vec![None; n],
        }
    }

    fn at(&self, tenant: usize, region: usize, slot: usize) -> usize {
        (tenant * REGIONS + region) * self.slots + slot
    }

    pub fn record(&mut self, tenant: usize, region: usize, ms: u64, admitted: bool) {
        let i = self.at(tenant, region, (ms / SLOT_MS) as usize);
        if let Some(a) = self.arrived.get_mut(i) {
            *a += 1;
        }
        if admitted {
            if let Some(a) = self.admitted.get_mut(i) {
                *a += 1;
            }
        }
    }

    pub fn enforced(&mut self, tenant: usize, region: usize, ms: u64, limit: Option<u64>) {
        let i = self.at(tenant, region, (ms / SLOT_MS) as usize);
        if let Some(e) = self.enforced.get_mut(i) {
            *e = limit;
        }
    }

    /// Units of `tenant` in `region` (all regions: `None`) over slots `[from, to)`.
    fn sum(&self, of: &[u32], tenant: usize, region: Option<usize>, from: usize, to: usize) -> u64 {
        let regions = region.map_or(0..REGIONS, |r| r..r + 1);
        regions
            .map(|r| {
                let base = self.at(tenant, r, 0);
                of[base + from..base + to]
                    .iter()
                    .map(|&n| u64::from(n))
                    .sum::<u64>()
            })
            .sum()
    }

    pub fn report(&self, sc: &Scenario) -> Report {
        let first = (WARMUP_MS / SLOT_MS) as usize;
        let end = self.slots;
        let window = (EVERY_MS / SLOT_MS) as usize;
        let bin = (1_000 / SLOT_MS) as usize;
        let pool = LIMIT - RESERVE;

        let mut window_over = i64::MIN;
        let mut window_peak: f64 = 0.0;
        let mut over_run = f64::MIN;
        let (mut served, mut reference) = (0u64, 0u64);
        for t in 0..TENANTS {
            for from in first..=end - window {
                let adm = self.sum(&self.admitted, t, None, from, from + window);
                window_over = window_over.max(adm as i64 - WINDOW_ALLOWANCE as i64);
                let per = (LIMIT * EVERY_MS / PERIOD_MS) as f64;
                window_peak = window_peak.max(adm as f64 / per);
            }
            // Windows of 60 s (the whole run if shorter), sliding by `EVERY_MS`.
            let long = ((RUN_WINDOW_MS / SLOT_MS) as usize).min(end - first);
            let span = (long as u64 * SLOT_MS * LIMIT / PERIOD_MS) as f64;
            for from in (first..=end - long).step_by(window) {
                let adm = self.sum(&self.admitted, t, None, from, from + long);
                over_run = over_run.max((adm as f64 - span - BURST as f64) / span);
            }
            for from in (first..=end - window).step_by(window) {
                let arr = self.sum(&self.arrived, t, None, from, from + window);
                let adm = self.sum(&self.admitted, t, None, from, from + window);
                let r = arr.min(pool * EVERY_MS / PERIOD_MS);
                reference += r;
                served += adm.min(r);
            }
        }

        // A region is served in a slot if it enforces at least 90 % of its demand share of the
        // pool (of its demand, if less); regions asking under 10 units a second are not judged.
        let served_at = |slot: usize| {
            let ms = slot as u64 * SLOT_MS;
            (0..TENANTS).all(|t| {
                let rates: Vec<f64> = (0..REGIONS).map(|r| sc.rate(t, r, ms)).collect();
                let total: f64 = rates.iter().sum();
                (0..REGIONS).all(|r| {
                    let rate = rates[r];
                    let share = (pool * 1_000 / PERIOD_MS) as f64 * rate / total.max(1e-9);
                    let target = rate.min(share);
                    rate < 10.0
                        || self.enforced[self.at(t, r, slot)]
                            .is_none_or(|e| e as f64 >= 0.9 * target)
                })
            })
        };
        let good: Vec<bool> = (first..end).map(served_at).collect();
        let served_share = good.iter().filter(|&&g| g).count() as f64 / good.len().max(1) as f64;
        let shifts: Vec<usize> = sc
            .shifts()
            .iter()
            .map(|ms| (ms / SLOT_MS) as usize)
            .collect();
        let converge = shifts
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let horizon = shifts.get(i + 1).copied().unwrap_or(good.len());
                // The first slot after the shift from which every slot is served for two
                // reports (or to the next shift): later lapses are the demand's own noise
                // measured over one report, and show in `served`.
                let hold = (2 * EVERY_MS / SLOT_MS) as usize;
                (s..horizon)
                    .find(|&k| (k..(k + hold).min(horizon)).all(|j| good[j]) && k + 1 < horizon)
                    .map(|k| (k - s) as f64 * SLOT_MS as f64 / 1_000.0)
            })
            .collect();

        let (mut starved_pairs, mut longest) = (0, 0usize);
        for t in 0..TENANTS {
            for r in 0..REGIONS {
                let (mut run, mut worst) = (0, 0);
                for from in first..=end - bin {
                    let arr = self.sum(&self.arrived, t, Some(r), from, from + bin);
                    let adm = self.sum(&self.admitted, t, Some(r), from, from + bin);
                    run = if arr >= 5 && adm == 0 { run + 1 } else { 0 };
                    worst = worst.max(run);
                }
                if worst > 0 {
                    starved_pairs += 1;
                    longest = longest.max(worst);
                }
            }
        }
        let starved_secs = if longest == 0 {
            0.0
        } else {
            ((longest - 1) * SLOT_MS as usize) as f64 / 1_000.0 + 1.0
        };
        Report {
            window_over,
            window_peak,
            over_run,
            utilization: served as f64 / reference.max(1) as f64,
            converge,
            served: served_share,
            starved_pairs,
            starved_secs,
            most_enforced: None,
            excess_units: None,
        }
    }
}
