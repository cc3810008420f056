#!/usr/bin/env bash
# End-to-end cost of RL.ADMIT inside a real Redis, side by side with INCR (the floor) and the
# Lua GCRA script teams write today, plus the memory an idle key costs.
#
#   bash benches/e2e.sh                 # builds the module, runs everything, prints Markdown
#
# Environment (all optional):
#   REDIS_SERVER  redis-server binary        (default /usr/bin/redis-server)
#   N             requests per benchmark run (default 400000)
#   ROUNDS        rounds of every benchmark; the table shows the median (default 3)
#   KEYS          random keys per benchmark and keys per memory case (default 100000)
#   SKIP_BUILD=1  use the existing target/release/librl.so
#
# One redis-server on a free 127.0.0.1 port with its own --dir under /tmp, killed at the end.
# Nothing outside 127.0.0.0/8 is contacted.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REDIS_SERVER=${REDIS_SERVER:-/usr/bin/redis-server}
BIN_DIR=$(dirname "$REDIS_SERVER")
REDIS_CLI=${REDIS_CLI:-$BIN_DIR/redis-cli}
REDIS_BENCHMARK=${REDIS_BENCHMARK:-$BIN_DIR/redis-benchmark}
N=${N:-400000}
ROUNDS=${ROUNDS:-3}
KEYS=${KEYS:-100000}
MODULE=$ROOT/target/release/librl.so
HOST=127.0.0.1

log() { printf '%s\n' "$*" >&2; }
die() { log "e2e.sh: $*"; exit 1; }

for tool in "$REDIS_SERVER" "$REDIS_CLI" "$REDIS_BENCHMARK"; do
    [[ -x $tool ]] || die "$tool not found"
done

if [[ ${SKIP_BUILD:-0} != 1 ]]; then
    log "== cargo build --release"
    (cd "$ROOT" && cargo build --release >&2)
fi
[[ -f $MODULE ]] || die "$MODULE missing: run cargo build --release"

