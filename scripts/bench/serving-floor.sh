#!/usr/bin/env bash
# The serving floor (issue 30): how much of a request's CPU and latency is the kernel's and
# the device's, measured beside memcached in the same run.
# Per round:
#   fio on a written file in FLASH_DIR (random 8 KiB O_DIRECT reads, io_uring): QD1 paced at
#     FIO_RATE reads/s (a reader that sleeps between reads, as a server at low load), QD1
#     free-running (one sleep per read), QD32 batched (no sleep): CPU per read and latency;
#   flashtier and memcached -t MC_THREADS (order alternated by round), each twice: with
#     -m FLASH_MEM (flashtier keeps every key and serves ~20-25 % of GETs from flash,
#     memcached drops what does not fit during the full-speed fill) and with -m RAM_MEM (both
#     hold every key in RAM: no flash read); per server: fill KEYS x VALUE at full speed,
#     wait until the server is quiet (lib.sh's settle: the fill's write-back and flushes done),
#     thread-client warm-up, then open loop (async client, 16 connections) at each RATES,
#     a snapshot of the server (stats, utime/stime, per-thread CPU) around each row.
# Client and server share the machine's CPUs: every figure includes that.
#
# Usage: scripts/bench/serving-floor.sh [OUT_DIR]   (root; default bench-results/floor-<time>)
# Env [default]: ROUNDS [3]  RATES ["5k 30k"]  KEYS [600000]  VALUE [4096]  FLASH [4G]
#   FLASH_MEM [256]  RAM_MEM [3000]  CG_MB [RAM_MEM + 768]  WARMUP [2s]  DUR [8s]
#   WARM_CLOSED [5s]  MC_THREADS [4]  FIO_RATE [5400]  FIO_TIME [8]  FIO [1] (0: no fio)
#   SETTLE [1] (0: measure right after the fill)  SETTLE_TICKS [2]  SETTLE_MAX [90]
#   FLASH_DIR, FLASHTIER_BIN, BENCH_BIN, MEMCACHED_BIN, FLASHTIER_EXTRA, MEMCACHED_OPTS (lib.sh)
# Output: OUT/table.md (min / median / max over rounds; serving_floor_table.py), OUT/raw/.
NAME=floor
ROOT_GUESS=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT_GUESS/bench-results/floor-$(date -u +%Y%m%dT%H%M%SZ)}
ROUNDS=${ROUNDS:-3} RATES=${RATES:-5k 30k} KEYS=${KEYS:-600000} VALUE=${VALUE:-4096}
FLASH=${FLASH:-4G} FLASH_MEM=${FLASH_MEM:-256} RAM_MEM=${RAM_MEM:-3000}
CG_MB=${CG_MB:-$((RAM_MEM + 768))} WARMUP=${WARMUP:-2s} DUR=${DUR:-8s}
WARM_CLOSED=${WARM_CLOSED:-5s} MC_THREADS=${MC_THREADS:-4} FIO_RATE=${FIO_RATE:-5400}
FIO_TIME=${FIO_TIME:-8} FIO=${FIO:-1} SETTLE=${SETTLE:-1}
# shellcheck source=scripts/bench/lib.sh
source "$(dirname "$0")/lib.sh"
preflight
((FIO)) && { command -v fio > /dev/null || die "fio not found (Debian: apt-get install fio)"; }
rm -rf "$OUT/raw"; mkdir -p "$OUT/raw"; : > "$OUT/run.log"
machine_json "$OUT/machine.json"
echo "ROUNDS='$ROUNDS' RATES='$RATES' KEYS=$KEYS VALUE=$VALUE FLASH=$FLASH FLASH_MEM=$FLASH_MEM RAM_MEM=$RAM_MEM MC_THREADS=$MC_THREADS FIO_RATE=$FIO_RATE SETTLE=$SETTLE scripts/bench/serving-floor.sh $*" > "$OUT/command.txt"
COMMON=(-k "$KEYS" -v "$VALUE" --dist zipf:0.99 --get-ratio 0.9)
FIO_FILE=$FLASH_DIR/fio-$NAME-$$.test   # removed by lib.sh's exit trap

fio_rows() { # round
  local name args
  if [ ! -f "$FIO_FILE" ]; then
    log "fio: writing a 4 GiB file to read (an unwritten extent reads as zeros without IO)"
    fio --name=w --filename="$FIO_FILE" --size=4G --direct=1 --ioengine=io_uring --rw=write \
      --bs=1M --iodepth=8 --output-format=terse > /dev/null || die "fio: write failed"
  fi
  for spec in "qd1-paced:--iodepth=1 --rate_iops=$FIO_RATE" "qd1:--iodepth=1" \
      "qd32:--iodepth=32 --iodepth_batch_submit=16 --iodepth_batch_complete_min=8"; do
    name=${spec%%:*} args=${spec#*:}
    log "fio $name (round $1)"
    # shellcheck disable=SC2086
    fio --name=r --filename="$FIO_FILE" --size=4G --direct=1 --ioengine=io_uring --rw=randread \
      --bs=8k $args --runtime="$FIO_TIME" --time_based --percentile_list=50:90:99:99.9 \
      --output-format=json > "$OUT/raw/r$1/fio-$name.json" || die "fio $name failed"
  done
}

for ((round = 1; round <= ROUNDS; round++)); do
  mkdir -p "$OUT/raw/r$round"
  ((FIO)) && fio_rows "$round"
  servers=(flashtier "memcached-t$MC_THREADS")
  ((round % 2 == 0)) && servers=("memcached-t$MC_THREADS" flashtier)
  for mem in "$FLASH_MEM" "$RAM_MEM"; do
    for label in "${servers[@]}"; do
      case "$label" in
        flashtier) kind=flashtier SERVER_THREADS=${FT_THREADS:-2} ;;
        memcached-t*) kind=memcached SERVER_THREADS=$MC_THREADS ;;
      esac
      DIR=$OUT/raw/r$round/m$mem/$label; mkdir -p "$DIR"
      log "round $round/$ROUNDS, -m $mem, $label (load average $(cut -d' ' -f1-3 /proc/loadavg))"
      start_server "$label" "$kind" "$mem" "$FLASH" "$CG_MB"
      gen fill fill -k "$KEYS" -v "$VALUE" -c 16
      ((SETTLE)) && settle "$DIR/settle.txt"
      gen warm load --client threads -c 16 -d 1 --warmup 0s --duration "$WARM_CLOSED" \
        --seed $((round * 100 + 1)) "${COMMON[@]}"
      seed=$((round * 100 + 10))
      for rate in $RATES; do
        seed=$((seed + 1))
        snap "$DIR/open-$rate.before.json"
        gen "open-$rate" load -c 16 -d 16 --rate "$rate" --warmup "$WARMUP" --duration "$DUR" \
          --seed "$seed" "${COMMON[@]}"
        snap "$DIR/open-$rate.after.json"
      done
      stop_server
    done
  done
done
python3 "$ROOT/scripts/bench/serving_floor_table.py" "$OUT" > "$OUT/table.md"
cat "$OUT/table.md"
log "done: $OUT/table.md"
