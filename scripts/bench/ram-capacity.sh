#!/usr/bin/env bash
# RAM-only capacity, side by side: `memcached -m M` and `flashtier kv --ram-only -m M` on free
# ports, the same keys loaded (flashtier-bench fill, every key once), then the same overwrite
# mix (flashtier-bench load, closed loop, uniform keys, SET fraction 10 % or 50 %), then
# `curr_items`, `evictions` and the RAM in use for both. One row per case; a markdown table on
# stdout (also OUT/summary.md), raw stats in OUT/.
# Usage: scripts/bench/ram-capacity.sh [OUT_DIR]     (default bench-results/ram-capacity-<time>)
# Env: CASES ["100:64:300000 4096:256:50000 16384:256:13000" = value bytes:-m MB:keys],
#      MIXES ["0.9 0.5" = GET fraction of the overwrite phase], OPS_PER_KEY [20], DIST [uniform],
#      SERVER_THREADS [2], FLASHTIER_BIN, MEMCACHED_BIN, BENCH_BIN.
# Keys are sized so memcached (-m M, default slab factor 1.25) holds them all with ~15 % to
# spare: the question is whether flashtier holds at least as many under overwrites.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/bench-results/ram-capacity-$(date -u +%Y%m%dT%H%M%SZ)}
CASES=${CASES:-100:64:300000 4096:256:50000 16384:256:13000}
MIXES=${MIXES:-0.9 0.5}
DIST=${DIST:-uniform}
OPS_PER_KEY=${OPS_PER_KEY:-20}
SERVER_THREADS=${SERVER_THREADS:-2}
FLASHTIER_BIN=${FLASHTIER_BIN:-$ROOT/target/release/flashtier}
MEMCACHED_BIN=${MEMCACHED_BIN:-/usr/bin/memcached}
BENCH=${BENCH_BIN:-$ROOT/target/release/flashtier-bench}
mkdir -p "$OUT"
PID=""
cleanup() { [ -n "$PID" ] && kill "$PID" 2> /dev/null && wait "$PID" 2> /dev/null; PID=""; }
trap cleanup EXIT
trap 'exit 130' INT TERM


stats() { # port -> "stats" lines
  python3 - "$1" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"stats\r\n")
buf = b""
while not buf.endswith(b"END\r\n"):
    buf += s.recv(65536)
print(buf.decode())
PY
}

stat() { awk -v k="$2" '$2==k{print $3}' "$1" | tr -d '\r'; }

wait_port() {
  for _ in $(seq 100); do
    stats "$1" > /dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "ram-capacity: server on port $1 did not answer" >&2
  exit 1
}

run_one() { # server value mem keys get_ratio
  local server=$1 value=$2 mem=$3 keys=$4 gets=$5 port tag
  port=$(python3 "$ROOT/scripts/bench/probe.py" free-port)
  tag="$server-v$value-m$mem-k$keys-g$gets"
  if [ "$server" = memcached ]; then
    "$MEMCACHED_BIN" -u root -l 127.0.0.1 -p "$port" -m "$mem" -U 0 -t "$SERVER_THREADS" \
      > "$OUT/$tag.log" 2>&1 &
  else
    "$FLASHTIER_BIN" kv --ram-only -l 127.0.0.1 -p "$port" -m "$mem" -t "$SERVER_THREADS" \
      > "$OUT/$tag.log" 2>&1 &
  fi
  PID=$!
  wait_port "$port"
  local common=(-s "127.0.0.1:$port" -c 8 -d 8 -k "$keys" -v "$value" --key-prefix key:)
  nice -n 19 "$BENCH" fill "${common[@]}" --json "$OUT/$tag.fill.json" > /dev/null 2>&1
  nice -n 19 "$BENCH" load "${common[@]}" --dist "$DIST" --get-ratio "$gets" --warmup 0s \
    --ops $((keys * OPS_PER_KEY)) --json "$OUT/$tag.load.json" > /dev/null 2>&1
  stats "$port" > "$OUT/$tag.stats"
  cleanup
  local f=$OUT/$tag.stats
  echo "$(stat "$f" curr_items) $(stat "$f" evictions) $(stat "$f" bytes)"
}

{
  echo "| value | -m | keys | SETs | memcached items | memcached evictions | flashtier items | flashtier evictions | flashtier / memcached |"
  echo "|---|---|---|---|---|---|---|---|---|"
} | tee "$OUT/summary.md"
for case in $CASES; do
  IFS=: read -r value mem keys <<< "$case"
  for gets in $MIXES; do
    read -r mi me _ <<< "$(run_one memcached "$value" "$mem" "$keys" "$gets")"
    read -r fi fe _ <<< "$(run_one flashtier "$value" "$mem" "$keys" "$gets")"
    sets=$(python3 -c "print(f'{round((1-$gets)*100)} %')")
    ratio=$(python3 -c "print(f'{$fi/$mi:.3f}')")
    echo "| $value B | $mem | $keys | $sets | $mi | $me | $fi | $fe | $ratio |" | tee -a "$OUT/summary.md"
  done
done
