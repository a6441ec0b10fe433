#!/usr/bin/env bash
# Clients the team did not write, beside our own, flashtier vs memcached extstore (issue 30).
# Same -m, flash file size and memory cgroup for every server; a fresh server per server per
# round; ROUNDS rounds, the server order rotated each round. Per server and round:
#   fill KEYS x VALUE at full speed (FILL_MODES="full paced": also a second set of rounds
#     with the fill paced at FILL_RATE);
#   warm-up: thread client, closed loop 16x1, WARM_CLOSED (not tabled);
#   fresh open loop, 16 connections, Poisson, zipf, 90 % GET: at each OPEN_RATES with each
#     OPEN_CLIENTS (threads: flashtier-bench --client threads, a sending and a receiving
#     thread per connection; async: the event-loop client, up to OPEN_DEPTH in flight);
#   closed loop (flashtier-bench, async client) at each CLOSED_SHAPES (connections x depth);
#   memaslap (`memcaslap` from libmemcached-tools, its own keys): -T 2 -c 64 -X VALUE
#     -w MASLAP_WIN -t MASLAP_TIME (and -S MASLAP_TIME so it records latencies);
#   refill every key at full speed (the flash wraps: the cache is full), warm-up again, then
#     the open-loop rows again on the full cache.
# Server CPU per op on every row: utime+stime of the server from /proc/PID/stat over the
# measured window (flashtier-bench --server-pid; around the whole memaslap run, ÷ its ops).
# Client and server share the machine's CPUs (2 vCPUs here): every number includes that.
#
# Usage: scripts/bench/clients.sh [OUT_DIR]   (root; default bench-results/clients-<time>;
#        QUICK=1: smaller data and shorter phases, ~8 min smoke run)
# Env [default {QUICK}]: ROUNDS [3 {2}]  MEM [256 {64}]  FLASH [4G {1G}]  CG_MB [768 {192}]
#   KEYS [600000 {150000}]  VALUE [4096]  DIST [zipf:0.99]  GET_RATIO [0.9]
#   FILL_MODES ["full"] (full | paced)  FILL_RATE [25k]  WARMUP [2s {1s}]  DUR [8s {3s}]
#   WARM_CLOSED [10s {3s}]  CLOSED_SHAPES ["8x16 16x2 8x1"]  OPEN_RATES ["30k 60k"]
#   OPEN_CLIENTS ["threads async"]  OPEN_DEPTH [16]  MAX_OUTSTANDING [1024]
#   MASLAP_TIME [30s {5s}]  MASLAP_WIN [10k {2k}]  MASLAP_STATS [1] (0: no -S, exactly the
#   issue's command, no latencies)  SERVERS ["flashtier memcached-t4 memcached-t2"]
#   MASLAP_ONLY [0] (1: per server and round only the fill and memaslap, with a snapshot of the
#   server's stats after each: OUT/raw/.../after-fill.json, after-memaslap.json)
#   (memcached-tN runs memcached -t N; flashtier runs --threads SERVER_THREADS [2];
#   flashtier-tN runs flashtier --threads N, so one run can hold several thread counts).
#   FLASH_DIR, FLASHTIER_BIN, MEMCACHED_BIN, FLASHTIER_EXTRA, MEMCACHED_OPTS (lib.sh)
# Around each open-loop row: every server thread's schedstat (ROW.sched0/.sched1; clients.py sched OUT).
# Output: OUT/table.md (min / median / max over rounds, flashtier ÷ each memcached),
# OUT/summary.json, OUT/command.txt, OUT/config.json, OUT/machine.json, OUT/run.log, OUT/raw/.
# Full mode: about 12 minutes a round.
NAME=clients
QUICK=${QUICK:-0}
ROOT_GUESS=$(cd "$(dirname "$0")/../.." && pwd)
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
if ((QUICK)); then
  OUT=${1:-$ROOT_GUESS/bench-results/clients-quick-$STAMP}
  ROUNDS=${ROUNDS:-2} MEM=${MEM:-64} FLASH=${FLASH:-1G} CG_MB=${CG_MB:-192} KEYS=${KEYS:-150000}
  WARMUP=${WARMUP:-1s} DUR=${DUR:-3s} WARM_CLOSED=${WARM_CLOSED:-3s}
  MASLAP_TIME=${MASLAP_TIME:-5s} MASLAP_WIN=${MASLAP_WIN:-2k}
else
  OUT=${1:-$ROOT_GUESS/bench-results/clients-$STAMP}
