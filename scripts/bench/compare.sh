#!/usr/bin/env bash
# Side-by-side benchmark: the same workload against memcached 1.6 and flashtier, one after the
# other, each inside its own cgroup-v1 memory limit (page cache counted), caches dropped
# before each run. Writes generator JSON, server-side measurements, fio ceiling (flash
# scenarios), summary.json, summary.md and latency.png to the output directory.
#
# Usage: scripts/bench/compare.sh [--scenario a|b|c|d|e] [options]     (run as root)
#   --scenario S        preset workload (default b: RAM-only, 100-byte values); see below
#   --servers LIST      comma list of memcached|flashtier, run in order (default
#                       memcached,flashtier); ratios are (each later server) ÷ (first)
#   --out DIR           output directory (default bench-results/<scenario>-<UTC time>)
#   --flashtier PATH    flashtier binary (default $FLASHTIER_BIN or target/release/flashtier)
#   --flashtier-args S  extra flashtier kv arguments (default $FLASHTIER_EXTRA)
#   --flash-dir DIR     where flash files live; must be on the real disk (default
#                       /var/tmp/flashtier-bench)
#   --rates LIST        override the preset's rates (e.g. max,20k,40k)
#   --duration D --warmup D --keys N --value-size V --dist D --get-ratio F
#   --connections N --depth N --threads N (generator)  --server-threads N (both servers)
#   --mem MB            server RAM budget (-m / --memory)
#   --cg-limit MB       cgroup memory limit (RAM + page cache), same for both servers
#   --flash-size SIZE   flash file size (e.g. 8G); empty = RAM-only
#   --no-load-phase     skip the sequential load of every key
#   --load-rate R       pace the load phase at R SETs/s (preset: 20k on flash scenarios,
#                       unpaced on RAM-only); "max" = unpaced
#   --memcached-opts S  extra memcached -o options, comma-separated (preset on flash
#                       scenarios: slab_automove=2, see docs/benchmarks.md); "" for none
#   --no-fio            skip the fio random-read ceiling
#   --no-plot           skip the PNG plot
#   --verify            values carry a key pattern; GET hits are checked byte-exact
#   --rt                run both servers and the generator at SCHED_FIFO priority 10 (same for
#                       both), so other work on a shared machine does not add scheduling delay
#
# Presets (also in docs/benchmarks.md):
#   a  flash: data ~10x the cgroup limit, zipf 0.99, 90/10 get/set, 4 KiB values
#   b  RAM-only: 100-byte values, everything fits in RAM
#   c  flash: mixed 100 B - 64 KiB values
#   d  flash: data larger than the flash file (eviction quality: hit ratio)
#   e  latency-vs-offered-load sweep of (a)
#   f  flash-read ceiling: data as (a), uniform keys, GETs only (nearly every GET from flash)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
PROBE="python3 $ROOT/scripts/bench/probe.py"

SCENARIO=b
SERVERS=memcached,flashtier
OUT=""
FLASHTIER_BIN=${FLASHTIER_BIN:-$ROOT/target/release/flashtier}
FLASHTIER_EXTRA=${FLASHTIER_EXTRA:-}
MEMCACHED_BIN=${MEMCACHED_BIN:-memcached}
FLASH_DIR=${FLASH_DIR:-/var/tmp/flashtier-bench}
DO_FIO=1 DO_PLOT=1 DO_LOAD=1 VERIFY=0 RT=0
declare -A OVR=()

while (($#)); do
  case "$1" in
    --scenario) SCENARIO=$2; shift 2 ;;
    --servers) SERVERS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --flashtier) FLASHTIER_BIN=$2; shift 2 ;;
    --flashtier-args) FLASHTIER_EXTRA=$2; shift 2 ;;
    --flash-dir) FLASH_DIR=$2; shift 2 ;;
    --rates|--duration|--warmup|--keys|--value-size|--dist|--get-ratio|--connections|--depth|--threads|--server-threads|--mem|--cg-limit|--flash-size|--load-rate|--memcached-opts)
      OVR[${1#--}]=$2; shift 2 ;;
    --no-load-phase) DO_LOAD=0; shift ;;
    --no-fio) DO_FIO=0; shift ;;
    --no-plot) DO_PLOT=0; shift ;;
    --verify) VERIFY=1; shift ;;
    --rt) RT=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

