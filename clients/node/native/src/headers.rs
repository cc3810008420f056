//! The engine's header rendering (clients/SPEC.md section 3) for what the typed client
//! decided: the gateway's own fields, for an application that calls `admit` or `multi` itself.

use std::time::Duration;

use napi_derive::napi;
use rl_engine::headers::{self, HeaderOutcome, HeaderRule};

/// One rule as the headers show it, and what it decided.
#[napi(object)]
pub struct ShownRule {
    pub name: String,
    /// For a semaphore: its capacity.
    pub limit: f64,
    /// Unused for a semaphore.
    pub period_ms: Option<f64>,
    pub capacity: f64,
    pub semaphore: Option<bool>,
    pub remaining: f64,
    pub reset_after_ms: f64,
    /// Given when this rule refused.
    pub retry_after_ms: Option<f64>,
}

/// `RateLimit-Policy` and `RateLimit` (with `X-RateLimit-*` when `legacy`) as [name, value]
/// pairs, one item per rule in order; no rule, no field.
#[napi]
pub fn render_headers(rules: Vec<ShownRule>, legacy: Option<bool>) -> Vec<Vec<String>> {
    // Numbers cross as doubles: the casts saturate (a negative or NaN one is 0).
    let shown: Vec<_> = rules
        .into_iter()
        .map(|r| {
            let rule = HeaderRule {
                name: r.name,
                limit: r.limit as u64,
                period: Duration::from_millis(r.period_ms.unwrap_or(0.0) as u64),
                capacity: r.capacity as u64,
                semaphore: r.semaphore.unwrap_or(false),
            };
            let outcome = HeaderOutcome {
                remaining: r.remaining as u64,
                reset_after_ms: r.reset_after_ms as u64,
                retry_after_ms: r.retry_after_ms.map(|ms| ms as u64),
            };
            (rule, outcome)
        })
        .collect();
    headers::render(&shown, legacy.unwrap_or(false))
        .into_iter()
        .map(|(name, value)| vec![name.to_string(), value])
        .collect()
}
