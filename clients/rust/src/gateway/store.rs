//! What the store is asked for one request, in order: grant rules from their local chunks,
//! semaphores, `settle` rules, one `RL.MULTI`, then the rules outside it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::leases::{new_holder, Held, Reserved};
use super::{Gateway, Keyed};
use crate::client::{Rl, RlConnection};
use crate::command::{Acquire, Admit, Grant, Multi, MultiRule};
use crate::headers::Outcome as HeaderOutcome;
use crate::metrics::Event;
use crate::policy::{GrantSpec, RateSpec, RuleKind, SemaphoreSpec};
use crate::reply::Error;

/// How the store answered.
pub(super) struct Answer {
    /// The rules that refused: (index in the route, retry after in ms). Empty when admitted.
    pub(super) refused: Vec<(usize, u64)>,
    pub(super) outcomes: Vec<(usize, HeaderOutcome)>,
    pub(super) shadow_refused: Vec<usize>,
}

/// Tokens leased with `RL.GRANT`, spent locally until `until`.
#[derive(Debug, Default)]
pub(super) struct Chunk {
    tokens: u64,
    until: Option<Instant>,
    /// Bumped by each refill, so a token is given back only to the chunk it came from.
    generation: u64,
}

/// A token taken from a chunk, to give back if a later rule refuses the request.
struct Taken {
    chunk: Arc<tokio::sync::Mutex<Chunk>>,
    generation: u64,
    cost: u64,
}

impl<C: RlConnection + 'static> Gateway<C> {
    /// Grant rules first, from their local chunks; then the store rules. Tokens taken are given
    /// back when a later rule refuses.
    pub(super) async fn ask(
        &self,
        rl: &Rl<C>,
        keyed: &[Keyed],
        id: &[u8],
        held: &mut Vec<Held>,
        reserved: &mut Vec<Reserved>,
    ) -> Result<Answer, Error> {
        let mut taken = Vec::new();
        for (i, k) in keyed.iter().enumerate() {
            let RuleKind::Rate(rate) = &k.rule.kind else {
                continue;
            };
            let Some(grant) = rate.grant.filter(|_| !k.rule.shadow) else {
                continue;
            };
            match self.take(rl, k, rate, grant).await? {
                Ok(t) => taken.push(t),
                Err(retry_after_ms) => {
                    give_back(taken).await;
                    return Ok(Answer {
                        refused: vec![(i, retry_after_ms)],
                        outcomes: vec![(i, HeaderOutcome::refused(retry_after_ms))],
                        shadow_refused: Vec::new(),
                    });
                }
            }
        }
        let answer = self.ask_store(rl, keyed, id, held, reserved).await?;
        if !answer.refused.is_empty() {
            give_back(taken).await;
        }
        Ok(answer)
    }

    /// Takes `cost` tokens of a grant rule from its chunk, refilling it with `RL.GRANT` when it
    /// is spent or lapsed. `Err(retry_after_ms)` when the store grants too little.
    async fn take(
        &self,
        rl: &Rl<C>,
        k: &Keyed,
        rate: &RateSpec,
        grant: GrantSpec,
    ) -> Result<Result<Taken, u64>, Error> {
        let slot = format!("{}:{}{}", k.rule.name.len(), k.rule.name, k.key);
        let chunk = {
            let mut chunks = self.chunks.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(chunks.get_or_insert(slot, Default::default))
        };
        let mut c = chunk.lock().await;
        let live = c.until.is_some_and(|until| Instant::now() < until);
        if !live || c.tokens < rate.cost {
            let mut request = Grant::new(
                k.key.as_bytes(),
                rate.rule.limit(),
                Duration::from_micros(rate.rule.period_us()),
                grant.want.max(rate.cost),
            )
            .algo(rate.algo)
            .ttl(grant.ttl);
            if rate.burst_given {
                request = request.burst(rate.rule.burst());
            }
            let reply = rl.grant(&request).await?;
            self.metrics
                .record(Event::GrantRefill { rule: &k.rule.name });
            // The chunk lapses `valid_ms` after its reply arrived; unspent tokens lapse with it.
            c.tokens = reply.granted;
            c.until = Instant::now().checked_add(Duration::from_millis(reply.valid_ms));
            c.generation = c.generation.wrapping_add(1);
            if c.tokens < rate.cost {
                return Ok(Err(reply.retry_after_ms.max(1)));
            }
        }
        c.tokens = c.tokens.saturating_sub(rate.cost);
        Ok(Ok(Taken {
            chunk: Arc::clone(&chunk),
            generation: c.generation,
            cost: rate.cost,
        }))
    }

    /// Semaphores first, then the `settle` rules (`RESERVE id`), then one `RL.MULTI`, then the
    /// shadow rules. A refusal stops there: the slots already acquired are
    /// in `held`, to be released, and reservations already made are refunded (settled at 0).
    async fn ask_store(
        &self,
        rl: &Rl<C>,
        keyed: &[Keyed],
        id: &[u8],
        held: &mut Vec<Held>,
        reserved: &mut Vec<Reserved>,
    ) -> Result<Answer, Error> {
        let mut answer = Answer {
            refused: Vec::new(),
            outcomes: Vec::new(),
            shadow_refused: Vec::new(),
        };
        for (i, k) in keyed.iter().enumerate() {
            let RuleKind::Semaphore(sem) = &k.rule.kind else {
                continue;
            };
            // A shadow semaphore holds a slot of its own namespace like any other, so that
            // its count is the concurrency it would see, and never refuses.
            let key = k.store_key().into_bytes();
            // The holder is chosen here and the slot counted as held before the reply, so one
            // whose reply is lost (a missed deadline) is released with the request's others
            // instead of staying taken until its lease ends.
            let holder = new_holder();
            held.push(Held {
                key: key.clone(),
                holder: holder.clone(),
                lease: sem.lease,
            });
            let acquire = Acquire::new(key, sem.concurrency, sem.lease).holder(holder);
            let lease = rl.acquire(&acquire).await?;
            if !lease.acquired {
                held.pop();
                if k.rule.shadow {
                    answer.shadow_refused.push(i);
                } else {
                    let retry = lease.retry_after_ms;
                    let outcome = semaphore_outcome(sem, lease.in_flight, Some(retry));
                    answer.outcomes.push((i, outcome));
                    answer.refused.push((i, retry));
                    return Ok(answer);
                }
            } else if !k.rule.shadow {
                answer
                    .outcomes
                    .push((i, semaphore_outcome(sem, lease.in_flight, None)));
            }
        }

        for (i, k) in keyed.iter().enumerate() {
            let RuleKind::Rate(rate) = &k.rule.kind else {
                continue;
            };
            if !k.settles() {
                continue;
            }
            let admit = admit_of(k.key.as_bytes(), rate).reserve(id, None);
            let decided = rl.admit(&admit).await?;
            answer.outcomes.push((i, HeaderOutcome::of(&decided)));
            if !decided.allowed {
                refund(rl, reserved).await?;
                answer.refused.push((i, decided.retry_after_ms));
                return Ok(answer);
            }
            reserved.push(Reserved {
                key: k.key.clone().into_bytes(),
                id: id.to_vec(),
            });
        }

        let multi: Vec<(usize, MultiRule)> = keyed
            .iter()
            .enumerate()
            .filter(|(_, k)| k.rule.in_multi() && !k.settles())
            .filter_map(|(i, k)| match &k.rule.kind {
                RuleKind::Rate(rate) => {
                    let mut rule = MultiRule::new(
                        k.rule.name.clone(),
                        k.key.as_bytes(),
                        rate.rule.limit(),
                        Duration::from_micros(rate.rule.period_us()),
                    )
                    .algo(rate.algo)
                    .cost(rate.cost);
                    if rate.burst_given {
                        rule = rule.burst(rate.rule.burst());
                    }
                    Some((i, rule))
                }
                RuleKind::Semaphore(_) => None,
            })
            .collect();
        if !multi.is_empty() {
            let index: HashMap<String, usize> =
                multi.iter().map(|(i, r)| (r.name.clone(), *i)).collect();
            let decided = rl
                .multi(&Multi::new(multi.into_iter().map(|(_, r)| r).collect()))
                .await?;
            for rule in &decided.rules {
                if let Some(i) = index.get(&rule.name) {
                    let refusing = decided.denied_by.as_deref() == Some(rule.name.as_str());
                    answer.outcomes.push((
                        *i,
                        HeaderOutcome {
                            remaining: rule.remaining,
                            reset_after_ms: rule.reset_after_ms,
                            retry_after_ms: refusing.then_some(decided.retry_after_ms),
                        },
                    ));
                }
            }
            if !decided.allowed {
                refund(rl, reserved).await?;
                let by = decided.denied_by.as_ref().and_then(|name| index.get(name));
                // A refusal without a known rule is still a refusal: pin it on the first.
                let i = by.copied().or_else(|| index.values().min().copied());
                answer
                    .refused
                    .push((i.unwrap_or_default(), decided.retry_after_ms));
                return Ok(answer);
            }
        }

        for (i, k) in keyed.iter().enumerate() {
            let RuleKind::Rate(rate) = &k.rule.kind else {
                continue;
            };
            if k.rule.in_multi() || (rate.grant.is_some() && !k.rule.shadow) {
                continue;
            }
            let decided = rl.admit(&admit_of(k.store_key(), rate)).await?;
            if k.rule.shadow {
                if !decided.allowed {
                    answer.shadow_refused.push(i);
                }
                continue;
            }
            answer.outcomes.push((i, HeaderOutcome::of(&decided)));
            if !decided.allowed {
                refund(rl, reserved).await?;
                answer.refused.push((i, decided.retry_after_ms));
                return Ok(answer);
            }
        }
        Ok(answer)
    }
}

