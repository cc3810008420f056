//! `RL.MULTI numkeys key [key ...] RULE name limit period [options] [RULE ...] [DRYRUN]
//! [DEADLINE unix-ms]`
//!
//! All or nothing, decided by the core (`core::multi::decide`) in one pass over the keys'
//! limiters: a refusal changes no key; an admission spends every rule, and their states
//! propagate together as one `RL.SETSTATE`.

use crate::core::protocol::field;
use smallvec::SmallVec;

use super::reply::{int, Value};
use super::write::{load, Effect, Finish, Loaded};
use super::{Call, CmdError, Key};
use crate::clock;
use crate::core::deadline;
use crate::core::limiter::Limiter;
use crate::core::multi::decide;
use crate::core::rate::Decision;
use crate::core::request::multi::{key_range, parse_multi};
use crate::stats;

pub fn run(call: &Call<'_>) -> Result<(), CmdError> {
    if call.is_keys_position_request() {
        // A cluster or COMMAND GETKEYS asks where the keys are; nothing runs.
        for pos in key_range(&call.args)? {
            call.key_at_pos(pos);
        }
        return Ok(());
    }
    let result = multi(call, &call.args);
    stats::MULTI.count(result.as_ref().ok().map(|(allowed, _, _)| *allowed));
    let (allowed, decisions, names) = result?;
    let denied_by = decisions.iter().position(|d| !d.allowed);
    let retry = decisions
        .iter()
        .filter(|d| !d.allowed)
        .map(Decision::retry_after_ms)
        .max()
        .unwrap_or(0);
    let [allowed_f, denied_by_f, retry_after_f, rules_f] = field::MULTI;
    let [name_f, remaining_f, reset_after_f] = field::MULTI_RULE;
    let reply = call.reply();
    let record = reply.record(4);
    record.field(allowed_f, Value::Int(i64::from(allowed)));
    let denied = denied_by.and_then(|i| names.get(i)).copied();
    record.field(denied_by_f, denied.map_or(Value::Null, Value::Bytes));
    record.field(retry_after_f, Value::Int(int(retry)));
    record.field_with(rules_f, |reply| {
        reply.array(decisions.len());
        for (d, name) in decisions.iter().zip(names.iter()) {
            let rule = reply.record(3);
            rule.field(name_f, Value::Bytes(name));
            rule.field(remaining_f, Value::Int(int(d.remaining)));
            rule.field(reset_after_f, Value::Int(int(d.reset_after_ms())));
        }
    });
    Ok(())
}

type Outcome<'a> = (bool, SmallVec<[Decision; 8]>, SmallVec<[&'a [u8]; 8]>);

fn multi<'a>(call: &Call<'_>, args: &'a [&'a [u8]]) -> Result<Outcome<'a>, CmdError> {
    let req = parse_multi(args)?;
    let names = req.rules.iter().map(|r| r.name).collect();
    let now = clock::now_us();
    deadline::check(req.deadline_ms, now)?;
    let first = req.key_positions.start;
    let mut keys: SmallVec<[Key; 8]> = SmallVec::new();
    for pos in req.key_positions.clone() {
        keys.push(Key::open(call.ctx, call.raw_arg(pos))?);
    }
    let mut loaded: SmallVec<[Loaded<'_>; 8]> = SmallVec::new();
    for (key, r) in keys.iter_mut().zip(&req.rules) {
        // A fresh limiter is given for every empty key, so every rule has one.
        if let Some(l) = load(key, Some((r.algo, r.rule)))? {
            loaded.push(l);
        }
    }
    let mut limiters: SmallVec<[&mut Limiter; 8]> =
        loaded.iter_mut().map(Loaded::limiter).collect();
    let (allowed, decisions) = decide(&mut limiters, &req.rules, now, req.dry_run)?;
    drop(limiters);
    // Refused (or a dry run): nothing was changed, and each rule reports what
    // `RL.ADMIT ... DRYRUN` would reply for it.
    if !allowed || req.dry_run {
        return Ok((allowed, decisions, names));
    }
    call.start_batch();
    let finishes: SmallVec<[Finish; 8]> = loaded
        .into_iter()
        .enumerate()
        .map(|(i, l)| l.keep(call, first + i, Some(Effect::State)))
        .collect();
    for (i, (key, finish)) in keys.iter_mut().zip(finishes).enumerate() {
        finish.apply(call, key, first + i);
    }
    call.flush_batch();
    Ok((allowed, decisions, names))
}
