#!/usr/bin/env python3
"""Summarise a compare.sh output directory: summary.json, summary.md, latency.png.

Usage: report.py OUT_DIR [--no-plot] LABEL [LABEL...]
The first label is the baseline: every later server gets "<label> / <first>" ratios.
Reads OUT_DIR/<label>.json (generator), <label>.server.json (probe.py collect),
fio.json (optional), machine.json, scenario.json.

Server-specific stat names are looked up from the candidate lists below; the first name
present in a server's `stats` + `stats extstore` wins (memcached's names first, then flashtier's).
"""
import json
import os
import sys

# GETs served from flash, counted by the server over a measured window.
FLASH_HIT_STATS = ["get_extstore", "extstore_hits"]
# Items currently on flash.
FLASH_ITEM_STATS = ["extstore_objects_used", "extstore_index_items"]
# Bytes the server itself wrote to flash (application level, compaction rewrites included):
# memcached's extstore counter; flashtier's engine counter of bytes handed to the device
# (records, padding, summaries and reclaim rewrites -- the larger of its two counters).
FLASH_WRITE_STATS = ["flash_device_bytes_written", "extstore_bytes_written"]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def first_stat(stats, names):
    for n in names:
        if stats and n in stats:
            return n, stats[n]
    return None, None


def min_value_size(spec):
    """Smallest value size of a generator --value-size spec (N, A-B, or N:w,M:w,...)."""
    try:
        parts = [p.split(":")[0] for p in str(spec).split(",")]
        return min(int(p.split("-")[0]) for p in parts)
    except ValueError:
        return None


def index_bytes_per_flash_item(stats, slabs, flash_items, value_min):
    """RAM that addresses one flash item: flashtier's index (its own stat); memcached's item
    headers, i.e. the slab chunks of classes smaller than any value (only computable when
    every value is >= 1 KiB, so small classes can hold nothing but flash-item headers)."""
    if "ram_bytes_per_flash_item" in stats:
        return float(stats["ram_bytes_per_flash_item"])
    if "get_extstore" in stats and slabs and flash_items and value_min and value_min >= 1024:
        hdr = sum(c.get("used_chunks", 0) * c.get("chunk_size", 0)
                  for c in slabs.values() if c.get("chunk_size", 0) < 1024)
        return hdr / flash_items
    return None


