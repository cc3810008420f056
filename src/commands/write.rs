//! The one write path every command takes: load the key's limiter (or create one for an empty
//! key), let the core change it, then finish: the value is written back in its smallest form,
//! the key expires when its state is full again or goes when it equals an absent key, the change
//! is signalled, and its effect propagates.
//!
//! A change that changes nothing (a refusal, a dry run, a release of an unknown holder) stops
//! after the core: no key is created, nothing is signalled or propagated.

use std::borrow::Cow;

use super::{Call, CmdError, Key};
use crate::core::error::Error;
use crate::core::limiter::Limiter;
use crate::core::rule::{Algo, Rule};
use crate::replicate;
use crate::state::value::Held;
use crate::stats;

/// What a change sends to replicas and the AOF.
pub enum Effect<'h> {
    /// The key's resulting state (`RL.SETSTATE`), batched in a multi-key call.
    State,
    /// One lease change (`RL.LEASESET`), replayed in O(log n) instead of the whole semaphore.
    Lease {
        /// Borrowed from the arguments; owned only for a holder id the semaphore generated.
        holder: Cow<'h, [u8]>,
        expiry_us: u64,
        now_us: u64,
    },
    /// One reservation change (`RL.RESERVESET`): the rate state and that reservation, not the
    /// others.
    Reservation {
        /// Borrowed from the arguments.
        id: &'h [u8],
        /// The clock the change was made at: reservations forgotten by then were dropped.
        now_us: u64,
    },
    /// Nothing per key: the command is itself the effect and propagates verbatim.
    Replay,
}

/// What becomes of a key after a change.
enum Fate {
    /// The state equals an absent key's (a semaphore with no lease left): the key goes, and the
    /// deletion propagates unless the command replays itself.
    Delete { propagate: bool },
    /// The key expires at this Unix millisecond, when it is full again.
    ExpireAt(u64),
}

/// Runs `f` on the key's limiter, or on a fresh one of `fresh` (algorithm, rule) when the key is
/// empty (`None` then means an empty key stays empty and `f` does not run). When `f` returns an
/// effect, the key is finished and the effect propagated.
pub fn update<'h, T>(
    call: &Call<'_>,
    key: &mut Key,
    arg: usize,
    fresh: Option<(Algo, Rule)>,
    f: impl FnOnce(&mut Limiter) -> Result<(T, Option<Effect<'h>>), Error>,
) -> Result<Option<T>, CmdError> {
    let Some(mut loaded) = load(key, fresh)? else {
        return Ok(None);
    };
    let (out, effect) = f(loaded.limiter())?;
    loaded.keep(call, arg, effect).apply(call, key, arg);
    Ok(Some(out))
}

/// A key's limiter, loaded to be changed: the one the key holds, or a fresh one for an empty
/// key (built only then: a fresh log allocates).
pub enum Loaded<'k> {
    Held { held: Held<'k>, before: Algo },
    Fresh(Limiter),
}

/// Loads the key's limiter, or a fresh one of `fresh` (algorithm, rule) when the key is empty;
/// `None` for an empty key without `fresh`.
pub fn load(key: &mut Key, fresh: Option<(Algo, Rule)>) -> Result<Option<Loaded<'_>>, CmdError> {
    Ok(match key.limiter()? {
        Some(held) => {
            let before = held.algo();
            Some(Loaded::Held { held, before })
        }
        None => fresh.map(|(algo, rule)| Loaded::Fresh(Limiter::new(algo, rule))),
    })
}

impl Loaded<'_> {
    pub fn limiter(&mut self) -> &mut Limiter {
        match self {
            Loaded::Held { held, .. } => held,
            Loaded::Fresh(limiter) => limiter,
        }
    }

    /// Keeps the change when there is an `effect` (propagating it) and says what is left to do
    /// on the key; without one, nothing was changed and nothing is left to do.
    pub fn keep(self, call: &Call<'_>, arg: usize, effect: Option<Effect<'_>>) -> Finish {
        let Some(effect) = effect else {
            return Finish::default();
        };
        match self {
            Loaded::Held { held, before } => {
                if held.algo() != before {
                    // gcra <-> bucket, window <-> sliding: the same value, counted anew.
                    stats::key_freed(before);
                    stats::key_created(held.algo());
                }
                let fate = propagate(call, arg, &held, effect);
                held.commit();
                Finish {
                    fresh: None,
                    fate: Some(fate),
                }
            }
            Loaded::Fresh(limiter) => Finish {
                fate: Some(propagate(call, arg, &limiter, effect)),
                fresh: Some(limiter),
            },
        }
    }
}

/// What is left to do on a key once its change was kept: store a fresh limiter, then expire or
/// delete the key and signal the change.
#[derive(Default)]
pub struct Finish {
    fresh: Option<Limiter>,
    fate: Option<Fate>,
}

impl Finish {
    pub fn apply(self, call: &Call<'_>, key: &mut Key, arg: usize) {
        if let Some(limiter) = self.fresh {
            key.set(limiter);
        }
        if let Some(fate) = self.fate {
            finish(call, key, arg, fate);
        }
    }
}

/// Stores `limiter` in the key whatever it held (a limiter of the same algorithm is replaced in
/// place), then finishes it like any change.
pub fn store(call: &Call<'_>, key: &mut Key, arg: usize, limiter: Limiter, effect: Effect<'_>) {
    let leftover = match key.limiter() {
        Ok(Some(mut existing)) if existing.algo() == limiter.algo() => {
            *existing = limiter;
            existing.commit();
            None
        }
        _ => Some(limiter),
    };
    if let Some(limiter) = leftover {
        key.set(limiter);
    }
    let fate = match key.limiter() {
        Ok(Some(stored)) => propagate(call, arg, &stored, effect),
        _ => return,
    };
    finish(call, key, arg, fate);
}

/// Propagates `effect` for the state `limiter` that the key at argument `arg` now holds, and
/// says what becomes of the key. A state that equals an absent key propagates as the deletion,
/// in [`finish`].
fn propagate(call: &Call<'_>, arg: usize, limiter: &Limiter, effect: Effect<'_>) -> Fate {
    if limiter.is_void() {
        let propagate = !matches!(effect, Effect::Replay);
        return Fate::Delete { propagate };
    }
    match effect {
        Effect::State => call.propagate_state(arg, limiter),
        Effect::Lease {
            holder,
            expiry_us,
            now_us,
        } => {
            let op = replicate::LeaseOp {
                capacity: limiter.rule().limit(),
                lease_us: limiter.rule().period_us(),
                now_us,
                next_id: limiter.next_lease_id(),
                holder: &holder,
                expiry_us,
            };
            replicate::lease(call.ctx, call.raw_arg(arg), &op);
        }
        Effect::Reservation { id, now_us } => {
            replicate::reservation(call.ctx, call.raw_arg(arg), limiter, id, now_us)
        }
        Effect::Replay => {}
    }
    Fate::ExpireAt(limiter.expire_at_ms())
}

/// Expires or deletes the key (propagating a deletion) and signals the change.
fn finish(call: &Call<'_>, key: &mut Key, arg: usize, fate: Fate) {
    match fate {
        Fate::Delete { propagate } => {
            if propagate {
                replicate::deleted(call.ctx, call.raw_arg(arg));
            }
            key.delete();
        }
        Fate::ExpireAt(ms) => key.expire_at(Some(ms)),
    }
    key.signal_modified();
}
