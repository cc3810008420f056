//! Entries with an id and an expiry: the leases of a semaphore, the reservations of a rate key.
//!
//! Most keys hold one entry or a few, so up to [`FEW`] entries live in one small sorted array:
//! the first entry inline (with an id of up to 16 bytes inside it, so a one-lease semaphore is a
//! single 48-byte allocation), the others in a vector. Beyond that, two B-trees index the
//! entries by id and by expiry, so every write costs O(log n) and the earliest and the latest
//! expiry are found without a scan.

use std::collections::{BTreeMap, BTreeSet};
use std::mem::size_of;

use smallvec::SmallVec;

/// An entry's id: kept inline up to 16 bytes.
pub type Id = SmallVec<[u8; 16]>;

/// Most entries kept in the small sorted array; one more moves them into the trees, and they
/// move back when at most half of this remain.
pub const FEW: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<V> {
    pub expiry: u64,
    pub id: Id,
    pub value: V,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entries<V> {
    /// Sorted by (expiry, id).
    Few(SmallVec<[Entry<V>; 1]>),
    Many(Box<Trees<V>>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trees<V> {
    by_id: BTreeMap<Id, (u64, V)>,
    by_expiry: BTreeSet<(u64, Id)>,
}

impl<V> Default for Entries<V> {
    fn default() -> Self {
        Entries::Few(SmallVec::new())
    }
}

impl<V> Entries<V> {
    pub fn len(&self) -> usize {
        match self {
            Entries::Few(few) => few.len(),
            Entries::Many(t) => t.by_id.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True while the entries are in the small sorted array (not yet in the trees).
    pub fn is_few(&self) -> bool {
        matches!(self, Entries::Few(_))
    }

    /// The expiry and value kept under `id`, expired or not.
    pub fn get(&self, id: &[u8]) -> Option<(u64, &V)> {
        match self {
            Entries::Few(few) => few
                .iter()
                .find(|e| e.id.as_slice() == id)
                .map(|e| (e.expiry, &e.value)),
            Entries::Many(t) => t.by_id.get(id).map(|(expiry, v)| (*expiry, v)),
        }
    }

    /// The value under `id`, to change in place (its expiry stays).
    pub fn get_mut(&mut self, id: &[u8]) -> Option<&mut V> {
        match self {
            Entries::Few(few) => few
                .iter_mut()
                .find(|e| e.id.as_slice() == id)
                .map(|e| &mut e.value),
            Entries::Many(t) => t.by_id.get_mut(id).map(|(_, v)| v),
        }
    }

    /// Keeps `value` under `id` until `expiry`, replacing what `id` held.
    pub fn insert(&mut self, id: &[u8], expiry: u64, value: V) {
        self.remove(id);
        match self {
            Entries::Few(few) => {
                let at = few.partition_point(|e| (e.expiry, e.id.as_slice()) < (expiry, id));
                few.insert(
                    at,
                    Entry {
                        expiry,
                        id: Id::from_slice(id),
                        value,
                    },
                );
                if few.len() > FEW {
                    self.grow();
                }
            }
            Entries::Many(t) => {
                t.by_expiry.insert((expiry, Id::from_slice(id)));
                t.by_id.insert(Id::from_slice(id), (expiry, value));
            }
        }
    }

    /// Removes what `id` held: its expiry and value.
    pub fn remove(&mut self, id: &[u8]) -> Option<(u64, V)> {
        let removed = match self {
            Entries::Few(few) => {
                let at = few.iter().position(|e| e.id.as_slice() == id)?;
                let e = few.remove(at);
                return Some((e.expiry, e.value));
            }
            Entries::Many(t) => {
                let (expiry, value) = t.by_id.remove(id)?;
                t.by_expiry.remove(&(expiry, Id::from_slice(id)));
                (expiry, value)
            }
        };
        self.shrink();
        Some(removed)
    }

    /// Drops the entries that expired by `now_us`: O(log n) for each one dropped.
    pub fn prune(&mut self, now_us: u64) {
        match self {
            Entries::Few(few) => {
                let expired = few.partition_point(|e| e.expiry <= now_us);
                if expired > 0 {
                    few.drain(..expired);
                }
            }
            Entries::Many(t) => {
                while let Some((expiry, _)) = t.by_expiry.first() {
                    if *expiry > now_us {
                        break;
                    }
                    if let Some((_, id)) = t.by_expiry.pop_first() {
                        t.by_id.remove(&id);
                    }
                }
                self.shrink();
            }
        }
    }

    /// Entries that expired by `now_us` and are still kept (they go at the next prune).
    fn expired(&self, now_us: u64) -> usize {
        match self {
            Entries::Few(few) => few.partition_point(|e| e.expiry <= now_us),
            Entries::Many(t) => t
                .by_expiry
                .range(..(now_us.saturating_add(1), Id::new()))
                .count(),
        }
    }

    /// Entries still live at `now_us`.
    pub fn live(&self, now_us: u64) -> usize {
        self.len() - self.expired(now_us)
    }

    /// The earliest expiry after `now_us`.
    pub fn earliest_after(&self, now_us: u64) -> Option<u64> {
        match self {
            Entries::Few(few) => few.iter().map(|e| e.expiry).find(|&e| e > now_us),
            Entries::Many(t) => t
                .by_expiry
                .range((now_us.saturating_add(1), Id::new())..)
                .next()
                .map(|(e, _)| *e),
        }
    }

    /// The latest expiry (0 when empty).
    pub fn latest(&self) -> u64 {
        match self {
            Entries::Few(few) => few.last().map_or(0, |e| e.expiry),
            Entries::Many(t) => t.by_expiry.last().map_or(0, |(e, _)| *e),
        }
    }

    /// Every entry as (expiry, id, value), ordered by (expiry, id).
    pub fn by_expiry(&self) -> impl Iterator<Item = (u64, &[u8], &V)> {
        let (few, many) = match self {
            Entries::Few(few) => (
                Some(few.iter().map(|e| (e.expiry, e.id.as_slice(), &e.value))),
                None,
            ),
            Entries::Many(t) => (
                None,
                Some(t.by_expiry.iter().filter_map(|(expiry, id)| {
                    let (_, v) = t.by_id.get(id)?;
                    Some((*expiry, id.as_slice(), v))
                })),
            ),
        };
        few.into_iter().flatten().chain(many.into_iter().flatten())
    }

    /// Every entry as (id, expiry, value), ordered by id.
    pub fn by_id(&self) -> impl Iterator<Item = (&[u8], u64, &V)> {
        let (few, many) = match self {
            Entries::Few(few) => {
                let mut sorted: SmallVec<[&Entry<V>; FEW]> = few.iter().collect();
                sorted.sort_unstable_by(|a, b| a.id.cmp(&b.id));
                let entries = sorted
                    .into_iter()
                    .map(|e| (e.id.as_slice(), e.expiry, &e.value));
                (Some(entries), None)
            }
            Entries::Many(t) => (
                None,
                Some(t.by_id.iter().map(|(id, (e, v))| (id.as_slice(), *e, v))),
            ),
        };
        few.into_iter().flatten().chain(many.into_iter().flatten())
    }

    /// Heap bytes, as the allocator rounds them: the small array's spilled part, or the trees'
    /// nodes, and ids longer than what fits inline (kept twice in the trees).
    pub fn heap_bytes(&self) -> usize {
        let spilled = |id: &Id| {
            if id.spilled() {
                allocated(id.capacity())
            } else {
                0
            }
        };
        match self {
            Entries::Few(few) => {
                let array = if few.spilled() {
                    allocated(few.capacity().saturating_mul(size_of::<Entry<V>>()))
                } else {
                    0
                };
                array + few.iter().map(|e| spilled(&e.id)).sum::<usize>()
            }
            Entries::Many(t) => {
                let n = t.by_id.len();
                allocated(size_of::<Trees<V>>())
                    + tree_bytes(n, size_of::<Id>() + size_of::<(u64, V)>())
                    + tree_bytes(n, size_of::<(u64, Id)>())
                    + t.by_id.keys().map(|id| 2 * spilled(id)).sum::<usize>()
            }
        }
    }

    /// Moves the entries from the small array into the trees.
    fn grow(&mut self) {
        if let Entries::Few(few) = self {
            let mut t = Trees {
                by_id: BTreeMap::new(),
                by_expiry: BTreeSet::new(),
            };
            for e in few.drain(..) {
                t.by_expiry.insert((e.expiry, e.id.clone()));
                t.by_id.insert(e.id, (e.expiry, e.value));
            }
            *self = Entries::Many(Box::new(t));
        }
    }

    /// Moves the entries back into the small array once at most half of [`FEW`] remain.
    fn shrink(&mut self) {
        let Entries::Many(t) = self else {
            return;
        };
        if t.by_id.len() > FEW / 2 {
            return;
        }
        let mut by_id = std::mem::take(&mut t.by_id);
        let mut few = SmallVec::new();
        for (expiry, id) in std::mem::take(&mut t.by_expiry) {
            if let Some((_, value)) = by_id.remove(&id) {
                few.push(Entry { expiry, id, value });
            }
        }
        *self = Entries::Few(few);
    }
}

/// What the allocator (jemalloc, Redis's) hands out for `size` bytes: its size classes are
/// multiples of 16 up to 128, then four per doubling.
pub fn allocated(size: usize) -> usize {
    match size {
        0 => 0,
        1..=8 => 8,
        9..=128 => size.div_ceil(16) * 16,
        _ => {
            let step = size.next_power_of_two() / 8;
            size.div_ceil(step) * step
        }
    }
}

/// The nodes of a B-tree of `n` entries of `slot` bytes (key and value) each. Rust's B-tree
/// nodes hold up to 11 entries (internal ones also 12 child pointers) and are allocated whole;
/// beyond one node, the leaves hold about 8 entries and internal nodes about 7 children (as
/// measured by `benches/e2e.sh`, within a few percent at 100 entries).
fn tree_bytes(n: usize, slot: usize) -> usize {
    const CAPACITY: usize = 11;
    // Parent pointer, index in the parent, length.
    let leaf = allocated(CAPACITY * slot + 16);
    let internal = allocated(CAPACITY * slot + 16 + (CAPACITY + 1) * 8);
    let leaves = if n <= CAPACITY { 1 } else { n.div_ceil(8) };
    let mut bytes = leaves * leaf;
    let mut level = leaves;
    while level > 1 {
        level = level.div_ceil(7);
        bytes += level * internal;
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn one_entry_with_a_short_id_is_one_small_allocation() {
        assert_eq!(size_of::<Entries<()>>(), 48);
        let mut e = Entries::default();
        e.insert(b"job-7", 10, ());
        assert_eq!(e.heap_bytes(), 0);
        assert_eq!(e.get(b"job-7"), Some((10, &())));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, u64),
        Remove(u8),
        Prune(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..24, 0u64..50).prop_map(|(i, e)| Op::Insert(i, e)),
            (0u8..24).prop_map(Op::Remove),
            (0u64..50).prop_map(Op::Prune),
        ]
    }

    fn id(i: u8) -> Vec<u8> {
        // Some ids fit inline, some do not.
        let mut id = format!("holder-{i}").into_bytes();
        if i.is_multiple_of(3) {
            id.extend_from_slice(b"-with-a-long-suffix");
        }
        id
    }

    proptest! {
        /// Whichever form holds them, the entries answer as a plain map would.
        #[test]
        fn entries_behave_as_a_map(ops in prop::collection::vec(op(), 0..80)) {
            let mut e: Entries<u8> = Entries::default();
            let mut model: BTreeMap<Vec<u8>, (u64, u8)> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(i, expiry) => {
                        e.insert(&id(i), expiry, i);
                        model.insert(id(i), (expiry, i));
                    }
                    Op::Remove(i) => {
                        prop_assert_eq!(e.remove(&id(i)), model.remove(&id(i)));
                    }
                    Op::Prune(now) => {
                        e.prune(now);
                        model.retain(|_, (expiry, _)| *expiry > now);
                    }
                }
                prop_assert_eq!(e.len(), model.len());
                let mut want: Vec<_> = model.iter().map(|(k, (x, v))| (*x, k.clone(), *v)).collect();
                want.sort();
                let got: Vec<_> = e.by_expiry().map(|(x, k, v)| (x, k.to_vec(), *v)).collect();
                prop_assert_eq!(&got, &want);
                let got: Vec<_> = e.by_id().map(|(k, x, v)| (k.to_vec(), x, *v)).collect();
                let want: Vec<_> = model.iter().map(|(k, (x, v))| (k.clone(), *x, *v)).collect();
                prop_assert_eq!(got, want);
                prop_assert_eq!(e.latest(), model.values().map(|(x, _)| *x).max().unwrap_or(0));
                for now in [0, 10, 25, 49] {
                    let live = model.values().filter(|(x, _)| *x > now).count();
                    prop_assert_eq!(e.live(now), live);
                    let next = model.values().map(|(x, _)| *x).filter(|x| *x > now).min();
                    prop_assert_eq!(e.earliest_after(now), next);
                }
                prop_assert!(matches!(e, Entries::Few(_)) == (e.len() <= FEW) || e.len() > FEW / 2);
            }
        }
    }
}
