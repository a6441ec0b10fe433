#!/usr/bin/env python3
"""Table of scripts/bench/journal-cost.sh's runs: per phase and journal mode, min / median /
max over rounds of throughput, SET (and DELETE) p50/p99 and server CPU per op, and each mode's
median throughput as a ratio of `off`'s.
Usage: journal_table.py OUT_DIR"""
import json
import pathlib
import statistics
import sys

out = pathlib.Path(sys.argv[1])
runs = {}  # (phase, mode) -> [row]
for f in sorted((out / "raw").glob("*/*.json")):
    if f.name == "stats.json" or f.stem == "fill":
        continue
    mode = f.parent.name.rsplit("-r", 1)[0]
    rows = json.loads(f.read_text()).get("rows", [])
    if rows:
        runs.setdefault((f.stem, mode), []).append(rows[0])


def spread(xs, fmt="{:.0f}"):
    if not xs:
        return "-"
    return "/".join(fmt.format(x) for x in (min(xs), statistics.median(xs), max(xs)))


def lat(row, kind, q):
    return (row.get(f"latency_{kind}") or {}).get(f"{q}_us", 0.0)


phases = sorted({p for p, _ in runs})
modes = [m for m in ("off", "write", "sync") if any(k[1] == m for k in runs)]
print("| phase | journal_mode | ops/s | ÷ off | SET p50 µs | SET p99 µs | DEL p50 µs | DEL p99 µs | server CPU µs/op | runs |")
print("|---|---|---|---|---|---|---|---|---|---|")
for p in phases:
    base = [r["throughput_ops_per_sec"] for r in runs.get((p, "off"), [])]
    for m in modes:
        rs = runs.get((p, m), [])
        if not rs:
            continue
        tput = [r["throughput_ops_per_sec"] for r in rs]
        ratio = f"{statistics.median(tput) / statistics.median(base):.3f}" if base else "-"
        dels = [r for r in rs if (r.get("latency_delete") or {}).get("count")]
        print(
            f"| {p} | {m} | {spread(tput)} | {ratio} "
            f"| {spread([lat(r, 'set', 'p50') for r in rs])} "
            f"| {spread([lat(r, 'set', 'p99') for r in rs])} "
            f"| {spread([lat(r, 'delete', 'p50') for r in dels]) if dels else '-'} "
            f"| {spread([lat(r, 'delete', 'p99') for r in dels]) if dels else '-'} "
            f"| {spread([r.get('server_cpu_us_per_op') or 0 for r in rs], '{:.1f}')} | {len(rs)} |"
        )
