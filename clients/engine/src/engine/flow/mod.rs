//! One request through the store, phase by phase. Each phase asks what it can ask at once and
//! waits for the answers before the next: grant rules (from local chunks, refilled with
//! `RL.GRANT`), semaphores (`RL.ACQUIRE`, in route order, stopping at the first refusal),
//! `settle` rules (`RL.ADMIT ... RESERVE id`), one `RL.MULTI` for the other rate rules, the
//! shadow rules, and after an admission the `WAIT` of `durable` rules. Keyed checks refused
//! before any call skip them all for one step: their other rules only asked.

mod answers;
mod begin;
mod calls;
mod draw;

use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use super::ctx::{Ctx, Outcomes};
use super::{lock, Answer, Call, Shared, Step};
use crate::breaker::Ticket;
use crate::metrics::{CallResult, Event};
use crate::policy::ChargeOn;
use crate::time::Instant;
use crate::wire::{command, reply};
use crate::wire::{Error, Reply};

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
    /// The units reserved: what a response that reports none settles.
    pub(crate) estimate: u64,
    /// Whether the id is the caller's `Idempotency-Key`'s: only then can a retry name it, so
    /// only then is it kept past a response that was not a 2xx.
    pub(crate) retriable: bool,
    /// A `charge` rule's statuses: settled to `estimate` on one of them, to 0 on any other.
    pub(crate) charge: Option<ChargeOn>,
}

/// Tokens taken from a chunk, to give back if a later rule refuses: the chunk is the grant
/// rule's (`index` in the route), its slot written again only then.
struct Taken {
    index: usize,
    generation: u64,
    cost: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The next rule index to look at, in each phase that walks the rules.
    Grant(usize),
    Acquire(usize),
    Reserve(usize),
    /// The rules only asked, without spending, all at once.
    Ask,
    /// Keyed checks refused before any call: the others asked without spending (shadow ones
    /// included), all at once, instead of every other phase.
    Rest,
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
    Grant {
        index: usize,
        slot: String,
    },
    Acquire {
        index: usize,
    },
    /// `id`: the reservation's, the request's own or a `charge` rule's drawn one.
    Reserve {
        index: usize,
        id: Vec<u8>,
    },
    Ask {
        index: usize,
    },
    Multi {
        /// The keyed check each rule of the call stands for, and whether its name there took
        /// `#i` (see `calls::rule_name`).
        rules: Vec<(usize, bool)>,
    },
    Shadow {
        index: usize,
    },
    Wait {
        indices: Vec<usize>,
    },
}

/// A request being decided. Dropping it before it is done (the caller went away) gives back a
/// probe of the breaker and a chunk refill it had started; the slots it may hold are in
/// [`Pending::abandon`]'s calls.
pub struct Pending {
    shared: Arc<Shared>,
    pub(super) ctx: Option<Ctx>,
    id: Vec<u8>,
    /// Whether `id` came from the caller's `Idempotency-Key` (else it is drawn).
    keyed_id: bool,
    ticket: Option<Ticket>,
    /// Whether a call of this request went to the store: only then is there an outcome for
    /// the breaker and a latency for the histogram (a request spent from chunks has neither).
    sent: bool,
    started: Instant,
    deadline: Instant,
    phase: Phase,
    expect: Vec<Expect>,
    /// Inline for a route's few grant rules: most requests spend from a chunk.
    taken: SmallVec<[Taken; 2]>,
    /// The grant rules whose chunk this request refilled: `RL.GRANT` wrote, so a durable one
    /// is waited for.
    refilled: Vec<usize>,
    pub(super) held: Vec<Held>,
    pub(super) reserved: Vec<Reserved>,
    answer: Outcomes,
    /// The capacity the request draws on once its rules admit it; its slot once it has one;
    /// and the rules' verdict while it waits for one.
    drawing: Option<super::capacities::Drawing>,
    slot: Option<super::capacities::Slot>,
    parked: Option<super::Verdict>,
}

