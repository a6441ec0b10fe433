#!/usr/bin/env bash
# Instructions per request (callgrind, collection on only around the measured phase) for a
# flashtier binary: noise-free CPU-per-op proxy for a pure refactor's before/after.
# Usage: scripts/bench/ir-pair.sh BIN LABEL SHAPE   (SHAPE: ramget | ramset | ramget4k; needs
# valgrind). ramget4k: 4 KiB values, which a GET reply sends by reference (Output::put_value).
# Env: BENCH_BIN (flashtier-bench), OUT_ROOT [bench-results/ir]. RAM shapes only: a flash
# configuration stops under valgrind (the io_uring ring's mapping).
# Larger tables (the shape's defaults fit in any cache): KEYS, VALUE, MEM (-m), DIST
# [zipf:0.99], OPS [4000]. CACHE_SIM=1 adds callgrind's cache simulation and prints D1 and
# LL misses per request beside Ir (the simulated caches are the host's L1d and last level;
# LL=SIZE,ASSOC,LINE sets the last level, e.g. LL=2097152,16,64 for misses beyond a 2 MiB L2).
# Sitting 17 (issue 30), 600k keys of 100 B, uniform GETs:
#   KEYS=600000 MEM=512 DIST=uniform OPS=20000 CACHE_SIM=1 LL=33554432,16,64 \
#     scripts/bench/ir-pair.sh BIN main ramget   (docs/serving.md, "Sitting 17")
set -euo pipefail
BIN=$1 LABEL=$2 SHAPE=$3
BENCH=${BENCH_BIN:-$(cd "$(dirname "$0")/../.." && pwd)/target/release/flashtier-bench}
OUT=${OUT_ROOT:-bench-results/ir}/$LABEL-$SHAPE; rm -rf "$OUT"; mkdir -p "$OUT"
PORT=$((20000 + RANDOM % 20000))
case $SHAPE in
  ramget4k) SRV=(--ram-only -m 128); KEYS=${KEYS:-10000}; V=${VALUE:-4096};;
  ram*) SRV=(--ram-only -m 64); KEYS=${KEYS:-20000}; V=${VALUE:-100};;
  *) echo "unknown shape $SHAPE (ramget | ramset | ramget4k)" >&2; exit 2;;
esac
[ -n "${MEM:-}" ] && SRV=(--ram-only -m "$MEM")
SIM=()
if [ "${CACHE_SIM:-0}" = 1 ]; then
  SIM=(--cache-sim=yes)
  [ -n "${LL:-}" ] && SIM+=(--LL="$LL")
fi
valgrind --tool=callgrind --instr-atstart=no "${SIM[@]}" --callgrind-out-file="$OUT/cg.%p" \
  "$BIN" kv --listen 127.0.0.1:$PORT --threads 2 "${SRV[@]}" > "$OUT/server.log" 2>&1 &
VPID=$!
for i in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.5; done
"$BENCH" fill -s 127.0.0.1:$PORT -k "$KEYS" -v "$V" -c 4 > "$OUT/fill.txt" 2>&1
case $SHAPE in
  ramget|ramget4k) GR=1.0;;
  ramset) GR=0.0;;
esac
DIST=${DIST:-zipf:0.99}
callgrind_control -i on $VPID > /dev/null
"$BENCH" load -s 127.0.0.1:$PORT -k "$KEYS" -v "$V" -c 4 -d 1 --dist $DIST --get-ratio $GR --ops "${OPS:-4000}" --warmup 0s --json "$OUT/load.json" > "$OUT/load.txt" 2>&1
callgrind_control -i off $VPID > /dev/null
callgrind_control -d $VPID > /dev/null
kill $VPID; wait $VPID 2>/dev/null || true
python3 - "$OUT" <<'PY'
import glob, json, sys
out = sys.argv[1]
names, tot = None, None
for f in glob.glob(out + "/cg.*"):
    lines = open(f).read().splitlines()
    ev = [l.split()[1:] for l in lines if l.startswith("events:")]
    t = [l.split()[1:] for l in lines if l.startswith("totals:")]
    if not ev or not t:
        continue
    names = ev[-1]
    vals = [int(x) for x in t[-1]] + [0] * (len(names) - len(t[-1]))
    tot = vals if tot is None else [a + b for a, b in zip(tot, vals)]
d = json.load(open(out + "/load.json"))
ops = sum(r.get("completed_ops", 0) for r in d["rows"]) if isinstance(d.get("rows"), list) else None
c = dict(zip(names, tot))
line = f"{out} Ir {c['Ir']} ops {ops} Ir/op {round(c['Ir'] / ops) if ops else None}"
if "D1mr" in c and ops:
    d1 = c["D1mr"] + c["D1mw"]
    ll = c["DLmr"] + c["DLmw"]
    line += f" D1miss/op {d1 / ops:.2f} (reads {c['D1mr'] / ops:.2f}) LLmiss/op {ll / ops:.3f} (reads {c['DLmr'] / ops:.3f})"
print(line)
PY
