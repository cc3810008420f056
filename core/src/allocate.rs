//! One limit across regions: the home store's allocation of a global rule's limit.
//!
//! Each region enforces its allocation on its own store; every gateway of a region reports its
//! demand to the home store, which answers the region's allocation. The home keeps one record
//! per reporter (a gateway): its region, the demand it reported (units per period of the rule,
//! admitted and refused), when, what it was granted and what it said it enforces. From those it
//! knows, for every region, the most that region's gateways may be enforcing: its *worst*. A
//! grant is never more than what the others' worsts leave of the limit, so the enforced
//! allocations never sum above the limit, whatever the regions' clocks, delays and partitions.
//!
//! What a gateway enforces, by its own clock from when it *sent* the call that was answered (so
//! its lease ends no later than the home's):
//! - while its lease runs: the last allocation it was granted;
//! - after the lease, for up to `FORGET_LEASES` leases: the smaller of that allocation and the
//!   safe share (the pool divided by the regions);
//! - after that, or before it was ever answered: the floor.
//!
//! The home counts each reporter at what it may be enforcing: while the lease runs, the larger
//! of its grant and what it said it held (the answer may have been lost, and the gateway then
//! still enforces its older grant, which is what it reported holding); then the smaller of that
//! and the safe share; once forgotten, its region's floor. So a region that shrinks frees its
//! share at its next report, once it says it holds the smaller grant. A region it never heard from holds
//! the floor. Its targets: the pool (the limit less the reserve) shared in proportion to the
//! regions' live demand, every region first given the floor, so an idle region can start.
//!
//! The reserve is the slack for what this accounting does not see: a local limiter whose limit
//! changes within a window may admit up to the larger of its two limits in that window. See `clients/CONTRACT.md` section 15
//! for the bound this gives.

use crate::bounds::MAX_COUNT;
use crate::error::Error;

/// The floor is this fraction of the pool, shared by the regions: 1/20 (5 %).
pub const FLOOR_DIVISOR: u64 = 20;

/// A reporter silent for this many leases is forgotten (and must have fallen to the floor).
pub const FORGET_LEASES: u64 = 10;

/// At most this many reporters per global key: a key's record stays small whatever joins.
pub const MAX_REPORTERS: usize = 256;

/// The largest demand a reporter may report, units per period (10^12). The demands of a key's
/// reporters are summed: this keeps the sum of all of them below 2^51, so the script mode, whose
/// numbers are doubles, adds and divides them exactly, and a gateway that sees more (a limit
/// near the largest, 10^15) reports this: shares then split evenly among such regions.
pub const MAX_DEMAND: u64 = 1_000_000_000_000;

/// The latest `seen_ms` a record may hold: 2^53 - 1 ms, far beyond any clock, and exact in a
/// double.
pub const MAX_SEEN_MS: u64 = (1 << 53) - 1;

/// At most this many declared regions.
pub const MAX_REGIONS: u64 = 64;

/// The longest region or reporter name, in bytes.
pub const MAX_NAME_LEN: usize = 64;

/// A global rule's terms, as every region and the home see them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terms {
    /// The rule's limit, units per period.
    pub limit: u64,
    /// Units per period held back from every allocation.
    pub reserve: u64,
    /// The regions the rule is enforced in (at least one).
    pub regions: u64,
    /// How long a grant may be enforced without a newer one.
    pub lease_ms: u64,
}

impl Terms {
    /// The limit less the reserve: what the allocations share.
    pub fn pool(&self) -> u64 {
        self.limit.saturating_sub(self.reserve)
    }

    /// A region's fallback once its lease has run out: the pool divided by the regions.
    pub fn safe_share(&self) -> u64 {
        self.pool() / self.regions.max(1)
    }

    /// What a region holds with no live allocation: 5 % of the pool divided by the regions.
    pub fn floor(&self) -> u64 {
        self.pool() / FLOOR_DIVISOR.saturating_mul(self.regions.max(1))
    }

    /// A region's share of the pool: the floor, and the rest in proportion to its live demand
    /// (`region_demand` of `total_demand`); with no demand anywhere, the safe share. What a
    /// region is granted when the others' holds leave room for it; a gateway answered less
    /// knows it is still capped by them.
    pub fn target(&self, region_demand: u64, total_demand: u64) -> u64 {
        let regions = self.regions.max(1);
        if total_demand == 0 {
            return self.safe_share();
        }
        let floor = self.floor();
        let shared = self.pool().saturating_sub(floor.saturating_mul(regions));
        let share = u128::from(shared) * u128::from(region_demand.min(total_demand))
            / u128::from(total_demand);
        floor.saturating_add(u64::try_from(share).unwrap_or(u64::MAX))
    }

