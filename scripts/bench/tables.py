#!/usr/bin/env python3
"""Summaries of steady.sh, shapes.sh and hit-ratio-ram.sh output: summary.json, a markdown
table on stdout, and PNG plots.

  tables.py steady OUT   per run: items on flash, live values / flash, read hit ratio, flash
                         bytes written per byte SET, server CPU per op, latency; and
                         flashtier vs memcached per mix
  tables.py ram OUT      steady runs at several -m: hit ratio vs RAM, hit-ratio-vs-ram.png
  tables.py shapes OUT   per shape: throughput, hits/s, p50/p99/p99.9, server CPU per op,
                         flash GETs/s and their share of fio's ceiling; ratios; shapes.png

Server-specific names: the first name present in a server's `stats` + `stats extstore` wins
(memcached's first, then flashtier's).
"""
import json
import os
import sys

from report import FLASH_HIT_STATS as FLASH_GETS
from report import FLASH_ITEM_STATS as FLASH_ITEMS
from report import FLASH_WRITE_STATS as FLASH_WRITTEN
from report import load
from table_fmt import f, plot, ratio, stat

FLASH_LIMIT = ["extstore_limit_maxbytes", "extstore_capacity"]
FLASH_USED = ["extstore_bytes_used"]


def row0(gen):
    return gen["rows"][0] if gen and gen.get("rows") else None


# ---- steady ----------------------------------------------------------------------------------

def steady_run(d):
    run = load(os.path.join(d, "run.json"))
    s0, s1, s2 = (load(os.path.join(d, f"s{i}.json")) for i in range(3))
    fill, ow, rd = (load(os.path.join(d, f"{t}.json")) for t in ("fill", "overwrite", "read"))
    if not (run and s0 and s1 and s2 and ow and rd):
        return None
    vsize = ow["config"]["value_size_mean"]
    owr, rdr = row0(ow), row0(rd)
    set_bytes = owr["counters"]["set_value_bytes"]
    lim = stat(s1["stats"], FLASH_LIMIT)

    def space(s):
        items = stat(s["stats"], FLASH_ITEMS)
        # Live bytes on flash: memcached's extstore_bytes_used; flashtier's counts whole used
        # segments, so its dead bytes are subtracted.
        used = stat(s["stats"], FLASH_USED)
        dead = s["stats"].get("flash_bytes_dead")
        if used is not None and dead is not None:
            used -= dead
        return {"items_on_flash": items, "curr_items": s["stats"].get("curr_items"),
                "live_value_fraction": ratio(items * vsize if items is not None else None, lim),
                "live_bytes_fraction": ratio(used, lim)}

    w_stats = None
    a, b = stat(s0["stats"], FLASH_WRITTEN), stat(s1["stats"], FLASH_WRITTEN)
    if a is not None and b is not None:
        w_stats = ratio(b - a, set_bytes)
    lp = fill.get("load_phase") if fill else None
    return dict(run, **{
        "label": os.path.basename(d),
        "flash_limit_bytes": lim,
        "fill_sets": lp and lp["sets"], "fill_errors": lp and lp["counters"]["server_errors"],
        "after_overwrite": space(s1), "after_read": space(s2),
        "read_hit_ratio": rdr["hit_ratio"],
        "overwrite_hit_ratio": owr["hit_ratio"],
        "overwrite_set_bytes": set_bytes,
        "flash_written_per_set_byte_io": ratio(s1["io_write_bytes"] - s0["io_write_bytes"], set_bytes),
        "flash_written_per_set_byte_stats": w_stats,
        "overwrite": {k: owr[k] for k in ("throughput_ops_per_sec", "achieved_fraction",
                                          "server_cpu_us_per_op", "latency", "errors")},
        "read": {k: rdr[k] for k in ("throughput_ops_per_sec", "achieved_fraction",
                                     "server_cpu_us_per_op", "latency", "errors")},
        "cgroup_max_usage_bytes": s2.get("cgroup_max_usage_bytes"),
    })


def steady_runs(out):
    raw = os.path.join(out, "raw")
    runs = [r for r in (steady_run(os.path.join(raw, d)) for d in os.listdir(raw)) if r]
    return sorted(runs, key=lambda r: (r["kind"], r["mem_mb"], r["set_fraction"], r["theta"]))


