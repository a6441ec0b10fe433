#!/usr/bin/env bash
# The small-object tier (issue 28), measured: `flashtier kv -m MEM --flash F:FLASH_SIZE
# --small-flash S:SMALL_SIZE --small-item-max SMALL_MAX`, VALUE-byte values filled with
# flashtier-bench in two steps (STEP1 keys, then STEP2 - STEP1 more under another prefix),
# the process's anonymous RSS and every stat recorded after each step; then GET_SECONDS of
# uniform GETs over the second step's keys (closed loop, 8 connections × depth 8) with the
# server's CPU. Prints RSS growth per object between the steps, flash bytes written per
# value byte SET (small_bytes_written / small_bytes_stored), hit ratio, GETs/s and server
# CPU per GET. Load average is printed beside the figures (shared machine).
# Usage: scripts/bench/small-tier.sh [OUT_DIR]   (default bench-results/small-tier-<time>)
# Env: STEP1 [5000000], STEP2 [20000000], MEM [64], FLASH_SIZE [1GiB], SMALL_SIZE [4GiB],
#      SMALL_MAX [300], VALUE [100], GET_SECONDS [20], FLASH_DIR [/var/tmp/flashtier-bench],
#      FLASHTIER_BIN, BENCH_BIN, SERVER_THREADS [2], EXTRA (more flashtier flags),
#      MISS_SECONDS [0]: then that many seconds of GETs of keys never SET (prefix z:), to
#      count the set filters' false positives (page reads per miss),
#      CENSUS [0] (1: the binary is built `--features alloc-census`; SIGUSR2 at each snapshot
#      saves its allocation census as <label>.census, see alloc_census_table.py).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/bench-results/small-tier-$(date -u +%Y%m%dT%H%M%SZ)}
STEP1=${STEP1:-5000000}
STEP2=${STEP2:-20000000}
MEM=${MEM:-64}
FLASH_SIZE=${FLASH_SIZE:-1GiB}
SMALL_SIZE=${SMALL_SIZE:-4GiB}
SMALL_MAX=${SMALL_MAX:-300}
VALUE=${VALUE:-100}
GET_SECONDS=${GET_SECONDS:-20}
FLASH_DIR=${FLASH_DIR:-/var/tmp/flashtier-bench}
FLASHTIER_BIN=${FLASHTIER_BIN:-$ROOT/target/release/flashtier}
BENCH=${BENCH_BIN:-$ROOT/target/release/flashtier-bench}
SERVER_THREADS=${SERVER_THREADS:-2}
EXTRA=${EXTRA:-}
mkdir -p "$OUT" "$FLASH_DIR"
FLASH=$FLASH_DIR/small-tier-log-$$.bin
SMALL=$FLASH_DIR/small-tier-sets-$$.bin
PID=""
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2> /dev/null && wait "$PID" 2> /dev/null
  PID=""
  rm -f "$FLASH" "$SMALL"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PORT=$(python3 "$ROOT/scripts/bench/probe.py" free-port)
export FLASHTIER_ALLOC_CENSUS=$OUT/census.txt
# shellcheck disable=SC2086
nice -n 19 "$FLASHTIER_BIN" kv -l 127.0.0.1 -p "$PORT" -m "$MEM" -t "$SERVER_THREADS" \
  --flash "$FLASH:$FLASH_SIZE" --small-flash "$SMALL:$SMALL_SIZE" \
  --small-item-max "$SMALL_MAX" $EXTRA > "$OUT/server.log" 2>&1 &
PID=$!

# shellcheck source=scripts/bench/kvstats.sh
source "$(dirname "$0")/kvstats.sh"
stats() { kv_stats "$PORT" "$1"; } # section -> lines "name value"
for _ in $(seq 100); do stats "" > /dev/null 2>&1 && break; sleep 0.1; done

snap() { # label: settle (staging below budget, RSS still), then record
  local prev=0 cur
  for _ in $(seq 30); do
    sleep 1
    cur=$(awk '/RssAnon/{print $2}' "/proc/$PID/status")
    [ "$cur" = "$prev" ] && break
    prev=$cur
  done
  {
    echo "rss_anon_kb $(awk '/RssAnon/{print $2}' "/proc/$PID/status")"
    echo "cpu_ticks $(awk '{print $14 + $15}' "/proc/$PID/stat")"
    echo "loadavg $(cut -d' ' -f1 /proc/loadavg)"
    stats ""
  } > "$OUT/$1.stats"
  if [ "${CENSUS:-0}" = 1 ]; then
    rm -f "$OUT/census.txt"
    kill -USR2 "$PID"
    for _ in $(seq 50); do [ -s "$OUT/census.txt" ] && break; sleep 0.1; done
    cp "$OUT/census.txt" "$OUT/$1.census" || true
  fi
}

fill() { # prefix keys
  local t0 t1
  t0=$(date +%s.%N)
  nice -n 19 "$BENCH" fill -s "127.0.0.1:$PORT" -c 8 -d 8 -k "$2" -v "$VALUE" \
    --key-prefix "$1" --json "$OUT/fill-$1.json" > "$OUT/fill-$1.log" 2>&1
  t1=$(date +%s.%N)
  echo "fill $1 $2 keys: $(python3 -c "print(f'{$2/($t1-$t0):.0f}')") sets/s" | tee -a "$OUT/summary.txt"
}

snap start
fill a: "$STEP1"
snap step1
fill b: $((STEP2 - STEP1))
snap step2
nice -n 19 "$BENCH" load -s "127.0.0.1:$PORT" -c 8 -d 8 -k $((STEP2 - STEP1)) -v "$VALUE" \
  --key-prefix b: --dist uniform --get-ratio 1 --duration "$GET_SECONDS" --warmup 2 \
  --server-pid "$PID" --json "$OUT/get.json" > "$OUT/get.log" 2>&1
