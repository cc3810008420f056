//! The calls of each phase: what a rule asks the store, in the module's arguments.

use std::time::Duration;

use super::{Expect, Held, Pending, Phase, Taken};
use crate::engine::ctx::Ctx;
use crate::engine::{lock, Call, Chunk, Step};
use crate::metrics::Event;
use crate::policy::RuleKind;
use crate::time::Instant;
use crate::wire::command::{Acquire, Admit, Clause, Grant, RuleName};
use crate::wire::slot;
use crate::wire::Args;
use crate::wire::Error;

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
        let mut chunks = lock(&self.shared.chunks);
        let chunk = crate::cache::with_slot(&k.rule.name, &k.key, |slot| {
            chunks.get_or_insert_mut(slot, Chunk::default)
        });
        let live = chunk.until.is_some_and(|until| now < until);
        if live && chunk.tokens >= cost {
            chunk.tokens -= cost;
            self.taken.push(Taken {
                index,
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
        let slot = crate::cache::slot(&k.rule.name, &k.key);
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
        // The rules that go in a call, each with its key's slot. A call's rules are few: its
        // arguments are written straight from them, a slot's rules found by walking them again
        // (no list or map of them, no copy of a name or a key).
        let members = || {
            ctx.keyed
                .iter()
                .enumerate()
                .filter(|(_, k)| {
                    matches!(k.rule.kind, RuleKind::Rate(_))
                        && k.rule.in_multi()
                        && !k.settles()
                        && k.spend
                })
                .map(|(i, k)| (if by_slot { slot(k.key.as_bytes()) } else { 0 }, i))
        };
        let deadline_ms = deadline_ms(self.deadline, &ctx.policy);
        let mut calls = Vec::new();
        for (at, (s, _)) in members().enumerate() {
            // Each slot's call is written at its first rule.
            if members().take(at).any(|(x, _)| x == s) {
                continue;
            }
            let of_slot = || members().filter(|(x, _)| *x == s).map(|(_, i)| i);
            // Each rule of the call, and whether its name took `#i`: names are unique in one
            // call, keyed checks may repeat a rule on other keys.
            let mut rules: Vec<(usize, bool)> = Vec::with_capacity(of_slot().count());
            for i in of_slot() {
                let name = ctx.keyed.get(i).map(|k| k.rule.name.as_str());
                let repeated = rules.iter().any(|&(j, renamed)| {
                    let named = rule_name(ctx, j, renamed);
                    name.is_some_and(|name| named.is_some_and(|n| n.is(name)))
                });
                rules.push((i, repeated));
            }
            let Ok(args) = multi_args(ctx, &rules, deadline_ms) else {
                continue;
            };
            let Some(k) = rules.first().and_then(|(i, _)| ctx.keyed.get(*i)) else {
                continue;
            };
            let key = k.key.clone().into_bytes();
            // The reply answers by the names: each rule's is known again from its check.
            self.expect.push(Expect::Multi { rules });
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

/// The name rule `index` has in an `RL.MULTI`: its rule's, with `#index` when `renamed`.
pub(super) fn rule_name(ctx: &Ctx, index: usize, renamed: bool) -> Option<RuleName<'_>> {
    let k = ctx.keyed.get(index)?;
    Some(RuleName(&k.rule.name, renamed.then_some(index)))
}

/// `RL.MULTI numkeys key ... RULE ... DEADLINE` of the given rules (see [`Pending::multi`]),
/// with the numbers each rule states for the request.
fn multi_args(ctx: &Ctx, rules: &[(usize, bool)], deadline_ms: u64) -> Result<Args, Error> {
    let keyed = || rules.iter().filter_map(|(i, _)| ctx.keyed.get(*i));
    let mut cmd = Args::new(rl_core::protocol::command::MULTI);
    cmd.arg(rules.len());
    for k in keyed() {
        cmd.arg(k.key.as_bytes());
    }
    for &(i, renamed) in rules {
        let Some(k) = ctx.keyed.get(i) else {
            continue;
        };
        let RuleKind::Rate(rate) = &k.rule.kind else {
            continue;
        };
        let clause = Clause {
            name: RuleName(&k.rule.name, renamed.then_some(i)),
            limit: rate.rule.limit(),
            period: Duration::from_micros(rate.rule.period_us()),
            burst: rate.burst_given.then(|| rate.rule.burst()),
            cost: Some(k.cost),
            algo: Some(rate.algo),
        };
        clause.write(&mut cmd)?;
    }
    cmd.arg(rl_core::protocol::token::DEADLINE).arg(deadline_ms);
    Ok(cmd)
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
