#!/usr/bin/env bash
# The cost of backing-write intents: writes around the cache (writearound mode) through NBD
# with two flashtier binaries in one run — BEFORE (no intents) and FLASHTIER — same backing
# (nbdkit file, delay filter), same cache size: fio sequential 64 KiB writes and random
# 4 KiB writes, QD16, over a region the cache holds (read first: every write needs an
# intent) and over one it never held (no intent needed), then the server's intents_written
# / intent_syncs (one sync covers every intent appended before it started: group commit).
#
# Usage: scripts/bench/block-intent-cost.sh [OUTDIR]
# Env: BEFORE (binary without intents, required), FLASHTIER (target/release/flashtier),
#      SIZE (device, 1G; each region is SIZE/4), CACHE (512M), DELAY (backing delay, 1ms),
#      RUNTIME (s per fio run, 15).
set -euo pipefail
SIZE=${SIZE:-1G}
CACHE=${CACHE:-512M}
DELAY=${DELAY:-1ms}
RUNTIME=${RUNTIME:-15}
BEFORE=${BEFORE:?set BEFORE to a flashtier binary without intents}
AFTER=${FLASHTIER:-target/release/flashtier}
OUT=${1:-data/bench/block-intent-cost-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
FT=$AFTER
. "$(dirname "$0")/block-lib.sh"
block_setup ftintent
slow_backing --threads=16
URI="nbd+unix:///?socket=$W/ft.sock"
BYTES=$(numfmt --from=iec "$SIZE")
REGION=$((BYTES / 4))
fio_run() { # name rw bs offset
    fio --name="$1" --ioengine=nbd --uri="$URI" --rw="$2" --bs="$3" --iodepth=16 \
        --offset="$4" --size="$REGION" --runtime="$RUNTIME" --time_based --randrepeat=0 \
        --output-format=json >"$OUT/$1.json" 2>/dev/null
    python3 -c '
import json,sys
t=open(sys.argv[1]).read(); w=json.loads(t[t.index("{"):])["jobs"][0]["write"]
print("iops=%d MiB/s=%.1f lat_p99_us=%d" % (w["iops"], w["bw"]/1024,
      w["clat_ns"]["percentile"]["99.000000"]/1000))' "$OUT/$1.json"
}
S=$OUT/summary.txt
echo "size=$SIZE cache=$CACHE delay=$DELAY runtime=${RUNTIME}s mode=writearound QD16" >"$S"
for which in before after; do
    if [ $which = before ]; then FT=$BEFORE; else FT=$AFTER; fi
    rm -f "$W/cache.img"
    start_flashtier "$OUT/flashtier-$which.log" --mode writearound --seq-threshold-kb 0
    # Cache the first region (reads are admitted in writearound mode).
    fio --name=fill --ioengine=nbd --uri="$URI" --rw=read --bs=1m --iodepth=8 \
        --size="$REGION" --output-format=json >/dev/null 2>&1
    echo "$which: cached_blocks=$(stat cached_blocks) after reading region 0" >>"$S"
    for load in "cached-seq write 64k 0" "cached-rand randwrite 4k 0" \
        "uncached-seq write 64k $((2 * REGION))" "uncached-rand randwrite 4k $((2 * REGION))"; do
        set -- $load
        ctl reset-stats >/dev/null
        c0=$(ps -o times= -p "$FTPID" | tr -d ' ')
        r=$(fio_run "$which-$1" "$2" "$3" "$4")
        c1=$(ps -o times= -p "$FTPID" | tr -d ' ')
        echo "$which $1 bs=$3: $r intents_written=$(stat intents_written)" \
            "intent_syncs=$(stat intent_syncs) intents_skipped=$(stat intents_skipped)" \
            "server_cpu_s=$((c1 - c0))" >>"$S"
    done
    kill "$FTPID"
    wait "$FTPID" 2>/dev/null || true
    FTPID=
done
cat "$S"
