#!/usr/bin/env python3
"""Table of a pair.sh run: per scenario and phase, NEW/OLD ratios of throughput, hit ratio and
server CPU per op for each round and their median, and OLD's own spread across rounds (max/min,
the noise a ratio must beat)."""
import json
import os
import statistics
import sys

METRICS = (("throughput_ops_per_sec", "ops/s"), ("hit_ratio", "hit ratio"),
           ("server_cpu_us_per_op", "CPU µs/op"))


def row(path):
    try:
        with open(path) as f:
            return json.load(f)["rows"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return None


def main(out):
    raw = os.path.join(out, "raw")
    runs = {}
    for label in sorted(os.listdir(raw)):
        scen, which, rnd = label.rsplit("-", 2)
        for name in sorted(os.listdir(os.path.join(raw, label))):
            if not name.endswith(".json") or name in ("fill.json", "stats.json"):
                continue
            r = row(os.path.join(raw, label, name))
            if r is not None:
                runs.setdefault((scen, name[:-5]), {}).setdefault(rnd, {})[which] = r
    print("| scenario/phase | metric | old (per round) | new (per round) | new/old per round | median new/old | old max/min |")
    print("|---|---|---|---|---|---|---|")
    for (scen, phase), rounds in sorted(runs.items()):
        for key, label in METRICS:
            olds, news, ratios = [], [], []
            for rnd in sorted(rounds):
                o, n = rounds[rnd].get("old", {}).get(key), rounds[rnd].get("new", {}).get(key)
                if o is not None:
                    olds.append(o)
                if n is not None:
                    news.append(n)
                if o and n is not None:
                    ratios.append(n / o)
            fmt = (lambda v: f"{v:.4f}") if key == "hit_ratio" else (lambda v: f"{v:.1f}" if v < 1000 else f"{v:.0f}")
            spread = f"{max(olds) / min(olds):.3f}" if len(olds) > 1 and min(olds) > 0 else "-"
            med = f"{statistics.median(ratios):.3f}" if ratios else "-"
            print(f"| {scen}/{phase} | {label} | {', '.join(fmt(v) for v in olds)} | "
                  f"{', '.join(fmt(v) for v in news)} | {', '.join(f'{x:.3f}' for x in ratios)} | {med} | {spread} |")


if __name__ == "__main__":
    main(sys.argv[1])
