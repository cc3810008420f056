//! The Redis glue: registration, argument access, key access, replies and error mapping.
//!
//! Commands are registered through the raw API rather than the crate's table so that a call
//! reads its arguments as byte slices without copying or retaining them, and so that each body
//! runs under `catch_unwind`.

pub mod admit;
pub mod docs;
pub mod grant;
pub mod inspect;
mod key;
pub mod lease;
pub mod multi;
mod reply;
pub mod setstate;
pub mod settle;
pub mod throttle;

use std::cell::RefCell;
use std::ffi::{c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::raw;
use smallvec::SmallVec;

use crate::core::error::Error;
use crate::core::limiter::Limiter;
use crate::replicate;
use crate::state::codec::{self, Encoded};

pub use key::Key;
pub use reply::Reply;

/// Why a command did not run.
#[derive(Debug)]
pub enum CmdError {
    Core(Error),
    WrongType,
}

impl From<Error> for CmdError {
    fn from(e: Error) -> Self {
        CmdError::Core(e)
    }
}

/// One command invocation: the context and its arguments, both as Redis strings (to open keys
/// and replicate) and as bytes (to parse).
pub struct Call<'a> {
    pub ctx: *mut raw::RedisModuleCtx,
    pub argv: &'a [*mut raw::RedisModuleString],
    pub args: SmallVec<[&'a [u8]; 16]>,
    /// States written by a multi-key command, propagated together at its end.
    batch: RefCell<Option<Batch>>,
}

/// Effects gathered during one call: (argument position of the key, encoded state).
type Batch = SmallVec<[(usize, Encoded); 8]>;

impl Call<'_> {
    /// The raw Redis string of argument `i` (0 is the command name).
    pub fn raw_arg(&self, i: usize) -> *mut raw::RedisModuleString {
        self.argv.get(i).copied().unwrap_or(std::ptr::null_mut())
    }

    pub fn reply(&self) -> Reply {
        Reply::new(self.ctx)
    }

    /// From now on, states written by this call are gathered instead of propagated one by one.
    pub fn start_batch(&self) {
        *self.batch.borrow_mut() = Some(Batch::new());
    }

    /// Propagates the state of the key at argument `arg`, now or with the batch. A state nobody
    /// can receive is not encoded (see `propagation`); the batch then only counts a change.
    pub fn propagate_state(&self, arg: usize, limiter: &Limiter) {
        match self.batch.borrow_mut().as_mut() {
            Some(batch) if crate::propagation::wanted(self.ctx) => {
                batch.push((arg, codec::encode(limiter)))
            }
            Some(_) => crate::propagation::skip_in_batch(),
            None => replicate::state(self.ctx, self.raw_arg(arg), limiter),
        }
    }

    /// Propagates the gathered states as one `RL.SETSTATE k1 p1 k2 p2 ...`, or counts the one
    /// change it would have counted when they were skipped.
    pub fn flush_batch(&self) {
        if crate::propagation::take_batch_skipped() {
            crate::propagation::count_change(self.ctx);
        }
        if let Some(batch) = self.batch.borrow_mut().take() {
            let states: SmallVec<[_; 8]> = batch
                .iter()
                .map(|(arg, encoded)| (self.raw_arg(*arg), encoded.as_bytes()))
                .collect();
            replicate::states(self.ctx, &states);
        }
    }

    /// True when Redis only asks where the keys are (commands flagged `getkeys-api`).
    pub fn is_keys_position_request(&self) -> bool {
        // SAFETY: `ctx` is the running command's.
        unsafe { raw::RedisModule_IsKeysPositionRequest.is_some_and(|f| f(self.ctx) != 0) }
    }

    /// Answers a key-position request. `pos` must be a valid argument index.
    pub fn key_at_pos(&self, pos: usize) {
        let (Ok(pos), true) = (c_int::try_from(pos), pos < self.argv.len()) else {
            return;
        };
        // SAFETY: `pos` was checked against argc above.
        unsafe {
            if let Some(key_at_pos) = raw::RedisModule_KeyAtPos {
                key_at_pos(self.ctx, pos);
            }
        }
    }
}

pub type Body = fn(&Call<'_>) -> Result<(), CmdError>;

/// Runs `body` for one call: builds the argument view, catches panics, replies errors.
///
/// # Safety
/// `ctx`, `argv` and `argc` must be the values Redis passed to a command callback.
pub unsafe fn dispatch(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    body: Body,
) -> c_int {
    let argv: &[*mut raw::RedisModuleString] = match usize::try_from(argc) {
        Ok(n) if !argv.is_null() => std::slice::from_raw_parts(argv, n),
        _ => &[],
    };
    let args = argv.iter().map(|&s| bytes_of(s)).collect();
    let call = Call {
        ctx,
        argv,
        args,
        batch: RefCell::new(None),
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| body(&call)));
    let reply = call.reply();
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(CmdError::Core(e))) => reply.error(&e.to_string()),
        Ok(Err(CmdError::WrongType)) => {
            reply.error("WRONGTYPE Operation against a key holding the wrong kind of value")
        }
        Err(_) => reply.error("ERR internal error in redis-rl; the request changed nothing"),
    }
    raw::Status::Ok as c_int
}

