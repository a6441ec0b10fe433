#!/usr/bin/env bash
# The block face's replacement policy on traces, through the real code (issue 27): for each
# trace and cache size, replay it through BlockCache (examples/replay.rs: in-memory cache
# device and backing, writeback running, default tunables) and simulate LRU, ARC, LIRS,
# S3-FIFO and OPT (trace_sim.py) at the capacity_blocks the real cache reported. Prints a
# markdown table of read hit ratios (block level) and writes it to OUT/table.md.
#
# Usage: scripts/bench/block-replay.sh [OUT] (default /tmp/block-replay)
#   SIZES="32 64"   cache sizes in MiB
#   TRACES="..."    traces to use instead of the synthetic ones (FTTRACE1 files)
#   SET="k=v ..."   tunables for the real cache
#   REPLAY=PATH     a replay binary built elsewhere (e.g. a copy from another commit)
#   BEFORE=PATH     a second replay binary (e.g. the previous commit's): its row is printed
#                   as "flashtier before" beside the current one
# The simulations are deterministic: their results are kept in OUT/<trace>-<capacity>.json
# and reused when the same trace is run at the same capacity again.
# Synthetic traces (trace_gen.py): oltp (zipf 0.9 over 40k blocks, reads), oltp-rw (the
# same with 30 % writes; writes allocate in the simulations), oltp-scan (oltp + a concurrent
# sequential scan of 80k blocks, 32 blocks a request every 4th request), loop (reads cycling
# over 20k blocks, 8 a request: larger than every size here), oltp-shift (oltp whose hot set
# is drawn again every 100k requests).
set -euo pipefail
OUT=${1:-/tmp/block-replay}
SIZES=${SIZES:-"32 64"}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
mkdir -p "$OUT"
if [ -z "${REPLAY:-}" ]; then
    nice -n 19 cargo build --release -q -p flashtier-blockcache --example replay \
        --manifest-path "$ROOT/Cargo.toml"
    REPLAY=$ROOT/target/release/examples/replay
fi
if [ -z "${TRACES:-}" ]; then
    gen() { [ -f "$OUT/$1.trace" ] || python3 "$HERE/trace_gen.py" "${@:2}" "$OUT/$1.trace"; }
    gen oltp oltp --blocks 40000 --requests 300000
    gen oltp-rw oltp --blocks 40000 --requests 300000 --write-pct 30 --seed 2
    gen oltp-scan oltp-scan --blocks 40000 --requests 300000 --scan 80000 --scan-every 4
    gen loop loop --blocks 20000 --requests 50000
    gen oltp-shift oltp --blocks 40000 --requests 300000 --shift-every 100000 --seed 3
    TRACES="$OUT/oltp.trace $OUT/oltp-rw.trace $OUT/oltp-scan.trace $OUT/loop.trace"
    TRACES="$TRACES $OUT/oltp-shift.trace"
fi
sets=()
for kv in ${SET:-}; do sets+=(--set "$kv"); done
table=$OUT/table.md
{
    if [ -n "${BEFORE:-}" ]; then
        echo "| trace | cache | capacity_blocks | flashtier before | flashtier (real code) | LRU | ARC | LIRS | S3-FIFO | OPT |"
        echo "|---|---|---|---|---|---|---|---|---|---|"
    else
        echo "| trace | cache | capacity_blocks | flashtier (real code) | LRU | ARC | LIRS | S3-FIFO | OPT |"
        echo "|---|---|---|---|---|---|---|---|---|"
    fi
} > "$table"
for t in $TRACES; do
    name=$(basename "$t" .trace)
    for mib in $SIZES; do
        line=$(nice -n 19 "$REPLAY" "$t" --cache-mib "$mib" "${sets[@]}")
        echo "$line" >> "$OUT/replay.log"
        cap=$(sed -n 's/.*capacity_blocks=\([0-9]*\).*/\1/p' <<<"$line")
        ft=$(sed -n 's/.*read_hit_percent=\([0-9.]*\).*/\1/p' <<<"$line")
        if [ -n "${BEFORE:-}" ]; then
            bline=$(nice -n 19 "$BEFORE" "$t" --cache-mib "$mib" "${sets[@]}")
            echo "before: $bline" >> "$OUT/replay.log"
            ft="$(sed -n 's/.*read_hit_percent=\([0-9.]*\).*/\1/p' <<<"$bline") | $ft"
        fi
        json=$OUT/$name-$cap.json
        if [ ! -s "$json" ]; then
            sim=$(nice -n 19 python3 "$HERE/trace_sim.py" "$t" --capacity "$cap" \
                --policies LRU,ARC,LIRS,S3-FIFO,OPT --modes wr-alloc --no-top-c \
                --json "$json.tmp")
            mv "$json.tmp" "$json"
            echo "$sim" >> "$OUT/sim.log"
        fi
        cols=$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
by = {s["policy"]: s["read_hit_pct"][0] for s in r["sim"]}
print(" | ".join(str(by[p]) for p in ("LRU", "ARC", "LIRS", "S3-FIFO", "OPT")))' \
            "$json")
        row="| $name | $mib MiB | $cap | $ft | $cols |"
        echo "$row" | tee -a "$table"
    done
done
echo "table: $table"
