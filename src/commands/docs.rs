//! `COMMAND DOCS` / `COMMAND INFO` metadata (the argument trees the command table names), and
//! the module's ACL category.
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
    /// `REDISMODULE_CMD_ARG_*` flags.
    pub flags: u32,
    pub summary: Option<&'static CStr>,
    pub subargs: &'static [Arg],
}

/// Where a command's keys are, with their `REDISMODULE_CMD_KEY_*` flags.
#[derive(Clone, Copy)]
pub enum Keys {
    /// One key at position 1.
    First(u64),
    /// `numkeys` at position 1, then that many keys.
    Numkeys(u64),
    /// Keys at 1, 3, 5, ... each followed by a value.
    Pairs(u64),
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
const BLOCK: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK;

const OPTIONAL: u32 = raw::REDISMODULE_CMD_ARG_OPTIONAL;
const MULTIPLE: u32 = raw::REDISMODULE_CMD_ARG_MULTIPLE;
const MULTIPLE_TOKEN: u32 = raw::REDISMODULE_CMD_ARG_MULTIPLE_TOKEN;

pub const KEY_RW_UPDATE: u64 =
    (raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_UPDATE) as u64;
pub const KEY_OW_UPDATE: u64 =
    (raw::REDISMODULE_CMD_KEY_OW | raw::REDISMODULE_CMD_KEY_UPDATE) as u64;
pub const KEY_RO_ACCESS: u64 =
    (raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS) as u64;

const fn arg(name: &'static CStr, kind: raw::RedisModuleCommandArgType) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        flags: 0,
        summary: None,
        subargs: &[],
    }
}

const fn described(mut a: Arg, summary: &'static CStr) -> Arg {
    a.summary = Some(summary);
    a
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
        flags: OPTIONAL,
        summary: Some(summary),
        subargs: &[],
    }
}

const fn pure_token(token: &'static CStr, name: &'static CStr) -> Arg {
    Arg {
        name,
        kind: TOKEN,
        token: Some(token),
        flags: 0,
        summary: None,
        subargs: &[],
    }
}

static ALGOS: [Arg; 5] = [
    pure_token(c"gcra", c"gcra"),
    pure_token(c"bucket", c"bucket"),
    pure_token(c"window", c"window"),
    pure_token(c"sliding", c"sliding"),
    pure_token(c"log", c"log"),
];

const KEY_ARG: Arg = arg(c"key", KEY);
const LIMIT_ARG: Arg = described(arg(c"limit", INTEGER), c"units per period, 1 to 10^15");
const PERIOD_ARG: Arg = described(
    arg(c"period", STRING),
    c"an integer with a unit: ms, s, m, h or d (1ms to 3650d)",
);
const BURST_ARG: Arg = option(
    c"BURST",
    c"capacity",
    INTEGER,
    c"units admitted at once (gcra, bucket; default limit)",
);
const COST_ARG: Arg = option(
    c"COST",
    c"units",
    INTEGER,
    c"units this request spends (default 1, at most the capacity)",
);
const ALGO_ARG: Arg = Arg {
    name: c"algo",
    kind: ONEOF,
    token: Some(c"ALGO"),
    flags: OPTIONAL,
    summary: Some(c"gcra (default), bucket, window, sliding or log"),
    subargs: &ALGOS,
};
const DRYRUN_ARG: Arg = Arg {
    flags: OPTIONAL,
    summary: Some(c"decide and reply, change nothing"),
    ..pure_token(c"DRYRUN", c"dryrun")
};

const DEADLINE_ARG: Arg = option(
    c"DEADLINE",
    c"unix-ms",
    INTEGER,
    c"Unix time in ms after which the call changes nothing and answers -DEADLINE",
);

static RESERVE_ARGS: [Arg; 2] = [
    described(arg(c"id", STRING), c"the reservation id, 1 to 256 bytes"),
    option(
        c"KEEP",
        c"keep",
        STRING,
        c"how long the reservation is remembered (default 1h, at most 7d)",
    ),
];

