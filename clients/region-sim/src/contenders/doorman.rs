//! Doorman's proportional share (github.com/youtube/doorman, `go/server/doorman/algorithm.go`,
//! `ProportionalShare`), restated from its published algorithm: the server holds one lease per
//! client (what it has, what it wants, when the lease expires), drops expired leases before
//! deciding, and gives a client what it wants unless the wants sum above the capacity and the
//! client wants more than an equal share; then the equal share plus a top-up, in proportion to
//! its want over the equal share, from what the clients under their equal share leave. Never
//! more than the capacity the other live leases leave. There is no reserve: the capacity is the
//! whole limit. A client whose lease expires without a new one falls to zero (its published
//! client: the safe capacity is a to-do there).

#[derive(Debug, Clone, Copy)]
struct Lease {
    client: usize,
    has: f64,
    wants: f64,
    expiry_ms: u64,
}

#[derive(Debug, Default)]
pub struct Store {
    leases: Vec<Lease>,
}

impl Store {
    /// The capacity granted to `client`, wanting `wants`, at `now_ms`; its lease ends at
    /// `now_ms + lease_ms`.
    pub fn decide(
        &mut self,
        capacity: f64,
        client: usize,
        wants: f64,
        now_ms: u64,
        lease_ms: u64,
    ) -> f64 {
        self.leases.retain(|l| l.expiry_ms > now_ms);
        let old = self.leases.iter().find(|l| l.client == client).copied();
        let count = self.leases.len() + usize::from(old.is_none());
        let equal = capacity / count as f64;
        let sum_has: f64 = self.leases.iter().map(|l| l.has).sum();
        // The sum of wants is the store's, this client's old want included, as Doorman reads it.
        let sum_wants: f64 = self.leases.iter().map(|l| l.wants).sum();
        let unused = capacity - sum_has + old.map_or(0.0, |l| l.has);
        let gets = if sum_wants <= capacity || wants <= equal {
            wants
        } else {
            // Only clients in the store count, this one at its new want.
            let (mut spare, mut need) = (0.0, 0.0);
            for l in &self.leases {
                let w = if l.client == client { wants } else { l.wants };
                if w < equal {
                    spare += equal - w;
                } else {
                    need += w - equal;
                }
            }
            if need > 0.0 {
                equal + (wants - equal) * (spare / need)
            } else {
                equal
            }
        };
        let has = gets.min(unused).max(0.0);
        let lease = Lease {
            client,
            has,
            wants,
            expiry_ms: now_ms + lease_ms,
        };
        match self.leases.iter_mut().find(|l| l.client == client) {
            Some(l) => *l = lease,
            None => self.leases.push(lease),
        }
        has
    }
}
