//! `RL.SETSTATE key payload`: rebuilds a limiter from its encoding.
//!
//! This is how effects reach replicas and the AOF. It is an ordinary, validated command: a
//! payload that does not decode is refused, so it cannot plant a broken value. The key expires
//! when the state is full again, a function of the payload alone, so it reads no clock and
//! replays identically anywhere.

use super::{Call, CmdError, Key};
use crate::core::error::Error;
use crate::replicate;
use crate::state::codec;

pub fn run(call: &Call<'_>) -> Result<(), CmdError> {
    let [_, _, payload] = call.args[..] else {
        return Err(Error::Arity("RL.SETSTATE").into());
    };
    let limiter = codec::decode(payload)?;
    let expire_at_ms = limiter.expire_at_ms();
    let mut key = Key::open(call.ctx, call.raw_arg(1))?;
    // Like RESTORE ... REPLACE: whatever the key held (a limiter, or a redis-cell string that
    // CL.THROTTLE converted on the primary) becomes this limiter.
    match key.limiter() {
        Ok(Some(existing)) if existing.algo() == limiter.algo() => *existing = limiter,
        _ => key.set(limiter),
    }
    key.expire_at(Some(expire_at_ms));
    key.signal_modified();
    replicate::verbatim(call.ctx);
    call.reply().ok();
    Ok(())
}
