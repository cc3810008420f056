//! `RL.ADMIT key limit period [BURST b] [COST c] [ALGO a] [DRYRUN]`

use super::reply::int;
use super::{Call, CmdError, Key};
use crate::clock;
use crate::core::admit::parse_admit;
use crate::core::error::Error;
use crate::core::limiter::Limiter;
use crate::core::rate::Decision;
use crate::replicate;
use crate::stats;

pub fn run(call: &Call<'_>) -> Result<(), CmdError> {
    let result = admit(call);
    match &result {
        Ok(d) => stats::ADMIT.decided(d.allowed),
        Err(_) => stats::ADMIT.failed(),
    }
    let d = result?;
    call.reply().int_record(&[
        ("allowed", i64::from(d.allowed)),
        ("remaining", int(d.remaining)),
        ("retry_after_ms", int(d.retry_after_ms)),
        ("reset_after_ms", int(d.reset_after_ms)),
        ("limit", int(d.limit)),
    ]);
    Ok(())
}

fn admit(call: &Call<'_>) -> Result<Decision, CmdError> {
    let Some(rest) = call.args.get(2..) else {
        return Err(Error::Arity("RL.ADMIT").into());
    };
    let req = parse_admit(rest)?;
    let now = clock::now_us();
    let mut key = Key::open(call.ctx, call.raw_arg(1))?;
    let decision = match key.limiter()? {
        Some(limiter) => limiter.admit(req.algo, req.rule, req.cost, now, req.dry_run)?,
        None => {
            let mut limiter = Limiter::new(req.algo, req.rule);
            let d = limiter.admit(req.algo, req.rule, req.cost, now, req.dry_run)?;
            if d.allowed && !req.dry_run {
                key.set(limiter);
            }
            d
        }
    };
    if decision.allowed && !req.dry_run {
        let Some(limiter) = key.limiter()? else {
            return Ok(decision);
        };
        let expire_at_ms = limiter.full_at_us().div_ceil(1000);
        replicate::state(call.ctx, call.raw_arg(1), limiter, expire_at_ms);
        key.expire_at(Some(expire_at_ms));
        key.signal_modified();
    }
    Ok(decision)
}