def summarise(out, label, mem_mb, value_min=None):
    gen = load(os.path.join(out, f"{label}.json"))
    srv = load(os.path.join(out, f"{label}.server.json")) or {}
    if gen is None:
        return None
    set_bytes = sum(r["counters"]["set_value_bytes"] for r in gen["rows"])
    if gen.get("load_phase"):
        set_bytes += gen["load_phase"]["counters"]["set_value_bytes"]
    stats = srv.get("stats") or {}
    items = stats.get("curr_items")
    flash_items_name, flash_items = first_stat(stats, FLASH_ITEM_STATS)
    flash_w_name, flash_w = first_stat(stats, FLASH_WRITE_STATS)
    hwm = srv.get("vm_hwm_bytes")
    rows = []
    for r in gen["rows"]:
        d = r.get("server_stats_delta") or {}
        fh_name, fh = first_stat(d, FLASH_HIT_STATS)
        win = r.get("server_stats_window_s") or r["window_s"]
        rows.append({
            "offered": r["offered_ops_per_sec"],
            "mode": r["mode"],
            "throughput": r["throughput_ops_per_sec"],
            "achieved_fraction": r["achieved_fraction"],
            "hit_ratio": r["hit_ratio"],
            "hits_per_sec": r["hits_per_sec"],
            "p50_us": r["latency"]["p50_us"],
            "p90_us": r["latency"]["p90_us"],
            "p99_us": r["latency"]["p99_us"],
            "p999_us": r["latency"]["p999_us"],
            "max_us": r["latency"]["max_us"],
            "get_p99_us": r["latency_get"]["p99_us"],
            "errors": r["errors"],
            "send_lag_p99_us": r["send_lag"]["p99_us"],
            "flash_gets_per_sec": (fh / win) if fh is not None and win else None,
            "flash_hit_stat": fh_name,
        })
    return {
        "label": label,
        "load_phase": gen.get("load_phase"),
        "rows": rows,
        "peak_rss_bytes": hwm,
        "cgroup_max_usage_bytes": srv.get("cgroup_max_usage_bytes"),
        "cgroup_limit_bytes": srv.get("cgroup_limit_bytes"),
        "cgroup_failcnt": srv.get("cgroup_failcnt"),
        "items_stored": items,
        "flash_items": flash_items,
        "flash_items_stat": flash_items_name,
        "ram_bytes_per_item": (hwm / items) if hwm and items else None,
        "ram_bytes_per_flash_item": (hwm / flash_items) if hwm and flash_items else None,
        # Peak RSS beyond the configured RAM budget, per flash item: what keeping an item on
        # flash costs in RAM (index, headers), excluding the RAM tier itself.
        "ram_overhead_per_flash_item": (max(0, hwm - mem_mb * 1048576) / flash_items)
        if hwm and flash_items and mem_mb else None,
        "index_bytes_per_flash_item": index_bytes_per_flash_item(
            stats, srv.get("slabs"), flash_items, value_min),
        "set_value_bytes": set_bytes,
        "io_write_bytes": srv.get("io_write_bytes"),
        "io_write_per_set_byte": (srv["io_write_bytes"] / set_bytes) if set_bytes and srv.get("io_write_bytes") is not None else None,
        "app_flash_write_bytes": flash_w,
        "app_flash_write_stat": flash_w_name,
        "app_write_amplification": (flash_w / set_bytes) if flash_w is not None and set_bytes else None,
        "flash_file_bytes": srv.get("flash_file_bytes"),
    }


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def fmt(x, nd=1):
    if x is None:
        return "-"
    if isinstance(x, float):
        if abs(x) >= 1000:
            return f"{x:,.0f}"
        return f"{x:.{nd}f}"
    return str(x)


