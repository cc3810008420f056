//! Interned rules: a compact key names its rule by a 32-bit id instead of carrying 24 bytes.
//!
//! Most deployments apply a handful of rules to millions of keys (one per tier or endpoint), so
//! the rule is stored once here and each key keeps its id and reference.
//!
//! Threads: commands, loading and `COPY` run on Redis's main thread, which alone creates ids and
//! takes references. Values can also be freed on a lazy-free thread (`FLUSHALL ASYNC`), so a
//! reference is dropped with one atomic decrement and never takes a lock; the slots live at fixed
//! addresses for the life of the process. A forked child (`BGSAVE`, AOF rewrite) only reads
//! slots. The index is locked only on the main thread, which never forks while holding it, so a
//! child never inherits it locked.
//!
//! An id whose count reaches zero keeps its rule until the main thread reclaims it while interning
//! (the count can only rise on the main thread, so a zero seen there stays zero).

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};

use crate::core::error::Error;
use crate::core::rule::{Algo, Rule};

/// Slots in segment 0; segment `k` holds `FIRST << k`, so ids reach `FIRST * (2^SEGMENTS - 1)`,
/// just under `u32::MAX`.
const FIRST: usize = 64;
const SEGMENTS: usize = 26;
const MAX_ID: u32 = (FIRST as u32) * ((1 << SEGMENTS) - 1);

/// One interned rule and the number of values that name it.
#[derive(Default)]
struct Slot {
    limit: AtomicU64,
    period_us: AtomicU64,
    burst: AtomicU64,
    refs: AtomicU64,
}

static SLOTS: [OnceLock<Box<[Slot]>>; SEGMENTS] = [const { OnceLock::new() }; SEGMENTS];

/// The slot of `id`, if its segment exists.
fn slot(id: NonZeroU32) -> Option<&'static Slot> {
    let n = (id.get() - 1) as usize;
    let q = n / FIRST + 1;
    let k = (usize::BITS - 1 - q.leading_zeros()) as usize;
    let offset = n - FIRST * ((1 << k) - 1);
    SLOTS.get(k)?.get()?.get(offset)
}

/// The slot of `id`, creating its segment (main thread only).
fn slot_or_create(id: NonZeroU32) -> Option<&'static Slot> {
    let n = (id.get() - 1) as usize;
    let k = (usize::BITS - 1 - (n / FIRST + 1).leading_zeros()) as usize;
    SLOTS
        .get(k)?
        .get_or_init(|| (0..FIRST << k).map(|_| Slot::default()).collect());
    slot(id)
}

/// Which id holds which rule (main thread only).
struct Index {
    ids: HashMap<Rule, NonZeroU32>,
    /// Reclaimed ids, reused before new ones.
    free: Vec<NonZeroU32>,
    /// Ids handed out so far: the next new id is `used + 1`.
    used: u32,
    /// The rule interned last: keys created in a row nearly always share it, and this skips
    /// the hash.
    last: Option<(Rule, NonZeroU32)>,
    /// `ids.len()` after the last reclaim: the next runs when the index has doubled.
    reclaimed_at: usize,
}

static INDEX: Mutex<Option<Index>> = Mutex::new(None);

/// A counted reference to an interned rule: dropping it releases the rule.
#[derive(Debug)]
pub struct RuleRef(NonZeroU32);

impl RuleRef {
    /// The rule this reference names.
    pub fn rule(&self) -> Result<Rule, Error> {
        let s = slot(self.0).ok_or(Error::BadPayload("unknown rule id"))?;
        let (limit, period_us, burst) = (
            s.limit.load(Relaxed),
            s.period_us.load(Relaxed),
            s.burst.load(Relaxed),
        );
        // Validated again, cheaply, so that nothing here can feed the arithmetic a zero.
        Rule::restore(Algo::Gcra, limit, period_us, burst)
    }
}

impl Clone for RuleRef {
    fn clone(&self) -> Self {
        if let Some(s) = slot(self.0) {
            s.refs.fetch_add(1, Relaxed);
        }
        RuleRef(self.0)
    }
}

impl Drop for RuleRef {
    fn drop(&mut self) {
        if let Some(s) = slot(self.0) {
            s.refs.fetch_sub(1, Relaxed);
        }
    }
}

