//! The Redis glue: registration, argument access, key access, replies and error mapping.
//!
//! Each command is declared once, in [`COMMANDS`], and registered from it in one loop. Commands
//! are registered through the raw API rather than the crate's table so that a call reads its
//! arguments as byte slices without copying or retaining them, and so that each body runs under
//! `catch_unwind`.

pub mod admit;
pub mod allocate;
pub mod docs;
pub mod grant;
pub mod info;
mod key;
pub mod lease;
pub mod multi;
mod reply;
pub mod reserveset;
pub mod setstate;
pub mod settle;
pub mod throttle;
pub mod write;

use std::cell::RefCell;
use std::ffi::{c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::raw;
use smallvec::SmallVec;

use crate::core::error::Error;
use crate::core::limiter::Limiter;
use crate::replicate;
use crate::state::codec::{self, Encoded};

use crate::stats::{self, CommandStats};
use docs::Keys;
pub use key::Key;
pub use reply::Reply;

/// Why a command did not run.
#[derive(Debug)]
pub enum CmdError {
    Core(Error),
    WrongType,
    /// A command the module ran on the key through `RedisModule_Call` was refused.
    Failed(String),
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

/// Effects gathered during one call.
#[derive(Default)]
struct Batch {
    /// (argument position of the key, encoded state).
    states: SmallVec<[(usize, Encoded); 8]>,
    /// Whether anything can receive the states (see `skip_effects`), asked once per call.
    wanted: bool,
    /// True when a state was not encoded because nothing could receive it: the batch still
    /// counts the one change it would have propagated.
    skipped: bool,
}

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
        *self.batch.borrow_mut() = Some(Batch {
            wanted: crate::skip_effects::wanted(self.ctx),
            ..Batch::default()
        });
    }

    /// Propagates the state of the key at argument `arg`, now or with the batch. A state nobody
    /// can receive is not encoded (see `skip_effects`); the batch then only counts a change.
    pub fn propagate_state(&self, arg: usize, limiter: &Limiter) {
        match self.batch.borrow_mut().as_mut() {
            Some(batch) if batch.wanted => batch.states.push((arg, codec::encode(limiter))),
            Some(batch) => batch.skipped = true,
            None => replicate::state(self.ctx, self.raw_arg(arg), limiter),
        }
    }

    /// Propagates the gathered states as one `RL.SETSTATE k1 p1 k2 p2 ...`, or counts the one
    /// change it would have counted when they were skipped.
    pub fn flush_batch(&self) {
        let Some(batch) = self.batch.borrow_mut().take() else {
            return;
        };
        if batch.skipped {
            crate::skip_effects::count_change(self.ctx);
        }
        let states: SmallVec<[_; 8]> = batch
            .states
            .iter()
            .map(|(arg, encoded)| (self.raw_arg(*arg), encoded.as_bytes()))
            .collect();
        replicate::states(self.ctx, &states);
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
    // Built in place (collecting into a vector and moving it into the `Call` copies the whole
    // inline array), with the API function read once rather than once per argument.
    let mut call = Call {
        ctx,
        argv,
        args: SmallVec::new(),
        batch: RefCell::new(None),
    };
    // SAFETY: reading an API pointer Redis filled in before OnLoad.
    if let Some(ptr_len) = unsafe { raw::RedisModule_StringPtrLen } {
        call.args.reserve(argv.len());
        for &s in argv {
            call.args.push(bytes_of(ptr_len, s));
        }
    }
    let outcome = catch_unwind(AssertUnwindSafe(|| body(&call)));
    let reply = call.reply();
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(CmdError::Core(e))) => reply.error(&e.to_string()),
        Ok(Err(CmdError::WrongType)) => {
            reply.error("WRONGTYPE Operation against a key holding the wrong kind of value")
        }
        Ok(Err(CmdError::Failed(command))) => reply.error(&format!(
            "ERR internal error in redis-rl: {command} on the key was refused"
        )),
        Err(_) => reply.error("ERR internal error in redis-rl; the request changed nothing"),
    }
    raw::Status::Ok as c_int
}

/// `RedisModule_StringPtrLen`.
type PtrLen =
    unsafe extern "C" fn(*const raw::RedisModuleString, *mut usize) -> *const std::ffi::c_char;

/// The bytes of a Redis string, borrowed for the duration of the call.
#[inline]
fn bytes_of<'a>(ptr_len: PtrLen, s: *mut raw::RedisModuleString) -> &'a [u8] {
    let mut len = 0;
    // SAFETY: `s` is one of the command's arguments; Redis keeps argv strings alive for the
    // whole command call.
    unsafe {
        let ptr = ptr_len(s, &mut len);
        if ptr.is_null() {
            return &[];
        }
        std::slice::from_raw_parts(ptr.cast(), len)
    }
}

