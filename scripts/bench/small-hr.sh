#!/usr/bin/env bash
# Small objects side by side (issue 28's hit-ratio and write targets): flashtier with the
# small-object tier, flashtier without it (a RAM index entry per flash object) and memcached
# extstore, same -m, same flash budget, same memory cgroup (page cache counted), one fresh
# server at a time, RUNS rounds, server order as listed. Per server run:
#   1. fill: every key once (KEYS x VALUE, more than -m holds) at full speed (closed loop);
#   2. for each TRAFFIC entry THETA/SETS, in order, on the same server: TRAFFIC_DUR closed
#      loop (CONNS x DEPTH), zipf THETA, SETS fraction SETs, its own seed; then READ_DUR of
#      GETs only, zipf THETA, another seed (replaying the traffic's own sequence would reward
#      keeping what it wrote). Later entries start from what earlier ones left (same for all).
#   After the fill and after each read phase: COUNT_DUR of uniform GETs over all keys (seed
#   SEED+100+i): its hit ratio x KEYS estimates the keys the server holds, the same way for
#   every server (flashtier's curr_items leaves out the small tier, and adding
#   small_live_items_estimate counts a key held in RAM and in the tier twice).
# Servers (SERVERS, names):
#   ft-small   flashtier --flash FT_LOG --small-flash (FLASH - FT_LOG) --small-item-max SMALL_MAX
#   ft-index   flashtier --flash FLASH (small objects on the main log, a RAM index entry each)
#   mc-ext64   memcached -o ext_path=F:FLASH,ext_item_size=64 (so 100 B items go to flash at all)
#   mc-ext     memcached -o ext_path=F:FLASH (default ext_item_size 512: 100 B items stay in RAM)
#   ft-small-x ft-small with SMALL_X_EXTRA more flags (e.g. "--small-log-percent 30")
# Each server run holds BENCH_LOCK (flock) from start to stop (keep it under 10 min).
# Printed per phase (also OUT/summary.md, OUT/summary.json, by small_hr_table.py): items held,
# read hit ratio, flash bytes written per value byte SET (/proc/PID/io write_bytes; the
# servers' own counters beside it), live share of the tier's flash, server CPU per op, RSS.
# Usage: scripts/bench/small-hr.sh [OUT_DIR]  (root; default bench-results/small-hr-<time>)
# Env [defaults]: RUNS [2]  SERVERS ["ft-small ft-index mc-ext64"]  MEM [64]  FLASH [768]
#   (MiB, the flash budget of every server)  FT_LOG [96] (MiB of it ft-small gives its main
#   log)  SMALL_MAX [300]  KEYS [6000000]  VALUE [100]  TRAFFIC ["0.9/0.1 0.9/0.5 0.99/0.1
#   0.99/0.5"]  TRAFFIC_DUR [20s]  READ_DUR [8s]  COUNT_DUR [5s]  CONNS [8]  DEPTH [8]  SEED [11] (phase i
#   uses SEED+2i, its read SEED+2i+1)  CG_MB [256]  BENCH_LOCK [/tmp/s10/bench.lock; empty:
#   none]  FLASH_DIR [/var/tmp/flashtier-bench], FLASHTIER_BIN, BENCH_BIN, MEMCACHED_BIN,
#   SERVER_THREADS [2], SMALL_X_EXTRA. About 6-7 min per server run on the shared 2-core VM at the defaults.
NAME=small-hr
OUT=${1:-$(cd "$(dirname "$0")/../.." && pwd)/bench-results/small-hr-$(date -u +%Y%m%dT%H%M%SZ)}
RUNS=${RUNS:-2} SERVERS=${SERVERS:-ft-small ft-index mc-ext64} MEM=${MEM:-64} FLASH=${FLASH:-768}
FT_LOG=${FT_LOG:-96} SMALL_MAX=${SMALL_MAX:-300} KEYS=${KEYS:-6000000} VALUE=${VALUE:-100}
TRAFFIC=${TRAFFIC:-0.9/0.1 0.9/0.5 0.99/0.1 0.99/0.5} TRAFFIC_DUR=${TRAFFIC_DUR:-20s}
READ_DUR=${READ_DUR:-8s} COUNT_DUR=${COUNT_DUR:-5s} CONNS=${CONNS:-8} DEPTH=${DEPTH:-8} SEED=${SEED:-11}
CG_MB=${CG_MB:-256} BENCH_LOCK=${BENCH_LOCK-/tmp/s10/bench.lock}
MEMCACHED_BASE_OPTS=${MEMCACHED_OPTS-slab_automove=2} FT_BASE_EXTRA=${FLASHTIER_EXTRA:-}
# shellcheck source=scripts/bench/lib.sh
source "$(dirname "$0")/lib.sh"
preflight
mkdir -p "$OUT/raw"; : > "$OUT/run.log"
machine_json "$OUT/machine.json"
cat > "$OUT/config.json" <<JSON
{"runs": $RUNS, "servers": "$SERVERS", "mem_mb": $MEM, "flash_mib": $FLASH, "ft_log_mib": $FT_LOG,
 "small_max": $SMALL_MAX, "keys": $KEYS, "value": $VALUE, "traffic": "$TRAFFIC",
 "traffic_dur": "$TRAFFIC_DUR", "read_dur": "$READ_DUR", "count_dur": "$COUNT_DUR", "conns": $CONNS, "depth": $DEPTH,
 "seed": $SEED, "cg_mb": $CG_MB, "server_threads": $SERVER_THREADS,
 "memcached_opts": "$MEMCACHED_BASE_OPTS", "small_x_extra": "${SMALL_X_EXTRA:-}"}
