//! A request's checks, decided by the engine: the face translates, the engine decides (one
//! `RL.MULTI`, all or nothing, or one per hash slot on a cluster; shadow checks apart, never
//! refusing; the negative cache, the breaker and its ramp, the posture `on_store_error`, the
//! decision records), and its verdict is read back per check.
//!
//! A check no request can pass (`requests_per_unit: 0`, a cost above the capacity) is decided
//! here; the others are then only asked (`DRYRUN`), so that nothing is spent.

use std::sync::Arc;
use std::time::Duration;

use redis_rl_client::gateway::VerdictKind;
use redis_rl_client::gateway::{Check as EngineCheck, CheckOutcome, CheckSource};
use redis_rl_client::RlConnection;
use tonic::Status;

use super::config::Config;
use super::plan::{Check, Plan};
use super::Rls;

/// Where a verdict came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    Store,
    /// A chunk leased earlier (`grant`), spent in this process: what the store holds is not
    /// known here.
    Chunk,
    /// The in-memory store of this process, under `on_store_error: fallback`.
    Fallback,
    /// Nobody: the store could not answer and `on_store_error: allow` let it pass.
    Open,
    /// This process, without a call: the check can never pass.
    Here,
}

/// What one check decided (for a shadow check: what it would have decided).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Verdict {
    pub over: bool,
    /// Units the key holds after this decision.
    pub remaining: Option<u64>,
    pub reset_ms: Option<u64>,
    /// When refused: when the same request would pass.
    pub retry_ms: Option<u64>,
    pub source: Source,
}

impl Verdict {
    fn open() -> Verdict {
        Verdict {
            over: false,
            remaining: None,
            reset_ms: None,
            retry_ms: None,
            source: Source::Open,
        }
    }

    fn over(remaining: u64, reset_ms: u64, retry_ms: u64, source: Source) -> Verdict {
        Verdict {
            over: true,
            remaining: Some(remaining),
            reset_ms: Some(reset_ms),
            retry_ms: Some(retry_ms),
            source,
        }
    }

    /// A check no request can pass: over, until the end of its current window, as the
    /// reference service reports a limit's reset.
    fn never(check: &Check) -> Verdict {
        let period_ms = u64::try_from(check.rate.period.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let now_ms = redis_rl_client::gateway::now().as_micros() / 1000;
        let reset = period_ms.saturating_sub(now_ms.checked_rem(period_ms).unwrap_or(0));
        Verdict::over(0, reset, reset, Source::Here)
    }
}

impl Verdict {
    fn of(outcome: &CheckOutcome) -> Verdict {
        let source = match outcome.source {
            CheckSource::Store | CheckSource::Cache => Source::Store,
            CheckSource::Chunk => Source::Chunk,
            CheckSource::Fallback => Source::Fallback,
            CheckSource::Open => Source::Open,
        };
        Verdict {
            over: outcome.over,
            remaining: outcome.remaining,
            reset_ms: outcome.reset_after_ms,
            retry_ms: outcome.retry_after_ms,
            source,
        }
    }
}

impl<C: RlConnection + 'static> Rls<C> {
    /// One verdict per check of `plan`; `Err` is the gRPC status to answer instead.
    pub(crate) async fn decide(
        &self,
        config: &Config,
        plan: &Plan,
    ) -> Result<Vec<Verdict>, Status> {
        let never = |c: &Check| c.rule.is_none() || c.rate.never_fits(c.cost);
        let refused_here = plan.checks.iter().any(|c| !c.shadow && never(c));
        let mut out: Vec<Verdict> = plan
            .checks
            .iter()
            .map(|c| {
                if never(c) {
                    Verdict::never(c)
                } else {
                    Verdict::open()
                }
            })
            .collect();
        let mut asked = Vec::with_capacity(plan.checks.len());
        let mut checks = Vec::with_capacity(plan.checks.len());
        for (i, c) in plan.checks.iter().enumerate() {
            let (Some(rule), false) = (&c.rule, never(c)) else {
                continue;
            };
            // Keys are made of the configuration's and the request's strings.
            let key = String::from_utf8_lossy(&c.key).into_owned();
            checks.push(EngineCheck {
                rule: Arc::clone(rule),
                key,
                cost: if refused_here { 0 } else { c.cost },
            });
            asked.push(i);
        }
        if checks.is_empty() {
            return Ok(out);
        }
        let all_shadow = checks.iter().all(|c| c.rule.shadow);
        let (verdict, _) = self.gateway.check(&config.route, checks).await;
        match verdict.kind {
            VerdictKind::Error => {
                return Err(Status::internal(
                    "the module refused a store call (the decision record says which)",
                ))
            }
            VerdictKind::Shed => return Err(Status::unavailable("the gateway is saturated")),
            VerdictKind::Reject => {
                return Err(Status::invalid_argument("the request cannot be decided"))
            }
            // Shadow limits never refuse, store or no store.
            VerdictKind::Unavailable if verdict.checks.is_empty() && !all_shadow => {
                return Err(Status::unavailable(
                    "the store cannot answer (on_store_error: deny)",
                ))
            }
            _ => {}
        }
        for (i, outcome) in asked.iter().zip(&verdict.checks) {
            if let Some(slot) = out.get_mut(*i) {
                *slot = Verdict::of(outcome);
            }
        }
        if verdict.kind == VerdictKind::Refuse {
            self.ask_the_rest(config, plan, &mut out).await;
        }
        Ok(out)
    }

    /// A request refused from the negative cache left its other descriptors unasked: they are
    /// asked now without spending (one more round trip, on a refusal only), so that each
    /// status still says exactly what its key holds, as the reference service's do.
    async fn ask_the_rest(&self, config: &Config, plan: &Plan, out: &mut [Verdict]) {
        let mut asked = Vec::new();
        let mut checks = Vec::new();
        for (i, (c, v)) in plan.checks.iter().zip(out.iter()).enumerate() {
            let Some(rule) = c
                .rule
                .as_ref()
                .filter(|_| v.source == Source::Open && !c.shadow)
            else {
                continue;
            };
            checks.push(EngineCheck {
                rule: Arc::clone(rule),
                key: String::from_utf8_lossy(&c.key).into_owned(),
                cost: 0,
            });
            asked.push(i);
        }
        if checks.is_empty() {
            return;
        }
        let (verdict, _) = self.gateway.check(&config.route, checks).await;
        for (i, outcome) in asked.iter().zip(&verdict.checks) {
            if let Some(slot) = out.get_mut(*i) {
                *slot = Verdict::of(outcome);
            }
        }
    }
}

/// Milliseconds as the protobuf duration of `duration_until_reset`.
pub(crate) fn duration_of(ms: u64) -> envoy_types::pb::google::protobuf::Duration {
    let d = Duration::from_millis(ms);
    envoy_types::pb::google::protobuf::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}