pub static ADMIT_ARGS: [Arg; 9] = [
    KEY_ARG,
    LIMIT_ARG,
    PERIOD_ARG,
    BURST_ARG,
    COST_ARG,
    ALGO_ARG,
    DRYRUN_ARG,
    Arg {
        name: c"reserve",
        kind: BLOCK,
        token: Some(c"RESERVE"),
        flags: OPTIONAL,
        summary: Some(c"admit COST as an estimate, to be settled with RL.SETTLE (gcra, bucket)"),
        subargs: &RESERVE_ARGS,
    },
    DEADLINE_ARG,
];

pub static GRANT_ARGS: [Arg; 8] = [
    KEY_ARG,
    LIMIT_ARG,
    PERIOD_ARG,
    BURST_ARG,
    ALGO_ARG,
    Arg {
        token: Some(c"WANT"),
        ..described(
            arg(c"n", INTEGER),
            c"units wanted; as many as are available are granted",
        )
    },
    option(
        c"TTL",
        c"ttl",
        STRING,
        c"how long the grant may be spent (default 1s, at most 1d; clamped to the window end)",
    ),
    DEADLINE_ARG,
];

const HOLDER_ARG: Arg = described(arg(c"holder", STRING), c"the lease holder, 1 to 256 bytes");
const LEASE_ARG: Arg = described(
    arg(c"lease", STRING),
    c"a duration (1ms to 3650d) after which the slot frees itself",
);

pub static ACQUIRE_ARGS: [Arg; 5] = [
    KEY_ARG,
    described(arg(c"capacity", INTEGER), c"slots, 1 to 100000"),
    LEASE_ARG,
    option(
        c"ID",
        c"holder",
        STRING,
        c"the holder (generated when not given)",
    ),
    DEADLINE_ARG,
];

pub static RELEASE_ARGS: [Arg; 2] = [KEY_ARG, HOLDER_ARG];
pub static RENEW_ARGS: [Arg; 3] = [KEY_ARG, HOLDER_ARG, LEASE_ARG];

pub static SETTLE_ARGS: [Arg; 4] = [
    KEY_ARG,
    described(arg(c"id", STRING), c"the reservation id given to RESERVE"),
    described(arg(c"actual", INTEGER), c"the actual cost, 0 to 10^15"),
    Arg {
        flags: OPTIONAL,
        summary: Some(c"then forget the reservation: the same id reserves, and is charged, anew"),
        ..pure_token(c"FORGET", c"forget")
    },
];

static RULE_ARGS: [Arg; 6] = [
    described(arg(c"name", STRING), c"reported in denied_by and rules"),
    LIMIT_ARG,
    PERIOD_ARG,
    BURST_ARG,
    COST_ARG,
    ALGO_ARG,
];

pub static MULTI_ARGS: [Arg; 5] = [
    described(arg(c"numkeys", INTEGER), c"number of keys, 1 to 32"),
    Arg {
        flags: MULTIPLE,
        ..KEY_ARG
    },
    Arg {
        name: c"rule",
        kind: BLOCK,
        token: Some(c"RULE"),
        flags: MULTIPLE | MULTIPLE_TOKEN,
        summary: Some(c"one per key, in the same order"),
        subargs: &RULE_ARGS,
    },
    DRYRUN_ARG,
    DEADLINE_ARG,
];

pub static INFO_ARGS: [Arg; 1] = [KEY_ARG];

pub static THROTTLE_ARGS: [Arg; 5] = [
    KEY_ARG,
    described(arg(c"max_burst", INTEGER), c"the capacity is max_burst + 1"),
    described(arg(c"count", INTEGER), c"units per period"),
    described(arg(c"period", INTEGER), c"seconds"),
    Arg {
        flags: OPTIONAL,
        ..described(
            arg(c"quantity", INTEGER),
            c"units to spend (default 1; 0 peeks)",
        )
    },
];

static SETSTATE_PAIR: [Arg; 2] = [
    KEY_ARG,
    described(
        arg(c"payload", STRING),
        c"a limiter state as encoded by this module",
    ),
];

pub static SETSTATE_ARGS: [Arg; 1] = [Arg {
    name: c"pair",
    kind: BLOCK,
    token: None,
    flags: MULTIPLE,
    summary: Some(c"one or more keys, each with its state"),
    subargs: &SETSTATE_PAIR,
}];

