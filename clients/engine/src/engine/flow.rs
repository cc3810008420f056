//! One request through the store, phase by phase. Each phase asks what it can ask at once and
//! waits for the answers before the next: grant rules (from local chunks, refilled with
//! `RL.GRANT`), semaphores (`RL.ACQUIRE`, in route order, stopping at the first refusal),
//! `settle` rules (`RL.ADMIT ... RESERVE id`), one `RL.MULTI` for the other rate rules, the
//! shadow rules, and after an admission the `WAIT` of `durable` rules.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::verdict::{Ctx, Keyed, Outcomes};
use super::{lock, Answer, Call, Chunk, Request, Shared, Step, IDEMPOTENCY_KEY};
use crate::breaker::{Pass, Ticket};
use crate::headers::HeaderOutcome;
use crate::identity::client_ip;
use crate::metrics::{CallResult, Event};
use crate::policy::{RequestIdentity, RuleKind};
use crate::time::Instant;
use crate::wire::command::{self, Acquire, Admit, Grant, Multi, MultiRule};
use crate::wire::{reply, slot, Error, Reply};

/// The longest identity value (`user`, `tenant`) a request may carry, in bytes: longer ones
/// are answered 431.
pub const MAX_IDENTITY: usize = 256;

/// A semaphore slot held for the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    pub(crate) key: Vec<u8>,
    pub(crate) holder: Vec<u8>,
    pub(crate) lease: Duration,
}

/// A reservation (`RESERVE id`) of a `settle` rule, settled after the response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reserved {
    pub(crate) key: Vec<u8>,
    pub(crate) id: Vec<u8>,
}

/// Tokens taken from a chunk, to give back if a later rule refuses.
struct Taken {
    slot: String,
    generation: u64,
    cost: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The next rule index to look at, in each phase that walks the rules.
    Grant(usize),
    Acquire(usize),
    Reserve(usize),
    Multi,
    Shadow,
    /// Every store rule answered and none refused.
    Answered,
    /// Waiting for the `WAIT`s of durable rules.
    Durable,
    Done,
}

/// What an outstanding call was for.
enum Expect {
    Grant { index: usize, slot: String },
    Acquire { index: usize },
    Reserve { index: usize },
    Multi { names: HashMap<String, usize> },
    Shadow { index: usize },
    Wait { indices: Vec<usize> },
}

/// A request being decided. Dropping it before it is done (the caller went away) gives back a
/// probe of the breaker and a chunk refill it had started; the slots it may hold are in
/// [`Pending::abandon`]'s calls.
pub struct Pending {
    shared: Arc<Shared>,
    pub(super) ctx: Option<Ctx>,
    id: Vec<u8>,
    ticket: Option<Ticket>,
    started: Instant,
    deadline: Instant,
    phase: Phase,
    expect: Vec<Expect>,
    taken: Vec<Taken>,
    pub(super) held: Vec<Held>,
    pub(super) reserved: Vec<Reserved>,
    answer: Outcomes,
}