/// The C callback Redis calls for one command.
type Callback = unsafe extern "C" fn(
    *mut raw::RedisModuleCtx,
    *mut *mut raw::RedisModuleString,
    c_int,
) -> c_int;

/// One command, declared once: what Redis registers (name, flags, keys), what `COMMAND DOCS`
/// shows (arity, summary, complexity, arguments) and what `INFO rl` counts.
pub struct Command {
    pub name: &'static CStr,
    callback: Callback,
    pub flags: &'static CStr,
    /// Where the keys are: the key spec, and the legacy range clusters route by.
    pub keys: Keys,
    /// As `COMMAND INFO` reports it (negative: at least that many); the body checks it.
    pub arity: c_int,
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    pub args: &'static [docs::Arg],
    /// `INFO rl` counters, for the commands users call to decide (not the replayed effects).
    pub stats: Option<&'static CommandStats>,
}

impl Command {
    /// The legacy first key, last key and step. A `numkeys` layout has no fixed range: its
    /// command is flagged `getkeys-api` and reports its keys itself, which is what a cluster
    /// routes by (key specs alone do not route).
    fn key_range(&self) -> (c_int, c_int, c_int) {
        match self.keys {
            Keys::First(_) => (1, 1, 1),
            Keys::Numkeys(_) => (0, 0, 0),
            Keys::Pairs(_) => (1, -1, 2),
        }
    }
}

macro_rules! callback {
    ($body:path) => {{
        unsafe extern "C" fn callback(
            ctx: *mut raw::RedisModuleCtx,
            argv: *mut *mut raw::RedisModuleString,
            argc: c_int,
        ) -> c_int {
            dispatch(ctx, argv, argc, $body)
        }
        callback
    }};
}