pub static LEASESET_ARGS: [Arg; 7] = [
    KEY_ARG,
    described(arg(c"capacity", INTEGER), c"the semaphore's capacity"),
    described(arg(c"lease_us", INTEGER), c"its lease, in microseconds"),
    described(
        arg(c"now_us", INTEGER),
        c"the primary's time of the change, in microseconds",
    ),
    described(
        arg(c"next_id", INTEGER),
        c"the sequence number for generated holders",
    ),
    HOLDER_ARG,
    described(
        arg(c"expiry_us", INTEGER),
        c"the lease's new expiry in microseconds since the epoch; 0 removes it",
    ),
];

static SETTLEMENT_ARGS: [Arg; 2] = [
    described(
        arg(c"delta", INTEGER),
        c"units the settlement debited (negative: credited)",
    ),
    described(
        arg(c"settled", INTEGER),
        c"the remaining units the settlement replied",
    ),
];

pub static RESERVESET_ARGS: [Arg; 9] = [
    KEY_ARG,
    described(
        arg(c"payload", STRING),
        c"the key's rule and rate state, encoded as RL.SETSTATE takes them, without reservations",
    ),
    described(
        arg(c"now_us", INTEGER),
        c"the primary's time of the change, in microseconds",
    ),
    described(arg(c"id", STRING), c"the reservation id, 1 to 256 bytes"),
    described(
        arg(c"expires_us", INTEGER),
        c"when the reservation is forgotten, in microseconds since the epoch",
    ),
    described(arg(c"estimate", INTEGER), c"the units reserved"),
    described(
        arg(c"remaining", INTEGER),
        c"the remaining units the admission replied",
    ),
    described(
        arg(c"reset_after_us", INTEGER),
        c"the reset the admission replied, in microseconds",
    ),
    Arg {
        name: c"settlement",
        kind: BLOCK,
        token: None,
        flags: OPTIONAL,
        summary: Some(c"present once the reservation was settled"),
        subargs: &SETTLEMENT_ARGS,
    },
];

pub static ALLOCATE_ARGS: [Arg; 9] = [
    KEY_ARG,
    described(
        arg(c"limit", INTEGER),
        c"the global rule's limit, units per period, 1 to 10^15",
    ),
    described(
        arg(c"region", STRING),
        c"the reporter's region: 1 to 64 letters, digits, '-', '_', '.' or ':'",
    ),
    described(
        arg(c"reporter", STRING),
        c"the reporting gateway, unique in its region (same characters)",
    ),
    described(
        arg(c"demand", INTEGER),
        c"units per period the reporter saw asked (admitted and refused), 0 to 10^12",
    ),
    described(
        arg(c"held", INTEGER),
        c"the allocation the reporter enforces now, 0 to 10^15",
    ),
    option(
        c"RESERVE",
        c"units",
        INTEGER,
        c"units per period held back from every allocation (default 0, below limit)",
    ),
    option(
        c"REGIONS",
        c"n",
        INTEGER,
        c"the regions the rule is enforced in (default 1, at most 64)",
    ),
    option(
        c"LEASE",
        c"duration",
        STRING,
        c"how long an allocation may be enforced without a newer one (default 10s, 1ms to 1d)",
    ),
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
            flags: a.flags as c_int,
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
    for doc in &super::COMMANDS {
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
        key_specs[0].begin_search_type =
            raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
        key_specs[0].bs.index.pos = 1;
        match doc.keys {
            Keys::First(flags) | Keys::Pairs(flags) => {
                // One key, or every other argument to the end.
                let (lastkey, keystep) = match doc.keys {
                    Keys::Pairs(_) => (-1, 2),
                    _ => (0, 1),
                };
                key_specs[0].flags = flags;
                key_specs[0].find_keys_type =
                    raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
                key_specs[0].fk.range.lastkey = lastkey;
                key_specs[0].fk.range.keystep = keystep;
                key_specs[0].fk.range.limit = 0;
            }
            Keys::Numkeys(flags) => {
                key_specs[0].flags = flags;
                key_specs[0].find_keys_type =
                    raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM;
                key_specs[0].fk.keynum.keynumidx = 0;
                key_specs[0].fk.keynum.firstkey = 1;
                key_specs[0].fk.keynum.keystep = 1;
            }
        }
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
