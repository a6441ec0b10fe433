#!/usr/bin/env bash
# Paired block-face runs: OLD and NEW flashtier block over the same backing file (no delay: the
# server's CPU per request is what a pure refactor could change), fresh cache per run, fio
# randrw 70/30 4 KiB zipf 1.1 QD16 through fio's nbd engine; IOPS, p99 completion latency and
# the server's CPU (utime+stime from /proc) per request. Usage: scripts/bench/block-pair.sh OLD NEW ROUNDS OUT
set -euo pipefail
OLD=$1 NEW=$2 ROUNDS=${3:-3} OUT=$4
mkdir -p "$OUT"; W=$(mktemp -d /var/tmp/bp.XXXXXX)
truncate -s 1G "$W/backing.img"
fio --name=fill --filename="$W/backing.img" --rw=write --bs=1M --size=1G --direct=1 >/dev/null
for r in $(seq "$ROUNDS"); do
  for which in old new; do
    BIN=$OLD; [ $which = new ] && BIN=$NEW
    rm -rf "$W/cache.img" "$W/run"; mkdir -p "$W/run"
    "$BIN" block --backing "$W/backing.img" --cache "$W/cache.img:128M" --listen "unix:$W/ft.sock" \
      --admin 127.0.0.1:0 --run-dir "$W/run" 2>"$OUT/$which-r$r.log" & PID=$!
    for i in $(seq 100); do [ -S "$W/ft.sock" ] && break; sleep 0.1; done
    t0=$(awk '{print $14+$15}' /proc/$PID/stat)
    fio --name=p --ioengine=nbd --uri="nbd+unix:///block?socket=$W/ft.sock" --rw=randrw --rwmixread=70 \
      --bs=4k --iodepth=16 --random_distribution=zipf:1.1 --size=1G --time_based --runtime=15 \
      --output-format=json --output="$OUT/$which-r$r.json" >/dev/null 2>&1
    t1=$(awk '{print $14+$15}' /proc/$PID/stat)
    kill $PID; wait $PID 2>/dev/null || true; rm -f "$W/ft.sock"
    python3 - "$OUT/$which-r$r.json" "$((t1-t0))" "$which" "$r" <<'PY'
import json,sys,os
t=open(sys.argv[1]).read(); t=t[t.index('{'):]
j=json.loads(t)["jobs"][0]; ticks=int(sys.argv[2]); hz=os.sysconf('SC_CLK_TCK')
n=j["read"]["total_ios"]+j["write"]["total_ios"]
iops=j["read"]["iops"]+j["write"]["iops"]
p99=max(j["read"]["clat_ns"]["percentile"]["99.000000"], j["write"]["clat_ns"]["percentile"]["99.000000"])/1000
print(f'{sys.argv[3]} r{sys.argv[4]} iops {iops:.0f} p99_us {p99:.0f} cpu_us_per_io {ticks/hz*1e6/n:.1f}')
PY
  done
done | tee "$OUT/summary.txt"
rm -rf "$W"
