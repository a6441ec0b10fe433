# Shared by steady.sh, shapes.sh and hit-ratio-ram.sh (source it; not executable on its own).
# One server at a time, each in its own cgroup-v1 memory cgroup (page cache of its flash file
# charged to it), started from a shell that joins the cgroup and then execs the server.
# Invariants: at most one server and one cgroup alive; the EXIT/INT/TERM trap kills the
# server, removes the cgroup and the flash file, so a failed or interrupted run leaves nothing
# behind; every step that fails stops the script with a message (set -euo pipefail).
#
# Caller sets before sourcing: NAME (log prefix), OUT (output dir). Provides: start_server,
# stop_server, snap, gen, check_alive, log, die, drop_caches. Env: FLASHTIER_BIN,
# MEMCACHED_BIN, FLASH_DIR, FLASHTIER_EXTRA, MEMCACHED_OPTS, SERVER_THREADS; for the kind
# flashtier-small (issue 28's small-object tier): SMALL_SIZE (its --small-flash size, e.g.
# 672MiB), SMALL_MAX [300] (--small-item-max).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PROBE=(python3 "$ROOT/scripts/bench/probe.py")
BENCH=${BENCH_BIN:-$ROOT/target/release/flashtier-bench}
FLASHTIER_BIN=${FLASHTIER_BIN:-$ROOT/target/release/flashtier}
MEMCACHED_BIN=${MEMCACHED_BIN:-/usr/bin/memcached}
FLASH_DIR=${FLASH_DIR:-/var/tmp/flashtier-bench}
FLASHTIER_EXTRA=${FLASHTIER_EXTRA:-}
# memcached's aggressive slab mover: without it the item-header slab class starves during a
# bulk load and flashed items are lost (see docs/benchmarks.md, scenario d).
MEMCACHED_OPTS=${MEMCACHED_OPTS-slab_automove=2}
SERVER_THREADS=${SERVER_THREADS:-2}

SERVER_PID="" SERVER_PORT="" SERVER_CG="" SERVER_FLASH="" SERVER_SMALL="" SERVER_LABEL=""

