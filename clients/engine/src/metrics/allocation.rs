//! The global rules' families (section 15): per rule, the allocations this gateway enforces,
//! the demand it will report, the keys it holds, and the age of the oldest answer behind an
//! allocation (the staleness an operator alarms on), read from the table when rendered.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use super::text::{escape, header, seconds};
use crate::allocation::{AllocationUse, Allocations};

/// A family: its name, its help, and each rule's value (none: no sample).
type Family = (
    &'static str,
    &'static str,
    fn(&AllocationUse) -> Option<String>,
);
use crate::time::Instant;

/// The engine's allocations, once it has registered them.
#[derive(Default)]
pub(super) struct Registered(Mutex<Option<Arc<Allocations>>>);

impl Registered {
    pub(super) fn set(&self, allocations: Arc<Allocations>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(allocations);
    }

    pub(super) fn render(&self, out: &mut String, now: Instant) {
        let Some(allocations) = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone() else {
            return;
        };
        let (rules, _) = allocations.usage(now);
        if rules.is_empty() {
            return;
        }
        let families: [Family; 4] = [
            (
                "rl_gateway_allocation_units",
                "Units per period this gateway's region may admit on the global rule's keys (the sum over its keys).",
                |u| Some(u.allocation.to_string()),
            ),
            (
                "rl_gateway_allocation_demand",
                "Units per period asked on the global rule's keys since their last report (admitted and refused).",
                |u| Some(u.demand.to_string()),
            ),
            (
                "rl_gateway_allocation_keys",
                "Keys of the global rule this gateway holds an allocation for.",
                |u| Some(u.keys.to_string()),
            ),
            (
                "rl_gateway_allocation_lease_age_seconds",
                "Age of the oldest home store answer behind an allocation of the rule: the staleness to alarm on.",
                |u| {
                    u.lease_age
                        .map(|a| seconds(u64::try_from(a.as_micros()).unwrap_or(u64::MAX)))
                },
            ),
        ];
        for (name, help, value) in families {
            header(out, name, "gauge", help);
            for u in &rules {
                if let Some(v) = value(u) {
                    let _ = writeln!(out, "{name}{{rule=\"{}\"}} {v}", escape(&u.rule));
                }
            }
        }
    }
}
