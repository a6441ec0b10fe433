#!/usr/bin/env bash
# Serving shapes, flashtier vs memcached extstore, same -m, flash size and memory cgroup:
#   fio: O_DIRECT random reads of FIO_BS on a file in FLASH_DIR at each FIO_DEPTHS (the ceiling;
#     FIO_BS defaults to the pages flashtier reads for one VALUE-byte item: 8k for 4 KiB values);
#   per server (memcached first: its peak sets the open-loop rates), on one fresh server:
#     fill KEYS x VALUE (flash part full), then "fresh" shapes:
#       closed loop at each CONNSxDEPTH of SHAPES; "flashread": uniform keys, GETs only;
#       open loop (Poisson, latency from each request's scheduled time) over 16 connections at
#       OPEN_PCTS % of memcached's peak closed-loop throughput, plus OPEN_FIXED rates;
#     refill every key once more (the flash wraps: reclaim/compaction active), then "full"
#     shapes: FULL_SHAPES and flashread again.
# Every row: ops/s, hits/s, p50/p99/p99.9 (µs), server CPU µs/op (utime+stime over the window),
# flash-served GETs/s and their share of fio's ceiling at the nearest depth.
#
# Usage: scripts/bench/shapes.sh [OUT_DIR]   (root; default docs/results/shapes,
#        QUICK=1 -> ~2.5 min smoke run into bench-results/shapes-quick-<time>)
# Env [default {QUICK}]: MEM [256 {64}]  FLASH [4G {1G}]  CG_MB [768 {192}]  KEYS [600000 {150000}]
#   VALUE [4096]  DIST [zipf:0.99]  GET_RATIO [0.9]  FILL_RATE [25k]  WARMUP [2s {1s}]
#   DUR [8s {3s}]  SHAPES ["8x1 64x1 16x2 64x2 8x16 32x16" {"8x1 16x2 8x16"}]
#   FULL_SHAPES ["8x1 16x2 8x16" {"16x2"}]  OPEN_PCTS ["25 50 80"]  OPEN_FIXED ["30k 60k" {""}]
#   OPEN_DEPTH [16]  FIO_DEPTHS ["1 2 4 8 16 32" {"1 8 32"}]  FIO_TIME [4 {2}]  GEN_THREADS [1]
#   FIO_BS [pages covering VALUE + 128 B of record header, key and prefix]
#   SERVERS ["memcached flashtier"] (memcached must come first), FLASHTIER_EXTRA, MEMCACHED_OPTS
# Full mode: about 8-9 minutes.
NAME=shapes
QUICK=${QUICK:-0}
if ((QUICK)); then
  OUT=${1:-$(cd "$(dirname "$0")/../.." && pwd)/bench-results/shapes-quick-$(date -u +%Y%m%dT%H%M%SZ)}
  MEM=${MEM:-64} FLASH=${FLASH:-1G} CG_MB=${CG_MB:-192} KEYS=${KEYS:-150000} WARMUP=${WARMUP:-1s}
  DUR=${DUR:-3s} SHAPES=${SHAPES:-8x1 16x2 8x16} FULL_SHAPES=${FULL_SHAPES:-16x2}
  OPEN_FIXED=${OPEN_FIXED-} FIO_DEPTHS=${FIO_DEPTHS:-1 8 32} FIO_TIME=${FIO_TIME:-2}
else
  OUT=${1:-$(cd "$(dirname "$0")/../.." && pwd)/docs/results/shapes}
fi
MEM=${MEM:-256} FLASH=${FLASH:-4G} CG_MB=${CG_MB:-768} KEYS=${KEYS:-600000} VALUE=${VALUE:-4096}
DIST=${DIST:-zipf:0.99} GET_RATIO=${GET_RATIO:-0.9} FILL_RATE=${FILL_RATE:-25k}
WARMUP=${WARMUP:-2s} DUR=${DUR:-8s} SHAPES=${SHAPES:-8x1 64x1 16x2 64x2 8x16 32x16}
FULL_SHAPES=${FULL_SHAPES:-8x1 16x2 8x16} OPEN_PCTS=${OPEN_PCTS:-25 50 80}
OPEN_FIXED=${OPEN_FIXED-30k 60k} OPEN_DEPTH=${OPEN_DEPTH:-16}
FIO_DEPTHS=${FIO_DEPTHS:-1 2 4 8 16 32} FIO_TIME=${FIO_TIME:-4} GEN_THREADS=${GEN_THREADS:-1}
# A flash GET reads the 4 KiB pages its record covers: header (40 B), key, 16-byte value
# prefix and value. The ceiling is measured at that size, not at the value size.
FIO_BS=${FIO_BS:-$(( (VALUE + 128 + 4095) / 4096 * 4 ))k}
SERVERS=${SERVERS:-memcached flashtier}
# shellcheck source=scripts/bench/lib.sh
source "$(dirname "$0")/lib.sh"
[ "${SERVERS%% *}" = memcached ] || { echo "shapes.sh: SERVERS must start with memcached (its peak sets the open-loop rates)" >&2; exit 2; }
command -v fio > /dev/null || { echo "shapes.sh: fio not found (scripts/install-deps.sh)" >&2; exit 2; }
preflight
rm -rf "$OUT/raw" "$OUT/raw.tar.xz"; mkdir -p "$OUT/raw"; : > "$OUT/run.log"  # raw.tar.xz: an earlier committed run's archive
machine_json "$OUT/machine.json"
cat > "$OUT/config.json" <<JSON
{"mem": $MEM, "flash": "$FLASH", "cg_mb": $CG_MB, "keys": $KEYS, "value": $VALUE, "dist": "$DIST",
 "get_ratio": $GET_RATIO, "fill_rate": "$FILL_RATE", "warmup": "$WARMUP", "dur": "$DUR",
 "shapes": "$SHAPES", "full_shapes": "$FULL_SHAPES", "open_pcts": "$OPEN_PCTS",
 "open_fixed": "$OPEN_FIXED", "open_depth": $OPEN_DEPTH, "open_connections": 16,
 "fio_depths": "$FIO_DEPTHS", "fio_bs": "$FIO_BS", "gen_threads": $GEN_THREADS, "servers": "$SERVERS",
 "server_threads": $SERVER_THREADS, "flashtier_extra": "$FLASHTIER_EXTRA",
 "memcached_opts": "$MEMCACHED_OPTS", "quick": $QUICK}
