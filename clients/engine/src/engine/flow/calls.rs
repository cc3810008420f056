//! The calls of each phase: what a rule asks the store, in the module's arguments.

use std::time::Duration;

use super::{Expect, Held, Pending, Phase, Taken};
use crate::engine::{lock, Call, Chunk, Step};
use crate::metrics::Event;
use crate::policy::RuleKind;
use crate::time::Instant;
use crate::wire::command::{Acquire, Admit, Grant, Multi, MultiRule};
use crate::wire::slot;

impl Pending {
    /// A grant rule's turn: spend from its live chunk, or refill it, or wait for the refill
    /// another request has in flight. `None` when nothing needs the store.
    pub(super) fn grant(&mut self, index: usize, now: Instant) -> Option<Step> {
        let ctx = self.ctx.as_ref()?;
        let k = ctx.keyed.get(index)?;
        let RuleKind::Rate(rate) = &k.rule.kind else {
            return None;
        };
        let grant = rate.grant.filter(|_| !k.rule.shadow && k.spend)?;
        let cost = k.cost;
        let slot = format!("{}:{}{}", k.rule.name.len(), k.rule.name, k.key);
        let mut chunks = lock(&self.shared.chunks);
        let chunk = chunks.get_or_insert_mut(slot.clone(), Chunk::default);
        let live = chunk.until.is_some_and(|until| now < until);
        if live && chunk.tokens >= cost {
            chunk.tokens -= cost;
            self.taken.push(Taken {
                slot,
                generation: chunk.generation,
                cost,
            });
            return None;
        }
        // Past its deadline (it waited for others' refills), a request sends nothing more.
        if now >= self.deadline {
            drop(chunks);
            return Some(self.waited_out(now));
        }
        // A refill in flight is waited for, unless it is older than any answer can be.
        let stale = self.shared.timeout(&ctx.policy).saturating_mul(2);
        if chunk
            .refilling
            .is_some_and(|since| now.duration_since(since) < stale)
        {
            let until = now
                .saturating_add(Duration::from_millis(1))
                .min(self.deadline);
            // Come back to this rule.
            self.phase = Phase::Grant(index);
            return Some(Step::Wait { until });
        }
        chunk.refilling = Some(now);
        drop(chunks);
        let mut request = Grant::new(
            k.key.as_bytes(),
            rate.rule.limit(),
            Duration::from_micros(rate.rule.period_us()),
            grant.want.max(cost),
        )
        .algo(rate.algo)
        .ttl(grant.ttl)
        .deadline(deadline_ms(self.deadline, &ctx.policy));
        if rate.burst_given {
            request = request.burst(rate.rule.burst());
        }
        let call = match request.args() {
            Ok(args) => Call {
                args,
                key: k.key.clone().into_bytes(),
            },
            Err(e) => return Some(self.broken(e, now)),
        };
        self.shared
            .metrics
            .record(Event::GrantRefill { rule: &k.rule.name });
        self.expect.push(Expect::Grant { index, slot });
        // After the refill this same rule spends from the new chunk.
        self.phase = Phase::Grant(index + 1);
        Some(self.ask(vec![call]))
    }

    pub(super) fn acquire(&mut self, index: usize) -> Option<Call> {
        let ctx = self.ctx.as_ref()?;
        let k = ctx.keyed.get(index)?;
        let RuleKind::Semaphore(sem) = &k.rule.kind else {
            return None;
        };
        // The holder is chosen here and the slot counted as held before the reply, so one
        // whose reply is lost (a missed deadline) is released with the request's others
        // instead of staying taken until its lease ends.
        let key = k.store_key().into_bytes();
        let holder = format!("{:016x}", self.shared.rng.u64()).into_bytes();
        self.held.push(Held {
            key: key.clone(),
            holder: holder.clone(),
            lease: sem.lease,
        });
        let args = Acquire::new(key.clone(), sem.concurrency, sem.lease)
            .holder(holder)
            .deadline(deadline_ms(self.deadline, &ctx.policy))
            .args()
            .ok()?;
        self.expect.push(Expect::Acquire { index });
        Some(Call { args, key })
    }

