//! A table bounded in entries and in bytes (`clients/CONTRACT.md` section 12): a flood of
//! distinct or large identities cannot grow the process past either bound; the least recently
//! used entry goes first.

use std::borrow::Borrow;
use std::hash::Hash;
use std::mem::size_of;
use std::num::NonZeroUsize;

use lru::LruCache;

/// What an entry costs besides its key's bytes and its value: the key's `String`, the list
/// node's two links and the hash table's slot, rounded up.
const OVERHEAD: usize = 64;

/// What one table holds: entries, and the bytes they are counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableUse {
    pub entries: usize,
    pub bytes: usize,
}

impl std::ops::Add for TableUse {
    type Output = TableUse;

    fn add(self, other: TableUse) -> TableUse {
        TableUse {
            entries: self.entries.saturating_add(other.entries),
            bytes: self.bytes.saturating_add(other.bytes),
        }
    }
}

pub(crate) struct Table<V> {
    lru: LruCache<String, V>,
    bytes: usize,
    max_bytes: usize,
}

impl<V> Table<V> {
    pub(crate) fn new(entries: NonZeroUsize, max_bytes: usize) -> Table<V> {
        Table {
            lru: LruCache::new(entries),
            bytes: 0,
            max_bytes,
        }
    }

    /// The bytes an entry under `key` is counted.
    fn cost(key: &str) -> usize {
        key.len()
            .saturating_add(size_of::<V>())
            .saturating_add(OVERHEAD)
    }

    /// Makes room for a new entry under `key`: least recently used entries go until it fits
    /// both bounds. An entry larger than the whole budget still gets the table to itself, so
    /// a caller's own lookup never fails.
    fn make_room(&mut self, key: &str) {
        let cost = Self::cost(key);
        while !self.lru.is_empty()
            && (self.lru.len() >= self.lru.cap().get()
                || self.bytes.saturating_add(cost) > self.max_bytes)
        {
            if let Some((old, _)) = self.lru.pop_lru() {
                self.bytes = self.bytes.saturating_sub(Self::cost(&old));
            }
        }
        self.bytes = self.bytes.saturating_add(cost);
    }

    /// Inserts or replaces the entry under `key`, the most recently used.
    pub(crate) fn put(&mut self, key: String, value: V) {
        if !self.lru.contains(key.as_str()) {
            self.make_room(&key);
        }
        self.lru.put(key, value);
    }

    /// The entry under `key`, made the most recently used, inserted by `f` when absent. The
    /// key is copied only then: a lookup of an entry that is there allocates nothing.
    pub(crate) fn get_or_insert_mut(&mut self, key: &str, f: impl FnOnce() -> V) -> &mut V {
        if !self.lru.contains(key) {
            self.make_room(key);
        }
        self.lru.get_or_insert_mut_ref(key, f)
    }

    pub(crate) fn get<Q>(&mut self, key: &Q) -> Option<&V>
    where
        String: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.lru.get(key)
    }

    /// The entry under `key`, its place in the order unchanged.
    pub(crate) fn peek_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        String: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.lru.peek_mut(key)
    }

    pub(crate) fn pop<Q>(&mut self, key: &Q) -> Option<V>
    where
        String: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let (old, value) = self.lru.pop_entry(key)?;
        self.bytes = self.bytes.saturating_sub(Self::cost(&old));
        Some(value)
    }

    /// Every entry, most recently used first, their order unchanged.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&String, &mut V)> {
        self.lru.iter_mut()
    }

    pub(crate) fn len(&self) -> usize {
        self.lru.len()
    }

    /// The entries, and the bytes they are counted: at most the budget (or one entry over it).
    pub(crate) fn usage(&self) -> TableUse {
        TableUse {
            entries: self.lru.len(),
            bytes: self.bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(entries: usize, max_bytes: usize) -> Table<u64> {
        Table::new(NonZeroUsize::new(entries).unwrap(), max_bytes)
    }

    #[test]
    fn the_entry_bound_holds() {
        let mut t = table(2, usize::MAX);
        for k in ["a", "b", "c"] {
            t.put(k.to_string(), 1);
        }
        assert_eq!(t.len(), 2);
        assert!(t.get("a").is_none());
        assert_eq!(t.usage().bytes, 2 * (1 + 8 + OVERHEAD));
    }

    #[test]
    fn the_byte_bound_holds_and_the_least_recently_used_go_first() {
        let cost = 100 + 8 + OVERHEAD;
        let mut t = table(1000, 3 * cost);
        let key = |c: char| c.to_string().repeat(100);
        for c in ['a', 'b', 'c'] {
            t.put(key(c), 1);
        }
        assert!(t.get(key('a').as_str()).is_some()); // now b is the least recently used
        t.put(key('d'), 1);
        assert_eq!((t.len(), t.usage().bytes), (3, 3 * cost));
        assert!(t.get(key('b').as_str()).is_none());
        // Replacing an entry costs nothing more; popping one gives its bytes back.
        t.put(key('d'), 2);
        assert_eq!(t.usage().bytes, 3 * cost);
        assert_eq!(t.pop(key('d').as_str()), Some(2));
        assert_eq!((t.len(), t.usage().bytes), (2, 2 * cost));
        // A key as long as the budget still gets a place, alone.
        let huge = "z".repeat(3 * cost);
        *t.get_or_insert_mut(&huge, || 7) += 1;
        assert_eq!(t.len(), 1);
        assert_eq!(t.peek_mut(huge.as_str()).copied(), Some(8));
    }
}