snap gets
MISS_SECONDS=${MISS_SECONDS:-0}
if [ "$MISS_SECONDS" != 0 ]; then
  nice -n 19 "$BENCH" load -s "127.0.0.1:$PORT" -c 8 -d 8 -k $((STEP2 - STEP1)) -v "$VALUE" \
    --key-prefix z: --dist uniform --get-ratio 1 --duration "$MISS_SECONDS" --warmup 1 \
    --json "$OUT/miss.json" > "$OUT/miss.log" 2>&1
  snap misses
fi

python3 - "$OUT" "$(dirname "$0")" "$STEP1" "$STEP2" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
out = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from statsfile import read_stats  # noqa: E402
def read(label):
    return read_stats(out, label)
s, a, b, g = read("start"), read("step1"), read("step2"), read("gets")
objs = lambda d: d.get("curr_items", 0) + d.get("small_items", 0)
n = objs(b) - objs(a)
print(f"objects held: step1 {objs(a):.0f} (small {a.get('small_items',0):.0f}), "
      f"step2 {objs(b):.0f} (small {b.get('small_items',0):.0f}); load avg {a['loadavg']} / {b['loadavg']}")
grow = (b["rss_anon_kb"] - a["rss_anon_kb"]) * 1024
print(f"RSS (anon) growth step1->step2: {grow/2**20:.1f} MiB for +{n:.0f} objects = {grow/max(n,1):.2f} B/object")
# The small tier's write-back copies versions RAM still holds: such a key is in curr_items and
# small_items both, so the counts above overcount; per key SET is the figure that does not.
keys = int(sys.argv[4]) - int(sys.argv[3])
print(f"RSS (anon) growth step1->step2 per key SET: {grow/max(keys,1):.2f} B/key (+{keys} keys; "
      f"small_written_back {b.get('small_written_back', 0):.0f})")
print(f"RSS (anon) at step2 minus start: {(b['rss_anon_kb']-s['rss_anon_kb'])/1024:.1f} MiB "
      f"= {(b['rss_anon_kb']-s['rss_anon_kb'])*1024/max(objs(b),1):.2f} B per object held")
print(f"small summaries: {b.get('small_set_filter_bytes',0)/2**20:.1f} MiB = "
      f"{b.get('small_set_filter_bytes',0)/max(b.get('small_items',1),1):.2f} B per small object; "
      f"staged {b.get('small_staged_bytes',0)/2**20:.1f} MiB")
print(f"flash bytes written per value byte SET (small tier): {b.get('small_write_amplification')} "
      f"({b.get('small_bytes_written',0)/2**30:.2f} GiB written, {b.get('small_bytes_stored',0)/2**30:.2f} GiB stored); "
      f"inserts refused {b.get('small_inserts_refused',0):.0f}, evicted in sets {b.get('small_evictions',0):.0f}")
try:
    j = json.load(open(f"{out}/get.json"))
    print("get phase json keys:", ", ".join(sorted(j.keys()))[:400])
except Exception as e:
    print("get.json unreadable:", e)
hits = g.get("get_hits", 0) - b.get("get_hits", 0)
miss = g.get("get_misses", 0) - b.get("get_misses", 0)
reads = g.get("small_page_reads", 0) - b.get("small_page_reads", 0)
log_reads = g.get("small_log_page_reads", 0) - b.get("small_log_page_reads", 0)
print(f"small log: {b.get('small_log_pages', 0):.0f} pages, {b.get('small_log_items', 0):.0f} objects "
      f"indexed in {b.get('small_log_index_bytes', 0)/2**20:.1f} MiB; small_ram_bytes "
      f"{b.get('small_ram_bytes', 0)/2**20:.1f} MiB; log merges {b.get('small_log_merges', 0):.0f}, "
      f"{b.get('small_log_objects_merged', 0):.0f} objects in {b.get('small_log_sets_merged', 0):.0f} set rewrites, "
      f"dropped {b.get('small_log_dropped', 0):.0f}; GET phase log page reads {log_reads:.0f}")
cpu = (g["cpu_ticks"] - b["cpu_ticks"]) / 100.0
print(f"GET phase: {hits:.0f} hits, {miss:.0f} misses (hit ratio {hits/max(hits+miss,1):.3f}), "
      f"{reads:.0f} small page reads (+{log_reads:.0f} log), server CPU {cpu:.1f} s "
      f"= {cpu*1e6/max(hits+miss,1):.1f} us per GET; load avg {g['loadavg']}")
print(f"GET phase: small_false_positives {g.get('small_false_positives',0)-b.get('small_false_positives',0):.0f}, "
      f"log tag false reads {g.get('small_log_tag_false_reads',0)-b.get('small_log_tag_false_reads',0):.0f}; "
      f"fill: deletes staged {b.get('small_deletes_staged',0):.0f}, log pages written {b.get('small_log_pages_written',0):.0f}")
try:
    m = read("misses")
    mm = m.get("get_misses", 0) - g.get("get_misses", 0)
    fp = m.get("small_false_positives", 0) - g.get("small_false_positives", 0)
    ltf = m.get("small_log_tag_false_reads", 0) - g.get("small_log_tag_false_reads", 0)
    neg = m.get("small_filter_negatives", 0) - g.get("small_filter_negatives", 0)
    print(f"MISS phase: {mm:.0f} misses, set page reads (filter false positives) {fp:.0f} = {fp/max(mm,1):.4f} per miss, "
          f"filter negatives {neg:.0f}, log tag false reads {ltf:.0f} = {ltf/max(mm,1):.4f} per miss")
except Exception as e:
    print("no miss phase:", e)
PY
