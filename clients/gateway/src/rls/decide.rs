//! A request's checks, decided by the engine in one call: the face translates, the engine
//! decides (one `RL.MULTI`, all or nothing, or one per hash slot on a cluster; shadow checks
//! apart, never refusing; a check no request can pass, `requests_per_unit: 0` or a cost above
//! the capacity, refused without a store call; the negative cache; after a refusal before any
//! call, the other checks only asked, so each status says what its key holds; the breaker and
//! its ramp, the posture `on_store_error`, the decision records), and its verdict is read back
//! per check.

use std::sync::Arc;
use std::time::Duration;

use redis_rl_client::gateway::VerdictKind;
use redis_rl_client::gateway::{Check as EngineCheck, CheckOutcome, CheckSource};
use redis_rl_client::RlConnection;
use tonic::Status;

use super::config::Config;
use super::plan::Plan;
use super::Rls;

/// Where a verdict came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The store, or the negative cache's memory of its refusal.
    Store,
    /// A chunk leased earlier (`grant`), spent in this process: what the store holds is not
    /// known here.
    Chunk,
    /// The in-memory store of this process, under `on_store_error: fallback`.
    Fallback,
    /// Nobody: the store could not answer and `on_store_error: allow` let it pass, or the
    /// request was refused before the check could be asked.
    Open,
    /// The engine, without a call: the check can never pass.
    Blocked,
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
    fn of(outcome: &CheckOutcome) -> Verdict {
        let source = match outcome.source {
            CheckSource::Store | CheckSource::Cache => Source::Store,
            CheckSource::Chunk => Source::Chunk,
            CheckSource::Fallback => Source::Fallback,
            CheckSource::Open => Source::Open,
            CheckSource::Blocked => Source::Blocked,
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
        if plan.checks.is_empty() {
            return Ok(Vec::new());
        }
        let checks: Vec<EngineCheck> = plan
            .checks
            .iter()
            .map(|c| EngineCheck {
                blocked: c.rate.blocked(),
                // Keys are made of the configuration's and the request's strings.
                ..EngineCheck::new(
                    Arc::clone(&c.rule),
                    String::from_utf8_lossy(&c.key).into_owned(),
                    c.cost,
                )
            })
            .collect();
        let all_shadow = plan.checks.iter().all(|c| c.shadow);
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
        let open = Verdict {
            over: false,
            remaining: None,
            reset_ms: None,
            retry_ms: None,
            source: Source::Open,
        };
        Ok((0..plan.checks.len())
            .map(|i| verdict.checks.get(i).map_or(open, Verdict::of))
            .collect())
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
