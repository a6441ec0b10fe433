#!/usr/bin/env python3
"""Helpers and the table of scripts/bench/clients.sh (standard library only).

  clients.py cpu PID                      utime+stime of PID in seconds (/proc/PID/stat)
  clients.py memaslap OUT.txt CPU0 CPU1   memaslap's output as JSON: TPS, ops, hit ratio,
                                          latency (Total/Get/Set), server CPU per op
  clients.py brief ROW.json               one line about a parsed memaslap run
  clients.py table OUT                    OUT/table.md on stdout and OUT/summary.json: per
                                          fill mode, phase and server, min / median / max over
                                          the rounds of every metric, and flashtier ÷ each
                                          memcached (median ÷ median)
  clients.py sched OUT                    per open-loop row and server, from the thread
                                          snapshots around it (ROW.sched0/.sched1): the
                                          server's threads' CPU, run-queue wait, and wait per
                                          time scheduled in; min / median / max over rounds

memaslap's latencies come from its "Log2 Dist" histograms: bucket i holds times t with
2^(i-1) < t <= 2^i µs (libmemcached ms_stats.c, ms_local_log2), so its percentiles here are
the upper edge of the bucket that holds them: a factor-2 resolution, reported as such.
"""
import json
import os
import re
import statistics
import sys

CLK_TCK = 100  # Linux's USER_HZ: /proc/PID/stat counts 1/100 s.


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as fh:
        rest = fh.read().rsplit(")", 1)[1].split()
    # After the command name: state is field 3; utime and stime are fields 14 and 15.
    return (int(rest[11]) + int(rest[12])) / CLK_TCK


# ---- memaslap ---------------------------------------------------------------------------------

def log2_percentiles(dist, qs):
    """dist: {i: count} with bucket i = (2^(i-1), 2^i] µs. Upper bucket edge per quantile."""
    total = sum(dist.values())
    out = {}
    if total == 0:
        return {q: None for q in qs}
    for q in qs:
        need = q * total
        seen = 0
        for i in sorted(dist):
            seen += dist[i]
            if seen >= need:
                out[q] = float(2 ** i)
                break
    return out


def parse_memaslap(text):
    """The final summary memaslap prints: the `X Statistics (N events)` blocks (only with -S),
    the counters, and the `Run time: ... Ops: ... TPS: ...` line."""
    r = {"blocks": {}}
    m = re.search(r"Run time:\s*([\d.]+)s\s+Ops:\s*(\d+)\s+TPS:\s*(\d+)", text)
    if not m:
        raise ValueError("no 'Run time: ... Ops: ... TPS:' line")
    r["run_time_s"], r["ops"], r["tps"] = float(m.group(1)), int(m.group(2)), int(m.group(3))
    for name in ("cmd_get", "cmd_set", "get_misses", "verify_misses", "verify_failed"):
        m = re.search(rf"^{name}:\s*(\d+)", text, re.M)
        r[name] = int(m.group(1)) if m else None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"\s*(Get|Set|Total) Statistics \((\d+) events\)", lines[i])
        if not m:
            i += 1
            continue
        block = {"events": int(m.group(2))}
        dist = {}
        i += 1
        while i < len(lines) and lines[i].strip():
            line = lines[i].strip()
            km = re.match(r"(Min|Max|Avg|Geo|Std):\s*([\d.]+)", line)
            if km:
                block[km.group(1).lower() + "_us"] = float(km.group(2))
            dm = re.match(r"(\d+):\s+([\d\s]+)$", line)
            if dm:
                base = int(dm.group(1))
                for k, n in enumerate(dm.group(2).split()):
                    dist[base + k] = int(n)
            i += 1
        pct = log2_percentiles(dist, (0.5, 0.99, 0.999))
        block.update(p50_us=pct[0.5], p99_us=pct[0.99], p999_us=pct[0.999])
        block["log2_dist"] = {str(k): v for k, v in sorted(dist.items())}
        r["blocks"][m.group(1).lower()] = block
    return r


