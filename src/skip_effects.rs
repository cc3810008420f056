//! Whether anything can receive what the module propagates, so that a command does not build
//! effects (encode a state, make `RedisModule_Replicate`'s argument objects) that Redis drops.
//!
//! Redis keeps a propagated command only when its `shouldPropagate` holds (read in the
//! `alsoPropagate` of Redis 7.0.15 and Valkey 9.1.2):
//!
//! ```text
//!    aof_state != AOF_OFF                                          the AOF
//! || masterhost == NULL && (repl_backlog != NULL || slaves != 0)   the replication stream
//! || (Valkey 9, cluster mode) a slot export job in progress        atomic slot migration
//! ```
//!
//! The module skips only when it knows every term is false:
//!
//! - The AOF term is read on every call: `REDISMODULE_CTX_FLAGS_AOF` is `aof_state != AOF_OFF`,
//!   the same field. `CONFIG SET appendonly yes` sets it before its rewrite forks.
//! - The other terms are the flag `RECEIVERS`: true at load, set by the server events
//!   `ForkChild`, `ReplicationRoleChanged` and `ReplicaChange`, and cleared only by a timer
//!   that, once a second, finds outside cluster mode `role:master`, `connected_slaves:0`,
//!   `repl_backlog_active:0` (and Valkey's `replicas_waiting_psync:0`) in `INFO replication`.
//!   Those fields print the very variables `shouldPropagate` tests, so Redis drops everything at
//!   that instant; a missing field keeps the flag. Cluster mode never clears it, since Valkey
//!   streams to slot migration targets that `INFO replication` does not show.
//!
//! Why the flag cannot be false while Redis would propagate. Commands, timers and server events
//! run one at a time on the main thread, so what matters is their order.
//! - While the flag is false this server is a primary with no backlog and no replica (so it was
//!   when the timer cleared it), and only SYNC/PSYNC on this primary creates either (becoming a
//!   replica turns the term off, and fires the role event anyway). A partial resync needs a
//!   backlog, so only a full resync can begin: it creates the backlog (under a new replication
//!   id), then forks to take the snapshot, at once or after `repl-diskless-sync-delay` (Valkey's
//!   dual-channel sync forks for its RDB channel the same way). The replica's stream starts at
//!   the offset of that fork: whatever was written before it reaches the replica in the
//!   snapshot. The fork fires `ForkChild` in the parent before any later command runs, and from
//!   then on the flag is set. The writes skipped between SYNC and the fork would only have gone
//!   to the backlog before the replica's first offset, under an id no replica can ask for.
//! - A replica never clears the flag (`role:slave`): a promoted replica, which keeps its backlog
//!   and its own replicas, starts with it set (and the role change sets it again).
//! - A backlog is freed only by `repl-backlog-ttl` with no replica left, which the timer sees.
//!
//! That reasoning reads the internals of Redis 7.0.15 and Valkey 9.1.2, so the gate is enabled
//! only on the release series it was checked on (Redis 7.0.x, Valkey 9.1.x): a patch release
//! fixes bugs and does not restructure propagation, while a new minor may move a receiver, an
//! event or an `INFO` field. On any other server (or one whose version cannot be read) effects
//! are always built, as they are when an operator loads the module with `skip-effects no`.
//! Valkey reports a Redis-compatible version to modules (`redis_version:7.2.4`), so the server is
//! told apart by `INFO server`: Valkey prints `server_name:valkey` and `valkey_version`, Redis
//! 7.0 prints neither.
//!
//! Skipping must not change what else `RedisModule_Replicate` does: it counts one change in
//! `server.dirty`, which drives the `save` points and `rdb_changes_since_last_save`. A skipped
//! call still counts it, through [`count_change`].
//!
//! The statics below are only touched on the main thread (commands, the timer, events); they are
//! atomics only so as not to be `static mut`.

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use redis_module::raw;

use crate::server::{self, Flavor};

/// False only when the timer saw that no replica, backlog or slot migration can receive
/// anything; see the module documentation.
static RECEIVERS: AtomicBool = AtomicBool::new(true);
/// True when every server event was subscribed: only then may the timer clear `RECEIVERS`.
static TRACKING: AtomicBool = AtomicBool::new(false);
/// Whether the gate is enabled, and why: a [`Gate`] as its `u8`.
static GATE: AtomicU8 = AtomicU8::new(Gate::NotLoaded as u8);
/// True while a timer is pending.
static TIMER_ARMED: AtomicBool = AtomicBool::new(false);

