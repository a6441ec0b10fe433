#!/usr/bin/env bash
# A real run for the dashboard picture: flashtier kv (small RAM, a flash file) under
# flashtier-bench, flashtier block under fio over NBD (with one `ctl flush` midway),
# Debian's Prometheus scraping both admin endpoints every 2 s, then render.py draws the
# dashboard's panels from Prometheus's query API into docs/img/dashboard.png.
# Needs: prometheus, fio (NBD engine), python3-matplotlib; a release build.
# Usage: scripts/dashboard/demo.sh [SECONDS]   (default 180; everything on 127.0.0.1)
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-180}
FT=target/release/flashtier
BENCH=target/release/flashtier-bench
W=$(mktemp -d /var/tmp/ftdash.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
KV=127.0.0.1:21311 KV_ADMIN=127.0.0.1:21399 BLOCK_ADMIN=127.0.0.1:21810 PROM=127.0.0.1:29090

$FT kv --listen $KV --admin $KV_ADMIN --memory 32MiB --flash "$W/flash.bin:512MiB" \
  --threads 2 2>"$W/kv.log" & PIDS+=($!)
truncate -s 512M "$W/backing.img"
$FT block --backing "$W/backing.img" --cache "$W/cache.img:128MiB" --listen "unix:$W/nbd.sock" \
  --admin $BLOCK_ADMIN --run-dir "$W/run" --flush-period 60 --threads 2 2>"$W/block.log" & PIDS+=($!)
cat >"$W/prom.yml" <<YML
global: {scrape_interval: 2s, evaluation_interval: 2s}
scrape_configs:
  - {job_name: flashtier-kv, static_configs: [{targets: ['$KV_ADMIN']}]}
  - {job_name: flashtier-block, static_configs: [{targets: ['$BLOCK_ADMIN']}]}
YML
prometheus --config.file="$W/prom.yml" --storage.tsdb.path="$W/tsdb" \
  --web.listen-address=$PROM 2>"$W/prom.log" & PIDS+=($!)
sleep 3
START=$(date +%s)
uptime | tee "$W/uptime-start"

# kv: fill 300k x 1 KiB items (about 10x the RAM), then a zipf read-mostly mix.
$BENCH load -s $KV -c 8 -k 300000 -v 1024 --load-phase --load-rate 20000 --rate 15000 \
  --dist zipf:0.99 --get-ratio 0.9 --warmup 0s --duration "$((SECS - 20))s" \
  --no-server-stats >"$W/bench.out" 2>&1 & PIDS+=($!)
# block: 4 KiB random reads and writes, zipf-skewed, paced.
fio --name=demo --ioengine=nbd --uri="nbd+unix:///block?socket=$W/nbd.sock" --rw=randrw \
  --rwmixread=70 --bs=4k --iodepth=8 --random_distribution=zipf:1.1 --size=512M \
  --rate_iops=1500 --time_based --runtime="$((SECS - 20))" >"$W/fio.out" 2>&1 & PIDS+=($!)
sleep "$((SECS / 2))"
$FT ctl --admin $BLOCK_ADMIN flush >/dev/null
sleep "$((SECS / 2))"
END=$(date +%s)
uptime | tee "$W/uptime-end"
python3 scripts/dashboard/render.py --prometheus "http://$PROM" --start "$START" --end "$END" \
  --out docs/img/dashboard.png \
  --title "flashtier dashboard panels, rendered from Prometheus ($(date -u +%Y-%m-%d), load $(cut -d, -f3- <"$W/uptime-end" | sed 's/.*average: //'))"
tail -n 3 "$W/bench.out" || true
grep -E "read:|write:" "$W/fio.out" || true
