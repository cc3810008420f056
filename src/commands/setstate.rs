//! `RL.SETSTATE key payload [PXAT unix-time-ms]`: rebuilds a limiter from its encoding.
//!
//! This is how effects reach replicas and the AOF. It is an ordinary, validated command: a
//! payload that does not decode is refused, so it cannot plant a broken value.

use super::{Call, CmdError, Key};
use crate::core::error::{printable, Error};
use crate::core::parse::parse_count;
use crate::replicate;
use crate::state::codec;

pub fn run(call: &Call<'_>) -> Result<(), CmdError> {
    let expire_at_ms = match call.args.len() {
        3 => None,
        5 if call
            .args
            .get(3)
            .is_some_and(|t| t.eq_ignore_ascii_case(b"PXAT")) =>
        {
            let ms = call.args.get(4).copied().unwrap_or_default();
            Some(parse_count(ms, "PXAT", 1, i64::MAX as u64)?)
        }
        5 => {
            let token = call.args.get(3).copied().unwrap_or_default();
            return Err(Error::Syntax(printable(token)).into());
        }
        _ => return Err(Error::Arity("RL.SETSTATE").into()),
    };
    let payload = call.args.get(2).copied().unwrap_or_default();
    let limiter = codec::decode(payload)?;
    let mut key = Key::open(call.ctx, call.raw_arg(1))?;
    match key.limiter()? {
        Some(existing) if existing.algo() == limiter.algo() => *existing = limiter,
        _ => key.set(limiter),
    }
    key.expire_at(expire_at_ms);
    key.signal_modified();
    replicate::verbatim(call.ctx);
    call.reply().ok();
    Ok(())
}