JSON
log "out $OUT; load average $(cut -d' ' -f1-3 /proc/loadavg)"
[ -z "$BENCH_LOCK" ] || exec 9> "$BENCH_LOCK"
COMMON=(-k "$KEYS" -v "$VALUE" -c "$CONNS" -d "$DEPTH" --warmup 0s)
for run in $(seq "$RUNS"); do
  for name in $SERVERS; do
    label=$name-r$run
    DIR=$OUT/raw/$label; mkdir -p "$DIR"
    case "$name" in
      ft-small) kind=flashtier-small fsize=${FT_LOG}M SMALL_SIZE=$((FLASH - FT_LOG))MiB FLASHTIER_EXTRA=$FT_BASE_EXTRA ;;
      ft-small-x) kind=flashtier-small fsize=${FT_LOG}M SMALL_SIZE=$((FLASH - FT_LOG))MiB
        FLASHTIER_EXTRA="$FT_BASE_EXTRA ${SMALL_X_EXTRA:?ft-small-x needs SMALL_X_EXTRA}" ;;
      ft-index) kind=flashtier fsize=${FLASH}M FLASHTIER_EXTRA=$FT_BASE_EXTRA ;;
      mc-ext64) kind=memcached fsize=${FLASH}M MEMCACHED_OPTS=$MEMCACHED_BASE_OPTS${MEMCACHED_BASE_OPTS:+,}ext_item_size=64 ;;
      mc-ext) kind=memcached fsize=${FLASH}M MEMCACHED_OPTS=$MEMCACHED_BASE_OPTS ;;
      *) die "unknown server name $name" ;;
    esac
    if [ -n "$BENCH_LOCK" ]; then
      log "$label: waiting for $BENCH_LOCK"
      flock 9
    fi
    start_server "$label" "$kind" "$MEM" "$fsize" "$CG_MB"
    echo "$name" > "$DIR/name"
    cut -d' ' -f1 /proc/loadavg > "$DIR/load_start"
    snap "$DIR/s_start.json"
    log "$label: fill $KEYS x $VALUE B, full speed"
    gen fill fill -k "$KEYS" -v "$VALUE" -c "$CONNS" -d "$DEPTH"
    sleep 2
    snap "$DIR/s_fill.json"
    gen fill-count load --duration "$COUNT_DUR" --dist uniform --get-ratio 1 --seed $((SEED + 100)) "${COMMON[@]}"
    snap "$DIR/s_fill_count.json"
    i=0
    for tr in $TRAFFIC; do
      theta=${tr%/*} sets=${tr#*/}
      getr=$(python3 -c "print(round(1 - $sets, 6))")
      tag=p$i
      log "$label: $tag traffic $TRAFFIC_DUR zipf $theta, $sets SETs, seed $((SEED + 2 * i))"
      gen "$tag-traffic" load --duration "$TRAFFIC_DUR" --dist "zipf:$theta" --get-ratio "$getr" \
        --seed $((SEED + 2 * i)) "${COMMON[@]}"
      snap "$DIR/$tag-s1.json"
      log "$label: $tag read $READ_DUR zipf $theta, GETs only, seed $((SEED + 2 * i + 1))"
      gen "$tag-read" load --duration "$READ_DUR" --dist "zipf:$theta" --get-ratio 1 \
        --seed $((SEED + 2 * i + 1)) "${COMMON[@]}"
      snap "$DIR/$tag-s2.json"
      gen "$tag-count" load --duration "$COUNT_DUR" --dist uniform --get-ratio 1 \
        --seed $((SEED + 101 + i)) "${COMMON[@]}"
      snap "$DIR/$tag-s3.json"
      echo "$theta $sets" > "$DIR/$tag.phase"
      i=$((i + 1))
    done
    cut -d' ' -f1 /proc/loadavg > "$DIR/load_end"
    stop_server
    [ -z "$BENCH_LOCK" ] || flock -u 9
  done
done
log "load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
python3 "$(dirname "$0")/small_hr_table.py" "$OUT" "$VALUE" "$FLASH" "$FT_LOG" | tee "$OUT/summary.md"
log "done: $OUT/summary.md"