    /// How long after its last answered call a reporter is forgotten.
    pub fn forget_ms(&self) -> u64 {
        self.lease_ms.saturating_mul(FORGET_LEASES)
    }

    /// What a gateway enforces `since_ms` after sending the call that granted `granted`, or
    /// before any answer (`None`).
    pub fn enforced(&self, granted: Option<u64>, since_ms: u64) -> u64 {
        match granted {
            Some(g) if since_ms < self.lease_ms => g,
            Some(g) if since_ms < self.forget_ms() => g.min(self.safe_share()),
            _ => self.floor(),
        }
    }
}

/// What the home remembers of one reporter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reporter {
    pub region: Vec<u8>,
    pub id: Vec<u8>,
    /// Its demand, units per period, as last reported.
    pub demand: u64,
    /// When it last reported, by the home's clock (ms).
    pub seen_ms: u64,
    /// What it was granted then.
    pub granted: u64,
    /// What it said it was enforcing then.
    pub held: u64,
}

impl Reporter {
    /// The most this reporter may be enforcing at `now_ms`.
    fn worst(&self, terms: &Terms, now_ms: u64) -> u64 {
        let age = now_ms.saturating_sub(self.seen_ms);
        if age < terms.lease_ms {
            // Its answer may have been lost: it then still enforces what it said it held.
            self.granted.max(self.held)
        } else {
            self.granted.max(self.held).min(terms.safe_share())
        }
    }

    fn live(&self, terms: &Terms, now_ms: u64) -> bool {
        now_ms.saturating_sub(self.seen_ms) < terms.lease_ms
    }

    fn forgotten(&self, terms: &Terms, now_ms: u64) -> bool {
        now_ms.saturating_sub(self.seen_ms) >= terms.forget_ms()
    }

    /// The hash field this reporter is stored under: `region reporter`.
    pub fn field(&self) -> Vec<u8> {
        field(&self.region, &self.id)
    }

    /// The hash value: `demand seen_ms granted held`, in decimal.
    pub fn value(&self) -> String {
        format!(
            "{} {} {} {}",
            self.demand, self.seen_ms, self.granted, self.held
        )
    }

    /// Reads a record back from its field and value; `None` for anything this module did not
    /// write (the caller refuses the call with [`Error::BadAllocation`]). A number is decimal
    /// digits only, within what a record can hold (demand at most [`MAX_DEMAND`], grants at most
    /// [`MAX_COUNT`], the time below 2^53), so the script mode reads every accepted record
    /// exactly as this does.
    pub fn decode(field: &[u8], value: &[u8]) -> Option<Reporter> {
        let space = field.iter().position(|&b| b == b' ')?;
        let (region, id) = (field.get(..space)?, field.get(space + 1..)?);
        if !valid_name(region) || !valid_name(id) {
            return None;
        }
        let text = std::str::from_utf8(value).ok()?;
        let mut numbers = text.split(' ');
        let mut next = |max: u64| {
            let n = numbers.next()?;
            if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            n.parse::<u64>().ok().filter(|v| *v <= max)
        };
        let reporter = Reporter {
            region: region.to_vec(),
            id: id.to_vec(),
            demand: next(MAX_DEMAND)?,
            seen_ms: next(MAX_SEEN_MS)?,
            granted: next(MAX_COUNT)?,
            held: next(MAX_COUNT)?,
        };
        numbers.next().is_none().then_some(reporter)
    }
}

/// The hash field of a reporter.
pub fn field(region: &[u8], id: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(region.len() + 1 + id.len());
    f.extend_from_slice(region);
    f.push(b' ');
    f.extend_from_slice(id);
    f
}

/// A region or reporter name: 1 to 64 bytes of letters, digits, `-`, `_`, `.` and `:`.
pub fn valid_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// One report: who, and what it saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub region: Vec<u8>,
    pub id: Vec<u8>,
    pub demand: u64,
    pub held: u64,
}

/// The home's answer to one report, as a gateway reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allotment {
    /// Units per period the reporter's region may admit on its own store until the lease ends.
    pub allocation: u64,
    /// How long `allocation` may be enforced, counted from when the call was sent.
    pub lease_ms: u64,
    /// The live demand of the reporter's region, and of all regions, units per period.
    pub region_demand: u64,
    pub total_demand: u64,
}

