#!/usr/bin/env bash
# Instructions per call of the module's commands and of their baselines, counted by callgrind:
# unlike usec_per_call, immune to the other jobs on a shared machine. Same commands as e2e.sh.
#
#   bash benches/callgrind.sh           # builds the module, runs everything, prints Markdown
#
# One redis-server runs under `valgrind --tool=callgrind --instr-atstart=no` on a free
# 127.0.0.1 port. For each command: FLUSHALL, create the keys of an existing-key variant
# (instrumentation off), then instrumentation on, counters zeroed, `redis-benchmark -P 16 -c 1
# -n CG_N` (one connection, so the counts do not depend on scheduling), a dump, instrumentation
# off. Active expiry is off (DEBUG SET-ACTIVE-EXPIRE 0), so the counts hold the command and its
# request, not the deletion of other keys, which depends on how fast valgrind runs.
#
# The pairs of lib.sh (ACQUIRE then RELEASE, RESERVE then SETTLE, and their scripts) are sent as
# generated RESP through `redis-cli --pipe`, one dump per phase, after their keys are populated
# with instrumentation off.
#
# Environment (all optional; see also benches/lib.sh):
#   CG_N          calls per command (default 10000; the 5-key commands get CG_N/8)
#   PAIR_CALLS    calls per phase of the new-key pairs (default 2000; the "others" pairs get
#                 PAIR_CALLS/5 and /50)
#   KEYS          keys of the existing-key variants (default 10000); new-key variants draw from
#                 10^8 keys, so nearly every call creates its key
#   ONLY          a regular expression: only the commands whose name matches
#   BREAKDOWN     a regular expression: the commands whose cost centres are listed
#                 (default: RL.ADMIT gcra, both variants, and RL.MULTI with existing keys)
#   TOP           inclusive cost centres listed per breakdown (default 30)
#   CG_KEEP       a directory to copy the callgrind dumps to (for callgrind_annotate, kcachegrind)
#   SKIP_BUILD=1  use the existing target/release/librl.so
#   REPLICA=1     attach a replica (lib.sh; not under valgrind) before counting, so that every
#                 write builds and sends its effect: the counts then include the primary's
#                 effect building and its writes to the replication stream (not the replica's)
#
# What the numbers are: Ir (instructions executed in user space) per call, from
# callgrind_annotate --inclusive=yes. Kernel work (read, write, epoll) is not counted.
set -euo pipefail
KEYS=${KEYS:-10000}
# shellcheck source=benches/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CG_N=${CG_N:-10000}
ONLY=${ONLY:-}
BREAKDOWN=${BREAKDOWN:-^(RL\.ADMIT gcra(, existing key)?|RL\.MULTI 5 rules, existing keys|RL (semaphore|reserve), 1000 others: .*)$}
PAIR_CALLS=${PAIR_CALLS:-2000}
TOP=${TOP:-30}
NEW_KEYSPACE=100000000

need_tools valgrind callgrind_control callgrind_annotate awk
build_module
DIR=$(mktemp -d -t rl-bench.XXXXXX)
SERVER_ARGS="--enable-debug-command local"
start_server valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$DIR/callgrind.out"
cli DEBUG SET-ACTIVE-EXPIRE 0 >/dev/null
load_scripts
define_benches
define_pairs
VALGRIND_VERSION=$(valgrind --version)

control() { callgrind_control "$@" "$SERVER_PID" >/dev/null 2>&1 || die "callgrind_control $*: failed"; }

