//! `RL.GRANT key limit period [BURST b] [ALGO a] WANT n [TTL duration] [DEADLINE unix-ms]`:
//! leases a chunk of tokens for local spending.

use super::reply::int;
use super::write::{update, Effect};
use super::{Call, CmdError, Key};
use crate::clock;
use crate::core::deadline;
use crate::core::grant::Grant;
use crate::core::protocol::field;
use crate::core::request::grant::parse_grant;
use crate::stats;

pub fn run(call: &Call<'_>) -> Result<(), CmdError> {
    let result = grant(call);
    stats::GRANT.count(result.as_ref().ok().map(|g| g.granted > 0));
    let g = result?;
    let [granted, remaining, valid, retry_after] = field::GRANT;
    call.reply().int_record(&[
        (granted, int(g.granted)),
        (remaining, int(g.remaining)),
        (valid, int(g.valid_us / 1000)),
        (retry_after, int(g.retry_after_us.div_ceil(1000))),
    ]);
    Ok(())
}

fn grant(call: &Call<'_>) -> Result<Grant, CmdError> {
    let req = parse_grant(call.args.get(2..).unwrap_or_default())?;
    let now = clock::now_us();
    deadline::check(req.deadline_ms, now)?;
    let mut key = Key::open(call.ctx, call.raw_arg(1))?;
    let granted = update(call, &mut key, 1, Some((req.algo, req.rule)), |l| {
        let g = l.grant(req.algo, req.rule, req.want, req.ttl_us, now)?;
        Ok((g, (g.granted > 0).then_some(Effect::State)))
    })?;
    granted.ok_or(super::CmdError::WrongType)
}
