#!/usr/bin/env bash
# Slow-flash fill (issue 26): does a fill whose flash falls behind lose any item?
# Runs `flashtier kv -m 64 -t 2 --flash F:2GiB` inside a cgroup v1 blkio cgroup whose
# write bandwidth to the disk holding F is throttled (blkio.throttle.write_bps_device), so
# flash falls behind on purpose and deterministically; fills N × 4 KiB keys at full speed
# (`flashtier-bench fill -c 8 -d 8`), records the stats, then GETs every key (multi-get
# loop, value length checked) so a missing key is counted. Prints one summary line.
# Usage: scripts/bench/slow-flash.sh OUT_DIR     (needs root and cgroup v1 blkio)
# Env: FLASHTIER_BIN, BENCH_BIN, KEYS [300000], BPS [31457280 = 30 MiB/s], MEM [64],
#      FLASH_DIR [/var/tmp/flashtier-bench], CG [s9-slowflash], EXTRA (more kv flags).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$1
KEYS=${KEYS:-300000}
BPS=${BPS:-31457280}
MEM=${MEM:-64}
FLASH_DIR=${FLASH_DIR:-/var/tmp/flashtier-bench}
FLASHTIER_BIN=${FLASHTIER_BIN:-$ROOT/target/release/flashtier}
BENCH=${BENCH_BIN:-$ROOT/target/release/flashtier-bench}
CGDIR=/sys/fs/cgroup/blkio/${CG:-s9-slowflash}
EXTRA=${EXTRA:-}
mkdir -p "$OUT" "$FLASH_DIR"
FLASH=$FLASH_DIR/slow-flash-$$.bin
DEV=$(lsblk -no MAJ:MIN "$(findmnt -no SOURCE -T "$FLASH_DIR")" | tr -d ' ')
mkdir -p "$CGDIR"
echo "$DEV $BPS" > "$CGDIR/blkio.throttle.write_bps_device"
PID=""
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2> /dev/null && wait "$PID" 2> /dev/null
  PID=""
  rm -f "$FLASH"
  echo "$DEV 0" > "$CGDIR/blkio.throttle.write_bps_device" 2> /dev/null || true
  rmdir "$CGDIR" 2> /dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PORT=$(python3 "$ROOT/scripts/bench/probe.py" free-port)
# shellcheck disable=SC2086
sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' sh "$CGDIR" "$FLASHTIER_BIN" kv \
  -l 127.0.0.1 -p "$PORT" -m "$MEM" -t 2 --flash "$FLASH:2GiB" $EXTRA > "$OUT/server.log" 2>&1 &
PID=$!
# shellcheck source=scripts/bench/kvstats.sh
source "$(dirname "$0")/kvstats.sh"
for _ in $(seq 100); do kv_stats "$PORT" > /dev/null 2>&1 && break; sleep 0.1; done
grep -qx "$PID" "$CGDIR/cgroup.procs" || { echo "server not in $CGDIR" >&2; exit 1; }

T0=$(date +%s.%N)
nice -n 19 "$BENCH" fill -s "127.0.0.1:$PORT" -c 8 -d 8 -k "$KEYS" -v 4096 \
  --json "$OUT/fill.json" > "$OUT/fill.log" 2>&1
T1=$(date +%s.%N)
{ for s in "" items extstore; do kv_stats "$PORT" "$s"; done; } > "$OUT/after-fill.stats"
cp "$CGDIR/blkio.throttle.io_service_bytes" "$OUT/blkio-bytes.txt"
python3 - "$PORT" "$KEYS" > "$OUT/verify.txt" <<'PY'
import socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port))
f = s.makefile("rb")
found = bad = 0
missing = []
for lo in range(0, n, 100):
    keys = [f"key:{i}" for i in range(lo, min(n, lo + 100))]
    s.sendall(("get " + " ".join(keys) + "\r\n").encode())
    got = set()
    while True:
        line = f.readline()
        if line == b"END\r\n":
            break
        _, k, _, ln = line.split()[:4]
        data = f.read(int(ln) + 2)
        got.add(k.decode())
        bad += int(ln) != 4096 or len(data) != 4098
    found += len(got)
    missing += [k for k in keys if k not in got]
print(f"keys {n} found {found} missing {len(missing)} bad_length {bad}")
print("first_missing", " ".join(missing[:20]))
PY
{ for s in "" items extstore; do kv_stats "$PORT" "$s"; done; } > "$OUT/after-verify.stats"
python3 - "$OUT" "$T0" "$T1" <<'PY'
import sys
out, t0, t1 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
st = {}
for line in open(f"{out}/after-fill.stats"):
    k, v = line.split()
    st.setdefault(k, v)
names = ["curr_items", "evictions", "items:1:evicted_forced", "extstore_evictions_deferred",
         "extstore_append_waits", "extstore_append_wait_timeouts", "extstore_drop_waits",
         "extstore_drop_wait_timeouts", "extstore_bytes_written"]
ver = open(f"{out}/verify.txt").readline().strip()
print(f"fill_s {t1 - t0:.1f} " + " ".join(f"{k} {st.get(k, '-')}" for k in names) + " | " + ver)
PY