def memaslap_json(path, cpu0, cpu1):
    with open(path) as fh:
        r = parse_memaslap(fh.read())
    gets, misses = r.get("cmd_get"), r.get("get_misses")
    r["hit_ratio"] = None if not gets else 1 - (misses or 0) / gets
    r["hits_per_sec"] = None if gets is None else (gets - (misses or 0)) / r["run_time_s"]
    r["server_cpu_s"] = cpu1 - cpu0
    r["server_cpu_us_per_op"] = (cpu1 - cpu0) * 1e6 / r["ops"] if r["ops"] else None
    return r


def brief(r):
    t = r["blocks"].get("total", {})
    hit = "-" if r["hit_ratio"] is None else f"{r['hit_ratio']:.3f}"
    cpu = "-" if r["server_cpu_us_per_op"] is None else f"{r['server_cpu_us_per_op']:.1f}"
    lat = f", avg {t['avg_us']:.0f} µs, p99 <= {t['p99_us']:.0f} µs" if t else ""
    return f"{r['tps']} TPS, GET hit {hit}{lat}, server {cpu} µs CPU/op"


# ---- the table --------------------------------------------------------------------------------

# (key, column title, format, better): better is "high" or "low" (for the ratio's reading).
METRICS = [
    ("ops_per_sec", "ops/s", "{:,.0f}", "high"),
    ("hit_ratio", "GET hit", "{:.3f}", "high"),
    ("hits_per_sec", "hits/s", "{:,.0f}", "high"),
    ("p50_us", "p50 µs", "{:,.0f}", "low"),
    ("p99_us", "p99 µs", "{:,.0f}", "low"),
    ("p999_us", "p99.9 µs", "{:,.0f}", "low"),
    ("server_cpu_us_per_op", "server CPU µs/op", "{:.1f}", "low"),
]


def bench_metrics(path):
    """Metrics of one flashtier-bench report (first row, or the load phase of a fill)."""
    with open(path) as fh:
        rep = json.load(fh)
    if not rep.get("rows"):
        # A fill: SETs/s, and the server's CPU per SET from the script's samples around it.
        lp = rep.get("load_phase") or {}
        c = lp.get("counters", {})
        out = {"ops_per_sec": lp.get("ops_per_sec"),
               "errors": c.get("server_errors", 0) + c.get("client_errors", 0)
               + c.get("connections_lost", 0) + c.get("timed_out", 0),
               "first_error": lp.get("first_error")}
        try:
            with open(path[:-5] + ".cpu") as fh:
                cpu_s = float(fh.read())
            if lp.get("sets"):
                out["server_cpu_us_per_op"] = cpu_s * 1e6 / lp["sets"]
        except (OSError, ValueError):
            pass
        return out
    row = rep["rows"][0]
    lat = row["latency"]
    c = row["counters"]
    return {
        "ops_per_sec": row["throughput_ops_per_sec"],
        "hit_ratio": row["hit_ratio"],
        "hits_per_sec": row["hits_per_sec"],
        "p50_us": lat["p50_us"],
        "p99_us": lat["p99_us"],
        "p999_us": lat["p999_us"],
        "server_cpu_us_per_op": row.get("server_cpu_us_per_op"),
        "achieved_fraction": row.get("achieved_fraction"),
        "unsent": c.get("unsent", 0),
        "sends_waited": c.get("sends_waited", 0),
        "errors": row["errors"],
        "first_error": row.get("first_error"),
        "generator_cpu_us_per_op": row.get("generator_cpu_us_per_op"),
    }


def maslap_metrics(path):
    with open(path) as fh:
        r = json.load(fh)
    t = r["blocks"].get("total", {})
    return {
        "ops_per_sec": r["tps"],
        "hit_ratio": r["hit_ratio"],
        "hits_per_sec": r["hits_per_sec"],
        "avg_us": t.get("avg_us"),
        "p50_us": t.get("p50_us"),
        "p99_us": t.get("p99_us"),
        "p999_us": t.get("p999_us"),
        "server_cpu_us_per_op": r["server_cpu_us_per_op"],
        "errors": 0,
    }