    pub(super) fn reserve(&mut self, index: usize) -> Option<Call> {
        let ctx = self.ctx.as_ref()?;
        let k = ctx.keyed.get(index)?;
        let RuleKind::Rate(rate) = &k.rule.kind else {
            return None;
        };
        if !k.settles() {
            return None;
        }
        let draw = || {
            let rng = &self.shared.rng;
            format!("{:016x}{:016x}", rng.u64(), rng.u64()).into_bytes()
        };
        // A charge rule's reservation is its own, never the caller's `Idempotency-Key`: a
        // caller naming one key on concurrent attempts would otherwise be handed the first
        // attempt's admission, uncharged, however many of them fail.
        let id = if k.charge().is_some() {
            draw()
        } else {
            if self.id.is_empty() {
                self.id = draw();
            }
            self.id.clone()
        };
        let args = admit_of(k.key.as_bytes(), rate, k.cost)
            .reserve(id.clone(), None)
            .deadline(deadline_ms(self.deadline, &ctx.policy))
            .args()
            .ok()?;
        self.expect.push(Expect::Reserve { index, id });
        Some(Call {
            args,
            key: k.key.clone().into_bytes(),
        })
    }

    /// The rules only asked (`DRYRUN`), each its own `RL.ADMIT`: `RL.MULTI` spends on all of
    /// its rules or none, and these spend nothing.
    pub(super) fn asks(&mut self) -> Vec<Call> {
        let Some(ctx) = self.ctx.as_ref() else {
            return Vec::new();
        };
        let mut calls = Vec::new();
        for (i, k) in ctx.keyed.iter().enumerate() {
            let RuleKind::Rate(rate) = &k.rule.kind else {
                continue;
            };
            if !k.asks() {
                continue;
            }
            let ask = admit_of(k.key.as_bytes(), rate, k.cost)
                .dry_run()
                .deadline(deadline_ms(self.deadline, &ctx.policy));
            if let Ok(args) = ask.args() {
                calls.push(Call {
                    args,
                    key: k.key.clone().into_bytes(),
                });
                self.expect.push(Expect::Ask { index: i });
            }
        }
        calls
    }

    /// One `RL.MULTI` of the rate rules that spend, all or nothing; with `Options::cluster`,
    /// one per hash slot of their keys (a call cannot span slots), each all or nothing.
    pub(super) fn multi(&mut self) -> Vec<Call> {
        let Some(ctx) = self.ctx.as_ref() else {
            return Vec::new();
        };
        let by_slot = self.shared.options.cluster;
        // Per slot: the rules, and the keyed check each stands for (a call's rules are few, so
        // a list searched in order, not a map: no allocation beyond the two lists).
        let mut groups: Vec<(u16, Vec<MultiRule>, Vec<usize>)> = Vec::new();
        for (i, k) in ctx.keyed.iter().enumerate() {
            let RuleKind::Rate(rate) = &k.rule.kind else {
                continue;
            };
            if !k.rule.in_multi() || k.settles() || !k.spend {
                continue;
            }
            let mut rule = MultiRule::new(
                k.rule.name.clone(),
                k.key.as_bytes(),
                rate.rule.limit(),
                Duration::from_micros(rate.rule.period_us()),
            )
            .algo(rate.algo)
            .cost(k.cost);
            if rate.burst_given {
                rule = rule.burst(rate.rule.burst());
            }
            let s = if by_slot { slot(k.key.as_bytes()) } else { 0 };
            let at = match groups.iter().position(|(x, _, _)| *x == s) {
                Some(at) => at,
                None => {
                    groups.push((s, Vec::with_capacity(4), Vec::with_capacity(4)));
                    groups.len().saturating_sub(1)
                }
            };
            if let Some((_, rules, checks)) = groups.get_mut(at) {
                // Names are unique in one call; keyed checks may repeat a rule on other keys.
                if rules.iter().any(|r| r.name == rule.name) {
                    rule.name = format!("{}#{i}", rule.name);
                }
                rules.push(rule);
                checks.push(i);
            }
        }
        let deadline_ms = deadline_ms(self.deadline, &ctx.policy);
        let mut calls = Vec::with_capacity(groups.len());
        for (_, rules, checks) in groups {
            let Some(key) = rules.first().map(|r| r.key.clone()) else {
                continue;
            };
            let multi = Multi::new(rules).deadline(deadline_ms);
            let Ok(args) = multi.args() else {
                continue;
            };
            // The rules' names, moved rather than copied, are what the reply answers by.
            let names = multi
                .rules
                .into_iter()
                .map(|r| r.name)
                .zip(checks)
                .collect();
            self.expect.push(Expect::Multi { names });
            calls.push(Call { args, key });
        }
        calls
    }