def mib(x):
    return None if x is None else x / 1048576


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    out = args.pop(0)
    plot = True
    if args and args[0] == "--no-plot":
        plot = False
        args.pop(0)
    labels = args
    machine = load(os.path.join(out, "machine.json")) or {}
    scenario = load(os.path.join(out, "scenario.json")) or {}
    def fio_read_iops(name):
        try:
            return load(os.path.join(out, name))["jobs"][0]["read"]["iops"]
        except (TypeError, KeyError, IndexError):
            return None
    fio_iops = fio_read_iops("fio.json")
    # A 4 KiB value's record (header + key + value) spans two 4 KiB pages, so an O_DIRECT GET
    # of it reads 8 KiB: the ceiling for such items is the 8 KiB random-read rate.
    fio8_iops = fio_read_iops("fio8k.json")
    servers = [s for s in (summarise(out, l, scenario.get("mem_mb"), min_value_size(scenario.get("value_size"))) for l in labels) if s]
    if not servers:
        sys.exit("report.py: no generator output found")
    base = servers[0]

    def peak(s):
        closed = [r for r in s["rows"] if r["mode"] == "closed"]
        return closed[0] if closed else None

    ratios = {}
    for s in servers[1:]:
        pb, ps = peak(base), peak(s)
        rr = {
            "peak_throughput": ratio(ps and ps["throughput"], pb and pb["throughput"]),
            "peak_hits_per_sec": ratio(ps and ps["hits_per_sec"], pb and pb["hits_per_sec"]),
            "peak_p99": ratio(ps and ps["p99_us"], pb and pb["p99_us"]),
            "peak_rss": ratio(s["peak_rss_bytes"], base["peak_rss_bytes"]),
            "cgroup_max_usage": ratio(s["cgroup_max_usage_bytes"], base["cgroup_max_usage_bytes"]),
            "ram_bytes_per_item": ratio(s["ram_bytes_per_item"], base["ram_bytes_per_item"]),
            "ram_bytes_per_flash_item": ratio(s["ram_bytes_per_flash_item"], base["ram_bytes_per_flash_item"]),
            "ram_overhead_per_flash_item": ratio(s["ram_overhead_per_flash_item"], base["ram_overhead_per_flash_item"]),
            "index_bytes_per_flash_item": ratio(s["index_bytes_per_flash_item"], base["index_bytes_per_flash_item"]),
            "io_write_per_set_byte": ratio(s["io_write_per_set_byte"], base["io_write_per_set_byte"]),
            "per_rate": [],
        }
        for rb in base["rows"]:
            if rb["mode"] != "open":
                continue
            match = [r for r in s["rows"] if r["offered"] == rb["offered"]]
            if match:
                r = match[0]
                rr["per_rate"].append({
                    "offered": rb["offered"],
                    "throughput": ratio(r["throughput"], rb["throughput"]),
                    "hits_per_sec": ratio(r["hits_per_sec"], rb["hits_per_sec"]),
                    "hit_ratio": ratio(r["hit_ratio"], rb["hit_ratio"]),
                    "p50": ratio(r["p50_us"], rb["p50_us"]),
                    "p99": ratio(r["p99_us"], rb["p99_us"]),
                    "p999": ratio(r["p999_us"], rb["p999_us"]),
                })
        ratios[f"{s['label']}/{base['label']}"] = rr

    summary = {"machine": machine, "scenario": scenario, "fio_randread_4k_iops": fio_iops,
               "fio_randread_8k_iops": fio8_iops,
               "servers": servers, "ratios": ratios}
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)

    md = []
    md.append(f"### Scenario {scenario.get('scenario', '?')} — {', '.join(labels)}\n")
    md.append(f"Machine: {machine.get('cpus')} CPUs ({machine.get('cpu_model')}), "
              f"{fmt((machine.get('mem_total_kb') or 0) / 1048576, 1)} GiB RAM, kernel {machine.get('kernel')}, "
              f"{machine.get('memcached_version')}, git {machine.get('git_rev')}, load average at start "
              f"{machine.get('loadavg_at_start')}.  ")
    md.append(f"Workload: {scenario.get('keys')} keys, values {scenario.get('value_size')} B, "
              f"{scenario.get('dist')}, get ratio {scenario.get('get_ratio')}, server RAM "
              f"{scenario.get('mem_mb')} MiB, cgroup limit {scenario.get('cgroup_limit_mb')} MiB, "
              f"flash {scenario.get('flash_size') or 'none'}, {scenario.get('connections')} connections x "
              f"depth {scenario.get('depth')}, warm-up {scenario.get('warmup')}, {scenario.get('duration')} per rate.")
    if fio_iops is not None:
        md.append(f"\nfio 4 KiB random-read ceiling (O_DIRECT, io_uring, QD32): **{fio_iops:,.0f} IOPS**.")
    if fio8_iops is not None:
        md.append(f"fio 8 KiB random-read ceiling (the read size of a 4 KiB item's record): **{fio8_iops:,.0f} IOPS**.")
    # Our own servers and generator raise the load average during a run, so only the value
    # before the first server started says whether something else was using the CPUs.
    try:
        busy = float(str(machine.get("loadavg_at_start", "0")).split()[0])
    except ValueError:
        busy = 0.0
    if busy > 1.0:
        md.append(f"\n**Warning: the machine was busy before the run (1-minute load average {busy:.1f} on "
                  f"{machine.get('cpus')} CPUs). Latencies include scheduling delay from other work; "
                  f"compare servers only within a quiet run, or use --rt.**")
    md.append("\n#### Per server\n")
    md.append("| server | load sets/s | peak ops/s | peak hit ratio | peak hits/s | peak p99 µs | peak RSS MiB | cgroup max MiB | items | RAM B/item | flash items | RAM B/flash item | RSS over budget B/flash item | index/header RAM B/flash item | write B / SET B (proc io) | app write amp |")
    md.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in servers:
        p = peak(s) or {}
        lp = s["load_phase"] or {}
        md.append("| " + " | ".join([
            s["label"], fmt(lp.get("ops_per_sec")), fmt(p.get("throughput")), fmt(p.get("hit_ratio"), 4),
            fmt(p.get("hits_per_sec")), fmt(p.get("p99_us")), fmt(mib(s["peak_rss_bytes"])),
            fmt(mib(s["cgroup_max_usage_bytes"])), fmt(s["items_stored"]), fmt(s["ram_bytes_per_item"]),
            fmt(s["flash_items"]), fmt(s["ram_bytes_per_flash_item"]), fmt(s["ram_overhead_per_flash_item"]),
            fmt(s["index_bytes_per_flash_item"]), fmt(s["io_write_per_set_byte"], 3),
            fmt(s["app_write_amplification"], 3)]) + " |")
    md.append("\n#### Latency vs offered load (µs)\n")
    md.append("| server | offered ops/s | achieved ops/s | hit ratio | hits/s | p50 | p90 | p99 | p99.9 | max | flash GETs/s | errors |")
    md.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in servers:
        for r in s["rows"]:
            md.append("| " + " | ".join([
                s["label"], fmt(r["offered"]) if r["offered"] else "max (closed loop)", fmt(r["throughput"]),
                fmt(r["hit_ratio"], 4), fmt(r["hits_per_sec"]), fmt(r["p50_us"]), fmt(r["p90_us"]),
                fmt(r["p99_us"]), fmt(r["p999_us"]), fmt(r["max_us"]), fmt(r["flash_gets_per_sec"]),
                str(r["errors"])]) + " |")
    for name, rr in ratios.items():
        md.append(f"\n#### Ratios {name}\n")
        md.append("| metric | ratio |")
        md.append("|---|---|")
        for k in ("peak_throughput", "peak_hits_per_sec", "peak_p99", "peak_rss", "cgroup_max_usage",
                  "ram_bytes_per_item", "ram_bytes_per_flash_item", "ram_overhead_per_flash_item",
                  "index_bytes_per_flash_item",
                  "io_write_per_set_byte"):
            md.append(f"| {k} | {fmt(rr[k], 3)} |")
        if rr["per_rate"]:
            md.append("\n| offered ops/s | throughput | hits/s | hit ratio | p50 | p99 | p99.9 |")
            md.append("|---|---|---|---|---|---|---|")
            for pr in rr["per_rate"]:
                md.append("| " + " | ".join([fmt(pr["offered"])] + [fmt(pr[k], 3) for k in
                          ("throughput", "hits_per_sec", "hit_ratio", "p50", "p99", "p999")]) + " |")
    if fio_iops:
        for s in servers:
            fl = [r["flash_gets_per_sec"] for r in s["rows"] if r["flash_gets_per_sec"] is not None]
            if fl:
                extra = f", {max(fl) / fio8_iops:.2f} of the 8 KiB one" if fio8_iops else ""
                md.append(f"\n{s['label']}: best flash-served GET rate {max(fl):,.0f}/s = "
                          f"{max(fl) / fio_iops:.2f} of the fio 4 KiB ceiling{extra}.")

    plotted = False
    if plot:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            fig, ax = plt.subplots(figsize=(7, 4.5))
            for s in servers:
                pts = sorted((r["offered"], r["p50_us"], r["p99_us"]) for r in s["rows"] if r["mode"] == "open")
                if not pts:
                    continue
                xs = [p[0] for p in pts]
                line = ax.plot(xs, [p[2] for p in pts], marker="o", label=f"{s['label']} p99")[0]
                ax.plot(xs, [p[1] for p in pts], marker=".", linestyle="--", color=line.get_color(),
                        label=f"{s['label']} p50")
            ax.set_xlabel("offered load (ops/s), open loop")
            ax.set_ylabel("latency (µs, from scheduled send time)")
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            ax.set_title(f"Scenario {scenario.get('scenario', '?')}: latency vs offered load")
            ax.legend()
            fig.tight_layout()
            fig.savefig(os.path.join(out, "latency.png"), dpi=110)
            plotted = True
        except ImportError:
            print("report.py: matplotlib missing, no plot", file=sys.stderr)
    if plotted:
        md.append("\n![latency vs offered load](latency.png)")
    text = "\n".join(md) + "\n"
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
