#!/usr/bin/env bash
# End-to-end cost of the module's commands inside a real Redis, in one run on one server, side
# by side with INCR (the floor), SET .. PX (a write with a TTL) and the Lua scripts teams write
# today, plus the memory an idle key of each algorithm (and of a semaphore with N leases, a key
# with N reservations, and the scripts' equivalents) costs.
#
#   bash benches/e2e.sh                 # builds the module, runs everything, prints Markdown
#
# Environment (all optional; see also benches/lib.sh):
#   N             requests per benchmark run (default 100000; the 5-key commands get N/8)
#   ROUNDS        rounds of every benchmark; the table shows the median (default 3)
#   KEYS          random keys per benchmark and keys per memory case (default 100000)
#   PAIR_CALLS    calls per phase of the new-key pairs (ACQUIRE then RELEASE, RESERVE then
#                 SETTLE; default 20000); the "others" pairs get PAIR_CALLS/5 and /50
#   ONLY          a regular expression: time only the commands whose name matches
#   SKIP_BUILD=1  use the existing target/release/librl.so
#   MODULE        load this librl.so instead of building one
#   SKIP_MEMORY=1 skip the memory cases
#   REPLICA=1     attach a replica first (lib.sh), so that every write builds and sends its
#                 effect; the replica shares the 2 cores. The memory cases then include the
#                 replication buffer's changes in used_memory: use SKIP_MEMORY=1 with it.
#
# One redis-server on a free 127.0.0.1 port with its own --dir under /tmp (with REPLICA=1, a
# second one, its replica), killed at the end. Nothing outside 127.0.0.0/8 is contacted.
# Progress goes to stderr, the tables to stdout.
set -euo pipefail
# shellcheck source=benches/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

N=${N:-100000}
ROUNDS=${ROUNDS:-3}
ONLY=${ONLY:-}
PAIR_CALLS=${PAIR_CALLS:-20000}

need_tools awk
build_module
start_server
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
load_scripts
define_benches
define_pairs

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
log "   a per-user read bucket (2 per 1s, BURST 20: 20 at once, then refused; reply: allowed remaining retry reset limit)"
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
        11 | 12) [[ $m == "0 c 89 9 0 39 989 " ]] || die "call $call: $m" ;;
    esac
done
log "   call 10: $tenth(both); calls 11 and 12: $m(both)"

# The semaphore and the reservations against their scripts, call by call. same() sends one
# command to the module and its counterpart to the scripts and compares the chosen reply fields
# (1-based; the others depend on the microsecond each ran), which must also equal $4 when given.
fields() { # $1: fields, stdin: the reply, one line per field -> the chosen fields, space separated
    awk -v f="$1" 'BEGIN {n = split(f, a, " ")} {v[NR] = $0} END {for (i = 1; i <= n; i++) printf "%s%s", v[a[i]], (i < n ? " " : "")}'
}
same() { # $1: fields, $2: module command, $3: script command, $4: expected (optional)
    local m l
    # shellcheck disable=SC2086 # split into arguments on purpose
    m=$(cli $2 | fields "$1")
    # shellcheck disable=SC2086
    l=$(cli $3 | fields "$1")
    log "   $(printf '%-56s' "$2") -> $m"
    [[ $m == "$l" ]] || die "'$2' gives '$m', the script '$l'"
    [[ -z ${4+x} || $m == "$4" ]] || die "'$2' gives '$m', expected '$4'"
}
log "   RL.ACQUIRE / RL.RELEASE vs semaphore_*.lua (capacity 3, lease 60s; fields: acquired holder in_flight)"
acq() { same "1 2 3" "RL.ACQUIRE sanity:sem 3 60s ID $1" "EVALSHA $SHA_ACQ 1 sanity:lsem 3 60000000 $1" "$2"; }
rel() { same 1 "RL.RELEASE sanity:sem $1" "EVALSHA $SHA_REL 1 sanity:lsem $1" "$2"; }
acq a "1 a 1"; acq b "1 b 2"; acq c "1 c 3"; acq d "0 d 3"
retry=$(cli RL.ACQUIRE sanity:sem 3 60s ID d | sed -n 4p)
lretry=$(cli EVALSHA "$SHA_ACQ" 1 sanity:lsem 3 60000000 d | sed -n 4p)
log "   retry_after_ms of the refusal: $retry (script: $lretry)"
((retry > 59000 && retry <= 60000 && lretry > 59000 && lretry <= 60000)) || die "retry_after_ms $retry / $lretry"
acq a "1 a 3" # a renews its slot
rel b 1; rel b 0; rel nobody 0; acq d "1 d 3"
rel a 1; rel c 1; rel d 1
[[ $(cli EXISTS sanity:sem sanity:lsem) == 0 ]] || die "the last release must delete both keys"
log "   the last release deleted both keys; a lease of 1s (capacity 1) frees its slot by expiry:"
same "1 2 3" "RL.ACQUIRE sanity:sem 1 1s ID e" "EVALSHA $SHA_ACQ 1 sanity:lsem 1 1000000 e" "1 e 1"
same "1 2 3" "RL.ACQUIRE sanity:sem 1 1s ID f" "EVALSHA $SHA_ACQ 1 sanity:lsem 1 1000000 f" "0 f 1"
sleep 1.2
same "1 2 3" "RL.ACQUIRE sanity:sem 1 1s ID f" "EVALSHA $SHA_ACQ 1 sanity:lsem 1 1000000 f" "1 f 1"
same 1 "RL.RELEASE sanity:sem e" "EVALSHA $SHA_REL 1 sanity:lsem e" 0