/// The answer to a report, and what to change in the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allotted {
    /// The region's allocation, units per period.
    pub allocation: u64,
    /// The live demand of the reporter's region and of all regions, units per period.
    pub region_demand: u64,
    pub total_demand: u64,
    /// The record to write for the reporter.
    pub record: Reporter,
    /// The fields of forgotten reporters, to delete.
    pub forgotten: Vec<Vec<u8>>,
    /// When the key may expire: the last reporter forgotten (ms, the home's clock).
    pub expires_at_ms: u64,
}

/// Answers `report` at `now_ms` given every reporter the key remembers (`records`, in any
/// order, the reporter itself included if it reported before).
pub fn allocate(
    terms: &Terms,
    report: &Report,
    records: &[Reporter],
    now_ms: u64,
) -> Result<Allotted, Error> {
    // The reporter's own record is replaced, never counted.
    let others: Vec<&Reporter> = records
        .iter()
        .filter(|r| !(r.region == report.region && r.id == report.id))
        .collect();
    let (forgotten, kept): (Vec<&Reporter>, Vec<&Reporter>) =
        others.into_iter().partition(|r| r.forgotten(terms, now_ms));
    let forgotten: Vec<Vec<u8>> = forgotten.into_iter().map(Reporter::field).collect();
    if kept.len() >= MAX_REPORTERS {
        return Err(Error::TooManyReporters(MAX_REPORTERS));
    }

    // Per region (the reporter's own first): its live demand and its worst.
    let mut regions: Vec<(&[u8], u64, u64)> = vec![(&report.region, report.demand, 0)];
    for r in &kept {
        let (demand, worst) = (
            if r.live(terms, now_ms) { r.demand } else { 0 },
            r.worst(terms, now_ms),
        );
        match regions
            .iter_mut()
            .find(|(name, _, _)| *name == r.region.as_slice())
        {
            Some(entry) => {
                entry.1 = entry.1.saturating_add(demand);
                entry.2 = entry.2.max(worst);
            }
            None => regions.push((&r.region, demand, worst)),
        }
    }
    let declared = terms.regions.max(regions.len() as u64);
    let terms = Terms {
        regions: declared,
        ..*terms
    };
    let floor = terms.floor();
    let unheard = declared.saturating_sub(regions.len() as u64);
    let others: u64 = regions
        .iter()
        .skip(1)
        .map(|&(_, _, worst)| worst.max(floor))
        .fold(unheard.saturating_mul(floor), u64::saturating_add);
    let total_demand = regions
        .iter()
        .fold(0u64, |sum, &(_, demand, _)| sum.saturating_add(demand));
    let region_demand = regions.first().map_or(0, |&(_, d, _)| d);

    let target = terms.target(region_demand, total_demand);
    let allocation = target.min(terms.limit.saturating_sub(others));

    let record = Reporter {
        region: report.region.clone(),
        id: report.id.clone(),
        demand: report.demand,
        seen_ms: now_ms,
        granted: allocation,
        held: report.held,
    };
    let last_seen = kept.iter().map(|r| r.seen_ms).fold(now_ms, u64::max);
    Ok(Allotted {
        allocation,
        region_demand,
        total_demand,
        record,
        forgotten,
        expires_at_ms: last_seen.saturating_add(terms.forget_ms()),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    const TERMS: Terms = Terms {
        limit: 10_000,
        reserve: 1_000,
        regions: 3,
        lease_ms: 10_000,
    };

    fn report(region: &str, id: &str, demand: u64, held: u64) -> Report {
        Report {
            region: region.into(),
            id: id.into(),
            demand,
            held,
        }
    }

    /// Runs reports in order against one key's records, returning each allocation.
    fn run(records: &mut Vec<Reporter>, calls: &[(u64, Report)]) -> Vec<u64> {
        calls
            .iter()
            .map(|(now, rep)| {
                let a = allocate(&TERMS, rep, records, *now).unwrap();
                records
                    .retain(|r| !a.forgotten.contains(&r.field()) && r.field() != a.record.field());
                records.push(a.record.clone());
                a.allocation
            })
            .collect()
    }

    #[test]
    fn the_shares_the_design_names() {
        assert_eq!(TERMS.pool(), 9_000);
        assert_eq!(TERMS.safe_share(), 3_000);
        assert_eq!(TERMS.floor(), 150);
    }

    #[test]
    fn a_lone_first_region_gets_its_share_above_the_floors_of_the_unheard() {
        let mut records = vec![];
        // No demand anywhere: an even split of the pool.
        assert_eq!(
            run(&mut records, &[(0, report("eu", "g1", 0, 150))]),
            [3_000]
        );
        // All the demand: everything but the two unheard floors.
        assert_eq!(
            run(&mut records, &[(1, report("eu", "g1", 12_000, 3_000))]),
            [150 + 9_000 - 450]
        );
    }

    #[test]
    fn demand_shares_the_pool_and_allocations_never_sum_above_the_limit() {
        let mut records = vec![];
        let got = run(
            &mut records,
            &[
                (0, report("eu", "g1", 6_000, 150)),
                (1, report("us", "g1", 3_000, 150)),
                (2, report("ap", "g1", 0, 150)),
                // A second round, once all three are known.
                (2_000, report("eu", "g1", 6_000, 0)),
                (2_001, report("us", "g1", 3_000, 0)),
                (2_002, report("ap", "g1", 0, 0)),
            ],
        );
        // The shared part (9,000 less three floors of 150) goes 2:1:0.
        assert_eq!(&got[3..], [150 + 5_700, 150 + 2_850, 150]);
        // Every grant left the others' worst: the first eu grant took the pool less two floors.
        assert_eq!(got[0], 150 + 8_550);
        // us was capped by what eu holds: 10,000 - 8,700 - 150 (ap's floor).
        assert_eq!(got[1], 1_150);
    }

    #[test]
    fn a_region_that_shrinks_frees_its_share_once_it_says_it_holds_less() {
        let mut records = vec![];
        run(
            &mut records,
            &[
                (0, report("eu", "g1", 9_000, 0)),
                (1, report("us", "g1", 0, 0)),
            ],
        );
        // us wakes up: its target is most of the pool, but eu still holds its grant.
        let grown = run(&mut records, &[(2_000, report("us", "g1", 9_000, 150))]);
        let eu_grant = records.iter().find(|r| r.region == b"eu").unwrap().granted;
        assert_eq!(grown[0], 10_000 - eu_grant - 150);
        // eu reports its new demand and is granted less; until it says it holds that (its
        // answer may be lost), the home counts it at what it held, and us stays capped.
        let second = run(
            &mut records,
            &[
                (3_000, report("eu", "g1", 9_000, eu_grant)),
                (4_000, report("us", "g1", 9_000, grown[0])),
            ],
        );
        assert_eq!(second, [150 + 4_275, grown[0]]);
        // eu's next report says it holds the smaller grant: us gets its half.
        let third = run(
            &mut records,
            &[
                (5_000, report("eu", "g1", 9_000, 150 + 4_275)),
                (6_000, report("us", "g1", 9_000, grown[0])),
            ],
        );
        assert_eq!(third, [150 + 4_275, 150 + 4_275]);
    }

    #[test]
    fn a_silent_reporter_holds_its_grant_then_the_smaller_of_it_and_the_safe_share_then_nothing() {
        let mut records = vec![];
        run(&mut records, &[(0, report("eu", "g1", 9_000, 0))]);
        let eu = records[0].granted;
        assert_eq!(eu, 8_700);
        // While eu's lease runs, us gets what it leaves.
        assert_eq!(
            run(&mut records, &[(9_999, report("us", "g1", 9_000, 0))]),
            [1_150]
        );
        // After it, eu counts at the safe share and its demand no more: us gets what that
        // leaves of its whole target.
        assert_eq!(
            run(&mut records, &[(10_000, report("us", "g1", 9_000, 1_150))]),
            [10_000 - 3_000 - 150]
        );
        // Forgotten after ten leases: eu's record is deleted, and counts at the floor.
        let a = allocate(&TERMS, &report("us", "g1", 9_000, 0), &records, 100_000).unwrap();
        assert_eq!(a.forgotten, [b"eu g1".to_vec()]);
        assert_eq!(a.allocation, 150 + 8_550);
    }

    #[test]
    fn the_gateway_side_fallback_matches_what_the_home_counts() {
        assert_eq!(TERMS.enforced(None, 0), 150);
        assert_eq!(TERMS.enforced(Some(8_000), 9_999), 8_000);
        assert_eq!(TERMS.enforced(Some(8_000), 10_000), 3_000);
        assert_eq!(TERMS.enforced(Some(1_000), 10_000), 1_000);
        assert_eq!(TERMS.enforced(Some(8_000), 100_000), 150);
    }

    #[test]
    fn records_round_trip_and_foreign_ones_are_refused() {
        let r = Reporter {
            region: b"eu".to_vec(),
            id: b"gw-1".to_vec(),
            demand: 5,
            seen_ms: 6,
            granted: 7,
            held: 8,
        };
        assert_eq!(Reporter::decode(&r.field(), r.value().as_bytes()), Some(r));
        let most = b"1000000000000 9007199254740991 1000000000000000 1000000000000000";
        assert!(Reporter::decode(b"eu gw", most).is_some());
        for (f, v) in [
            (&b"eu"[..], &b"1 2 3 4"[..]),
            (b"eu gw", b"1 2 3"),
            (b"eu gw", b"1 2 3 4 5"),
            (b"eu gw", b"1 2 x 4"),
            (b"eu g w", b"1 2 3 4"),
            (b"eu gw", b"-1 2 3 4"),
            // Only what a record can hold, in plain digits.
            (b"eu gw", b"+1 2 3 4"),
            (b"eu gw", b"1  2 3 4"),
            (b"eu gw", b"1000000000001 2 3 4"),
            (b"eu gw", b"1 9007199254740992 3 4"),
            (b"eu gw", b"1 2 1000000000000001 4"),
            (b"eu gw", b"1 2 3 1000000000000001"),
        ] {
            assert_eq!(Reporter::decode(f, v), None, "{f:?} {v:?}");
        }
    }

    #[test]
    fn too_many_reporters_is_an_error() {
        let records: Vec<Reporter> = (0..MAX_REPORTERS)
            .map(|i| Reporter {
                region: b"eu".to_vec(),
                id: format!("g{i}").into_bytes(),
                demand: 1,
                seen_ms: 0,
                granted: 1,
                held: 1,
            })
            .collect();
        assert!(allocate(&TERMS, &report("eu", "new", 1, 0), &records, 1).is_err());
        // One already known is answered.
        assert!(allocate(&TERMS, &report("eu", "g0", 1, 0), &records, 1).is_ok());
    }

    use proptest::prelude::*;

    /// The most each region may be enforcing at `now`, summed over the declared regions, by
    /// the gateways' own rule (`Terms::enforced`) applied to what each was last answered.
    fn enforced_sum(answers: &[(usize, u64, u64)], regions: usize, now: u64) -> u64 {
        (0..regions)
            .map(|region| {
                answers
                    .iter()
                    .filter(|(r, _, _)| *r == region)
                    .map(|&(_, sent, granted)| TERMS.enforced(Some(granted), now - sent))
                    .max()
                    .unwrap_or(TERMS.floor())
            })
            .sum()
    }

    proptest! {
        /// Whatever the order, timing and demand of the reports (two gateways in each of three
        /// regions), and whichever answers are lost after the home ran the call (the gateway
        /// then goes on enforcing what it held), what the regions may enforce never sums above
        /// the limit.
        #[test]
        fn enforced_allocations_never_sum_above_the_limit(
            calls in proptest::collection::vec(
                (0usize..6, 0u64..30_000, 0u64..20_000, proptest::bool::weighted(0.25)), 1..60)
        ) {
            let mut records: Vec<Reporter> = vec![];
            // (region, reporter) -> (sent, granted) of its last answer received.
            let mut last: Vec<Option<(u64, u64)>> = vec![None; 6];
            let mut now = 0;
            for (who, gap, demand, lost) in calls {
                now += gap;
                let held = last[who].map_or(TERMS.floor(), |(sent, g)| TERMS.enforced(Some(g), now - sent));
                let rep = report(["eu", "us", "ap"][who / 2], ["a", "b"][who % 2], demand, held);
                let a = allocate(&TERMS, &rep, &records, now).unwrap();
                records.retain(|r| !a.forgotten.contains(&r.field()) && r.field() != a.record.field());
                records.push(a.record.clone());
                if !lost {
                    last[who] = Some((now, a.allocation));
                }
                let answers: Vec<(usize, u64, u64)> = last
                    .iter()
                    .enumerate()
                    .filter_map(|(w, l)| l.map(|(sent, g)| (w / 2, sent, g)))
                    .collect();
                // Just after the call, and at every instant a lease or the forgetting ends.
                for at in [now, now + TERMS.lease_ms, now + TERMS.forget_ms()] {
                    prop_assert!(enforced_sum(&answers, 3, at) <= TERMS.limit, "{at}");
                }
            }
        }
    }
}
