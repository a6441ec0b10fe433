#!/usr/bin/env bash
# Peak memory of the KV face's flash fill in a memory cgroup: flashtier kv -m MEM with a flash
# file, in a cgroup of CG_MB, loaded with KEYS x VALUE (steady.sh's fill phase, more than the
# flash holds, so reclaim runs). Samples RSS and the cgroup's usage every 0.2 s and reports the
# cgroup's memory.max_usage_in_bytes, peak RSS, the OOM-kill count and the server's flash
# working-memory stats (flash_work_bytes, flash_work_bytes_peak, flash_work_limit).
# Fails (exit 1) if the server was OOM-killed or the cgroup peak exceeds the documented bound
# (docs/eviction.md, "Flash working memory"): MEM + flash_work_limit_bytes + index_bytes +
# ghost_bytes + FIXED_MB (binary pages, thread stacks, allocator, connections, queues).
#
# Usage: scripts/bench/kvmem.sh [OUT_DIR]   (root; default bench-results/kvmem-<time>)
# Env: MEM [64]  FLASH [1G]  KEYS [500000]  VALUE [4096]  CG_MB [128]  FILL_RATE [25k]
#      RUNS [1]  FIXED_MB [36]  FLASHTIER_EXTRA  BOUND_MB (replaces MEM + FIXED_MB)
NAME=kvmem
OUT=${1:-$(cd "$(dirname "$0")/../.." && pwd)/bench-results/kvmem-$(date -u +%Y%m%dT%H%M%SZ)}
MEM=${MEM:-64} FLASH=${FLASH:-1G} KEYS=${KEYS:-500000} VALUE=${VALUE:-4096} CG_MB=${CG_MB:-128}
FILL_RATE=${FILL_RATE:-25k} RUNS=${RUNS:-1} CONNS=${CONNS:-16} FIXED_MB=${FIXED_MB:-36}
# shellcheck source=scripts/bench/lib.sh
source "$(dirname "$0")/lib.sh"
preflight
: > "$OUT/run.log"
fail=0
for run in $(seq 1 "$RUNS"); do
  label=flashtier-m$MEM-run$run
  DIR=$OUT/raw/$label; mkdir -p "$DIR"
  start_server "$label" flashtier "$MEM" "$FLASH" "$CG_MB"
  ( # sampler: time, RSS kB, cgroup usage bytes
    while kill -0 "$SERVER_PID" 2> /dev/null; do
      rss=$(awk '/^VmRSS/ {print $2}' "/proc/$SERVER_PID/status" 2> /dev/null || echo 0)
      echo "$(date +%s.%N) ${rss:-0} $(cat "$SERVER_CG/memory.usage_in_bytes" 2> /dev/null || echo 0)"
      sleep 0.2
    done > "$DIR/samples.txt" ) &
  sampler=$!
  log "$label: fill $KEYS x $VALUE B at $FILL_RATE/s"
  ok=1
  "$BENCH" fill -s "127.0.0.1:$SERVER_PORT" -k "$KEYS" -v "$VALUE" -c "$CONNS" \
    --load-rate "$FILL_RATE" --json "$DIR/fill.json" > "$DIR/fill.txt" 2> "$DIR/fill.err" || ok=0
  sleep 2
  oom=$(awk '/oom_kill / {print $2}' "$SERVER_CG/memory.oom_control" 2> /dev/null || echo '?')
  peak=$(cat "$SERVER_CG/memory.max_usage_in_bytes")
  stats="" limit="" index="" ghost=""
  if kill -0 "$SERVER_PID" 2> /dev/null; then
    printf 'stats\r\nstats slabs\r\nstats extstore\r\nquit\r\n' \
      | timeout 5 nc -q1 127.0.0.1 "$SERVER_PORT" | tr -d '\r' > "$DIR/stats.txt" || true
    grep -q '^STAT pid ' "$DIR/stats.txt" || ok=0
    stats=$(awk '/flash_work|extstore_work/ {print $2 "=" $3}' "$DIR/stats.txt" | tr '\n' ' ')
  else
    ok=0
  fi
  kill "$sampler" 2> /dev/null || true; wait "$sampler" 2> /dev/null || true
  peak_rss=$(awk 'BEGIN {m = 0} $2 > m {m = $2} END {print m * 1024}' "$DIR/samples.txt")
  stat() { awk -v k="$1" '$1 == "STAT" && $2 == k {print $3; exit}' "$DIR/stats.txt" 2> /dev/null; }
  limit=$(stat flash_work_limit_bytes) index=$(stat index_bytes) ghost=$(stat ghost_bytes)
  bound=$(( ${BOUND_MB:-$(( MEM + FIXED_MB ))} * 1048576 + ${limit:-0} + ${index:-0} + ${ghost:-0} ))
  log "$label: oom_kills=$oom cgroup_peak=$((peak / 1048576)) MiB ($peak) peak_rss=$((peak_rss / 1048576)) MiB bound=$((bound / 1048576)) MiB $stats"
  echo "{\"run\": $run, \"mem_mb\": $MEM, \"cg_mb\": $CG_MB, \"oom_kills\": \"$oom\", \"cgroup_peak\": $peak, \"peak_rss\": $peak_rss, \"bound\": $bound, \"fill_ok\": $ok, \"stats\": \"$stats\"}" > "$DIR/result.json"
  if ((ok == 0)) || [ "$oom" != 0 ] || ((peak > bound)); then
    log "$label: FAILED (fill_ok=$ok oom_kills=$oom peak $peak > bound $bound?)"
    fail=1
  fi
  stop_server
done
exit $fail