fi
ROUNDS=${ROUNDS:-3} MEM=${MEM:-256} FLASH=${FLASH:-4G} CG_MB=${CG_MB:-768} KEYS=${KEYS:-600000}
VALUE=${VALUE:-4096} DIST=${DIST:-zipf:0.99} GET_RATIO=${GET_RATIO:-0.9}
FILL_MODES=${FILL_MODES:-full} FILL_RATE=${FILL_RATE:-25k}
WARMUP=${WARMUP:-2s} DUR=${DUR:-8s} WARM_CLOSED=${WARM_CLOSED:-10s}
CLOSED_SHAPES=${CLOSED_SHAPES:-8x16 16x2 8x1} OPEN_RATES=${OPEN_RATES:-30k 60k}
OPEN_CLIENTS=${OPEN_CLIENTS:-threads async} OPEN_DEPTH=${OPEN_DEPTH:-16}
MAX_OUTSTANDING=${MAX_OUTSTANDING:-1024}
MASLAP_TIME=${MASLAP_TIME:-30s} MASLAP_WIN=${MASLAP_WIN:-10k} MASLAP_STATS=${MASLAP_STATS:-1}
MASLAP_ONLY=${MASLAP_ONLY:-0}
SERVERS=${SERVERS:-flashtier memcached-t4 memcached-t2}
MASLAP_BIN=${MASLAP_BIN:-memcaslap}
# shellcheck source=scripts/bench/lib.sh
source "$(dirname "$0")/lib.sh"
FT_THREADS=$SERVER_THREADS
HELPER=(python3 "$ROOT/scripts/bench/clients.py")

command -v "$MASLAP_BIN" > /dev/null \
  || { echo "clients.sh: $MASLAP_BIN not found (Debian: apt-get install libmemcached-tools)" >&2; exit 2; }
for s in $SERVERS; do
  case "$s" in flashtier | flashtier-t[0-9]* | memcached-t[0-9]*) ;; *) echo "clients.sh: unknown server $s" >&2; exit 2 ;; esac
done
for f in $FILL_MODES; do
  case "$f" in full | paced) ;; *) echo "clients.sh: unknown fill mode $f (full|paced)" >&2; exit 2 ;; esac
done
preflight
rm -rf "$OUT/raw"; mkdir -p "$OUT/raw"; : > "$OUT/run.log"
machine_json "$OUT/machine.json"
printf '%s\n' "$(env | grep -E '^(QUICK|ROUNDS|MEM|FLASH|CG_MB|KEYS|VALUE|DIST|GET_RATIO|FILL_MODES|FILL_RATE|WARMUP|DUR|WARM_CLOSED|CLOSED_SHAPES|OPEN_RATES|OPEN_CLIENTS|OPEN_DEPTH|MAX_OUTSTANDING|MASLAP_TIME|MASLAP_WIN|MASLAP_STATS|MASLAP_ONLY|SERVERS|FLASH_DIR|SERVER_THREADS|FLASHTIER_EXTRA|MEMCACHED_OPTS)=' | sort | sed "s/=\(.*\)/='\1'/" | tr '\n' ' ')scripts/bench/clients.sh $*" > "$OUT/command.txt"
cat > "$OUT/config.json" <<JSON
{"rounds": $ROUNDS, "mem": $MEM, "flash": "$FLASH", "cg_mb": $CG_MB, "keys": $KEYS, "value": $VALUE,
 "dist": "$DIST", "get_ratio": $GET_RATIO, "fill_modes": "$FILL_MODES", "fill_rate": "$FILL_RATE",
 "warmup": "$WARMUP", "dur": "$DUR", "warm_closed": "$WARM_CLOSED", "closed_shapes": "$CLOSED_SHAPES",
 "open_rates": "$OPEN_RATES", "open_clients": "$OPEN_CLIENTS", "open_depth": $OPEN_DEPTH,
 "open_connections": 16, "max_outstanding": $MAX_OUTSTANDING, "maslap_time": "$MASLAP_TIME",
 "maslap_win": "$MASLAP_WIN", "maslap_stats": $MASLAP_STATS, "maslap_only": $MASLAP_ONLY, "maslap_threads": 2,
 "maslap_concurrency": 64, "servers": "$SERVERS", "flashtier_threads": $FT_THREADS,
 "flashtier_extra": "$FLASHTIER_EXTRA", "memcached_opts": "$MEMCACHED_OPTS",
 "generator_threads": 1, "cpus": $(nproc), "quick": $QUICK}
JSON
log "out $OUT; load average $(cut -d' ' -f1-3 /proc/loadavg); $ROUNDS rounds of: $SERVERS"

COMMON=(-k "$KEYS" -v "$VALUE" --dist "$DIST" --get-ratio "$GET_RATIO")
# Seeds depend on the round and the phase, not on the server: in one round every server sees
# the same key sequences, and no phase replays another's.
SEED=0
next_seed() { SEED=$((SEED + 1)); }

fill_server() { # tag mode: server CPU over the fill goes to TAG.cpu (seconds)
  local pace=() cpu0
  [ "$2" = paced ] && pace=(--load-rate "$FILL_RATE")
  log "$SERVER_LABEL: $1: $KEYS x $VALUE B, ${2} speed"
  cpu0=$("${HELPER[@]}" cpu "$SERVER_PID")
  gen "$1" fill -k "$KEYS" -v "$VALUE" -c 16 "${pace[@]}"
  python3 -c 'import sys; print(f"{float(sys.argv[2]) - float(sys.argv[1]):.2f}")' \
    "$cpu0" "$("${HELPER[@]}" cpu "$SERVER_PID")" > "$DIR/$1.cpu"
}

