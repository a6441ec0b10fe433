#!/usr/bin/env bash
# Read hits right after a restart: warm the cache with skewed random reads, then restart
# flashtier cleanly (SIGTERM: the clean blocks are kept by the shutdown snapshot) and after
# a crash (kill -9: clean blocks are kept when intents and floors prove them current),
# measuring the read hit ratio and IOPS of the first RUNTIME seconds after each restart
# against the warm steady state, and the clean blocks each restart kept.
#
# Usage: scripts/bench/block-restart-hits.sh [OUTDIR]
# Env: SIZE (1G), CACHE (512M), DELAY (4ms), RUNTIME (s, 10), WARM (s, 30),
#      DIST (pareto:0.9), FLASHTIER (binary, target/release/flashtier).
set -euo pipefail
SIZE=${SIZE:-1G}
CACHE=${CACHE:-512M}
DELAY=${DELAY:-4ms}
RUNTIME=${RUNTIME:-10}
WARM=${WARM:-30}
DIST=${DIST:-pareto:0.9}
FT=${FLASHTIER:-target/release/flashtier}
OUT=${1:-data/bench/block-restart-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
. "$(dirname "$0")/block-lib.sh"
block_setup ftrestart
slow_backing
start() { start_flashtier "$OUT/flashtier.log"; }
URI="nbd+unix:///?socket=$W/ft.sock"
load() { # name seconds
    fio --name="$1" --ioengine=nbd --uri="$URI" --rw=randread --bs=4k --randrepeat=0 \
        --random_distribution="$DIST" --iodepth=16 --size="$SIZE" --runtime="$2" \
        --time_based --output-format=json >"$OUT/$1.json" 2>/dev/null
    python3 -c '
import json,sys
t=open(sys.argv[1]).read(); j=json.loads(t[t.index("{"):])["jobs"][0]
print(round(j["read"]["iops"]))' "$OUT/$1.json"
}
measure() { # label
    ctl reset-stats >/dev/null
    local iops
    iops=$(load "$1" "$RUNTIME")
    echo "$1: iops=$iops read_hit_percent=$(stat read_hit_percent)" \
        "recovered_clean_blocks=$(stat recovered_clean_blocks) cached_blocks=$(stat cached_blocks)"
}
stop() { # signal
    kill "-$1" "$FTPID"
    while kill -0 "$FTPID" 2>/dev/null; do sleep 0.1; done
    wait "$FTPID" 2>/dev/null || true
    FTPID=
}
start
load warm "$WARM" >/dev/null
S=$OUT/summary.txt
echo "size=$SIZE cache=$CACHE dist=$DIST delay=$DELAY first ${RUNTIME}s after each restart" >"$S"
measure steady >>"$S"
stop TERM
start
measure after_clean_restart >>"$S"
load rewarm "$WARM" >/dev/null
stop KILL
start
measure after_kill9_restart >>"$S"
cat "$S"
