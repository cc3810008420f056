//! The negative cache of `clients/CONTRACT.md` section 3: after the store refuses, refuse the same
//! request locally for a while without a round trip, so a denial flood costs the store about
//! one call per key per `max`.
//!
//! It may only ever refuse for less time than the store would: an entry lasts min(R, `max`)
//! and only refuses requests at least as costly as the one refused (a cheaper one might fit).

use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::Duration;

use crate::policy::NegativeCacheSpec;
use crate::table::{Table, TableUse};
use crate::time::Instant;

#[derive(Debug, Clone, Copy)]
struct Entry {
    cost: u64,
    until: Instant,
}

/// Process-wide and bounded: at most `entries` keys and `max_bytes`, the least recently used
/// evicted first.
pub struct NegativeCache {
    max: Duration,
    // Keyed by rule name and store key joined by a length prefix, so no pair of names can
    // collide with another ("ab"+"c" vs "a"+"bc").
    entries: Mutex<Table<Entry>>,
}

/// The slot of `rule` and `key`: the key of the negative cache, and of the chunks of grant rules.
pub(crate) fn slot(rule: &str, key: &str) -> String {
    let mut slot = String::with_capacity(rule.len() + key.len() + 4);
    write_slot(&mut slot, rule, key);
    slot
}

fn write_slot(out: &mut String, rule: &str, key: &str) {
    push_decimal(out, rule.len());
    out.push(':');
    out.push_str(rule);
    out.push_str(key);
}

// Written by hand: `write!` costs more than the rest of a lookup's slot, on every request.
fn push_decimal(out: &mut String, n: usize) {
    if n >= 10 {
        push_decimal(out, n / 10);
    }
    out.push(char::from(b'0' + (n % 10) as u8));
}

thread_local! {
    // Where a lookup's slot is written, so that checking a request allocates nothing.
    static SLOT: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// `f` of the slot of `rule` and `key` (see [`slot`]), written in this thread's buffer, so that
/// a lookup allocates nothing; in a buffer of its own if `f` itself looks up a slot.
pub(crate) fn with_slot<R>(rule: &str, key: &str, f: impl FnOnce(&str) -> R) -> R {
    SLOT.with(|buffer| match buffer.try_borrow_mut() {
        Ok(mut slot) => {
            slot.clear();
            write_slot(&mut slot, rule, key);
            f(&slot)
        }
        Err(_) => f(&self::slot(rule, key)),
    })
}

impl NegativeCache {
    pub fn new(entries: NonZeroUsize, max: Duration, max_bytes: usize) -> NegativeCache {
        NegativeCache {
            max,
            entries: Mutex::new(Table::new(entries, max_bytes)),
        }
    }

    pub fn from_spec(spec: &NegativeCacheSpec, max_bytes: usize) -> NegativeCache {
        NegativeCache::new(
            NonZeroUsize::new(spec.entries).unwrap_or(NonZeroUsize::MIN),
            spec.max,
            max_bytes,
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table<Entry>> {
        // A panic elsewhere while holding the lock leaves a consistent map: keep serving.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that the store refused `cost` units under `rule` on `key`, asking to retry after
    /// `retry_after`. The newest refusal replaces an older one: it is the freshest knowledge.
    pub fn refused(&self, rule: &str, key: &str, cost: u64, retry_after: Duration, now: Instant) {
        let hold = retry_after.min(self.max);
        // An instant beyond the clock's range cannot be held; not caching is always safe.
        let Some(until) = now.checked_add(hold).filter(|_| !hold.is_zero()) else {
            return;
        };
        self.lock().put(slot(rule, key), Entry { cost, until });
    }

    /// The remaining wait if a request of `cost` units under `rule` on `key` is refused locally.
    pub fn check(&self, rule: &str, key: &str, cost: u64, now: Instant) -> Option<Duration> {
        with_slot(rule, key, |slot| {
            let mut map = self.lock();
            let entry = *map.get(slot)?;
            if now >= entry.until {
                map.pop(slot);
                return None;
            }
            (cost >= entry.cost).then(|| entry.until.duration_since(now))
        })
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Its entries and their bytes (at most its budget).
    pub fn usage(&self) -> TableUse {
        self.lock().usage()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
