//! The concurrency semaphore: `RL.ACQUIRE key capacity lease [ID holder]`,
//! `RL.RELEASE key holder`, `RL.RENEW key holder lease`.

use super::admit::update;
use super::reply::{int, Value};
use super::{Call, CmdError, Key};
use crate::clock;
use crate::core::admit::parse_id;
use crate::core::error::Error;
use crate::core::limiter::Limiter;
use crate::core::rule::Algo;
use crate::core::semaphore::{parse_acquire, parse_renew, Acquire};
use crate::stats;

pub fn acquire(call: &Call<'_>) -> Result<(), CmdError> {
    let result = run_acquire(call);
    stats::ACQUIRE.count(result.as_ref().ok().map(|a| a.acquired));
    let a = result?;
    let reply = call.reply();
    let record = reply.record(4);
    record.field("acquired", Value::Int(i64::from(a.acquired)));
    record.field(
        "holder",
        if a.holder.is_empty() {
            Value::Null
        } else {
            Value::Bytes(&a.holder)
        },
    );
    record.field("in_flight", Value::Int(int(a.in_flight)));
    record.field(
        "retry_after_ms",
        Value::Int(int(a.retry_after_us.div_ceil(1000))),
    );
    Ok(())
}

fn run_acquire(call: &Call<'_>) -> Result<Acquire, CmdError> {
    let (rule, holder) = parse_acquire(call.args.get(2..).unwrap_or_default())?;
    let mut key = Key::open(call.ctx, call.raw_arg(1))?;
    let now = clock::now_us();
    let fresh = Limiter::new(Algo::Semaphore, rule);
    let acquired = update(call, &mut key, 1, Some(fresh), |l| {
        let a = l.acquire(rule, holder, now, false)?;
        let changed = a.acquired;
        Ok((a, changed))
    })?;
    acquired.ok_or(CmdError::WrongType)
}

pub fn release(call: &Call<'_>) -> Result<(), CmdError> {
    let result = run_release(call);
    stats::RELEASE.count(result.as_ref().ok().copied());
    call.reply().value(Value::Int(i64::from(result?)));
    Ok(())
}

fn run_release(call: &Call<'_>) -> Result<bool, CmdError> {
    let [_, _, holder] = call.args[..] else {
        return Err(Error::Arity("RL.RELEASE").into());
    };
    let holder = parse_id(holder, "holder")?;
    let mut key = Key::open(call.ctx, call.raw_arg(1))?;
    let now = clock::now_us();
    let released = update(call, &mut key, 1, None, |l| {
        let done = l.release(holder, now)?;
        Ok((done, done))
    })?;
    Ok(released.unwrap_or(false))
}

pub fn renew(call: &Call<'_>) -> Result<(), CmdError> {
    let result = run_renew(call);
    stats::RENEW.count(result.as_ref().ok().copied());
    call.reply().value(Value::Int(i64::from(result?)));
    Ok(())
}

fn run_renew(call: &Call<'_>) -> Result<bool, CmdError> {
    let (holder, lease) = parse_renew(call.args.get(2..).unwrap_or_default())?;
    let mut key = Key::open(call.ctx, call.raw_arg(1))?;
    let now = clock::now_us();
    let renewed = update(call, &mut key, 1, None, |l| {
        let done = l.renew(holder, lease, now)?;
        Ok((done, done))
    })?;
    Ok(renewed.unwrap_or(false))
}
