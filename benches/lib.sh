# Shared by benches/e2e.sh and benches/callgrind.sh (sourced, not run): tools, the module build,
# one redis-server on a free 127.0.0.1 port with its own --dir (killed on exit), with REPLICA=1 a
# second one as its replica, the commands the benchmarks time, the team-written Lua scripts and
# the RESP generator.
#
# Environment (all optional):
#   REDIS_SERVER  redis-server binary (default /usr/bin/redis-server), or valkey-server;
#                 redis-cli and redis-benchmark are taken from the same directory (else from the
#                 PATH) unless REDIS_CLI or REDIS_BENCHMARK say otherwise
#   KEYS          random keys per benchmark and keys per memory case (default 100000)
#   SKIP_BUILD=1  use the existing target/release/librl.so
#   MODULE        load this librl.so instead (no build): e.g. one built from a clean checkout,
#                 since target/release/librl.so changes whenever someone builds the work tree
#   MODULE_REV    the revision MODULE was built from, printed with the results
#   REPLICA=1     attach a replica: a second redis-server (same binary, the same module copy, its
#                 own free 127.0.0.1 port and --dir, --save '' --appendonly no, killed and
#                 removed on exit like the first) that is made REPLICAOF the first; measuring
#                 starts once it reports master_link_status:up and the primary's INFO rl says
#                 rl_replication_receivers:1, so every write builds and sends its effect, as on
#                 a production primary. Default (0): a lone server; measuring starts once
#                 rl_replication_receivers reads 0 (the module's 1 s timer clears it after
#                 load), so the commands skip their effects. The tables' header says which.
# shellcheck shell=bash

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REDIS_SERVER=${REDIS_SERVER:-/usr/bin/redis-server}
BIN_DIR=$(dirname "$REDIS_SERVER")
# A server shipped alone (Valkey's valkey-server, say) is driven by the redis-cli and
# redis-benchmark on the PATH.
beside_or_path() { if [[ -x $BIN_DIR/$1 ]]; then echo "$BIN_DIR/$1"; else command -v "$1" || echo "$1"; fi; }
REDIS_CLI=${REDIS_CLI:-$(beside_or_path redis-cli)}
REDIS_BENCHMARK=${REDIS_BENCHMARK:-$(beside_or_path redis-benchmark)}
KEYS=${KEYS:-100000}
REPLICA=${REPLICA:-0}
[[ $REPLICA == 0 || $REPLICA == 1 ]] || { echo "REPLICA must be 0 or 1, not '$REPLICA'" >&2; exit 1; }
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

# What was measured: the module file and its hash, and the revision it was built from
# (MODULE_REV when given, say for a MODULE built from a clean checkout; else the work tree's).
module_label() {
    local rev
    if [[ -n ${MODULE_REV:-} ]]; then
        rev="built from $MODULE_REV"
    else
        rev="work tree $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
    fi
    echo "module $MODULE (sha256 $(sha256sum "$MODULE" | cut -c1-12)), $rev"
}