    /// Shadow rate rules, on their own namespace, all at once: none of them can refuse.
    pub(super) fn shadows(&mut self) -> Vec<Call> {
        let Some(ctx) = self.ctx.as_ref() else {
            return Vec::new();
        };
        let mut calls = Vec::new();
        for (i, k) in ctx.keyed.iter().enumerate() {
            let RuleKind::Rate(rate) = &k.rule.kind else {
                continue;
            };
            // A blocked shadow check would refuse whatever its key holds: not asked.
            if !k.rule.shadow || k.refuse.is_some() {
                continue;
            }
            let key = k.store_key().into_bytes();
            let admit = admit_of(key.clone(), rate, k.cost)
                .deadline(deadline_ms(self.deadline, &ctx.policy));
            let admit = if k.spend { admit } else { admit.dry_run() };
            if let Ok(args) = admit.args() {
                calls.push(Call { args, key });
                self.expect.push(Expect::Shadow { index: i });
            }
        }
        calls
    }

    /// `WAIT 1 <timeout>` once per cluster slot of the durable rules that wrote (a grant rule
    /// spent from a chunk it did not refill wrote nothing), under twice `store.timeout`.
    pub(super) fn durable_waits(&mut self) -> Option<Step> {
        let ctx = self.ctx.as_ref()?;
        let timeout_ms = crate::time::millis(ctx.policy.store.timeout);
        let mut by_slot: Vec<(u16, Vec<usize>, Vec<u8>)> = Vec::new();
        for (i, k) in ctx.keyed.iter().enumerate() {
            let local = matches!(&k.rule.kind, RuleKind::Rate(r) if r.grant.is_some())
                && !self.refilled.contains(&i);
            if !k.rule.durable || k.rule.shadow || local {
                continue;
            }
            let s = slot(k.key.as_bytes());
            match by_slot.iter_mut().find(|(x, _, _)| *x == s) {
                Some((_, indices, _)) => indices.push(i),
                None => by_slot.push((s, vec![i], k.key.clone().into_bytes())),
            }
        }
        if by_slot.is_empty() {
            return None;
        }
        by_slot.sort_by_key(|(s, _, _)| *s);
        let mut calls = Vec::new();
        for (_, indices, key) in by_slot {
            let mut args = crate::wire::Args::new("WAIT");
            args.arg(1u64).arg(timeout_ms);
            calls.push(Call { args, key });
            self.expect.push(Expect::Wait { indices });
        }
        let deadline = self
            .started
            .max(self.deadline)
            .saturating_add(ctx.policy.store.timeout);
        Some(Step::Calls { calls, deadline })
    }
}

/// The `DEADLINE` of a request's spending calls, in Unix milliseconds: the request's deadline
/// plus `store.skew` for the clocks' disagreement. A call the store runs later than that changes
/// nothing, so one the request gave up on (decided by its posture) is not also spent when a
/// stalled store catches up. Rounded up: never earlier than the request's own deadline.
fn deadline_ms(deadline: Instant, policy: &crate::policy::Policy) -> u64 {
    deadline
        .saturating_add(policy.store.skew)
        .as_micros()
        .div_ceil(1000)
}

/// `RL.ADMIT` of a rate rule on `key`, with the rule as the policy states it, for `cost` units.
fn admit_of(key: impl Into<Vec<u8>>, rate: &crate::policy::RateSpec, cost: u64) -> Admit {
    let admit = Admit::new(
        key,
        rate.rule.limit(),
        Duration::from_micros(rate.rule.period_us()),
    )
    .algo(rate.algo)
    .cost(cost);
    if rate.burst_given {
        admit.burst(rate.rule.burst())
    } else {
        admit
    }
}
