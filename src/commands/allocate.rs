//! `RL.ALLOCATE key limit region reporter demand held [RESERVE units] [REGIONS n] [LEASE
//! duration]`: the home store's answer to one reporter of a global rule (`rl_core::allocate`).
//!
//! The key is a plain hash, one field per reporter, so that operators read it with `HGETALL` and
//! a home running the script (`clients/scripts/rl.lua`) keeps the very same layout.
//!
//! The hash is read and written with `RedisModule_Call` without the `!` flag (nothing of it
//! propagates), then the three effects are replicated explicitly: `HSET`, `HDEL` of the
//! forgotten reporters, and `PEXPIREAT` with the absolute expiry. Calling the hash commands
//! themselves, rather than the key API, makes the write on this server exactly the commands a
//! replica and the AOF replay (same encoding changes, keyspace notifications and dirty count),
//! so the two cannot differ; the read is `HGETALL`, which returns each field once (a key-API
//! scan may repeat one).

use std::ffi::{c_int, CStr};

use redis_module::raw;
use smallvec::SmallVec;

use super::reply::int;
use super::{Call, CmdError};
use crate::clock;
use crate::core::allocate::{allocate, Allotted, Reporter, Terms};
use crate::core::error::Error;
use crate::core::protocol::field;
use crate::core::request::allocate::parse_allocate;
use crate::skip_effects;

pub fn run(call: &Call<'_>) -> Result<(), CmdError> {
    let req = parse_allocate(call.args.get(2..).unwrap_or_default())?;
    let key = call.raw_arg(1);
    let records = read(call.ctx, key)?;
    let now_ms = clock::now_us() / 1_000;
    let allotted = allocate(&req.terms, &req.report, &records, now_ms)?;
    write(call.ctx, key, &allotted)?;
    reply(call, &req.terms, &allotted);
    Ok(())
}

fn reply(call: &Call<'_>, terms: &Terms, a: &Allotted) {
    let [allocation, lease, region, total] = field::ALLOCATE;
    call.reply().int_record(&[
        (allocation, int(a.allocation)),
        (lease, int(terms.lease_ms)),
        (region, int(a.region_demand)),
        (total, int(a.total_demand)),
    ]);
}

/// A reply of `RedisModule_Call`, freed on drop.
struct CallReply(*mut raw::RedisModuleCallReply);

impl Drop for CallReply {
    fn drop(&mut self) {
        // SAFETY: the reply came from `RedisModule_Call` and is freed once, here.
        unsafe {
            if let Some(free) = raw::RedisModule_FreeCallReply {
                free(self.0);
            }
        }
    }
}

impl CallReply {
    fn is_error(&self) -> bool {
        // SAFETY: the reply is live.
        let t = unsafe { raw::RedisModule_CallReplyType.map_or(-1, |f| f(self.0)) };
        t == raw::REDISMODULE_REPLY_ERROR as c_int || t == raw::REDISMODULE_REPLY_UNKNOWN as c_int
    }
}

impl CallReply {
    /// The bytes of string element `i` of this array reply, borrowed from it.
    fn element(&self, i: usize) -> &[u8] {
        let element = raw::call_reply_array_element(self.0, i);
        if element.is_null() {
            return &[];
        }
        let mut len = 0;
        let ptr = raw::call_reply_string_ptr(element, &mut len);
        if ptr.is_null() {
            return &[];
        }
        // SAFETY: Redis keeps the element alive with its parent reply, which `self` holds.
        unsafe { std::slice::from_raw_parts(ptr.cast(), len) }
    }
}

/// Every reporter the key remembers; `WRONGTYPE` for a key of another type, and
/// [`Error::BadAllocation`] for a hash holding anything `RL.ALLOCATE` did not write.
fn read(
    ctx: *mut raw::RedisModuleCtx,
    key: *mut raw::RedisModuleString,
) -> Result<Vec<Reporter>, CmdError> {
    let reply = command(ctx, c"HGETALL", &[key]).ok_or(CmdError::WrongType)?;
    let n = raw::call_reply_length(reply.0);
    let mut records = Vec::with_capacity(n / 2);
    for i in (0..n).step_by(2) {
        let (f, v) = (reply.element(i), reply.element(i + 1));
        records.push(Reporter::decode(f, v).ok_or(Error::BadAllocation)?);
    }
    Ok(records)
}