impl Pending {
    pub(super) fn begin(
        shared: Arc<Shared>,
        request: &Request<'_>,
        now: Instant,
    ) -> (Pending, Step) {
        let policy = shared.policy.load_full();
        let mut pending = Pending {
            id: Vec::new(),
            ticket: None,
            started: now,
            deadline: now.saturating_add(policy.store.timeout),
            phase: Phase::Done,
            expect: Vec::new(),
            taken: Vec::new(),
            held: Vec::new(),
            reserved: Vec::new(),
            answer: Outcomes::default(),
            ctx: None,
            shared,
        };
        let Some(route) = policy.route(request.method, request.path) else {
            let verdict = super::Verdict::pass(policy.version);
            return (pending, Step::Done(verdict));
        };
        let route = Arc::clone(route);
        let header = |name: Option<&str>| -> Option<&[u8]> {
            request.headers.first(name?).filter(|v| !v.is_empty())
        };
        let caller = request.caller;
        let user = caller
            .and_then(|c| c.user.as_deref().filter(|u| !u.is_empty()))
            .map(str::as_bytes)
            .or_else(|| header(policy.identity.user.as_deref()));
        let tenant = caller
            .and_then(|c| c.tenant.as_deref().filter(|t| !t.is_empty()))
            .map(str::as_bytes)
            .or_else(|| header(policy.identity.tenant.as_deref()));
        // An identity longer than any real one is a caller's attempt to grow the tables.
        if [user, tenant]
            .iter()
            .flatten()
            .any(|v| v.len() > MAX_IDENTITY)
        {
            let verdict = super::Verdict::identity_too_long(policy.version, route.name());
            return (pending, Step::Done(verdict));
        }
        let ip = route
            .uses_ip()
            .then(|| client_ip(&policy.identity, request.headers, request.peer))
            .flatten()
            .map(|ip| ip.to_string());
        let id = RequestIdentity {
            user,
            tenant,
            ip: ip.as_deref().map(str::as_bytes),
            route: Some(route.name().as_bytes()),
        };
        let keyed: Vec<Keyed> = route
            .rules
            .iter()
            .map(|rule| Keyed {
                key: rule.key.render(&id),
                rule: Arc::clone(rule),
            })
            .collect();
        let sample = pending.shared.options.log_sample;
        let sampled = sample > 0.0 && pending.shared.rng.f64() < sample;
        // The reservation id, for `settle` rules only: the caller's key, or one drawn when a
        // reservation is first made.
        pending.id = request
            .headers
            .first(IDEMPOTENCY_KEY)
            .filter(|v| !v.is_empty())
            .map(<[u8]>::to_vec)
            .unwrap_or_default();
        let ctx = Ctx {
            policy,
            route,
            keyed,
            has_user: user.is_some(),
            sampled,
        };
        let shared = Arc::clone(&pending.shared);
        if let Some(verdict) = shared.refuse_cached(&ctx, now) {
            pending.ctx = Some(ctx);
            return (pending, Step::Done(verdict));
        }
        let draw = shared.rng.f64();
        let pass = shared.breaker.enter(now, &ctx.route.on_store_error, draw);
        // Entering moves the breaker too (half-open, a probe, closed after the ramp): the gauge
        // shows where it is now, not where the last call left it.
        shared
            .metrics
            .record(Event::Breaker(shared.breaker.state(now)));
        match pass {
            Pass::Store(ticket) => pending.ticket = Some(ticket),
            Pass::Posture => {
                let verdict = shared.posture(&ctx, now);
                pending.ctx = Some(ctx);
                return (pending, Step::Done(verdict));
            }
        }
        pending.ctx = Some(ctx);
        pending.phase = Phase::Grant(0);
        let step = pending.advance(now);
        (pending, step)
    }

    /// The key that routes the request in a cluster (its first rule's), for drivers that pin
    /// a request to one connection.
    pub fn route_key(&self) -> Option<&str> {
        self.ctx.as_ref()?.keyed.first().map(|k| k.key.as_str())
    }

    /// Whether the route has a `durable` rule (a driver may give those a connection of their
    /// own, since the server blocks a connection while its `WAIT` waits).
    pub fn is_durable(&self) -> bool {
        self.ctx
            .as_ref()
            .is_some_and(|c| c.keyed.iter().any(|k| k.rule.durable))
    }

    /// What the request holds after an admission, to settle and release at the response's end.
    pub fn holdings(&mut self) -> super::Holdings {
        super::Holdings::new(
            std::mem::take(&mut self.held),
            std::mem::take(&mut self.reserved),
        )
    }

    pub(super) fn resume(&mut self, answers: Vec<Answer>, now: Instant) -> Step {
        let expected = std::mem::take(&mut self.expect);
        if self.phase == Phase::Done || self.ctx.is_none() {
            // Nothing was asked: a driver resuming a finished request gets nothing new.
            return Step::Done(super::Verdict::pass(0));
        }
        if self.phase == Phase::Durable {
            return self.waited(expected, answers);
        }
        if expected.is_empty() && now >= self.deadline {
            return self.failed(CallResult::Timeout, now);
        }
        let mut answers = answers.into_iter();
        for expect in expected {
            let reply = match answers.next().unwrap_or(Answer::Timeout) {
                Answer::Reply(Reply::Error(text)) => Err(Error::from_server(&text)),
                Answer::Reply(reply) => Ok(reply),
                Answer::Timeout => {
                    self.refill_ended(&expect);
                    return self.failed(CallResult::Timeout, now);
                }
                Answer::Failed(e) => {
                    self.refill_ended(&expect);
                    let _ = e;
                    return self.failed(CallResult::Error, now);
                }
            };
            match self.take_reply(expect, reply, now) {
                Ok(()) => {}
                Err(Error::Unavailable(_)) => return self.failed(CallResult::Error, now),
                Err(e) => return self.broken(e, now),
            }
        }
        if !self.answer.refused.is_empty() {
            return self.refused(now);
        }
        self.advance(now)
    }