# ---- scenario presets --------------------------------------------------------------------
# Common defaults: 16 connections x depth 4 on one generator thread, 2 server threads.
CONNS=16 DEPTH=4 GTHREADS=1 STHREADS=2 DIST=zipf:0.99 GETR=0.9 WARMUP=3s DURATION=15s
LOAD_RATE=max MC_OPTS=""
case "$SCENARIO" in
  a) MEM=256 CGLIM=512 FLASH_SIZE=8G KEYS=1250000 VALUE=4096 RATES=max,5k,10k,20k,40k DURATION=20s ;;
  b) MEM=1024 CGLIM=1536 FLASH_SIZE="" KEYS=1000000 VALUE=100 RATES=max,10k,20k,40k,60k,80k ;;
  c) MEM=256 CGLIM=512 FLASH_SIZE=8G KEYS=400000 VALUE=100:50,4096:40,65536:10 RATES=max,2k,5k,10k,20k DURATION=20s ;;
  d) MEM=256 CGLIM=512 FLASH_SIZE=2G KEYS=1500000 VALUE=4096 RATES=max,10k DURATION=20s ;;
  e) MEM=256 CGLIM=512 FLASH_SIZE=8G KEYS=1250000 VALUE=4096 RATES=max,2k,5k,10k,15k,20k,30k,40k,60k DURATION=15s ;;
  f) MEM=256 CGLIM=512 FLASH_SIZE=8G KEYS=1250000 VALUE=4096 RATES=max,20k DIST=uniform GETR=1.0 ;;
  *) echo "compare.sh: unknown scenario $SCENARIO (a|b|c|d|e|f)" >&2; exit 2 ;;
esac
RATES=${OVR[rates]:-$RATES}; DURATION=${OVR[duration]:-$DURATION}; WARMUP=${OVR[warmup]:-$WARMUP}
KEYS=${OVR[keys]:-$KEYS}; VALUE=${OVR[value-size]:-$VALUE}; DIST=${OVR[dist]:-$DIST}
GETR=${OVR[get-ratio]:-$GETR}; CONNS=${OVR[connections]:-$CONNS}; DEPTH=${OVR[depth]:-$DEPTH}
GTHREADS=${OVR[threads]:-$GTHREADS}; STHREADS=${OVR[server-threads]:-$STHREADS}
MEM=${OVR[mem]:-$MEM}; CGLIM=${OVR[cg-limit]:-$CGLIM}; FLASH_SIZE=${OVR[flash-size]-$FLASH_SIZE}
# memcached's extstore keeps an item header in RAM per flash item; with default slab
# rebalancing the header slab class starves during a bulk load and flashed items are lost
# (measured: 44% vs 79% hit ratio after a 1.6 GB load at -m 256). Give the peer the
# aggressive slab mover and a paced load on flash scenarios.
if [ -n "$FLASH_SIZE" ]; then LOAD_RATE=20k MC_OPTS=slab_automove=2; fi
[ "$SCENARIO" = c ] && LOAD_RATE=10k
LOAD_RATE=${OVR[load-rate]:-$LOAD_RATE}; MC_OPTS=${OVR[memcached-opts]-$MC_OPTS}

[ "$(id -u)" = 0 ] || { echo "compare.sh: needs root (cgroups, drop_caches)" >&2; exit 2; }
[ -d /sys/fs/cgroup/memory ] || { echo "compare.sh: no cgroup v1 memory controller at /sys/fs/cgroup/memory" >&2; exit 2; }
OUT=${OUT:-$ROOT/bench-results/$SCENARIO-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT" "$FLASH_DIR"
log() { printf '[compare %s] %s\n' "$(date -u +%H:%M:%S)" "$*" | tee -a "$OUT/run.log" >&2; }

# Fail before spending any time if a server binary is missing.
IFS=, read -r -a KINDS <<< "$SERVERS"
for kind in "${KINDS[@]}"; do
  case "$kind" in
    memcached) command -v "$MEMCACHED_BIN" > /dev/null || { echo "compare.sh: $MEMCACHED_BIN not found" >&2; exit 2; } ;;
    flashtier) [ -x "$FLASHTIER_BIN" ] || { echo "compare.sh: no flashtier binary at $FLASHTIER_BIN (cargo build --release, or --flashtier PATH)" >&2; exit 2; } ;;
    *) echo "compare.sh: unknown server $kind (memcached|flashtier)" >&2; exit 2 ;;
  esac
