//! One limit across regions (`clients/CONTRACT.md` section 15): the reports a global rule's
//! keys owe the home store, and its answers, carried across for the driver's reporter timer.
//! Numbers cross as doubles: every quantity here is below 2^53 (demands at most 10^12, limits
//! 10^15, instants Unix microseconds).

use napi_derive::napi;
use rl_core::allocate::{Allotment, Terms};
use rl_engine::AllocationReport;

use crate::convert::instant;

/// The terms the home store allocates a global rule's limit by.
#[napi(object)]
pub struct TermsOut {
    pub limit: f64,
    pub reserve: f64,
    pub regions: f64,
    pub lease_ms: f64,
}

/// One report for the home store (`RL.ALLOCATE`), handed back to `allocated` with its answer.
#[napi(object)]
pub struct ReportOut {
    /// The rule's name (for logs) and the key, as the regional store knows it.
    pub rule: String,
    pub key: String,
    pub terms: TermsOut,
    /// Units asked per period of the rule since the last report, and what this gateway
    /// enforces now.
    pub demand: f64,
    pub held: f64,
    /// When the report was taken (Unix microseconds): the answer's lease counts from here.
    pub sent_us: f64,
}

/// The home store's answer (`RL.ALLOCATE`'s reply).
#[napi(object)]
pub struct AllotmentIn {
    pub allocation: f64,
    pub lease_ms: f64,
    pub region_demand: f64,
    pub total_demand: f64,
}

fn count(n: f64) -> u64 {
    // A float from JS: negative or NaN is 0, past u64 the most there is.
    n.max(0.0) as u64
}

pub(crate) fn report_out(r: AllocationReport) -> ReportOut {
    ReportOut {
        terms: TermsOut {
            limit: r.terms.limit as f64,
            reserve: r.terms.reserve as f64,
            regions: r.terms.regions as f64,
            lease_ms: r.terms.lease_ms as f64,
        },
        demand: r.demand as f64,
        held: r.held as f64,
        sent_us: r.sent.as_micros() as f64,
        rule: r.rule,
        key: r.key,
    }
}

pub(crate) fn report_in(r: ReportOut) -> AllocationReport {
    AllocationReport {
        terms: Terms {
            limit: count(r.terms.limit),
            reserve: count(r.terms.reserve),
            regions: count(r.terms.regions),
            lease_ms: count(r.terms.lease_ms),
        },
        demand: count(r.demand),
        held: count(r.held),
        sent: instant(r.sent_us),
        rule: r.rule,
        key: r.key,
    }
}

pub(crate) fn allotment_in(a: AllotmentIn) -> Allotment {
    Allotment {
        allocation: count(a.allocation),
        lease_ms: count(a.lease_ms),
        region_demand: count(a.region_demand),
        total_demand: count(a.total_demand),
    }
}