# ---------------------------------------------------------------------------------------------
# The server: start_server [wrapper ...] runs "wrapper... redis-server ..." in the background.
# ---------------------------------------------------------------------------------------------
port_is_free() { ! (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

DIR=
SERVER_PID=
REPLICA_DIR=
REPLICA_PID=
REPLICA_PORT=
cleanup() {
    local pid
    for pid in "$REPLICA_PID" "$SERVER_PID"; do
        if [[ -n $pid ]]; then
            kill "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        fi
    done
    [[ -z $REPLICA_DIR ]] || rm -rf "$REPLICA_DIR"
    [[ -z $DIR ]] || rm -rf "$DIR"
}
trap cleanup EXIT
# set -e stops at the first failing command; say which, and whether the server is still there.
on_error() {
    local state=alive
    [[ -n $SERVER_PID ]] && ! kill -0 "$SERVER_PID" 2>/dev/null && state="GONE (see $DIR/redis.log)"
    log "$(basename "$0"): failed at line $1 ($2); redis-server $state"
    [[ $state == alive ]] || tail -20 "$DIR/redis.log" "$DIR/stdout.log" >&2 2>/dev/null || true
    if [[ -n $REPLICA_PID ]] && ! kill -0 "$REPLICA_PID" 2>/dev/null; then
        log "the replica is GONE:"
        tail -20 "$REPLICA_DIR/redis.log" "$REPLICA_DIR/stdout.log" >&2 2>/dev/null || true
    fi
}
set -o errtrace
trap 'on_error $LINENO "$BASH_COMMAND"' ERR
trap 'exit 130' INT TERM

cli() { "$REDIS_CLI" -h "$HOST" -p "$PORT" "$@"; }
replica_cli() { "$REDIS_CLI" -h "$HOST" -p "$REPLICA_PORT" "$@"; }

# await_server <cli function> <pid> <dir> <name> <tenths of a second>: waits until the server
# answers PING with the module loaded; stops the run (with its logs) if it exits or never answers.
await_server() {
    local client=$1 pid=$2 dir=$3 name=$4 tries=$5 _
    for _ in $(seq "$tries"); do
        [[ $("$client" PING 2>/dev/null) == PONG ]] && break
        kill -0 "$pid" 2>/dev/null || { cat "$dir/redis.log" "$dir/stdout.log" >&2; die "$name exited"; }
        sleep 0.1
    done
    [[ $("$client" PING 2>/dev/null) == PONG ]] || die "$name did not answer"
    "$client" MODULE LIST | grep -qx rl || die "module rl not loaded in $name"
}
info_field() { # $1: cli or replica_cli, $2: INFO section, $3: field -> its value (empty if absent)
    "$1" INFO "$2" | tr -d '\r' | awk -F: -v f="$3" '$1==f {print $2}'
}
free_port() { # -> a free port on $HOST other than the primary's (nothing when none was found)
    local candidate
    for candidate in $(shuf -i 20000-60000 -n 100); do
        [[ $candidate != "${PORT:-}" ]] || continue
        if port_is_free "$candidate"; then echo "$candidate"; return; fi
    done
}

# shellcheck disable=SC2120 # called with or without a wrapper
start_server() { # $@: a wrapper command (valgrind ...), or nothing
    PORT=
    PORT=$(free_port)
    [[ -n $PORT ]] || die "no free port found"
    [[ -n $DIR ]] || DIR=$(mktemp -d -t rl-bench.XXXXXX)
    # A private copy: a rebuild of target/ during the run must not change what is measured.
    cp "$MODULE" "$DIR/librl.so"
    # shellcheck disable=SC2034 # read by the scripts that source this file
    MODULE_USED=$(module_label)
    # shellcheck disable=SC2086 # SERVER_ARGS is split into arguments on purpose
    "$@" "$REDIS_SERVER" --port "$PORT" --bind "$HOST" --dir "$DIR" --save '' --appendonly no \
        --loadmodule "$DIR/librl.so" --logfile "$DIR/redis.log" --daemonize no \
        ${SERVER_ARGS:-} >"$DIR/stdout.log" 2>&1 &
    SERVER_PID=$!
    await_server cli "$SERVER_PID" "$DIR" redis-server 600 # 60 s: valgrind starts slowly
    # Valkey also reports a redis_version (the Redis it is compatible with): its own name and
    # version come first.
    read -r SERVER_NAME SERVER_VERSION < <(cli INFO server | tr -d '\r' | awk -F: '
        $1=="server_name" {name=$2} $1=="valkey_version" {v=$2} $1=="redis_version" {r=$2}
        END {if (name == "valkey") print "Valkey", v; else print "Redis", r}')
    # The server's names for the module dispatcher and the module API functions.
    if [[ $SERVER_NAME == Valkey ]]; then DISPATCHER=ValkeyModuleCommandDispatcher API_PREFIX=VM_
    else DISPATCHER=RedisModuleCommandDispatcher API_PREFIX=RM_; fi
    log "== $SERVER_NAME $SERVER_VERSION on $HOST:$PORT (pid $SERVER_PID), dir $DIR"
    if [[ $REPLICA == 1 ]]; then attach_replica; else wait_lone; fi
}

# ---------------------------------------------------------------------------------------------
# Who can receive the module's effects: REPLICA=1 attaches a replica, else the server stays
# alone (src/skip_effects.rs: the module builds an effect only while rl_replication_receivers
# is 1, or while the AOF is on, which it never is here).
# ---------------------------------------------------------------------------------------------
receivers() { info_field cli rl rl_replication_receivers; }
RECEIVERS_START=
# Default mode: the flag is 1 from load until the module's 1 s timer finds no replica and no
# backlog; measure only after that (a module without the field, before ccd0cd7, is let through).
wait_lone() {
    local _
    for _ in $(seq 300); do # 30 s (valgrind runs the timer late)
        RECEIVERS_START=$(receivers)
        [[ $RECEIVERS_START == 1 ]] || break
        sleep 0.1
    done
    case $RECEIVERS_START in
        0) log "== lone server: rl_replication_receivers 0 (effects skipped)" ;;
        1) die "rl_replication_receivers still 1 after 30 s on a lone server" ;;
        *) RECEIVERS_START=absent; log "== lone server: no rl_replication_receivers in INFO rl (a module before ccd0cd7)" ;;
    esac
}
# Counts the replica's completed full syncs (its log), to tell whether it resynced during the run.
replica_syncs() { grep -Ec '(MASTER|PRIMARY) <-> REPLICA sync: Finished with success' "$REPLICA_DIR/redis.log" || true; }
REPLICA_SYNCS_START=
# REPLICA=1: a second redis-server, REPLICAOF the first, in sync before anything is measured.
attach_replica() {
    REPLICA_PORT=$(free_port)
    [[ -n $REPLICA_PORT ]] || die "no free port found for the replica"
    REPLICA_DIR=$(mktemp -d -t rl-bench-replica.XXXXXX)
    cp "$DIR/librl.so" "$REPLICA_DIR/librl.so" # the very copy the primary loaded
    "$REDIS_SERVER" --port "$REPLICA_PORT" --bind "$HOST" --dir "$REPLICA_DIR" --save '' \
        --appendonly no --loadmodule "$REPLICA_DIR/librl.so" --logfile "$REPLICA_DIR/redis.log" \
        --daemonize no >"$REPLICA_DIR/stdout.log" 2>&1 &
    REPLICA_PID=$!
    await_server replica_cli "$REPLICA_PID" "$REPLICA_DIR" "the replica" 100 # 10 s
    local _ link=
    [[ $(replica_cli REPLICAOF "$HOST" "$PORT") == OK ]] || die "REPLICAOF $HOST $PORT failed"
    for _ in $(seq 1200); do # 120 s: a full sync (diskless, after repl-diskless-sync-delay)
        link=$(info_field replica_cli replication master_link_status)
        [[ $link == up ]] && break
        kill -0 "$REPLICA_PID" 2>/dev/null || die "the replica exited during its sync"
        sleep 0.1
    done
    [[ $link == up ]] || die "the replica's master_link_status is '$link' after 120 s"
    RECEIVERS_START=$(receivers)
    [[ $RECEIVERS_START == 1 || -z $RECEIVERS_START ]] ||
        die "a replica is attached, but the primary's rl_replication_receivers is '$RECEIVERS_START'"
    [[ -n $RECEIVERS_START ]] || RECEIVERS_START=absent
    REPLICA_SYNCS_START=$(replica_syncs)
    log "== replica on $HOST:$REPLICA_PORT (pid $REPLICA_PID), dir $REPLICA_DIR: master_link_status:up," \
        "connected_slaves:$(info_field cli replication connected_slaves), rl_replication_receivers $RECEIVERS_START"
}
# For the tables' header, after the measurements: which mode, checked again at the end.
server_mode() {
    local now
    now=$(receivers)
    [[ -n $now ]] || now=absent
    if [[ $REPLICA == 1 ]]; then
        local link syncs note=
        link=$(info_field replica_cli replication master_link_status)
        syncs=$(replica_syncs)
        [[ $link == up ]] || note+="; WARNING: master_link_status $link at the end"
        [[ $syncs == "$REPLICA_SYNCS_START" ]] ||
            note+="; WARNING: the replica resynced during the run ($REPLICA_SYNCS_START -> $syncs full syncs)"
        echo "With a replica attached: a second redis-server on $HOST, REPLICAOF this one, master_link_status up before and after the measurements (primary's rl_replication_receivers $RECEIVERS_START at the start, $now at the end$note)"
    else
        local note=
        [[ $now == "$RECEIVERS_START" ]] || note="; WARNING: it changed during the run"
        echo "Lone server: no replica, no AOF (rl_replication_receivers $RECEIVERS_START at the start, $now at the end$note)"
    fi
}