log "   RESERVE / RL.SETTLE vs reserve.lua / settle.lua (2 per 1m, BURST 20, so nothing refills"
log "   during the example; fields: allowed remaining limit, and delta remaining)"
res() { # $1: cost, $2: id, $3: expected
    same "1 2 5" "RL.ADMIT sanity:res 2 1m BURST 20 COST $1 RESERVE $2" \
        "EVALSHA $SHA_RES 2 sanity:lres sanity:lres:res 2 60000000 20 $1 $2 3600000" "$3"
}
set_() { # $1: id, $2: actual, $3: expected
    same "1 2" "RL.SETTLE sanity:res $1 $2" "EVALSHA $SHA_SET 2 sanity:lres sanity:lres:res $1 $2 2 60000000 20" "$3"
}
res 10 exp-1 "1 10 20"; set_ exp-1 14 "4 6"  # the export that cost 14: 4 more debited
set_ exp-1 14 "4 6"; res 10 exp-1 "1 10 20"    # retries reply the original, change nothing
set_ unknown 3 " "                              # unknown id: nil
res 5 exp-2 "1 1 20"; set_ exp-2 0 "-5 6"      # a credit
res 10 exp-3 "0 6 20"; set_ exp-3 10 " "       # refused: not remembered
res 5 exp-4 "1 1 20"; set_ exp-4 40 "21 0"     # 35 more, but the debt stops at 20: 21 applied
res 1 exp-5 "0 0 20"                            # refused while in debt

log "   RL.GRANT (2 per 1m, BURST 20): WANT 15 twice, then nothing is left"
grant() { # $1: want, $2: expected granted remaining
    local g
    g=$(cli RL.GRANT sanity:grant 2 1m BURST 20 WANT "$1" | head -2 | tr '\n' ' ')
    log "   RL.GRANT WANT $1 -> $g"
    [[ $g == "$2 " ]] || die "RL.GRANT WANT $1: '$g', expected '$2'"
}
grant 15 "15 5"; grant 15 "5 0"
g=$(cli RL.ADMIT sanity:grant 2 1m BURST 20 | head -1)
[[ $g == 0 ]] || die "RL.ADMIT after the grants must be refused: $g"
cli FLUSHALL SYNC >/dev/null

# ---------------------------------------------------------------------------------------------
# Throughput: usec_per_call from INFO commandstats after CONFIG RESETSTAT.
# ---------------------------------------------------------------------------------------------
selected() { [[ -z $ONLY || $1 =~ $ONLY ]]; }

log "== populating the existing-key variants: $KEYS keys each ($SECONDS s so far)"
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
for entry in "${PAIRS[@]}"; do
    IFS='|' read -r base _ _ keys others populate <<<"$entry"
    selected "$base" || continue
    populate_pair "$populate" "$keys" "$others"
