#!/usr/bin/env bash
# Hit ratio vs RAM on the steady-state shape: steady.sh's fill -> overwrite -> read sequence for
# flashtier and memcached at each -m of MEMS (cgroup = 2 x -m, same flash file size), one mix;
# then tables.py ram: summary.md/json and hit-ratio-vs-ram.png (read-phase hit ratio vs -m).
# Usage: scripts/bench/hit-ratio-ram.sh [OUT_DIR]   (root; default docs/results/hit-ratio-ram,
#        QUICK=1 -> smoke run into bench-results/hit-ratio-ram-quick-<time>)
# Env: MEMS ["64 128 256 512" {"64 128"}], MIX ["0.5:0.9" = SET fraction:zipf theta], and every
#      steady.sh variable (FLASH, KEYS, OW_DUR, READ_DUR, ...). Full mode: about 10 minutes.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
QUICK=${QUICK:-0}
if ((QUICK)); then
  OUT=${1:-$ROOT/bench-results/hit-ratio-ram-quick-$(date -u +%Y%m%dT%H%M%SZ)}
  MEMS=${MEMS:-64 128}
else
  OUT=${1:-$ROOT/docs/results/hit-ratio-ram}
fi
export MEMS=${MEMS:-64 128 256 512} MIXES=${MIX:-0.5:0.9} QUICK
"$ROOT/scripts/bench/steady.sh" "$OUT" > /dev/null
python3 "$ROOT/scripts/bench/tables.py" ram "$OUT" > "$OUT/summary.md"
cat "$OUT/summary.md"
[ -f "$OUT/hit-ratio-vs-ram.png" ] || echo "hit-ratio-ram.sh: no plot written (matplotlib?)" >&2
