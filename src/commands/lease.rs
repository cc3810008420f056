//! The concurrency semaphore: `RL.ACQUIRE key capacity lease [ID holder] [DEADLINE unix-ms]`,
//! `RL.RELEASE key holder`, `RL.RENEW key holder lease`, and `RL.LEASESET`, the effect they
//! propagate.

use crate::core::protocol::field;
use std::borrow::Cow;

use super::reply::{int, Value};
use super::write::{update, Effect};
use super::{Call, CmdError, Key};
use crate::clock;
use crate::core::deadline;
use crate::core::error::Error;
use crate::core::request::lease::{parse_acquire, parse_leaseset, parse_release, parse_renew};
use crate::core::rule::{Algo, MAX_CLOCK_SKEW_US};
use crate::core::semaphore::Acquire;
use crate::replicate;
use crate::stats;

pub fn acquire(call: &Call<'_>) -> Result<(), CmdError> {
    let result = run_acquire(call);
    stats::ACQUIRE.count(result.as_ref().ok().map(|a| a.acquired));
    let a = result?;
    let [acquired, holder, in_flight, retry_after] = field::ACQUIRE;
    let reply = call.reply();
    let record = reply.record(4);
    record.field(acquired, Value::Int(i64::from(a.acquired)));
    record.field(
        holder,
        if a.holder.is_empty() {
            Value::Null
        } else {
            Value::Bytes(&a.holder)
        },
    );
    record.field(in_flight, Value::Int(int(a.in_flight)));
    record.field(
        retry_after,
        Value::Int(int(a.retry_after_us.div_ceil(1000))),
    );
    Ok(())
}

fn run_acquire(call: &Call<'_>) -> Result<Acquire, CmdError> {
    let req = parse_acquire(call.args.get(2..).unwrap_or_default())?;
    let (rule, holder) = (req.rule, req.holder);
    let now = clock::now_us();
    deadline::check(req.deadline_ms, now)?;
    let mut key = Key::open(call.ctx, call.raw_arg(1))?;
    let acquired = update(call, &mut key, 1, Some((Algo::Semaphore, rule)), |l| {
        let a = l.acquire(rule, holder, now, false)?;
        let effect = a.acquired.then(|| Effect::Lease {
            holder: holder.map_or_else(|| Cow::Owned(a.holder.clone()), Cow::Borrowed),
            expiry_us: now.saturating_add(rule.period_us()),
            now_us: now,
        });
        Ok((a, effect))
    })?;
    // A fresh semaphore always decides.
    acquired.ok_or(CmdError::WrongType)
}

pub fn release(call: &Call<'_>) -> Result<(), CmdError> {
    let result = parse_release(call.args.get(2..).unwrap_or_default())
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
    let done = update(call, &mut key, 1, None, |l| {
        let (done, expiry_us) = match lease {
            None => (l.release(holder, now)?, 0),
            Some(lease) => (l.renew(holder, lease, now)?, now.saturating_add(lease)),
        };
        let effect = done.then_some(Effect::Lease {
            holder: Cow::Borrowed(holder),
            expiry_us,
            now_us: now,
        });
        Ok((done, effect))
    })?;
    Ok(done.unwrap_or(false))
}

/// `RL.LEASESET key capacity lease_us now_us next_id holder expiry_us`: replays one lease change
/// made on the primary (expiry 0 removes the lease). Validated like any command.
pub fn leaseset(call: &Call<'_>) -> Result<(), CmdError> {
    let set = parse_leaseset(call.args.get(2..).unwrap_or_default())?;
    if let Some(clock) = crate::clock::for_foreign_state(call.ctx) {
        if set.now_us > clock.saturating_add(MAX_CLOCK_SKEW_US) {
            return Err(Error::AheadOfClock("now_us").into());
        }
    }
    let mut key = Key::open(call.ctx, call.raw_arg(1))?;
    update(call, &mut key, 1, Some((Algo::Semaphore, set.rule)), |l| {
        l.apply_lease(set.rule, set.holder, set.expiry_us, set.now_us, set.next_id)?;
        Ok(((), Some(Effect::Replay)))
    })?;
    replicate::verbatim(call.ctx);
    call.reply().ok();
    Ok(())
}
