//! `RL.SETSTATE key payload [key payload ...]`: rebuilds limiters from their encodings.
//!
//! This is how effects reach replicas and the AOF. It is an ordinary, validated command: a
//! payload that does not decode is refused, so it cannot plant a broken value. The key expires
//! when the state is full again, a function of the payload alone, so it reads no clock and
//! replays identically anywhere.

use super::write::{store, Effect};
use super::{Call, CmdError, Key};
use crate::core::error::Error;
use crate::core::protocol::command;
use crate::replicate;
use crate::state::codec;

pub fn run(call: &Call<'_>) -> Result<(), CmdError> {
    let pairs = call.args.get(1..).unwrap_or_default();
    if pairs.is_empty() || pairs.len() % 2 != 0 {
        return Err(Error::Arity(command::SETSTATE).into());
    }
    // Every payload is checked before any key changes: all or nothing.
    let mut limiters = Vec::with_capacity(pairs.len() / 2);
    let clock = crate::clock::for_foreign_state(call.ctx);
    for pair in pairs.chunks_exact(2) {
        limiters.push(codec::decode(
            pair.get(1).copied().unwrap_or_default(),
            clock,
        )?);
    }
    for (i, limiter) in limiters.into_iter().enumerate() {
        let arg = 1 + 2 * i;
        let mut key = Key::open(call.ctx, call.raw_arg(arg))?;
        // Like RESTORE ... REPLACE: whatever the key held (a limiter, or a redis-cell string
        // that CL.THROTTLE converted on the primary) becomes this limiter.
        store(call, &mut key, arg, limiter, Effect::Replay);
    }
    replicate::verbatim(call.ctx);
    call.reply().ok();
    Ok(())
}
