//! The native type `rllimiter`: one Redis type for every limiter, and its persistence callbacks.

pub mod codec;
#[cfg(test)]
mod reachable;
pub mod rules;
pub mod value;

use std::ffi::{c_int, c_void};
use std::ptr;

use redis_module::native_types::RedisType;
use redis_module::raw;

use crate::core::error::Error;
use crate::core::limiter::Limiter;
use crate::stats;

/// The RDB encoding version Redis records with each value; `codec` keeps its own version byte
/// inside the payload, and both move together.
pub static LIMITER_TYPE: RedisType = RedisType::new(
    "rllimiter",
    codec::VERSION as i32,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: None,
        aux_save: None,
        aux_save2: None,
        aux_save_triggers: 0,
        free_effort: None,
        unlink: None,
        copy: Some(copy),
        defrag: None,
        copy2: None,
        free_effort2: None,
        mem_usage2: None,
        unlink2: None,
    },
);

/// The name of the command that rebuilds a value from its encoding (replication and AOF).
pub const SETSTATE: &std::ffi::CStr = c"RL.SETSTATE";
pub const RESERVESET: &std::ffi::CStr = c"RL.RESERVESET";

/// Hands a limiter to Redis, in its smallest form, counting it in `INFO rl`.
pub fn into_raw(limiter: Limiter) -> *mut c_void {
    stats::key_created(limiter.algo());
    value::into_raw(limiter)
}

/// Encodes the value at `value`, a pointer this module created with `into_raw`.
///
/// # Safety
/// `value` must come from `into_raw` and not have been freed.
unsafe fn encode(value: *mut c_void) -> Option<codec::Encoded> {
    value::from_raw(value).with(codec::encode).ok()
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    if !(1..=c_int::from(codec::VERSION)).contains(&encver) {
        load_failed(rdb, c"unknown encoding version (a newer module wrote it)");
        return ptr::null_mut();
    }
    let Ok(buffer) = raw::load_string_buffer(rdb) else {
        load_failed(rdb, c"truncated value");
        return ptr::null_mut();
    };
    // A file the server loads was written by it or its primary; `RESTORE` brings a state from
    // elsewhere, checked against this clock too.
    let clock = raw::RedisModule_GetContextFromIO
        .map(|f| f(rdb))
        .filter(|ctx| !ctx.is_null())
        .map_or(
            Some(crate::clock::now_us()),
            crate::clock::for_foreign_state,
        );
    match codec::decode(buffer.as_ref(), clock) {
        Ok(limiter) => into_raw(limiter),
        Err(e) => {
            let why = match e {
                Error::BadPayload(why) => why.to_string(),
                other => other.to_string(),
            };
            let text = std::ffi::CString::new(why).unwrap_or_default();
            load_failed(rdb, &text);
            ptr::null_mut()
        }
    }
}

/// Says in Redis's log why a value did not load (Redis then only says to look above).
fn load_failed(rdb: *mut raw::RedisModuleIO, why: &std::ffi::CStr) {
    // SAFETY: `rdb` is the loading callback's; the format takes exactly the one string given.
    unsafe {
        if let Some(log) = raw::RedisModule_LogIOError {
            log(
                rdb,
                c"warning".as_ptr(),
                c"redis-rl: cannot load a limiter: %s".as_ptr(),
                why.as_ptr(),
            );
        }
    }
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    // SAFETY: Redis hands back a pointer this module created with `into_raw`.
    match encode(value) {
        Some(encoded) => raw::save_slice(rdb, encoded.as_bytes()),
        // Unreachable (an interned rule outlives its values); an empty payload fails to load
        // rather than loading as something else.
        None => raw::save_slice(rdb, &[]),
    }
}

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    let Some(encoded) = encode(value) else {
        return;
    };
    let bytes = encoded.as_bytes();
    // Redis appends the key's PEXPIREAT after this command.
    if let Some(emit) = raw::RedisModule_EmitAOF {
        emit(
            aof,
            SETSTATE.as_ptr(),
            c"sb".as_ptr(),
            key,
            bytes.as_ptr(),
            bytes.len(),
        );
    }
}

/// What every key of a module type costs the server beyond what `MEMORY USAGE` counts for a
/// string key of the same name: the `moduleValue` that wraps the value (type and value pointers,
/// 16 bytes) and, on Redis 7.0, the key's object (16 bytes), which it counts for a string but not
/// for a module value. Measured on Redis 7.0 and Valkey 9.1 alike (`benches/e2e.sh`: 32 bytes
/// more per key in the `used_memory` delta than the value itself, on both).
pub const SERVER_OVERHEAD: usize = 32;

/// `MEMORY USAGE`: the value's own bytes and the server's part a string key would have counted,
/// so the reply tells what the key costs as truthfully as a string key's does.
unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    value::from_raw(value.cast_mut())
        .bytes()
        .saturating_add(SERVER_OVERHEAD)
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    let Some(encoded) = encode(value) else {
        return;
    };
    let bytes = encoded.as_bytes();
    if let (Some(add), Some(end)) = (
        raw::RedisModule_DigestAddStringBuffer,
        raw::RedisModule_DigestEndSequence,
    ) {
        add(md, bytes.as_ptr().cast_mut().cast(), bytes.len());
        end(md);
    }
}

unsafe extern "C" fn free(value: *mut c_void) {
    stats::key_freed(value::free_raw(value));
}

unsafe extern "C" fn copy(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    let value = value::from_raw(value.cast_mut());
    stats::key_created(value.algo());
    value.copy_raw()
}