/// Returns tokens to the chunks they came from (a refilled chunk does not take them back).
async fn give_back(taken: Vec<Taken>) {
    for t in taken {
        let mut c = t.chunk.lock().await;
        if c.generation == t.generation {
            c.tokens = c.tokens.saturating_add(t.cost);
        }
    }
}

fn semaphore_outcome(
    sem: &SemaphoreSpec,
    in_flight: u64,
    retry_after_ms: Option<u64>,
) -> HeaderOutcome {
    HeaderOutcome {
        remaining: sem.concurrency.saturating_sub(in_flight),
        reset_after_ms: 0,
        retry_after_ms,
    }
}

/// `RL.ADMIT` of a rate rule on `key`, with the rule as the policy states it.
fn admit_of(key: impl Into<Vec<u8>>, rate: &RateSpec) -> Admit {
    let admit = Admit::new(
        key,
        rate.rule.limit(),
        Duration::from_micros(rate.rule.period_us()),
    )
    .algo(rate.algo)
    .cost(rate.cost);
    if rate.burst_given {
        admit.burst(rate.rule.burst())
    } else {
        admit
    }
}

/// Gives back what the request reserved before a later rule refused it.
async fn refund<C: RlConnection>(rl: &Rl<C>, reserved: &mut Vec<Reserved>) -> Result<(), Error> {
    for r in std::mem::take(reserved) {
        rl.settle(&r.key, &r.id, 0).await?;
    }
    Ok(())
}
