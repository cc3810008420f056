//! `COMMAND DOCS` / `COMMAND INFO` metadata, and the module's ACL category.
//!
//! Registered through `RedisModule_SetCommandInfo` when the server exports it (7.0 does), and
//! the `rl` ACL category where the server supports module categories (7.4+, Valkey 8+). Either
//! being absent is not an error: the commands work without their metadata.

use std::ffi::{c_int, CStr};
use std::ptr;

use redis_module::raw;

/// One argument as `COMMAND DOCS` shows it.
pub struct Arg {
    pub name: &'static CStr,
    pub kind: raw::RedisModuleCommandArgType,
    pub token: Option<&'static CStr>,
    pub optional: bool,
    pub summary: Option<&'static CStr>,
    pub subargs: &'static [Arg],
}

/// One command's documentation.
pub struct Doc {
    pub name: &'static CStr,
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    pub arity: c_int,
    /// `REDISMODULE_CMD_KEY_*` flags of the single key at position 1.
    pub key_flags: u64,
    pub args: &'static [Arg],
}

const KEY: raw::RedisModuleCommandArgType = raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY;
const INTEGER: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER;
const STRING: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING;
const TOKEN: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN;
const ONEOF: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF;
const UNIX_TIME: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_UNIX_TIME;

const fn arg(name: &'static CStr, kind: raw::RedisModuleCommandArgType) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        optional: false,
        summary: None,
        subargs: &[],
    }
}

const fn option(
    token: &'static CStr,
    name: &'static CStr,
    kind: raw::RedisModuleCommandArgType,
    summary: &'static CStr,
) -> Arg {
    Arg {
        name,
        kind,
        token: Some(token),
        optional: true,
        summary: Some(summary),
        subargs: &[],
    }
}

const fn pure_token(token: &'static CStr, name: &'static CStr) -> Arg {
    Arg {
        name,
        kind: TOKEN,
        token: Some(token),
        optional: false,
        summary: None,
        subargs: &[],
    }
}

const KEY_RW_UPDATE: u64 = (raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_UPDATE) as u64;
const KEY_OW_UPDATE: u64 = (raw::REDISMODULE_CMD_KEY_OW | raw::REDISMODULE_CMD_KEY_UPDATE) as u64;

static ALGOS: [Arg; 5] = [
    pure_token(c"gcra", c"gcra"),
    pure_token(c"bucket", c"bucket"),
    pure_token(c"window", c"window"),
    pure_token(c"sliding", c"sliding"),
    pure_token(c"log", c"log"),
];

static ADMIT_ARGS: [Arg; 7] = [
    arg(c"key", KEY),
    Arg {
        summary: Some(c"units admitted per period, 1 to 10^15"),
        ..arg(c"limit", INTEGER)
    },
    Arg {
        summary: Some(c"an integer with a unit: ms, s, m, h or d (1ms to 3650d)"),
        ..arg(c"period", STRING)
    },
    option(
        c"BURST",
        c"capacity",
        INTEGER,
        c"units admitted at once (gcra, bucket; default limit)",
    ),
    option(
        c"COST",
        c"units",
        INTEGER,
        c"units this request spends (default 1, at most the capacity)",
    ),
    Arg {
        name: c"algo",
        kind: ONEOF,
        token: Some(c"ALGO"),
        optional: true,
        summary: Some(c"the algorithm (default gcra)"),
        subargs: &ALGOS,
    },
    Arg {
        optional: true,
        summary: Some(c"decide and reply, change nothing"),
        ..pure_token(c"DRYRUN", c"dryrun")
    },
];

static SETSTATE_ARGS: [Arg; 3] = [
    arg(c"key", KEY),
    Arg {
        summary: Some(c"a limiter state as encoded by this module"),
        ..arg(c"payload", STRING)
    },
    option(
        c"PXAT",
        c"unix-time-milliseconds",
        UNIX_TIME,
        c"when the key expires",
    ),
];

pub static DOCS: [Doc; 2] = [
    Doc {
        name: c"RL.ADMIT",
        summary: c"Admits or refuses one request against a rate limit, atomically.",
        complexity: c"O(1)",
        arity: -4,
        key_flags: KEY_RW_UPDATE,
        args: &ADMIT_ARGS,
    },
    Doc {
        name: c"RL.SETSTATE",
        summary:
            c"Sets a limiter's state from its encoding (how replicas and the AOF receive effects).",
        complexity: c"O(1)",
        arity: -3,
        key_flags: KEY_OW_UPDATE,
        args: &SETSTATE_ARGS,
    },
];

