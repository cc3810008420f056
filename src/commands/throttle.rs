//! `CL.THROTTLE key max_burst count period [quantity]`: a drop-in for the redis-cell module.

use super::key::Kind;
use super::write::{store, update, Effect};
use super::{Call, CmdError, Key};
use crate::clock;
use crate::core::error::Error;
use crate::core::protocol::command;
use crate::core::request::throttle::parse_throttle;
use crate::core::rule::Algo;
use crate::core::throttle::{from_redis_cell, throttle, ThrottleReply};
use crate::stats;

pub fn run(call: &Call<'_>) -> Result<(), CmdError> {
    let result = run_throttle(call);
    stats::THROTTLE.count(result.as_ref().ok().map(|r| !r.limited));
    let r = result?;
    let reply = call.reply();
    // redis-cell replies a plain array in every protocol; so does the drop-in.
    reply.array(5);
    for v in [
        i64::from(r.limited),
        i64::try_from(r.limit).unwrap_or(i64::MAX),
        i64::try_from(r.remaining).unwrap_or(i64::MAX),
        r.retry_after_s,
        r.reset_after_s,
    ] {
        reply.value(super::reply::Value::Int(v));
    }
    Ok(())
}

fn run_throttle(call: &Call<'_>) -> Result<ThrottleReply, CmdError> {
    let Some(rest) = call.args.get(2..) else {
        return Err(Error::Arity(command::THROTTLE).into());
    };
    let req = parse_throttle(rest)?;
    let mut key = Key::open(call.ctx, call.raw_arg(1))?;
    let now = clock::now_us();
    match key.kind() {
        Kind::Limiter | Kind::Empty => {
            let fresh = Some((Algo::Gcra, req.rule));
            let reply = update(call, &mut key, 1, fresh, |l| {
                let (reply, changed) = throttle(l, &req, now)?;
                Ok((reply, changed.then_some(Effect::State)))
            })?;
            reply.ok_or(CmdError::WrongType)
        }
        // A key written by redis-cell: its TAT carries over, so users can swap modules on a
        // live dataset. It becomes a native key on its first admission.
        Kind::String => {
            let value = key.string_value().unwrap_or_default();
            let mut limiter = from_redis_cell(value, req.rule).ok_or(CmdError::WrongType)?;
            let (reply, changed) = throttle(&mut limiter, &req, now)?;
            if changed {
                store(call, &mut key, 1, limiter, Effect::State);
            }
            Ok(reply)
        }
        Kind::Other => Err(CmdError::WrongType),
    }
}
