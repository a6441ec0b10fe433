#!/usr/bin/env bash
# Small GETs from flash (issue 28): server CPU, syscalls and context switches per GET of the
# small-object tier. `flashtier kv -m MEM -t 2 --flash F:1GiB --small-flash S:SMALL_SIZE
# --small-item-max 300`, KEYS × VALUE-byte values filled, the tier's staging and log merged
# into the set pages (the `small_flush` knob is not there: we wait until `small_staged_items`
# is 0 and nothing is written for 2 s, at most 2 × SETTLE seconds), then for each SHAPE (C×D) a
# uniform GET-only closed loop of SECONDS over the keys with `perf stat` on the server
# counting syscalls and context switches. Prints one line per shape: GETs/s, hit ratio, the
# tier's page and log-page reads per GET, server CPU µs per GET (all threads; the flusher
# thread's share is printed separately from /proc), syscalls and context switches per GET.
# Usage: scripts/bench/small-get.sh [OUT_DIR]   (default bench-results/small-get-<time>)
# GETs go to the first GET_KEYS keys (filled first, so evicted from RAM first: with MAIN_FLASH=0
# — no main flash tier, so no promotion of main-flash hits evicting RAM segments into the tier
# during the GET phase — every GET that RAM does not answer is the small tier's).
# Env: KEYS [2000000], GET_KEYS [KEYS/2], MAIN_FLASH [1GiB; 0: none], VALUE [100], MEM [64],
#      SMALL_SIZE [1GiB], SECONDS_ [8],
#      SHAPES ["8x8 16x2 8x1"], FLASH_DIR [/var/tmp/flashtier-bench], FLASHTIER_BIN,
#      BENCH_BIN, SERVER_THREADS [2], PERF_RECORD (a shape: also `perf record -g` it), EXTRA,
#      PREZERO [0; 1: write the small file full of zeros before the start, so ext4 holds it as
#      a few written extents instead of fallocate's unwritten ones split by every set write —
#      what a read's extent lookup costs, thirteenth sitting].
# Also prints RSS, AnonHugePages, small_ram_bytes and small_hugepage_bytes at rest after the
# fill and after each shape (EXTRA="--small-hugepages on": fourteenth sitting).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/bench-results/small-get-$(date -u +%Y%m%dT%H%M%SZ)}
KEYS=${KEYS:-2000000}
GET_KEYS=${GET_KEYS:-$((KEYS / 2))}
MAIN_FLASH=${MAIN_FLASH:-1GiB}
VALUE=${VALUE:-100}
MEM=${MEM:-64}
SMALL_SIZE=${SMALL_SIZE:-1GiB}
SECS=${SECONDS_:-8}
SHAPES=${SHAPES:-8x8 16x2 8x1}
SETTLE=${SETTLE:-60}
FLASH_DIR=${FLASH_DIR:-/var/tmp/flashtier-bench}
FLASHTIER_BIN=${FLASHTIER_BIN:-$ROOT/target/release/flashtier}
BENCH=${BENCH_BIN:-$ROOT/target/release/flashtier-bench}
SERVER_THREADS=${SERVER_THREADS:-2}
PERF_RECORD=${PERF_RECORD:-}
EXTRA=${EXTRA:-}
PREZERO=${PREZERO:-0}
mkdir -p "$OUT" "$FLASH_DIR"
FLASH=$FLASH_DIR/small-get-log-$$.bin
SMALL=$FLASH_DIR/small-get-sets-$$.bin
PID=""
cleanup() {
  # SIGKILL: a clean stop would first merge the whole log into the sets (minutes when loaded).
  [ -n "$PID" ] && kill -9 "$PID" 2> /dev/null && { wait "$PID" 2> /dev/null || true; }
  PID=""
  rm -f "$FLASH" "$SMALL"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

MAIN=""
MAIN="--flash $FLASH:$MAIN_FLASH"
[ "$MAIN_FLASH" = 0 ] && MAIN="--ram-only"
if [ "$PREZERO" = 1 ]; then
  mib=$(python3 -c "import sys; s=sys.argv[1]; u={'KiB':1<<10,'MiB':1<<20,'GiB':1<<30}; \
n=next((int(s[:-3])*v for k,v in u.items() if s.endswith(k)), None); print((n or int(s)) >> 20)" \
    "$SMALL_SIZE")
  dd if=/dev/zero of="$SMALL" bs=1M count="$mib" oflag=direct status=none
fi
PORT=$(python3 "$ROOT/scripts/bench/probe.py" free-port)
# shellcheck disable=SC2086
nice -n 19 "$FLASHTIER_BIN" kv -l 127.0.0.1 -p "$PORT" -m "$MEM" -t "$SERVER_THREADS" \
  $MAIN --small-flash "$SMALL:$SMALL_SIZE" --small-item-max 300 $EXTRA \
  > "$OUT/server.log" 2>&1 &
PID=$!
# shellcheck source=scripts/bench/kvstats.sh
source "$(dirname "$0")/kvstats.sh"
stat_of() { kv_stats "$PORT" "" | awk -v n="$1" '$1 == n {print $2}'; }
for _ in $(seq 100); do stat_of pid > /dev/null 2>&1 && break; sleep 0.1; done

nice -n 19 "$BENCH" fill -s "127.0.0.1:$PORT" -c 8 -d 8 -k "$KEYS" -v "$VALUE" \
  --key-prefix s: > "$OUT/fill.log" 2>&1
# Settle: nothing staged and no log page or set page written for two seconds.
prev=""
for _ in $(seq "$SETTLE"); do
  sleep 2
  staged=$(stat_of small_staged_items)
  cur="$staged $(stat_of small_log_items) $(stat_of small_page_writes)"
  [ "$staged" = 0 ] && [ "$cur" = "$prev" ] && break
  prev=$cur
done
echo "settled: staged/log items/page writes $cur; small_items $(stat_of small_items)," \
  "curr_items $(stat_of curr_items)" | tee -a "$OUT/summary.txt"
# RSS, the part of it in huge pages, and the tier's fixed RAM / advised bytes (at rest after
# the fill, then after each GET phase).
mem() {
  echo "$1: RSS $(awk '/^VmRSS/ {print $2}' "/proc/$PID/status") kB, AnonHugePages" \
    "$(awk '/^AnonHugePages/ {print $2}' "/proc/$PID/smaps_rollup") kB; small_ram_bytes" \
    "$(stat_of small_ram_bytes), small_hugepage_bytes $(stat_of small_hugepage_bytes)" |
    tee -a "$OUT/summary.txt"
}
mem "at rest"

# CPU ticks of the whole process and of the tier's flusher thread (flashtier-small).
ticks() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
flusher_ticks() {
  local t
  for t in /proc/"$PID"/task/*; do
    if [ "$(cat "$t/comm")" = flashtier-small ]; then awk '{print $14 + $15}' "$t/stat"; fi
  done | awk '{s += $1} END {print s + 0}'
}
for shape in $SHAPES; do
  c=${shape%x*}
  d=${shape#*x}
  b_get=$(stat_of cmd_get)
  b_hits=$(stat_of get_hits)
  b_reads=$(stat_of small_page_reads)
  b_small=$(stat_of small_hits)
  b_logr=$(stat_of small_log_page_reads)
  b_work="$(stat_of small_inserts) $(stat_of small_log_pages_written) $(stat_of small_page_writes)"
  nice -n 19 "$BENCH" load -s "127.0.0.1:$PORT" -c "$c" -d "$d" -k "$GET_KEYS" -v "$VALUE" \
    --key-prefix s: --dist uniform --get-ratio 1 --duration "${SECS}s" --warmup 1s \
    --no-server-stats --json "$OUT/get-$shape.json" > "$OUT/get-$shape.log" 2>&1 &
  LOAD=$!
  sleep 1.5
  t0=$(ticks)
  f0=$(flusher_ticks)
  g0=$(stat_of cmd_get)
  if [ "$PERF_RECORD" = "$shape" ]; then
    perf record -F 999 -g -p "$PID" -o "$OUT/perf-$shape.data" -- sleep $((SECS - 2)) \
      > /dev/null 2>&1
  else
    perf stat -e raw_syscalls:sys_enter,context-switches -p "$PID" -x, \
      -o "$OUT/perfstat-$shape.txt" -- sleep $((SECS - 2))
  fi
  g1=$(stat_of cmd_get)
  t1=$(ticks)
  f1=$(flusher_ticks)
  wait "$LOAD"
  python3 - "$OUT" "$shape" "$SECS" "$((g1 - g0))" "$((t1 - t0))" "$((f1 - f0))" \
    "$b_get" "$(stat_of cmd_get)" "$b_hits" "$(stat_of get_hits)" "$b_reads" \
    "$(stat_of small_page_reads)" "$b_logr" "$(stat_of small_log_page_reads)" \
    "$(cut -d' ' -f1 /proc/loadavg)" "$b_work" \
    "$(stat_of small_inserts) $(stat_of small_log_pages_written) $(stat_of small_page_writes)" \
    "$b_small" "$(stat_of small_hits)" << 'PY' | tee -a "$OUT/summary.txt"
import os, sys
out, shape, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
win_gets, ticks, fticks = (int(x) for x in sys.argv[4:7])
b_get, a_get, b_hit, a_hit, b_r, a_r, b_l, a_l = (int(x) for x in sys.argv[7:15])
load = sys.argv[15]
small = int(sys.argv[19]) - int(sys.argv[18])
work = [int(a) - int(b) for a, b in zip(sys.argv[17].split(), sys.argv[16].split())]
gets, hits = a_get - b_get, a_hit - b_hit
sc = cs = float("nan")
p = f"{out}/perfstat-{shape}.txt"
if os.path.exists(p):
    for line in open(p):
        f = line.strip().split(",")
        if len(f) > 2 and f[2] == "raw_syscalls:sys_enter":
            sc = float(f[0])
        if len(f) > 2 and f[2] == "context-switches":
            cs = float(f[0])
w = max(win_gets, 1)
print(f"{shape}: {win_gets/(secs-2)/1e3:.1f}k GETs/s, hit ratio {hits/max(gets,1):.3f}, "
      f"small-tier hits/GET {small/max(gets,1):.3f}, "
      f"set-page reads/GET {(a_r-b_r)/max(gets,1):.3f}, log-page reads/GET {(a_l-b_l)/max(gets,1):.3f}; "
      f"window {win_gets} GETs: server CPU {ticks*1e4/w:.1f} us/GET "
      f"(flusher thread {fticks*1e4/w:.2f}), syscalls/GET {sc/w:.2f}, ctx switches/GET {cs/w:.3f}; "
      f"during the phase: {work[0]} tier inserts, {work[1]} log pages and {work[2]} set pages "
      f"written; load avg {load}")
PY
  mem "after $shape"
done
