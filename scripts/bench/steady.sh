#!/usr/bin/env bash
# Steady state under overwrites, flashtier vs memcached extstore, same -m and flash size, each
# server in its own memory cgroup (page cache included). Per mix and server, on a fresh server:
#   1. fill: every key once (KEYS x VALUE, more than the flash holds), paced at FILL_RATE;
#   2. overwrite: open loop at OW_RATE for OW_DUR with SET fraction S, zipf THETA;
#   3. read: open loop at READ_RATE for READ_DUR, 90/10 GET/SET, same zipf (ASIDE=1: GETs only,
#      each miss followed by a SET of its key, as a cache-aside client refills).
# Reported per run (docs/benchmarks.md, "Steady state"): items on flash and live values as a
# fraction of the flash after the overwrites, the read phase's hit ratio, flash bytes written per
# byte SET during the overwrites (/proc/PID/io write_bytes, and the server's own counter), server
# CPU per op (utime+stime over the measured window), p50/p99/p99.9.
#
# Usage: scripts/bench/steady.sh [OUT_DIR]     (root; default docs/results/steady,
#        QUICK=1 -> a ~2 min smoke run into bench-results/steady-quick-<time>)
# Env (defaults in brackets, QUICK values in braces):
#   MEMS [64]  FLASH [1G {256M}]  KEYS [500000 {100000}]  VALUE [4096]  CG_MB [2 x mem]
#   MIXES ["0.1:0.9 0.5:0.9 0.1:0.99 0.5:0.99" = SETfraction:zipf theta]
#   FILL_RATE [25k]  OW_RATE [20k]  OW_DUR [30s {6s}]  READ_RATE [20k]  READ_DUR [15s {4s}]
#   WARMUP [2s {1s}]  CONNS [16]  DEPTH [4]  SERVERS ["memcached flashtier"]
#   SETTLE [4] seconds between the fill and the overwrite phase (the fill's last writes land)
#   FLASHTIER_EXTRA (extra flashtier kv flags), MEMCACHED_OPTS [slab_automove=2], FLASH_DIR
#   OW_SEED [2]  READ_SEED [3]: generator seeds of the two phases. They must differ: with one
#   seed the read phase replays the overwrite phase's key sequence (the generator's default,
#   seed 1, for both phases until 2026-11-26), which rewards keeping what was written in the
#   overwrite's first seconds rather than popular keys (docs/benchmarks.md, "Steady state").
#   ASIDE [0]: 1 -> the read phase is a cache-aside client (generator `--cache-aside`,
#   `--get-ratio 1`): what a cache's policy keeps then decides what is refilled.
#   PRESENCE [0]: 1 -> after the read phase GET every key (scripts/bench/presence.py): items
#   held per popularity band and the zipf mass they cover, in raw/LABEL/presence.json; every
#   run also writes misses.md (scripts/bench/misses.py: flashtier's misses by cause)
# Full mode: 8 runs of ~75 s, about 10 minutes.
NAME=steady
QUICK=${QUICK:-0}
if ((QUICK)); then
  OUT=${1:-$(cd "$(dirname "$0")/../.." && pwd)/bench-results/steady-quick-$(date -u +%Y%m%dT%H%M%SZ)}
  FLASH=${FLASH:-256M} KEYS=${KEYS:-100000} OW_DUR=${OW_DUR:-6s} READ_DUR=${READ_DUR:-4s} WARMUP=${WARMUP:-1s}
else
  OUT=${1:-$(cd "$(dirname "$0")/../.." && pwd)/docs/results/steady}
