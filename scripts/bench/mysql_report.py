#!/usr/bin/env python3
"""Summarise a scripts/bench/mysql.sh run: sysbench tps and p95 per configuration and
workload, ratios to the slow disk (and to the fast disk), storage-side CPU per transaction,
and flashtier's read hit rate and dirty level over time from the sampled stats file.

Writes OUTDIR/summary.md, OUTDIR/summary.json and OUTDIR/mysql.png (needs matplotlib; without
it the PNG is absent and the script exits 2 after writing the table)."""
import json
import os
import re
import sys

ORDER = ["slow", "flashtier-wb", "flashtier-wt", "nbdkit-cache", "fast"]
LABEL = {
    "slow": "slow disk (4 ms)",
    "flashtier-wb": "flashtier writeback",
    "flashtier-wt": "flashtier writethrough",
    "nbdkit-cache": "nbdkit cache filter",
    "fast": "fast disk (page-cached file)",
}
WL_ORDER = ["oltp_read_only", "oltp_read_write", "oltp_write_only"]


def kv_file(path):
    """One key=value per line; the value is the rest of the line."""
    out = {}
    for line in open(path):
        if "=" in line:
            k, v = line.rstrip("\n").split("=", 1)
            out[k.strip()] = v.strip()
    return out


def parse_sysbench(path):
    text = open(path).read()
    r = {}
    m = re.search(r"transactions:\s+(\d+)\s+\(([\d.]+) per sec", text)
    if m:
        r["transactions"] = int(m.group(1))
        r["tps"] = float(m.group(2))
    m = re.search(r"queries:\s+(\d+)\s+\(([\d.]+) per sec", text)
    if m:
        r["qps"] = float(m.group(2))
    m = re.search(r"95th percentile:\s+([\d.]+)", text)
    if m:
        r["p95_ms"] = float(m.group(1))
    m = re.search(r"avg:\s+([\d.]+)", text)
    if m:
        r["avg_ms"] = float(m.group(1))
    m = re.search(r"ignored errors:\s+(\d+)", text)
    if m:
        r["ignored_errors"] = int(m.group(1))
    extra = kv_file_text(text)
    tck = int(extra.get("clk_tck", "100"))
    if "storage_cpu_ticks" in extra and r.get("transactions"):
        r["storage_cpu_ms_per_tx"] = int(extra["storage_cpu_ticks"]) * 1000 / tck / r["transactions"]
        r["db_cpu_ms_per_tx"] = int(extra["db_cpu_ticks"]) * 1000 / tck / r["transactions"]
    if "cgroup_max_usage" in extra:
        r["cgroup_max_usage_mib"] = int(extra["cgroup_max_usage"]) / 2**20
    if "loadavg_end" in extra:
        r["loadavg_end"] = extra["loadavg_end"]
    return r


def kv_file_text(text):
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if re.match(r"^[a-z_0-9]+=", line):
            for tok in line.split():
                if "=" in tok:
                    k, v = tok.split("=", 1)
                    out[k] = v
    return out


def parse_samples(path):
    rows = []
    for line in open(path):
        d = {}
        for tok in line.split():
            if "=" in tok:
                k, v = tok.split("=", 1)
                try:
                    d[k] = float(v)
                except ValueError:
                    d[k] = v
        if "t" in d and "reads" in d:
            rows.append(d)
    if not rows:
        return []
    t0 = rows[0]["t"]
    out = []
    prev = None
    for d in rows:
        s = {
            "t": round(d["t"] - t0, 2),
            "phase": d.get("phase", ""),
            "load1": d.get("load1"),
            "dirty_percent": d.get("dirty_percent"),
            "cached_blocks": d.get("cached_blocks"),
            "cached_percent": round(100 * d["cached_blocks"] / d["capacity_blocks"], 2)
            if d.get("capacity_blocks") else None,
            "dirty_blocks": d.get("dirty_blocks"),
            "read_hit_percent_cum": d.get("read_hit_percent"),
        }
        if prev is not None:
            dr = d["reads"] - prev["reads"]
            dh = d.get("read_hits", 0) - prev.get("read_hits", 0)
            s["read_hit_percent_interval"] = round(100 * dh / dr, 2) if dr > 0 else None
            dt = d["t"] - prev["t"]
            s["disk_writes_per_s"] = round((d.get("disk_writes", 0) - prev.get("disk_writes", 0)) / dt, 1) if dt > 0 else None
        out.append(s)
        prev = d
    return out, rows