/// Converts an argument tree to the raw form. The returned vectors own the child arrays that the
/// raw structs point into; they must outlive the `SetCommandInfo` call (which copies them).
fn raw_args(
    args: &[Arg],
    keep: &mut Vec<Vec<raw::RedisModuleCommandArg>>,
) -> *mut raw::RedisModuleCommandArg {
    let mut out: Vec<raw::RedisModuleCommandArg> = Vec::with_capacity(args.len() + 1);
    for a in args {
        let subargs = if a.subargs.is_empty() {
            ptr::null_mut()
        } else {
            raw_args(a.subargs, keep)
        };
        out.push(raw::RedisModuleCommandArg {
            name: a.name.as_ptr(),
            type_: a.kind,
            key_spec_index: if a.kind == KEY { 0 } else { -1 },
            token: a.token.map_or(ptr::null(), CStr::as_ptr),
            summary: a.summary.map_or(ptr::null(), CStr::as_ptr),
            since: ptr::null(),
            flags: if a.optional {
                raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int
            } else {
                raw::REDISMODULE_CMD_ARG_NONE as c_int
            },
            deprecated_since: ptr::null(),
            subargs,
            display_text: ptr::null(),
        });
    }
    // SAFETY: an all-zero arg is the terminator Redis looks for.
    out.push(unsafe { std::mem::zeroed() });
    let p = out.as_mut_ptr();
    keep.push(out);
    p
}

pub fn register(ctx: *mut raw::RedisModuleCtx) -> Result<(), String> {
    // SAFETY: reading the API function pointers Redis filled in at load time.
    let (get_command, set_info, set_acl, add_acl) = unsafe {
        (
            raw::RedisModule_GetCommand,
            raw::RedisModule_SetCommandInfo,
            raw::RedisModule_SetCommandACLCategories,
            raw::RedisModule_AddACLCategory,
        )
    };
    let Some(get_command) = get_command else {
        return Ok(());
    };
    // SAFETY: called from OnLoad, with a static C string.
    let category =
        add_acl.is_some_and(|add| unsafe { add(ctx, c"rl".as_ptr()) } == raw::Status::Ok as c_int);
    for doc in &DOCS {
        // SAFETY: the command was registered just before.
        let command = unsafe { get_command(ctx, doc.name.as_ptr()) };
        if command.is_null() {
            return Err(format!("command {} not found", doc.name.to_string_lossy()));
        }
        if let (true, Some(set_acl)) = (category, set_acl) {
            // SAFETY: `command` is valid; the category was added above.
            unsafe { set_acl(command, c"rl".as_ptr()) };
        }
        let Some(set_info) = set_info else { continue };
        let mut keep = Vec::new();
        let args = raw_args(doc.args, &mut keep);
        // SAFETY: zeroed key specs are the terminator; the first is filled in below.
        let mut key_specs: [raw::RedisModuleCommandKeySpec; 2] = unsafe { std::mem::zeroed() };
        key_specs[0].flags = doc.key_flags;
        key_specs[0].begin_search_type =
            raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
        key_specs[0].bs.index.pos = 1;
        key_specs[0].find_keys_type =
            raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
        key_specs[0].fk.range.lastkey = 0;
        key_specs[0].fk.range.keystep = 1;
        key_specs[0].fk.range.limit = 0;
        let version = raw::RedisModuleCommandInfoVersion {
            version: 1,
            sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
            sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
            sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
        };
        let info = raw::RedisModuleCommandInfo {
            version: &version,
            summary: doc.summary.as_ptr(),
            complexity: doc.complexity.as_ptr(),
            since: c"0.1.0".as_ptr(),
            history: ptr::null_mut(),
            tips: ptr::null(),
            arity: doc.arity,
            key_specs: key_specs.as_mut_ptr(),
            args,
        };
        // SAFETY: every pointer in `info` is valid for this call; Redis copies what it keeps.
        if unsafe { set_info(command, &info) } != raw::Status::Ok as c_int {
            return Err(format!(
                "invalid command info for {}",
                doc.name.to_string_lossy()
            ));
        }
    }
    Ok(())
}