log() { printf '[%s %s] %s\n' "$NAME" "$(date -u +%H:%M:%S)" "$*" | tee -a "$OUT/run.log" >&2; }
die() { log "FAILED: $*"; exit 1; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

preflight() {
  [ "$(id -u)" = 0 ] || { echo "$NAME: needs root (cgroups, drop_caches)" >&2; exit 2; }
  [ -d /sys/fs/cgroup/memory ] || { echo "$NAME: no cgroup v1 memory controller" >&2; exit 2; }
  [ -x "$MEMCACHED_BIN" ] || { echo "$NAME: no memcached at $MEMCACHED_BIN" >&2; exit 2; }
  [ -x "$FLASHTIER_BIN" ] || { echo "$NAME: no flashtier at $FLASHTIER_BIN (cargo build --release)" >&2; exit 2; }
  mkdir -p "$OUT" "$FLASH_DIR"
  # The generator must have --server-pid and fill: build it if it is older than its source.
  if [ -z "${BENCH_BIN:-}" ]; then
    (cd "$ROOT" && cargo build -q --release -p flashtier-bench) || { echo "$NAME: building flashtier-bench failed" >&2; exit 2; }
  fi
  "$BENCH" fill --help > /dev/null 2>&1 || { echo "$NAME: $BENCH has no fill mode (rebuild it)" >&2; exit 2; }
  python3 -c 'import matplotlib' 2> /dev/null || python3 -m pip install -q matplotlib >&2 \
    || echo "$NAME: matplotlib missing, no plots" >&2
}

machine_json() { # out.json
  cat > "$1" <<JSON
{"utc": "$(date -u +%FT%TZ)", "kernel": "$(uname -r)", "cpus": $(nproc),
 "cpu_model": "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//;s/"//g')",
 "mem_total_kb": $(awk '/MemTotal/{print $2}' /proc/meminfo),
 "loadavg_at_start": "$(cut -d' ' -f1-3 /proc/loadavg)",
 "memcached_version": "$("$MEMCACHED_BIN" -V 2>&1 | head -1)",
 "flashtier_version": "$("$FLASHTIER_BIN" --version 2>/dev/null | head -1 | sed 's/"//g')",
 "git_rev": "$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)",
 "flash_dir_fs": "$(df -T "$FLASH_DIR" | awk 'NR==2{print $1" "$2}')"}
JSON
}

# Kills the server (TERM, then KILL after 10 s), removes its cgroup and flash file.
stop_server() {
  local pid=$SERVER_PID
  if [ -n "$pid" ]; then
    kill -TERM "$pid" 2> /dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2> /dev/null || true
    wait "$pid" 2> /dev/null || true
  fi
  SERVER_PID=""
  if [ -n "$SERVER_CG" ] && [ -d "$SERVER_CG" ]; then
    for _ in $(seq 20); do
      rmdir "$SERVER_CG" 2> /dev/null && break
      echo 0 > "$SERVER_CG/memory.force_empty" 2> /dev/null || true
      sleep 0.25
    done
    [ -d "$SERVER_CG" ] && echo "$NAME: could not remove cgroup $SERVER_CG" >&2
  fi
  SERVER_CG=""
  [ -n "$SERVER_FLASH" ] && rm -f "$SERVER_FLASH"
  [ -n "$SERVER_SMALL" ] && rm -f "$SERVER_SMALL"
  SERVER_FLASH="" SERVER_SMALL=""
}

on_exit() {
  local rc=$?
  stop_server
  rm -f "$FLASH_DIR/fio-$NAME-$$.test"
  ((rc == 0)) || echo "$NAME: exited with status $rc (servers and cgroups cleaned up)" >&2
  exit $rc
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_server LABEL KIND MEM_MB FLASH_SIZE CG_MB   (KIND memcached|flashtier|flashtier-small;
# FLASH_SIZE e.g. 1G; empty: flashtier --ram-only; flashtier-small adds --small-flash of
# SMALL_SIZE and --small-item-max SMALL_MAX)
start_server() {
  local label=$1 kind=$2 mem=$3 fsize=$4 cgmb=$5 cmd
  [ -z "$SERVER_PID" ] || die "start_server: a server is already running"
  SERVER_LABEL=$label
  SERVER_PORT=$("${PROBE[@]}" free-port)
  # Names carry the script's pid: another engineer's run of the same script cannot collide.
  SERVER_CG=/sys/fs/cgroup/memory/flashtier_bench_${NAME}_$$
  [ -d "$SERVER_CG" ] && { rmdir "$SERVER_CG" || die "stale cgroup $SERVER_CG is busy"; }
  mkdir "$SERVER_CG"
  echo $((cgmb * 1024 * 1024)) > "$SERVER_CG/memory.limit_in_bytes"
  SERVER_FLASH=$FLASH_DIR/$NAME-$$-$label.flash
  rm -f "$SERVER_FLASH"
  case "$kind" in
    memcached)
      local opts="ext_path=$SERVER_FLASH:$fsize${MEMCACHED_OPTS:+,$MEMCACHED_OPTS}"
      cmd=("$MEMCACHED_BIN" -u root -l 127.0.0.1 -p "$SERVER_PORT" -m "$mem" -U 0 -c 4096
        -t "$SERVER_THREADS" -o "$opts") ;;
    flashtier | flashtier-small)
      # memcached's ext_path sizes are binary (G = GiB, M = MiB); flashtier spells them so.
      local fsz=$fsize
      case "$fsz" in *G) fsz=${fsz%G}GiB ;; *M) fsz=${fsz%M}MiB ;; esac
      cmd=("$FLASHTIER_BIN" kv --listen "127.0.0.1:$SERVER_PORT" -m "$mem" -c 4096
        --threads "$SERVER_THREADS")
      if [ -n "$fsz" ]; then cmd+=(--flash "$SERVER_FLASH:$fsz"); else cmd+=(--ram-only); fi
      if [ "$kind" = flashtier-small ]; then
        [ -n "${SMALL_SIZE:-}" ] || die "start_server: flashtier-small needs SMALL_SIZE"
        SERVER_SMALL=$FLASH_DIR/$NAME-$$-$label.small
        rm -f "$SERVER_SMALL"
        cmd+=(--small-flash "$SERVER_SMALL:$SMALL_SIZE" --small-item-max "${SMALL_MAX:-300}")
      fi
      # shellcheck disable=SC2206
      [ -n "$FLASHTIER_EXTRA" ] && cmd+=($FLASHTIER_EXTRA) ;;
    *) die "unknown server kind $kind" ;;
  esac
  drop_caches
  echo 0 > "$SERVER_CG/memory.max_usage_in_bytes"
  log "$label: ${cmd[*]} (memory cgroup ${cgmb} MiB)"
  bash -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' _ "$SERVER_CG" "${cmd[@]}" \
    > "$OUT/$label.server.log" 2>&1 &
  SERVER_PID=$!
  "${PROBE[@]}" wait-port "$SERVER_PORT" "$SERVER_PID" 30 || die "$label did not start (see $OUT/$label.server.log)"
}

