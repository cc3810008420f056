//! `log`: an exact sliding log of admitted requests.
//!
//! One entry per admitted request (its time and cost; refusals are not recorded, so a flood does
//! not grow it), oldest first, with a running total. A call first drops the entries that have
//! left the window, so its work is bounded by what expires; the log never holds more than
//! `limit` units, and `limit` is at most `MAX_LOG_LIMIT`.

use std::collections::VecDeque;

use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::rule::Rule;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub at_us: u64,
    pub cost: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Log {
    entries: VecDeque<Entry>,
    total: u64,
}

impl Log {
    /// Rebuilds a log from entries oldest first; `None` if they are out of order.
    pub fn from_entries(entries: VecDeque<Entry>) -> Option<Log> {
        let ordered = entries
            .iter()
            .zip(entries.iter().skip(1))
            .all(|(a, b)| a.at_us <= b.at_us);
        let total = entries.iter().map(|e| u64::from(e.cost)).sum();
        (ordered && entries.iter().all(|e| e.cost > 0)).then_some(Log { entries, total })
    }

    pub fn entries(&self) -> &VecDeque<Entry> {
        &self.entries
    }

    /// Units admitted within the window ending at `now_us`.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Entries and units still inside the window ending at `now_us`.
    pub fn live_at(&self, rule: &Rule, now_us: u64) -> (usize, u64) {
        let (gone, total) = self.live(rule, now_us.max(self.newest_us()));
        (self.entries.len() - gone, total)
    }

    /// When the newest entry was recorded (0 for an empty log).
    pub fn newest_us(&self) -> u64 {
        self.entries.back().map_or(0, |e| e.at_us)
    }

    /// How many of the oldest entries have left the window `(now − period, now]`, and the units
    /// still inside it. Reading does not drop them: a refusal or a dry run changes nothing, not
    /// even bytes a digest would see.
    fn live(&self, rule: &Rule, now_us: u64) -> (usize, u64) {
        let mut gone = 0;
        let mut total = self.total;
        for e in &self.entries {
            if e.at_us.saturating_add(rule.period_us()) > now_us {
                break;
            }
            gone += 1;
            total -= u64::from(e.cost);
        }
        (gone, total)
    }

    /// Decides `cost` at `now_us` without changing anything.
    pub fn decide(&self, rule: &Rule, cost: u64, now_us: u64) -> Decision {
        let now_us = now_us.max(self.newest_us());
        let (gone, total) = self.live(rule, now_us);
        let limit = rule.limit();
        let allowed = total.saturating_add(cost) <= limit;
        let after = if allowed { total + cost } else { total };
        let (retry_after_us, full_at) = if allowed && cost > 0 {
            (0, now_us.saturating_add(rule.period_us()))
        } else if allowed {
            (0, self.full_at_us(rule))
        } else {
            let at = self.admit_at(rule, gone, total, cost);
            (at.saturating_sub(now_us), self.full_at_us(rule))
        };
        Decision {
            allowed,
            remaining: limit.saturating_sub(after),
            retry_after_us,
            reset_after_us: full_at.saturating_sub(now_us),
            capacity: limit,
        }
    }

    /// Records an admitted request, dropping the entries that left the window.
    pub fn record(&mut self, rule: &Rule, cost: u64, now_us: u64) {
        let now_us = now_us.max(self.newest_us());
        let (gone, _) = self.live(rule, now_us);
        for e in self.entries.drain(..gone) {
            self.total -= u64::from(e.cost);
        }
        // cost ≤ limit ≤ MAX_LOG_LIMIT, which fits u32.
        let cost32 = u32::try_from(cost).unwrap_or(u32::MAX);
        self.entries.push_back(Entry {
            at_us: now_us,
            cost: cost32,
        });
        self.total += u64::from(cost32);
    }

    /// When enough of the oldest entries have left the window for `cost` to fit.
    fn admit_at(&self, rule: &Rule, gone: usize, total: u64, cost: u64) -> u64 {
        let mut excess = total.saturating_add(cost).saturating_sub(rule.limit());
        for e in self.entries.iter().skip(gone) {
            excess = excess.saturating_sub(u64::from(e.cost));
            if excess == 0 {
                return e.at_us.saturating_add(rule.period_us());
            }
        }
        self.full_at_us(rule)
    }

    /// Heap bytes held by the entries.
    pub fn heap_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Entry>()
    }
}

impl Algorithm for Log {
    fn fresh(_: &Rule) -> Log {
        Log::default()
    }

