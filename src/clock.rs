//! The server's wall clock in microseconds.
//!
//! Stored times must be wall-clock (monotonic time does not survive a restart or a failover), and
//! Redis 7.0 exports no microsecond wall clock to modules, so this reads `CLOCK_REALTIME`. The
//! core guards against the clock stepping back; this only reads it.

pub fn now_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_REALTIME always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    if rc != 0 {
        return 0;
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let micros = u64::try_from(ts.tv_nsec).unwrap_or(0) / 1_000;
    secs.saturating_mul(1_000_000).saturating_add(micros)
}

/// The clock a state from elsewhere is checked against (see `Limiter::check_times`): `None`
/// while the server loads a file (its own RDB or AOF, or its primary's snapshot) or applies its
/// primary's stream, which carry what this server or its primary wrote and must load whatever
/// the clock did meanwhile; otherwise now.
pub fn for_foreign_state(ctx: *mut redis_module::raw::RedisModuleCtx) -> Option<u64> {
    use redis_module::raw;
    let trusted = (raw::REDISMODULE_CTX_FLAGS_LOADING | raw::REDISMODULE_CTX_FLAGS_REPLICATED)
        as std::ffi::c_int;
    // SAFETY: `ctx` is a context Redis handed to the running command or callback. Without the
    // function nothing is known, and the state is checked.
    let flags = unsafe { raw::RedisModule_GetContextFlags.map_or(0, |f| f(ctx)) };
    (flags & trusted == 0).then(now_us)
}