done

# ---- build the generator -----------------------------------------------------------------
cargo build -q --release -p flashtier-bench
BENCH=$ROOT/target/release/flashtier-bench

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# ---- machine facts -----------------------------------------------------------------------
{
  echo "{"
  echo "  \"utc\": \"$(date -u +%FT%TZ)\","
  echo "  \"kernel\": \"$(uname -r)\","
  echo "  \"cpus\": $(nproc),"
  echo "  \"cpu_model\": \"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//;s/"//g')\","
  echo "  \"mem_total_kb\": $(awk '/MemTotal/{print $2}' /proc/meminfo),"
  echo "  \"loadavg_at_start\": \"$(cut -d' ' -f1-3 /proc/loadavg)\","
  echo "  \"memcached_version\": \"$($MEMCACHED_BIN -V 2>&1 | head -1)\","
  echo "  \"flashtier_bin\": \"$FLASHTIER_BIN\","
  echo "  \"flashtier_version\": \"$([ -x "$FLASHTIER_BIN" ] && "$FLASHTIER_BIN" --version 2>/dev/null | head -1 | sed 's/"//g')\","
  echo "  \"git_rev\": \"$(git rev-parse --short HEAD 2>/dev/null || echo unknown)\","
  echo "  \"flash_dir_fs\": \"$(df -T "$FLASH_DIR" | awk 'NR==2{print $1" "$2}')\""
  echo "}"
} > "$OUT/machine.json"

cat > "$OUT/scenario.json" <<JSON
{"scenario": "$SCENARIO", "servers": "$SERVERS", "mem_mb": $MEM, "cgroup_limit_mb": $CGLIM,
 "flash_size": "${FLASH_SIZE}", "keys": $KEYS, "value_size": "$VALUE", "dist": "$DIST",
 "get_ratio": $GETR, "rates": "$RATES", "warmup": "$WARMUP", "duration": "$DURATION",
 "connections": $CONNS, "depth": $DEPTH, "generator_threads": $GTHREADS,
 "server_threads": $STHREADS, "load_phase": $DO_LOAD, "load_rate": "$LOAD_RATE",
 "memcached_opts": "$MC_OPTS", "verify": $VERIFY, "rt": $RT}
JSON
log "scenario $SCENARIO -> $OUT"

# ---- raw device ceiling ------------------------------------------------------------------
if [ -n "$FLASH_SIZE" ] && ((DO_FIO)); then
  log "fio 4 KiB random-read ceiling on $FLASH_DIR"
  drop_caches
  fio --name=rr --filename="$FLASH_DIR/fio.test" --size=2G --rw=randread --bs=4k --direct=1 \
    --ioengine=io_uring --iodepth=32 --runtime=15 --time_based --output-format=json \
    > "$OUT/fio.json" 2> "$OUT/fio.err" || log "fio failed (see fio.err)"
  log "fio 8 KiB random-read ceiling (a 4 KiB item's record spans two pages)"
  fio --name=rr8 --filename="$FLASH_DIR/fio.test" --size=2G --rw=randread --bs=8k --direct=1 \
    --ioengine=io_uring --iodepth=32 --runtime=10 --time_based --output-format=json \
    > "$OUT/fio8k.json" 2> "$OUT/fio8k.err" || log "fio 8k failed (see fio8k.err)"
  rm -f "$FLASH_DIR/fio.test"
fi

# ---- one server run ----------------------------------------------------------------------
SERVER_PID=""
CG=""
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    sleep 1
    kill -KILL "$SERVER_PID" 2>/dev/null || true
  fi
  if [ -n "$CG" ] && [ -d "$CG" ]; then rmdir "$CG" 2>/dev/null || true; fi
}
trap cleanup EXIT

stop_server() {
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
  for _ in 1 2 3; do
    rmdir "$CG" 2>/dev/null && break
    echo 0 > "$CG/memory.force_empty" 2>/dev/null || true
    sleep 0.5
  done
  CG=""
}

