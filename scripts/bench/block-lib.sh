# Shared by the block benchmarks (block-flush.sh, block-hits.sh, block-restart-hits.sh):
# a scratch dir removed on exit, every started process killed on exit, a random admin
# port, `ctl`/`stat` helpers, and the slow backing (nbdkit's delay filter over a sparse file).
# Source it after setting FT, SIZE, DELAY; call `block_setup PREFIX` then `slow_backing [ARGS]`.
W=
PIDS=()
FTPID=
ADMIN=127.0.0.1:$((20000 + RANDOM % 20000))
block_cleanup() {
    if [ -n "$FTPID" ]; then kill "$FTPID" 2>/dev/null || true; fi
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ -n "$W" ]; then rm -rf "$W"; fi
}
block_setup() { # scratch-dir prefix
    W=$(mktemp -d "/var/tmp/$1.XXXXXX")
    trap block_cleanup EXIT
}
ctl() { "$FT" ctl --admin "$ADMIN" "$@"; }
stat() { local v; v=$(ctl stats | sed -n "s/^$1=//p"); echo "${v:-0}"; }
wait_sock() { for _ in $(seq 300); do [ -S "$1" ] && return 0; sleep 0.1; done; echo "no $1" >&2; exit 1; }
slow_backing() { # extra nbdkit options (e.g. --threads=4)
    truncate -s "$SIZE" "$W/backing.img"
    nbdkit -f -U "$W/slow.sock" "$@" --filter=delay file "$W/backing.img" \
        rdelay="$DELAY" wdelay="$DELAY" &
    PIDS+=($!)
    wait_sock "$W/slow.sock"
}
start_flashtier() { # log file, extra `flashtier block` options; sets FTPID
    local log=$1
    shift
    rm -f "$W/ft.sock"
    "$FT" block --backing "nbd+unix:///?socket=$W/slow.sock" --cache "$W/cache.img:$CACHE" \
        --listen "unix:$W/ft.sock" --admin "$ADMIN" --run-dir "$W/run" --no-direct-io \
        "$@" >>"$log" 2>&1 &
    FTPID=$!
    wait_sock "$W/ft.sock"
    for _ in $(seq 100); do ctl stats >/dev/null 2>&1 && break; sleep 0.1; done
}
