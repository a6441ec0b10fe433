#!/usr/bin/env bash
# The documents' experiment: MariaDB under sysbench OLTP with data larger than its RAM and
# than the cache, on a slow disk, with and without a cache, and on a fast disk. Chain per
# configuration: nbdkit file (+ delay filter: the slow disk) → [flashtier block | nbdkit cache
# filter] → nbdfuse → losetup --direct-io=on → ext4 → mariadbd (memory cgroup v1) ← sysbench.
# The data is prepared once (cached in PREP_DIR across runs) and copied per configuration;
# each configuration first runs WARMUP seconds of oltp_read_only (not measured: the cache and
# the buffer pool start cold in every configuration), then read_only, read_write, write_only
# back to back on one copy.
#
# Usage: scripts/bench/mysql.sh [OUTDIR]   (default docs/results/mysql; QUICK=1: a ~5 min
#        smoke test into data/bench/mysql-quick-<time>)
# Env: QUICK, TABLES (8), TABLE_SIZE (600000), TIME (s per run, 60), WARMUP (s, = TIME; 0 =
#      none), THREADS (8), DELAY (4ms),
#      CACHE (512M), MEM (cgroup limit, 512M), BUFPOOL (128M), CONFIGS, WORKLOADS, SAMPLE (s, 5),
#      IMG_SIZE (4G), PREP_DIR (/var/tmp/flashtier-mysql-prep; empty: prepare every run),
#      FLASHTIER (target/release/flashtier), TRACE (1: flashtier records its request stream
#      into OUTDIR/<config>-trace.bin with `--trace`, for scripts/bench/trace_sim.py; the
#      phases' start times go to <config>-phases.txt), FT_ARGS (extra arguments to `flashtier
#      block`, word-split: e.g. "--set flash.reclaim_policy=fifo"). Needs root, cgroup v1,
#      nbdkit, nbdfuse.
set -euo pipefail
QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
    TABLES=${TABLES:-4}; TABLE_SIZE=${TABLE_SIZE:-50000}; TIME=${TIME:-15}
    CACHE=${CACHE:-48M}; MEM=${MEM:-256M}; BUFPOOL=${BUFPOOL:-32M}; IMG_SIZE=${IMG_SIZE:-1G}
    CONFIGS=${CONFIGS:-"slow flashtier-wb fast"}; SAMPLE=${SAMPLE:-2}
fi
TABLES=${TABLES:-8}
TABLE_SIZE=${TABLE_SIZE:-600000}
TIME=${TIME:-60}
WARMUP=${WARMUP:-$TIME}
THREADS=${THREADS:-8}
DELAY=${DELAY:-4ms}
CACHE=${CACHE:-512M}
MEM=${MEM:-512M}
BUFPOOL=${BUFPOOL:-128M}
IMG_SIZE=${IMG_SIZE:-4G}
SAMPLE=${SAMPLE:-5}
TRACE=${TRACE:-0}
CONFIGS=${CONFIGS:-"slow flashtier-wb flashtier-wt nbdkit-cache fast"}
WORKLOADS=${WORKLOADS:-"oltp_read_only oltp_read_write oltp_write_only"}
PREP_DIR=${PREP_DIR-/var/tmp/flashtier-mysql-prep}
FT=$(realpath "${FLASHTIER:-target/release/flashtier}")
REPO=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$QUICK" = 1 ]; then DEF_OUT=data/bench/mysql-quick-$(date -u +%Y%m%dT%H%M%SZ); else DEF_OUT=docs/results/mysql; fi
OUT=${1:-$DEF_OUT}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