    /// Runs the phases until one needs the store or the request is decided.
    fn advance(&mut self, now: Instant) -> Step {
        loop {
            let Some(ctx) = self.ctx.as_ref() else {
                return Step::Done(super::Verdict::pass(0));
            };
            let n = ctx.keyed.len();
            match self.phase {
                Phase::Grant(i) if i >= n => self.phase = Phase::Acquire(0),
                Phase::Grant(i) => match self.grant(i, now) {
                    Some(step) => return step,
                    None => self.phase = Phase::Grant(i + 1),
                },
                Phase::Acquire(i) if i >= n => self.phase = Phase::Reserve(0),
                Phase::Acquire(i) => {
                    self.phase = Phase::Acquire(i + 1);
                    if let Some(call) = self.acquire(i) {
                        return self.ask(vec![call]);
                    }
                }
                Phase::Reserve(i) if i >= n => self.phase = Phase::Multi,
                Phase::Reserve(i) => {
                    self.phase = Phase::Reserve(i + 1);
                    if let Some(call) = self.reserve(i) {
                        return self.ask(vec![call]);
                    }
                }
                Phase::Multi => {
                    self.phase = Phase::Shadow;
                    if let Some(call) = self.multi() {
                        return self.ask(vec![call]);
                    }
                }
                Phase::Shadow => {
                    self.phase = Phase::Answered;
                    let calls = self.shadows();
                    if !calls.is_empty() {
                        return self.ask(calls);
                    }
                }
                Phase::Answered => {
                    self.store_ended(true, CallResult::Ok, now);
                    return match self.durable_waits() {
                        Some(step) => {
                            self.phase = Phase::Durable;
                            step
                        }
                        None => self.admitted(),
                    };
                }
                // Only `resume` moves on from the WAITs.
                Phase::Durable => return self.admitted(),
                Phase::Done => return Step::Done(super::Verdict::pass(ctx.policy.version)),
            }
        }
    }

    fn ask(&mut self, calls: Vec<Call>) -> Step {
        Step::Calls {
            calls,
            deadline: self.deadline,
        }
    }

