#!/usr/bin/env bash
# Unpaced overwrites with flash (issue 26): flashtier vs memcached extstore, same -m, same flash
# size, each in its own cgroup-v1 memory cgroup (page cache counted), RUNS fresh servers each,
# alternating. Per server and run:
#   1. fill: every key once (KEYS x VALUE, twice the flash) at full speed (closed loop);
#   2. churn: CHURN_DUR closed loop, CONNS connections x DEPTH pipelined, zipf THETA, SETS
#      fraction SETs, seed CHURN_SEED;
#   3. read: READ_DUR closed loop of GETs only with another seed (READ_SEED): replaying the
#      churn's key sequence would reward keeping what it wrote first (docs/benchmarks.md,
#      "Steady state", Seeds).
# Printed per run, then min/median/max per server (also OUT/summary.md, OUT/summary.json):
#   items     items on flash after the churn (memcached extstore_objects_used, flashtier
#             extstore_index_items) and curr_items (RAM + flash)
#   live      items on flash x VALUE / flash limit (the issue's "live values")
#   hit       read phase GET hits / GETs
#   wa        flash bytes written during the churn (memcached extstore_bytes_written,
#             flashtier flash_device_bytes_written) / value bytes SET (cmd_set delta x VALUE)
#   cpu       server utime+stime per op over the churn and over the read phase (µs)
#   flashtier only: where the flash goes after the churn (live, dead records, free segments)
# Usage: scripts/bench/churn.sh [OUT_DIR]  (root; default bench-results/churn-<time>)
# Env [defaults]: RUNS [3]  SERVERS ["memcached flashtier"]  MEM [64]  FLASH [1G]  KEYS [500000]
#   VALUE [4096]  THETA [0.9]  SETS [0.5]  CONNS [8]  DEPTH [8]  CHURN_DUR [40s]  READ_DUR [8s]
#   CHURN_SEED [2]  READ_SEED [3]  SETTLE [3]  CG_MB [2 x MEM]  FLASHTIER_EXTRA, MEMCACHED_OPTS
#   [slab_automove=2], FLASH_DIR, SERVER_THREADS [2]. About 80 s per server run on the shared
#   2-core VM: RUNS=3 with both servers is about 8 minutes, RUNS=1 about 3.
NAME=churn
OUT=${1:-$(cd "$(dirname "$0")/../.." && pwd)/bench-results/churn-$(date -u +%Y%m%dT%H%M%SZ)}
RUNS=${RUNS:-3} SERVERS=${SERVERS:-memcached flashtier} MEM=${MEM:-64} FLASH=${FLASH:-1G}
KEYS=${KEYS:-500000} VALUE=${VALUE:-4096} THETA=${THETA:-0.9} SETS=${SETS:-0.5}
CONNS=${CONNS:-8} DEPTH=${DEPTH:-8} CHURN_DUR=${CHURN_DUR:-40s} READ_DUR=${READ_DUR:-8s}
CHURN_SEED=${CHURN_SEED:-2} READ_SEED=${READ_SEED:-3} SETTLE=${SETTLE:-3}
CG_MB=${CG_MB:-$((2 * MEM))}
# shellcheck source=scripts/bench/lib.sh
source "$(dirname "$0")/lib.sh"
preflight
mkdir -p "$OUT/raw"; : > "$OUT/run.log"
machine_json "$OUT/machine.json"
cat > "$OUT/config.json" <<JSON
{"runs": $RUNS, "servers": "$SERVERS", "mem_mb": $MEM, "flash": "$FLASH", "keys": $KEYS,
 "value": $VALUE, "theta": $THETA, "sets": $SETS, "conns": $CONNS, "depth": $DEPTH,
 "churn_dur": "$CHURN_DUR", "read_dur": "$READ_DUR", "churn_seed": $CHURN_SEED,
 "read_seed": $READ_SEED, "cg_mb": $CG_MB, "server_threads": $SERVER_THREADS,
 "flashtier_extra": "$FLASHTIER_EXTRA", "memcached_opts": "$MEMCACHED_OPTS"}
