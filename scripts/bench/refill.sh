#!/usr/bin/env bash
# Full-speed fill, then a refill of every key over a full flash (issues 30/26): the write
# phases of `clients.sh` alone, so a change to reclaim can be measured in minutes.
# Per round, for each server in SERVERS (order rotated each round), a fresh server:
#   fill KEYS x VALUE at full speed (flashtier-bench fill, 16 connections, depth 16),
#   snapshot stats; refill every key the same way (the flash wraps), snapshot stats.
# flashtier entries are `ft` (FLASHTIER_BIN) and `ft-NAME` (binary from env FT_NAME,
# e.g. FT_base=/tmp/ft-before): the before and after binaries alternate in one sitting.
# Client and server share the machine's CPUs: every figure includes the client's use.
#
# Usage: scripts/bench/refill.sh [OUT_DIR]   (root)
# Env [default]: ROUNDS [3]  MEM [64]  FLASH [1G]  CG_MB [192]  KEYS [150000]  VALUE [4096]
#   SERVERS ["ft memcached-t4 memcached-t2"] (memcached-tN runs memcached -t N; `memcached`
#   runs -t MC_THREADS [2]; flashtier runs --threads 2)
# Output: OUT/summary.tsv (one line per server and phase: SETs/s, server CPU s, append
# waits and their time, reclaim counters), OUT/raw/, OUT/run.log.
NAME=refill
ROOT_GUESS=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT_GUESS/bench-results/refill-$(date -u +%Y%m%dT%H%M%SZ)}
ROUNDS=${ROUNDS:-3} MEM=${MEM:-64} FLASH=${FLASH:-1G} CG_MB=${CG_MB:-192}
KEYS=${KEYS:-150000} VALUE=${VALUE:-4096} SERVERS=${SERVERS:-ft memcached-t4 memcached-t2}
# shellcheck source=scripts/bench/lib.sh
source "$(dirname "$0")/lib.sh"
HELPER=(python3 "$ROOT/scripts/bench/clients.py")
DEFAULT_FT=$FLASHTIER_BIN
MC_THREADS=${MC_THREADS:-$SERVER_THREADS}
preflight
mkdir -p "$OUT/raw"; : > "$OUT/run.log"
machine_json "$OUT/machine.json"
echo "ROUNDS=$ROUNDS MEM=$MEM FLASH=$FLASH CG_MB=$CG_MB KEYS=$KEYS VALUE=$VALUE SERVERS='$SERVERS' scripts/bench/refill.sh $*" > "$OUT/command.txt"
printf 'round\tserver\tphase\tsets_per_s\tcpu_s\tappend_waits\tappend_wait_s\tevictions\tdeferred\treclaims\treclaim_read_mb\trewritten_mb\tdevice_written_mb\tflash_items\n' > "$OUT/summary.tsv"

phase() { # tag
  local cpu0
  cpu0=$("${HELPER[@]}" cpu "$SERVER_PID")
  gen "$1" fill -k "$KEYS" -v "$VALUE" -c 16
  python3 -c 'import sys; print(f"{float(sys.argv[2]) - float(sys.argv[1]):.2f}")' \
    "$cpu0" "$("${HELPER[@]}" cpu "$SERVER_PID")" > "$DIR/$1.cpu"
  snap "$DIR/$1.snap.json"
}

row() { # round label tag prev_snap
  python3 - "$@" "$DIR" >> "$OUT/summary.tsv" <<'PY'
import json, sys
rnd, label, tag, prev, d = sys.argv[1:6]
rep = json.load(open(f"{d}/{tag}.json"))
def ops_per_s(r):
    return (r.get("load_phase") or {}).get("ops_per_sec") or float("nan")
cur = json.load(open(f"{d}/{tag}.snap.json")).get("stats", {})
old = json.load(open(prev)).get("stats", {}) if prev != "-" else {}
def dl(k, scale=1):
    a, b = cur.get(k), old.get(k, 0)
    if not isinstance(a, (int, float)):
        return "-"
    return f"{(a - (b if isinstance(b, (int, float)) else 0)) / scale:.1f}" if scale != 1 else str(a - (b if isinstance(b, (int, float)) else 0))
cpu = open(f"{d}/{tag}.cpu").read().strip()
print("\t".join([rnd, label, tag, f"{ops_per_s(rep):.0f}", cpu, dl("extstore_append_waits"),
    dl("extstore_append_wait_us", 1e6), dl("evictions"), dl("extstore_evictions_deferred"),
    dl("extstore_compactions"), dl("extstore_compaction_bytes_read", 1e6),
    dl("extstore_compaction_bytes_written", 1e6), dl("extstore_bytes_written", 1e6),
    str(cur.get("extstore_index_items", cur.get("extstore_objects_used", "-")))]))
PY
}

for ((round = 1; round <= ROUNDS; round++)); do
  read -r -a order <<< "$SERVERS"
  shift_by=$(((round - 1) % ${#order[@]}))
  order=("${order[@]:shift_by}" "${order[@]:0:shift_by}")
  for label in "${order[@]}"; do
    DIR=$OUT/raw/r$round/$label; mkdir -p "$DIR"
    case "$label" in
      memcached) kind=memcached; SERVER_THREADS=$MC_THREADS ;;
      memcached-t[0-9]*) kind=memcached; SERVER_THREADS=${label#memcached-t} ;;
      ft) kind=flashtier; FLASHTIER_BIN=$DEFAULT_FT; SERVER_THREADS=2 ;;
      ft-*) kind=flashtier; var=FT_${label#ft-}; FLASHTIER_BIN=${!var:?set $var to a binary}; SERVER_THREADS=2 ;;
      *) die "unknown server $label" ;;
    esac
    log "round $round/$ROUNDS $label (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    start_server "$label" "$kind" "$MEM" "$FLASH" "$CG_MB"
    phase fill; row "$round" "$label" fill -
    phase refill; row "$round" "$label" refill "$DIR/fill.snap.json"
    stop_server
    tail -2 "$OUT/summary.tsv" | tee -a "$OUT/run.log"
  done
done
column -t -s $'\t' "$OUT/summary.tsv"