# Inclusive Ir per function name, plus "PROGRAM TOTALS". callgrind_annotate also lists a
# function's inlined parts under the files they come from ("key.rs:rl::commands::admit::run");
# those are parts of the function's own entry, so each function gets its largest entry.
costs() { # $1: dump file
    callgrind_annotate --inclusive=yes --threshold=100 --auto=no "$1" 2>/dev/null | awk '
        /PROGRAM TOTALS/ { gsub(",", "", $1); print "PROGRAM TOTALS\t" $1; next }
        /^ *[0-9,]+ +\( *[0-9.]+%\) +[^ ]/ {
            ir = $1; gsub(",", "", ir)
            rest = $0; sub(/^ *[0-9,]+ +\( *[0-9.]+%\) +/, "", rest)
            sub(/ \[[^]]*\]$/, "", rest)
            k = index(rest, ":"); fn = (k ? substr(rest, k + 1) : rest)
            if (ir + 0 > max[fn] + 0) max[fn] = ir
        }
        END { for (fn in max) print fn "\t" max[fn] }' | sort -t$'\t' -k2,2nr
}
ir() { # $1: costs file, $2: function name -> inclusive Ir (0 when absent)
    awk -F'\t' -v f="$2" '$1==f {print $2; found=1} END {if (!found) print 0}' "$1"
}
proc_of() { # the function that implements a command, by commandstats entry
    case $1 in
        incr) echo incrCommand ;;
        set) echo setCommand ;;
        evalsha) echo evalShaCommand ;;
        *) echo "$DISPATCHER" ;;
    esac
}
per() { awk -v a="$1" -v n="$2" 'BEGIN {printf "%.0f", a / n}'; }

declare -A CALLS REQ PROC PCMD COSTS
# One dump of whatever ran since the last --zero: $1: name, $2: commandstats entry, $3: calls.
measure() {
    local name=$1 stat=$2 n=$3 calls failed total cron dump
    dumps=$((dumps + 1))
    control --dump="$name"
    control --instr=off
    dump=$DIR/callgrind.out.$dumps
    [[ -s $dump ]] || die "$name: no dump $dump"
    calls=$(stat_field "$stat" calls)
    failed=$(stat_field "$stat" failed_calls)
    [[ -n $calls && $calls -ge $n ]] || die "$name: $calls calls, expected $n"
    [[ ${failed:-0} == 0 ]] || die "$name: $failed failed calls"
    costs "$dump" >"$dump.costs"
    COSTS[$name]=$dump.costs
    total=$(ir "$dump.costs" "PROGRAM TOTALS")
    cron=$(ir "$dump.costs" serverCron)
    CALLS[$name]=$calls
    REQ[$name]=$(per "$((total - cron))" "$calls")
    PCMD[$name]=$(per "$(ir "$dump.costs" processCommand)" "$calls")
    PROC[$name]=$(per "$(ir "$dump.costs" "$(proc_of "$stat")")" "$calls")
}
selected() { [[ -z $ONLY || $1 =~ $ONLY ]]; }
dumps=0
log "== callgrind: redis-benchmark -P 16 -c 1 -n $CG_N (5-key commands: $((CG_N / 8))) per command"
for entry in "${BENCHES[@]}"; do
    IFS='|' read -r name stat div _ command populate <<<"$entry"
    selected "$name" || continue
    start=$SECONDS
    cli FLUSHALL SYNC >/dev/null
    keyspace=$NEW_KEYSPACE
    if [[ -n $populate ]]; then
        IFS=';' read -r -a populates <<<"$populate"
        for p in "${populates[@]}"; do
            # shellcheck disable=SC2086
            pipe_all $p
        done
        keyspace=$KEYS
    fi
    n=$((CG_N / div))
    cli CONFIG RESETSTAT >/dev/null
    control --instr=on
    control --zero
    # shellcheck disable=SC2086 # the command is split into its arguments on purpose
    "$REDIS_BENCHMARK" -h "$HOST" -p "$PORT" -P 16 -n "$n" -c 1 -r "$keyspace" -q $command \
        >/dev/null 2>&1 || die "$name: redis-benchmark failed"
    measure "$name" "$stat" "$n"
    log "   $(printf '%-32s' "$name") calls=${CALLS[$name]}  Ir/request=${REQ[$name]}  processCommand=${PCMD[$name]}  command=${PROC[$name]}  ($((SECONDS - start)) s)"
