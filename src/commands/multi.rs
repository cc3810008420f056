//! `RL.MULTI numkeys key [key ...] RULE name limit period [options] [RULE ...] [DRYRUN]`
//!
//! All or nothing: every rule is decided without changing anything; only if all admit is each
//! one spent. A refusal changes no key.

use smallvec::SmallVec;

use super::admit::admit_key;
use super::reply::{int, Value};
use super::{Call, CmdError, Key};
use crate::clock;
use crate::core::rate::Decision;
use crate::core::request::multi::{key_range, parse_multi, MultiRequest};
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
    let reply = call.reply();
    let record = reply.record(4);
    record.field("allowed", Value::Int(i64::from(allowed)));
    let denied = denied_by.and_then(|i| names.get(i)).copied();
    record.field("denied_by", denied.map_or(Value::Null, Value::Bytes));
    record.field("retry_after_ms", Value::Int(int(retry)));
    record.field_with("rules", |reply| {
        reply.array(decisions.len());
        for (d, name) in decisions.iter().zip(names.iter()) {
            let rule = reply.record(3);
            rule.field("name", Value::Bytes(name));
            rule.field("remaining", Value::Int(int(d.remaining)));
            rule.field("reset_after_ms", Value::Int(int(d.reset_after_ms())));
        }
    });
    Ok(())
}

type Outcome<'a> = (bool, SmallVec<[Decision; 8]>, SmallVec<[&'a [u8]; 8]>);

fn multi<'a>(call: &Call<'_>, args: &'a [&'a [u8]]) -> Result<Outcome<'a>, CmdError> {
    let req = parse_multi(args)?;
    let now = clock::now_us();
    let mut keys: SmallVec<[Key; 8]> = SmallVec::new();
    for pos in req.key_positions.clone() {
        keys.push(Key::open(call.ctx, call.raw_arg(pos))?);
    }
    let mut decisions = SmallVec::new();
    for (i, (key, r)) in keys.iter_mut().zip(&req.rules).enumerate() {
        let pos = req.key_positions.start + i;
        decisions.push(admit_key(
            call, key, pos, r.algo, r.rule, r.cost, now, true,
        )?);
    }
    let allowed = decisions.iter().all(|d: &Decision| d.allowed);
    // Refused (or a dry run): nothing is spent, and each rule reports what `RL.ADMIT ... DRYRUN`
    // would reply for it, which is what the first pass computed.
    if !allowed || req.dry_run {
        return Ok((allowed, decisions, names(&req)));
    }
    decisions.clear();
    call.start_batch();
    let spent = (|| {
        for (i, (key, r)) in keys.iter_mut().zip(&req.rules).enumerate() {
            let pos = req.key_positions.start + i;
            decisions.push(admit_key(
                call, key, pos, r.algo, r.rule, r.cost, now, false,
            )?);
        }
        Ok::<_, CmdError>(())
    })();
    // Whatever was written is propagated, even if a later rule failed (the dry pass makes
    // that unreachable, but a replica must never miss a write the primary kept).
    call.flush_batch();
    spent?;
    Ok((allowed, decisions, names(&req)))
}

fn names<'a>(req: &MultiRequest<'a>) -> SmallVec<[&'a [u8]; 8]> {
    req.rules.iter().map(|r| r.name).collect()
}