fi
MEMS=${MEMS:-64} FLASH=${FLASH:-1G} KEYS=${KEYS:-500000} VALUE=${VALUE:-4096}
MIXES=${MIXES:-0.1:0.9 0.5:0.9 0.1:0.99 0.5:0.99}
FILL_RATE=${FILL_RATE:-25k} OW_RATE=${OW_RATE:-20k} OW_DUR=${OW_DUR:-30s}
READ_RATE=${READ_RATE:-20k} READ_DUR=${READ_DUR:-15s} WARMUP=${WARMUP:-2s}
CONNS=${CONNS:-16} DEPTH=${DEPTH:-4} SERVERS=${SERVERS:-memcached flashtier} PRESENCE=${PRESENCE:-0}
OW_SEED=${OW_SEED:-2} READ_SEED=${READ_SEED:-3} ASIDE=${ASIDE:-0} SETTLE=${SETTLE:-4}
if ((ASIDE)); then READ_MIX=(--get-ratio 1 --cache-aside); READ_WHAT="GETs, misses refilled"; else READ_MIX=(--get-ratio 0.9); READ_WHAT="90/10"; fi
# shellcheck source=scripts/bench/lib.sh
source "$(dirname "$0")/lib.sh"
preflight
rm -rf "$OUT/raw" "$OUT/raw.tar.xz"; mkdir -p "$OUT/raw"; : > "$OUT/run.log"  # raw.tar.xz: an earlier committed run's archive
machine_json "$OUT/machine.json"
cat > "$OUT/config.json" <<JSON
{"mems": "$MEMS", "flash": "$FLASH", "keys": $KEYS, "value": "$VALUE", "cg_mb": "${CG_MB:-2x mem}",
 "mixes": "$MIXES", "fill_rate": "$FILL_RATE", "ow_rate": "$OW_RATE", "ow_dur": "$OW_DUR",
 "read_rate": "$READ_RATE", "read_dur": "$READ_DUR", "warmup": "$WARMUP", "conns": $CONNS,
 "depth": $DEPTH, "servers": "$SERVERS", "server_threads": $SERVER_THREADS,
 "aside": $ASIDE, "flashtier_extra": "$FLASHTIER_EXTRA", "memcached_opts": "$MEMCACHED_OPTS", "quick": $QUICK}
JSON
log "out $OUT; load average $(cut -d' ' -f1-3 /proc/loadavg)"
COMMON=(-k "$KEYS" -v "$VALUE" -c "$CONNS" -d "$DEPTH" --warmup "$WARMUP")
for mem in $MEMS; do
  cg=${CG_MB:-$((2 * mem))}
  for mix in $MIXES; do
    setf=${mix%%:*} theta=${mix##*:}
    getr=$(python3 -c "print(round(1 - $setf, 6))")
    for kind in $SERVERS; do
      label=$kind-m$mem-s$setf-z$theta
      DIR=$OUT/raw/$label; mkdir -p "$DIR"
      start_server "$label" "$kind" "$mem" "$FLASH" "$cg"
      echo "{\"kind\": \"$kind\", \"mem_mb\": $mem, \"cg_mb\": $cg, \"flash\": \"$FLASH\", \"set_fraction\": $setf, \"theta\": $theta}" > "$DIR/run.json"
      log "$label: fill $KEYS x $VALUE B at $FILL_RATE/s"
      gen fill fill -k "$KEYS" -v "$VALUE" -c "$CONNS" --load-rate "$FILL_RATE"
      # The fill's last SETs reach flash after it (flashtier's write-back window, memcached's
      # background writer): they are the fill's writes, not the overwrite phase's.
      sleep "$SETTLE"
      snap "$DIR/s0.json"
      log "$label: overwrite $OW_DUR at $OW_RATE ops/s, ${setf} SETs, zipf $theta"
      gen overwrite load --rate "$OW_RATE" --duration "$OW_DUR" --dist "zipf:$theta" --get-ratio "$getr" --seed "$OW_SEED" "${COMMON[@]}"
      snap "$DIR/s1.json"
      log "$label: read phase $READ_DUR at $READ_RATE ops/s, $READ_WHAT"
      gen read load --rate "$READ_RATE" --duration "$READ_DUR" --dist "zipf:$theta" "${READ_MIX[@]}" --seed "$READ_SEED" "${COMMON[@]}"
      snap "$DIR/s2.json"
      if ((PRESENCE)); then
        log "$label: presence of all $KEYS keys"
        python3 "$ROOT/scripts/bench/presence.py" "127.0.0.1:$SERVER_PORT" "$KEYS" "$theta" "$DIR/presence.json" > /dev/null
      fi
      stop_server
    done
  done
done
log "load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
python3 "$ROOT/scripts/bench/tables.py" steady "$OUT" | tee "$OUT/summary.md"
python3 "$ROOT/scripts/bench/misses.py" "$OUT" > "$OUT/misses.md" || log "misses.py failed"
log "done: $OUT/summary.md"