/// Every command, in the order `INFO rl` shows their counters.
pub static COMMANDS: [Command; 13] = [
    Command {
        name: c"RL.ADMIT",
        callback: callback!(admit::run),
        flags: c"write deny-oom fast",
        keys: Keys::First(docs::KEY_RW_UPDATE),
        arity: -4,
        summary: c"Admits or refuses one request against a rate limit, atomically.",
        complexity: c"O(1) for gcra, bucket, window and sliding; O(1) amortized for log (O(N) in the entries that left the window)",
        args: &docs::ADMIT_ARGS,
        stats: Some(&stats::ADMIT),
    },
    Command {
        name: c"RL.MULTI",
        callback: callback!(multi::run),
        flags: c"write deny-oom getkeys-api",
        keys: Keys::Numkeys(docs::KEY_RW_UPDATE),
        arity: -7,
        summary: c"Admits a request only if every rule on every key admits it; spends all or nothing.",
        complexity: c"O(N) where N is the number of keys",
        args: &docs::MULTI_ARGS,
        stats: Some(&stats::MULTI),
    },
    Command {
        name: c"CL.THROTTLE",
        callback: callback!(throttle::run),
        flags: c"write deny-oom fast",
        keys: Keys::First(docs::KEY_RW_UPDATE),
        arity: -5,
        summary: c"redis-cell compatible GCRA throttle: same arguments, reply and rounding.",
        complexity: c"O(1)",
        args: &docs::THROTTLE_ARGS,
        stats: Some(&stats::THROTTLE),
    },
    Command {
        name: c"RL.GRANT",
        callback: callback!(grant::run),
        flags: c"write deny-oom fast",
        keys: Keys::First(docs::KEY_RW_UPDATE),
        arity: -6,
        summary: c"Leases a chunk of up to WANT units for a client to spend locally.",
        complexity: c"O(1) (log: O(N) in the entries that left the window)",
        args: &docs::GRANT_ARGS,
        stats: Some(&stats::GRANT),
    },
    Command {
        name: c"RL.ACQUIRE",
        callback: callback!(lease::acquire),
        flags: c"write deny-oom fast",
        keys: Keys::First(docs::KEY_RW_UPDATE),
        arity: -4,
        summary: c"Takes a slot of a concurrency semaphore until its lease expires.",
        complexity: c"O(log N) in the live leases",
        args: &docs::ACQUIRE_ARGS,
        stats: Some(&stats::ACQUIRE),
    },
    Command {
        name: c"RL.RELEASE",
        callback: callback!(lease::release),
        // Releasing frees memory: it must work when Redis is out of it.
        flags: c"write fast",
        keys: Keys::First(docs::KEY_RW_UPDATE),
        arity: 3,
        summary: c"Gives a semaphore slot back; idempotent.",
        complexity: c"O(log N) in the live leases",
        args: &docs::RELEASE_ARGS,
        stats: Some(&stats::RELEASE),
    },
    Command {
        name: c"RL.RENEW",
        callback: callback!(lease::renew),
        flags: c"write deny-oom fast",
        keys: Keys::First(docs::KEY_RW_UPDATE),
        arity: 4,
        summary: c"Extends a live lease; 0 once it has expired.",
        complexity: c"O(log N) in the live leases",
        args: &docs::RENEW_ARGS,
        stats: Some(&stats::RENEW),
    },
    Command {
        name: c"RL.SETTLE",
        callback: callback!(settle::run),
        flags: c"write deny-oom fast",
        keys: Keys::First(docs::KEY_RW_UPDATE),
        arity: -4,
        summary: c"Settles a reservation with the actual cost: debits or credits the difference.",
        complexity: c"O(log N) in the key's reservations",
        args: &docs::SETTLE_ARGS,
        stats: Some(&stats::SETTLE),
    },
    Command {
        name: c"RL.INFO",
        callback: callback!(info::run),
        flags: c"readonly fast",
        keys: Keys::First(docs::KEY_RO_ACCESS),
        arity: 2,
        summary: c"Explains a limiter key: algorithm, parameters, state and TTL.",
        complexity: c"O(1); O(N) for log in the entries that left the window",
        args: &docs::INFO_ARGS,
        stats: None,
    },
    Command {
        name: c"RL.SETSTATE",
        callback: callback!(setstate::run),
        flags: c"write deny-oom",
        keys: Keys::Pairs(docs::KEY_OW_UPDATE),
        arity: -3,
        summary: c"Sets a limiter's state from its encoding (how replicas and the AOF receive effects).",
        complexity: c"O(1); O(N) in the entries of a log",
        args: &docs::SETSTATE_ARGS,
        stats: None,
    },
    Command {
        name: c"RL.LEASESET",
        callback: callback!(lease::leaseset),
        flags: c"write deny-oom",
        keys: Keys::First(docs::KEY_RW_UPDATE),
        arity: 8,
        summary: c"Replays one lease change made on a primary (how replicas and the AOF receive semaphore effects).",
        complexity: c"O(log N) in the leases, plus those that expired",
        args: &docs::LEASESET_ARGS,
        stats: None,
    },
    Command {
        name: c"RL.RESERVESET",
        callback: callback!(reserveset::run),
        flags: c"write deny-oom",
        keys: Keys::First(docs::KEY_RW_UPDATE),
        arity: -9,
        summary: c"Replays one reservation change made on a primary (how replicas and the AOF receive RESERVE and RL.SETTLE effects).",
        complexity: c"O(log N) in the reservations, plus those forgotten",
        args: &docs::RESERVESET_ARGS,
        stats: None,
    },
    Command {
        name: c"RL.ALLOCATE",
        callback: callback!(allocate::run),
        flags: c"write deny-oom",
        keys: Keys::First(docs::KEY_RW_UPDATE),
        arity: -7,
        summary: c"Answers one region's allocation of a global limit, from every reporter's demand (the home store of a limit shared across regions).",
        complexity: c"O(N) in the reporters the key keeps (at most 256)",
        args: &docs::ALLOCATE_ARGS,
        stats: None,
    },
];

/// Registers every command, then its documentation where the server supports it.
pub fn register(ctx: *mut raw::RedisModuleCtx) -> Result<(), String> {
    // SAFETY: reading an API pointer Redis filled in before OnLoad.
    let create = unsafe { raw::RedisModule_CreateCommand }.ok_or("CreateCommand missing")?;
    for cmd in &COMMANDS {
        let (first_key, last_key, key_step) = cmd.key_range();
        // SAFETY: every pointer is a valid C string or callback for the life of the module.
        let rc = unsafe {
            create(
                ctx,
                cmd.name.as_ptr(),
                Some(cmd.callback),
                cmd.flags.as_ptr(),
                first_key,
                last_key,
                key_step,
            )
        };
        if rc != raw::Status::Ok as c_int {
            return Err(format!("could not register {}", cmd.name.to_string_lossy()));
        }
    }
    docs::register(ctx)
}

#[cfg(test)]
mod tests {
    use crate::core::protocol::command;

    /// The table registers exactly the commands the protocol names (which the clients send).
    #[test]
    fn the_table_registers_the_protocol_commands() {
        let mut registered: Vec<_> = super::COMMANDS
            .iter()
            .map(|c| c.name.to_str().unwrap())
            .collect();
        let mut named = command::ALL.to_vec();
        registered.sort_unstable();
        named.sort_unstable();
        assert_eq!(registered, named);
    }
}
