//! Effect replication: replicas and the AOF receive the resulting state, never the command.
//!
//! A replayed `RL.ADMIT` would read the replica's clock and decide again; sending the state the
//! primary wrote (and the absolute expiry it set) makes every replica byte-identical however late
//! it applies the stream. Commands that change nothing call nothing here, so they propagate
//! nothing.

use redis_module::raw;

use crate::core::limiter::Limiter;
use crate::state::{codec, SETSTATE};

/// Propagates `RL.SETSTATE key <payload>` for the limiter just written. The expiry is not sent:
/// it is a function of the state (the instant it is full again), which the receiver derives.
pub fn state(ctx: *mut raw::RedisModuleCtx, key: *mut raw::RedisModuleString, limiter: &Limiter) {
    let encoded = codec::encode(limiter);
    let bytes = encoded.as_bytes();
    // SAFETY: "sb" matches the arguments: a Redis string, then a buffer and its length.
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            replicate(
                ctx,
                SETSTATE.as_ptr(),
                c"sb".as_ptr(),
                key,
                bytes.as_ptr(),
                bytes.len(),
            );
        }
    }
}

/// Propagates `DEL key` for a key this command deleted.
pub fn deleted(ctx: *mut raw::RedisModuleCtx, key: *mut raw::RedisModuleString) {
    // SAFETY: "s" matches the one Redis string argument.
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            replicate(ctx, c"DEL".as_ptr(), c"s".as_ptr(), key);
        }
    }
}

/// Replays the calling command as it is (for commands whose arguments already fix the result).
pub fn verbatim(ctx: *mut raw::RedisModuleCtx) {
    raw::replicate_verbatim(ctx);
}