/// How often the timer looks at `INFO replication` while the flag is set.
const PERIOD_MS: raw::mstime_t = 1000;

/// The `dataver` of every event used here (version 1 of each).
const EVENT_VERSION: u64 = 1;

/// The release series whose propagation code the reasoning above was checked against.
const VERIFIED: [(Flavor, u32, u32); 2] = [(Flavor::Redis, 7, 0), (Flavor::Valkey, 9, 1)];

/// Whether commands may skip building effects, and if not, why not (for `INFO rl`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Gate {
    /// Enabled: a verified server, every event subscribed.
    On = 0,
    /// The operator loaded the module with `skip-effects no`.
    OffByArgument = 1,
    /// A server (or a version) the reasoning was not checked on, or one that cannot be identified.
    OffUnverifiedServer = 2,
    /// A server event could not be subscribed to (nothing would tell the module of a replica).
    OffServerApi = 3,
    /// Before the module's `init` ran.
    NotLoaded = 4,
}

impl Gate {
    /// The value `INFO rl` prints as `rl_skip_effects_why`.
    pub fn name(self) -> &'static str {
        match self {
            Gate::On => "verified_server",
            Gate::OffByArgument => "module_argument",
            Gate::OffUnverifiedServer => "unverified_server",
            Gate::OffServerApi => "server_api_missing",
            Gate::NotLoaded => "not_loaded",
        }
    }

    fn from_u8(n: u8) -> Gate {
        [
            Gate::On,
            Gate::OffByArgument,
            Gate::OffUnverifiedServer,
            Gate::OffServerApi,
        ]
        .into_iter()
        .find(|g| *g as u8 == n)
        .unwrap_or(Gate::NotLoaded)
    }
}

/// The gate's state.
pub fn gate() -> Gate {
    Gate::from_u8(GATE.load(Ordering::Relaxed))
}

/// Enables the gate when `allowed` (the module argument) and the server is one it was verified
/// on: subscribes to the events that may add a receiver and arms the timer. Otherwise, or when
/// a subscription fails, the flag simply stays set: the module then propagates as always.
pub fn init(ctx: *mut raw::RedisModuleCtx, allowed: bool) {
    let gate = if !allowed {
        Gate::OffByArgument
    } else if !verified_server(ctx) {
        Gate::OffUnverifiedServer
    } else if subscribe_all(ctx) {
        Gate::On
    } else {
        Gate::OffServerApi
    };
    GATE.store(gate as u8, Ordering::Relaxed);
    if gate == Gate::On {
        TRACKING.store(true, Ordering::Relaxed);
        arm(ctx);
    }
}

/// True when this server's release series is in [`VERIFIED`].
fn verified_server(ctx: *mut raw::RedisModuleCtx) -> bool {
    server::version(ctx).is_some_and(|v| VERIFIED.contains(&v))
}

/// Subscribes to every event that may add a receiver; false when one subscription fails.
fn subscribe_all(ctx: *mut raw::RedisModuleCtx) -> bool {
    // SAFETY: reading an API pointer Redis filled in before OnLoad.
    let Some(subscribe) = (unsafe { raw::RedisModule_SubscribeToServerEvent }) else {
        return false;
    };
    for id in [
        raw::REDISMODULE_EVENT_FORK_CHILD,
        raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
        raw::REDISMODULE_EVENT_REPLICA_CHANGE,
    ] {
        let event = raw::RedisModuleEvent {
            id,
            dataver: EVENT_VERSION,
        };
        // SAFETY: OnLoad's context and a callback that lives as long as the module.
        if unsafe { subscribe(ctx, event, Some(on_event)) } != raw::Status::Ok as c_int {
            return false;
        }
    }
    true
}

/// True unless Redis would drop what the running command propagates now.
#[inline]
pub fn wanted(ctx: *mut raw::RedisModuleCtx) -> bool {
    if RECEIVERS.load(Ordering::Relaxed) {
        return true;
    }
    // SAFETY: `ctx` is the running command's. Without the function, assume the AOF is on.
    let flags = unsafe { raw::RedisModule_GetContextFlags.map_or(-1, |f| f(ctx)) };
    flags & raw::REDISMODULE_CTX_FLAGS_AOF as c_int != 0
}

