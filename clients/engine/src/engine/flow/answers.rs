//! What the store's answers mean for the request: chunks refilled, slots held, reservations
//! made, refusals, and the replicas' acknowledgements of durable rules.

use std::time::Duration;

use super::{Expect, Pending, Reserved, Taken};
use crate::engine::{lock, Answer, Chunk, Step};
use crate::headers::HeaderOutcome;
use crate::policy::RuleKind;
use crate::time::Instant;
use crate::wire::{reply, Error, Reply};
use rl_core::bounds::DEFAULT_KEEP_US;

impl Pending {
    pub(super) fn take_reply(
        &mut self,
        expect: Expect,
        reply: Result<Reply, Error>,
        now: Instant,
    ) -> Result<(), Error> {
        let reply = reply?;
        let Some(ctx) = self.ctx.as_ref() else {
            return Ok(());
        };
        match expect {
            Expect::Grant { index, slot } => {
                let granted = reply::grant(&reply);
                let cost = ctx.rule_cost(index);
                let mut chunks = lock(&self.shared.chunks);
                let chunk = chunks.get_or_insert_mut(&slot, Chunk::default);
                chunk.refilling = None;
                let granted = granted?;
                self.refilled.push(index);
                // The chunk lapses `valid_ms` after its reply arrived; unspent tokens lapse
                // with it.
                chunk.tokens = granted.granted;
                chunk.until = now.checked_add(Duration::from_millis(granted.valid_ms));
                chunk.generation = chunk.generation.wrapping_add(1);
                if chunk.tokens < cost {
                    let wait = granted.retry_after_ms.max(1);
                    self.answer.refused.push((index, wait));
                    self.answer
                        .outcomes
                        .push((index, HeaderOutcome::refused(wait)));
                } else {
                    chunk.tokens -= cost;
                    self.taken.push(Taken {
                        index,
                        generation: chunk.generation,
                        cost,
                    });
                }
            }
            Expect::Acquire { index } => {
                let lease = reply::lease(&reply)?;
                let Some(k) = ctx.keyed.get(index) else {
                    return Ok(());
                };
                let RuleKind::Semaphore(sem) = &k.rule.kind else {
                    return Ok(());
                };
                let outcome = |retry| HeaderOutcome {
                    remaining: sem.concurrency.saturating_sub(lease.in_flight),
                    reset_after_ms: 0,
                    retry_after_ms: retry,
                };
                if !lease.acquired {
                    self.held.pop();
                    if k.rule.shadow {
                        self.answer.shadow_refused.push(index);
                    } else {
                        let retry = lease.retry_after_ms;
                        self.answer.outcomes.push((index, outcome(Some(retry))));
                        self.answer.refused.push((index, retry));
                    }
                } else if k.rule.shadow {
                    self.answer.shadow_admitted.push(index);
                } else {
                    self.answer.outcomes.push((index, outcome(None)));
                    if ctx.checks {
                        self.answer.taken.push(index);
                    }
                }
            }
            Expect::Reserve { index, .. } if reply::reservations_full(&reply) => {
                // The key keeps as many reservations as the module allows (a tenant's
                // attempts in flight or failed under distinct Idempotency-Keys): the caller's
                // doing, so a 429, not a 500. They are all forgotten within the module's keep;
                // one may end sooner, so the refusal is not cached.
                let wait = DEFAULT_KEEP_US / 1000;
                self.answer
                    .outcomes
                    .push((index, HeaderOutcome::refused(wait)));
                self.answer.refused.push((index, wait));
                self.answer.uncached.push(index);
            }
            Expect::Reserve { index, id } => {
                let decided = reply::decision(&reply)?;
                self.answer
                    .outcomes
                    .push((index, HeaderOutcome::of(&decided)));
                if decided.allowed {
                    if ctx.checks {
                        self.answer.taken.push(index);
                    }
                    if let Some(k) = ctx.keyed.get(index) {
                        let charge = k.charge();
                        self.reserved.push(Reserved {
                            key: k.key.clone().into_bytes(),
                            id,
                            estimate: k.cost(),
                            retriable: self.keyed_id && charge.is_none(),
                            charge,
                        });
                    }
                } else {
                    self.answer.refused.push((index, decided.retry_after_ms));
                }
            }
            Expect::Multi { rules } => {
                let check = |name: &str| {
                    rules
                        .iter()
                        .find(|&&(i, renamed)| {
                            super::calls::rule_name(ctx, i, renamed).is_some_and(|n| n.is(name))
                        })
                        .map(|(i, _)| *i)
                };
                // Read in place: the rules' names are only compared with the call's.
                let decided = reply::multi_view(&reply)?;
                for rule in &decided.rules {
                    if let Some(i) = check(rule.name) {
                        let refusing = decided.denied_by == Some(rule.name);
                        self.answer.outcomes.push((
                            i,
                            HeaderOutcome {
                                remaining: rule.remaining,
                                reset_after_ms: rule.reset_after_ms,
                                retry_after_ms: refusing.then_some(decided.retry_after_ms),
                            },
                        ));
                    }
                }
                if decided.allowed {
                    // Only keyed checks read it back: no allocation on an HTTP request's path.
                    if ctx.checks {
                        self.answer.spent.extend(rules.iter().map(|(i, _)| *i));
                    }
                } else {
                    let by = decided.denied_by.and_then(check);
                    // A refusal without a known rule is still a refusal: pin it on the first.
                    let i = by.or_else(|| rules.iter().map(|(i, _)| *i).min());
                    self.answer
                        .refused
                        .push((i.unwrap_or_default(), decided.retry_after_ms));
                }
            }
            Expect::Ask { index } => {
                let decided = reply::decision(&reply)?;
                self.answer
                    .outcomes
                    .push((index, HeaderOutcome::of(&decided)));
                if !decided.allowed {
                    self.answer.refused.push((index, decided.retry_after_ms));
                }
            }
            Expect::Shadow { index } => {
                let decided = reply::decision(&reply)?;
                // Never in the headers (a shadow rule is not shown); read by keyed checks.
                self.answer
                    .outcomes
                    .push((index, HeaderOutcome::of(&decided)));
                if decided.allowed {
                    self.answer.shadow_admitted.push(index);
                } else {
                    self.answer.shadow_refused.push(index);
                }
            }
            Expect::Wait { .. } => {}
        }
        Ok(())
    }

    /// The answers to `WAIT`: fewer than one acknowledgement, an error or no answer counts
    /// `unreplicated_admit`; the admission stands.
    pub(super) fn waited(&mut self, expected: Vec<Expect>, answers: Vec<Answer>) -> Step {
        let mut answers = answers.into_iter();
        let mut unreplicated = Vec::new();
        for expect in expected {
            let acked = matches!(answers.next(), Some(Answer::Reply(Reply::Int(n))) if n >= 1);
            if let (Expect::Wait { indices }, false) = (expect, acked) {
                unreplicated.extend(indices);
            }
        }
        let mut log = Vec::new();
        if let Some(ctx) = self.ctx.as_ref() {
            for i in unreplicated {
                self.shared
                    .count(ctx, i, crate::metrics::Outcome::UnreplicatedAdmit, &mut log);
            }
        }
        match self.admitted() {
            Step::Done(mut verdict) => {
                verdict.log.extend(log);
                Step::Done(verdict)
            }
            step => step,
        }
    }
}
