//! Effect replication: replicas and the AOF receive the resulting state, never the command.
//!
//! A replayed `RL.ADMIT` would read the replica's clock and decide again; sending the state the
//! primary wrote (and the absolute expiry it set) makes every replica byte-identical however late
//! it applies the stream. Commands that change nothing call nothing here, so they propagate
//! nothing.

use redis_module::raw;

use crate::core::limiter::Limiter;
use crate::state::{codec, SETSTATE};

/// Propagates `RL.SETSTATE key <payload> PXAT <ms>` for the limiter just written.
pub fn state(
    ctx: *mut raw::RedisModuleCtx,
    key: *mut raw::RedisModuleString,
    limiter: &Limiter,
    expire_at_ms: u64,
) {
    let encoded = codec::encode(limiter);
    let bytes = encoded.as_bytes();
    let at = i64::try_from(expire_at_ms).unwrap_or(i64::MAX);
    // SAFETY: "sbcl" matches the arguments: a Redis string, a buffer with its length, a C string
    // and a long long.
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            replicate(
                ctx,
                SETSTATE.as_ptr(),
                c"sbcl".as_ptr(),
                key,
                bytes.as_ptr(),
                bytes.len(),
                c"PXAT".as_ptr(),
                at,
            );
        }
    }
}

/// Replays the calling command as it is (for commands whose arguments already fix the result).
pub fn verbatim(ctx: *mut raw::RedisModuleCtx) {
    raw::replicate_verbatim(ctx);
}