done
log "== ($SECONDS s so far) pairs through redis-cli --pipe: $PAIR_CALLS calls per phase (new key), $((PAIR_CALLS / 5)) (10 others), $((PAIR_CALLS / 50)) (1000 others)"
for entry in "${PAIRS[@]}"; do
    IFS='|' read -r base _ calls_per keys others populate <<<"$entry"
    selected "$base" || continue
    start=$SECONDS
    cli FLUSHALL SYNC >/dev/null
    populate_pair "$populate" "$keys" "$others"
    for phase in "${PHASES[@]}"; do
        IFS='|' read -r pbase label stat command check <<<"$phase"
        [[ $pbase == "$base" ]] || continue
        name="$base: $label"
        before=$(admitted_counter "$stat")
        ROUND=1 gen_phase "$command" "$calls_per" "$keys"
        cli CONFIG RESETSTAT >/dev/null
        control --instr=on
        control --zero
        send_phase "$command" "$calls_per"
        measure "$name" "$stat" "$calls_per"
        if [[ -n $before ]]; then
            admitted=$(($(admitted_counter "$stat") - before))
            [[ $admitted == "$calls_per" ]] || die "$name: $admitted of $calls_per calls admitted"
        fi
        ROUND=1 check_phase "$check" "$calls_per" "$keys"
        log "   $(printf '%-48s' "$name") calls=${CALLS[$name]}  Ir/request=${REQ[$name]}  processCommand=${PCMD[$name]}  command=${PROC[$name]}"
    done
    log "   ($((SECONDS - start)) s with the populating)"
done
if [[ -n ${CG_KEEP:-} ]]; then
    mkdir -p "$CG_KEEP"
    cp "$DIR"/callgrind.out.* "$CG_KEEP"/
    log "== dumps copied to $CG_KEEP"
fi

# ---------------------------------------------------------------------------------------------
# The tables
# ---------------------------------------------------------------------------------------------
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2fx", a/b}'; }
echo
echo "$SERVER_NAME $SERVER_VERSION under $VALGRIND_VERSION (callgrind), $(date -u +%Y-%m-%d); $MODULE_USED;"
echo "redis-benchmark -P 16 -c 1 -n $CG_N (5-key commands: $((CG_N / 8))); new keys drawn from"
echo "$NEW_KEYSPACE, existing keys from $KEYS created beforehand. Ir per call (user-space instructions):"
echo "request = the whole server per request (reading, parsing, the command, the reply, writing;"
echo "not serverCron); command = inside the command's function (what usec_per_call times)."
echo "$(server_mode)."
echo
echo "| command | Ir/request | vs INCR | Ir in command | vs INCR | compared (command) | compared (request) |"
echo "|---|---:|---:|---:|---:|---|---|"
for entry in "${BENCHES[@]}"; do
    IFS='|' read -r name _ _ cmp _ _ <<<"$entry"
    selected "$name" || continue
    c_cmd="-" c_req="-"
    ref=${cmp:1}
    if [[ -n $cmp && -n ${PROC[$ref]:-} ]]; then
        case $cmp in
            "<"*) c_cmd="$(ratio "${PROC[$ref]}" "${PROC[$name]}") cheaper than $ref"
                  c_req="$(ratio "${REQ[$ref]}" "${REQ[$name]}") cheaper" ;;
            ">"*) c_cmd="$(ratio "${PROC[$name]}" "${PROC[$ref]}") the cost of $ref"
                  c_req="$(ratio "${REQ[$name]}" "${REQ[$ref]}")" ;;
        esac
    fi
    vs_req="-" vs_proc="-"
    if [[ -n ${REQ[INCR]:-} ]]; then
        vs_req=$(ratio "${REQ[$name]}" "${REQ[INCR]}")
        vs_proc=$(ratio "${PROC[$name]}" "${PROC[INCR]}")
    fi
    printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$name" "${REQ[$name]}" "$vs_req" \
        "${PROC[$name]}" "$vs_proc" "$c_cmd" "$c_req"