done
log "   $(cli DBSIZE) keys"

declare -A USEC RPS
log "== ($SECONDS s so far) throughput: redis-benchmark -P 16 -n $N (the 5-key commands: N/8) -c 50 -r $KEYS, $ROUNDS round(s)"
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
    for entry in "${PAIRS[@]}"; do
        IFS='|' read -r base _ calls_per keys _ _ <<<"$entry"
        selected "$base" || continue
        for phase in "${PHASES[@]}"; do
            IFS='|' read -r pbase label stat command check <<<"$phase"
            [[ $pbase == "$base" ]] || continue
            name="$base: $label"
            before=$(admitted_counter "$stat")
            ROUND=$round gen_phase "$command" "$calls_per" "$keys"
            cli CONFIG RESETSTAT >/dev/null
            send_phase "$command" "$calls_per"
            usec=$(stat_field "$stat" usec_per_call)
            calls=$(stat_field "$stat" calls)
            failed=$(stat_field "$stat" failed_calls)
            [[ -n $usec && $calls -ge $calls_per ]] || die "$name: no commandstats (calls=$calls)"
            [[ ${failed:-0} == 0 ]] || die "$name: $failed failed calls"
            if [[ -n $before ]]; then
                admitted=$(($(admitted_counter "$stat") - before))
                [[ $admitted == "$calls_per" ]] || die "$name: $admitted of $calls_per calls admitted"
            fi
            ROUND=$round check_phase "$check" "$calls_per" "$keys"
            USEC[$name]+="$usec "
            log "   round $round  $(printf '%-48s' "$name") usec_per_call=$usec  calls=$calls"
        done
    done
done
cli FLUSHALL SYNC >/dev/null

median() { # stdin: numbers separated by spaces -> their median (nothing for none)
    tr ' ' '\n' | { grep -v '^$' || true; } | sort -g |
        awk '{v[NR]=$1} END {if (NR) print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'
}

# ---------------------------------------------------------------------------------------------
# Memory per idle key: used_memory delta over $KEYS keys of each kind, same key names.
# ---------------------------------------------------------------------------------------------
used_memory() { cli INFO memory | tr -d '\r' | awk -F: '$1=="used_memory"{print $2}'; }

# name | calls per key | command creating key "user:__i__" (__j__: the call, 0 .. calls-1) |
#   keys (default KEYS) | Redis keys per limiter (default 1) | keys whose MEMORY USAGE is summed
#   (default user:0)
# The semaphores hold leases of 1h with 16-byte holders ("h-000000000012-3", the size of the
# module's generated ones); the reservations (KEEP 1h) have 16-byte ids alike. 1, 10 or 100 per
# key, on KEYS/4, /40, /400 keys (KEYS/4 calls per case).
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
for n in 1 10 100; do
    pl=s; [[ $n == 1 ]] && pl=
    MEMS+=(
        "RL.ACQUIRE semaphore, $n lease$pl|$n|RL.ACQUIRE user:__i__ 1000 1h ID h-__p__-__j__|$((KEYS / 4 / n))"
        "semaphore_acquire.lua sorted set, $n lease$pl|$n|EVALSHA $SHA_ACQ 1 user:__i__ 1000 3600000000 h-__p__-__j__|$((KEYS / 4 / n))"
        "RL.ADMIT gcra, $n reservation$pl|$n|RL.ADMIT user:__i__ 1000 3650d RESERVE r-__p__-__j__|$((KEYS / 4 / n))"
        "reserve.lua TAT + hash, $n reservation$pl|$n|EVALSHA $SHA_RES 2 {user:__i__} {user:__i__}:res 1000 315360000000000 1000 1 r-__p__-__j__ 3600000|$((KEYS / 4 / n))|2|{user:0} {user:0}:res"
    )