    /// Why no command could have written this log under `rule`.
    fn refused(&self, rule: &Rule) -> Option<&'static str> {
        (self.total() > rule.limit()).then_some("log holds more than its limit")
    }

    /// When the newest entry was recorded.
    fn time_floor(&self, _: &Rule) -> u64 {
        self.newest_us()
    }

    /// When the newest entry leaves the window: the log is then empty, like an absent key.
    fn full_at_us(&self, rule: &Rule) -> u64 {
        match self.entries.back() {
            Some(e) => e.at_us.saturating_add(rule.period_us()),
            None => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Decide;
    use crate::rule::Algo;
    use crate::sliding::Sliding;

    const S: u64 = 1_000_000;
    const T0: u64 = 1_764_000_000 * S;

    fn admit(log: &mut Log, rule: &Rule, cost: u64, now: u64) -> Decision {
        let d = log.decide(rule, cost, now);
        if d.allowed {
            log.record(rule, cost, now);
        }
        d
    }

    #[test]
    fn refuses_what_the_sliding_estimate_admits() {
        // Anonymous clients limited per IP address to 20 per 10 s; 18 requests arrive in the
        // previous window's final second, then requests keep coming 2.5 s into the new window.
        let rule = Rule::new(Algo::Log, 20, 10 * S, None).unwrap();
        let sliding = Rule::new(Algo::Sliding, 20, 10 * S, None).unwrap();
        let mut log = Log::default();
        let mut estimate = Sliding::default();
        for i in 0..18 {
            let at = T0 - S + i * 50_000;
            assert!(admit(&mut log, &rule, 1, at).allowed);
            estimate = estimate.decide(&sliding, 1, at).1;
        }
        let now = T0 + 2_500_000;
        let mut log_admitted = 0;
        let mut estimate_admitted = 0;
        let mut refusal = None;
        for _ in 0..6 {
            let (d, next) = estimate.decide(&sliding, 1, now);
            if d.allowed {
                estimate_admitted += 1;
                estimate = next;
            }
            let d = admit(&mut log, &rule, 1, now);
            if d.allowed {
                log_admitted += 1;
            } else {
                refusal.get_or_insert(d);
            }
        }
        // The estimate reads 18 × 0.75 = 13.5 and admits 6 more (19.5); the log knows 18 are
        // still inside the window and admits 2.
        assert_eq!(estimate_admitted, 6);
        assert_eq!(log_admitted, 2);
        // The oldest entry (T0 − 1 s) leaves at T0 + 9 s: 6.5 s from now.
        assert_eq!(refusal.map(|d| d.retry_after_ms()), Some(6_500));
    }

    #[test]
    fn refusals_are_not_recorded_and_work_is_bounded_by_expiry() {
        let rule = Rule::new(Algo::Log, 3, S, None).unwrap();
        let mut log = Log::default();
        for _ in 0..3 {
            assert!(admit(&mut log, &rule, 1, T0).allowed);
        }
        for _ in 0..1000 {
            assert!(!admit(&mut log, &rule, 1, T0 + 10).allowed);
        }
        assert_eq!(log.entries().len(), 3);
        let d = admit(&mut log, &rule, 2, T0 + S);
        assert!(d.allowed);
        assert_eq!(log.entries().len(), 1);
        assert_eq!(d.remaining, 1);
        assert_eq!(log.full_at_us(&rule), T0 + 2 * S);
    }

    #[test]
    fn retry_after_is_exact() {
        let rule = Rule::new(Algo::Log, 4, S, None).unwrap();
        let mut log = Log::default();
        admit(&mut log, &rule, 2, T0);
        admit(&mut log, &rule, 2, T0 + 300_000);
        let d = admit(&mut log, &rule, 3, T0 + 400_000);
        assert_eq!(
            d.retry_after_ms(),
            900,
            "both entries must leave: at T0 + 1.3 s"
        );
        assert!(!log.decide(&rule, 3, T0 + 1_299_999).allowed);
        assert!(log.decide(&rule, 3, T0 + 1_300_000).allowed);
    }

    #[test]
    fn a_clock_that_steps_back_keeps_entries() {
        let rule = Rule::new(Algo::Log, 1, S, None).unwrap();
        let mut log = Log::default();
        admit(&mut log, &rule, 1, T0 + 5 * S);
        assert!(!admit(&mut log, &rule, 1, T0).allowed);
    }

    #[test]
    fn out_of_order_entries_are_refused() {
        let e = |at_us| Entry { at_us, cost: 1 };
        assert!(Log::from_entries(VecDeque::from(vec![e(1), e(2)])).is_some());
        assert!(Log::from_entries(VecDeque::from(vec![e(2), e(1)])).is_none());
    }
}
