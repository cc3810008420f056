//! `RL.ADMIT key limit period [BURST b] [COST c] [ALGO a] [DRYRUN]`

use super::reply::int;
use super::{Call, CmdError, Key};
use crate::clock;
use crate::core::admit::parse_admit;
use crate::core::error::Error;
use crate::core::limiter::Limiter;
use crate::core::rate::Decision;
use crate::core::rule::{Algo, Rule};
use crate::replicate;
use crate::stats;

pub fn run(call: &Call<'_>) -> Result<(), CmdError> {
    let result = admit(call);
    stats::ADMIT.record(&result);
    let d = result?;
    call.reply().int_record(&[
        ("allowed", i64::from(d.allowed)),
        ("remaining", int(d.remaining)),
        ("retry_after_ms", int(d.retry_after_ms())),
        ("reset_after_ms", int(d.reset_after_ms())),
        ("limit", int(d.limit)),
    ]);
    Ok(())
}

fn admit(call: &Call<'_>) -> Result<Decision, CmdError> {
    let Some(rest) = call.args.get(2..) else {
        return Err(Error::Arity("RL.ADMIT").into());
    };
    let req = parse_admit(rest)?;
    let mut key = Key::open(call.ctx, call.raw_arg(1))?;
    let now = clock::now_us();
    admit_key(
        call,
        &mut key,
        1,
        req.algo,
        req.rule,
        req.cost,
        now,
        req.dry_run,
    )
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
    let decision = match key.limiter()? {
        Some(limiter) => limiter.admit(algo, rule, cost, now, dry)?,
        None => {
            let mut limiter = Limiter::new(algo, rule);
            let d = limiter.admit(algo, rule, cost, now, dry)?;
            if d.allowed && !dry {
                key.set(limiter);
            }
            d
        }
    };
    if decision.allowed && !dry {
        written(call, key, arg)?;
    }
    Ok(decision)
}

/// After a limiter was written: expiry, keyspace signal and effect replication.
pub fn written(call: &Call<'_>, key: &mut Key, arg: usize) -> Result<(), CmdError> {
    let Some(limiter) = key.limiter()? else {
        return Ok(());
    };
    let expire_at_ms = limiter.expire_at_ms();
    replicate::state(call.ctx, call.raw_arg(arg), limiter);
    key.expire_at(Some(expire_at_ms));
    key.signal_modified();
    Ok(())
}
