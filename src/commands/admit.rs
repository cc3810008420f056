//! `RL.ADMIT key limit period [BURST b] [COST c] [ALGO a] [DRYRUN] [RESERVE id [KEEP d]]
//! [DEADLINE unix-ms]`.

use super::reply::int;
use super::write::{update, Effect};
use super::{Call, CmdError, Key};
use crate::clock;
use crate::core::ask::Ask;
use crate::core::deadline;
use crate::core::error::Error;
use crate::core::protocol::command;
use crate::core::protocol::field;
use crate::core::rate::Decision;
use crate::core::request::admit::parse_admit;
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
    let now = clock::now_us();
    deadline::check(req.deadline_ms, now)?;
    let mut key = Key::open(call.ctx, call.raw_arg(1))?;
    let ask = req.ask;
    match req.reserve {
        None => admit_key(call, &mut key, 1, ask, now),
        Some(r) => update(call, &mut key, 1, Some((ask.algo, ask.rule)), |l| {
            let (d, changed) = l.reserve_ask(ask, r.id, r.keep_us, now)?;
            let effect = Effect::Reservation {
                id: r.id,
                now_us: now,
            };
            Ok((d, changed.then_some(effect)))
        })
        .map(|d| d.unwrap_or_else(|| Decision::refused(&ask.rule))),
    }
}

/// Decides what `ask` asks of the key at argument `arg` and, when admitted and not a dry run,
/// writes the new state through the write path.
pub fn admit_key(
    call: &Call<'_>,
    key: &mut Key,
    arg: usize,
    ask: Ask,
    now: u64,
) -> Result<Decision, CmdError> {
    update(call, key, arg, Some((ask.algo, ask.rule)), |l| {
        let d = l.admit_ask(ask, now)?;
        Ok((d, (d.allowed && !ask.dry_run).then_some(Effect::State)))
    })
    .map(|d| d.unwrap_or_else(|| Decision::refused(&ask.rule)))
}
