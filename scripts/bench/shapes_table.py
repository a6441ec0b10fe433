"""shapes.sh summary (called as `tables.py shapes OUT`): per server and shape the generator
rows, flash GETs/s from the server's own counter over the window, fio's ceiling at the nearest
queue depth, and flashtier ÷ memcached per shape; writes summary.json and shapes.png."""
import glob
import json
import os

from report import FLASH_HIT_STATS as FLASH_GETS
from report import load
from table_fmt import f, plot, ratio, stat

# Shapes the targets name: hits/s >= 1.5x at 8x16 and 16x2; open loop p99 <= and p99.9 <=
# 1.5x memcached's at 30k and 60k offered; flash GETs >= 80 % of fio's ceiling.
HITS_TARGET_SHAPES = ("fresh-closed-8x16", "fresh-closed-16x2")


def fio_ceiling(out):
    ceil = {}
    for p in glob.glob(os.path.join(out, "raw", "fio", "qd*.json")):
        j = load(p)
        if j:
            ceil[int(os.path.basename(p)[2:-5])] = j["jobs"][0]["read"]["iops"]
    return dict(sorted(ceil.items()))


def nearest_depth(ceil, inflight):
    if not ceil:
        return None
    below = [d for d in ceil if d <= inflight]
    return max(below) if below else min(ceil)


def rows_of(d, ceil):
    out = []
    for p in sorted(glob.glob(os.path.join(d, "*.json"))):
        tag = os.path.basename(p)[:-5]
        if not (tag.startswith("fresh-") or tag.startswith("full-")):
            continue
        j = load(p)
        if not j or not j.get("rows"):
            continue
        cfg = j["config"]
        for r in j["rows"]:
            name = tag if r["mode"] == "closed" else f"{tag}-{r['offered_ops_per_sec']:.0f}"
            delta = r.get("server_stats_delta") or {}
            fg = stat(delta, FLASH_GETS)
            win = r.get("server_stats_window_s") or r["window_s"]
            flash_gets = fg / win if fg is not None and win else None
            inflight = cfg["connections"] * cfg["depth"]
            qd = nearest_depth(ceil, inflight)
            out.append({
                "shape": name, "phase": tag.split("-")[0], "mode": r["mode"],
                "connections": cfg["connections"], "depth": cfg["depth"], "dist": cfg["key_dist"],
                "get_ratio": cfg["get_ratio"], "offered": r["offered_ops_per_sec"],
                "ops_per_sec": r["throughput_ops_per_sec"], "achieved": r["achieved_fraction"],
                "hit_ratio": r["hit_ratio"], "hits_per_sec": r["hits_per_sec"],
                "p50_us": r["latency"]["p50_us"], "p99_us": r["latency"]["p99_us"],
                "p999_us": r["latency"]["p999_us"], "server_cpu_us_per_op": r["server_cpu_us_per_op"],
                "generator_cpu_us_per_op": r["generator_cpu_us_per_op"], "errors": r["errors"],
                "flash_gets_per_sec": flash_gets, "fio_depth": qd,
                "flash_gets_over_fio": ratio(flash_gets, ceil.get(qd)) if qd else None,
            })
    # fresh before full; closed shapes by connections then depth, flashread, open by rate.
    kind = {"closed": 0, "open": 2}
    out.sort(key=lambda r: (r["phase"] != "fresh", 1 if "flashread" in r["shape"] else kind[r["mode"]],
                            r["offered"] or 0, r["connections"], r["depth"]))
    return out


