#!/usr/bin/env bash
# RAM per flash item: `flashtier kv -m 64 --flash F:2GiB` (no cgroup), 4 KiB values loaded
# with flashtier-bench fill in steps (first STEP1 keys, then more keys under another prefix
# up to STEP2 items in all), the write-back window left to drain after each step, then the
# process's anonymous RSS (/proc/PID/status RssAnon; the binary's file pages are not items')
# and the RAM stats (`stats`, `stats slabs`, `stats items`, `stats extstore`) recorded. Prints RSS growth
# per item between the two steps beside what the stats account for (`ram_known_bytes`:
# everything the cache can name), then where the anonymous RSS lives by mapping at each
# snapshot (smaps_split.py: allocator arenas, thread stacks, the binary's data).
# A larger delta shows fixed buffers at a fraction per item:
#   STEP2=1100000 FLASH_SIZE=6GiB scripts/bench/ram-per-item.sh
# Usage: scripts/bench/ram-per-item.sh [OUT_DIR]   (default bench-results/ram-per-item-<time>)
# Env: STEP1 [100000], STEP2 [300000], MEM [64], FLASH_SIZE [2GiB], VALUE [4096],
#      FLASH_DIR [/var/tmp/flashtier-bench], FLASHTIER_BIN, BENCH_BIN, SERVER_THREADS [2],
#      EXTRA (more flashtier flags), CENSUS (1: the binary is built with
#      `--features alloc-census`; SIGUSR2 at each snapshot saves its allocation census,
#      live heap bytes by size class, as <label>.census; alloc_census_table.py reads them).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/bench-results/ram-per-item-$(date -u +%Y%m%dT%H%M%SZ)}
STEP1=${STEP1:-100000}
STEP2=${STEP2:-300000}
MEM=${MEM:-64}
FLASH_SIZE=${FLASH_SIZE:-2GiB}
VALUE=${VALUE:-4096}
FLASH_DIR=${FLASH_DIR:-/var/tmp/flashtier-bench}
FLASHTIER_BIN=${FLASHTIER_BIN:-$ROOT/target/release/flashtier}
BENCH=${BENCH_BIN:-$ROOT/target/release/flashtier-bench}
SERVER_THREADS=${SERVER_THREADS:-2}
EXTRA=${EXTRA:-}
mkdir -p "$OUT" "$FLASH_DIR"
FLASH=$FLASH_DIR/ram-per-item-$$.bin
PID=""
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2> /dev/null && wait "$PID" 2> /dev/null
  PID=""
  rm -f "$FLASH"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PORT=$(python3 "$ROOT/scripts/bench/probe.py" free-port)
export FLASHTIER_ALLOC_CENSUS=$OUT/census.txt
# shellcheck disable=SC2086
"$FLASHTIER_BIN" kv -l 127.0.0.1 -p "$PORT" -m "$MEM" -t "$SERVER_THREADS" \
  --flash "$FLASH:$FLASH_SIZE" $EXTRA > "$OUT/server.log" 2>&1 &
PID=$!

# shellcheck source=scripts/bench/kvstats.sh
source "$(dirname "$0")/kvstats.sh"
stats() { kv_stats "$PORT" "$1"; } # section -> lines "name value"
for _ in $(seq 100); do stats "" > /dev/null 2>&1 && break; sleep 0.1; done

settle() { # wait until the write-back queue is empty and RSS stops moving
  local prev=0 cur
  for _ in $(seq 60); do
    sleep 1
    cur=$(awk '/RssAnon/{print $2}' "/proc/$PID/status")
    local q
    q=$(stats extstore | awk '$1=="extstore_write_back_queue"{print $2}')
    [ "$q" = 0 ] && [ "$cur" = "$prev" ] && return 0
    prev=$cur
  done
}

snap() { # label
  settle
  {
    echo "rss_anon_kb $(awk '/RssAnon/{print $2}' "/proc/$PID/status")"
    echo "rss_kb $(awk '/VmRSS/{print $2}' "/proc/$PID/status")"
    stats ""
    stats slabs
    stats items
    stats extstore
  } > "$OUT/$1.stats"
  cp "/proc/$PID/smaps" "$OUT/$1.smaps" 2> /dev/null || true
  if [ "${CENSUS:-0}" = 1 ]; then
    rm -f "$OUT/census.txt"
    kill -USR2 "$PID"
    for _ in $(seq 50); do [ -s "$OUT/census.txt" ] && break; sleep 0.1; done
    cp "$OUT/census.txt" "$OUT/$1.census" || true
  fi
}

load() { # prefix keys
  nice -n 19 "$BENCH" fill -s "127.0.0.1:$PORT" -c 8 -d 8 -k "$2" -v "$VALUE" \
    --key-prefix "$1" --json "$OUT/fill-$1.json" > /dev/null 2>&1
}

snap start
load a: "$STEP1"
snap step1
load b: $((STEP2 - STEP1))
snap step2

python3 - "$OUT" "$(dirname "$0")" <<'PY'
import sys
out = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from statsfile import read_stats  # noqa: E402
def read(label):
    return read_stats(out, label)
a, b = read("step1"), read("step2")
items = b["curr_items"] - a["curr_items"]
rows = [("RSS (anonymous)", (b["rss_anon_kb"] - a["rss_anon_kb"]) * 1024)]
for name in ["index_bytes", "ghost_bytes", "ledger_bytes", "flash_work_bytes",
             "flash_open_segment_table_bytes", "write_back_queue_bytes", "total_malloced",
             "ram_known_bytes"]:
    if name in a and name in b:
        rows.append((name, b[name] - a[name]))
print(f"items {a['curr_items']:.0f} -> {b['curr_items']:.0f} (+{items:.0f})")
print("| quantity | growth (bytes) | per item added |")
print("|---|---|---|")
for name, d in rows:
    print(f"| {name} | {d:,.0f} | {d / items:.2f} |")
for k in ["ram_bytes_per_flash_item", "rss_anon_kb"]:
    print(f"{k}: step1 {a.get(k)} step2 {b.get(k)}")
for label, d in (("step1", a), ("step2", b)):
    if "ram_known_bytes" in d:
        rest = d["rss_anon_kb"] * 1024 - d["ram_known_bytes"]
        print(f"{label}: RssAnon {d['rss_anon_kb'] / 1024:.1f} MiB = ram_known_bytes "
              f"{d['ram_known_bytes'] / 2**20:.1f} MiB + {rest / 2**20:.1f} MiB not named")
PY
python3 "$(dirname "$0")/smaps_split.py" "$OUT" step1 step2 || true
