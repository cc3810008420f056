//! Replies: a record of named fields is a map in RESP3 and an array of values in RESP2.

use std::cell::Cell;
use std::ffi::{c_int, c_long, CString};

use redis_module::raw;

pub struct Reply {
    ctx: *mut raw::RedisModuleCtx,
    /// Whether the client speaks RESP3, asked once: a reply of many records (`RL.MULTI`'s
    /// rules) would otherwise ask the server for every one.
    resp3: Cell<Option<bool>>,
}

/// One field value of a record reply.
pub enum Value<'a> {
    Int(i64),
    Bytes(&'a [u8]),
    Null,
}

impl Reply {
    pub fn new(ctx: *mut raw::RedisModuleCtx) -> Reply {
        Reply {
            ctx,
            resp3: Cell::new(None),
        }
    }

    fn resp3(&self) -> bool {
        if let Some(known) = self.resp3.get() {
            return known;
        }
        // SAFETY: `ctx` is the running command's context.
        let flags = unsafe { raw::RedisModule_GetContextFlags.map_or(0, |f| f(self.ctx)) };
        let resp3 = flags & raw::REDISMODULE_CTX_FLAGS_RESP3 as c_int != 0;
        self.resp3.set(Some(resp3));
        resp3
    }

    /// Opens a record of `n` fields: a map in RESP3, an array of the values in RESP2. Each
    /// field then comes from [`Record::field`].
    pub fn record(&self, n: usize) -> Record<'_> {
        let len = c_long::try_from(n).unwrap_or(0);
        let named = self.resp3();
        if named {
            raw::reply_with_map(self.ctx, len);
        } else {
            raw::reply_with_array(self.ctx, len);
        }
        Record { reply: self, named }
    }

    /// Opens a map of `n` fields whose names matter in both protocols (RESP2 gets a flat array
    /// of names and values, as `XINFO` does).
    pub fn map(&self, n: usize) -> Record<'_> {
        raw::reply_with_map(self.ctx, c_long::try_from(n).unwrap_or(0));
        Record {
            reply: self,
            named: true,
        }
    }

    pub fn array(&self, n: usize) {
        raw::reply_with_array(self.ctx, c_long::try_from(n).unwrap_or(0));
    }

    /// A whole record of integer fields: the same replies as [`Reply::record`] and
    /// [`Record::field`] give, through the API functions read once.
    pub fn int_record(&self, fields: &[(&str, i64)]) {
        let len = c_long::try_from(fields.len()).unwrap_or(0);
        // SAFETY: reading API pointers Redis filled in before OnLoad, then calling them with
        // the running command's context; every name is a valid buffer of its length.
        unsafe {
            let (Some(array), Some(map), Some(int), Some(buffer)) = (
                raw::RedisModule_ReplyWithArray,
                raw::RedisModule_ReplyWithMap,
                raw::RedisModule_ReplyWithLongLong,
                raw::RedisModule_ReplyWithStringBuffer,
            ) else {
                return self.int_record_slowly(fields);
            };
            if self.resp3() {
                map(self.ctx, len);
                for &(name, v) in fields {
                    buffer(self.ctx, name.as_ptr().cast(), name.len());
                    int(self.ctx, v);
                }
            } else {
                array(self.ctx, len);
                for &(_, v) in fields {
                    int(self.ctx, v);
                }
            }
        }
    }

    /// [`Reply::int_record`] through the crate's wrappers (for a server missing a function).
    fn int_record_slowly(&self, fields: &[(&str, i64)]) {
        let record = self.record(fields.len());
        for &(name, v) in fields {
            record.field(name, Value::Int(v));
        }
    }

    pub fn value(&self, v: Value<'_>) {
        match v {
            Value::Int(i) => {
                raw::reply_with_long_long(self.ctx, i);
            }
            Value::Bytes(b) => {
                raw::reply_with_string_buffer(self.ctx, b.as_ptr().cast(), b.len());
            }
            Value::Null => {
                raw::reply_with_null(self.ctx);
            }
        }
    }

    pub fn ok(&self) {
        raw::reply_with_simple_string(self.ctx, c"OK".as_ptr());
    }

    /// An error reply. Control bytes (which could break the protocol) become spaces and a long
    /// message is cut, since it may echo a user's token.
    pub fn error(&self, message: &str) {
        let clean: Vec<u8> = message
            .bytes()
            .take(512)
            .map(|b| if b < 0x20 || b == 0x7f { b' ' } else { b })
            .collect();
        let text = CString::new(clean).unwrap_or_default();
        raw::reply_with_error(self.ctx, text.as_ptr());
    }
}

pub struct Record<'a> {
    reply: &'a Reply,
    named: bool,
}

impl Record<'_> {
    pub fn field(&self, name: &str, v: Value<'_>) {
        self.field_with(name, |reply| reply.value(v));
    }

    /// A field whose value `emit` writes (an array, a nested record).
    pub fn field_with(&self, name: &str, emit: impl FnOnce(&Reply)) {
        if self.named {
            self.reply.value(Value::Bytes(name.as_bytes()));
        }
        emit(self.reply);
    }
}

/// A count as a reply integer (every count we reply is bounded far below `i64::MAX`).
pub fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
