# Shared by benches/e2e.sh and benches/callgrind.sh (sourced, not run): tools, the module build,
# one redis-server on a free 127.0.0.1 port with its own --dir (killed on exit), the commands the
# benchmarks time, the team-written Lua scripts and the RESP generator.
#
# Environment (all optional):
#   REDIS_SERVER  redis-server binary (default /usr/bin/redis-server); redis-cli and
#                 redis-benchmark are taken from the same directory unless REDIS_CLI or
#                 REDIS_BENCHMARK say otherwise
#   KEYS          random keys per benchmark and keys per memory case (default 100000)
#   SKIP_BUILD=1  use the existing target/release/librl.so
#   MODULE        load this librl.so instead (no build): e.g. one built from a clean checkout,
#                 since target/release/librl.so changes whenever someone builds the work tree
# shellcheck shell=bash

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REDIS_SERVER=${REDIS_SERVER:-/usr/bin/redis-server}
BIN_DIR=$(dirname "$REDIS_SERVER")
REDIS_CLI=${REDIS_CLI:-$BIN_DIR/redis-cli}
REDIS_BENCHMARK=${REDIS_BENCHMARK:-$BIN_DIR/redis-benchmark}
KEYS=${KEYS:-100000}
if [[ -n ${MODULE:-} ]]; then
    SKIP_BUILD=1
    MODULE=$(realpath "$MODULE")
else
    MODULE=$ROOT/target/release/librl.so
fi
HOST=127.0.0.1

log() { printf '%s\n' "$*" >&2; }
die() { log "$(basename "$0"): $*"; exit 1; }

need_tools() {
    local tool
    for tool in "$REDIS_SERVER" "$REDIS_CLI" "$REDIS_BENCHMARK" "$@"; do
        command -v "$tool" >/dev/null || die "$tool not found"
    done
}

build_module() {
    if [[ ${SKIP_BUILD:-0} != 1 ]]; then
        log "== cargo build --release"
        (cd "$ROOT" && cargo build --release >&2)
    fi
    [[ -f $MODULE ]] || die "$MODULE missing: run cargo build --release"
}

# What was measured: the module file and its hash, and the work tree's revision.
module_label() {
    local rev
    rev=$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)
    echo "module $MODULE (sha256 $(sha256sum "$MODULE" | cut -c1-12)), work tree $rev"
}

