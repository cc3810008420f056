//! Opening a key and reading or writing the limiter it holds.

use std::ffi::c_int;
use std::ptr::NonNull;

use redis_module::raw;

use super::CmdError;
use crate::core::limiter::Limiter;
use crate::state::value::{self, Held};
use crate::state::{self, LIMITER_TYPE};

/// What a key holds, as far as this module cares.
pub enum Kind {
    Empty,
    Limiter,
    /// A string: redis-cell's keys are strings, which `CL.THROTTLE` converts.
    String,
    Other,
}

/// An open key, closed on drop.
pub struct Key {
    ctx: *mut raw::RedisModuleCtx,
    name: *mut raw::RedisModuleString,
    /// `None` for a key opened for reading that does not exist (Redis returns no handle).
    key: Option<NonNull<raw::RedisModuleKey>>,
}

impl Key {
    /// Opens `name` for reading and writing.
    pub fn open(
        ctx: *mut raw::RedisModuleCtx,
        name: *mut raw::RedisModuleString,
    ) -> Result<Key, CmdError> {
        Key::open_mode(ctx, name, raw::REDISMODULE_READ | raw::REDISMODULE_WRITE)
    }

    /// Opens `name` for reading only (read-only commands, which also run on replicas).
    pub fn open_read(
        ctx: *mut raw::RedisModuleCtx,
        name: *mut raw::RedisModuleString,
    ) -> Result<Key, CmdError> {
        Key::open_mode(ctx, name, raw::REDISMODULE_READ)
    }

    fn open_mode(
        ctx: *mut raw::RedisModuleCtx,
        name: *mut raw::RedisModuleString,
        mode: u32,
    ) -> Result<Key, CmdError> {
        let mode = mode as c_int;
        // SAFETY: `ctx` and `name` come from the running command.
        let ptr = unsafe { raw::RedisModule_OpenKey.map(|open| open(ctx, name, mode)) };
        let key = ptr.and_then(|p| NonNull::new(p.cast::<raw::RedisModuleKey>()));
        if key.is_none() && mode & raw::REDISMODULE_WRITE as c_int != 0 {
            return Err(CmdError::WrongType);
        }
        Ok(Key { ctx, name, key })
    }

    fn raw(&self) -> *mut raw::RedisModuleKey {
        self.key.map_or(std::ptr::null_mut(), NonNull::as_ptr)
    }

    pub fn kind(&self) -> Kind {
        if self.key.is_none() {
            return Kind::Empty;
        }
        // SAFETY: the key is open.
        unsafe {
            let key_type = raw::RedisModule_KeyType.map_or(-1, |f| f(self.raw()));
            if key_type == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
                Kind::Empty
            } else if key_type == raw::REDISMODULE_KEYTYPE_STRING as c_int {
                Kind::String
            } else if key_type == raw::REDISMODULE_KEYTYPE_MODULE as c_int
                && raw::RedisModule_ModuleTypeGetType.map(|f| f(self.raw()))
                    == Some(*LIMITER_TYPE.raw_type.borrow())
            {
                Kind::Limiter
            } else {
                Kind::Other
            }
        }
    }

    /// The limiter this key holds, `None` for an empty key, `WRONGTYPE` for any other value.
    /// Changes made through it are kept by `Held::commit` (the write path's step).
    pub fn limiter(&mut self) -> Result<Option<Held<'_>>, CmdError> {
        match self.kind() {
            Kind::Empty => Ok(None),
            // SAFETY: the value of a key of our type is a `Value` this module created.
            Kind::Limiter => unsafe {
                let get_value = raw::RedisModule_ModuleTypeGetValue.ok_or(CmdError::WrongType)?;
                let raw = get_value(self.raw());
                if raw.is_null() {
                    return Ok(None);
                }
                Ok(Some(value::from_raw(raw).hold(self.raw())?))
            },
            Kind::String | Kind::Other => Err(CmdError::WrongType),
        }
    }

    /// The bytes of a string key, `None` for any other kind.
    pub fn string_value(&self) -> Option<&[u8]> {
        if !matches!(self.kind(), Kind::String) {
            return None;
        }
        let mut len = 0;
        // SAFETY: a string key opened for reading; the bytes live until the key is closed or
        // written, and `&self` keeps both from happening while they are borrowed.
        unsafe {
            let dma = raw::RedisModule_StringDMA?;
            let ptr = dma(self.raw(), &mut len, raw::REDISMODULE_READ as c_int);
            (!ptr.is_null()).then(|| std::slice::from_raw_parts(ptr.cast::<u8>(), len))
        }
    }

    /// Milliseconds until the key expires, `None` when it has no expiry.
    pub fn ttl_ms(&self) -> Option<u64> {
        self.key?;
        // SAFETY: the key is open.
        let ttl = unsafe { raw::RedisModule_GetExpire.map_or(-1, |f| f(self.raw())) };
        u64::try_from(ttl).ok()
    }

    /// Stores a limiter in this key, replacing whatever it held.
    pub fn set(&mut self, limiter: Limiter) {
        if self.key.is_none() {
            return; // opened for reading: nothing to write to
        }
        let ours = *LIMITER_TYPE.raw_type.borrow();
        // SAFETY: ownership of the boxed value passes to Redis, which frees it through the
        // type's `free` callback.
        unsafe {
            if let Some(set) = raw::RedisModule_ModuleTypeSetValue {
                set(self.raw(), ours, state::into_raw(limiter));
            }
        }
    }

    /// Deletes the key (its value is freed through the type's `free` callback).
    pub fn delete(&mut self) {
        if self.key.is_none() {
            return; // opened for reading: nothing to write to
        }
        // SAFETY: the key is open for writing.
        unsafe {
            if let Some(delete) = raw::RedisModule_DeleteKey {
                delete(self.raw());
            }
        }
    }

    /// Makes the key expire at `at_ms` (Unix time in milliseconds), or never for `None`.
    pub fn expire_at(&mut self, at_ms: Option<u64>) {
        if self.key.is_none() {
            return; // opened for reading: nothing to write to
        }
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
        if self.key.is_none() {
            return;
        }
        // SAFETY: opened in `open_mode`, closed once.
        unsafe {
            if let Some(close) = raw::RedisModule_CloseKey {
                close(self.raw());
            }
        }
    }
}