/// Counts one change as a skipped `RedisModule_Replicate` would have. `ReplicateVerbatim` does
/// that and nothing else here, since Redis evaluates the same condition and drops the command
/// (were it to disagree, the receiver would get the command itself rather than nothing). It
/// costs about 50 instructions; `RedisModule_Replicate` with an empty target ("AR") would still
/// look the command name up, about 1,600.
pub fn count_change(ctx: *mut raw::RedisModuleCtx) {
    // SAFETY: `ctx` is the running command's.
    unsafe {
        if let Some(verbatim) = raw::RedisModule_ReplicateVerbatim {
            verbatim(ctx);
        }
    }
}

/// For `INFO rl`: 1 while what the module propagates may have a receiver besides the AOF.
pub fn receivers() -> bool {
    RECEIVERS.load(Ordering::Relaxed)
}

/// Something may have gained a receiver: propagate from now on, and look again later.
unsafe extern "C" fn on_event(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    _data: *mut c_void,
) {
    RECEIVERS.store(true, Ordering::Relaxed);
    arm(ctx);
}

/// Starts the timer unless one is pending.
fn arm(ctx: *mut raw::RedisModuleCtx) {
    if !TRACKING.load(Ordering::Relaxed) || TIMER_ARMED.swap(true, Ordering::Relaxed) {
        return;
    }
    // SAFETY: `ctx` is a context Redis handed to a callback; the timer callback lives as long as
    // the module.
    let created = unsafe {
        raw::RedisModule_CreateTimer
            .map(|create| create(ctx, PERIOD_MS, Some(on_timer), std::ptr::null_mut()))
    };
    if created.is_none() {
        // No timer: the flag stays set, which is always safe.
        TIMER_ARMED.store(false, Ordering::Relaxed);
    }
}

unsafe extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    TIMER_ARMED.store(false, Ordering::Relaxed);
    if !RECEIVERS.load(Ordering::Relaxed) {
        return;
    }
    if nothing_can_receive(ctx) {
        RECEIVERS.store(false, Ordering::Relaxed);
    } else {
        arm(ctx);
    }
}

/// True when, right now, Redis would propagate nothing to replicas or slot migrations.
fn nothing_can_receive(ctx: *mut raw::RedisModuleCtx) -> bool {
    // SAFETY: `ctx` is the timer's context; the info data is freed before returning and its
    // strings are read before that.
    unsafe {
        let (Some(flags), Some(get), Some(field), Some(signed), Some(free)) = (
            raw::RedisModule_GetContextFlags,
            raw::RedisModule_GetServerInfo,
            raw::RedisModule_ServerInfoGetFieldC,
            raw::RedisModule_ServerInfoGetFieldSigned,
            raw::RedisModule_FreeServerInfo,
        ) else {
            return false;
        };
        if flags(ctx) & raw::REDISMODULE_CTX_FLAGS_CLUSTER as c_int != 0 {
            return false;
        }
        let info = get(ctx, c"replication".as_ptr());
        if info.is_null() {
            return false;
        }
        let role = field(info, c"role".as_ptr());
        let master = !role.is_null() && CStr::from_ptr(role).to_bytes() == b"master";
        // A field absent from this server's INFO: `required` ones keep the flag set.
        let zero = |name: &CStr, required: bool| {
            let mut err: c_int = 0;
            let n = signed(info, name.as_ptr(), &mut err);
            if err != 0 {
                !required
            } else {
                n == 0
            }
        };
        let none = master
            && zero(c"connected_slaves", true)
            && zero(c"repl_backlog_active", true)
            && zero(c"replicas_waiting_psync", false);
        free(ctx, info);
        none
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_round_trip_through_their_byte() {
        for g in [
            Gate::On,
            Gate::OffByArgument,
            Gate::OffUnverifiedServer,
            Gate::OffServerApi,
            Gate::NotLoaded,
        ] {
            assert_eq!(Gate::from_u8(g as u8), g);
        }
        assert_eq!(Gate::from_u8(200), Gate::NotLoaded);
    }
}
