#!/usr/bin/env bash
# Block face benchmark (issue 6): fio zipf random read/write (4 KiB, 70/30, QD16) over a
# backing with 5 ms delay (nbdkit delay filter): flashtier block vs nbdkit's cache filter vs
# no cache, same cache size, same run; plus the ceiling (the backing file, no delay, no cache).
#
# Usage: scripts/bench/block.sh [OUTDIR]
# Env: SIZE (device, default 1G), CACHE (default 128M), RUNTIME (s per run, default 30),
#      DELAY (default 5ms), ZIPF (default 1.1), QD (default 16), FLASHTIER (binary path,
#      default target/release/flashtier).
set -euo pipefail
SIZE=${SIZE:-1G}
CACHE=${CACHE:-128M}
RUNTIME=${RUNTIME:-30}
DELAY=${DELAY:-5ms}
ZIPF=${ZIPF:-1.1}
QD=${QD:-16}
FT=${FLASHTIER:-target/release/flashtier}
OUT=${1:-data/bench/block-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
W=$(mktemp -d /var/tmp/ftblockbench.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$W"
}
trap cleanup EXIT

truncate -s "$SIZE" "$W/backing.img"
# Fill the backing with data so reads are not of holes.
fio --name=fill --filename="$W/backing.img" --rw=write --bs=1M --size="$SIZE" \
    --ioengine=psync --end_fsync=1 >/dev/null

wait_sock() { for _ in $(seq 100); do [ -S "$1" ] && return 0; sleep 0.1; done; echo "no $1" >&2; exit 1; }

run_fio() { # name uri
    fio --name="$1" --ioengine=nbd --uri="$2" --rw=randrw --rwmixread=70 --bs=4k \
        --random_distribution="zipf:$ZIPF" --iodepth="$QD" --size="$SIZE" \
        --runtime="$RUNTIME" --time_based --group_reporting --output-format=json \
        >"$OUT/$1.json"
    python3 - "$OUT/$1.json" "$1" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
text = open(sys.argv[1]).read()  # fio's nbd engine prints a line before the JSON
j = json.loads(text[text.index("{"):])["jobs"][0]
def p99(side):
    pct = j[side].get("clat_ns", {}).get("percentile", {})
    return pct.get("99.000000", 0) / 1e6
iops = j["read"]["iops"] + j["write"]["iops"]
print(f"{sys.argv[2]:<14} iops={iops:9.0f} read_iops={j['read']['iops']:8.0f} "
      f"write_iops={j['write']['iops']:8.0f} read_p99_ms={p99('read'):8.2f} "
      f"write_p99_ms={p99('write'):8.2f}")
PY
}

: >"$OUT/summary.txt"
echo "size=$SIZE cache=$CACHE delay=$DELAY zipf=$ZIPF qd=$QD runtime=${RUNTIME}s" | tee -a "$OUT/summary.txt"

# Ceiling: the backing file, no delay, no cache.
nbdkit -f -U "$W/raw.sock" file "$W/backing.img" & PIDS+=($!)
wait_sock "$W/raw.sock"
run_fio ceiling "nbd+unix:///?socket=$W/raw.sock"

# The slow disk: nbdkit file + delay filter.
nbdkit -f -U "$W/slow.sock" --filter=delay file "$W/backing.img" rdelay="$DELAY" wdelay="$DELAY" & PIDS+=($!)
wait_sock "$W/slow.sock"
run_fio nocache "nbd+unix:///?socket=$W/slow.sock"

# nbdkit's cache filter over the same delay.
nbdkit -f -U "$W/nbdkitcache.sock" --filter=cache --filter=delay file "$W/backing.img" \
    rdelay="$DELAY" wdelay="$DELAY" cache=writeback cache-max-size="$CACHE" & PIDS+=($!)
wait_sock "$W/nbdkitcache.sock"
run_fio nbdkit-cache "nbd+unix:///?socket=$W/nbdkitcache.sock"

# flashtier block over the slow disk.
"$FT" block --backing "nbd+unix:///?socket=$W/slow.sock" --cache "$W/ftcache.img:$CACHE" \
    --listen "unix:$W/ft.sock" --admin 127.0.0.1:0 --run-dir "$W/run" 2>"$OUT/flashtier.log" & PIDS+=($!)
wait_sock "$W/ft.sock"
run_fio flashtier "nbd+unix:///block?socket=$W/ft.sock"
cp "$W/run/block.stats" "$OUT/flashtier.stats" 2>/dev/null || true
echo "results in $OUT"