done


# Pairs: each phase, then the sum of the two, against the same rows of the script's pair.
pair_rows() { # $1: base -> lines "row|Ir/request|Ir in command" (phases, then the sum)
    local phase pbase label labels='' count=0 sreq=0 sproc=0 row
    for phase in "${PHASES[@]}"; do
        IFS='|' read -r pbase label _ <<<"$phase"
        [[ $pbase == "$1" ]] || continue
        row="$1: $label"
        [[ -n ${REQ[$row]:-} ]] || return 0
        echo "$row|${REQ[$row]}|${PROC[$row]}"
        sreq=$((sreq + REQ[$row])) sproc=$((sproc + PROC[$row]))
        labels+="${labels:+ + }$label" count=$((count + 1))
    done
    ((count < 2)) || echo "$1: $labels|$sreq|$sproc"
}
have_pairs=
for entry in "${PAIRS[@]}"; do
    IFS='|' read -r base _ <<<"$entry"
    selected "$base" && have_pairs=1
done
if [[ -n $have_pairs ]]; then
    echo
    echo "Pairs, each phase sent through redis-cli --pipe (one connection, the whole phase"
    echo "pipelined), one dump per phase; \"A + B\" rows add the two (one acquire-release, one"
    echo "reserve-settle). Calls per phase: new key $PAIR_CALLS; 10 others $((PAIR_CALLS / 5)) (one per key);"
    echo "1000 others $((PAIR_CALLS / 50)) ($((PAIR_CALLS / 1000)) keys, 20 per key)."
    echo
    echo "| pair: phase | Ir/request | vs INCR | vs INCR, pipe | Ir in command | vs INCR | compared (command) | compared (request) |"
    echo "|---|---:|---:|---:|---:|---:|---|---|"
    for entry in "${PAIRS[@]}"; do
        IFS='|' read -r base cmp _ <<<"$entry"
        selected "$base" || continue
        mapfile -t rows < <(pair_rows "$base")
        mapfile -t refs < <([[ -n $cmp ]] && pair_rows "${cmp:1}")
        for idx in "${!rows[@]}"; do
            IFS='|' read -r row req proc <<<"${rows[$idx]}"
            c_cmd=- c_req=-
            if [[ -n ${refs[$idx]:-} ]]; then
                IFS='|' read -r ref_row ref_req ref_proc <<<"${refs[$idx]}"
                c_cmd=$(cheaper_than "$ref_proc" "$proc" "$ref_row")
                c_req=$(cheaper_than "$ref_req" "$req" "")
            fi
            printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$row" "$req" \
                "$([[ -n ${REQ[INCR]:-} ]] && ratio "$req" "${REQ[INCR]}" || echo -)" \
                "$([[ -n ${REQ["INCR, pipe: INCR"]:-} ]] && ratio "$req" "${REQ["INCR, pipe: INCR"]}" || echo -)" \
                "$proc" "$([[ -n ${PROC[INCR]:-} ]] && ratio "$proc" "${PROC[INCR]}" || echo -)" \
                "$c_cmd" "$c_req"
        done
    done
fi

