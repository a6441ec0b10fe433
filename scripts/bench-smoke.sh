#!/usr/bin/env bash
# Smoke test of the load generator (<= 60 s, no speed assertion): starts memcached (and
# flashtier when target/release/flashtier exists) on loopback, runs flashtier-bench closed
# loop with a load phase and open loop at two rates, text and meta protocols, every GET hit
# verified byte-exact, and checks each JSON report has non-zero ops and no errors.
# Usage: scripts/bench-smoke.sh        (needs memcached and python3 on PATH)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PROBE="python3 $ROOT/scripts/bench/probe.py"
FLASHTIER_BIN=${FLASHTIER_BIN:-$ROOT/target/release/flashtier}
TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT

cargo build -q --release -p flashtier-bench
BENCH=$ROOT/target/release/flashtier-bench

smoke() { # label port
  local label=$1 port=$2
  "$BENCH" load -s "127.0.0.1:$port" --keys 5000 --load-phase --verify -c 4 -d 4 \
    --warmup 500ms --duration 2s --json "$TMP/$label-closed.json" > /dev/null
  $PROBE check-json "$TMP/$label-closed.json"
  "$BENCH" sweep -s "127.0.0.1:$port" --keys 5000 --verify -c 4 -d 2 --protocol meta \
    --value-size 100:50,4096:40,65536:10 --rates 1k,3k --warmup 500ms --duration 2s \
    --json "$TMP/$label-open.json" > /dev/null
  $PROBE check-json "$TMP/$label-open.json"
}

port=$($PROBE free-port)
memcached -u root -l 127.0.0.1 -p "$port" -m 64 -U 0 > "$TMP/memcached.log" 2>&1 &
PIDS+=($!)
$PROBE wait-port "$port" "${PIDS[-1]}" 10
smoke memcached "$port"

if [ -x "$FLASHTIER_BIN" ]; then
  port=$($PROBE free-port)
  "$FLASHTIER_BIN" kv --listen "127.0.0.1:$port" -m 64 --ram-only > "$TMP/flashtier.log" 2>&1 &
  PIDS+=($!)
  $PROBE wait-port "$port" "${PIDS[-1]}" 10
  smoke flashtier "$port"
else
  echo "bench-smoke: no flashtier binary at $FLASHTIER_BIN; memcached only"
fi
echo "bench-smoke: ok"
