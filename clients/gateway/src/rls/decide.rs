//! The store calls of one request and what they decided.
//!
//! The enforcing checks are decided by one `RL.MULTI` (all or nothing: a refusal spends on no
//! key), or on a cluster by one `RL.MULTI` per hash slot of their keys, each all or nothing on
//! its own. A check no request can pass (`requests_per_unit: 0`, a cost above the capacity) is
//! decided here, and the call then only asks (`DRYRUN`), so that nothing is spent. Shadow
//! checks never refuse, so they are not part of that decision: each is its own `RL.ADMIT`, at
//! the same time, spending when it would admit, as the reference service counts them.
//!
//! Every call has the deadline `store_timeout`, shared by all the calls of the request; the
//! posture (`on_store_error`) answers for a group whose call failed or ran out of time.

use std::time::Duration;

use futures_util::future::join_all;
use redis_rl_client::client::reply_of;
use redis_rl_client::command::{Admit, Multi, MultiRule};
use redis_rl_client::engine::metrics::{CallResult, Event};
use redis_rl_client::engine::wire::{reply, Args, Reply};
use redis_rl_client::{Error, RlConnection};
use tokio::time::Instant;
use tonic::Status;

use super::config::{Config, OnStoreError};
use super::plan::{Check, Plan};
use super::Rls;