done
declare -A BYTES USAGE MEMKEYS
if [[ ${SKIP_MEMORY:-0} != 1 ]]; then
    log "== ($SECONDS s so far) memory: per kind, user:0 .. user:(keys-1)"
    for entry in "${MEMS[@]}"; do
        IFS='|' read -r name repeat command keys per usage_keys <<<"$entry"
        keys=${keys:-$KEYS} per=${per:-1} usage_keys=${usage_keys:-user:0}
        cli FLUSHALL SYNC >/dev/null
        sleep 0.2
        before=$(used_memory)
        # shellcheck disable=SC2086
        KEYS=$keys REPEAT=$repeat pipe_all $command
        sleep 1 # let incremental rehashing finish
        after=$(used_memory)
        size=$(cli DBSIZE)
        [[ $size == "$((keys * per))" ]] || die "$name: DBSIZE $size, expected $((keys * per))"
        BYTES[$name]=$(awk -v a="$after" -v b="$before" -v n="$keys" 'BEGIN {printf "%.1f", (a-b)/n}')
        USAGE[$name]=0
        for k in $usage_keys; do
            USAGE[$name]=$((USAGE[$name] + $(cli MEMORY USAGE "$k" SAMPLES 0)))
        done
        MEMKEYS[$name]=$keys
        log "   $(printf '%-48s' "$name") keys=$keys delta=$((after - before)) bytes  per key=${BYTES[$name]}  MEMORY USAGE=${USAGE[$name]}  PTTL user:0=$(cli PTTL "${usage_keys%% *}") ms"
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
echo "$SERVER_NAME $SERVER_VERSION, $(nproc) cores, $(date -u +%Y-%m-%d); $MODULE_USED;"
echo "redis-benchmark -P 16 -n $N (5-key commands: $((N / 8))) -c 50 -r $KEYS; median of $ROUNDS round(s)"
echo "of usec_per_call (INFO commandstats: time inside the command only) and requests per second;"
echo "load average at start: $LOAD_START, at end: $(cut -d' ' -f1-3 /proc/loadavg)."
echo "$(server_mode)."
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
# The pairs: each phase, then their sum ("A + B"), compared with the same rows of the script.
pair_rows() { # $1: base -> lines "row name|median" (phases, then the sum when there are two)
    local phase pbase label sum=0 labels='' count=0 med
    for phase in "${PHASES[@]}"; do
        IFS='|' read -r pbase label _ <<<"$phase"
        [[ $pbase == "$1" ]] || continue
        med=$(median <<<"${USEC["$1: $label"]}")
        echo "$1: $label|$med"
        sum=$(awk -v a="$sum" -v b="$med" 'BEGIN {print a + b}')
        labels+="${labels:+ + }$label" count=$((count + 1))
    done
    ((count < 2)) || echo "$1: $labels|$sum"
}
have_pairs=
for entry in "${PAIRS[@]}"; do
    IFS='|' read -r base _ <<<"$entry"
    selected "$base" && have_pairs=1
done
if [[ -n $have_pairs ]]; then
    echo
    echo "Pairs, each phase sent through redis-cli --pipe (one connection) and timed alone; the"
    echo "\"A + B\" rows add the two medians (the cost of one acquire-release or reserve-settle)."
    echo "calls per phase: new key $PAIR_CALLS; 10 others $((PAIR_CALLS / 5)) (one per key);"
    echo "1000 others $((PAIR_CALLS / 50)) ($((PAIR_CALLS / 1000)) keys, 20 per key)."
    echo
    echo "| pair: phase | usec_per_call | vs INCR | vs INCR, pipe | compared | rounds (usec_per_call) |"
    echo "|---|---:|---:|---:|---|---|"
    incr_pipe=$(median <<<"${USEC["INCR, pipe: INCR"]:-}")
    for entry in "${PAIRS[@]}"; do
        IFS='|' read -r base cmp _ <<<"$entry"
        selected "$base" || continue
        mapfile -t rows < <(pair_rows "$base")
        mapfile -t refs < <([[ -n $cmp ]] && selected "${cmp:1}" && pair_rows "${cmp:1}")
        for idx in "${!rows[@]}"; do
            IFS='|' read -r row usec <<<"${rows[$idx]}"
            compared=-
            if [[ -n ${refs[$idx]:-} ]]; then
                IFS='|' read -r ref_row ref_usec <<<"${refs[$idx]}"
                compared=$(cheaper_than "$ref_usec" "$usec" "$ref_row")
            fi
            printf '| %s | %s | %s | %s | %s | %s|\n' "$row" "$usec" \
                "$([[ -n $incr ]] && ratio "$usec" "$incr" || echo -)" \
                "$([[ -n $incr_pipe ]] && ratio "$usec" "$incr_pipe" || echo -)" \
                "$compared" "${USEC[$row]:-(sum)}"
        done
    done