/// A reference to `rule`'s id, interning it if needed; `None` when every id is taken (the
/// caller then keeps the rule inline).
pub fn intern(rule: Rule) -> Option<RuleRef> {
    let mut guard = INDEX
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let index = guard.get_or_insert_with(|| Index {
        ids: HashMap::new(),
        free: Vec::new(),
        used: 0,
        last: None,
        reclaimed_at: 0,
    });
    let id = match index.last {
        Some((last, id)) if last == rule => id,
        _ => match index.ids.get(&rule) {
            Some(&id) => id,
            None => index.insert(rule)?,
        },
    };
    index.last = Some((rule, id));
    slot(id)?.refs.fetch_add(1, Relaxed);
    Some(RuleRef(id))
}

impl Index {
    fn insert(&mut self, rule: Rule) -> Option<NonZeroU32> {
        if self.ids.len() >= 2 * self.reclaimed_at.max(FIRST) {
            self.reclaim();
        }
        let id = match self.free.pop() {
            Some(id) => id,
            None if self.used < MAX_ID => {
                self.used += 1;
                NonZeroU32::new(self.used)?
            }
            None => return None,
        };
        let s = slot_or_create(id)?;
        s.limit.store(rule.limit(), Relaxed);
        s.period_us.store(rule.period_us(), Relaxed);
        s.burst.store(rule.burst(), Relaxed);
        self.ids.insert(rule, id);
        Some(id)
    }

    /// Frees the ids no value names any more.
    fn reclaim(&mut self) {
        let free = &mut self.free;
        self.ids.retain(|_, id| {
            let unused = slot(*id).is_some_and(|s| s.refs.load(Relaxed) == 0);
            if unused {
                free.push(*id);
            }
            !unused
        });
        self.last = None;
        self.reclaimed_at = self.ids.len();
    }
}

/// Rules interned and still named by some value (`INFO rl`).
pub fn count() -> usize {
    let guard = INDEX
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    guard.as_ref().map_or(0, |index| {
        index
            .ids
            .values()
            .filter(|id| slot(**id).is_some_and(|s| s.refs.load(Relaxed) > 0))
            .count()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(limit: u64) -> Rule {
        Rule::new(Algo::Gcra, limit, 1_000_000, None).unwrap()
    }

    #[test]
    fn ids_map_to_distinct_slots_across_segments() {
        let probe = [1, 2, 64, 65, 191, 192, 193, 100_000, MAX_ID];
        let mut seen = Vec::new();
        for id in probe {
            let id = NonZeroU32::new(id).unwrap();
            let n = (id.get() - 1) as usize;
            let k = (usize::BITS - 1 - (n / FIRST + 1).leading_zeros()) as usize;
            let offset = n - FIRST * ((1 << k) - 1);
            assert!(k < SEGMENTS && offset < FIRST << k, "id {id}: {k} {offset}");
            seen.push((k, offset));
        }
        seen.dedup();
        assert_eq!(seen.len(), probe.len());
    }

    #[test]
    fn one_id_per_rule_reference_counted_and_reused() {
        // Rules unique to this test: the index is shared with every other test in the process.
        let a = intern(rule(777_001)).unwrap();
        let b = intern(rule(777_001)).unwrap();
        let c = intern(rule(777_002)).unwrap();
        assert_eq!(a.0, b.0);
        assert_ne!(a.0, c.0);
        assert_eq!(a.rule().unwrap(), rule(777_001));
        assert_eq!(c.rule().unwrap(), rule(777_002));
        assert_eq!(slot(a.0).unwrap().refs.load(Relaxed), 2);
        let d = a.clone();
        drop(a);
        drop(b);
        assert_eq!(slot(d.0).unwrap().refs.load(Relaxed), 1);
        assert_eq!(d.rule().unwrap(), rule(777_001));
    }

    #[test]
    fn unused_ids_are_reclaimed() {
        let kept = intern(rule(888_000)).unwrap();
        let mut seen = std::collections::HashSet::new();
        for limit in 888_001..888_001 + 5_000 {
            let r = intern(rule(limit)).unwrap();
            seen.insert(r.0);
        }
        // 5,000 rules, each dropped at once: far fewer ids than rules.
        assert!(seen.len() < 1_000, "{} ids", seen.len());
        assert_eq!(kept.rule().unwrap(), rule(888_000));
    }
}