# ---------------------------------------------------------------------------------------------
# The team-written Lua scripts (benches/lua/): SCRIPT LOAD sets SHA (gcra.lua, one key), SHA_ALL
# (gcra_all.lua, several keys, all or nothing), SHA_ACQ and SHA_REL (semaphore_acquire.lua and
# semaphore_release.lua: a sorted set of holder -> expiry), SHA_RES and SHA_SET (reserve.lua and
# settle.lua: gcra.lua's TAT plus a hash of reservations).
# ---------------------------------------------------------------------------------------------
load_script() { # $1: file under benches/lua -> its sha
    local sha
    sha=$(cli SCRIPT LOAD "$(cat "$ROOT/benches/lua/$1")")
    [[ $sha =~ ^[0-9a-f]{40}$ ]] || die "SCRIPT LOAD $1 failed: $sha"
    echo "$sha"
}
load_scripts() {
    SHA=$(load_script gcra.lua)
    SHA_ALL=$(load_script gcra_all.lua)
    SHA_ACQ=$(load_script semaphore_acquire.lua)
    SHA_REL=$(load_script semaphore_release.lua)
    SHA_RES=$(load_script reserve.lua)
    SHA_SET=$(load_script settle.lua)
}

# The five keys of one RL.MULTI or gcra_all.lua call: "{P:N}:a .. {P:N}:e" with $2 for N
# (redis-benchmark draws a new number for every __rand_int__ in a command, so in a benchmark
# the five keys get five numbers: still five distinct keys, each from a keyspace of $KEYS).
five_keys() { local s; for s in a b c d e; do printf '{%s:%s}:%s ' "$1" "$2" "$s"; done; }
# Five RULE clauses named a .. f for RL.MULTI, all "limit period".
five_rules() { local s; for s in a b c d e; do printf 'RULE %s %s %s ' "$s" "$1" "$2"; done; }
# Five SETs (separated by ";") creating those keys as gcra_all.lua's, with a TAT in the past.
five_sets() { local s; for s in a b c d e; do printf 'SET {%s:%s}:%s 1764000000000000 PX 3600000;' "$1" "$2" "$s"; done; }
# $3 keys "{P:N}:1 .. {P:N}:$3" and $1 RULE clauses r1 .. r$1 "limit period", for the RL.MULTI
# variants that show the cost of each additional rule.
n_keys() { local i; for ((i = 1; i <= $3; i++)); do printf '{%s:%s}:%s ' "$1" "$2" "$i"; done; }
n_rules() { local i; for ((i = 1; i <= $1; i++)); do printf 'RULE r%s %s %s ' "$i" "$2" "$3"; done; }
# The same five rules as gcra_all.lua arguments: name limit period_us burst cost.
five_args() { local s; for s in a b c d e; do printf '%s %s %s %s 1 ' "$s" "$1" "$2" "$1"; done; }

