#!/usr/bin/env bash
# End-to-end cost of the module's commands inside a real Redis, in one run on one server, side
# by side with INCR (the floor), SET .. PX (a write with a TTL) and the Lua scripts teams write
# today, plus the memory an idle key of each algorithm costs.
#
#   bash benches/e2e.sh                 # builds the module, runs everything, prints Markdown
#
# Environment (all optional; see also benches/lib.sh):
#   N             requests per benchmark run (default 200000; the 5-key commands get N/8)
#   ROUNDS        rounds of every benchmark; the table shows the median (default 3)
#   KEYS          random keys per benchmark and keys per memory case (default 100000)
#   ONLY          a regular expression: time only the commands whose name matches
#   SKIP_BUILD=1  use the existing target/release/librl.so
#   MODULE        load this librl.so instead of building one
#   SKIP_MEMORY=1 skip the memory cases
#
# One redis-server on a free 127.0.0.1 port with its own --dir under /tmp, killed at the end.
# Nothing outside 127.0.0.0/8 is contacted. Progress goes to stderr, the tables to stdout.
set -euo pipefail
# shellcheck source=benches/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

N=${N:-200000}
ROUNDS=${ROUNDS:-3}
ONLY=${ONLY:-}

need_tools awk
build_module
start_server
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
load_scripts
define_benches

# ---------------------------------------------------------------------------------------------
# Sanity: the scripts take the module's decisions on small worked examples; stop otherwise.
# ---------------------------------------------------------------------------------------------
sanity() { # $1: label, $2: calls that must be admitted, $3: reply field 1 when admitted, rest:
    # the command with KEY for the key. One more call must be refused. All calls go in one
    # pipeline, so that no capacity refills between them even on a loaded machine.
    local label=$1 want=$2 yes=$3; shift 3
    local replies admitted out
    replies=$(for _ in $(seq $((want + 1))); do echo "${@/KEY/sanity:$label}"; done | cli)
    admitted=$(awk -v y="$yes" -v w="$want" 'NR % 5 == 1 && NR <= 5 * w && $0 == y {n++} END {print n + 0}' <<<"$replies")
    out=$(tail -5 <<<"$replies" | tr '\n' ' ')
    log "   $label: $admitted of $want admitted; next -> $out"
    [[ $admitted == "$want" && ${out%% *} != "$yes" ]] || die "$label: not the worked example"
    [[ $yes == 0 || $out == 0\ 0\ * ]] || die "$label: the refusal should leave 0 remaining"
}
log "== sanity"
log "   P-READ (2 per 1s, BURST 20: 20 at once, then refused; reply: allowed remaining retry reset limit)"
sanity rl-gcra 20 1 RL.ADMIT KEY 2 1s BURST 20
sanity rl-bucket 20 1 RL.ADMIT KEY 2 1s BURST 20 ALGO bucket
sanity lua 20 1 EVALSHA "$SHA" 1 KEY 2 1000000 20 1
log "   the same with CL.THROTTLE (max_burst 19: capacity 20; reply: limited limit remaining retry_s reset_s)"
sanity cl 20 0 CL.THROTTLE KEY 19 2 1
log "   3 per 3650d: 3 admitted, the 4th refused"
for algo in window sliding log; do sanity "rl-$algo" 3 1 RL.ADMIT KEY 3 3650d ALGO "$algo"; done

# RL.MULTI against gcra_all.lua: rules a..e; c (10 per hour) is the tightest, so 10 calls are
# admitted and the 11th and 12th are refused by c, each spending nothing: remaining stays
# 90 10 0 40 990 (the 12th call checks that the 11th did not debit the other four).
multi_line() { # $1: "multi" or "lua": one call, printed as "allowed denied_by remaining..."
    local keys="{s:$1}:a {s:$1}:b {s:$1}:c {s:$1}:d {s:$1}:e" reply
    if [[ $1 == multi ]]; then
        # shellcheck disable=SC2086
        reply=$(cli RL.MULTI 5 $keys RULE a 100 1h RULE b 20 1h RULE c 10 1h RULE d 50 1h RULE e 1000 1d)
    else
        # shellcheck disable=SC2086
        reply=$(cli EVALSHA "$SHA_ALL" 5 $keys a 100 3600000000 100 1 b 20 3600000000 20 1 \
            c 10 3600000000 10 1 d 50 3600000000 50 1 e 1000 86400000000 1000 1)
    fi
    # allowed, denied_by (empty when nil), retry, then name remaining reset per rule
    awk 'NR==1 || NR==2 {printf "%s ", ($0 == "" ? "-" : $0)} NR>3 && (NR-3)%3==2 {printf "%s ", $0} END {print ""}' <<<"$reply"
}
log "   RL.MULTI vs gcra_all.lua (a 100/h, b 20/h, c 10/h, d 50/h, e 1000/d; reply: allowed denied_by remaining x5)"
for call in $(seq 12); do
    m=$(multi_line multi)
    l=$(multi_line lua)
    [[ $m == "$l" ]] || die "call $call: RL.MULTI says '$m', gcra_all.lua '$l'"
    case $call in
        10) [[ $m == "1 - 90 10 0 40 990 " ]] || die "call 10: $m"; tenth=$m ;;
        11 | 12) [[ $m == "0 c 90 10 0 40 990 " ]] || die "call $call: $m" ;;
    esac
