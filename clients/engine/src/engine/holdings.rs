//! What an admitted request holds until its response ends: semaphore slots, renewed at a third
//! of the shortest lease while the backend works and released at the end whatever the outcome,
//! and reservations, settled with the units the backend reported or left at their estimate,
//! and forgotten once a 2xx says the work was done.

use std::time::Duration;

use super::capacities::Slot;
use super::flow::{Held, Reserved};
use super::Call;
use crate::time::Instant;
use crate::wire::command;

#[derive(Debug, Default)]
pub struct Holdings {
    held: Vec<Held>,
    reserved: Vec<Reserved>,
    next_renewal: Option<Instant>,
    /// The request's place in its route's capacity, ended by [`Holdings::answered`].
    slot: Option<Slot>,
}

/// `X-Actual-Cost`: a decimal count of units, surrounding blanks allowed; anything else leaves
/// the estimate standing.
pub fn actual_cost(value: &[u8]) -> Option<u64> {
    std::str::from_utf8(value).ok()?.trim().parse().ok()
}

impl Holdings {
    pub(crate) fn new(held: Vec<Held>, reserved: Vec<Reserved>) -> Holdings {
        Holdings {
            held,
            reserved,
            next_renewal: None,
            slot: None,
        }
    }

    pub(crate) fn with_slot(self, slot: Option<Slot>) -> Holdings {
        Holdings { slot, ..self }
    }

    /// The backend answered at `now` with `status` (`None`: the request ended without an
    /// answer): the request's capacity slot is given back, and an adaptive limit learns from
    /// the latency and the status. Call it when the response's head is known, before
    /// [`Holdings::settle`]; once, later calls change nothing. No store call.
    pub fn answered(&mut self, status: Option<u16>, now: Instant) {
        if let Some(mut slot) = self.slot.take() {
            slot.end(status, now);
        }
    }

    /// One semaphore slot a face acquired itself (a concurrency limit keyed by code), to renew
    /// and release like a policy's.
    pub fn slot(key: Vec<u8>, holder: Vec<u8>, lease: Duration) -> Holdings {
        Holdings::new(vec![Held { key, holder, lease }], Vec::new())
    }

    /// Whether nothing is held or reserved (no call at the response's end) and no capacity
    /// slot waits for [`Holdings::answered`].
    pub fn is_empty(&self) -> bool {
        self.held.is_empty() && self.reserved.is_empty() && self.slot.is_none()
    }

    /// How many semaphore slots are held.
    pub fn slots(&self) -> usize {
        self.held.len()
    }

    /// A third of the shortest lease held: how often [`Holdings::tick`] has renewals due.
    pub fn renew_every(&self) -> Option<Duration> {
        self.held
            .iter()
            .map(|h| h.lease / 3)
            .min()
            .filter(|d| !d.is_zero())
    }

    /// The renewals due at `now`: every slot, once a third of the shortest lease has passed
    /// since the admission (`started`) or the last renewal. A failed renewal leaves the lease
    /// to run out; the request goes on.
    pub fn tick(&mut self, started: Instant, now: Instant) -> Vec<Call> {
        let Some(every) = self.renew_every() else {
            return Vec::new();
        };
        let due = *self
            .next_renewal
            .get_or_insert_with(|| started.saturating_add(every));
        if now < due {
            return Vec::new();
        }
        self.next_renewal = Some(now.saturating_add(every));
        self.held
            .iter()
            .filter_map(|h| {
                Some(Call {
                    args: command::renew(&h.key, &h.holder, h.lease).ok()?,
                    key: h.key.clone(),
                })
            })
            .collect()
    }

    /// The calls at the response's end (its status, when the driver knows it, and
    /// `X-Actual-Cost`): settlements, then releases. A settle is idempotent in the module, so
    /// a retried one changes nothing.
    pub fn finish(&mut self, status: Option<u16>, actual_cost: Option<&[u8]>) -> Vec<Call> {
        let mut calls = self.settle(status, actual_cost);
        calls.extend(self.release());
        calls
    }

    /// The settlements alone (a driver sends them before passing the response on). After a
    /// 2xx the work was done: each reservation is settled (with the reported units, or its
    /// estimate when none are reported) and forgotten, so the same `Idempotency-Key` is then
    /// charged like a new request; it dedupes retries, not work. Any other status, or none
    /// known, keeps a reservation made under the caller's key (a retry of a failed attempt is
    /// not charged again) and settles only reported units; one under a drawn id is forgotten
    /// all the same, since no retry can name it.
    ///
    /// A `charge` rule's reservation is settled by the status alone: to its cost on one of the
    /// rule's statuses, to 0 on any other, and kept at its cost when no status is known (a
    /// caller who hangs up before the answer is not let off the count).
    pub fn settle(&mut self, status: Option<u16>, actual: Option<&[u8]>) -> Vec<Call> {
        let reserved = std::mem::take(&mut self.reserved);
        let actual = actual.and_then(actual_cost);
        let done = status.is_some_and(|s| (200..300).contains(&s));
        reserved
            .into_iter()
            .filter_map(|r| {
                let args = if let Some(on) = r.charge {
                    let charged = status.is_none_or(|s| on.contains(s));
                    command::settle_and_forget(&r.key, &r.id, if charged { r.estimate } else { 0 })
                } else if done || !r.retriable {
                    command::settle_and_forget(&r.key, &r.id, actual.unwrap_or(r.estimate))
                } else {
                    command::settle(&r.key, &r.id, actual?)
                };
                Some(Call { args, key: r.key })
            })
            .collect()
    }

    /// The releases alone (the response body ended, or the caller went away).
    pub fn release(&mut self) -> Vec<Call> {
        std::mem::take(&mut self.held)
            .into_iter()
            .map(|h| Call {
                args: command::release(&h.key, &h.holder),
                key: h.key,
            })
            .collect()
    }
}