# "Nx cheaper than REF" when $2 (ours) costs less than $1 (the reference), else "Nx the cost of REF".
cheaper_than() { # $1: reference cost, $2: our cost, $3: the reference's name
    awk -v r="$1" -v o="$2" -v n="$3" 'BEGIN {
        if (n != "") n = (o <= r ? " than " : " of ") n
        if (o <= r) printf "%.2fx cheaper%s", r / o, n; else printf "**%.2fx the cost**%s", o / r, n }'
}

stat_field() { # $1: commandstats entry (lower case), $2: field
    cli INFO commandstats | tr -d '\r' |
        awk -F'[:,]' -v c="cmdstat_$1" -v f="$2" 'tolower($1)==c { for (i=2;i<=NF;i++) { split($i,kv,"="); if (kv[1]==f) print kv[2] } }'
}

# ---------------------------------------------------------------------------------------------
# RESP for i in [0, KEYS), REPEAT times each (default 1; repetition j in [0, REPEAT)), with in
# every argument: "__i__" -> i; "__p__" -> i padded to 12 digits as redis-benchmark writes
# __rand_int__; "__m__" -> i modulo MOD (default KEYS); "__j__" -> j; "__r__" -> ROUND.
# ---------------------------------------------------------------------------------------------
resp() {
    awk -v n="$KEYS" -v rep="${REPEAT:-1}" -v mod="${MOD:-$KEYS}" -v round="${ROUND:-0}" -v args="$*" '
    function put(s, pat, v,   k) { # every occurrence (no gsub: it is ~100x slower in mawk)
        while ((k = index(s, pat)) > 0) s = substr(s, 1, k - 1) v substr(s, k + length(pat))
        return s
    }
    BEGIN {
        m = split(args, a, " ")
        for (j = 1; j <= m; j++) var[j] = index(a[j], "__") > 0
        for (i = 0; i < n; i++) {
            p = sprintf("%012d", i)
            for (r = 0; r < rep; r++) {
                out = "*" m "\r\n"
                for (j = 1; j <= m; j++) {
                    s = a[j]
                    if (var[j]) {
                        s = put(s, "__i__", i); s = put(s, "__p__", p); s = put(s, "__m__", i % mod)
                        s = put(s, "__j__", r); s = put(s, "__r__", round)
                    }
                    out = out "$" length(s) "\r\n" s "\r\n"
                }
                printf "%s", out
            }
        }
    }'
}
# The same substitutions for one i, in bash (for the checks).
subst() { # $1: text, $2: i
    local s=$1 i=$2
    s=${s//__i__/$i}
    s=${s//__p__/$(printf %012d "$i")}
    s=${s//__m__/$((i % ${MOD:-$KEYS}))}
    s=${s//__r__/${ROUND:-0}}
    echo "$s"
}

# The RESP is written to a file first, so that awk does not compete with the server for the CPU
# while it runs (this machine has 2 cores), and callgrind can count the sending alone.
pipe_gen() { # $@: a command for resp() -> $DIR/pipe.resp
    # shellcheck disable=SC2068 # split into arguments on purpose
    resp $@ >"$DIR/pipe.resp"
}
pipe_send() { # $1: a name for errors; sends $DIR/pipe.resp, checks that every reply arrived
    local piped expected=$((KEYS * ${REPEAT:-1}))
    # redis-cli --pipe exits 1 on an error reply: the check below says which.
    piped=$(cli --pipe <"$DIR/pipe.resp" 2>"$DIR/pipe.err" | grep 'replies:' | tail -1) || true
    rm -f "$DIR/pipe.resp"
    [[ $piped == *"errors: 0, replies: $expected"* ]] ||
        die "pipe $1: $piped; first error: $(head -1 "$DIR/pipe.err")"
}
pipe_all() { # $@: a command for resp(); checks that every reply arrived without an error
    # shellcheck disable=SC2068
    pipe_gen $@
    pipe_send "$1"
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
# "10000000 3650d" (the window ends in years), log "10000 1h" (a few entries per key; 10000 is
# the log's largest limit since 288a676).
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
        "RL.ADMIT log, existing key|rl.admit|1||RL.ADMIT bench:wlog:$r 10000 1h ALGO log|RL.ADMIT bench:wlog:$p 10000 1h ALGO log"
        "CL.THROTTLE, existing key|cl.throttle|1|>RL.ADMIT gcra, existing key|CL.THROTTLE bench:wcl:$r 3649 3650 315360000|CL.THROTTLE bench:wcl:$p 3649 3650 315360000"
        "Lua GCRA, existing key|evalsha|1||EVALSHA $SHA 1 bench:wlua:$r 3650 315360000000000 3650 1|SET bench:wlua:$p 1764000000000000 PX 3600000"
        "RL.MULTI 5 rules, existing keys|rl.multi|8|<Lua 5 keys, existing keys|RL.MULTI 5 $(five_keys w $r)$(five_rules 3650 3650d)|RL.MULTI 5 $(five_keys w $p)$(five_rules 3650 3650d)"
        "Lua 5 keys, existing keys|evalsha|8||EVALSHA $SHA_ALL 5 $(five_keys wl $r)$(five_args 3650 315360000000000)|$(five_sets wl $p)"
        # One and 16 rules: the cost of each rule beyond the first, and 16 rules in one call
        # against 16 calls of "RL.ADMIT gcra, existing key".
        "RL.MULTI 1 rule, existing keys|rl.multi|1|>RL.ADMIT gcra, existing key|RL.MULTI 1 $(n_keys w1 $r 1)$(n_rules 1 3650 3650d)|RL.MULTI 1 $(n_keys w1 $p 1)$(n_rules 1 3650 3650d)"
        "RL.MULTI 16 rules, existing keys|rl.multi|16|>RL.ADMIT gcra, existing key|RL.MULTI 16 $(n_keys w16 $r 16)$(n_rules 16 3650 3650d)|RL.MULTI 16 $(n_keys w16 $p 16)$(n_rules 16 3650 3650d)"
        # RL.GRANT WANT 100: a chunk of 100 tokens in one call, against RL.ADMIT's one. New key:
        # 100 units at 1000000/s, full again 100 µs later. Existing key: capacity 3650000, one
        # unit per 86.4 s, so each call moves the TAT 2.4 h ahead and every call is granted 100.
        "RL.GRANT WANT 100|rl.grant|1|>RL.ADMIT gcra|RL.GRANT bench:grant:$r 1000000 1s WANT 100|"
        "RL.GRANT WANT 100, existing key|rl.grant|1|>RL.ADMIT gcra, existing key|RL.GRANT bench:wgrant:$r 3650000 3650d WANT 100|RL.GRANT bench:wgrant:$p 3650000 3650d WANT 100"
    )
}

# ---------------------------------------------------------------------------------------------
# Pairs: commands that only make sense one after the other on the same keys (RL.ACQUIRE then
# RL.RELEASE of the same holder, RESERVE then RL.SETTLE of the same id), which redis-benchmark
# cannot send (it draws a new number for every __rand_int__). Both scripts send each phase as
# generated RESP through `redis-cli --pipe` (one connection, the whole phase pipelined) and time
# it alone: CONFIG RESETSTAT, the phase, INFO commandstats. See resp() for __i__, __m__, __j__,
# __r__: call i of a phase uses key __m__ = i mod keys, so each key gets calls/keys calls.
#
# PAIRS:  base | compared | calls per phase | keys | others | populate
#   - others: leases or reservations every key holds before timing (held for 1 h, never
#     released), created once by `populate` sent `others` times per key (__j__ = 0 .. others-1);
#   - compared: "<X": each phase (and the sum) shown as "how many times cheaper than" X's.
# PHASES: base | label | commandstats entry | command | check
#   - check: "command~regex", sent for the first and the last call of the phase after it ran;
#     the reply (lines joined by spaces) must match. The module's phases are checked as well by
#     INFO rl: every call must count as admitted (acquired, released, reserved, settled).
# New-key pairs use new keys in every round (__r__ in the key), so ACQUIRE creates the key and
# RELEASE of its only lease deletes it. In the "others" pairs each key keeps its others, so
# ACQUIRE and RELEASE go from N to N+1 to N leases; a settled reservation is kept until its KEEP
# (1 h), so each round adds calls/keys settled reservations per key (noted in the tables).
# ---------------------------------------------------------------------------------------------
define_pairs() {
    local c=${PAIR_CALLS:?} n k j
    local c10=$((c / 5)) k1000=$((c / 1000)) c1000=$((c / 50))
    local rule="1000000 1s BURST 1000000" lrule="1000000 1000000 1000000"
    # shellcheck disable=SC2034 # read by the scripts that source this file
    PAIRS=(
        "INCR, pipe||$c|$c|1|SET bench:pincr:__m__ 1"
        "RL semaphore, new key|<Lua semaphore, new key|$c|$c|0|"
        "Lua semaphore, new key||$c|$c|0|"
        "RL reserve, new key|<Lua reserve, new key|$c|$c|0|"
        "Lua reserve, new key||$c|$c|0|"
    )
    PHASES=(
        "INCR, pipe|INCR|incr|INCR bench:pincr:__m__|GET bench:pincr:__m__~^[0-9]+$"
        "RL semaphore, new key|RL.ACQUIRE|rl.acquire|RL.ACQUIRE bench:sem:__r__:__m__ 100 30s ID h__i__|RL.INFO bench:sem:__r__:__m__~in_flight 1 "
        "RL semaphore, new key|RL.RELEASE|rl.release|RL.RELEASE bench:sem:__r__:__m__ h__i__|EXISTS bench:sem:__r__:__m__~^0$"
        "Lua semaphore, new key|acquire|evalsha|EVALSHA $SHA_ACQ 1 bench:lsem:__r__:__m__ 100 30000000 h__i__|ZCARD bench:lsem:__r__:__m__~^1$"
        "Lua semaphore, new key|release|evalsha|EVALSHA $SHA_REL 1 bench:lsem:__r__:__m__ h__i__|EXISTS bench:lsem:__r__:__m__~^0$"
        "RL reserve, new key|RL.ADMIT .. RESERVE|rl.admit|RL.ADMIT bench:res:__r__:__m__ $rule COST 10 RESERVE id__i__|RL.INFO bench:res:__r__:__m__~reservations 1 "
        "RL reserve, new key|RL.SETTLE|rl.settle|RL.SETTLE bench:res:__r__:__m__ id__i__ 14|RL.SETTLE bench:res:__r__:__m__ id__i__ 14~^4 [0-9]+$"
        "Lua reserve, new key|reserve|evalsha|EVALSHA $SHA_RES 2 {bench:lres:__r__:__m__} {bench:lres:__r__:__m__}:res $lrule 10 id__i__ 3600000|HGET {bench:lres:__r__:__m__}:res id__i__~^10 [0-9]+ [0-9]+$"
        "Lua reserve, new key|settle|evalsha|EVALSHA $SHA_SET 2 {bench:lres:__r__:__m__} {bench:lres:__r__:__m__}:res id__i__ 14 $lrule|HGET {bench:lres:__r__:__m__}:res id__i__~^10 [0-9]+ [0-9]+ 4 [0-9]+$"
    )
    # N others per key: 10 (c/5 keys, one pair each per round) and 1000 (c/1000 keys, 20 pairs
    # each per round: leases go from 1000 to 1020 and back; reservations grow by 20 a round).
    for n in 10 1000; do
        if [[ $n == 10 ]]; then k=$c10 j=$c10; else k=$k1000 j=$c1000; fi
        [[ $k -ge 1 ]] || continue
        PAIRS+=(
            "RL semaphore, $n others|<Lua semaphore, $n others|$j|$k|$n|RL.ACQUIRE bench:sem$n:__m__ 10000 1h ID o__j__"
            "Lua semaphore, $n others||$j|$k|$n|EVALSHA $SHA_ACQ 1 bench:lsem$n:__m__ 10000 3600000000 o__j__"
            "RL reserve, $n others|<Lua reserve, $n others|$j|$k|$n|RL.ADMIT bench:res$n:__m__ $rule COST 10 RESERVE o__j__"
            "Lua reserve, $n others||$j|$k|$n|EVALSHA $SHA_RES 2 {bench:lres$n:__m__} {bench:lres$n:__m__}:res $lrule 10 o__j__ 3600000"
        )
        PHASES+=(
            "RL semaphore, $n others|RL.ACQUIRE|rl.acquire|RL.ACQUIRE bench:sem$n:__m__ 10000 30s ID h__r__-__i__|RL.INFO bench:sem$n:__m__~in_flight $((n + j / k)) "
            "RL semaphore, $n others|RL.RELEASE|rl.release|RL.RELEASE bench:sem$n:__m__ h__r__-__i__|RL.INFO bench:sem$n:__m__~in_flight $n "
            "Lua semaphore, $n others|acquire|evalsha|EVALSHA $SHA_ACQ 1 bench:lsem$n:__m__ 10000 30000000 h__r__-__i__|ZCARD bench:lsem$n:__m__~^$((n + j / k))$"
            "Lua semaphore, $n others|release|evalsha|EVALSHA $SHA_REL 1 bench:lsem$n:__m__ h__r__-__i__|ZCARD bench:lsem$n:__m__~^$n$"
            "RL reserve, $n others|RL.ADMIT .. RESERVE|rl.admit|RL.ADMIT bench:res$n:__m__ $rule COST 10 RESERVE id__r__-__i__|RL.INFO bench:res$n:__m__~reservations [0-9]+ "
            "RL reserve, $n others|RL.SETTLE|rl.settle|RL.SETTLE bench:res$n:__m__ id__r__-__i__ 14|RL.SETTLE bench:res$n:__m__ id__r__-__i__ 14~^4 [0-9]+$"
            "Lua reserve, $n others|reserve|evalsha|EVALSHA $SHA_RES 2 {bench:lres$n:__m__} {bench:lres$n:__m__}:res $lrule 10 id__r__-__i__ 3600000|HGET {bench:lres$n:__m__}:res id__r__-__i__~^10 [0-9]+ [0-9]+$"
            "Lua reserve, $n others|settle|evalsha|EVALSHA $SHA_SET 2 {bench:lres$n:__m__} {bench:lres$n:__m__}:res id__r__-__i__ 14 $lrule|HGET {bench:lres$n:__m__}:res id__r__-__i__~^10 [0-9]+ [0-9]+ 4 [0-9]+$"
        )
    done
}

# One phase of a pair ($1: the PHASES entry's command, $2: calls, $3: keys) as a pipe: generated
# by gen_phase, then sent by send_phase.
gen_phase() {
    # shellcheck disable=SC2086 # split into arguments on purpose
    KEYS=$2 MOD=$3 pipe_gen $1
}
send_phase() {
    KEYS=$2 pipe_send "$1"
}
# Populates a pair's keys ($1: populate command, $2: keys, $3: others).
populate_pair() {
    [[ -n $1 ]] || return 0
    # shellcheck disable=SC2086
    KEYS=$2 MOD=$2 REPEAT=$3 pipe_all $1
}
# Checks a phase after it ran ($1: check, $2: calls, $3: keys); dies on a mismatch.
check_phase() {
    [[ -n $1 ]] || return 0
    local command=${1%%~*} regex=${1#*~} i reply
    for i in 0 $(($2 - 1)); do
        # shellcheck disable=SC2046 # split into arguments on purpose
        reply=$(cli $(MOD=$3 subst "$command" "$i") | tr '\n' ' ')
        reply=${reply% }
        [[ $reply =~ $regex ]] || die "check '$(MOD=$3 subst "$command" "$i")' (call $i): '$reply' does not match '$regex'"
    done
}
# INFO rl counter of a module command's admitted calls (empty for other commands).
admitted_counter() {
    case $1 in
        rl.*) cli INFO rl | tr -d '\r' | awk -F: -v k="rl_${1#rl.}_admitted" '$1==k {print $2}' ;;
    esac
}