JSON
log "out $OUT; load average $(cut -d' ' -f1-3 /proc/loadavg)"
getr=$(python3 -c "print(round(1 - $SETS, 6))")
COMMON=(-k "$KEYS" -v "$VALUE" -c "$CONNS" -d "$DEPTH" --warmup 0s)
for run in $(seq "$RUNS"); do
  for kind in $SERVERS; do
    label=$kind-r$run
    DIR=$OUT/raw/$label; mkdir -p "$DIR"
    start_server "$label" "$kind" "$MEM" "$FLASH" "$CG_MB"
    cut -d' ' -f1 /proc/loadavg > "$DIR/load_start"
    log "$label: fill $KEYS x $VALUE B, full speed"
    gen fill fill -k "$KEYS" -v "$VALUE" -c "$CONNS"
    sleep "$SETTLE"
    snap "$DIR/s0.json"
    log "$label: churn $CHURN_DUR closed loop, $CONNS x $DEPTH, zipf $THETA, $SETS SETs"
    gen churn load --duration "$CHURN_DUR" --dist "zipf:$THETA" --get-ratio "$getr" --seed "$CHURN_SEED" "${COMMON[@]}"
    snap "$DIR/s1.json"
    log "$label: read $READ_DUR, GETs only, seed $READ_SEED"
    gen read load --duration "$READ_DUR" --dist "zipf:$THETA" --get-ratio 1 --seed "$READ_SEED" "${COMMON[@]}"
    snap "$DIR/s2.json"
    cut -d' ' -f1 /proc/loadavg > "$DIR/load_end"
    stop_server
  done
done
log "load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT" "$VALUE" <<'PY' | tee "$OUT/summary.md"
import json, os, statistics, sys
out, vsize = sys.argv[1], int(sys.argv[2])
raw = os.path.join(out, "raw")

def load(p):
    with open(p) as f:
        return json.load(f)

def num(d, *names):
    for n in names:
        if n in d:
            try:
                return float(d[n])
            except ValueError:
                pass
    return None

def run(d):
    s0, s1, s2 = (load(os.path.join(d, f"s{i}.json")) for i in range(3))
    churn, read = load(os.path.join(d, "churn.json")), load(os.path.join(d, "read.json"))
    st0, st1 = s0["stats"], s1["stats"]
    ft = "extstore_index_items" in st1
    items = num(st1, "extstore_index_items", "extstore_objects_used")
    limit = num(st1, "extstore_capacity", "extstore_limit_maxbytes")
    sets = num(st1, "cmd_set") - num(st0, "cmd_set")
    wname = "flash_device_bytes_written" if ft else "extstore_bytes_written"
    wrote = num(st1, wname) - num(st0, wname)
    cr, rr = churn["rows"][0], read["rows"][0]
    r = {"label": os.path.basename(d), "kind": "flashtier" if ft else "memcached",
         "items_on_flash": items, "curr_items": num(st1, "curr_items"),
         "live_values": items * vsize / limit, "read_hit": rr["hit_ratio"],
         "churn_hit": cr["hit_ratio"], "wa": wrote / (sets * vsize) if sets else None,
         "wa_io": (s1["io_write_bytes"] - s0["io_write_bytes"]) / (sets * vsize) if sets else None,
         "churn_ops_s": cr["throughput_ops_per_sec"],
         "cpu_churn": cr.get("server_cpu_us_per_op"), "cpu_read": rr.get("server_cpu_us_per_op"),
         "cg_peak_mib": (s2.get("cgroup_max_usage_bytes") or 0) / 2**20,
         "load": open(os.path.join(d, "load_start")).read().strip() + "-"
                 + open(os.path.join(d, "load_end")).read().strip()}
    if ft:
        live, dead = num(st1, "extstore_live_bytes"), num(st1, "extstore_dead_bytes")
        used = num(st1, "extstore_bytes_used")
        r["flash"] = {"live": live / limit, "dead": dead / limit,
                      "free": (limit - used) / limit if used is not None else None}
        for k in ("extstore_reclaim_kept_hit", "extstore_reclaim_kept_unhit",
                  "extstore_reclaim_dropped_young", "extstore_reclaim_dropped_old",
                  "extstore_reclaim_dropped_in_ram", "evictions", "extstore_append_waits",
                  "extstore_evictions_deferred", "extstore_write_skipped"):
            v0, v1 = num(st0, k), num(st1, k)
            if v0 is not None and v1 is not None:
                r["flash"][k] = v1 - v0
    return r