# Fails loudly if the server died (e.g. killed by the cgroup's OOM killer).
check_alive() {
  kill -0 "$SERVER_PID" 2> /dev/null && ! grep -q '^State:.*Z' "/proc/$SERVER_PID/status" 2> /dev/null \
    || die "$SERVER_LABEL died (oom_control: $(tr '\n' ' ' < "$SERVER_CG/memory.oom_control" 2>/dev/null); log: $(tail -3 "$OUT/$SERVER_LABEL.server.log" | tr '\n' ' '))"
}

# snap OUT.json: server stats, /proc/PID/io, CPU and cgroup usage at this instant.
snap() { check_alive; "${PROBE[@]}" snap "$SERVER_PID" "$SERVER_PORT" "$SERVER_CG" "$1"; }

# settle OUT.txt: wait until the server is quiet — its CPU (utime + stime) grew by at most
# SETTLE_TICKS clock ticks [2, i.e. 20 ms] in each of two consecutive seconds, at most SETTLE_MAX
# seconds [90] — and write how long that took and the CPU spent meanwhile. After a full-speed
# fill, flashtier writes back to flash every version RAM still holds unwritten (the write-back
# window: 600k x 4 KiB in -m 3000 took ~10 s and ~0.3 s of CPU on this VM) and memcached's
# extstore thread flushes its write buffers: a phase measured before that ends charges the
# fill's background work to its requests (docs/serving.md, seventeenth sitting).
settle() {
  local out=$1 t0 c0 prev cur quiet=0 waited=0 hz
  hz=$(getconf CLK_TCK)
  t0=$(date +%s.%N)
  c0=$(awk '{print $14 + $15}' "/proc/$SERVER_PID/stat")
  prev=$c0 cur=$c0
  while ((quiet < 2 && waited < ${SETTLE_MAX:-90})); do
    sleep 1; waited=$((waited + 1)); check_alive
    cur=$(awk '{print $14 + $15}' "/proc/$SERVER_PID/stat")
    if ((cur - prev <= ${SETTLE_TICKS:-2})); then quiet=$((quiet + 1)); else quiet=0; fi
    prev=$cur
  done
  awk -v t0="$t0" -v now="$(date +%s.%N)" -v c="$((cur - c0))" -v hz="$hz" -v q="$quiet" \
    'BEGIN { printf "settle_s %.1f\nsettle_cpu_ms %.0f\nsettled %d\n", now - t0, c * 1000 / hz, q >= 2 }' > "$out"
  ((quiet >= 2)) || log "$SERVER_LABEL: still busy after ${SETTLE_MAX:-90} s (see $out)"
}

# gen TAG ARGS...: runs flashtier-bench against the current server, JSON to $DIR/TAG.json
# (DIR set by the caller), table appended to the server's log; fails loudly on errors.
gen() {
  local tag=$1; shift
  local sub=$1; shift
  local extra=()
  [ "$sub" != fill ] && extra=(--server-pid "$SERVER_PID")
  if ! "$BENCH" "$sub" -s "127.0.0.1:$SERVER_PORT" "${extra[@]}" "$@" --json "$DIR/$tag.json" \
      > "$DIR/$tag.txt" 2> "$DIR/$tag.err"; then
    tail -5 "$DIR/$tag.err" >&2
    die "$SERVER_LABEL: flashtier-bench $sub $* failed"
  fi
  check_alive
  "${PROBE[@]}" check-json "$DIR/$tag.json" > /dev/null 2>&1 || [ "$sub" = fill ] \
    || log "$SERVER_LABEL $tag: errors reported (see $DIR/$tag.json)"
}
