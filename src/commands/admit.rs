//! `RL.ADMIT key limit period [BURST b] [COST c] [ALGO a] [DRYRUN] [RESERVE id [KEEP d]]`,
//! and the write path every command shares.

use super::reply::int;
use super::{Call, CmdError, Key};
use crate::clock;
use crate::core::error::Error;
use crate::core::limiter::Limiter;
use crate::core::rate::Decision;
use crate::core::request::admit::parse_admit;
use crate::core::rule::{Algo, Rule};
use crate::replicate;
use crate::stats;

pub fn run(call: &Call<'_>) -> Result<(), CmdError> {
    let result = admit(call);
    stats::ADMIT.record(&result);
    reply_decision(call, &result?);
    Ok(())
}

pub fn reply_decision(call: &Call<'_>, d: &Decision) {
    call.reply().int_record(&[
        ("allowed", i64::from(d.allowed)),
        ("remaining", int(d.remaining)),
        ("retry_after_ms", int(d.retry_after_ms())),
        ("reset_after_ms", int(d.reset_after_ms())),
        ("limit", int(d.limit)),
    ]);
}

fn admit(call: &Call<'_>) -> Result<Decision, CmdError> {
    let Some(rest) = call.args.get(2..) else {
        return Err(Error::Arity("RL.ADMIT").into());
    };
    let req = parse_admit(rest)?;
    let mut key = Key::open(call.ctx, call.raw_arg(1))?;
    let now = clock::now_us();
    let (algo, rule, cost, dry) = (req.algo, req.rule, req.cost, req.dry_run);
    match req.reserve {
        None => admit_key(call, &mut key, 1, algo, rule, cost, now, dry),
        Some(r) => update(call, &mut key, 1, Some((algo, rule)), |l| {
            l.reserve(algo, rule, cost, r.id, r.keep_us, now, dry)
        })
        .map(|d| d.unwrap_or_else(|| Decision::refused(&rule))),
    }
}

/// Decides `cost` units on the key at argument `arg` and, when admitted and not `dry`, writes
/// the new state, sets the key to expire when it is full again and propagates the state.
#[allow(clippy::too_many_arguments)]
pub fn admit_key(
    call: &Call<'_>,
    key: &mut Key,
    arg: usize,
    algo: Algo,
    rule: Rule,
    cost: u64,
    now: u64,
    dry: bool,
) -> Result<Decision, CmdError> {
    update(call, key, arg, Some((algo, rule)), |l| {
        let d = l.admit(algo, rule, cost, now, dry)?;
        Ok((d, d.allowed && !dry))
    })
    .map(|d| d.unwrap_or_else(|| Decision::refused(&rule)))
}

/// Runs `f` on the key's limiter, or on a fresh one of `fresh` (algorithm, rule) when the key is
/// empty (`None` then means an empty key stays empty and `f` does not run). When `f` reports a
/// change, the state is written, its expiry set and the effect propagated.
pub fn update<T>(
    call: &Call<'_>,
    key: &mut Key,
    arg: usize,
    fresh: Option<(Algo, Rule)>,
    f: impl FnOnce(&mut Limiter) -> Result<(T, bool), Error>,
) -> Result<Option<T>, CmdError> {
    let existing = match key.limiter()? {
        Some(mut limiter) => {
            let before = limiter.algo();
            let (out, changed) = f(&mut limiter)?;
            if limiter.algo() != before {
                // gcra <-> bucket, window <-> sliding: the same value, counted anew.
                stats::key_freed(before);
                stats::key_created(limiter.algo());
            }
            Ok((out, changed.then(|| propagate(call, arg, &limiter))))
        }
        None => Err(f),
    };
    let (out, effect) = match existing {
        Ok(done) => done,
        Err(f) => {
            // Built only for an empty key: a fresh log allocates.
            let Some((algo, rule)) = fresh else {
                return Ok(None);
            };
            let mut limiter = Limiter::new(algo, rule);
            let (out, changed) = f(&mut limiter)?;
            if !changed {
                return Ok(Some(out));
            }
            let effect = propagate(call, arg, &limiter);
            key.set(limiter);
            (out, Some(effect))
        }
    };
    if let Some(effect) = effect {
        apply(call, key, arg, effect);
    }
    Ok(Some(out))
}

/// What a write does to its key after the value is stored.
pub enum Effect {
    /// The state equals an absent key's (a semaphore with no lease left): the key goes.
    Delete,
    /// The key expires at this Unix millisecond, when it is full again.
    ExpireAt(u64),
}

impl Effect {
    pub fn of(limiter: &Limiter) -> Effect {
        if limiter.is_void() {
            Effect::Delete
        } else {
            Effect::ExpireAt(limiter.expire_at_ms())
        }
    }

    /// Deletes the key or sets its expiry, and signals the change (propagating nothing).
    pub fn apply(self, key: &mut Key) {
        match self {
            Effect::Delete => key.delete(),
            Effect::ExpireAt(ms) => key.expire_at(Some(ms)),
        }
        key.signal_modified();
    }
}

/// Propagates the state `limiter` that the key at argument `arg` now holds (a void one
/// propagates as the deletion, in [`apply`]) and says what becomes of the key.
fn propagate(call: &Call<'_>, arg: usize, limiter: &Limiter) -> Effect {
    let effect = Effect::of(limiter);
    if let Effect::ExpireAt(_) = effect {
        call.propagate_state(arg, limiter);
    }
    effect
}

/// Applies `effect` to the key at argument `arg`, propagating a deletion.
pub fn apply(call: &Call<'_>, key: &mut Key, arg: usize, effect: Effect) {
    if let Effect::Delete = effect {
        replicate::deleted(call.ctx, call.raw_arg(arg));
    }
    effect.apply(key);
}

/// After a limiter was stored with [`Key::set`]: expiry, keyspace signal and effect replication.
pub fn written(call: &Call<'_>, key: &mut Key, arg: usize) -> Result<(), CmdError> {
    let effect = match key.limiter()? {
        Some(limiter) => propagate(call, arg, &limiter),
        None => return Ok(()),
    };
    apply(call, key, arg, effect);
    Ok(())
}