def phase_order(phase, cfg):
    """As the script ran them: fill, fresh open-loop rows (per client, per rate, in the
    configured order), fresh closed-loop rows, memaslap, refill, full open-loop rows."""
    clients = cfg.get("open_clients", "threads async").split()
    rates = cfg.get("open_rates", "").split()
    shapes = cfg.get("closed_shapes", "").split()

    def pos(x, xs):
        return xs.index(x) if x in xs else len(xs)

    m = re.match(r"(fresh|full)-open-(\w+)-(.+)$", phase)
    if m:
        group = 1 if m.group(1) == "fresh" else 5
        return (group, pos(m.group(2), clients), pos(m.group(3), rates), phase)
    m = re.match(r"fresh-closed-(.+)$", phase)
    if m:
        return (2, pos(m.group(1), shapes), 0, phase)
    order = {"fill": 0, "memaslap": 3, "refill": 4}
    return (order.get(phase, 6), 0, 0, phase)


def describe(phase, cfg):
    if phase == "fill":
        return "fill (SETs/s)"
    if phase == "refill":
        return "refill, flash wraps (SETs/s)"
    if phase == "memaslap":
        return (f"memaslap -T 2 -c 64 -X {cfg.get('value')} -w {cfg.get('maslap_win')} "
                f"-t {cfg.get('maslap_time')}")
    m = re.match(r"(fresh|full)-open-(threads|async)-(.+)$", phase)
    if m:
        return f"{m.group(1)}, open {m.group(3)} ops/s, {m.group(2)} client"
    m = re.match(r"(fresh|full)-closed-(.+)$", phase)
    if m:
        return f"{m.group(1)}, closed {m.group(2).replace('x', '×')} (async client)"
    return phase


def spread(values):
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return {"min": min(vals), "median": statistics.median(vals), "max": max(vals),
            "values": values}


def cell(s, fmt):
    if s is None:
        return "-"
    lo, med, hi = (fmt.format(s[k]) for k in ("min", "median", "max"))
    return med if lo == hi else f"{lo} / **{med}** / {hi}"


