#!/usr/bin/env bash
# Read hits under skew: fio random reads (or 70/30 read/write) with a pareto or zipf
# distribution over a backing about twice the cache, through flashtier block over a slow
# backing (nbdkit delay). Warm-up run, `ctl reset-stats`, measured run; prints the read hit
# ratio, IOPS, flashtier's CPU per I/O (utime+stime over the measured run) and what the cache
# holds.
#
# Usage: scripts/bench/block-hits.sh [OUTDIR]
# Env: SIZE (device, 1G), CACHE (512M), DELAY (4ms), RUNTIME (s per run, 30),
#      DIST (fio random_distribution, pareto:0.9), RW (randread | randrw), BS (4k),
#      SET (space-separated KEY=VALUE tunables set before the warm-up),
#      FLASHTIER (binary, target/release/flashtier).
set -euo pipefail
SIZE=${SIZE:-1G}
CACHE=${CACHE:-512M}
DELAY=${DELAY:-4ms}
RUNTIME=${RUNTIME:-30}
DIST=${DIST:-pareto:0.9}
RW=${RW:-randread}
BS=${BS:-4k}
FT=${FLASHTIER:-target/release/flashtier}
OUT=${1:-data/bench/block-hits-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
. "$(dirname "$0")/block-lib.sh"
block_setup fthits
slow_backing
start_flashtier "$OUT/flashtier.log"
URI="nbd+unix:///?socket=$W/ft.sock"
load() { # name
    fio --name="$1" --ioengine=nbd --uri="$URI" --rw="$RW" --rwmixread=70 --bs="$BS" \
        --random_distribution="$DIST" --iodepth=16 --size="$SIZE" --runtime="$RUNTIME" \
        --time_based --output-format=json >"$OUT/$1.json" 2>/dev/null
    python3 -c '
import json,sys
t=open(sys.argv[1]).read(); j=json.loads(t[t.index("{"):])["jobs"][0]
print(round(j["read"]["iops"]+j["write"]["iops"]))' "$OUT/$1.json"
}
for kv in ${SET:-}; do ctl set "$kv" >/dev/null; done
load warmup >/dev/null
ctl reset-stats >/dev/null
cpu_ticks() { awk '{print $14 + $15}' "/proc/$FTPID/stat"; }
T0=$(cpu_ticks)
IOPS=$(load measured)
T1=$(cpu_ticks)
CPU_US=$(python3 -c "import os,sys; t=(int(sys.argv[2])-int(sys.argv[1]))/os.sysconf('SC_CLK_TCK'); print(round(t*1e6/max(1,int(sys.argv[3])*int(sys.argv[4])),1))" "$T0" "$T1" "$IOPS" "$RUNTIME")
ctl stats >"$OUT/stats.txt"
{
    echo "size=$SIZE cache=$CACHE dist=$DIST rw=$RW bs=$BS delay=$DELAY runtime=${RUNTIME}s"
    echo "iops=$IOPS server_cpu_us_per_op=$CPU_US read_hit_percent=$(stat read_hit_percent)" \
        "cached_blocks=$(stat cached_blocks)" \
        "capacity_blocks=$(stat capacity_blocks) dirty_blocks=$(stat dirty_blocks)" \
        "replacements=$(stat replacements) moved_clean_blocks=$(stat moved_clean_blocks)" \
        "capacity_evictions=$(stat capacity_evictions)"
} | tee "$OUT/summary.txt"