done
log "   call 10: $tenth(both); calls 11 and 12: $m(both)"
cli FLUSHALL SYNC >/dev/null

# ---------------------------------------------------------------------------------------------
# Throughput: usec_per_call from INFO commandstats after CONFIG RESETSTAT.
# ---------------------------------------------------------------------------------------------
selected() { [[ -z $ONLY || $1 =~ $ONLY ]]; }

log "== populating the existing-key variants: $KEYS keys each"
for entry in "${BENCHES[@]}"; do
    IFS='|' read -r name _ _ _ _ populate <<<"$entry"
    selected "$name" || continue
    [[ -n $populate ]] || continue
    IFS=';' read -r -a populates <<<"$populate"
    for command in "${populates[@]}"; do
        # shellcheck disable=SC2086
        pipe_all $command
    done
done
log "   $(cli DBSIZE) keys"

declare -A USEC RPS
log "== throughput: redis-benchmark -P 16 -n $N (the 5-key commands: N/8) -c 50 -r $KEYS, $ROUNDS round(s)"
for round in $(seq "$ROUNDS"); do
    for entry in "${BENCHES[@]}"; do
        IFS='|' read -r name stat div _ command _ <<<"$entry"
        selected "$name" || continue
        n=$((N / div))
        cli CONFIG RESETSTAT >/dev/null
        # shellcheck disable=SC2086 # the command is split into its arguments on purpose
        summary=$("$REDIS_BENCHMARK" -h "$HOST" -p "$PORT" -P 16 -n "$n" -c 50 -r "$KEYS" -q \
            $command 2>&1 | tr '\r' '\n' | grep 'requests per second' | tail -1)
        rps=$(awk '{for (i=1;i<=NF;i++) if ($(i+1)=="requests") print $i}' <<<"$summary")
        usec=$(stat_field "$stat" usec_per_call)
        calls=$(stat_field "$stat" calls)
        failed=$(stat_field "$stat" failed_calls)
        [[ -n $usec && $calls -ge $n ]] || die "$name: no commandstats (calls=$calls): $summary"
        [[ ${failed:-0} == 0 ]] || die "$name: $failed failed calls"
        USEC[$name]+="$usec "
        RPS[$name]+="$rps "
        log "   round $round  $(printf '%-32s' "$name") usec_per_call=$usec  rps=$rps  calls=$calls"
    done
done
cli FLUSHALL SYNC >/dev/null

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# ---------------------------------------------------------------------------------------------
# Memory per idle key: used_memory delta over $KEYS keys of each kind, same key names.
# ---------------------------------------------------------------------------------------------
used_memory() { cli INFO memory | tr -d '\r' | awk -F: '$1=="used_memory"{print $2}'; }

# name | calls per key | command creating key "user:__i__"
MEMS=(
    "RL.ADMIT gcra|1|RL.ADMIT user:__i__ 10 3650d"
    "RL.ADMIT bucket|1|RL.ADMIT user:__i__ 10 3650d ALGO bucket"
    "RL.ADMIT window|1|RL.ADMIT user:__i__ 10 3650d ALGO window"
    "RL.ADMIT sliding|1|RL.ADMIT user:__i__ 10 3650d ALGO sliding"
    "RL.ADMIT log, 1 entry|1|RL.ADMIT user:__i__ 10 3650d ALGO log"
    "RL.ADMIT log, 5 entries|5|RL.ADMIT user:__i__ 10 3650d ALGO log"
    "redis-cell equivalent (SET 19-digit TAT PX)|1|SET user:__i__ 1764000000000000000 PX 60000"
    "Lua GCRA key|1|EVALSHA $SHA 1 user:__i__ 1 60000000 1 1"
)
declare -A BYTES USAGE
if [[ ${SKIP_MEMORY:-0} != 1 ]]; then
    log "== memory: $KEYS keys user:0 .. user:$((KEYS - 1)) of each kind"
    for entry in "${MEMS[@]}"; do
        IFS='|' read -r name repeat command <<<"$entry"
        cli FLUSHALL SYNC >/dev/null
        sleep 0.2
        before=$(used_memory)
        # shellcheck disable=SC2086
        REPEAT=$repeat pipe_all $command
        sleep 1 # let incremental rehashing finish
        after=$(used_memory)
        size=$(cli DBSIZE)
        [[ $size == "$KEYS" ]] || die "$name: DBSIZE $size, expected $KEYS"
        BYTES[$name]=$(awk -v a="$after" -v b="$before" -v n="$KEYS" 'BEGIN {printf "%.1f", (a-b)/n}')
        USAGE[$name]=$(cli MEMORY USAGE user:0)
        log "   $(printf '%-44s' "$name") delta=$((after - before)) bytes  per key=${BYTES[$name]}  MEMORY USAGE user:0=${USAGE[$name]}  PTTL=$(cli PTTL user:0) ms"
    done
    cli FLUSHALL SYNC >/dev/null
