//! redis-rl: native rate-limiting and admission-control commands for Redis.
//!
//! `core` (the `redis-rl-core` crate) is the pure arithmetic; `state` the native type and its
//! encoding; `commands` the glue that parses, calls the core, writes, replicates (`replicate`,
//! skipped when `skip_effects` sees that nothing can receive it) and replies.

// The glue passes pointers that Redis handed to a callback straight back to Redis.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod clock;
pub mod commands;
/// The pure core, a crate of its own so that clients share it without Redis.
pub use rl_core as core;
#[cfg(test)]
mod fuzz;
pub mod info_section;
pub mod replicate;
pub mod server;
pub mod skip_effects;
pub mod state;
pub mod stats;

use std::ffi::c_int;

use redis_module::{raw, redis_module, Context, RedisString, Status};
use state::LIMITER_TYPE;

/// `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION` from Valkey 9's `src/valkeymodule.h`
/// (`1 << 5`); Redis's `redismodule.h`, from which the bindings come, does not have it. Without
/// it Valkey refuses `CLUSTER MIGRATESLOTS` while this module is loaded.
const VALKEY_HANDLE_ATOMIC_SLOT_MIGRATION: c_int = 1 << 5;

fn init(ctx: &Context, args: &[RedisString]) -> Status {
    let skip_effects = match parse_args(args) {
        Ok(skip) => skip,
        Err(e) => {
            ctx.log_warning(&format!("redis-rl: {e}; the module is not loaded"));
            return Status::Err;
        }
    };
    // Truncated or corrupt payloads become load errors instead of aborting Redis, and keys are
    // signalled as modified only when a command really changed them.
    let mut options = (raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS
        | raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED) as c_int;
    // A slot migration copies keys as the AOF rewrite does (`aof_rewrite`: `RL.SETSTATE`, then
    // the expiry), then streams the writes of the moving slots: the effects this module
    // propagates, which Valkey routes by the slot of their declared keys (`RL.SETSTATE`'s are
    // at 1, 3, 5...) and which cluster mode always builds (see `skip_effects`). Nothing here
    // depends on which node owns a slot, so keys that arrive before the slot are ordinary keys.
    if valkey_with_atomic_slot_migration(ctx.ctx) {
        options |= VALKEY_HANDLE_ATOMIC_SLOT_MIGRATION;
    }
    // SAFETY: reading API pointers and calling them from OnLoad with its own context.
    unsafe {
        if let Some(set_options) = raw::RedisModule_SetModuleOptions {
            set_options(ctx.ctx, options);
        }
        raw::register_info_function(ctx.ctx, Some(info_section::section));
    }
    // Effects are built only while something can receive them (unless the operator said no).
    skip_effects::init(ctx.ctx, skip_effects);
    match commands::register(ctx.ctx) {
        Ok(()) => Status::Ok,
        Err(e) => {
            ctx.log_warning(&format!("redis-rl: {e}"));
            Status::Err
        }
    }
}

/// True on a Valkey that knows the atomic slot migration option. Redis 7.0 only stores the
/// options and ignores unknown bits, but a later Redis may give bit 5 another meaning: the bit
/// is set only where `INFO server` says `server_name:valkey` and the server lists the bit among
/// the options it supports.
fn valkey_with_atomic_slot_migration(ctx: *mut raw::RedisModuleCtx) -> bool {
    // SAFETY: reading an API pointer filled in before OnLoad and calling it.
    let supported = unsafe { raw::RedisModule_GetModuleOptionsAll.map_or(0, |all| all()) };
    supported & VALKEY_HANDLE_ATOMIC_SLOT_MIGRATION != 0
        && server::version(ctx).is_some_and(|(flavor, ..)| flavor == server::Flavor::Valkey)
}

/// The module arguments (`--loadmodule librl.so skip-effects no`): whether commands may skip
/// building effects that nothing can receive. A typo must not load a module that silently does
/// something else, so anything unknown refuses the load.
fn parse_args(args: &[RedisString]) -> Result<bool, String> {
    let mut skip = true;
    let mut words = args.iter().map(|a| a.to_string_lossy());
    while let Some(name) = words.next() {
        if !name.eq_ignore_ascii_case("skip-effects") {
            return Err(format!(
                "unknown module argument '{name}' (the only one is skip-effects auto|no)"
            ));
        }
        let value = words.next().unwrap_or_default();
        skip = match value.to_ascii_lowercase().as_str() {
            "auto" => true,
            "no" => false,
            _ => {
                return Err(format!(
                    "skip-effects must be auto or no, not '{value}' (auto skips only on the \
                     server versions the module was verified on)"
                ))
            }
        };
    }
    Ok(skip)
}

/// Inside Redis every allocation goes through Redis's allocator, so `used_memory` and
/// `MEMORY USAGE` see it. Unit tests run without a server and use the system's.
#[cfg(not(test))]
type Allocator = redis_module::alloc::RedisAlloc;
#[cfg(not(test))]
const ALLOCATOR: Allocator = redis_module::alloc::RedisAlloc;
#[cfg(test)]
type Allocator = std::alloc::System;
#[cfg(test)]
const ALLOCATOR: Allocator = std::alloc::System;

redis_module! {
    name: "rl",
    version: 1,
    allocator: (Allocator, ALLOCATOR),
    data_types: [LIMITER_TYPE],
    init: init,
}