def table(out):
    def load(name):
        try:
            with open(os.path.join(out, name)) as fh:
                return json.load(fh)
        except (OSError, ValueError):
            return {}

    cfg, machine = load("config.json"), load("machine.json")
    raw = os.path.join(out, "raw")
    # data[fill][phase][server] = [metrics per round]
    data = {}
    rounds = sorted(d for d in os.listdir(raw) if d.startswith("r"))
    for rd in rounds:
        for fill in sorted(os.listdir(os.path.join(raw, rd))):
            for server in sorted(os.listdir(os.path.join(raw, rd, fill))):
                d = os.path.join(raw, rd, fill, server)
                for name in sorted(os.listdir(d)):
                    if not name.endswith(".json") or name.startswith(("after-", "end", "warm")):
                        continue
                    phase = name[:-5]
                    try:
                        m = (maslap_metrics if phase == "memaslap" else bench_metrics)(
                            os.path.join(d, name))
                    except (OSError, ValueError, KeyError) as e:
                        print(f"clients.py: skipping {d}/{name}: {e}", file=sys.stderr)
                        continue
                    data.setdefault(fill, {}).setdefault(phase, {}).setdefault(server, []).append(m)

    servers = cfg.get("servers", "").split() or sorted(
        {s for f in data.values() for p in f.values() for s in p})
    mcs = [s for s in servers if s.startswith("memcached")]
    summary = {"config": cfg, "machine": machine, "rounds": len(rounds), "rows": [], "ratios": []}
    lines = []
    p = lines.append
    p(f"# flashtier vs memcached, clients the team did not write ({machine.get('utc', '?')})")
    p("")
    p(f"**Client and server share the machine's {machine.get('cpus', '?')} vCPUs**: every "
      "ops/s, latency and CPU figure includes the client's own use of them (memaslap's 2 "
      "threads, or flashtier-bench's event loop, or 2 threads per connection for the thread "
      "client).")
    p("")
    p(f"- {len(rounds)} rounds, a fresh server per server per round, order rotated each round; "
      "cells are min / **median** / max over the rounds (one value when all agree).")
    p(f"- Data: {cfg.get('keys')} keys × {cfg.get('value')} B, {cfg.get('dist')}, "
      f"{cfg.get('get_ratio')} GETs; -m {cfg.get('mem')}, {cfg.get('flash')} flash file, "
      f"{cfg.get('cg_mb')} MiB memory cgroup per server; flashtier --threads "
      f"{cfg.get('flashtier_threads')}; memcached {', '.join(mcs)} (-t N), "
      f"options {cfg.get('memcached_opts') or '-'}.")
    p(f"- Phases: warm-up {cfg.get('warmup')} + {cfg.get('dur')} measured; open loop 16 "
      f"connections, Poisson; thread client --max-outstanding {cfg.get('max_outstanding')}, "
      f"async client depth {cfg.get('open_depth')}; a {cfg.get('warm_closed')} closed-loop "
      "warm-up (thread client, 16×1) before each set of open-loop rows.")
    p("- Server CPU/op: utime+stime of the server process over the measured window ÷ "
      "completed ops (memaslap: over its whole run ÷ its ops).")
    p("- memaslap percentiles are the upper edge of its power-of-two latency bucket "
      "(factor-2 resolution); its avg is exact.")
    p(f"- Machine: {machine.get('cpu_model', '?')}, kernel {machine.get('kernel', '?')}, "
      f"{machine.get('memcached_version', '?')}, flashtier {machine.get('git_rev', '?')}; load "
      f"average at start {machine.get('loadavg_at_start', '?')}.")
    p("")
    for fill in sorted(data):
        phases = sorted(data[fill], key=lambda ph: phase_order(ph, cfg))
        p(f"## Fill: {fill} speed" + (f" ({cfg.get('fill_rate')} SETs/s)" if fill == "paced" else ""))
        p("")
        p("| phase | server | " + " | ".join(t for _, t, _, _ in METRICS) + " | errors | notes |")
        p("|---" * (len(METRICS) + 4) + "|")
        for phase in phases:
            for server in servers:
                runs = data[fill][phase].get(server)
                if not runs:
                    continue
                spreads = {k: spread([r.get(k) for r in runs]) for k, _, _, _ in METRICS}
                extra = {k: spread([r.get(k) for r in runs])
                         for k in ("avg_us", "unsent", "sends_waited", "achieved_fraction",
                                   "generator_cpu_us_per_op")}
                errors = sum(r.get("errors") or 0 for r in runs)
                notes = []
                if extra["avg_us"]:
                    notes.append("avg µs " + cell(extra["avg_us"], "{:,.0f}"))
                for k, label in (("sends_waited", "waited"), ("unsent", "unsent")):
                    if extra[k] and extra[k]["max"]:
                        notes.append(f"{label} " + cell(extra[k], "{:,.0f}"))
                if extra["achieved_fraction"] and extra["achieved_fraction"]["min"] < 0.99:
                    notes.append("achieved " + cell(extra["achieved_fraction"], "{:.2f}") + " of offered")
                first = next((r["first_error"] for r in runs if r.get("first_error")), None)
                if errors and first:
                    notes.append("first error: " + first[:70].replace("|", "/"))
                p(f"| {describe(phase, cfg)} | {server} | "
                  + " | ".join(cell(spreads[k], fmt) for k, _, fmt, _ in METRICS)
                  + f" | {errors} | {'; '.join(notes)} |")
                summary["rows"].append({"fill": fill, "phase": phase, "server": server,
                                        "rounds": len(runs), "errors": errors,
                                        "first_error": first,
                                        "metrics": {**spreads, **extra}})
        p("")
        fts = [s for s in servers if s.startswith("flashtier")]
        if fts and mcs:
            p(f"### flashtier ÷ memcached, {fill} fill (median ÷ median; "
              "ops/s, hit and hits/s: higher is better for flashtier; latency and CPU: lower)")
            p("")
            p("| phase | vs | " + " | ".join(t for _, t, _, _ in METRICS) + " |")
            p("|---" * (len(METRICS) + 2) + "|")
            for phase, fs in ((ph, f) for ph in phases for f in fts):
                ft = data[fill][phase].get(fs)
                if not ft:
                    continue
                for mc in mcs:
                    other = data[fill][phase].get(mc)
                    if not other:
                        continue
                    cells, rec = [], {"fill": fill, "phase": phase, "server": fs, "vs": mc}
                    for k, _, _, _ in METRICS:
                        a, b = spread([r.get(k) for r in ft]), spread([r.get(k) for r in other])
                        x = None if not a or not b or not b["median"] else a["median"] / b["median"]
                        rec[k] = x
                        cells.append("-" if x is None else f"{x:.2f}")
                    summary["ratios"].append(rec)
                    name = mc if len(fts) == 1 else f"{fs} ÷ {mc}"
                    p(f"| {describe(phase, cfg)} | {name} | " + " | ".join(cells) + " |")
            p("")
    with open(os.path.join(out, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=1)
    print("\n".join(lines))


def sched_window(before, after):
    """Sum over the server's threads present in both snapshots: (seconds on a CPU, seconds
    runnable on a run queue, times scheduled in)."""
    with open(before) as fh:
        a = json.load(fh)["threads"]
    with open(after) as fh:
        b = json.load(fh)["threads"]
    run = wait = slices = 0
    for tid, t in b.items():
        if tid in a:
            run += t["run_ns"] - a[tid]["run_ns"]
            wait += t["wait_ns"] - a[tid]["wait_ns"]
            slices += t["slices"] - a[tid]["slices"]
    return run / 1e9, wait / 1e9, slices


def sched(out):
    """Run-queue wait of the server's threads over each open-loop row (warm-up included)."""
    raw = os.path.join(out, "raw")
    data = {}
    for rd in sorted(d for d in os.listdir(raw) if d.startswith("r")):
        for fill in sorted(os.listdir(os.path.join(raw, rd))):
            for server in sorted(os.listdir(os.path.join(raw, rd, fill))):
                d = os.path.join(raw, rd, fill, server)
                for name in sorted(os.listdir(d)):
                    if not name.endswith(".sched0"):
                        continue
                    row = name[:-len(".sched0")]
                    after = os.path.join(d, row + ".sched1")
                    if not os.path.exists(after):
                        continue
                    run, wait, slices = sched_window(os.path.join(d, name), after)
                    data.setdefault((fill, row), {}).setdefault(server, []).append(
                        (run, wait, wait / slices * 1e6 if slices else None))
    print("| row | server | server CPU s | run-queue wait s | wait ÷ CPU | µs waited per time scheduled in |")
    print("|---|---|---|---|---|---|")
    for (fill, row), servers in sorted(data.items()):
        for server, runs in sorted(servers.items()):
            cols = [spread([r[0] for r in runs]), spread([r[1] for r in runs]),
                    spread([r[1] / r[0] if r[0] else None for r in runs]),
                    spread([r[2] for r in runs])]
            print(f"| {fill} {row} | {server} | " + " | ".join(
                cell(c, f) for c, f in zip(cols, ("{:.2f}", "{:.2f}", "{:.2f}", "{:,.0f}"))) + " |")


def main(argv):
    if len(argv) >= 2 and argv[0] == "cpu":
        print(f"{cpu_seconds(int(argv[1])):.2f}")
    elif len(argv) == 4 and argv[0] == "memaslap":
        json.dump(memaslap_json(argv[1], float(argv[2]), float(argv[3])), sys.stdout, indent=1)
    elif len(argv) == 2 and argv[0] == "brief":
        with open(argv[1]) as fh:
            print(brief(json.load(fh)))
    elif len(argv) == 2 and argv[0] == "table":
        table(argv[1])
    elif len(argv) == 2 and argv[0] == "sched":
        sched(argv[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
