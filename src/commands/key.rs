//! Opening a key and reading or writing the limiter it holds.

use std::ffi::c_int;
use std::ptr::NonNull;

use redis_module::raw;

use super::CmdError;
use crate::core::limiter::Limiter;
use crate::state::{self, LIMITER_TYPE};

/// An open key, closed on drop.
pub struct Key {
    ctx: *mut raw::RedisModuleCtx,
    name: *mut raw::RedisModuleString,
    key: NonNull<raw::RedisModuleKey>,
}

impl Key {
    /// Opens `name` for reading and writing.
    pub fn open(
        ctx: *mut raw::RedisModuleCtx,
        name: *mut raw::RedisModuleString,
    ) -> Result<Key, CmdError> {
        let mode = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
        // SAFETY: `ctx` and `name` come from the running command.
        let ptr = unsafe { raw::RedisModule_OpenKey.map(|open| open(ctx, name, mode)) };
        let key = ptr
            .and_then(|p| NonNull::new(p.cast::<raw::RedisModuleKey>()))
            .ok_or(CmdError::WrongType)?;
        Ok(Key { ctx, name, key })
    }

    fn raw(&self) -> *mut raw::RedisModuleKey {
        self.key.as_ptr()
    }

    /// The limiter this key holds, `None` for an empty key, `WRONGTYPE` for any other value.
    pub fn limiter(&mut self) -> Result<Option<&mut Limiter>, CmdError> {
        // SAFETY: the key is open; the value pointer of our type is a `Limiter` we created.
        unsafe {
            let key_type = raw::RedisModule_KeyType.map_or(-1, |f| f(self.raw()));
            if key_type == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
                return Ok(None);
            }
            let ours = *LIMITER_TYPE.raw_type.borrow();
            let (Some(get_type), Some(get_value)) = (
                raw::RedisModule_ModuleTypeGetType,
                raw::RedisModule_ModuleTypeGetValue,
            ) else {
                return Err(CmdError::WrongType);
            };
            if key_type != raw::REDISMODULE_KEYTYPE_MODULE as c_int || get_type(self.raw()) != ours
            {
                return Err(CmdError::WrongType);
            }
            Ok(get_value(self.raw()).cast::<Limiter>().as_mut())
        }
    }

    /// Stores a new limiter in this (empty or replaced) key.
    pub fn set(&mut self, limiter: Limiter) {
        let ours = *LIMITER_TYPE.raw_type.borrow();
        // SAFETY: ownership of the boxed limiter passes to Redis, which frees it through the
        // type's `free` callback.
        unsafe {
            if let Some(set) = raw::RedisModule_ModuleTypeSetValue {
                set(self.raw(), ours, state::into_raw(limiter));
            }
        }
    }

    /// Makes the key expire at `at_ms` (Unix time in milliseconds), or never for `None`.
    pub fn expire_at(&mut self, at_ms: Option<u64>) {
        // SAFETY: the key is open for writing.
        unsafe {
            match at_ms {
                Some(ms) => {
                    let ms = i64::try_from(ms).unwrap_or(i64::MAX);
                    if let Some(abs) = raw::RedisModule_SetAbsExpire {
                        abs(self.raw(), ms);
                    } else if let (Some(rel), Some(now)) =
                        (raw::RedisModule_SetExpire, raw::RedisModule_Milliseconds)
                    {
                        rel(self.raw(), ms.saturating_sub(now()).max(1));
                    }
                }
                None => {
                    if let Some(rel) = raw::RedisModule_SetExpire {
                        rel(self.raw(), raw::REDISMODULE_NO_EXPIRE as i64);
                    }
                }
            }
        }
    }

    /// Tells WATCH and client-side caching that the key changed. (Implicit signalling is off,
    /// so that refusals and dry runs, which open the key for writing, do not look like writes.)
    pub fn signal_modified(&self) {
        // SAFETY: `ctx` and `name` are the running command's.
        unsafe {
            if let Some(signal) = raw::RedisModule_SignalModifiedKey {
                signal(self.ctx, self.name);
            }
        }
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        // SAFETY: opened in `open`, closed once.
        unsafe {
            if let Some(close) = raw::RedisModule_CloseKey {
                close(self.raw());
            }
        }
    }
}
