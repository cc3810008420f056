//! The answer to Envoy: `overall_code`, one status per descriptor in request order, the
//! `RateLimit` headers when asked for, and every decision counted in the metrics.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use rl_engine::headers::{self, HeaderOutcome, HeaderRule};
use rl_engine::metrics::{Event, Metrics, Outcome};

use super::config::Config;
use super::decide::{duration_of, Source, Verdict};
use super::plan::{Item, Plan};
use super::tree::{Limit, Rate};

fn current_limit(limit: &Limit, rate: &Rate) -> RateLimit {
    RateLimit {
        name: limit.label.clone(),
        requests_per_unit: rate.requests_per_unit,
        unit: rate.unit as i32,
    }
}

fn clamp(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

pub(crate) fn answer(
    config: &Config,
    plan: &Plan,
    verdicts: &[Verdict],
    metrics: &Metrics,
) -> RateLimitResponse {
    let verdict = |check: usize| verdicts.get(check).copied();
    let refused = plan.items.iter().any(|item| match item {
        Item::Limited { limit, check, .. } => {
            !limit.shadow && verdict(*check).is_some_and(|v| v.over)
        }
        _ => false,
    });
    let record = |rule: &str, outcome| {
        metrics.record(Event::Decision {
            route: &config.route,
            rule,
            outcome,
        })
    };
    let mut statuses = Vec::with_capacity(plan.items.len());
    let mut shown: Vec<usize> = Vec::new();
    let mut header_rules = Vec::new();
    for item in &plan.items {
        let status = match item {
            Item::Free => DescriptorStatus {
                code: Code::Ok as i32,
                ..DescriptorStatus::default()
            },
            Item::Unlimited(limit) => {
                record(&limit.label, Outcome::Exempt);
                // As the reference service answers an unlimited descriptor.
                DescriptorStatus {
                    code: Code::Ok as i32,
                    limit_remaining: u32::MAX,
                    ..DescriptorStatus::default()
                }
            }
            Item::Limited { limit, rate, check } => {
                let v = verdict(*check).unwrap_or(Verdict {
                    over: false,
                    remaining: None,
                    reset_ms: None,
                    retry_ms: None,
                    source: Source::Open,
                });
                // A shadow limit over its threshold says OK, with nothing remaining.
                let remaining = if v.over { 0 } else { v.remaining.unwrap_or(0) };
                let over = v.over && !limit.shadow;
                // A chunk's numbers are not the store's: no header, as for a proxy's grant rule.
                if config.response_headers
                    && !limit.shadow
                    && !matches!(v.source, Source::Open | Source::Chunk)
                    && !shown.contains(check)
                {
                    shown.push(*check);
                    header_rules.push(header(limit, rate, &v));
                }
                DescriptorStatus {
                    code: if over { Code::OverLimit } else { Code::Ok } as i32,
                    current_limit: Some(current_limit(limit, rate)),
                    limit_remaining: clamp(remaining),
                    duration_until_reset: v.reset_ms.map(duration_of),
                    quota: None,
                }
            }
        };
        statuses.push(status);
    }
    RateLimitResponse {
        overall_code: if refused { Code::OverLimit } else { Code::Ok } as i32,
        statuses,
        response_headers_to_add: headers::render(&header_rules, false)
            .into_iter()
            .map(|(key, value)| HeaderValue {
                key: key.to_string(),
                value,
                raw_value: Vec::new(),
            })
            .collect(),
        ..RateLimitResponse::default()
    }
}

fn header(limit: &Limit, rate: &Rate, v: &Verdict) -> (HeaderRule, HeaderOutcome) {
    (
        HeaderRule {
            name: limit.label.clone(),
            limit: u64::from(rate.requests_per_unit),
            period: rate.period,
            capacity: rate.capacity,
            semaphore: false,
        },
        HeaderOutcome {
            remaining: if v.over { 0 } else { v.remaining.unwrap_or(0) },
            reset_after_ms: v.reset_ms.unwrap_or(0),
            retry_after_ms: if v.over { v.retry_ms } else { None },
        },
    )
}