warm() { # tag: the thread client's closed-loop warm-up before open-loop rows
  next_seed
  log "$SERVER_LABEL: warm-up, thread client closed loop 16x1 for $WARM_CLOSED"
  gen "$1" load --client threads -c 16 -d 1 --warmup 0s --duration "$WARM_CLOSED" --seed "$SEED" "${COMMON[@]}"
}

open_rows() { # state (fresh|full)
  local client rate
  for client in $OPEN_CLIENTS; do
    for rate in $OPEN_RATES; do
      next_seed
      log "$SERVER_LABEL: $1 open loop, $client client, $rate ops/s"
      sched "$1-open-$client-$rate.sched0"
      case "$client" in
        threads) gen "$1-open-threads-$rate" load --client threads --max-outstanding "$MAX_OUTSTANDING" \
          -c 16 --rate "$rate" --warmup "$WARMUP" --duration "$DUR" --seed "$SEED" "${COMMON[@]}" ;;
        async) gen "$1-open-async-$rate" load -c 16 -d "$OPEN_DEPTH" --rate "$rate" \
          --warmup "$WARMUP" --duration "$DUR" --seed "$SEED" "${COMMON[@]}" ;;
        *) die "unknown open-loop client $client (threads|async)" ;;
      esac
      sched "$1-open-$client-$rate.sched1"
    done
  done
}

sched() { # name: every server thread's run and run-queue wait now (clients.py sched)
  "${PROBE[@]}" sched "$SERVER_PID" "$DIR/$1"
}

closed_rows() { # state
  local s
  for s in $CLOSED_SHAPES; do
    next_seed
    log "$SERVER_LABEL: $1 closed loop $s"
    gen "$1-closed-$s" load -c "${s%x*}" -d "${s#*x}" --warmup "$WARMUP" --duration "$DUR" \
      --seed "$SEED" "${COMMON[@]}"
  done
}

memaslap() { # tag
  local tag=$1 cpu0 cpu1 stats=()
  ((MASLAP_STATS)) && stats=(-S "$MASLAP_TIME")
  log "$SERVER_LABEL: memaslap -T 2 -c 64 -X $VALUE -w $MASLAP_WIN -t $MASLAP_TIME ${stats[*]}"
  check_alive
  cpu0=$("${HELPER[@]}" cpu "$SERVER_PID")
  # The client's own CPU and context switches, as JSON in TAG.client (a voluntary switch: it
  # slept, every one of its requests at the server).
  if ! /usr/bin/time -f '{"user_s": %U, "sys_s": %S, "voluntary_cs": %w, "involuntary_cs": %c}' -o "$DIR/$tag.client" \
      "$MASLAP_BIN" -s "127.0.0.1:$SERVER_PORT" -T 2 -c 64 -X "$VALUE" -w "$MASLAP_WIN" \
      -t "$MASLAP_TIME" "${stats[@]}" > "$DIR/$tag.txt" 2> "$DIR/$tag.err"; then
    tail -5 "$DIR/$tag.err" >&2
    die "$SERVER_LABEL: memaslap failed"
  fi
  cpu1=$("${HELPER[@]}" cpu "$SERVER_PID")
  check_alive
  "${HELPER[@]}" memaslap "$DIR/$tag.txt" "$cpu0" "$cpu1" > "$DIR/$tag.json" \
    || die "$SERVER_LABEL: could not parse memaslap's output ($DIR/$tag.txt)"
  log "$SERVER_LABEL: memaslap $("${HELPER[@]}" brief "$DIR/$tag.json")"
}

for ((round = 1; round <= ROUNDS; round++)); do
  # Rotate the order so no server always runs first (or right after a given other one).
  read -r -a order <<< "$SERVERS"
  shift_by=$(((round - 1) % ${#order[@]}))
  order=("${order[@]:shift_by}" "${order[@]:0:shift_by}")
  for fill in $FILL_MODES; do
    for label in "${order[@]}"; do
      SEED=$((round * 1000 + 10))
      case "$label" in
        flashtier) kind=flashtier SERVER_THREADS=$FT_THREADS ;;
        flashtier-t*) kind=flashtier SERVER_THREADS=${label#flashtier-t} ;;
        memcached-t*) kind=memcached SERVER_THREADS=${label#memcached-t} ;;
      esac
      DIR=$OUT/raw/r$round/$fill/$label; mkdir -p "$DIR"
      log "round $round/$ROUNDS, $fill fill, $label (load average $(cut -d' ' -f1-3 /proc/loadavg))"
      start_server "$label" "$kind" "$MEM" "$FLASH" "$CG_MB"
      fill_server fill "$fill"
      snap "$DIR/after-fill.json"
      if ((MASLAP_ONLY)); then
        memaslap memaslap
        snap "$DIR/after-memaslap.json"
        stop_server
        continue
      fi
      warm warm-fresh
      open_rows fresh
      closed_rows fresh
      memaslap memaslap
      fill_server refill "$fill"
      snap "$DIR/after-refill.json"
      warm warm-full
      open_rows full
      snap "$DIR/end.json"
      stop_server
    done
  done
done
log "load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
"${HELPER[@]}" table "$OUT" > "$OUT/table.md"
cat "$OUT/table.md"
log "done: $OUT/table.md, $OUT/summary.json"
