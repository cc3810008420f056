#!/usr/bin/env bash
# Script mode against the module on one server and one workload: usec_per_call from INFO
# commandstats (RL.ADMIT against EVALSHA of clients/scripts/rl.lua) and bytes per key from
# MEMORY USAGE. Prints Markdown tables. Knobs: N=50000 (calls per round), ROUNDS=3 (the lowest
# is kept), MODULE=<librl.so>, REDIS_SERVER=<server binary>.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
N=${N:-50000}
ROUNDS=${ROUNDS:-3}
MODULE=${MODULE:-$root/target/release/librl.so}
SERVER=${REDIS_SERVER:-redis-server}
CLI=${REDIS_CLI:-redis-cli}
BENCH=${REDIS_BENCHMARK:-redis-benchmark}
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$SERVER" --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no \
  --loadmodule "$MODULE" --daemonize yes --pidfile "$dir/pid" >/dev/null
trap 'kill "$(cat "$dir/pid")" 2>/dev/null; rm -rf "$dir"' EXIT
cli() { "$CLI" -p "$port" "$@"; }
until cli PING >/dev/null 2>&1; do sleep 0.1; done
sha=$(cli -x SCRIPT LOAD < "$root/clients/scripts/rl.lua")
info=$(cli INFO server | tr -d '\r')
version=$(grep -E '^valkey_version:' <<<"$info" || grep -E '^redis_version:' <<<"$info")

# The lowest usec_per_call of one command over ROUNDS runs of N calls of `$@` on one key (the
# machine is shared: the lowest is the least disturbed).
per_call() {
  local stat=$1; shift
  local best=
  for _ in $(seq "$ROUNDS"); do
    cli CONFIG RESETSTAT >/dev/null
    "$BENCH" -p "$port" -n "$N" -c 1 -q "$@" >/dev/null
    local v
    v=$(cli INFO commandstats | tr -d '\r' | grep -i "^cmdstat_$stat:" | sed 's/.*usec_per_call=\([0-9.]*\).*/\1/')
    best=$(python3 -c "print(min(float('$v'), float('${best:-inf}')))")
  done
  echo "$best"
}

row() {
  local name=$1 margs=$2
  local key="bench:$RANDOM"
  # shellcheck disable=SC2086
  local m s
  m=$(per_call rl.${margs%% *} RL.${margs/\$k/$key:m})
  local sargs="${margs/\$k/$key:s}"
  # shellcheck disable=SC2086
  s=$(per_call evalsha EVALSHA "$sha" 1 "$key:s" RL.$sargs)
  echo "| $name | $m | $s | $(python3 -c "print(f'{$s/$m:.1f}x')") |"
}

echo "Server: $version; the lowest of $ROUNDS rounds of $N calls, one connection, one key (redis-benchmark)."
echo
echo "| workload | module usec_per_call | script usec_per_call | script / module |"
echo "|---|---|---|---|"
# shellcheck disable=SC2016
row "RL.ADMIT gcra, admitted" 'admit $k 1000000000 1s'
# shellcheck disable=SC2016
row "RL.ADMIT gcra, refused" 'admit $k 1 1h'
# shellcheck disable=SC2016
row "RL.ADMIT bucket BURST COST" 'admit $k 1000000 1s BURST 5000 COST 2 ALGO bucket'
# shellcheck disable=SC2016
row "RL.ADMIT sliding" 'admit $k 1000000000 1m ALGO sliding'
# shellcheck disable=SC2016
row "RL.ADMIT log (limit 100, full)" 'admit $k 100 1h ALGO log'

echo
echo "| key | module bytes (MEMORY USAGE) | script bytes |"
echo "|---|---|---|"
mem() {
  local name=$1 margs=$2
  # shellcheck disable=SC2086
  cli RL.${margs/\$k/mem:m} >/dev/null
  # shellcheck disable=SC2086
  cli EVALSHA "$sha" 1 mem:s RL.${margs/\$k/mem:s} >/dev/null
  echo "| $name | $(cli MEMORY USAGE mem:m) | $(cli MEMORY USAGE mem:s) |"
  cli DEL mem:m mem:s >/dev/null
}
# shellcheck disable=SC2016
mem "gcra, one admission" 'admit $k 10 1h'
# shellcheck disable=SC2016
mem "gcra, one reservation" 'admit $k 10 1h RESERVE job-1'
# shellcheck disable=SC2016
mem "sliding" 'admit $k 10 1h ALGO sliding'
# shellcheck disable=SC2016
mem "semaphore, one lease" 'acquire $k 3 1h ID worker-1'