def steady(out):
    runs = steady_runs(out)
    if not runs:
        sys.exit(f"tables.py: no complete runs under {out}/raw")
    cfg = load(os.path.join(out, "config.json")) or {}
    mach = load(os.path.join(out, "machine.json")) or {}
    lines = [f"Steady state: -m {cfg.get('mems')} MiB, flash {cfg.get('flash')}, "
             f"{cfg.get('keys')} keys x {cfg.get('value')} B, cgroup {cfg.get('cg_mb')} MiB; "
             f"overwrite {cfg.get('ow_dur')} at {cfg.get('ow_rate')} ops/s, read {cfg.get('read_dur')} "
             f"at {cfg.get('read_rate')} ops/s ({'GETs, cache-aside refills' if cfg.get('aside') else '90/10'}), {cfg.get('conns')} conns x depth {cfg.get('depth')}. "
             f"git {mach.get('git_rev')}, {mach.get('utc')}, load avg at start {mach.get('loadavg_at_start')}.",
             "",
             "| server | -m | SETs | zipf | items on flash | live values / flash | live bytes / flash (server) "
             "| read hit ratio | flash B written / B SET (io; stats) | CPU µs/op (ow; read) "
             "| read p50/p99/p99.9 µs | ow p99 µs | achieved (ow; read) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        a, rd, ow = r["after_overwrite"], r["read"], r["overwrite"]
        lat = rd["latency"]
        lines.append(
            f"| {r['kind']} | {r['mem_mb']} | {r['set_fraction']:.0%} | {r['theta']} "
            f"| {f(a['items_on_flash'], '{:.0f}')} | {f(a['live_value_fraction'], '{:.1%}')} "
            f"| {f(a['live_bytes_fraction'], '{:.1%}')} | {f(r['read_hit_ratio'], '{:.3f}')} "
            f"| {f(r['flash_written_per_set_byte_io'])}; {f(r['flash_written_per_set_byte_stats'])} "
            f"| {f(ow['server_cpu_us_per_op'], '{:.1f}')}; {f(rd['server_cpu_us_per_op'], '{:.1f}')} "
            f"| {lat['p50_us']:.0f}/{lat['p99_us']:.0f}/{lat['p999_us']:.0f} "
            f"| {ow['latency']['p99_us']:.0f} "
            f"| {f(ow['achieved_fraction'])}; {f(rd['achieved_fraction'])} |")
    # flashtier vs memcached, per (mem, mix)
    cmp = []
    by = {}
    for r in runs:
        by.setdefault((r["mem_mb"], r["set_fraction"], r["theta"]), {})[r["kind"]] = r
    for key, pair in sorted(by.items()):
        ft, mc = pair.get("flashtier"), pair.get("memcached")
        if not (ft and mc):
            continue
        c = {"mem_mb": key[0], "set_fraction": key[1], "theta": key[2],
             "hit_ratio_points": 100 * (ft["read_hit_ratio"] - mc["read_hit_ratio"]),
             "live_fraction_flashtier": ft["after_overwrite"]["live_value_fraction"],
             "live_fraction_memcached": mc["after_overwrite"]["live_value_fraction"],
             "items_ratio": ratio(ft["after_overwrite"]["items_on_flash"], mc["after_overwrite"]["items_on_flash"]),
             "write_per_set_flashtier": ft["flash_written_per_set_byte_io"],
             "write_per_set_memcached": mc["flash_written_per_set_byte_io"],
             "read_cpu_ratio": ratio(ft["read"]["server_cpu_us_per_op"], mc["read"]["server_cpu_us_per_op"]),
             "read_p99_ratio": ratio(ft["read"]["latency"]["p99_us"], mc["read"]["latency"]["p99_us"])}
        c["targets"] = {
            "live_values_ge_85pct": (c["live_fraction_flashtier"] or 0) >= 0.85,
            "hit_ratio_ge_memcached_plus_5": c["hit_ratio_points"] >= 5,
            "flash_written_per_set_byte_le_1_3": (c["write_per_set_flashtier"] or 99) <= 1.3}
        cmp.append(c)
    if cmp:
        lines += ["", "flashtier vs memcached (targets of the steady-state benchmark: live values >= 85 % "
                  "of flash, hit ratio >= memcached + 5 points, flash bytes written per byte SET <= 1.3):", "",
                  "| -m | SETs | zipf | hit ratio Δ (points) | live/flash ft; mc | items ft ÷ mc "
                  "| written/SET ft; mc | read CPU/op ft ÷ mc | read p99 ft ÷ mc | targets met |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for c in cmp:
            met = [k for k, v in c["targets"].items() if v]
            lines.append(
                f"| {c['mem_mb']} | {c['set_fraction']:.0%} | {c['theta']} | {c['hit_ratio_points']:+.1f} "
                f"| {f(c['live_fraction_flashtier'], '{:.1%}')}; {f(c['live_fraction_memcached'], '{:.1%}')} "
                f"| {f(c['items_ratio'])} | {f(c['write_per_set_flashtier'])}; {f(c['write_per_set_memcached'])} "
                f"| {f(c['read_cpu_ratio'])} | {f(c['read_p99_ratio'])} | {len(met)}/3 {', '.join(met)} |")
    with open(os.path.join(out, "summary.json"), "w") as fh:
        json.dump({"config": cfg, "machine": mach, "runs": runs, "flashtier_vs_memcached": cmp}, fh, indent=2)
    print("\n".join(lines))
    return runs


def ram(out):
    runs = steady(out)
    series = {}
    for r in runs:
        series.setdefault(r["kind"], []).append((r["mem_mb"], r["read_hit_ratio"]))
    print("\nHit ratio (read phase) vs -m:\n")
    mems = sorted({m for pts in series.values() for m, _ in pts})
    print("| server | " + " | ".join(f"-m {m}" for m in mems) + " |")
    print("|---|" + "---|" * len(mems))
    for kind, pts in series.items():
        d = dict(pts)
        print(f"| {kind} | " + " | ".join(f(d.get(m), "{:.3f}") for m in mems) + " |")
    plot(out, "hit-ratio-vs-ram.png", "-m (MiB, log scale)", "read-phase GET hit ratio",
         {k: sorted(v) for k, v in series.items()}, logx=True)


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("steady", "ram", "shapes"):
        sys.exit(__doc__)
    cmd, out = sys.argv[1], sys.argv[2]
    if cmd == "steady":
        steady(out)
    elif cmd == "ram":
        ram(out)
    else:
        from shapes_table import shapes  # noqa: E402 (kept in its own file, see there)
        shapes(out)


if __name__ == "__main__":
    main()
