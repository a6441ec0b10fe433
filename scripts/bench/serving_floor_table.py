#!/usr/bin/env python3
"""Tables for serving-floor.sh: OUT/raw/r<round>/... -> markdown on stdout.

Per server, memory (-m) and rate: the client's p50 / p90 / p99 / p99.9, the server's CPU per
op split into user and system time (from /proc/PID/stat around the row, warm-up included:
the split is applied to flashtier-bench's CPU per measured op), flash reads per GET
(`get_extstore` / `cmd_get`), and for flashtier the serving threads' CPU per op (schedstat
of the `worker-*` threads). Then the CPU one flash read adds: (worker CPU per op with flash
- worker CPU per op all in RAM) / flash reads per op, per round. Then fio's rows: CPU per
read (usr + sys over the run / reads), context switches per read, latency percentiles.
Every cell is min / median / max over rounds. Standard library only.

Usage: serving_floor_table.py OUT
"""
import glob
import json
import os
import re
import statistics
import sys


def mmm(xs, fmt="{:.1f}"):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "–"
    if len(xs) == 1:
        return fmt.format(xs[0])
    return " / ".join(fmt.format(v) for v in (min(xs), statistics.median(xs), max(xs)))


def load(path):
    with open(path) as f:
        return json.load(f)


def workers_ns(snap):
    return sum(v for k, v in (snap.get("thread_run_ns") or {}).items() if k.startswith("worker-"))


def row_of(d, rate):
    """One server's measurements at one rate, from its bench JSON and the two snaps."""
    bench = load(os.path.join(d, f"open-{rate}.json"))["rows"][0]
    b0 = load(os.path.join(d, f"open-{rate}.before.json"))
    b1 = load(os.path.join(d, f"open-{rate}.after.json"))
    lat = bench["latency"]
    cpu = bench.get("server_cpu_us_per_op")
    user = (b1.get("user_s") or 0) - (b0.get("user_s") or 0)
    system = (b1.get("sys_s") or 0) - (b0.get("sys_s") or 0)
    share = user / (user + system) if user + system > 0 else None
    s0, s1 = b0["stats"], b1["stats"]
    gets = s1.get("cmd_get", 0) - s0.get("cmd_get", 0)
    flash = s1.get("get_extstore", 0) - s0.get("get_extstore", 0)
    ops = gets + s1.get("cmd_set", 0) - s0.get("cmd_set", 0)
    wns = workers_ns(b1) - workers_ns(b0)
    return {
        "p50": lat["p50_us"], "p90": lat["p90_us"], "p99": lat["p99_us"], "p999": lat["p999_us"],
        "hit": bench.get("hit_ratio"),
        "cpu": cpu,
        "user": cpu * share if cpu is not None and share is not None else None,
        "sys": cpu * (1 - share) if cpu is not None and share is not None else None,
        "flash_per_get": flash / gets if gets else None,
        "flash_per_op": flash / ops if ops else None,
        "worker_us_per_op": wns / 1000 / ops if ops and wns else None,
    }