impl Pending {
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
        .with_slot(self.slot.take())
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
        let mut answers = answers.into_iter();
        for expect in expected {
            let reply = match answers.next().unwrap_or(Answer::Timeout) {
                // The one refusal of the module that the caller provokes: read as a refusal.
                Answer::Reply(full)
                    if matches!(expect, Expect::Reserve { .. })
                        && reply::reservations_full(&full) =>
                {
                    Ok(full)
                }
                Answer::Reply(Reply::Error(text)) => Err(Error::from_server(&text)),
                Answer::Reply(reply) => Ok(reply),
                Answer::Timeout => {
                    self.refill_ended(&expect);
                    return self.failed(CallResult::Timeout, now);
                }
                Answer::Failed(_) => {
                    self.refill_ended(&expect);
                    return self.failed(CallResult::Error, now);
                }
                Answer::Overloaded => {
                    self.refill_ended(&expect);
                    return self.shed(now);
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
            let checks = ctx.checks;
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
                Phase::Reserve(i) if i >= n => self.phase = Phase::Ask,
                Phase::Reserve(i) => {
                    self.phase = Phase::Reserve(i + 1);
                    if let Some(call) = self.reserve(i) {
                        return self.ask(vec![call]);
                    }
                }
                Phase::Ask => {
                    self.phase = Phase::Multi;
                    let calls = self.asks();
                    if !calls.is_empty() {
                        return self.ask(calls);
                    }
                }
                Phase::Rest => {
                    // The refusal stands whatever they answer (`resume` ends in it).
                    self.phase = Phase::Answered;
                    let mut calls = self.asks();
                    calls.extend(self.shadows());
                    if calls.is_empty() {
                        return self.refused(now);
                    }
                    return self.ask(calls);
                }
                Phase::Multi => {
                    self.phase = Phase::Shadow;
                    let mut calls = self.multi();
                    // Keyed checks evaluate their shadow rules whatever the others decide (the
                    // Envoy reference service counts them so): in the same step.
                    if checks {
                        calls.extend(self.shadows());
                        self.phase = Phase::Answered;
                    }
                    if !calls.is_empty() {
                        return self.ask(calls);
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
        self.sent = true;
        Step::Calls {
            calls,
            deadline: self.deadline,
        }
    }

    /// A refill that ended without a reply frees the chunk for the next request to refill.
    fn refill_ended(&self, expect: &Expect) {
        if let Expect::Grant { slot, .. } = expect {
            if let Some(chunk) = lock(&self.shared.chunks).peek_mut(slot) {
                chunk.refilling = None;
            }
        }
    }

    /// Reports the store calls, as one call, to the breaker and the latency histogram; a
    /// request that sent none gives its ticket back (a probe slot is freed for the next).
    fn store_ended(&mut self, ok: bool, result: CallResult, now: Instant) {
        let Some(ticket) = self.ticket.take() else {
            return;
        };
        if !self.sent {
            self.shared.breaker.abandon(ticket);
            return;
        }
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
        let Some(ctx) = self.ctx.as_ref() else {
            self.taken.clear();
            return;
        };
        let mut chunks = lock(&self.shared.chunks);
        for t in self.taken.drain(..) {
            let Some(k) = ctx.keyed.get(t.index) else {
                continue;
            };
            crate::cache::with_slot(&k.rule.name, &k.key, |slot| {
                if let Some(chunk) = chunks.peek_mut(slot) {
                    if chunk.generation == t.generation {
                        chunk.tokens = chunk.tokens.saturating_add(t.cost);
                    }
                }
            });
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
            // Refunded and forgotten: the request did no work, so its retry is decided (and
            // charged) anew rather than handed the refunded reservation's admission.
            calls.extend(reserved.into_iter().map(|r| Call {
                args: command::settle_and_forget(&r.key, &r.id, 0),
                key: r.key,
            }));
        }
        calls
    }

    pub(super) fn refused(&mut self, now: Instant) -> Step {
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
    /// their estimate (the reply that would say whether they were made may be lost). Keyed
    /// checks refused before any call stay refused, their others unasked.
    fn failed(&mut self, result: CallResult, now: Instant) -> Step {
        self.store_ended(false, result, now);
        if self.answer.refused_before() {
            return self.refused(now);
        }
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

    /// The deadline passed while another request's refill of a chunk was in flight. That
    /// refill's own deadline came first (it began first), so its outcome is the store's,
    /// reported once by the request that sent it; a request still waiting is held back by the
    /// gateway's own contention (a driver late to run it, others draining each new chunk):
    /// shed, as when a driver cannot wait for a reply. Calls it sent before were answered.
    pub(super) fn waited_out(&mut self, now: Instant) -> Step {
        self.store_ended(true, CallResult::Ok, now);
        self.shed(now)
    }

    /// The driver could not wait for a reply (its own overload): shed, with what was taken
    /// given back as after a failure, and the breaker's ticket returned without an outcome,
    /// since the store may well have answered in time. Keyed checks refused before any call
    /// stay refused.
    fn shed(&mut self, now: Instant) -> Step {
        if let Some(ticket) = self.ticket.take() {
            self.shared.breaker.abandon(ticket);
        }
        if self.answer.refused_before() {
            return self.refused(now);
        }
        self.give_back();
        self.phase = Phase::Done;
        let background = self.undo(false);
        let Some(ctx) = self.ctx.as_ref() else {
            return Step::Done(super::Verdict::pass(0));
        };
        let mut verdict = self.shared.shed(&ctx.policy, &ctx.route);
        verdict.background = background;
        Step::Done(verdict)
    }

    /// The module refused a call, or answered what this engine cannot read: a bug in the
    /// policy or the deployment, answered 500. The store did answer: not a breaker failure.
    fn broken(&mut self, error: Error, now: Instant) -> Step {
        self.store_ended(true, CallResult::Ok, now);
        if self.answer.refused_before() {
            return self.refused(now);
        }
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