    /// A grant rule's turn: spend from its live chunk, or refill it, or wait for the refill
    /// another request has in flight. `None` when nothing needs the store.
    fn grant(&mut self, index: usize, now: Instant) -> Option<Step> {
        let ctx = self.ctx.as_ref()?;
        let k = ctx.keyed.get(index)?;
        let RuleKind::Rate(rate) = &k.rule.kind else {
            return None;
        };
        let grant = rate.grant.filter(|_| !k.rule.shadow)?;
        let slot = format!("{}:{}{}", k.rule.name.len(), k.rule.name, k.key);
        let mut chunks = lock(&self.shared.chunks);
        let chunk = chunks.get_or_insert_mut(slot.clone(), Chunk::default);
        let live = chunk.until.is_some_and(|until| now < until);
        if live && chunk.tokens >= rate.cost {
            chunk.tokens -= rate.cost;
            self.taken.push(Taken {
                slot,
                generation: chunk.generation,
                cost: rate.cost,
            });
            return None;
        }
        // A refill in flight is waited for, unless it is older than any answer can be.
        let stale = self.shared.timeout(&ctx.policy).saturating_mul(2);
        if let Some(since) = chunk.refilling.filter(|s| now.duration_since(*s) < stale) {
            let _ = since;
            if now >= self.deadline {
                drop(chunks);
                return Some(self.failed(CallResult::Timeout, now));
            }
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
            grant.want.max(rate.cost),
        )
        .algo(rate.algo)
        .ttl(grant.ttl);
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

    fn acquire(&mut self, index: usize) -> Option<Call> {
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
            .args()
            .ok()?;
        self.expect.push(Expect::Acquire { index });
        Some(Call { args, key })
    }

    fn reserve(&mut self, index: usize) -> Option<Call> {
        let ctx = self.ctx.as_ref()?;
        let k = ctx.keyed.get(index)?;
        let RuleKind::Rate(rate) = &k.rule.kind else {
            return None;
        };
        if !k.settles() {
            return None;
        }
        if self.id.is_empty() {
            let rng = &self.shared.rng;
            self.id = format!("{:016x}{:016x}", rng.u64(), rng.u64()).into_bytes();
        }
        let args = admit_of(k.key.as_bytes(), rate)
            .reserve(self.id.clone(), None)
            .args()
            .ok()?;
        self.expect.push(Expect::Reserve { index });
        Some(Call {
            args,
            key: k.key.clone().into_bytes(),
        })
    }

    fn multi(&mut self) -> Option<Call> {
        let ctx = self.ctx.as_ref()?;
        let mut names = HashMap::new();
        let mut rules = Vec::new();
        for (i, k) in ctx.keyed.iter().enumerate() {
            let RuleKind::Rate(rate) = &k.rule.kind else {
                continue;
            };
            if !k.rule.in_multi() || k.settles() {
                continue;
            }
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
            names.insert(k.rule.name.clone(), i);
            rules.push(rule);
        }
        let key = rules.first()?.key.clone();
        let args = Multi::new(rules).args().ok()?;
        self.expect.push(Expect::Multi { names });
        Some(Call { args, key })
    }

    /// Shadow rate rules, on their own namespace, all at once: none of them can refuse.
    fn shadows(&mut self) -> Vec<Call> {
        let Some(ctx) = self.ctx.as_ref() else {
            return Vec::new();
        };
        let mut calls = Vec::new();
        for (i, k) in ctx.keyed.iter().enumerate() {
            let RuleKind::Rate(rate) = &k.rule.kind else {
                continue;
            };
            if !k.rule.shadow {
                continue;
            }
            let key = k.store_key().into_bytes();
            if let Ok(args) = admit_of(key.clone(), rate).args() {
                calls.push(Call { args, key });
                self.expect.push(Expect::Shadow { index: i });
            }
        }
        calls
    }

    fn take_reply(
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
                let chunk = chunks.get_or_insert_mut(slot.clone(), Chunk::default);
                chunk.refilling = None;
                let granted = granted?;
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
                        slot,
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
                } else if !k.rule.shadow {
                    self.answer.outcomes.push((index, outcome(None)));
                }
            }
            Expect::Reserve { index } => {
                let decided = reply::decision(&reply)?;
                self.answer
                    .outcomes
                    .push((index, HeaderOutcome::of(&decided)));
                if decided.allowed {
                    if let Some(k) = ctx.keyed.get(index) {
                        self.reserved.push(Reserved {
                            key: k.key.clone().into_bytes(),
                            id: self.id.clone(),
                        });
                    }
                } else {
                    self.answer.refused.push((index, decided.retry_after_ms));
                }
            }
            Expect::Multi { names } => {
                let decided = reply::multi_decision(&reply)?;
                for rule in &decided.rules {
                    if let Some(i) = names.get(&rule.name) {
                        let refusing = decided.denied_by.as_deref() == Some(rule.name.as_str());
                        self.answer.outcomes.push((
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
                    let by = decided.denied_by.as_ref().and_then(|name| names.get(name));
                    // A refusal without a known rule is still a refusal: pin it on the first.
                    let i = by.copied().or_else(|| names.values().min().copied());
                    self.answer
                        .refused
                        .push((i.unwrap_or_default(), decided.retry_after_ms));
                }
            }
            Expect::Shadow { index } => {
                let decided = reply::decision(&reply)?;
                if !decided.allowed {
                    self.answer.shadow_refused.push(index);
                }
            }
            Expect::Wait { .. } => {}
        }
        Ok(())
    }

    /// A refill that ended without a reply frees the chunk for the next request to refill.
    fn refill_ended(&self, expect: &Expect) {
        if let Expect::Grant { slot, .. } = expect {
            if let Some(chunk) = lock(&self.shared.chunks).peek_mut(slot) {
                chunk.refilling = None;
            }
        }
    }

    /// Reports the store calls, as one call, to the breaker and the latency histogram.
    fn store_ended(&mut self, ok: bool, result: CallResult, now: Instant) {
        let Some(ticket) = self.ticket.take() else {
            return;
        };
        self.shared.breaker.report(ticket, ok, now);
        self.shared.metrics.record(Event::StoreCall {
            result,
            latency: now.duration_since(self.started),
        });
        self.shared
            .metrics
            .record(Event::Breaker(self.shared.breaker.state(now)));
    }

    /// Tokens taken from chunks go back to the chunk they came from (not to a refilled one).
    fn give_back(&mut self) {
        let mut chunks = lock(&self.shared.chunks);
        for t in self.taken.drain(..) {
            if let Some(chunk) = chunks.peek_mut(&t.slot) {
                if chunk.generation == t.generation {
                    chunk.tokens = chunk.tokens.saturating_add(t.cost);
                }
            }
        }
    }

    /// The calls that undo what the request took: slots released, reservations refunded.
    fn undo(&mut self, refund: bool) -> Vec<Call> {
        let mut calls: Vec<Call> = self
            .held
            .drain(..)
            .map(|h| Call {
                args: command::release(&h.key, &h.holder),
                key: h.key,
            })
            .collect();
        let reserved = std::mem::take(&mut self.reserved);
        if refund {
            calls.extend(reserved.into_iter().map(|r| Call {
                args: command::settle(&r.key, &r.id, 0),
                key: r.key,
            }));
        }
        calls
    }

    fn refused(&mut self, now: Instant) -> Step {
        self.store_ended(true, CallResult::Ok, now);
        self.give_back();
        self.phase = Phase::Done;
        let background = self.undo(true);
        let answer = std::mem::take(&mut self.answer);
        let Some(ctx) = self.ctx.as_ref() else {
            return Step::Done(super::Verdict::pass(0));
        };
        let mut verdict = self.shared.refused(ctx, &answer, now);
        verdict.background = background;
        Step::Done(verdict)
    }

    /// The store gave no decision: the route's posture. Slots go back; reservations stay at
    /// their estimate (the reply that would say whether they were made may be lost).
    fn failed(&mut self, result: CallResult, now: Instant) -> Step {
        self.store_ended(false, result, now);
        self.give_back();
        self.phase = Phase::Done;
        let background = self.undo(false);
        let Some(ctx) = self.ctx.as_ref() else {
            return Step::Done(super::Verdict::pass(0));
        };
        let mut verdict = self.shared.posture(ctx, now);
        verdict.background = background;
        Step::Done(verdict)
    }

    /// The module refused a call, or answered what this engine cannot read: a bug in the
    /// policy or the deployment, answered 500. The store did answer: not a breaker failure.
    fn broken(&mut self, error: Error, now: Instant) -> Step {
        self.store_ended(true, CallResult::Ok, now);
        self.give_back();
        self.phase = Phase::Done;
        let background = self.undo(true);
        let Some(ctx) = self.ctx.as_ref() else {
            return Step::Done(super::Verdict::pass(0));
        };
        let mut verdict = self.shared.store_refused(ctx, &error);
        verdict.background = background;
        Step::Done(verdict)
    }

    /// `WAIT 1 <timeout>` once per cluster slot of the durable rules that wrote (a grant rule
    /// spent locally wrote nothing), under twice `store.timeout`.
    fn durable_waits(&mut self) -> Option<Step> {
        let ctx = self.ctx.as_ref()?;
        let timeout_ms = crate::time::millis(ctx.policy.store.timeout);
        let mut by_slot: Vec<(u16, Vec<usize>, Vec<u8>)> = Vec::new();
        for (i, k) in ctx.keyed.iter().enumerate() {
            let granted = matches!(&k.rule.kind, RuleKind::Rate(r) if r.grant.is_some());
            if !k.rule.durable || k.rule.shadow || granted {
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

    /// The answers to `WAIT`: fewer than one acknowledgement, an error or no answer counts
    /// `unreplicated_admit`; the admission stands.
    fn waited(&mut self, expected: Vec<Expect>, answers: Vec<Answer>) -> Step {
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

    fn admitted(&mut self) -> Step {
        self.phase = Phase::Done;
        let answer = std::mem::take(&mut self.answer);
        let Some(ctx) = self.ctx.as_ref() else {
            return Step::Done(super::Verdict::pass(0));
        };
        Step::Done(self.shared.admitted(ctx, &answer))
    }

    /// The calls that give back what an unfinished request holds, when its caller went away
    /// before the verdict. Reservations stay at their estimate.
    pub fn abandon(&mut self) -> Vec<Call> {
        if let Some(ticket) = self.ticket.take() {
            self.shared.breaker.abandon(ticket);
        }
        for expect in std::mem::take(&mut self.expect) {
            self.refill_ended(&expect);
        }
        self.give_back();
        self.phase = Phase::Done;
        self.undo(false)
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.shared.breaker.abandon(ticket);
        }
        for expect in std::mem::take(&mut self.expect) {
            self.refill_ended(&expect);
        }
    }
}

/// `RL.ADMIT` of a rate rule on `key`, with the rule as the policy states it.
fn admit_of(key: impl Into<Vec<u8>>, rate: &crate::policy::RateSpec) -> Admit {
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