def main():
    out = sys.argv[1]
    rows = {}  # (server, mem, rate) -> [row per round]
    per_round = {}  # (round, server, mem, rate) -> row
    for d in sorted(glob.glob(os.path.join(out, "raw", "r*", "m*", "*"))):
        m = re.search(r"/r(\d+)/m(\d+)/([^/]+)$", d)
        if not m:
            continue
        rnd, mem, server = int(m.group(1)), int(m.group(2)), m.group(3)
        for f in sorted(glob.glob(os.path.join(d, "open-*.json"))):
            rm = re.search(r"open-([^.]+)\.json$", f)
            if not rm:
                continue
            rate = rm.group(1)
            try:
                r = row_of(d, rate)
            except (OSError, KeyError, IndexError, ValueError) as e:
                print(f"<!-- {d} {rate}: {e} -->")
                continue
            rows.setdefault((server, mem, rate), []).append(r)
            per_round[(rnd, server, mem, rate)] = r
    print("| server | -m | rate | p50 µs | p90 µs | p99 µs | p99.9 µs | hit | server CPU µs/op | user µs/op | system µs/op | flash reads / GET |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (server, mem, rate), rs in sorted(rows.items(), key=lambda x: (x[0][2], x[0][1], x[0][0])):
        c = lambda k, fmt="{:.1f}": mmm([r[k] for r in rs], fmt)
        print(f"| {server} | {mem} | {rate} | {c('p50')} | {c('p90')} | {c('p99')} | {c('p999')} "
              f"| {c('hit', '{:.3f}')} | {c('cpu')} | {c('user')} | {c('sys')} | {c('flash_per_get', '{:.3f}')} |")
    # How long each server stayed busy after its fill (lib.sh's settle), before the warm-up.
    settles = {}
    for f in glob.glob(os.path.join(out, "raw", "r*", "m*", "*", "settle.txt")):
        m = re.search(r"/m(\d+)/([^/]+)/settle\.txt$", f)
        kv = dict(line.split() for line in open(f) if len(line.split()) == 2)
        settles.setdefault((m.group(2), int(m.group(1))), []).append(kv)
    if settles:
        print()
        print("After the fill, before the warm-up: time until the server was quiet, and its CPU meanwhile:")
        print()
        print("| server | -m | settle s | CPU ms while settling |")
        print("|---|---|---|---|")
        for (server, mem), ks in sorted(settles.items()):
            print(f"| {server} | {mem} | {mmm([float(k['settle_s']) for k in ks])} "
                  f"| {mmm([float(k['settle_cpu_ms']) for k in ks], '{:.0f}')} |")
    # What one flash read adds to flashtier's serving threads, round by round.
    mems = sorted({k[2] for k in per_round})
    if len(mems) == 2:
        lo, hi = mems
        print()
        print(f"flashtier's serving threads (`worker-*`), CPU per op at -m {lo} (flash reads) "
              f"and -m {hi} (all in RAM), and what one flash read adds:")
        print()
        print("| rate | worker µs/op, flash | worker µs/op, RAM | flash reads / op | µs per flash read |")
        print("|---|---|---|---|---|")
        for rate in sorted({k[3] for k in per_round}):
            fl, ram, fpo, add = [], [], [], []
            for rnd in sorted({k[0] for k in per_round}):
                a = per_round.get((rnd, "flashtier", lo, rate))
                b = per_round.get((rnd, "flashtier", hi, rate))
                if not a or not b or not a["worker_us_per_op"] or not b["worker_us_per_op"]:
                    continue
                fl.append(a["worker_us_per_op"])
                ram.append(b["worker_us_per_op"])
                fpo.append(a["flash_per_op"])
                if a["flash_per_op"]:
                    add.append((a["worker_us_per_op"] - b["worker_us_per_op"]) / a["flash_per_op"])
            print(f"| {rate} | {mmm(fl)} | {mmm(ram)} | {mmm(fpo, '{:.3f}')} | {mmm(add)} |")
    fio = {}
    for f in sorted(glob.glob(os.path.join(out, "raw", "r*", "fio-*.json"))):
        name = re.search(r"fio-(.+)\.json$", f).group(1)
        j = load(f)["jobs"][0]
        r = j["read"]
        ios = r["total_ios"]
        secs = j["job_runtime"] / 1000
        p = r["clat_ns"]["percentile"]
        fio.setdefault(name, []).append({
            "iops": r["iops"],
            "cpu": (j["usr_cpu"] + j["sys_cpu"]) / 100 * secs / ios * 1e6 if ios else None,
            "cs": j["ctx"] / ios if ios else None,
            "p50": p.get("50.000000", 0) / 1000, "p90": p.get("90.000000", 0) / 1000,
            "p99": p.get("99.000000", 0) / 1000, "p999": p.get("99.900000", 0) / 1000,
        })
    if fio:
        print()
        print("fio, random 8 KiB O_DIRECT reads through io_uring on a written file (the device's floor):")
        print()
        print("| fio | reads/s | CPU µs per read | context switches per read | p50 µs | p90 µs | p99 µs | p99.9 µs |")
        print("|---|---|---|---|---|---|---|---|")
        for name, rs in fio.items():
            c = lambda k, fmt="{:.1f}": mmm([r[k] for r in rs], fmt)
            print(f"| {name} | {c('iops', '{:.0f}')} | {c('cpu')} | {c('cs', '{:.2f}')} | {c('p50')} | {c('p90')} | {c('p99')} | {c('p999')} |")


if __name__ == "__main__":
    main()