# ---------------------------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------------------------
port_is_free() { ! (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }
PORT=
for candidate in $(shuf -i 20000-60000 -n 100); do
    if port_is_free "$candidate"; then PORT=$candidate; break; fi
done
[[ -n $PORT ]] || die "no free port found"

DIR=$(mktemp -d /tmp/rl-e2e.XXXXXX)
SERVER_PID=
cleanup() {
    if [[ -n $SERVER_PID ]]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$REDIS_SERVER" --port "$PORT" --bind "$HOST" --dir "$DIR" --save '' --appendonly no \
    --loadmodule "$MODULE" --logfile "$DIR/redis.log" --daemonize no &
SERVER_PID=$!

cli() { "$REDIS_CLI" -h "$HOST" -p "$PORT" "$@"; }
for _ in $(seq 100); do
    [[ $(cli PING 2>/dev/null) == PONG ]] && break
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$DIR/redis.log" >&2; die "redis-server exited"; }
    sleep 0.1
done
[[ $(cli PING 2>/dev/null) == PONG ]] || die "redis-server did not answer on port $PORT"
cli MODULE LIST | grep -qx rl || die "module rl not loaded"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
SERVER_VERSION=$(cli INFO server | tr -d '\r' | awk -F: '$1=="redis_version"{print $2}')
log "== redis-server $SERVER_VERSION on $HOST:$PORT (pid $SERVER_PID), dir $DIR"

# ---------------------------------------------------------------------------------------------
# The Lua script teams write today: GCRA over a string key holding the TAT in µs.
# ARGV: limit, period in µs, burst, cost. Reply as RL.ADMIT's: allowed, remaining,
# retry_after_ms, reset_after_ms, limit.
# ---------------------------------------------------------------------------------------------
read -r -d '' LUA_GCRA <<'LUA' || true
local limit = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = period / limit
local capacity = burst * interval
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local new_tat = tat + cost * interval
local allow_at = new_tat - capacity
if allow_at > now then
  local remaining = math.floor((capacity - (tat - now)) / interval)
  return {0, remaining, math.ceil((allow_at - now) / 1000), math.ceil((tat - now) / 1000), burst}
end
local reset_ms = math.ceil((new_tat - now) / 1000)
redis.call('SET', KEYS[1], string.format('%d', math.ceil(new_tat)), 'PX', reset_ms)
return {1, math.floor((now - allow_at) / interval), 0, reset_ms, burst}
LUA
SHA=$(cli SCRIPT LOAD "$LUA_GCRA")
[[ $SHA =~ ^[0-9a-f]{40}$ ]] || die "SCRIPT LOAD failed: $SHA"

# ---------------------------------------------------------------------------------------------
# Sanity: the script and RL.ADMIT take the same decisions on the P-READ example
# (2 per second, BURST 20: 20 admitted at once, the 21st refused for ~500 ms).
# ---------------------------------------------------------------------------------------------
sanity() { # $1: label, rest: command with KEY placeholder
    local label=$1; shift
    local allowed=0 out
    for _ in $(seq 20); do
        out=$(cli "${@/KEY/sanity:$label}" | head -1)
        allowed=$((allowed + out))
    done
    out=$(cli "${@/KEY/sanity:$label}" | tr '\n' ' ')
    log "   $label: $allowed of 20 admitted; 21st -> $out"
    [[ $allowed == 20 && $out == 0\ 0\ * ]] || die "$label does not follow the P-READ example"
}
log "== sanity (reply: allowed remaining retry_after_ms reset_after_ms limit)"
sanity rl-gcra RL.ADMIT KEY 2 1s BURST 20
sanity rl-bucket RL.ADMIT KEY 2 1s BURST 20 ALGO bucket
sanity lua EVALSHA "$SHA" 1 KEY 2 1000000 20 1
cli FLUSHALL SYNC >/dev/null

# ---------------------------------------------------------------------------------------------
# Throughput: usec_per_call from INFO commandstats after CONFIG RESETSTAT.
# ---------------------------------------------------------------------------------------------
# name | commandstats entry (lower case) | command (with __rand_int__ in the key)
BENCHES=(
    "INCR|incr|INCR bench:incr:__rand_int__"
    "SET PX (a write with a TTL)|set|SET bench:set:__rand_int__ 1764000000000000000 PX 60000"
    "RL.ADMIT gcra|rl.admit|RL.ADMIT bench:gcra:__rand_int__ 1000000 1s"
    "RL.ADMIT bucket|rl.admit|RL.ADMIT bench:bucket:__rand_int__ 1000000 1s ALGO bucket"
    "Lua GCRA (EVALSHA)|evalsha|EVALSHA $SHA 1 bench:lua:__rand_int__ 1000000 1000000 1000000 1"
    "RL.ADMIT gcra, warm key|rl.admit|RL.ADMIT bench:warm:__rand_int__ 10000000 3650d"
    "Lua GCRA, warm key|evalsha|EVALSHA $SHA 1 bench:luawarm:__rand_int__ 10000000 315360000000000 10000000 1"
)

stat_field() { # $1: commandstats entry, $2: field
    cli INFO commandstats | tr -d '\r' |
        awk -F'[:,]' -v c="cmdstat_$1" -v f="$2" 'tolower($1)==c { for (i=2;i<=NF;i++) { split($i,kv,"="); if (kv[1]==f) print kv[2] } }'
}

declare -A USEC RPS
log "== throughput: redis-benchmark -P 16 -n $N -c 50 -r $KEYS, $ROUNDS round(s)"
for round in $(seq "$ROUNDS"); do
    for entry in "${BENCHES[@]}"; do
        IFS='|' read -r name stat command <<<"$entry"
        cli CONFIG RESETSTAT >/dev/null
        # shellcheck disable=SC2086 # the command is split into its arguments on purpose
        summary=$("$REDIS_BENCHMARK" -h "$HOST" -p "$PORT" -P 16 -n "$N" -c 50 -r "$KEYS" -q \
            $command 2>&1 | tr '\r' '\n' | grep 'requests per second' | tail -1)
        rps=$(awk '{for (i=1;i<=NF;i++) if ($(i+1)=="requests") print $i}' <<<"$summary")
        usec=$(stat_field "$stat" usec_per_call)
        calls=$(stat_field "$stat" calls)
        failed=$(stat_field "$stat" failed_calls)
        [[ -n $usec && $calls -ge $N ]] || die "$name: no commandstats (calls=$calls): $summary"
        [[ ${failed:-0} == 0 ]] || die "$name: $failed failed calls"
        USEC[$name]+="$usec "
        RPS[$name]+="$rps "
        log "   round $round  $(printf '%-24s' "$name") usec_per_call=$usec  rps=$rps  calls=$calls"
    done
    cli FLUSHALL SYNC >/dev/null
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# ---------------------------------------------------------------------------------------------
# Memory per idle key: used_memory delta over $KEYS keys of each kind, same key names.
# ---------------------------------------------------------------------------------------------
resp() { # emits RESP for i in [0, KEYS); "__i__" in an argument becomes i
    awk -v n="$KEYS" -v args="$*" 'BEGIN {
        m = split(args, a, " ")
        for (i = 0; i < n; i++) {
            out = "*" m "\r\n"
            for (j = 1; j <= m; j++) {
                s = a[j]; k = index(s, "__i__")
                if (k) s = substr(s, 1, k - 1) i substr(s, k + 5)
                out = out "$" length(s) "\r\n" s "\r\n"
            }
            printf "%s", out
        }
    }' # (no gsub: it is ~100x slower in mawk)
}
used_memory() { cli INFO memory | tr -d '\r' | awk -F: '$1=="used_memory"{print $2}'; }

# name | command creating key "user:__i__" with a TTL of 60 s
MEMS=(
    "RL.ADMIT gcra|RL.ADMIT user:__i__ 1 1m"
    "redis-cell equivalent (SET 19-digit TAT PX)|SET user:__i__ 1764000000000000000 PX 60000"
    "Lua GCRA key|EVALSHA $SHA 1 user:__i__ 1 60000000 1 1"
)
declare -A BYTES USAGE
log "== memory: $KEYS keys user:0 .. user:$((KEYS - 1)) of each kind, TTL 60 s"
for entry in "${MEMS[@]}"; do
    IFS='|' read -r name command <<<"$entry"
    cli FLUSHALL SYNC >/dev/null
    sleep 1
    before=$(used_memory)
    # shellcheck disable=SC2086
    piped=$(resp $command | cli --pipe 2>&1 | tail -1)
    [[ $piped == *"errors: 0, replies: $KEYS"* ]] || die "$name: pipe: $piped"
    sleep 1 # let incremental rehashing finish
    after=$(used_memory)
    size=$(cli DBSIZE)
    [[ $size == "$KEYS" ]] || die "$name: DBSIZE $size, expected $KEYS"
    BYTES[$name]=$(awk -v a="$after" -v b="$before" -v n="$KEYS" 'BEGIN {printf "%.1f", (a-b)/n}')
    USAGE[$name]=$(cli MEMORY USAGE user:0)
    log "   $(printf '%-44s' "$name") delta=$((after - before)) bytes  per key=${BYTES[$name]}  MEMORY USAGE user:0=${USAGE[$name]}  TTL=$(cli PTTL user:0) ms"
done
cli FLUSHALL SYNC >/dev/null

# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2fx", a/b}'; }
declare -A MED
for entry in "${BENCHES[@]}"; do
    IFS='|' read -r name _ _ <<<"$entry"
    MED[$name]=$(median <<<"${USEC[$name]}")
done
incr=${MED[INCR]}

REV=$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)
echo
echo "Redis $SERVER_VERSION, $(nproc) cores, $(date -u +%Y-%m-%d), redis-rl $REV;"
echo "redis-benchmark -P 16 -n $N -c 50 -r $KEYS; median of $ROUNDS round(s) of usec_per_call"
echo "(INFO commandstats: time inside the command only) and requests per second;"
echo "load average at start: $LOAD_START, at end: $(cut -d' ' -f1-3 /proc/loadavg)."
echo
echo "| command | usec_per_call | vs INCR | Lua / this | rps (median) | rounds (usec_per_call) |"
echo "|---|---:|---:|---:|---:|---|"
for entry in "${BENCHES[@]}"; do
    IFS='|' read -r name _ _ <<<"$entry"
    usec=${MED[$name]}
    vs_lua="-"
    case $name in
        "RL.ADMIT gcra" | "RL.ADMIT bucket") vs_lua=$(ratio "${MED["Lua GCRA (EVALSHA)"]}" "$usec") ;;
        "RL.ADMIT gcra, warm key") vs_lua=$(ratio "${MED["Lua GCRA, warm key"]}" "$usec") ;;
    esac
    printf '| %s | %s | %s | %s | %s | %s|\n' "$name" "$usec" "$(ratio "$usec" "$incr")" "$vs_lua" \
        "$(median <<<"${RPS[$name]}")" "${USEC[$name]}"
done
echo
echo "| idle key ($KEYS keys, TTL 60 s) | bytes per key (used_memory delta) | MEMORY USAGE of one key |"
echo "|---|---:|---:|"
for entry in "${MEMS[@]}"; do
    IFS='|' read -r name _ <<<"$entry"
    printf '| %s | %s | %s |\n' "$name" "${BYTES[$name]}" "${USAGE[$name]}"
done
echo
gcra=${MED["RL.ADMIT gcra"]}
lua=${MED["Lua GCRA (EVALSHA)"]}
verdict() { if awk "BEGIN {exit !($1)}"; then echo met; else echo "NOT met"; fi; }
echo "Targets:"
echo "- RL.ADMIT gcra usec_per_call <= 2.5x INCR: $(ratio "$gcra" "$incr") -> $(verdict "$gcra <= 2.5 * $incr")"
echo "- Lua >= 5x RL.ADMIT gcra: $(ratio "$lua" "$gcra") -> $(verdict "$lua >= 5 * $gcra")"
echo "- <= 150 bytes per idle gcra key: ${BYTES["RL.ADMIT gcra"]} -> $(verdict "${BYTES["RL.ADMIT gcra"]} <= 150")"
log "== done in ${SECONDS} s"