JSON
log "out $OUT; load average $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- fio ceiling: same disk, same read size, each queue depth ----------------------------
FIO_FILE=$FLASH_DIR/fio-$NAME-$$.test
mkdir -p "$OUT/raw/fio"
for qd in $FIO_DEPTHS; do
  drop_caches
  fio --name=rr --filename="$FIO_FILE" --size=2G --rw=randread --bs="$FIO_BS" --direct=1 \
    --ioengine=io_uring --iodepth="$qd" --runtime="$FIO_TIME" --time_based --output-format=json \
    > "$OUT/raw/fio/qd$qd.json" 2> "$OUT/raw/fio/qd$qd.err" || die "fio at depth $qd failed (see raw/fio/qd$qd.err)"
  log "fio $FIO_BS randread qd$qd: $(python3 -c "import json;print(round(json.load(open('$OUT/raw/fio/qd$qd.json'))['jobs'][0]['read']['iops']))") IOPS"
done
rm -f "$FIO_FILE"

COMMON=(-k "$KEYS" -v "$VALUE" --warmup "$WARMUP" --duration "$DUR" -t "$GEN_THREADS")
# Every measured run draws its own key sequence (a run repeating the previous run's sequence
# would hit what that run just SET and inflate hit ratios).
SEED=10
closed() { # tag CxD [extra generator args]
  local tag=$1 c=${2%x*} d=${2#*x}; shift 2
  SEED=$((SEED + 1))
  gen "$tag" load -c "$c" -d "$d" --dist "$DIST" --get-ratio "$GET_RATIO" --seed "$SEED" "${COMMON[@]}" "$@"
}
flashread() { # tag: uniform keys, GETs only: nearly every GET goes to flash
  SEED=$((SEED + 1))
  gen "$1" load -c 16 -d 2 --dist uniform --get-ratio 1.0 --seed "$SEED" "${COMMON[@]}"
}

RATES=""
for kind in $SERVERS; do
  label=$kind
  DIR=$OUT/raw/$label; mkdir -p "$DIR"
  start_server "$label" "$kind" "$MEM" "$FLASH" "$CG_MB"
  log "$label: fill $KEYS x $VALUE B at $FILL_RATE/s"
  gen fill fill -k "$KEYS" -v "$VALUE" -c 16 --load-rate "$FILL_RATE"
  snap "$DIR/fresh.json"
  for s in $SHAPES; do
    log "$label: fresh closed loop $s"
    closed "fresh-closed-$s" "$s"
  done
  log "$label: fresh flashread (uniform, GETs only, 16x2)"
  flashread fresh-flashread
  if [ -z "$RATES" ]; then
    # memcached's peak: its best closed-loop throughput over the fresh shapes.
    RATES=$(python3 - "$DIR" "$OPEN_PCTS" "$OPEN_FIXED" <<'PY'
import glob, json, sys
d, pcts, fixed = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
peak = max(json.load(open(p))["rows"][0]["throughput_ops_per_sec"] for p in glob.glob(d + "/fresh-closed-*.json"))
json.dump({"memcached_peak_ops_per_sec": peak}, open(d + "/../peak.json", "w"))
def ops(r):
    return float(r[:-1]) * 1000 if r[-1] in "kK" else float(r)
rates = [int(peak * int(p) / 100) for p in pcts] + [int(ops(r)) for r in fixed]
print(",".join(str(r) for r in sorted(set(rates))))
PY
)
    log "open-loop rates (from memcached's peak): $RATES"
  fi
  log "$label: fresh open loop at $RATES over 16 conns (depth up to $OPEN_DEPTH)"
  gen fresh-open sweep --rates "$RATES" -c 16 -d "$OPEN_DEPTH" --dist "$DIST" --get-ratio "$GET_RATIO" "${COMMON[@]}"
  log "$label: refill every key (flash wraps)"
  gen refill fill -k "$KEYS" -v "$VALUE" -c 16 --load-rate "$FILL_RATE"
  snap "$DIR/full.json"
  for s in $FULL_SHAPES; do
    log "$label: full closed loop $s"
    closed "full-closed-$s" "$s"
  done
  log "$label: full flashread"
  flashread full-flashread
  snap "$DIR/end.json"
  stop_server
done
log "load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
python3 "$ROOT/scripts/bench/tables.py" shapes "$OUT" | tee "$OUT/summary.md"
log "done: $OUT/summary.md, $OUT/shapes.png"
