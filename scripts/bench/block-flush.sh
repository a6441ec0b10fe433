#!/usr/bin/env bash
# Flushing without collapse: foreground fio IOPS before and during a full `ctl flush` of a
# cache that is ~60 % dirty, over a slow backing (nbdkit delay filter), and how fast the
# flush drains. Dirty blocks are spread at random over the whole device (the hard case for
# coalescing) plus one sequential stretch (the easy case).
#
# Usage: scripts/bench/block-flush.sh [OUTDIR]
# Env: SIZE (device, 1G), CACHE (256M), DELAY (4ms), RUNTIME (s per fio run, 20),
#      SHARE (writeback_busy_share_pct, 30), FG (0: no foreground load, just time the
#      flush), FGRW (foreground fio --rw, randrw), FGDIST (its random_distribution,
#      zipf:1.1; `random` for uniform misses that compete for the backing), FLASHTIER (binary, target/release/flashtier).
set -euo pipefail
SIZE=${SIZE:-1G}
CACHE=${CACHE:-256M}
DELAY=${DELAY:-4ms}
RUNTIME=${RUNTIME:-20}
SHARE=${SHARE:-30}
FT=${FLASHTIER:-target/release/flashtier}
OUT=${1:-data/bench/block-flush-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
. "$(dirname "$0")/block-lib.sh"
block_setup ftflush
slow_backing --threads="${THREADS:-16}"
start_flashtier "$OUT/flashtier.log" \
    --flush-period 3600 --dirty-high-pct 85 --dirty-low-pct 80 --dirty-max-pct 90
URI="nbd+unix:///?socket=$W/ft.sock"
ctl set "writeback_busy_share_pct=$SHARE" >/dev/null 2>&1 || true
CAP=$(stat capacity_blocks)
# ~50 % of the capacity dirty: 45 % random 4 KiB blocks over the device, 5 % sequential;
# the warm-up's writes take it to ~60 %.
RAND=$((CAP * 45 / 100 * 4096))
SEQ=$((CAP * 5 / 100 * 4096))
fio --name=dirty --ioengine=nbd --uri="$URI" --rw=randwrite --bs=4k --size="$SIZE" \
    --io_size="$RAND" --iodepth=32 >/dev/null 2>&1
fio --name=seq --ioengine=nbd --uri="$URI" --rw=write --bs=64k --offset=0 --size="$SEQ" \
    --iodepth=8 >/dev/null 2>&1
fg() { # name: foreground load, 4 KiB random 70/30 read/write, zipf over the device
    fio --name="$1" --ioengine=nbd --uri="$URI" --rw="${FGRW:-randrw}" --rwmixread=70 --bs=4k \
        --random_distribution="${FGDIST:-zipf:1.1}" --iodepth=16 --size="$SIZE" --runtime="$RUNTIME" \
        --time_based --output-format=json >"$OUT/$1.json" 2>/dev/null
    python3 -c '
import json,sys
t=open(sys.argv[1]).read(); j=json.loads(t[t.index("{"):])["jobs"][0]
print(round(j["read"]["iops"]+j["write"]["iops"]))' "$OUT/$1.json"
}
if [ "${FG:-1}" = 1 ]; then
    fg warmup >/dev/null   # the foreground's hot set gets cached first
fi
D0=$(stat dirty_blocks)
BEFORE=$([ "${FG:-1}" = 1 ] && fg before || echo 1)
D1=$(stat dirty_blocks)
C0=$(stat cleanings)
ctl flush >/dev/null
T0=$(date +%s.%N)
DURING=$([ "${FG:-1}" = 1 ] && fg during || echo 1)
LEFT=$(stat dirty_blocks)
ctl flush --wait >/dev/null 2>&1
T1=$(date +%s.%N)
FLUSHED=$(( $(stat cleanings) - C0 ))
python3 - "$BEFORE" "$DURING" "$D0" "$D1" "$CAP" "$LEFT" "$T0" "$T1" "$FLUSHED" \
    "$(stat writeback_writes)" "$(stat writeback_bytes)" "$(stat coalesced_writes)" \
    <<'PY' | tee "$OUT/summary.txt"
import sys
b, d, d0, d1, cap, left, t0, t1, flushed, ww, wb, cw = sys.argv[1:]
b, d = int(b), int(d)
secs = float(t1) - float(t0)
print(f"capacity_blocks={cap} dirty_at_start={d0} ({int(d0)/int(cap):.0%}) "
      f"dirty_before_flush={d1} ({int(d1)/int(cap):.0%})")
print(f"foreground_iops_before={b} during_flush={d} ratio={d/b:.2f}")
print(f"flush: {flushed} blocks written back in {secs:.1f} s = {int(flushed or 0)/secs:.0f} blocks/s "
      f"(dirty left when the foreground run ended: {left})")
print(f"writeback_writes={ww} avg_write_kib={int(wb)/max(int(ww),1)/1024:.1f} "
      f"coalesced_writes={cw}")
PY
