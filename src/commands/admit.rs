//! `RL.ADMIT key limit period [BURST b] [COST c] [ALGO a] [DRYRUN] [RESERVE id [KEEP d]]`.

use super::reply::int;
use super::write::{update, Effect};
use super::{Call, CmdError, Key};
use crate::clock;
use crate::core::error::Error;
use crate::core::protocol::command;
use crate::core::protocol::field;
use crate::core::rate::Decision;
use crate::core::request::admit::parse_admit;
use crate::core::rule::{Algo, Rule};
use crate::stats;

pub fn run(call: &Call<'_>) -> Result<(), CmdError> {
    let result = admit(call);
    stats::ADMIT.record(&result);
    reply_decision(call, &result?);
    Ok(())
}

pub fn reply_decision(call: &Call<'_>, d: &Decision) {
    let [allowed, remaining, retry_after, reset_after, capacity] = field::ADMIT;
    call.reply().int_record(&[
        (allowed, i64::from(d.allowed)),
        (remaining, int(d.remaining)),
        (retry_after, int(d.retry_after_ms())),
        (reset_after, int(d.reset_after_ms())),
        (capacity, int(d.capacity)),
    ]);
}

fn admit(call: &Call<'_>) -> Result<Decision, CmdError> {
    let Some(rest) = call.args.get(2..) else {
        return Err(Error::Arity(command::ADMIT).into());
    };
    let req = parse_admit(rest)?;
    let mut key = Key::open(call.ctx, call.raw_arg(1))?;
    let now = clock::now_us();
    let (algo, rule, cost, dry) = (req.algo, req.rule, req.cost, req.dry_run);
    match req.reserve {
        None => admit_key(call, &mut key, 1, algo, rule, cost, now, dry),
        Some(r) => update(call, &mut key, 1, Some((algo, rule)), |l| {
            let (d, changed) = l.reserve(algo, rule, cost, r.id, r.keep_us, now, dry)?;
            let effect = Effect::Reservation {
                id: r.id,
                now_us: now,
            };
            Ok((d, changed.then_some(effect)))
        })
        .map(|d| d.unwrap_or_else(|| Decision::refused(&rule))),
    }
}

/// Decides `cost` units on the key at argument `arg` and, when admitted and not `dry`, writes
/// the new state through the write path.
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
        Ok((d, (d.allowed && !dry).then_some(Effect::State)))
    })
    .map(|d| d.unwrap_or_else(|| Decision::refused(&rule)))
}