# ---------------------------------------------------------------------------------------------
# The server: start_server [wrapper ...] runs "wrapper... redis-server ..." in the background.
# ---------------------------------------------------------------------------------------------
port_is_free() { ! (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

DIR=
SERVER_PID=
cleanup() {
    if [[ -n $SERVER_PID ]]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    [[ -n $DIR ]] && rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cli() { "$REDIS_CLI" -h "$HOST" -p "$PORT" "$@"; }

# shellcheck disable=SC2120 # called with or without a wrapper
start_server() { # $@: a wrapper command (valgrind ...), or nothing
    PORT=
    local candidate
    for candidate in $(shuf -i 20000-60000 -n 100); do
        if port_is_free "$candidate"; then PORT=$candidate; break; fi
    done
    [[ -n $PORT ]] || die "no free port found"
    [[ -n $DIR ]] || DIR=$(mktemp -d /tmp/rl-bench.XXXXXX)
    # A private copy: a rebuild of target/ during the run must not change what is measured.
    cp "$MODULE" "$DIR/librl.so"
    # shellcheck disable=SC2034 # read by the scripts that source this file
    MODULE_USED=$(module_label)
    # shellcheck disable=SC2086 # SERVER_ARGS is split into arguments on purpose
    "$@" "$REDIS_SERVER" --port "$PORT" --bind "$HOST" --dir "$DIR" --save '' --appendonly no \
        --loadmodule "$DIR/librl.so" --logfile "$DIR/redis.log" --daemonize no \
        ${SERVER_ARGS:-} >"$DIR/stdout.log" 2>&1 &
    SERVER_PID=$!
    local _
    for _ in $(seq 600); do # 60 s: valgrind starts slowly
        [[ $(cli PING 2>/dev/null) == PONG ]] && break
        kill -0 "$SERVER_PID" 2>/dev/null ||
            { cat "$DIR/redis.log" "$DIR/stdout.log" >&2; die "redis-server exited"; }
        sleep 0.1
    done
    [[ $(cli PING 2>/dev/null) == PONG ]] || die "redis-server did not answer on port $PORT"
    cli MODULE LIST | grep -qx rl || die "module rl not loaded"
    SERVER_VERSION=$(cli INFO server | tr -d '\r' | awk -F: '$1=="redis_version"{print $2}')
    log "== redis-server $SERVER_VERSION on $HOST:$PORT (pid $SERVER_PID), dir $DIR"
}

# ---------------------------------------------------------------------------------------------
# The team-written Lua scripts (benches/lua/): SCRIPT LOAD sets SHA (gcra.lua, one key) and
# SHA_ALL (gcra_all.lua, several keys, all or nothing).
# ---------------------------------------------------------------------------------------------
load_scripts() {
    SHA=$(cli SCRIPT LOAD "$(cat "$ROOT/benches/lua/gcra.lua")")
    [[ $SHA =~ ^[0-9a-f]{40}$ ]] || die "SCRIPT LOAD gcra.lua failed: $SHA"
    SHA_ALL=$(cli SCRIPT LOAD "$(cat "$ROOT/benches/lua/gcra_all.lua")")
    [[ $SHA_ALL =~ ^[0-9a-f]{40}$ ]] || die "SCRIPT LOAD gcra_all.lua failed: $SHA_ALL"
}

# The five keys of one RL.MULTI or gcra_all.lua call: "{P:N}:a .. {P:N}:e" with $2 for N
# (redis-benchmark draws a new number for every __rand_int__ in a command, so in a benchmark
# the five keys get five numbers: still five distinct keys, each from a keyspace of $KEYS).
five_keys() { local s; for s in a b c d e; do printf '{%s:%s}:%s ' "$1" "$2" "$s"; done; }
# Five RULE clauses named a .. f for RL.MULTI, all "limit period".
five_rules() { local s; for s in a b c d e; do printf 'RULE %s %s %s ' "$s" "$1" "$2"; done; }
# Five SETs (separated by ";") creating those keys as gcra_all.lua's, with a TAT in the past.
five_sets() { local s; for s in a b c d e; do printf 'SET {%s:%s}:%s 1764000000000000 PX 3600000;' "$1" "$2" "$s"; done; }
# The same five rules as gcra_all.lua arguments: name limit period_us burst cost.
five_args() { local s; for s in a b c d e; do printf '%s %s %s %s 1 ' "$s" "$1" "$2" "$1"; done; }

stat_field() { # $1: commandstats entry (lower case), $2: field
    cli INFO commandstats | tr -d '\r' |
        awk -F'[:,]' -v c="cmdstat_$1" -v f="$2" 'tolower($1)==c { for (i=2;i<=NF;i++) { split($i,kv,"="); if (kv[1]==f) print kv[2] } }'
}

# ---------------------------------------------------------------------------------------------
# RESP for i in [0, KEYS), REPEAT times each (default 1): "__i__" in an argument becomes i,
# "__p__" becomes i padded to 12 digits as redis-benchmark writes __rand_int__.
# ---------------------------------------------------------------------------------------------
resp() {
    awk -v n="$KEYS" -v rep="${REPEAT:-1}" -v args="$*" 'BEGIN {
        m = split(args, a, " ")
        for (i = 0; i < n; i++) {
            out = "*" m "\r\n"
            p = sprintf("%012d", i)
            for (j = 1; j <= m; j++) {
                s = a[j]
                k = index(s, "__i__"); if (k) s = substr(s, 1, k - 1) i substr(s, k + 5)
                k = index(s, "__p__"); if (k) s = substr(s, 1, k - 1) p substr(s, k + 5)
                out = out "$" length(s) "\r\n" s "\r\n"
            }
            for (r = 0; r < rep; r++) printf "%s", out
        }
    }' # (no gsub: it is ~100x slower in mawk)
}

pipe_all() { # $@: a command for resp(); checks that every reply arrived without an error
    local piped expected=$((KEYS * ${REPEAT:-1}))
    # shellcheck disable=SC2068 # split into arguments on purpose
    piped=$(resp $@ | cli --pipe 2>&1 | tail -1)
    [[ $piped == *"errors: 0, replies: $expected"* ]] || die "pipe $1: $piped"
}

# ---------------------------------------------------------------------------------------------
# The commands both benchmarks run (after load_scripts). One entry per command:
#   name | commandstats entry | requests divisor | comparison | command | populate
# - command: what redis-benchmark sends, with __rand_int__ in the keys;
# - divisor: the command gets N / divisor requests (the multi-key ones are slow);
# - comparison: "<X": shown as "how many times cheaper than X"; ">X": "how many times X's cost";
# - populate: for the "existing key" variants, the commands (separated by ";") that create every
#   key the benchmark can draw (__p__: the 12-digit number redis-benchmark writes), sent once
#   before timing (the Lua scripts' keys are created by SETs of a TAT in the past).
# "new key" rules make a key that is full again (so expires) 1 µs to 1 ms after the call: nearly
# every call meets an absent or expired key (deletes it) and creates it. "existing key" rules keep
# every key alive for the whole run, so each call updates a key in place: gcra and bucket
# "3650 3650d" (one a day, burst 3650: each call moves the TAT a day ahead), window and sliding
# "10000000 3650d" (the window ends in years), log "100000 1h" (a few entries per key).
# ---------------------------------------------------------------------------------------------
define_benches() {
    local r=__rand_int__ p=__p__
    # shellcheck disable=SC2034 # read by the scripts that source this file
    BENCHES=(
        "INCR|incr|1||INCR bench:incr:$r|SET bench:incr:$p 1"
        "SET PX|set|1||SET bench:set:$r 1764000000000000000 PX 60000|SET bench:set:$p 1764000000000000000 PX 60000"
        # New (or expired) key on nearly every call.
        "RL.ADMIT gcra|rl.admit|1|<Lua GCRA|RL.ADMIT bench:gcra:$r 1000000 1s|"
        "RL.ADMIT bucket|rl.admit|1|<Lua GCRA|RL.ADMIT bench:bucket:$r 1000000 1s ALGO bucket|"
        "RL.ADMIT window|rl.admit|1||RL.ADMIT bench:window:$r 1000 1ms ALGO window|"
        "RL.ADMIT sliding|rl.admit|1||RL.ADMIT bench:sliding:$r 1000 1ms ALGO sliding|"
        "RL.ADMIT log|rl.admit|1||RL.ADMIT bench:log:$r 1000 1ms ALGO log|"
        "CL.THROTTLE|cl.throttle|1|>RL.ADMIT gcra|CL.THROTTLE bench:cl:$r 999999 1000000 1|"
        "Lua GCRA|evalsha|1||EVALSHA $SHA 1 bench:lua:$r 1000000 1000000 1000000 1|"
        "RL.MULTI 5 rules|rl.multi|8|<Lua 5 keys|RL.MULTI 5 $(five_keys u $r)$(five_rules 1000000 1s)|"
        "Lua 5 keys|evalsha|8||EVALSHA $SHA_ALL 5 $(five_keys l $r)$(five_args 1000000 1000000)|"
        # Existing key on every call.
        "RL.ADMIT gcra, existing key|rl.admit|1|<Lua GCRA, existing key|RL.ADMIT bench:wgcra:$r 3650 3650d|RL.ADMIT bench:wgcra:$p 3650 3650d"
        "RL.ADMIT bucket, existing key|rl.admit|1|<Lua GCRA, existing key|RL.ADMIT bench:wbucket:$r 3650 3650d ALGO bucket|RL.ADMIT bench:wbucket:$p 3650 3650d ALGO bucket"
        "RL.ADMIT window, existing key|rl.admit|1||RL.ADMIT bench:wwindow:$r 10000000 3650d ALGO window|RL.ADMIT bench:wwindow:$p 10000000 3650d ALGO window"
        "RL.ADMIT sliding, existing key|rl.admit|1||RL.ADMIT bench:wsliding:$r 10000000 3650d ALGO sliding|RL.ADMIT bench:wsliding:$p 10000000 3650d ALGO sliding"
        "RL.ADMIT log, existing key|rl.admit|1||RL.ADMIT bench:wlog:$r 100000 1h ALGO log|RL.ADMIT bench:wlog:$p 100000 1h ALGO log"
        "CL.THROTTLE, existing key|cl.throttle|1|>RL.ADMIT gcra, existing key|CL.THROTTLE bench:wcl:$r 3649 3650 315360000|CL.THROTTLE bench:wcl:$p 3649 3650 315360000"
        "Lua GCRA, existing key|evalsha|1||EVALSHA $SHA 1 bench:wlua:$r 3650 315360000000000 3650 1|SET bench:wlua:$p 1764000000000000 PX 3600000"
        "RL.MULTI 5 rules, existing keys|rl.multi|8|<Lua 5 keys, existing keys|RL.MULTI 5 $(five_keys w $r)$(five_rules 3650 3650d)|RL.MULTI 5 $(five_keys w $p)$(five_rules 3650 3650d)"
        "Lua 5 keys, existing keys|evalsha|8||EVALSHA $SHA_ALL 5 $(five_keys wl $r)$(five_args 3650 315360000000000)|$(five_sets wl $p)"
    )
}