run_one() { # label kind
  local label=$1 kind=$2 port flash="" cmd
  port=$($PROBE free-port)
  CG=/sys/fs/cgroup/memory/flashtier_bench_$label
  [ -d "$CG" ] && rmdir "$CG"
  mkdir "$CG"
  echo $((CGLIM * 1024 * 1024)) > "$CG/memory.limit_in_bytes"
  if [ -n "$FLASH_SIZE" ]; then flash=$FLASH_DIR/$label.flash; rm -f "$flash"; fi
  case "$kind" in
    memcached)
      cmd=("$MEMCACHED_BIN" -u root -l 127.0.0.1 -p "$port" -m "$MEM" -U 0 -t "$STHREADS")
      local opts=$MC_OPTS
      [ -n "$flash" ] && opts="ext_path=$flash:$FLASH_SIZE${opts:+,$opts}"
      [ -n "$opts" ] && cmd+=(-o "$opts")
      ;;
    flashtier)
      [ -x "$FLASHTIER_BIN" ] || { log "no flashtier binary at $FLASHTIER_BIN; build it or pass --flashtier"; exit 2; }
      cmd=("$FLASHTIER_BIN" kv --listen "127.0.0.1:$port" -m "$MEM" --threads "$STHREADS")
      # flashtier runs on data/flash.bin by default: a RAM-only scenario must say so.
      if [ -n "$flash" ]; then cmd+=(--flash "$flash:$FLASH_SIZE"); else cmd+=(--ram-only); fi
      # shellcheck disable=SC2206
      [ -n "$FLASHTIER_EXTRA" ] && cmd+=($FLASHTIER_EXTRA)
      ;;
    *) log "unknown server kind $kind"; exit 2 ;;
  esac
  ((RT)) && cmd=(chrt -f 10 "${cmd[@]}")
  drop_caches
  echo 0 > "$CG/memory.max_usage_in_bytes"
  log "$label: ${cmd[*]} (cgroup limit ${CGLIM} MiB)"
  # The shell joins the cgroup, then becomes the server: every page it or the kernel on its
  # behalf allocates (page cache of the flash file included) is charged to the cgroup.
  bash -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' _ "$CG" "${cmd[@]}" \
    > "$OUT/$label.server.log" 2>&1 &
  SERVER_PID=$!
  $PROBE wait-port "$port" "$SERVER_PID" 20
  local gen=(sweep -s "127.0.0.1:$port" --rates "$RATES" -c "$CONNS" -d "$DEPTH" -t "$GTHREADS"
    --keys "$KEYS" --value-size "$VALUE" --dist "$DIST" --get-ratio "$GETR"
    --warmup "$WARMUP" --duration "$DURATION" --json "$OUT/$label.json")
  ((DO_LOAD)) && gen+=(--load-phase --load-rate "$LOAD_RATE")
  ((VERIFY)) && gen+=(--verify)
  log "$label: flashtier-bench ${gen[*]}"
  local prefix=()
  ((RT)) && prefix=(chrt -f 10)
  if ! "${prefix[@]}" "$BENCH" "${gen[@]}" > "$OUT/$label.table.txt" 2> "$OUT/$label.bench.log"; then
    log "$label: generator failed:"; tail -5 "$OUT/$label.bench.log" >&2
    stop_server; exit 1
  fi
  cat "$OUT/$label.table.txt" >&2
  $PROBE collect "$label" "$SERVER_PID" "$port" "$CG" "$flash" "$OUT/$label.server.json"
  stop_server
  [ -n "$flash" ] && rm -f "$flash"
  return 0
}

LABELS=()
for kind in "${KINDS[@]}"; do
  label=$kind n=2
  while [[ " ${LABELS[*]} " == *" $label "* ]]; do label=$kind-$n; n=$((n + 1)); done
  LABELS+=("$label")
  run_one "$label" "$kind"
done

plot_flag=()
if ((DO_PLOT)); then
  python3 -c 'import matplotlib' 2>/dev/null || python3 -m pip install -q matplotlib >&2 || true
else
  plot_flag=(--no-plot)
fi
python3 "$ROOT/scripts/bench/report.py" "$OUT" "${plot_flag[@]}" "${LABELS[@]}"
log "done: $OUT/summary.md"