fi
if [[ ${SKIP_MEMORY:-0} != 1 ]]; then
    echo
    if [[ $REPLICA == 1 ]]; then
        echo "With a replica attached, used_memory also holds the replication buffer: these deltas are less exact."
        echo
    fi
    echo "| idle key | keys | bytes per key (used_memory delta) | MEMORY USAGE of one key |"
    echo "|---|---:|---:|---:|"
    for entry in "${MEMS[@]}"; do
        IFS='|' read -r name _ _ <<<"$entry"
        printf '| %s | %s | %s | %s |\n' "$name" "${MEMKEYS[$name]}" "${BYTES[$name]}" "${USAGE[$name]}"
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
if [[ $REPLICA == 1 ]]; then
    echo "The issue's ratios with a replica attached (the targets are judged on a lone server):"
else
    echo "Targets:"
fi
target "RL.ADMIT gcra <= 2.5x INCR (new key)" "RL.ADMIT gcra" INCR "<= 2.5"
target "RL.ADMIT gcra <= 2.5x INCR (existing key)" "RL.ADMIT gcra, existing key" INCR "<= 2.5"
target "Lua >= 5x RL.ADMIT gcra (new key)" "Lua GCRA" "RL.ADMIT gcra" ">= 5"
target "Lua >= 5x RL.ADMIT gcra (existing key)" "Lua GCRA, existing key" "RL.ADMIT gcra, existing key" ">= 5"
target "5-key Lua >= 5x RL.MULTI 5 rules (new keys)" "Lua 5 keys" "RL.MULTI 5 rules" ">= 5"
target "5-key Lua >= 5x RL.MULTI 5 rules (existing keys)" "Lua 5 keys, existing keys" "RL.MULTI 5 rules, existing keys" ">= 5"
info() { # $1: text, $2, $3: benches -> their ratio, no target
    local a b
    a=$(get "$2") b=$(get "$3")
    [[ -n $a && -n $b ]] && echo "- $1: $(ratio "$a" "$b") (no target)"
    return 0
}
info "RL.GRANT WANT 100 / RL.ADMIT gcra, new key (100 tokens in one call)" "RL.GRANT WANT 100" "RL.ADMIT gcra"
info "RL.GRANT WANT 100 / RL.ADMIT gcra, existing key" "RL.GRANT WANT 100, existing key" "RL.ADMIT gcra, existing key"
pair_target() { # $1: text, $2: module pair, $3: script pair: compares the sums
    local a b
    selected "$2" && selected "$3" || return 0
    a=$(pair_rows "$2" | tail -1 | cut -d'|' -f2) b=$(pair_rows "$3" | tail -1 | cut -d'|' -f2)
    [[ -n $a && -n $b ]] || return 0
    echo "- $1: $(ratio "$b" "$a") -> $(verdict "$(awk -v a="$a" -v b="$b" 'BEGIN {print b/a}') >= 5")"
}
for variant in "new key" "10 others" "1000 others"; do
    pair_target "Lua semaphore >= 5x RL.ACQUIRE + RL.RELEASE ($variant)" "RL semaphore, $variant" "Lua semaphore, $variant"
    pair_target "Lua reserve + settle >= 5x RESERVE + RL.SETTLE ($variant)" "RL reserve, $variant" "Lua reserve, $variant"
done
if [[ -n ${BYTES["RL.ADMIT gcra"]:-} ]]; then
    echo "- <= 150 bytes per idle gcra key: ${BYTES["RL.ADMIT gcra"]} -> $(verdict "${BYTES["RL.ADMIT gcra"]} <= 150")"
fi
log "== done in ${SECONDS} s"