/// Writes the record, deletes the forgotten and sets the absolute expiry, each first on this
/// server and then into the replication stream (unless nothing can receive it).
fn write(
    ctx: *mut raw::RedisModuleCtx,
    key: *mut raw::RedisModuleString,
    a: &Allotted,
) -> Result<(), CmdError> {
    let mut strings = Strings(ctx, SmallVec::new());
    let name = strings.make(&a.record.field());
    let value = strings.make(a.record.value().as_bytes());
    let expiry = strings.make(a.expires_at_ms.to_string().as_bytes());
    let mut forgotten: SmallVec<[*mut raw::RedisModuleString; 8]> = SmallVec::new();
    forgotten.push(key);
    for f in &a.forgotten {
        forgotten.push(strings.make(f));
    }
    let replicate = skip_effects::wanted(ctx);
    let mut effects: SmallVec<[(&CStr, &[*mut raw::RedisModuleString]); 3]> = SmallVec::new();
    let set = [key, name, value];
    effects.push((c"HSET", &set));
    if forgotten.len() > 1 {
        effects.push((c"HDEL", &forgotten));
    }
    let expire = [key, expiry];
    effects.push((c"PEXPIREAT", &expire));
    for (command_name, args) in effects {
        // The key was read as a hash just above and the arguments are well formed, so these
        // cannot be refused (the call does not check memory: the command itself is `deny-oom`).
        // Were one refused, what ran before it is still replicated, so the replicas stay equal.
        if command(ctx, command_name, args).is_none() {
            return Err(CmdError::Failed(
                command_name.to_string_lossy().into_owned(),
            ));
        }
        if replicate {
            replicate_one(ctx, command_name, args);
        } else {
            // A replicated effect counts one change (`server.dirty`), which the save points
            // read: a skipped one counts it too.
            skip_effects::count_change(ctx);
        }
    }
    Ok(())
}

/// `RedisModule_Call(name, args)` without propagation; `None` for an error reply.
fn command(
    ctx: *mut raw::RedisModuleCtx,
    name: &CStr,
    args: &[*mut raw::RedisModuleString],
) -> Option<CallReply> {
    // SAFETY: "v" takes an array of Redis strings and its length; every string is live.
    let ptr = unsafe {
        raw::RedisModule_Call.map(|call| {
            call(
                ctx,
                name.as_ptr(),
                c"v".as_ptr(),
                args.as_ptr().cast_mut(),
                args.len(),
            )
        })
    }?;
    if ptr.is_null() {
        return None;
    }
    let reply = CallReply(ptr);
    (!reply.is_error()).then_some(reply)
}

fn replicate_one(ctx: *mut raw::RedisModuleCtx, name: &CStr, args: &[*mut raw::RedisModuleString]) {
    // SAFETY: "v" takes an array of Redis strings and its length; Redis copies what it keeps.
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            replicate(
                ctx,
                name.as_ptr(),
                c"v".as_ptr(),
                args.as_ptr().cast_mut(),
                args.len(),
            );
        }
    }
}

/// Redis strings made for one call, freed on drop.
struct Strings(
    *mut raw::RedisModuleCtx,
    SmallVec<[*mut raw::RedisModuleString; 8]>,
);

impl Strings {
    fn make(&mut self, bytes: &[u8]) -> *mut raw::RedisModuleString {
        // SAFETY: `bytes` is valid for its length; the string is freed on drop.
        let s = unsafe {
            raw::RedisModule_CreateString.map_or(std::ptr::null_mut(), |create| {
                create(self.0, bytes.as_ptr().cast(), bytes.len())
            })
        };
        self.1.push(s);
        s
    }
}

impl Drop for Strings {
    fn drop(&mut self) {
        // SAFETY: each string was created by `make` for this context, and is freed once.
        unsafe {
            if let Some(free) = raw::RedisModule_FreeString {
                for &s in &self.1 {
                    free(self.0, s);
                }
            }
        }
    }
}
