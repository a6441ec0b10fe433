#!/usr/bin/env bash
# What the crash journal costs (issue 25): the same binary with journal_mode off, write and
# sync, alternating modes each round on a fresh server in the same memory cgroup. Per round
# and mode: fill KEYS x 4 KiB at full speed past RAM (most items on flash), wait for the
# write-back window, then
#   c8x16   closed loop, 8 connections x 16 pipelined, zipf 0.99, SET_FRAC SETs
#   c16x1   closed loop, 16 connections x 1, same mix (every reply waits for its own commit)
#   open    open loop at RATE ops/s, same mix (latency at a fixed load)
# Every phase has its own seed (its own key sequence). SETs here overwrite keys whose
# versions are on flash: each one appends a tombstone and commits a journal entry.
# DEL_FRAC > 0 also sends deletes (flashtier-bench --delete-ratio, where it has it).
# Per phase: throughput, SET (and DELETE) p50/p99, server CPU us/op. The client shares the
# 2 cores with the server.
# Usage: scripts/bench/journal-cost.sh [OUT_DIR]   (root)
# Env [default]: ROUNDS [3] MODES ["off write sync"] KEYS [150000] FLASH [1G] MEM [64]
#   CG_MB [192] SET_FRAC [0.5] DEL_FRAC [0] RATE [20k] DUR [8s] WARMUP [2s]
NAME=journal
OUT=${1:-$(cd "$(dirname "$0")/../.." && pwd)/bench-results/journal-$(date -u +%Y%m%dT%H%M%SZ)}
ROUNDS=${ROUNDS:-3} MODES=${MODES:-off write sync} KEYS=${KEYS:-150000} FLASH=${FLASH:-1G}
MEM=${MEM:-64} CG_MB=${CG_MB:-192} SET_FRAC=${SET_FRAC:-0.5} DEL_FRAC=${DEL_FRAC:-0}
RATE=${RATE:-20k} DUR=${DUR:-8s} WARMUP=${WARMUP:-2s}
# shellcheck source=scripts/bench/lib.sh
source "$(dirname "$0")/lib.sh"
preflight
machine_json "$OUT/machine.json"
GET_FRAC=$(python3 -c "print(round(1 - $SET_FRAC - $DEL_FRAC, 4))")
MIX=(--get-ratio "$GET_FRAC")
if [ "$DEL_FRAC" != 0 ]; then MIX+=(--delete-ratio "$DEL_FRAC"); fi
log "out $OUT; modes $MODES; $ROUNDS rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$ROUNDS"); do
  for mode in $MODES; do
    label=$mode-r$round
    DIR=$OUT/raw/$label; mkdir -p "$DIR"
    FLASHTIER_EXTRA="--knob journal_mode=$mode"
    start_server "$label" flashtier "$MEM" "$FLASH" "$CG_MB"
    gen fill fill -k "$KEYS" -v 4096 -c 16
    sleep 4 # the write-back window (2 s) and the flush interval (1 s): keys on flash
    gen c8x16 load -k "$KEYS" -v 4096 -c 8 -d 16 --dist zipf:0.99 "${MIX[@]}" \
      --seed $((round * 10 + 1)) --warmup "$WARMUP" --duration "$DUR"
    gen c16x1 load -k "$KEYS" -v 4096 -c 16 -d 1 --dist zipf:0.99 "${MIX[@]}" \
      --seed $((round * 10 + 2)) --warmup "$WARMUP" --duration "$DUR"
    gen open load --rate "$RATE" -k "$KEYS" -v 4096 -c 16 -d 4 --dist zipf:0.99 "${MIX[@]}" \
      --seed $((round * 10 + 3)) --warmup "$WARMUP" --duration "$DUR"
    snap "$DIR/stats.json"
    stop_server
  done
done
python3 "$(dirname "$0")/journal_table.py" "$OUT" | tee "$OUT/table.md"