[ "$(id -u)" = 0 ] || { echo "mysql.sh needs root (loop devices, mounts, cgroups)" >&2; exit 1; }
[ -d /sys/fs/cgroup/memory ] || { echo "no cgroup v1 memory controller at /sys/fs/cgroup/memory" >&2; exit 1; }
[ -x "$FT" ] || { echo "no flashtier binary at $FT (cargo build --release)" >&2; exit 1; }
rm -f "$OUT/raw.tar.xz"   # an earlier committed run's raw outputs (docs/benchmarks.md, "Results layout")
need=()
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
command -v sysbench >/dev/null 2>&1 || need+=(sysbench)
command -v nbdfuse >/dev/null 2>&1 || need+=(libnbd-bin)
command -v nbdkit >/dev/null 2>&1 || need+=(nbdkit)
if ((${#need[@]})); then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
fi
MARIADBD=$(command -v mariadbd || echo /usr/sbin/mariadbd)
python3 -c 'import matplotlib' 2>/dev/null || echo "warning: python3 has no matplotlib; no PNG (scripts/install-deps.sh)" >&2

to_bytes() { numfmt --from=iec "$1"; }
W=$(mktemp -d /var/tmp/ftmysql.XXXXXX)
CG=/sys/fs/cgroup/memory/ftbench_mysql_$$
PIDS=()
LOOP=""
SAMPLER=""
cleanup() {
    local -
    set +e
    [ -n "$SAMPLER" ] && kill "$SAMPLER" 2>/dev/null
    stop_db
    mountpoint -q "$W/mnt" && umount "$W/mnt"
    [ -n "$LOOP" ] && losetup -d "$LOOP"
    LOOP=""
    mountpoint -q "$W/fuse" && umount "$W/fuse"
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    PIDS=()
    if [ -d "$CG" ]; then
        for p in $(cat "$CG/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
        sleep 0.5; rmdir "$CG" 2>/dev/null
    fi
}
on_exit() { cleanup; rm -rf "$W"; }
trap on_exit EXIT
trap 'exit 130' INT TERM

DBPID=""
DBSOCK=$W/mysqld.sock
start_db() { # datadir bufpool cgroup(0/1) flush_log_at_trx_commit
    local args=(--no-defaults --user=root --datadir="$1" --socket="$DBSOCK" --skip-networking
        --pid-file="$W/mysqld.pid" --log-error="$W/mysqld.err"
        --innodb-buffer-pool-size="$2" --innodb-flush-method=O_DIRECT
        --innodb-flush-log-at-trx-commit="$4" --max-connections=200)
    if [ "$3" = 1 ]; then
        sh -c 'echo $$ > "$0/cgroup.procs"; exec "$@"' "$CG" "$MARIADBD" "${args[@]}" &
    else
        "$MARIADBD" "${args[@]}" &
    fi
    DBPID=$!
    for _ in $(seq 600); do
        mariadb-admin --no-defaults -S "$DBSOCK" -uroot ping >/dev/null 2>&1 && return 0
        kill -0 "$DBPID" 2>/dev/null || break
        sleep 0.5
    done
    echo "mariadbd did not start:" >&2; tail -20 "$W/mysqld.err" >&2; exit 1
}
stop_db() {
    [ -n "$DBPID" ] || return 0
    mariadb-admin --no-defaults -S "$DBSOCK" -uroot shutdown >/dev/null 2>&1 || kill "$DBPID" 2>/dev/null
    wait "$DBPID" 2>/dev/null || true
    DBPID=""
}
wait_nbd() { # uri
    for _ in $(seq 300); do nbdinfo --size "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done
    echo "no NBD server at $1" >&2; exit 1
}
cpu_ticks() { # pids... → utime+stime in clock ticks
    local t=0 p
    for p in "$@"; do
        [ -r "/proc/$p/stat" ] && t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
    done
    echo "$t"
}

SB=(--db-driver=mysql --mysql-socket="$DBSOCK" --mysql-user=root --mysql-db=sbtest
    --tables="$TABLES" --table-size="$TABLE_SIZE")

# 1. Prepare the data once: ext4 image holding a MariaDB datadir with the sysbench tables.
KEY="${TABLES}x${TABLE_SIZE}-${IMG_SIZE}-$("$MARIADBD" --version | awk '{print $3}')"
mkdir -p "$W/mnt" "$W/fuse" "$W/run"
if [ -n "$PREP_DIR" ] && [ -f "$PREP_DIR/$KEY.img.done" ]; then
    PREP=$PREP_DIR/$KEY.img
    echo "reusing prepared image $PREP"
else
    if [ -n "$PREP_DIR" ]; then mkdir -p "$PREP_DIR"; PREP=$PREP_DIR/$KEY.img; else PREP=$W/prepared.img; fi
    rm -f "$PREP" "$PREP.done"
    echo "preparing $TABLES tables x $TABLE_SIZE rows into $PREP"
    truncate -s "$IMG_SIZE" "$PREP"
    mkfs.ext4 -q -F "$PREP"
    mount -o loop "$PREP" "$W/mnt"
    mariadb-install-db --no-defaults --user=root --datadir="$W/mnt/data" >"$W/install-db.log" 2>&1 ||
        { cat "$W/install-db.log" >&2; exit 1; }
    start_db "$W/mnt/data" 512M 0 2
    mariadb --no-defaults -S "$DBSOCK" -uroot -e 'CREATE DATABASE sbtest'
    t0=$(date +%s)
    sysbench oltp_read_write "${SB[@]}" --threads="$TABLES" prepare >"$OUT/prepare.txt"
    echo "prepared in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/prepare.txt"
    mariadb --no-defaults -S "$DBSOCK" -uroot -N -e "SELECT ROUND(SUM(data_length+index_length)/1048576) FROM information_schema.tables WHERE table_schema='sbtest'" \
        | sed 's/^/data_mib=/' | tee -a "$OUT/prepare.txt"
    stop_db
    umount "$W/mnt"
    touch "$PREP.done"
fi

CGLIMIT=$(to_bytes "$MEM")
{
    echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    for v in QUICK TABLES TABLE_SIZE TIME WARMUP THREADS DELAY CACHE MEM BUFPOOL IMG_SIZE SAMPLE TRACE; do
        echo "${v,,}=${!v}"
    done
    echo "configs=$CONFIGS"
    echo "mariadbd=$("$MARIADBD" --version)"
    echo "sysbench=$(sysbench --version)"
    echo "nproc=$(nproc)"
    echo "loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/meta.txt"
cat "$OUT/meta.txt"

# 2. One configuration: build the chain, run the workloads, tear it down.
phase() { # config name: the sampler's phase, and its start time in <config>-phases.txt
    echo "$2" >"$W/phase"
    echo "$(date +%s.%N) $2" >>"$OUT/$1-phases.txt"
}
run_config() { # name
    local cfg=$1 top uri ft_pid="" disk_pids=()
    echo "== $cfg"
    rm -f "$OUT/$cfg-phases.txt"
    cp --sparse=always "$PREP" "$W/disk.img"
    rm -f "$W"/*.sock "$W/ftcache.img"; rm -rf "$W/run" "$W/nbdtmp"; mkdir -p "$W/run" "$W/nbdtmp"
    top=$W/top.sock
    case $cfg in
    slow)
        nbdkit -f -U "$top" --filter=delay file "$W/disk.img" rdelay="$DELAY" wdelay="$DELAY" &
        PIDS+=($!); disk_pids+=($!); uri="nbd+unix:///?socket=$top" ;;
    fast)
        nbdkit -f -U "$top" file "$W/disk.img" &
        PIDS+=($!); disk_pids+=($!); uri="nbd+unix:///?socket=$top" ;;
    nbdkit-cache)
        # The cache filter rejects cachedir= here; it puts its cache file in TMPDIR.
        TMPDIR=$W/nbdtmp nbdkit -f -U "$top" --filter=cache --filter=delay file "$W/disk.img" \
            rdelay="$DELAY" wdelay="$DELAY" cache=writeback cache-on-read=true \
            cache-max-size="$CACHE" &
        PIDS+=($!); disk_pids+=($!); uri="nbd+unix:///?socket=$top" ;;
    flashtier-wb | flashtier-wt)
        nbdkit -f -U "$W/slow.sock" --filter=delay file "$W/disk.img" rdelay="$DELAY" wdelay="$DELAY" &
        PIDS+=($!); disk_pids+=($!)
        wait_nbd "nbd+unix:///?socket=$W/slow.sock"
        local mode=writeback trace=(); [ "$cfg" = flashtier-wt ] && mode=writethrough
        [ "$TRACE" = 1 ] && trace=(--trace "$OUT/$cfg-trace.bin")
        "$FT" block "${trace[@]}" --backing "nbd+unix:///?socket=$W/slow.sock" --cache "$W/ftcache.img:$CACHE" \
            --mode "$mode" --listen "unix:$top" --admin none --run-dir "$W/run" ${FT_ARGS:-} \
            2>"$OUT/$cfg-flashtier.log" &
        ft_pid=$!; PIDS+=($!); disk_pids+=($!); uri="nbd+unix:///block?socket=$top" ;;
    *) echo "unknown configuration $cfg" >&2; exit 1 ;;
    esac
    wait_nbd "$uri"
    nbdfuse -P "$W/nbdfuse.pid" "$W/fuse/disk" "$uri" 2>"$W/nbdfuse.err" &
    PIDS+=($!); disk_pids+=($!)
    for _ in $(seq 100); do [ -s "$W/nbdfuse.pid" ] && break; sleep 0.1; done
    [ -e "$W/fuse/disk" ] || { echo "nbdfuse did not mount" >&2; cat "$W/nbdfuse.err" >&2; exit 1; }
    rm -f "$W/nbdfuse.pid"
    LOOP=$(losetup -f --show --direct-io=on "$W/fuse/disk")
    mount "$LOOP" "$W/mnt"
    mkdir -p "$CG"
    echo "$CGLIMIT" >"$CG/memory.limit_in_bytes"
    echo 0 >"$CG/memory.max_usage_in_bytes" 2>/dev/null || true
    start_db "$W/mnt/data" "$BUFPOOL" 1 1
    phase "$cfg" start
    if [ -n "$ft_pid" ]; then
        ( while :; do
            if [ -r "$W/run/block.stats" ]; then
                printf 't=%s phase=%s load1=%s ' "$(date +%s.%N)" "$(cat "$W/phase")" "$(cut -d' ' -f1 /proc/loadavg)"
                grep -E '^(reads|read_hits|writes|write_hits|read_hit_percent|dirty_blocks|cached_blocks|capacity_blocks|dirty_percent|disk_reads|disk_writes|cleanings|threshold_cleanings|period_cleanings|write_stalls|read_admits|uncached_reads|uncached_sequential_reads|write_us|write_wait_us|write_wait_dirty_us|write_wait_nospace_us|write_wait_busy_us|moved_clean_blocks|moved_fill_blocks|fill_moves_withheld|moved_dirty_blocks|replacements|ssd_writes|flash_reclaims|flash_reclaim_us|flash_reclaim_flush_us|flash_segments_free)=' \
                    "$W/run/block.stats" | tr '\n' ' '
                echo
            fi
            sleep "$SAMPLE"
          done ) >"$OUT/$cfg-samples.txt" &
        SAMPLER=$!
    fi
    local wl c0 c1 d0 d1
    if [ "$WARMUP" -gt 0 ]; then
        # Not measured: every configuration is measured warm (cache and buffer pool).
        phase "$cfg" warmup
        sysbench oltp_read_only "${SB[@]}" --threads="$THREADS" --rand-type=pareto --time="$WARMUP" \
            --report-interval=10 run >"$OUT/$cfg-warmup.txt" 2>&1 ||
            { echo "sysbench warm-up failed on $cfg:" >&2; tail -20 "$OUT/$cfg-warmup.txt" >&2; exit 1; }
        grep -E 'transactions:' "$OUT/$cfg-warmup.txt" | sed "s/^/  $cfg warm-up /"
    fi
    for wl in $WORKLOADS; do
        phase "$cfg" "$wl"
        c0=$(cpu_ticks "${disk_pids[@]}"); d0=$(cpu_ticks $(cat "$CG/cgroup.procs"))
        sysbench "$wl" "${SB[@]}" --threads="$THREADS" --rand-type=pareto --time="$TIME" \
            --report-interval=10 --percentile=95 run >"$OUT/$cfg-$wl.txt" 2>&1 ||
            { echo "sysbench $wl failed on $cfg:" >&2; tail -20 "$OUT/$cfg-$wl.txt" >&2; exit 1; }
        c1=$(cpu_ticks "${disk_pids[@]}"); d1=$(cpu_ticks $(cat "$CG/cgroup.procs"))
        {
            echo "storage_cpu_ticks=$((c1 - c0)) db_cpu_ticks=$((d1 - d0)) clk_tck=$(getconf CLK_TCK)"
            echo "loadavg_end=$(cut -d" " -f1-3 /proc/loadavg | tr " " ,)"
            echo "cgroup_max_usage=$(cat "$CG/memory.max_usage_in_bytes")"
        } >>"$OUT/$cfg-$wl.txt"
        grep -E 'transactions:|95th' "$OUT/$cfg-$wl.txt" | sed "s/^/  $cfg $wl /"
    done
    phase "$cfg" done
    [ -n "$ft_pid" ] && cp "$W/run/block.stats" "$OUT/$cfg-flashtier.stats" 2>/dev/null
    if [ -n "$SAMPLER" ]; then sleep 0.2; kill "$SAMPLER" 2>/dev/null; wait "$SAMPLER" 2>/dev/null || true; SAMPLER=""; fi
    cleanup
    rm -f "$W/disk.img" "$W/ftcache.img"; rm -rf "$W/nbdtmp"
}

for cfg in $CONFIGS; do run_config "$cfg"; done
echo "loadavg_end=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/meta.txt"
python3 "$REPO/scripts/bench/mysql_report.py" "$OUT"
echo "results in $OUT"
