#!/usr/bin/env bash
# Paired runs of two flashtier binaries (OLD, NEW), alternating OLD, NEW each round on a fresh
# server in the same memory cgroup limit, to tell a code change's effect from the shared
# machine's noise. Scenarios (SCENARIOS, in order):
#   ram    RAM-only: fill RAM_KEYS x RAM_VALUE, then closed loop (16x4, zipf 0.99) at GET
#          fractions 0.9 and 0.5 (the SET path)
#   flash  load + read: fill FLASH_KEYS x 4 KiB past RAM (flash part full), closed loop 16x2,
#          zipf 0.99, 90/10
#   steady overwrites past flash: fill STEADY_KEYS x 4 KiB (more than FLASH_SMALL), open loop
#          20k ops/s at 0.5 SETs, then 20k ops/s 90/10 reads (steady.sh's shape)
# Per phase: throughput, hit ratio, server CPU µs/op (flashtier-bench --server-pid); then
# pair_table.py prints each metric's NEW/OLD ratio per round and the median, and the spread of
# OLD against OLD across rounds (the noise).
# Usage: OLD=/path/old/flashtier NEW=/path/new/flashtier scripts/bench/pair.sh [OUT_DIR]  (root)
# Env [default]: ROUNDS [2]  SCENARIOS ["ram flash steady"]  DUR [8s]  WARMUP [2s]
#   RAM_KEYS [500000] RAM_VALUE [100]  FLASH_KEYS [150000] FLASH [1G]  STEADY_KEYS [100000]
#   FLASH_SMALL [256M]  MEM [64]  CG_MB [192]
NAME=pair
OUT=${1:-$(cd "$(dirname "$0")/../.." && pwd)/bench-results/pair-$(date -u +%Y%m%dT%H%M%SZ)}
: "${OLD:?set OLD to the old flashtier binary}" "${NEW:?set NEW to the new flashtier binary}"
ROUNDS=${ROUNDS:-2} SCENARIOS=${SCENARIOS:-ram flash steady} DUR=${DUR:-8s} WARMUP=${WARMUP:-2s}
RAM_KEYS=${RAM_KEYS:-500000} RAM_VALUE=${RAM_VALUE:-100} FLASH_KEYS=${FLASH_KEYS:-150000}
FLASH=${FLASH:-1G} STEADY_KEYS=${STEADY_KEYS:-100000} FLASH_SMALL=${FLASH_SMALL:-256M}
MEM=${MEM:-64} CG_MB=${CG_MB:-192}
FLASHTIER_BIN=$NEW
# shellcheck source=scripts/bench/lib.sh
source "$(dirname "$0")/lib.sh"
preflight
log "out $OUT; OLD $OLD; NEW $NEW; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$ROUNDS"); do
  for scen in $SCENARIOS; do
    for which in old new; do
      if [ "$which" = old ]; then FLASHTIER_BIN=$OLD; else FLASHTIER_BIN=$NEW; fi
      label=$scen-$which-r$round
      DIR=$OUT/raw/$label; mkdir -p "$DIR"
      case "$scen" in
        ram)
          start_server "$label" flashtier "$MEM" "" "$CG_MB"
          gen fill fill -k "$RAM_KEYS" -v "$RAM_VALUE" -c 16
          for getr in 0.9 0.5; do
            gen "g$getr" load -k "$RAM_KEYS" -v "$RAM_VALUE" -c 16 -d 4 --dist zipf:0.99 \
              --get-ratio "$getr" --warmup "$WARMUP" --duration "$DUR"
          done ;;
        flash)
          start_server "$label" flashtier "$MEM" "$FLASH" "$CG_MB"
          gen fill fill -k "$FLASH_KEYS" -v 4096 -c 16 --load-rate 25k
          gen read load -k "$FLASH_KEYS" -v 4096 -c 16 -d 2 --dist zipf:0.99 --get-ratio 0.9 \
            --warmup "$WARMUP" --duration "$DUR" ;;
        steady)
          start_server "$label" flashtier "$MEM" "$FLASH_SMALL" "$CG_MB"
          gen fill fill -k "$STEADY_KEYS" -v 4096 -c 16 --load-rate 25k
          gen overwrite load --rate 20k -k "$STEADY_KEYS" -v 4096 -c 16 -d 4 --dist zipf:0.9 \
            --get-ratio 0.5 --warmup "$WARMUP" --duration "$DUR"
          gen read load --rate 20k -k "$STEADY_KEYS" -v 4096 -c 16 -d 4 --dist zipf:0.9 \
            --get-ratio 0.9 --warmup "$WARMUP" --duration "$DUR" ;;
        *) die "unknown scenario $scen" ;;
      esac
      snap "$DIR/stats.json"
      stop_server
    done
  done
done
log "load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
python3 "$ROOT/scripts/bench/pair_table.py" "$OUT" | tee "$OUT/summary.md"
