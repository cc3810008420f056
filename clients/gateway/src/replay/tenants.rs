//! The tenants refused most, in bounded memory whatever the number of tenants: a table of at
//! most [`CAP`] tenants. When it is full, the half with the fewest refusals is dropped, and the
//! most refusals a dropped tenant had (with its own uncertainty) becomes the uncertainty of
//! every tenant counted after: a tenant's true count lies between its count and its count plus
//! its uncertainty. A tenant refused often keeps its place, since the table keeps the larger
//! half; until the table first fills, every count is exact.

use std::collections::HashMap;

/// The most tenants the table holds (each at most 256 bytes, the longest identity the engine
/// decides): a few megabytes at worst.
pub const CAP: usize = 10_000;

/// One tenant's refusals: at least `refusals`, at most `refusals + uncertainty`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantRefusals {
    pub tenant: String,
    pub refusals: u64,
    pub uncertainty: u64,
}

#[derive(Debug, Default)]
pub(super) struct Tenants {
    /// Tenant to (refusals counted since it entered the table, uncertainty when it entered).
    counts: HashMap<String, (u64, u64)>,
    /// The most refusals (plus uncertainty) of a tenant dropped so far.
    floor: u64,
}

impl Tenants {
    pub(super) fn refused(&mut self, tenant: &str) {
        if let Some((n, _)) = self.counts.get_mut(tenant) {
            *n = n.saturating_add(1);
            return;
        }
        if self.counts.len() >= CAP {
            self.halve();
        }
        self.counts.insert(tenant.to_string(), (1, self.floor));
    }

    /// Drops the half of the table with the fewest refusals: one pass every `CAP / 2` new
    /// tenants, so each costs a constant share of it.
    fn halve(&mut self) {
        let mut counts: Vec<u64> = self.counts.values().map(|(n, _)| *n).collect();
        let middle = counts.len() / 2;
        let (_, kept_from, _) = counts.select_nth_unstable(middle);
        let threshold = *kept_from;
        // The `middle` fewest go: every tenant below the threshold, then as many at it as
        // make up the half.
        let mut to_drop = middle;
        let mut floor = self.floor;
        for below in [true, false] {
            self.counts.retain(|_, (n, e)| {
                let drop = to_drop > 0
                    && if below {
                        *n < threshold
                    } else {
                        *n == threshold
                    };
                if drop {
                    to_drop = to_drop.saturating_sub(1);
                    floor = floor.max(n.saturating_add(*e));
                }
                !drop
            });
        }
        self.floor = floor;
    }

    /// The `n` tenants with the most refusals counted, most first, then by name.
    pub(super) fn top(&self, n: usize) -> Vec<TenantRefusals> {
        let mut all: Vec<TenantRefusals> = self
            .counts
            .iter()
            .map(|(tenant, (refusals, uncertainty))| TenantRefusals {
                tenant: tenant.clone(),
                refusals: *refusals,
                uncertainty: *uncertainty,
            })
            .collect();
        all.sort_by(|a, b| {
            b.refusals
                .cmp(&a.refusals)
                .then_with(|| a.tenant.cmp(&b.tenant))
        });
        all.truncate(n);
        all
    }

    pub(super) fn len(&self) -> usize {
        self.counts.len()
    }

    /// Whether every count is exact (the table never filled).
    pub(super) fn exact(&self) -> bool {
        self.floor == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_while_the_table_has_room() {
        let mut t = Tenants::default();
        for (tenant, n) in [("acme", 3), ("birch", 5), ("cedar", 1)] {
            for _ in 0..n {
                t.refused(tenant);
            }
        }
        let top = t.top(2);
        assert_eq!(top[0].tenant, "birch");
        assert_eq!((top[0].refusals, top[0].uncertainty), (5, 0));
        assert_eq!(top[1].tenant, "acme");
        assert!(t.exact());
    }

    #[test]
    fn bounded_and_the_heavy_tenant_kept_among_a_million_others() {
        let mut t = Tenants::default();
        for i in 0..1_000_000u64 {
            t.refused(&format!("tenant-{i}"));
            if i % 100 == 0 {
                t.refused("heavy");
            }
            assert!(t.len() <= CAP);
        }
        let top = t.top(1);
        assert_eq!(top[0].tenant, "heavy");
        // Its true count, 10,000, lies within what the table says.
        let (low, high) = (top[0].refusals, top[0].refusals + top[0].uncertainty);
        assert!(low <= 10_000 && 10_000 <= high, "{low}..{high}");
        assert!(!t.exact());
    }
}
