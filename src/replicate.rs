//! Effect replication: replicas and the AOF receive the resulting state, never the command.
//!
//! A replayed `RL.ADMIT` would read the replica's clock and decide again; sending the state the
//! primary wrote (and the absolute expiry it set) makes every replica byte-identical however late
//! it applies the stream. Commands that change nothing call nothing here, so they propagate
//! nothing.
//!
//! Every function but [`verbatim`] first asks [`skip_effects::wanted`]: when Redis would drop the
//! command (no AOF, no replica, no backlog), it is not built, and only the change is counted.

use redis_module::raw;
use smallvec::SmallVec;

use crate::core::limiter::Limiter;
use crate::skip_effects;
use crate::state::{codec, RESERVESET, SETSTATE};

/// Propagates `RL.SETSTATE key <payload>` for the limiter just written. The expiry is not sent:
/// it is a function of the state (the instant it is full again), which the receiver derives.
pub fn state(ctx: *mut raw::RedisModuleCtx, key: *mut raw::RedisModuleString, limiter: &Limiter) {
    if skipped(ctx) {
        return;
    }
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

/// Propagates `RL.SETSTATE k1 p1 k2 p2 ...`: the states a multi-key command wrote, in one
/// command (one lookup, one entry in the stream, no MULTI/EXEC wrapper).
pub fn states(ctx: *mut raw::RedisModuleCtx, states: &[(*mut raw::RedisModuleString, &[u8])]) {
    if states.is_empty() {
        return;
    }
    if skipped(ctx) {
        return;
    }
    // SAFETY: the strings created here are freed below, after Redis took its own references;
    // "v" takes an array of Redis strings and its length.
    unsafe {
        let (Some(replicate), Some(create), Some(free)) = (
            raw::RedisModule_Replicate,
            raw::RedisModule_CreateString,
            raw::RedisModule_FreeString,
        ) else {
            return;
        };
        let mut args: SmallVec<[*mut raw::RedisModuleString; 16]> = SmallVec::new();
        let mut created: SmallVec<[*mut raw::RedisModuleString; 8]> = SmallVec::new();
        for (key, payload) in states {
            let p = create(ctx, payload.as_ptr().cast(), payload.len());
            args.push(*key);
            args.push(p);
            created.push(p);
        }
        replicate(
            ctx,
            SETSTATE.as_ptr(),
            c"v".as_ptr(),
            args.as_mut_ptr(),
            args.len(),
        );
        for p in created {
            free(ctx, p);
        }
    }
}

/// One lease change, as `RL.LEASESET` propagates it.
pub struct LeaseOp<'a> {
    pub capacity: u64,
    pub lease_us: u64,
    pub now_us: u64,
    pub next_id: u64,
    pub holder: &'a [u8],
    /// 0 when the lease was removed.
    pub expiry_us: u64,
}

/// Propagates `RL.LEASESET key capacity lease_us now_us next_id holder expiry_us`.
pub fn lease(ctx: *mut raw::RedisModuleCtx, key: *mut raw::RedisModuleString, op: &LeaseOp<'_>) {
    if skipped(ctx) {
        return;
    }
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    // SAFETY: "sllllbl" matches: a Redis string, four long longs, a buffer with its length and
    // a long long.
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            replicate(
                ctx,
                c"RL.LEASESET".as_ptr(),
                c"sllllbl".as_ptr(),
                key,
                n(op.capacity),
                n(op.lease_us),
                n(op.now_us),
                n(op.next_id),
                op.holder.as_ptr(),
                op.holder.len(),
                n(op.expiry_us),
            );
        }
    }
}

/// Propagates `RL.RESERVESET key payload now_us id expires_us estimate remaining
/// reset_after_us [delta settled]`: reservation `id` as `limiter` now holds it, with the rate
/// state alone, so the effect costs the same however many reservations the key keeps.
pub fn reservation(
    ctx: *mut raw::RedisModuleCtx,
    key: *mut raw::RedisModuleString,
    limiter: &Limiter,
    id: &[u8],
    now_us: u64,
) {
    if skipped(ctx) {
        return;
    }
    let Some(r) = limiter.reservations().and_then(|rs| rs.get(id, now_us)) else {
        return;
    };
    let encoded = codec::encode_without_reservations(limiter);
    let payload = encoded.as_bytes();
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let (expires, estimate) = (n(r.expires_us), n(r.estimate));
    let (remaining, reset) = (n(r.remaining), n(r.reset_after_us));
    // SAFETY: the format strings match: a Redis string, a buffer and its length, a long long,
    // a buffer and its length, then four (or six) long longs.
    unsafe {
        let Some(replicate) = raw::RedisModule_Replicate else {
            return;
        };
        let (p, id_len) = (payload.as_ptr(), id.len());
        match r.settled {
            None => replicate(
                ctx,
                RESERVESET.as_ptr(),
                c"sblbllll".as_ptr(),
                key,
                p,
                payload.len(),
                n(now_us),
                id.as_ptr(),
                id_len,
                expires,
                estimate,
                remaining,
                reset,
            ),
            Some(s) => replicate(
                ctx,
                RESERVESET.as_ptr(),
                c"sblbllllll".as_ptr(),
                key,
                p,
                payload.len(),
                n(now_us),
                id.as_ptr(),
                id_len,
                expires,
                estimate,
                remaining,
                reset,
                s.delta,
                n(s.remaining),
            ),
        };
    }
}

/// Propagates `DEL key` for a key this command deleted.
pub fn deleted(ctx: *mut raw::RedisModuleCtx, key: *mut raw::RedisModuleString) {
    if skipped(ctx) {
        return;
    }
    // SAFETY: "s" matches the one Redis string argument.
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            replicate(ctx, c"DEL".as_ptr(), c"s".as_ptr(), key);
        }
    }
}

/// True when Redis would drop what the command propagates now: the change is then only counted.
fn skipped(ctx: *mut raw::RedisModuleCtx) -> bool {
    if skip_effects::wanted(ctx) {
        return false;
    }
    skip_effects::count_change(ctx);
    true
}

/// Replays the calling command as it is (for commands whose arguments already fix the result).
/// Never skipped: it builds nothing, and on a replica `RL.SETSTATE` from the primary must still
/// reach the AOF, which Redis alone decides on.
pub fn verbatim(ctx: *mut raw::RedisModuleCtx) {
    raw::replicate_verbatim(ctx);
}
