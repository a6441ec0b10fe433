#!/usr/bin/env bash
# KV steady state, quick form: flashtier vs memcached extstore, same -m and flash size, each in
# its own cgroup-v1 memory limit. Per server and per SET mix: load KEYS x VALUE (past flash),
# then DURATION of zipf:THETA traffic with SET fraction S, then READ_DURATION of 90/10 reads.
# Prints one line per server and mix: items on flash, live fraction of the flash, hit ratio of
# the mix and read phases, flash bytes written per byte SET during the mix.
# Usage: scripts/bench/kv-steady-quick.sh [--mixes 0.5,0.1] [--servers flashtier,memcached]
#   env: MEM=64 FLASH_SIZE=1G KEYS=500000 VALUE=4096 THETA=0.9 DURATION=40s READ_DURATION=20s
#        CGLIM=768 FLASHTIER_EXTRA="--knob ..." MC_OPTS="ext_item_size=64" OUT=dir
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
MIXES=0.5,0.1 SERVERS=flashtier,memcached
while (($#)); do
  case "$1" in
    --mixes) MIXES=$2; shift 2 ;;
    --servers) SERVERS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
MEM=${MEM:-64} FLASH_SIZE=${FLASH_SIZE:-1G} KEYS=${KEYS:-500000} VALUE=${VALUE:-4096}
THETA=${THETA:-0.9} DURATION=${DURATION:-40s} READ_DURATION=${READ_DURATION:-20s} CGLIM=${CGLIM:-768}
FLASHTIER_EXTRA=${FLASHTIER_EXTRA:-}
OUT=${OUT:-$ROOT/bench-results/kv-steady-quick-$(date -u +%Y%m%dT%H%M%SZ)}
FLASH_DIR=${FLASH_DIR:-/var/tmp/flashtier-bench}
BENCH=${BENCH:-$ROOT/target/release/flashtier-bench} FT=${FT:-$ROOT/target/release/flashtier} PROBE="python3 $ROOT/scripts/bench/probe.py"
mkdir -p "$OUT" "$FLASH_DIR"
SERVER_PID="" CG=""
stop() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""; fi
  if [ -n "$CG" ] && [ -d "$CG" ]; then sleep 0.5; rmdir "$CG" 2>/dev/null || true; fi
}
trap stop EXIT
snap() { # port out.json : plain stats + stats extstore merged
  python3 - "$1" "$2" <<'PY'
import json, socket, sys
port, out = int(sys.argv[1]), sys.argv[2]
d = {}
for cmd in (b"stats\r\n", b"stats extstore\r\n"):
    s = socket.create_connection(("127.0.0.1", port)); s.sendall(cmd); buf = b""
    while not (buf.endswith(b"END\r\n") or buf.endswith(b"ERROR\r\n")):
        c = s.recv(65536)
        if not c: break
        buf += c
    s.close()
    for line in buf.decode(errors="replace").splitlines():
        p = line.split(" ", 2)
        if len(p) == 3 and p[0] == "STAT": d.setdefault(p[1], p[2])
json.dump(d, open(out, "w"))
PY
}
IFS=, read -r -a MLIST <<< "$MIXES"
IFS=, read -r -a SLIST <<< "$SERVERS"
for mix in "${MLIST[@]}"; do
  getr=$(python3 -c "print(round(1-$mix, 4))")
  for srv in "${SLIST[@]}"; do
    tag=$srv-set$mix
    port=$($PROBE free-port)
    CG=/sys/fs/cgroup/memory/kvsteady_$srv
    [ -d "$CG" ] && rmdir "$CG"
    mkdir "$CG"; echo $((CGLIM << 20)) > "$CG/memory.limit_in_bytes"
    flash=$FLASH_DIR/$tag.flash; rm -f "$flash"
    case $srv in
      memcached) cmd=(/usr/bin/memcached -u root -l 127.0.0.1 -p "$port" -m "$MEM" -U 0 -t 2 -o "ext_path=$flash:$FLASH_SIZE${MC_OPTS:+,$MC_OPTS}") ;;
      # shellcheck disable=SC2206
      flashtier) cmd=("$FT" kv --listen "127.0.0.1:$port" -m "$MEM" --threads 2 --flash "$flash:$FLASH_SIZE" $FLASHTIER_EXTRA) ;;
    esac
    sync; echo 3 > /proc/sys/vm/drop_caches
    bash -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' _ "$CG" "${cmd[@]}" > "$OUT/$tag.server.log" 2>&1 &
    SERVER_PID=$!
    $PROBE wait-port "$port" "$SERVER_PID" 20
    common=(-s "127.0.0.1:$port" -c 8 -d 4 -k "$KEYS" -v "$VALUE" --dist "zipf:$THETA" --warmup 0s --no-server-stats)
    "$BENCH" load "${common[@]}" --load-phase --get-ratio 1 --duration 1s > "$OUT/$tag.load.txt" 2>&1
    snap "$port" "$OUT/$tag.s0.json"
    "$BENCH" load "${common[@]}" --get-ratio "$getr" --seed 2 --duration "$DURATION" --json "$OUT/$tag.mix.json" > "$OUT/$tag.mix.txt" 2>&1
    snap "$port" "$OUT/$tag.s1.json"
    "$BENCH" load "${common[@]}" --get-ratio 0.9 --seed 3 --duration "$READ_DURATION" --json "$OUT/$tag.read.json" > "$OUT/$tag.read.txt" 2>&1
    snap "$port" "$OUT/$tag.s2.json"
    stop; rm -f "$flash"
    python3 - "$OUT" "$tag" "$VALUE" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
out, tag, vsize = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = [json.load(open(f"{out}/{tag}.s{i}.json")) for i in range(3)]
def n(d, k): 
    try: return float(d.get(k, 0))
    except ValueError: return 0.0
def hr(p):
    j = json.load(open(f"{out}/{tag}.{p}.json"))
    ph = j["phases"][-1] if "phases" in j else j
    def find(o):
        if isinstance(o, dict):
            if "hit_ratio" in o: return o["hit_ratio"]
            for v in o.values():
                r = find(v)
                if r is not None: return r
        if isinstance(o, list):
            for v in o:
                r = find(v)
                if r is not None: return r
    return find(ph)
end = s[2]
sets = n(s[1], "cmd_set") - n(s[0], "cmd_set")
if "flash_device_bytes_written" in end:
    wrote = n(s[1], "flash_device_bytes_written") - n(s[0], "flash_device_bytes_written")
    live = n(end, "extstore_live_bytes"); cap = n(end, "extstore_capacity")
    items = live / (vsize + 70)
else:
    wrote = n(s[1], "extstore_bytes_written") - n(s[0], "extstore_bytes_written")
    live = n(end, "extstore_bytes_used") - n(end, "extstore_bytes_fragmented"); cap = n(end, "extstore_limit_maxbytes")
    items = n(end, "extstore_objects_used")
wa = wrote / (sets * vsize) if sets else 0
print(f"{tag}: items_on_flash={items:.0f} live_fraction={live/cap if cap else 0:.3f} "
      f"hit_mix={hr('mix')} hit_read={hr('read')} flash_bytes_per_set_byte={wa:.3f} sets={sets:.0f}")
PY
  done
done
echo "results in $OUT"