def shapes(out):
    cfg = load(os.path.join(out, "config.json")) or {}
    mach = load(os.path.join(out, "machine.json")) or {}
    peak = (load(os.path.join(out, "raw", "peak.json")) or {}).get("memcached_peak_ops_per_sec")
    ceil = fio_ceiling(out)
    servers = {}
    for d in sorted(glob.glob(os.path.join(out, "raw", "*"))):
        if os.path.isdir(d) and os.path.basename(d) != "fio":
            servers[os.path.basename(d)] = rows_of(d, ceil)
    lines = [f"Serving shapes: -m {cfg.get('mem')} MiB, flash {cfg.get('flash')}, cgroup "
             f"{cfg.get('cg_mb')} MiB, {cfg.get('keys')} keys x {cfg.get('value')} B, {cfg.get('dist')}, "
             f"GET ratio {cfg.get('get_ratio')} (flashread: uniform, GETs only), {cfg.get('dur')} per shape, "
             f"{cfg.get('server_threads')} server threads, {cfg.get('gen_threads')} generator thread(s). "
             f"git {mach.get('git_rev')}, {mach.get('utc')}, load avg at start {mach.get('loadavg_at_start')}.",
             "", f"fio {cfg.get('fio_bs', '4k')} O_DIRECT randread ceiling (IOPS by queue depth): "
             + ", ".join(f"qd{k} {v:.0f}" for k, v in ceil.items()),
             f"memcached's peak (best fresh closed-loop shape): {f(peak, '{:.0f}')} ops/s", "",
             "| server | shape | ops/s | hit | hits/s | p50 µs | p99 µs | p99.9 µs | server CPU µs/op "
             "| flash GETs/s | ÷ fio (qd) | achieved |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for srv, rows in servers.items():
        for r in rows:
            lines.append(
                f"| {srv} | {r['shape']} | {r['ops_per_sec']:.0f} | {f(r['hit_ratio'], '{:.3f}')} "
                f"| {r['hits_per_sec']:.0f} | {r['p50_us']:.0f} | {r['p99_us']:.0f} | {r['p999_us']:.0f} "
                f"| {f(r['server_cpu_us_per_op'], '{:.1f}')} | {f(r['flash_gets_per_sec'], '{:.0f}')} "
                f"| {f(r['flash_gets_over_fio'], '{:.2f}')} ({r['fio_depth']}) | {f(r['achieved'])} |")
    cmp = []
    ft = {r["shape"]: r for r in servers.get("flashtier", [])}
    mc = {r["shape"]: r for r in servers.get("memcached", [])}
    for name, a in ft.items():
        b = mc.get(name)
        if not b:
            # Open-loop rows carry the rate in their name; both servers were offered the same.
            continue
        cmp.append({"shape": name, "hits_per_sec_ratio": ratio(a["hits_per_sec"], b["hits_per_sec"]),
                    "ops_ratio": ratio(a["ops_per_sec"], b["ops_per_sec"]),
                    "cpu_per_op_ratio": ratio(a["server_cpu_us_per_op"], b["server_cpu_us_per_op"]),
                    "p99_ratio": ratio(a["p99_us"], b["p99_us"]),
                    "p999_ratio": ratio(a["p999_us"], b["p999_us"]),
                    "flash_gets_over_fio_flashtier": a["flash_gets_over_fio"],
                    "flash_gets_over_fio_memcached": b["flash_gets_over_fio"]})
    if cmp:
        lines += ["", "flashtier ÷ memcached (targets: hits/s >= 1.5 at 8x16 and 16x2; CPU/op <= 1 at every "
                  "shape; open loop at 30k/60k: p99 <= 1, p99.9 <= 1.5; flash GETs >= 0.8 of fio):", "",
                  "| shape | hits/s | ops/s | CPU/op | p99 | p99.9 | flash GETs ÷ fio (ft; mc) |",
                  "|---|---|---|---|---|---|---|"]
        for c in cmp:
            lines.append(f"| {c['shape']} | {f(c['hits_per_sec_ratio'])} | {f(c['ops_ratio'])} "
                         f"| {f(c['cpu_per_op_ratio'])} | {f(c['p99_ratio'])} | {f(c['p999_ratio'])} "
                         f"| {f(c['flash_gets_over_fio_flashtier'])}; {f(c['flash_gets_over_fio_memcached'])} |")
    with open(os.path.join(out, "summary.json"), "w") as fh:
        json.dump({"config": cfg, "machine": mach, "fio_iops_by_depth": ceil,
                   "memcached_peak_ops_per_sec": peak, "servers": servers,
                   "flashtier_over_memcached": cmp}, fh, indent=2)
    print("\n".join(lines))
    shapes_plot(out, servers)


def shapes_plot(out, servers):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
    closed = [r["shape"] for r in next(iter(servers.values()), []) if r["mode"] == "closed"]
    w = 0.8 / max(1, len(servers))
    for i, (srv, rows) in enumerate(servers.items()):
        by = {r["shape"]: r for r in rows}
        xs = [j + i * w for j in range(len(closed))]
        ax1.bar(xs, [by[s]["hits_per_sec"] if s in by else 0 for s in closed], w, label=srv)
        op = sorted((r["offered"], r["p99_us"], r["p999_us"]) for r in rows if r["mode"] == "open")
        if op:
            ax2.plot([o[0] for o in op], [o[1] for o in op], marker="o", label=f"{srv} p99")
            ax2.plot([o[0] for o in op], [o[2] for o in op], marker="x", ls="--", label=f"{srv} p99.9")
    ax1.set_xticks([j + w * (len(servers) - 1) / 2 for j in range(len(closed))])
    ax1.set_xticklabels([s.replace("-closed", "") for s in closed], rotation=30, ha="right", fontsize=8)
    ax1.set_ylabel("GET hits/s (closed loop)")
    ax1.legend(fontsize=8)
    ax1.grid(True, axis="y", alpha=0.3)
    ax2.set_xlabel("offered ops/s (open loop, Poisson, 16 connections)")
    ax2.set_ylabel("latency from scheduled send (µs)")
    ax2.set_yscale("log")
    ax2.grid(True, alpha=0.3)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "shapes.png"), dpi=110)
    plt.close(fig)


__all__ = ["shapes", "plot"]