def phase_stats(rows):
    """Per workload phase: read hit % over the phase (delta), dirty % mean and max."""
    res = {}
    for wl in WL_ORDER:
        ph = [r for r in rows if r.get("phase") == wl]
        if len(ph) < 2:
            continue
        dr = ph[-1]["reads"] - ph[0]["reads"]
        dh = ph[-1]["read_hits"] - ph[0]["read_hits"]
        dirty = [r["dirty_percent"] for r in ph if "dirty_percent" in r]
        res[wl] = {
            "read_hit_percent": round(100 * dh / dr, 1) if dr > 0 else None,
            "dirty_percent_mean": round(sum(dirty) / len(dirty), 1) if dirty else None,
            "dirty_percent_max": round(max(dirty), 1) if dirty else None,
            "cached_blocks_end": int(ph[-1].get("cached_blocks", 0)),
            "threshold_cleanings": int(ph[-1].get("threshold_cleanings", 0) - ph[0].get("threshold_cleanings", 0)),
            "write_stalls": int(ph[-1].get("write_stalls", 0) - ph[0].get("write_stalls", 0)),
        }
    return res


def main():
    out = sys.argv[1]
    meta = kv_file(os.path.join(out, "meta.txt"))
    results = {}
    for cfg in ORDER:
        for wl in WL_ORDER:
            p = os.path.join(out, f"{cfg}-{wl}.txt")
            if os.path.exists(p):
                results.setdefault(cfg, {})[wl] = parse_sysbench(p)
    cfgs = [c for c in ORDER if c in results]
    wls = [w for w in WL_ORDER if any(w in results[c] for c in cfgs)]
    for c in cfgs:
        for w in wls:
            r = results[c].get(w)
            if not r or "tps" not in r:
                continue
            for base in ("slow", "fast"):
                b = results.get(base, {}).get(w, {}).get("tps")
                if b:
                    r[f"tps_vs_{base}"] = round(r["tps"] / b, 2)
    samples = {}
    phases = {}
    for c in cfgs:
        p = os.path.join(out, f"{c}-samples.txt")
        if os.path.exists(p):
            parsed = parse_samples(p)
            if parsed:
                samples[c], raw = parsed
                phases[c] = phase_stats(raw)
    prep = os.path.join(out, "prepare.txt")
    summary = {"meta": meta, "results": results, "flashtier_phases": phases, "flashtier_samples": samples}
    if os.path.exists(prep):
        summary["prepare"] = open(prep).read().strip().splitlines()[-2:]
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)

    short = {w: w.replace("oltp_", "") for w in wls}
    lines = []
    lines.append(f"Run {meta.get('date', '?')}, commit {meta.get('commit', '?')}, quick={meta.get('quick')}: "
                 f"{meta.get('tables')} tables x {meta.get('table_size')} rows, {meta.get('threads')} threads, "
                 f"pareto, {meta.get('time')} s per run; cache {meta.get('cache')}, cgroup {meta.get('mem')}, "
                 f"buffer pool {meta.get('bufpool')}, delay {meta.get('delay')}; "
                 f"load average {meta.get('loadavg_start', '?')} at start, {meta.get('loadavg_end', '?')} at end "
                 f"({meta.get('nproc')} cores).")
    lines.append("")
    hdr = "| configuration | " + " | ".join(f"{short[w]} tps (× slow) | {short[w]} p95 ms" for w in wls) + " |"
    lines.append(hdr)
    lines.append("|---|" + "---:|---:|" * len(wls))
    for c in cfgs:
        cells = []
        for w in wls:
            r = results[c].get(w, {})
            tps = r.get("tps")
            ratio = r.get("tps_vs_slow")
            cells.append(f"{tps:.1f} ({ratio:.2f}×)" if tps is not None and ratio is not None else (f"{tps:.1f}" if tps is not None else "–"))
            cells.append(f"{r['p95_ms']:.1f}" if "p95_ms" in r else "–")
        lines.append(f"| {LABEL.get(c, c)} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("| configuration | " + " | ".join(f"{short[w]} × fast | {short[w]} storage CPU ms/tx" for w in wls) + " |")
    lines.append("|---|" + "---:|---:|" * len(wls))
    for c in cfgs:
        cells = []
        for w in wls:
            r = results[c].get(w, {})
            cells.append(f"{r['tps_vs_fast']:.2f}" if "tps_vs_fast" in r else "–")
            cells.append(f"{r['storage_cpu_ms_per_tx']:.2f}" if "storage_cpu_ms_per_tx" in r else "–")
        lines.append(f"| {LABEL.get(c, c)} | " + " | ".join(cells) + " |")
    if phases:
        lines.append("")
        lines.append("| flashtier | workload | read hits % (in the run) | dirty % mean / max | cached blocks at end | threshold cleanings | write stalls |")
        lines.append("|---|---|---:|---:|---:|---:|---:|")
        for c, ph in phases.items():
            for w, s in ph.items():
                lines.append(f"| {LABEL.get(c, c)} | {short.get(w, w)} | {s['read_hit_percent']} | "
                             f"{s['dirty_percent_mean']} / {s['dirty_percent_max']} | {s['cached_blocks_end']} | "
                             f"{s['threshold_cleanings']} | {s['write_stalls']} |")
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: mysql.png not drawn (scripts/install-deps.sh installs it)", file=sys.stderr)
        sys.exit(2)
    fig, ax = plt.subplots(2, 2, figsize=(13, 8.5))
    width = 0.8 / max(1, len(cfgs))
    for i, c in enumerate(cfgs):
        xs = [j + i * width for j in range(len(wls))]
        ax[0][0].bar(xs, [results[c].get(w, {}).get("tps", 0) for w in wls], width, label=LABEL.get(c, c))
        ax[0][1].bar(xs, [results[c].get(w, {}).get("p95_ms", 0) for w in wls], width, label=LABEL.get(c, c))
    for a, title in ((ax[0][0], "transactions/s (higher is better)"), (ax[0][1], "p95 latency, ms (lower is better)")):
        a.set_xticks([j + width * (len(cfgs) - 1) / 2 for j in range(len(wls))])
        a.set_xticklabels([short[w] for w in wls])
        a.set_title(title)
    ax[0][1].set_yscale("log")
    ax[0][0].legend(fontsize=8)
    for c, ss in samples.items():
        t = [s["t"] for s in ss if s.get("read_hit_percent_interval") is not None]
        h = [s["read_hit_percent_interval"] for s in ss if s.get("read_hit_percent_interval") is not None]
        ax[1][0].plot(t, h, label=LABEL.get(c, c))
        line, = ax[1][1].plot([s["t"] for s in ss], [s["dirty_percent"] for s in ss], label=f"{LABEL.get(c, c)}: dirty")
        ax[1][1].plot([s["t"] for s in ss], [s["cached_percent"] for s in ss], ls="--", color=line.get_color(),
                      label=f"{LABEL.get(c, c)}: cached")
        # phase boundaries
        last = None
        for s in ss:
            if s["phase"] != last and s["phase"] in WL_ORDER:
                for a in (ax[1][0], ax[1][1]):
                    a.axvline(s["t"], color="grey", lw=0.5, ls="--")
                ax[1][0].text(s["t"], 2, short[s["phase"]] if s["phase"] in short else s["phase"], fontsize=7, rotation=90)
            last = s["phase"]
    ax[1][0].set_title(f"flashtier read hits per {meta.get('sample', '?')} s sample, %")
    ax[1][0].set_ylim(0, 100)
    ax[1][0].set_xlabel("s since the database started")
    ax[1][1].set_title("flashtier dirty (solid) and cached (dashed) blocks, % of the cache")
    ax[1][1].set_ylim(0, 120)  # cached_blocks can exceed capacity_blocks (a nominal figure)
    ax[1][1].set_xlabel("s since the database started")
    if samples:
        ax[1][0].legend(fontsize=8)
        ax[1][1].legend(fontsize=8)
    fig.suptitle(f"MariaDB + sysbench (pareto, {meta.get('threads')} threads) on a {meta.get('delay')} disk, "
                 f"{meta.get('cache')} caches; {meta.get('date', '')}, load {meta.get('loadavg_start', '?')}")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "mysql.png"), dpi=90)


if __name__ == "__main__":
    main()
