#!/usr/bin/env bash
# Serving-path check: closed-loop shapes (default 16x2 and 8x16) against memcached and/or
# flashtier, one after the other in the same run, each in a 768 MiB cgroup-v1 memory limit,
# -m 256, 4 GiB flash file, 600k keys x 4 KiB, zipf 0.99, 90/10. Prints, per server and shape:
# ops/s, p99 and server CPU per op (utime+stime from /proc/PID/stat over the measured window
# divided by the ops the generator counted). Run as root. The full side-by-side suite with
# plots is compare.sh; this is the quick loop used while changing the serving path. With
# perf available it also prints system calls and context switches per op (server process
# only), which stay comparable on a busy machine where ops/s do not.
#
# Usage: scripts/bench/serving.sh [--servers memcached,flashtier] [--shapes 16x2,8x16]
#        [--duration 10s] [--out DIR] [--flashtier PATH] [--threads N]
# A server may be LABEL=PATH (a flashtier binary), to compare builds in one run:
#   --servers memcached,before=/tmp/flashtier.old,after=target/release/flashtier
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
SERVERS=memcached,flashtier SHAPES=16x2,8x16 DURATION=10s THREADS=2
KEYS=600000 VALUE=4096 MEM=256 CGLIM=768 FLASH_SIZE=4G LOAD_RATE=20k
FLASHTIER_BIN=$ROOT/target/release/flashtier OUT=""
FLASH_DIR=${FLASH_DIR:-/var/tmp/flashtier-serving}
while (($#)); do
  case "$1" in
    --servers) SERVERS=$2; shift 2 ;;
    --shapes) SHAPES=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --flashtier) FLASHTIER_BIN=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "serving.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-$ROOT/bench-results/serving-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT" "$FLASH_DIR"
BENCH=$ROOT/target/release/flashtier-bench
PROBE="python3 $ROOT/scripts/bench/probe.py"
TICK=$(getconf CLK_TCK)
PID="" CG=""
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
  [ -n "$CG" ] && rmdir "$CG" 2>/dev/null || true
  rm -f "$FLASH_DIR"/*.flash
}
trap cleanup EXIT
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

IFS=, read -r -a KINDS <<< "$SERVERS"
IFS=, read -r -a SHAPE_LIST <<< "$SHAPES"
PERF=0
perf stat -e instructions true > /dev/null 2>&1 && PERF=1
printf '%-10s %-6s %10s %9s %9s %8s %8s %8s %6s\n' server shape ops/s p50_ms p99_ms hit cpu_us/op \
  sysc/op cs/op | tee "$OUT/summary.txt"
for spec in "${KINDS[@]}"; do
  kind=${spec%%=*} bin=$FLASHTIER_BIN
  [[ $spec == *=* ]] && bin=${spec#*=}
  port=$($PROBE free-port)
  flash=$FLASH_DIR/$kind.flash; rm -f "$flash"
  CG=/sys/fs/cgroup/memory/serving_$kind
  [ -d "$CG" ] && rmdir "$CG"
  mkdir "$CG"; echo $((CGLIM << 20)) > "$CG/memory.limit_in_bytes"
  case $kind in
    memcached) cmd=(/usr/bin/memcached -u root -l 127.0.0.1 -p "$port" -m $MEM -U 0 -t "$THREADS"
                    -o "ext_path=$flash:$FLASH_SIZE,slab_automove=2") ;;
    *) cmd=("$bin" kv --listen "127.0.0.1:$port" -m $MEM --threads "$THREADS"
                    --flash "$flash:$FLASH_SIZE") ;;
  esac
  sync; echo 3 > /proc/sys/vm/drop_caches
  bash -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' _ "$CG" "${cmd[@]}" > "$OUT/$kind.log" 2>&1 &
  PID=$!
  $PROBE wait-port "$port" "$PID" 20
  "$BENCH" load -s "127.0.0.1:$port" --keys $KEYS -v $VALUE --load-phase --load-rate $LOAD_RATE \
    --duration 1s --warmup 0s > /dev/null 2> "$OUT/$kind.load.log"
  seed=10
  for shape in "${SHAPE_LIST[@]}"; do
    c=${shape%x*} d=${shape#*x}
    gen=(-s "127.0.0.1:$port" -c "$c" -d "$d" --keys $KEYS -v $VALUE --dist zipf:0.99 --get-ratio 0.9)
    # Warm-up and measurement draw different key sequences (the same seed would replay the
    # warm-up's SETs as hits); both servers get the same sequences.
    seed=$((seed + 2))
    "$BENCH" load "${gen[@]}" --seed "$seed" --warmup 0s --duration 3s > /dev/null 2>&1   # warm-up
    t0=$(cpu_ticks "$PID") perf_pid=""
    if ((PERF)); then
      perf stat -x, -e raw_syscalls:sys_enter,context-switches -p "$PID" -o "$OUT/$kind-$shape.perf" &
      perf_pid=$!
    fi
    "$BENCH" load "${gen[@]}" --seed "$((seed + 1))" --warmup 0s --duration "$DURATION" --json "$OUT/$kind-$shape.json" \
      > /dev/null 2> "$OUT/$kind-$shape.log"
    t1=$(cpu_ticks "$PID")
    if [ -n "$perf_pid" ]; then kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true; fi
    python3 - "$OUT/$kind-$shape.json" "$kind" "$shape" $((t1 - t0)) "$TICK" "$OUT/$kind-$shape.perf" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
path, kind, shape, ticks, hz = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
j = json.load(open(path))
r = j["rows"][-1]
ops, tput, hit = r["completed_ops"], r["throughput_ops_per_sec"], r["hit_ratio"]
p50, p99 = r["latency"]["p50_us"], r["latency"]["p99_us"]
cpu = ticks / hz * 1e6 / ops if ops else float("nan")
f = lambda x, k=1.0: "%.2f" % (x / k) if isinstance(x, (int, float)) else "?"
extra = ""
try:
    ev = {}
    for line in open(sys.argv[6]):
        parts = line.strip().split(",")
        if len(parts) > 2 and parts[0].replace(".", "").isdigit():
            ev[parts[2]] = float(parts[0])
    extra = " %8.2f %6.3f" % (ev["raw_syscalls:sys_enter"] / ops, ev["context-switches"] / ops)
except (OSError, KeyError, ZeroDivisionError):
    pass
print("%-10s %-6s %10.0f %9s %9s %8s %8.1f%s" % (kind, shape, tput, f(p50, 1000), f(p99, 1000), f(hit), cpu, extra))
PY
  done
  kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""
  rmdir "$CG" 2>/dev/null || true; CG=""
  rm -f "$flash"
done
echo "results in $OUT"
