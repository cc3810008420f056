//! Replies: a record of named fields is a map in RESP3 and an array of values in RESP2.

use std::ffi::{c_int, c_long, CString};

use redis_module::raw;

pub struct Reply {
    ctx: *mut raw::RedisModuleCtx,
}

/// One field value of a record reply.
pub enum Value<'a> {
    Int(i64),
    Bytes(&'a [u8]),
    Null,
}

impl Reply {
    pub fn new(ctx: *mut raw::RedisModuleCtx) -> Reply {
        Reply { ctx }
    }

    fn resp3(&self) -> bool {
        // SAFETY: `ctx` is the running command's context.
        let flags = unsafe { raw::RedisModule_GetContextFlags.map_or(0, |f| f(self.ctx)) };
        flags & raw::REDISMODULE_CTX_FLAGS_RESP3 as c_int != 0
    }

    /// Opens a record of `n` fields; each then comes from [`Reply::field`].
    pub fn record(&self, n: usize) -> Record<'_> {
        let resp3 = self.resp3();
        let n = c_long::try_from(n).unwrap_or(0);
        if resp3 {
            raw::reply_with_map(self.ctx, n);
        } else {
            raw::reply_with_array(self.ctx, n);
        }
        Record { reply: self, resp3 }
    }

    /// A whole record of integer fields.
    pub fn int_record(&self, fields: &[(&str, i64)]) {
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
    resp3: bool,
}

impl Record<'_> {
    pub fn field(&self, name: &str, v: Value<'_>) {
        if self.resp3 {
            self.reply.value(Value::Bytes(name.as_bytes()));
        }
        self.reply.value(v);
    }
}

/// A count as a reply integer (every count we reply is bounded far below `i64::MAX`).
pub fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
