#!/usr/bin/env bash
# Issue 5's full side-by-side run, one command: scenarios a+e (one sweep: a's workload at
# e's offered loads), c, d, f (flash-read ceiling), hit ratio vs RAM budget on d's workload,
# and the block-face benchmark. About 35 minutes on the 2-core VM. Run as root on an idle
# machine (every compare.sh run records the load average it started with).
# Usage: scripts/bench/all.sh [OUT_DIR]      (default bench-results/all-<UTC time>)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-bench-results/all-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
cargo build -q --release -p flashtier-server -p flashtier-bench
run() { echo "[all $(date -u +%H:%M:%S)] $*" >&2; "$@"; }
run scripts/bench/compare.sh --scenario e --out "$OUT/ae" > "$OUT/ae.log" 2>&1
run scripts/bench/compare.sh --scenario c --out "$OUT/c" > "$OUT/c.log" 2>&1
run scripts/bench/compare.sh --scenario d --out "$OUT/d" > "$OUT/d.log" 2>&1
run scripts/bench/compare.sh --scenario f --out "$OUT/f" > "$OUT/f.log" 2>&1
run scripts/bench/hit-ratio-sweep.sh --scenario d --mems 128,256,512 --rates 10k --no-fio \
  --out "$OUT/hit-ratio" > "$OUT/hit-ratio.log" 2>&1
RUNTIME=${RUNTIME:-20} run scripts/bench/block.sh "$OUT/block" > "$OUT/block.log" 2>&1
echo "[all $(date -u +%H:%M:%S)] done: $OUT/*/summary.md, $OUT/hit-ratio/hit-ratio.png, $OUT/block" >&2
