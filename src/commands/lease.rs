//! The concurrency semaphore: `RL.ACQUIRE key capacity lease [ID holder]`,
//! `RL.RELEASE key holder`, `RL.RENEW key holder lease`, and `RL.LEASESET`, the effect they
//! propagate.

use super::admit::{apply, Effect};
use super::reply::{int, Value};
use super::{Call, CmdError, Key};
use crate::clock;
use crate::core::error::Error;
use crate::core::limiter::Limiter;
use crate::core::parse::{parse_id, parse_u64};
use crate::core::request::acquire::{parse_acquire, parse_renew};
use crate::core::rule::{Algo, Rule, MAX_CLOCK_SKEW_US};
use crate::core::semaphore::Acquire;
use crate::replicate;
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
    let existing = match key.limiter()? {
        Some(mut l) => Some(l.acquire(rule, holder, now, false)?),
        None => None,
    };
    let a = match existing {
        Some(a) => a,
        None => {
            let mut l = Limiter::new(Algo::Semaphore, rule);
            let a = l.acquire(rule, holder, now, false)?;
            if a.acquired {
                key.set(l);
            }
            a
        }
    };
    if a.acquired {
        let expiry = now.saturating_add(rule.period_us());
        lease_written(call, &mut key, &a.holder, expiry, now)?;
    }
    Ok(a)
}

/// After a lease changed: the key expires with its last lease (or goes, when none is left),
/// and the change propagates as `RL.LEASESET` with the primary's time, which replicas replay
/// in O(log n) instead of receiving every lease.
fn lease_written(
    call: &Call<'_>,
    key: &mut Key,
    holder: &[u8],
    expiry_us: u64,
    now: u64,
) -> Result<(), CmdError> {
    let effect = match key.limiter()? {
        None => return Ok(()),
        Some(l) if l.is_void() => Effect::Delete,
        Some(l) => {
            let op = replicate::LeaseOp {
                capacity: l.rule().limit(),
                lease_us: l.rule().period_us(),
                now_us: now,
                next_id: l.next_lease_id(),
                holder,
                expiry_us,
            };
            replicate::lease(call.ctx, call.raw_arg(1), &op);
            Effect::ExpireAt(l.expire_at_ms())
        }
    };
    apply(call, key, 1, effect);
    Ok(())
}

pub fn release(call: &Call<'_>) -> Result<(), CmdError> {
    let [_, _, holder] = call.args[..] else {
        return reply_change(
            call,
            &stats::RELEASE,
            Err(Error::Arity("RL.RELEASE").into()),
        );
    };
    let result = parse_id(holder, "holder")
        .map_err(CmdError::from)
        .and_then(|holder| change(call, holder, None));
    reply_change(call, &stats::RELEASE, result)
}

pub fn renew(call: &Call<'_>) -> Result<(), CmdError> {
    let result = parse_renew(call.args.get(2..).unwrap_or_default())
        .map_err(CmdError::from)
        .and_then(|(holder, lease)| change(call, holder, Some(lease)));
    reply_change(call, &stats::RENEW, result)
}

/// Replies 1 or 0 for a release or renewal, counting it.
fn reply_change(
    call: &Call<'_>,
    stats: &stats::CommandStats,
    result: Result<bool, CmdError>,
) -> Result<(), CmdError> {
    stats.count(result.as_ref().ok().copied());
    call.reply().value(Value::Int(i64::from(result?)));
    Ok(())
}

/// Releases `holder`'s slot (`lease` None) or renews it for `lease`; false, changing nothing,
/// when it holds none.
fn change(call: &Call<'_>, holder: &[u8], lease: Option<u64>) -> Result<bool, CmdError> {
    let mut key = Key::open(call.ctx, call.raw_arg(1))?;
    let now = clock::now_us();
    let Some(mut l) = key.limiter()? else {
        return Ok(false);
    };
    let (done, expiry) = match lease {
        None => (l.release(holder, now)?, 0),
        Some(lease) => (l.renew(holder, lease, now)?, now.saturating_add(lease)),
    };
    drop(l);
    if done {
        lease_written(call, &mut key, holder, expiry, now)?;
    }
    Ok(done)
}

/// `RL.LEASESET key capacity lease_us now_us next_id holder expiry_us`: replays one lease change
/// made on the primary (expiry 0 removes the lease). Validated like any command.
pub fn leaseset(call: &Call<'_>) -> Result<(), CmdError> {
    let [_, _, capacity, lease, now, next_id, holder, expiry] = call.args[..] else {
        return Err(Error::Arity("RL.LEASESET").into());
    };
    let number = |b: &[u8], name| parse_u64(b, name);
    let (capacity, lease) = (number(capacity, "capacity")?, number(lease, "lease_us")?);
    let rule = Rule::restore(Algo::Semaphore, capacity, lease, capacity)?;
    let (now, next_id) = (number(now, "now_us")?, number(next_id, "next_id")?);
    let (holder, expiry) = (parse_id(holder, "holder")?, number(expiry, "expiry_us")?);
    if let Some(clock) = crate::clock::for_foreign_state(call.ctx) {
        if now > clock.saturating_add(MAX_CLOCK_SKEW_US) {
            return Err(Error::AheadOfClock("now_us").into());
        }
    }
    let mut key = Key::open(call.ctx, call.raw_arg(1))?;
    let existing = match key.limiter()? {
        Some(mut l) => {
            l.apply_lease(rule, holder, expiry, now, next_id)?;
            Some(Effect::of(&l))
        }
        None => None,
    };
    let effect = match existing {
        Some(effect) => effect,
        None => {
            let mut l = Limiter::new(Algo::Semaphore, rule);
            l.apply_lease(rule, holder, expiry, now, next_id)?;
            let effect = Effect::of(&l);
            key.set(l);
            effect
        }
    };
    effect.apply(&mut key);
    replicate::verbatim(call.ctx);
    call.reply().ok();
    Ok(())
}