fi

# ---------------------------------------------------------------------------------------------
# The tables
# ---------------------------------------------------------------------------------------------
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2fx", a/b}'; }
declare -A MED
for entry in "${BENCHES[@]}"; do
    IFS='|' read -r name _ _ _ _ _ <<<"$entry"
    selected "$name" || continue
    MED[$name]=$(median <<<"${USEC[$name]}")
done
get() { [[ -n $1 ]] && echo "${MED[$1]:-}"; }

echo
echo "Redis $SERVER_VERSION, $(nproc) cores, $(date -u +%Y-%m-%d); $MODULE_USED;"
echo "redis-benchmark -P 16 -n $N (5-key commands: $((N / 8))) -c 50 -r $KEYS; median of $ROUNDS round(s)"
echo "of usec_per_call (INFO commandstats: time inside the command only) and requests per second;"
echo "load average at start: $LOAD_START, at end: $(cut -d' ' -f1-3 /proc/loadavg)."
echo
echo "| command | usec_per_call | vs INCR | vs SET PX | compared | rps (median) | rounds (usec_per_call) |"
echo "|---|---:|---:|---:|---|---:|---|"
incr=$(get INCR)
set_px=$(get "SET PX")
for entry in "${BENCHES[@]}"; do
    IFS='|' read -r name _ _ cmp _ _ <<<"$entry"
    selected "$name" || continue
    usec=${MED[$name]}
    compared="-" ref=
    [[ -n $cmp ]] && ref=$(get "${cmp:1}")
    if [[ -n $cmp && -n $ref ]]; then
        case $cmp in
            "<"*) compared="$(ratio "$ref" "$usec") cheaper than ${cmp:1}" ;;
            ">"*) compared="$(ratio "$usec" "$ref") the cost of ${cmp:1}" ;;
        esac
    fi
    printf '| %s | %s | %s | %s | %s | %s | %s|\n' "$name" "$usec" \
        "$([[ -n $incr ]] && ratio "$usec" "$incr" || echo -)" \
        "$([[ -n $set_px ]] && ratio "$usec" "$set_px" || echo -)" \
        "$compared" "$(median <<<"${RPS[$name]}")" "${USEC[$name]}"
done
if [[ ${SKIP_MEMORY:-0} != 1 ]]; then
    echo
    echo "| idle key ($KEYS keys) | bytes per key (used_memory delta) | MEMORY USAGE of one key |"
    echo "|---|---:|---:|"
    for entry in "${MEMS[@]}"; do
        IFS='|' read -r name _ _ <<<"$entry"
        printf '| %s | %s | %s |\n' "$name" "${BYTES[$name]}" "${USAGE[$name]}"
    done
fi
echo
verdict() { if awk "BEGIN {exit !($1)}"; then echo met; else echo "NOT met"; fi; }
target() { # $1: text, $2: numerator bench, $3: denominator bench, $4: awk condition on r
    local a b
    a=$(get "$2") b=$(get "$3")
    [[ -n $a && -n $b ]] || return 0
    echo "- $1: $(ratio "$a" "$b") -> $(verdict "$(awk -v a="$a" -v b="$b" 'BEGIN {print a/b}') $4")"
}
echo "Targets:"
target "RL.ADMIT gcra <= 2.5x INCR (new key)" "RL.ADMIT gcra" INCR "<= 2.5"
target "RL.ADMIT gcra <= 2.5x INCR (existing key)" "RL.ADMIT gcra, existing key" INCR "<= 2.5"
target "Lua >= 5x RL.ADMIT gcra (new key)" "Lua GCRA" "RL.ADMIT gcra" ">= 5"
target "Lua >= 5x RL.ADMIT gcra (existing key)" "Lua GCRA, existing key" "RL.ADMIT gcra, existing key" ">= 5"
target "5-key Lua >= 5x RL.MULTI 5 rules (new keys)" "Lua 5 keys" "RL.MULTI 5 rules" ">= 5"
target "5-key Lua >= 5x RL.MULTI 5 rules (existing keys)" "Lua 5 keys, existing keys" "RL.MULTI 5 rules, existing keys" ">= 5"
if [[ -n ${BYTES["RL.ADMIT gcra"]:-} ]]; then
    echo "- <= 150 bytes per idle gcra key: ${BYTES["RL.ADMIT gcra"]} -> $(verdict "${BYTES["RL.ADMIT gcra"]} <= 150")"
fi
log "== done in ${SECONDS} s"