# Where the instructions of one module command go: a waterfall from the request down to the
# module's own code, then the Redis module API functions the module called, then the top
# inclusive cost centres.
breakdown() { # $1: a measured name
    local name=$1 f calls callback req pc cl disp cb api clock
    f=${COSTS[$name]}
    calls=${CALLS[$name]}
    p() { per "$(ir "$f" "$1")" "$calls"; }
    callback=$(awk -F'\t' '$1 ~ /^rl::commands::([A-Za-z_]+::)?[a-z_]*callback$/ {print $1; exit}' "$f")
    req=${REQ[$name]} pc=$(p processCommand) cl=$(p call) disp=$(p "$DISPATCHER")
    cb=$(p "$callback")
    api=$(awk -F'\t' -v n="$calls" -v p="$API_PREFIX" '$1 ~ "^" p {s += $2} END {printf "%.0f", s / n}' "$f")
    clock=$(awk -F'\t' -v n="$calls" '$1 ~ /clock_gettime/ {s += $2} END {printf "%.0f", s / n}' "$f")
    echo
    echo "### $name: where the $req instructions of a request go (Ir per call)"
    echo
    echo "| part | Ir/call | share |"
    echo "|---|---:|---:|"
    row() { printf '| %s | %s | %s |\n' "$1" "$2" "$(awk -v a="$2" -v b="$req" 'BEGIN {printf "%.1f %%", 100 * a / b}')"; }
    row "reading, parsing the request, writing the reply, event loop (request − processCommand)" $((req - pc))
    row "processCommand before call(): command lookup, ACL, checks" $((pc - cl))
    row "call() around the command: stats, slowlog, afterCommand/propagation" $((cl - disp))
    row "$DISPATCHER around the callback: context create/free" $((disp - cb))
    row "module API called by the module (${API_PREFIX}*, below)" "$api"
    row "clock_gettime" "$clock"
    row "the module's own code: argument views, parsing, decision, encoding, reply building" $((cb - api - clock))
    echo
    echo "| module API function (inclusive) | Ir/call |"
    echo "|---|---:|"
    awk -F'\t' -v n="$calls" -v p="$API_PREFIX" '$1 ~ "^" p && $2 / n >= 0.5 {printf "| %s | %.0f |\n", $1, $2 / n}' "$f"
    echo
    echo "Top $TOP inclusive cost centres inside the command (at most $DISPATCHER's"
    echo "Ir; a Redis function also called outside the command, such as dictFind or zmalloc, counts"
    echo "its calls from outside too):"
    echo
    echo "| function | inclusive Ir/call |"
    echo "|---|---:|"
    awk -F'\t' -v n="$calls" -v d="$(ir "$f" "$DISPATCHER")" \
        -v top="$TOP" '$1 != "PROGRAM TOTALS" && $2 <= d && shown++ < top {printf "| `%s` | %.0f |\n", $1, $2 / n}' "$f"
    echo
    echo "Top 15 self costs (whole request):"
    echo
    echo "| function | self Ir/call |"
    echo "|---|---:|"
    callgrind_annotate --threshold=100 --auto=no "${f%.costs}" 2>/dev/null | awk -v n="$calls" '
        /PROGRAM TOTALS/ { next }
        /^ *[0-9,]+ +\( *[0-9.]+%\) +[^ ]/ {
            ir = $1; gsub(",", "", ir)
            rest = $0; sub(/^ *[0-9,]+ +\( *[0-9.]+%\) +/, "", rest)
            sub(/ \[[^]]*\]$/, "", rest)
            k = index(rest, ":"); fn = (k ? substr(rest, k + 1) : rest)
            self[fn] += ir
        }
        END { for (fn in self) printf "%s\t%d\n", fn, self[fn] }' | sort -t$'\t' -k2,2nr |
        awk -F'\t' -v n="$calls" 'NR <= 15 {printf "| `%s` | %.0f |\n", $1, $2 / n}'
}

for entry in "${BENCHES[@]}"; do
    IFS='|' read -r name _ <<<"$entry"
    if selected "$name" && [[ $name =~ $BREAKDOWN ]]; then breakdown "$name"; fi
done
for phase in "${PHASES[@]}"; do
    IFS='|' read -r pbase label _ <<<"$phase"
    name="$pbase: $label"
    if [[ -n ${COSTS[$name]:-} && $name =~ $BREAKDOWN ]]; then breakdown "$name"; fi
done
log "== done in ${SECONDS} s"