/// Where a verdict came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    Store,
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

    fn ok(remaining: u64, reset_ms: u64, source: Source) -> Verdict {
        Verdict {
            over: false,
            remaining: Some(remaining),
            reset_ms: Some(reset_ms),
            retry_ms: None,
            source,
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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    Store,
    Local,
}

/// The store could not answer (rather than refusing the call as wrong).
fn unavailable(e: &Error) -> bool {
    matches!(e, Error::Unavailable(_) | Error::Unexpected(_))
}

/// The module refused the call: the configuration or the deployment is wrong (a key that
/// holds another type, say), and no posture applies to a store that did answer.
fn internal(e: Error) -> Status {
    Status::internal(e.to_string())
}

impl<C: RlConnection + 'static> Rls<C> {
    /// One verdict per check of `plan`; `Err` is the gRPC status to answer instead.
    pub(crate) async fn decide(
        &self,
        config: &Config,
        plan: &Plan,
    ) -> Result<Vec<Verdict>, Status> {
        let now = Instant::now();
        let deadline = now.checked_add(config.store_timeout).unwrap_or(now);
        let mut verdicts: Vec<Option<Verdict>> = plan
            .checks
            .iter()
            .map(|c| c.rate.never_fits(c.cost).then(|| Verdict::never(c)))
            .collect();
        let refused_here = plan
            .checks
            .iter()
            .zip(&verdicts)
            .any(|(c, v)| !c.shadow && v.is_some());
        let pending = |shadow: bool| {
            plan.checks
                .iter()
                .enumerate()
                .zip(&verdicts)
                .filter(move |((_, c), v)| c.shadow == shadow && v.is_none())
                .map(|((i, _), _)| i)
                .collect::<Vec<usize>>()
        };
        let groups = self.groups(plan, pending(false));
        let shadows = pending(true);
        let group_calls = groups.iter().map(|g| {
            let checks: Vec<&Check> = g.iter().filter_map(|i| plan.checks.get(*i)).collect();
            self.group(config, checks, refused_here, deadline)
        });
        let shadow_calls = shadows
            .iter()
            .filter_map(|i| plan.checks.get(*i))
            .map(|c| self.shadow(config, c, deadline));
        let (decided, shadowed) = tokio::join!(join_all(group_calls), join_all(shadow_calls));
        for (group, result) in groups.iter().zip(decided) {
            for (i, v) in group.iter().zip(result?) {
                if let Some(slot) = verdicts.get_mut(*i) {
                    *slot = Some(v);
                }
            }
        }
        for (i, v) in shadows.iter().zip(shadowed) {
            if let Some(slot) = verdicts.get_mut(*i) {
                *slot = Some(v);
            }
        }
        Ok(verdicts
            .into_iter()
            .map(|v| v.unwrap_or_else(Verdict::open))
            .collect())
    }

    /// The checks decided together: all of them on one server; on a cluster, those whose keys
    /// share a hash slot (`RL.MULTI` cannot span slots).
    fn groups(&self, plan: &Plan, checks: Vec<usize>) -> Vec<Vec<usize>> {
        if checks.is_empty() {
            return Vec::new();
        }
        if !self.cluster {
            return vec![checks];
        }
        let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
        for i in checks {
            let Some(c) = plan.checks.get(i) else {
                continue;
            };
            let slot = redis::cluster_routing::get_slot(&c.key);
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, g)) => g.push(i),
                None => groups.push((slot, vec![i])),
            }
        }
        groups.into_iter().map(|(_, g)| g).collect()
    }

    /// One group, with the posture when the store cannot answer.
    async fn group(
        &self,
        config: &Config,
        checks: Vec<&Check>,
        dry_run: bool,
        deadline: Instant,
    ) -> Result<Vec<Verdict>, Status> {
        match self.multi(Via::Store, &checks, dry_run, deadline).await {
            Ok(v) => Ok(v),
            // Only asking, since the request is refused already: the refusal needs no store.
            Err(e) if unavailable(&e) && dry_run => {
                Ok(checks.iter().map(|_| Verdict::open()).collect())
            }
            Err(e) if unavailable(&e) => match config.on_store_error {
                OnStoreError::Deny => Err(Status::unavailable(e.to_string())),
                OnStoreError::Allow => Ok(checks.iter().map(|_| Verdict::open()).collect()),
                OnStoreError::Fallback => self
                    .multi(Via::Local, &checks, dry_run, deadline)
                    .await
                    .map_err(internal),
            },
            Err(e) => Err(internal(e)),
        }
    }

    /// One `RL.MULTI` over `checks`, read into a verdict per check.
    async fn multi(
        &self,
        via: Via,
        checks: &[&Check],
        dry_run: bool,
        deadline: Instant,
    ) -> Result<Vec<Verdict>, Error> {
        // Rules are named by their position, so that `denied_by` names exactly one.
        let rules = checks.iter().enumerate().map(|(i, c)| rule(i, c)).collect();
        let args = Multi { rules, dry_run }.args()?;
        let key = checks.first().map(|c| c.key.as_slice()).unwrap_or_default();
        let decision = reply::multi_decision(&self.exec(via, &args, key, deadline).await?)?;
        if decision.rules.len() != checks.len() {
            return Err(Error::Unexpected(format!(
                "RL.MULTI answered {} rules for {}",
                decision.rules.len(),
                checks.len()
            )));
        }
        let source = match via {
            Via::Store => Source::Store,
            Via::Local => Source::Fallback,
        };
        let denied = match (&decision.denied_by, decision.allowed) {
            (_, true) => None,
            (Some(name), false) => Some(name.parse::<usize>().map_err(|_| {
                Error::Unexpected(format!("RL.MULTI denied by an unknown rule {name}"))
            })?),
            (None, false) => return Err(Error::Unexpected("RL.MULTI refused by no rule".into())),
        };
        let spent = decision.allowed && !dry_run;
        let mut out = Vec::with_capacity(checks.len());
        let mut unsure = Vec::new();
        for (i, (c, r)) in checks.iter().zip(&decision.rules).enumerate() {
            // A rule reports what it holds after spending when it admits, what it holds now
            // when it refuses; nothing was spent unless the call was admitted for real.
            let now_holds = r.remaining.saturating_add(c.cost);
            let held = if spent { r.remaining } else { now_holds };
            let v = match denied {
                None => Verdict::ok(held, r.reset_after_ms, source),
                Some(p) if i == p => Verdict::over(
                    r.remaining,
                    r.reset_after_ms,
                    decision.retry_after_ms,
                    source,
                ),
                // Rules before the first refusal admitted, and so does any rule whose report
                // covers the cost: a refusing rule holds less than the cost.
                Some(p) if i < p || r.remaining >= c.cost => {
                    Verdict::ok(now_holds, r.reset_after_ms, source)
                }
                Some(_) => {
                    unsure.push(i);
                    Verdict::over(
                        r.remaining,
                        r.reset_after_ms,
                        decision.retry_after_ms,
                        source,
                    )
                }
            };
            out.push(v);
        }
        // A later rule holding less than its cost may admit (reporting what spending would
        // leave) or refuse: asking it alone, without spending, tells which.
        let asks = unsure.iter().filter_map(|i| checks.get(*i)).map(|c| async {
            let args = admit(c, true).args().ok()?;
            let reply = self.exec(via, &args, &c.key, deadline).await.ok()?;
            reply::decision(&reply).ok()
        });
        for (i, answer) in unsure.iter().zip(join_all(asks).await) {
            let (Some(d), Some(slot), Some(c)) = (answer, out.get_mut(*i), checks.get(*i)) else {
                continue;
            };
            *slot = if d.allowed {
                Verdict::ok(d.remaining.saturating_add(c.cost), d.reset_after_ms, source)
            } else {
                Verdict::over(d.remaining, d.reset_after_ms, d.retry_after_ms, source)
            };
        }
        Ok(out)
    }

    /// A shadow check: its own `RL.ADMIT`, which spends when it admits; it never refuses.
    async fn shadow(&self, config: &Config, check: &Check, deadline: Instant) -> Verdict {
        let Ok(args) = admit(check, false).args() else {
            return Verdict::open();
        };
        let mut via = Via::Store;
        let mut answer = self.exec(via, &args, &check.key, deadline).await;
        if matches!(&answer, Err(e) if unavailable(e))
            && config.on_store_error == OnStoreError::Fallback
        {
            via = Via::Local;
            answer = self.exec(via, &args, &check.key, deadline).await;
        }
        let source = match via {
            Via::Store => Source::Store,
            Via::Local => Source::Fallback,
        };
        match answer.and_then(|r| reply::decision(&r)) {
            Ok(d) if d.allowed => Verdict::ok(d.remaining, d.reset_after_ms, source),
            Ok(d) => Verdict::over(d.remaining, d.reset_after_ms, d.retry_after_ms, source),
            Err(_) => Verdict::open(),
        }
    }

    /// Sends one command: to the store under the deadline (and counted in the latency
    /// histogram), or to the in-memory fallback store.
    async fn exec(
        &self,
        via: Via,
        args: &Args,
        key: &[u8],
        deadline: Instant,
    ) -> Result<Reply, Error> {
        if via == Via::Local {
            let now = redis_rl_client::gateway::now().as_micros();
            let mut local = self.local.lock().unwrap_or_else(|p| p.into_inner());
            return Ok(local.call(args.as_slice(), now));
        }
        let started = Instant::now();
        let (result, answer) =
            match tokio::time::timeout_at(deadline, self.rl.send(args, key)).await {
                Ok(Ok(value)) => (CallResult::Ok, Ok(reply_of(&value))),
                Ok(Err(e)) => (CallResult::Error, Err(e)),
                Err(_) => (
                    CallResult::Timeout,
                    Err(Error::Unavailable(
                        "no answer before the deadline (store_timeout)".into(),
                    )),
                ),
            };
        self.metrics.record(Event::StoreCall {
            result,
            latency: started.elapsed(),
        });
        answer
    }
}

fn rule(index: usize, c: &Check) -> MultiRule {
    MultiRule {
        name: index.to_string(),
        key: c.key.clone(),
        algo: Some(c.rate.algo),
        limit: u64::from(c.rate.requests_per_unit),
        period: c.rate.period,
        burst: c.rate.burst,
        cost: Some(c.cost),
    }
}

fn admit(c: &Check, dry_run: bool) -> Admit {
    Admit {
        key: c.key.clone(),
        limit: u64::from(c.rate.requests_per_unit),
        period: c.rate.period,
        burst: c.rate.burst,
        cost: Some(c.cost),
        algo: Some(c.rate.algo),
        dry_run,
        reserve: None,
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
