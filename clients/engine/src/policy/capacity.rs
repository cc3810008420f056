//! `capacity` (section 14): named in-flight limits, fixed or learned, that routes draw on with
//! a priority. Validated here into the core's specs ([`crate::capacity`]); the engine keeps one
//! [`crate::capacity::Capacity`] per name across reloads that leave its spec unchanged.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::field::duration;
use super::{invalid, PolicyError};
use crate::capacity::{CapacitySpec, LimitSpec, Priority};

/// The largest in-flight limit: far above what one gateway process keeps in flight.
pub const MAX_IN_FLIGHT: u64 = 100_000;
/// The longest a request may wait for a slot before it is shed: a queue longer than this is
/// latency the caller pays, not protection.
pub const MAX_WAIT: Duration = Duration::from_millis(50);
const MAX_WAIT_US: u64 = 50_000;

/// The adaptive limit's bounds when the policy gives none: from one request in flight (a
/// backend failing everything still gets probes) to a thousand, starting at 16.
const DEFAULT_MIN: u64 = 1;
const DEFAULT_MAX: u64 = 1000;
const DEFAULT_INITIAL: u64 = 16;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCapacity {
    limit: RawLimit,
    queue: Option<RawQueue>,
    fair: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "lowercase")]
enum RawLimit {
    Fixed(u64),
    Adaptive(RawAdaptive),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdaptive {
    min: Option<u64>,
    max: Option<u64>,
    initial: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQueue {
    max_wait: String,
}

/// What a route draws on: a capacity of the policy, with its priority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteCapacity {
    pub name: Arc<str>,
    pub priority: Priority,
}

/// The policy's capacities by name.
pub(super) fn validate_capacities(
    raw: BTreeMap<String, RawCapacity>,
) -> Result<BTreeMap<String, CapacitySpec>, PolicyError> {
    raw.into_iter()
        .map(|(name, c)| {
            let spec = c.validate(&format!("capacity.{name}"))?;
            Ok((name, spec))
        })
        .collect()
}

impl RawCapacity {
    fn validate(self, path: &str) -> Result<CapacitySpec, PolicyError> {
        let in_range = |field: &str, v: u64| -> Result<u32, PolicyError> {
            u32::try_from(v)
                .ok()
                .filter(|v| (1..=MAX_IN_FLIGHT).contains(&u64::from(*v)))
                .ok_or_else(|| {
                    invalid(
                        format!("{path}.limit.{field}"),
                        format!("must be in the range [1, {MAX_IN_FLIGHT}]"),
                    )
                })
        };
        let limit = match self.limit {
            RawLimit::Fixed(n) => LimitSpec::Fixed(in_range("fixed", n)?),
            RawLimit::Adaptive(a) => {
                let min = in_range("adaptive.min", a.min.unwrap_or(DEFAULT_MIN))?;
                let max = in_range("adaptive.max", a.max.unwrap_or(DEFAULT_MAX))?;
                if min > max {
                    return Err(invalid(
                        format!("{path}.limit.adaptive"),
                        format!("min ({min}) is above max ({max})"),
                    ));
                }
                let initial = match a.initial {
                    Some(i) => in_range("adaptive.initial", i)?,
                    None => u32::try_from(DEFAULT_INITIAL)
                        .unwrap_or(min)
                        .clamp(min, max),
                };
                if !(min..=max).contains(&initial) {
                    return Err(invalid(
                        format!("{path}.limit.adaptive.initial"),
                        format!("must be within min and max ([{min}, {max}])"),
                    ));
                }
                LimitSpec::Adaptive { min, max, initial }
            }
        };
        let max_wait = match self.queue.map(|q| q.max_wait) {
            // Zero is allowed: the default, written out.
            None => Duration::ZERO,
            Some(w) if matches!(w.as_str(), "0" | "0ms" | "0s") => Duration::ZERO,
            Some(w) => duration(&format!("{path}.queue.max_wait"), &w, MAX_WAIT_US, "50ms")?,
        };
        let fair = match self.fair.as_deref() {
            None => false,
            Some("tenant") => true,
            Some(other) => {
                return Err(invalid(
                    format!("{path}.fair"),
                    format!("must be \"tenant\" (got '{other}')"),
                ))
            }
        };
        Ok(CapacitySpec {
            limit,
            max_wait,
            fair,
        })
    }
}

/// A route's `capacity` and `priority`: the capacity must be the policy's, and a priority
/// belongs to a route that names one.
pub(super) fn route_capacity(
    path: &str,
    capacity: Option<String>,
    priority: Option<String>,
    capacities: &BTreeMap<String, CapacitySpec>,
) -> Result<Option<RouteCapacity>, PolicyError> {
    let Some(name) = capacity else {
        if priority.is_some() {
            return Err(invalid(
                format!("{path}.priority"),
                "a priority orders the requests of a capacity; this route names none",
            ));
        }
        return Ok(None);
    };
    if !capacities.contains_key(&name) {
        return Err(invalid(
            format!("{path}.capacity"),
            format!("unknown capacity '{name}'"),
        ));
    }
    let priority = match priority.as_deref() {
        None | Some("standard") => Priority::Standard,
        Some("critical") => Priority::Critical,
        Some("batch") => Priority::Batch,
        Some(other) => {
            return Err(invalid(
                format!("{path}.priority"),
                format!("must be critical, standard or batch (got '{other}')"),
            ))
        }
    };
    Ok(Some(RouteCapacity {
        name: name.into(),
        priority,
    }))
}
