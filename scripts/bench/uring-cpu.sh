#!/usr/bin/env bash
# Server CPU per flash-served GET (issue 30, eighth sitting): builds (or one build under
# different io_uring setups) alternated round by round, each run a fresh server holding the
# machine's bench lock. Per run: `flashtier kv -m 64 -t 2 --flash F:1GiB`, 150k x 4 KiB
# filled at full speed, then closed-loop GET-only uniform shapes (default 8x1, 64x1, 8x16;
# about 85 % of GETs come from flash), each with a 2 s warm-up and a measured window.
# Prints per run and shape: GETs/s, client p50/p99, server CPU per GET (utime+stime from
# /proc/PID/stat over the window / GETs the client counted), and from `perf stat -p PID`
# system calls, context switches, io_uring_enter calls and io_uring SQEs per GET (so
# enters / SQE is the number of reads that share one enter and one device doorbell).
# Client and server share the machine's CPUs; the load average is printed with each run.
#
# `--mem 1024` keeps every item in RAM: the same shapes without a flash read, the floor a
# flash GET's CPU is compared with.
#
# Usage: scripts/bench/uring-cpu.sh [--rounds 3] [--shapes 8x1,64x1,8x16] [--duration 10s]
#        [--mem 64]
#        [--out DIR] [--bench PATH] LABEL=[VAR=VAL VAR=VAL ...@]BINARY ...
#   e.g. main=/work/bins/ft-s8main fixed=FLASHTIER_URING=fixed_files@/work/bins/ft-s8-uring
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
ROUNDS=3 SHAPES=8x1,64x1,8x16 DURATION=10s OUT="" BENCH=$ROOT/target/release/flashtier-bench
KEYS=150000 VALUE=4096 MEM=64 LOCK=${BENCH_LOCK:-/tmp/s8/bench.lock}
FLASH_DIR=${FLASH_DIR:-/var/tmp/flashtier-uring-cpu}
SPECS=()
while (($#)); do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --shapes) SHAPES=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --mem) MEM=$2; shift 2 ;;
    --bench) BENCH=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *=*) SPECS+=("$1"); shift ;;
    *) echo "uring-cpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
((${#SPECS[@]})) || { echo "uring-cpu.sh: name at least one LABEL=BINARY" >&2; exit 2; }
OUT=${OUT:-$ROOT/bench-results/uring-cpu-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT" "$FLASH_DIR"
printf '%-10s %-5s %-6s %9s %7s %7s %8s %7s %6s %7s %6s %5s\n' label round shape gets/s p50_ms \
  p99_ms cpu_us/get sysc/get cs/get enter/get sqe/get load1 | tee -a "$OUT/summary.txt"

# One run: a fresh server, fill, every shape. Runs under the bench lock (see the caller).
run_one() {
  local label=$1 round=$2 envs=$3 bin=$4
  local port flash pid shape c d t0 t1 perf_pid load1
  port=$(python3 "$ROOT/scripts/bench/probe.py" free-port)
  flash=$FLASH_DIR/$label.flash; rm -f "$flash"
  local envv=()
  [ -n "$envs" ] && read -r -a envv <<< "$envs"
  env "${envv[@]}" "$bin" kv --listen "127.0.0.1:$port" -m "$MEM" --threads 2 \
    --flash "$flash:1GiB" > "$OUT/$label-$round.log" 2>&1 &
  pid=$!
  python3 "$ROOT/scripts/bench/probe.py" wait-port "$port" "$pid" 20
  "$BENCH" load -s "127.0.0.1:$port" --keys $KEYS -v $VALUE --load-phase --duration 1s \
    --warmup 0s > /dev/null 2> "$OUT/$label-$round.fill.log"
  IFS=, read -r -a shapes <<< "$SHAPES"
  for shape in "${shapes[@]}"; do
    c=${shape%x*} d=${shape#*x}
    local gen=(-s "127.0.0.1:$port" -c "$c" -d "$d" --keys $KEYS -v $VALUE --dist uniform
               --get-ratio 1 --seed "$round")
    "$BENCH" load "${gen[@]}" --warmup 0s --duration 2s > /dev/null 2>&1   # warm-up
    load1=$(cut -d' ' -f1 /proc/loadavg)
    t0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    perf stat -x, -e raw_syscalls:sys_enter,context-switches,syscalls:sys_enter_io_uring_enter,io_uring:io_uring_submit_req \
      -p "$pid" -o "$OUT/$label-$round-$shape.perf" &
    perf_pid=$!
    "$BENCH" load "${gen[@]}" --warmup 0s --duration "$DURATION" \
      --json "$OUT/$label-$round-$shape.json" > /dev/null 2> "$OUT/$label-$round-$shape.log"
    t1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true
    python3 - "$OUT/$label-$round-$shape.json" "$label" "$round" "$shape" $((t1 - t0)) \
      "$(getconf CLK_TCK)" "$OUT/$label-$round-$shape.perf" "$load1" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
path, label, rnd, shape, ticks, hz, perf, load1 = sys.argv[1:9]
r = json.load(open(path))["rows"][-1]
ops = r["completed_ops"]
cpu = int(ticks) / int(hz) * 1e6 / ops if ops else float("nan")
ev = {}
for line in open(perf):
    parts = line.strip().split(",")
    if len(parts) > 2 and parts[0].replace(".", "").isdigit():
        ev[parts[2]] = float(parts[0])
per = lambda k: ev.get(k, float("nan")) / ops if ops else float("nan")
print("%-10s %-5s %-6s %9.0f %7.2f %7.2f %8.1f %7.2f %6.3f %7.3f %6.3f %5s" % (
    label, rnd, shape, r["throughput_ops_per_sec"], r["latency"]["p50_us"] / 1000,
    r["latency"]["p99_us"] / 1000, cpu, per("raw_syscalls:sys_enter"),
    per("context-switches"), per("syscalls:sys_enter_io_uring_enter"),
    per("io_uring:io_uring_submit_req"), load1))
PY
  done
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -f "$flash"
}

for round in $(seq 1 "$ROUNDS"); do
  for spec in "${SPECS[@]}"; do
    label=${spec%%=*} rest=${spec#*=} envs=""
    if [[ $rest == *@* ]]; then envs=${rest%@*}; rest=${rest##*@}; fi
    # One timed run at a time on the machine: hold the lock for the whole server run.
    export -f run_one
    export ROOT BENCH KEYS VALUE MEM FLASH_DIR OUT SHAPES DURATION
    flock "$LOCK" bash -c 'set -eo pipefail; run_one "$@"' _ "$label" "$round" "$envs" "$rest" ||
      echo "$label round $round failed (see $OUT/$label-$round.log)" | tee -a "$OUT/summary.txt"
  done
done
echo "results in $OUT"
