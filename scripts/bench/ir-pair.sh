#!/usr/bin/env bash
# Instructions per request (callgrind, collection on only around the measured phase) for a
# flashtier binary: noise-free CPU-per-op proxy for a pure refactor's before/after.
# Usage: scripts/bench/ir-pair.sh BIN LABEL SHAPE   (SHAPE: ramget | ramset | ramget4k; needs
# valgrind). ramget4k: 4 KiB values, which a GET reply sends by reference (Output::put_value).
# Env: BENCH_BIN (flashtier-bench), OUT_ROOT [bench-results/ir]. RAM shapes only: a flash
# configuration stops under valgrind (the io_uring ring's mapping).
set -euo pipefail
BIN=$1 LABEL=$2 SHAPE=$3
BENCH=${BENCH_BIN:-$(cd "$(dirname "$0")/../.." && pwd)/target/release/flashtier-bench}
OUT=${OUT_ROOT:-bench-results/ir}/$LABEL-$SHAPE; rm -rf "$OUT"; mkdir -p "$OUT"
PORT=$((20000 + RANDOM % 20000))
case $SHAPE in
  ramget4k) SRV=(--ram-only -m 128); KEYS=10000; V=4096;;
  ram*) SRV=(--ram-only -m 64); KEYS=20000; V=100;;
  *) echo "unknown shape $SHAPE (ramget | ramset | ramget4k)" >&2; exit 2;;
esac
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$OUT/cg.%p" \
  "$BIN" kv --listen 127.0.0.1:$PORT --threads 2 "${SRV[@]}" > "$OUT/server.log" 2>&1 &
VPID=$!
for i in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.5; done
"$BENCH" fill -s 127.0.0.1:$PORT -k $KEYS -v $V -c 4 > "$OUT/fill.txt" 2>&1
case $SHAPE in
  ramget|ramget4k) GR=1.0;;
  ramset) GR=0.0;;
esac
DIST=zipf:0.99
callgrind_control -i on $VPID > /dev/null
"$BENCH" load -s 127.0.0.1:$PORT -k $KEYS -v $V -c 4 -d 1 --dist $DIST --get-ratio $GR --ops 4000 --warmup 0s --json "$OUT/load.json" > "$OUT/load.txt" 2>&1
callgrind_control -i off $VPID > /dev/null
callgrind_control -d $VPID > /dev/null
kill $VPID; wait $VPID 2>/dev/null || true
python3 - "$OUT" <<'PY'
import glob, json, sys, re
out = sys.argv[1]
ir = 0
for f in glob.glob(out + "/cg.*"):
    for line in open(f):
        if line.startswith("summary:") or line.startswith("totals:"):
            ir = max(ir, 0)
    m = [l for l in open(f) if l.startswith("totals:")]
    if m: ir += int(m[-1].split()[1])
d = json.load(open(out + "/load.json"))
ops = sum(r.get("completed_ops", 0) for r in d["rows"]) if isinstance(d.get("rows"), list) else None
print(out, "Ir", ir, "ops", ops, "Ir/op", round(ir / ops) if ops else None)
PY