runs = sorted((run(os.path.join(raw, d)) for d in sorted(os.listdir(raw))
               if os.path.exists(os.path.join(raw, d, "s2.json"))), key=lambda r: r["label"])
f = lambda x, fmt: "-" if x is None else fmt.format(x)
print("| run | items on flash | curr_items | live values / flash | read hit | churn hit "
      "| flash B / B SET (stats; io) | churn ops/s | CPU µs/op churn; read | cgroup peak MiB | load |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in runs:
    print(f"| {r['label']} | {f(r['items_on_flash'], '{:.0f}')} | {f(r['curr_items'], '{:.0f}')} "
          f"| {r['live_values']:.1%} | {r['read_hit']:.3f} | {r['churn_hit']:.3f} "
          f"| {f(r['wa'], '{:.2f}')}; {f(r['wa_io'], '{:.2f}')} | {r['churn_ops_s']:.0f} "
          f"| {f(r['cpu_churn'], '{:.1f}')}; {f(r['cpu_read'], '{:.1f}')} | {r['cg_peak_mib']:.0f} | {r['load']} |")
print()
print("| server | runs | items on flash | live values / flash | read hit | flash B / B SET | CPU µs/op churn | (min / median / max) |")
print("|---|---|---|---|---|---|---|---|")
summary = {}
for kind in ("memcached", "flashtier"):
    rs = [r for r in runs if r["kind"] == kind]
    if not rs:
        continue
    def mmm(key, fmt):
        xs = sorted(r[key] for r in rs if r[key] is not None)
        if not xs:
            return "-", None
        summary.setdefault(kind, {})[key] = [xs[0], statistics.median(xs), xs[-1]]
        return " / ".join(fmt.format(x) for x in (xs[0], statistics.median(xs), xs[-1])), xs
    cols = [mmm(k, fm)[0] for k, fm in (("items_on_flash", "{:.0f}"), ("live_values", "{:.1%}"),
                                         ("read_hit", "{:.3f}"), ("wa", "{:.2f}"), ("cpu_churn", "{:.1f}"))]
    print(f"| {kind} | {len(rs)} | " + " | ".join(cols) + " | |")
fts = [r for r in runs if r["kind"] == "flashtier"]
if fts:
    print()
    print("flashtier, where the flash goes after the churn (fraction of capacity) and reclaim's verdicts during it:")
    for r in fts:
        fl = r["flash"]
        rest = " ".join(f"{k.replace('extstore_', '')}={v:.0f}" for k, v in fl.items()
                        if k not in ("live", "dead", "free"))
        print(f"- {r['label']}: live {fl['live']:.1%}, dead {fl['dead']:.1%}, "
              f"free {f(fl['free'], '{:.1%}')}; {rest}")
if "memcached" in summary and "flashtier" in summary:
    ft, mc = summary["flashtier"], summary["memcached"]
    print()
    print(f"targets (medians): live values >= 85 %: {ft['live_values'][1]:.1%}; "
          f"hit >= memcached + 3 points: {ft['read_hit'][1]:.3f} vs {mc['read_hit'][1]:.3f} "
          f"({(ft['read_hit'][1] - mc['read_hit'][1]) * 100:+.1f} points); "
          f"flash B / B SET <= 1.3: {ft['wa'][1]:.2f}")
with open(os.path.join(out, "summary.json"), "w") as fh:
    json.dump({"runs": runs, "summary": summary}, fh, indent=1)
PY
log "done: $OUT/summary.md"