/// The bytes of a Redis string, borrowed for the duration of the call.
fn bytes_of<'a>(s: *mut raw::RedisModuleString) -> &'a [u8] {
    let mut len = 0;
    let ptr = raw::string_ptr_len(s, &mut len);
    if ptr.is_null() {
        return &[];
    }
    // SAFETY: Redis keeps argv strings alive for the whole command call.
    unsafe { std::slice::from_raw_parts(ptr.cast(), len) }
}

/// A command as registered: name, callback, flags and its legacy key range.
pub struct Command {
    pub name: &'static CStr,
    pub callback: unsafe extern "C" fn(
        *mut raw::RedisModuleCtx,
        *mut *mut raw::RedisModuleString,
        c_int,
    ) -> c_int,
    pub flags: &'static CStr,
    pub first_key: c_int,
    pub last_key: c_int,
    pub key_step: c_int,
}

macro_rules! callback {
    ($name:ident, $body:path) => {
        unsafe extern "C" fn $name(
            ctx: *mut raw::RedisModuleCtx,
            argv: *mut *mut raw::RedisModuleString,
            argc: c_int,
        ) -> c_int {
            dispatch(ctx, argv, argc, $body)
        }
    };
}

callback!(admit_callback, admit::run);
callback!(multi_callback, multi::run);
callback!(inspect_callback, inspect::run);
callback!(throttle_callback, throttle::run);
callback!(setstate_callback, setstate::run);
callback!(grant_callback, grant::run);
callback!(acquire_callback, lease::acquire);
callback!(release_callback, lease::release);
callback!(renew_callback, lease::renew);
callback!(settle_callback, settle::run);
callback!(leaseset_callback, lease::leaseset);

/// A write command on the key at position 1.
const fn one_key(
    name: &'static CStr,
    callback: unsafe extern "C" fn(
        *mut raw::RedisModuleCtx,
        *mut *mut raw::RedisModuleString,
        c_int,
    ) -> c_int,
    flags: &'static CStr,
) -> Command {
    Command {
        name,
        callback,
        flags,
        first_key: 1,
        last_key: 1,
        key_step: 1,
    }
}

pub static COMMANDS: [Command; 11] = [
    one_key(c"RL.LEASESET", leaseset_callback, c"write deny-oom"),
    one_key(c"RL.GRANT", grant_callback, c"write deny-oom fast"),
    one_key(c"RL.ACQUIRE", acquire_callback, c"write deny-oom fast"),
    // Releasing frees memory: it must work when Redis is out of it.
    one_key(c"RL.RELEASE", release_callback, c"write fast"),
    one_key(c"RL.RENEW", renew_callback, c"write deny-oom fast"),
    one_key(c"RL.SETTLE", settle_callback, c"write deny-oom fast"),
    Command {
        name: c"RL.ADMIT",
        callback: admit_callback,
        flags: c"write deny-oom fast",
        first_key: 1,
        last_key: 1,
        key_step: 1,
    },
    // Key positions come from the command itself: a cluster routes only on the legacy range
    // or on `getkeys-api`, and a numkeys layout has no fixed range.
    Command {
        name: c"RL.MULTI",
        callback: multi_callback,
        flags: c"write deny-oom getkeys-api",
        first_key: 0,
        last_key: 0,
        key_step: 0,
    },
    Command {
        name: c"RL.INFO",
        callback: inspect_callback,
        flags: c"readonly fast",
        first_key: 1,
        last_key: 1,
        key_step: 1,
    },
    Command {
        name: c"CL.THROTTLE",
        callback: throttle_callback,
        flags: c"write deny-oom fast",
        first_key: 1,
        last_key: 1,
        key_step: 1,
    },
    Command {
        name: c"RL.SETSTATE",
        callback: setstate_callback,
        flags: c"write deny-oom",
        first_key: 1,
        last_key: -1,
        key_step: 2,
    },
];

/// Registers every command, then its documentation where the server supports it.
pub fn register(ctx: *mut raw::RedisModuleCtx) -> Result<(), String> {
    // SAFETY: reading an API pointer Redis filled in before OnLoad.
    let create = unsafe { raw::RedisModule_CreateCommand }.ok_or("CreateCommand missing")?;
    for cmd in &COMMANDS {
        // SAFETY: every pointer is a valid C string or callback for the life of the module.
        let rc = unsafe {
            create(
                ctx,
                cmd.name.as_ptr(),
                Some(cmd.callback),
                cmd.flags.as_ptr(),
                cmd.first_key,
                cmd.last_key,
                cmd.key_step,
            )
        };
        if rc != raw::Status::Ok as c_int {
            return Err(format!("could not register {}", cmd.name.to_string_lossy()));
        }
    }
    docs::register(ctx)
}
