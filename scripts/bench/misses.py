#!/usr/bin/env python3
"""Where the read phase's misses come from, per run of steady.sh (run with PRESENCE=1).

Per server and mix: read hit ratio; items held after the run, the zipf mass they cover and
the mass of an ideal cache of the same count (presence.py); share held per popularity band;
flashtier's read-phase GET misses by how the key last left (get_misses_*, s2 - s1) and the
reclaim verdicts over the overwrite phase (extstore_reclaim_*, s1 - s0).

Usage: misses.py OUT_DIR   (prints markdown; steady.sh writes it to OUT_DIR/misses.md)
"""
import json
import os
import sys

CAUSES = ["unknown", "reclaimed_old", "reclaimed_young", "ram_evicted", "lost", "expired"]
VERDICTS = ["kept_hit", "kept_unhit", "dropped_young", "dropped_old"]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def num(stats, name):
    try:
        return int(float(stats.get(name, 0)))
    except (TypeError, ValueError):
        return 0


def main():
    out = sys.argv[1]
    raw = os.path.join(out, "raw")
    rows, causes, verdicts = [], [], []
    for label in sorted(os.listdir(raw)):
        d = os.path.join(raw, label)
        run = load(os.path.join(d, "run.json")) or {}
        read = load(os.path.join(d, "read.json")) or {}
        pres = load(os.path.join(d, "presence.json"))
        snaps = [load(os.path.join(d, f"s{i}.json")) for i in range(3)]
        if not all(snaps):
            continue
        s0, s1, s2 = (s.get("stats", {}) for s in snaps)
        kind = run.get("kind", label.split("-")[0])
        mix = f"{run.get('set_fraction', '?'):.0%} SETs, zipf {run.get('theta', '?')}" if run else label
        rows_ = read.get("rows") or [{}]
        hit = rows_[0].get("hit_ratio")
        hit = f"{hit:.3f}" if isinstance(hit, (int, float)) else "-"
        if pres:
            bands = " / ".join(f"{b['share']:.0%}" for b in pres["bands"])
            rows.append(f"| {kind} | {mix} | {hit} | {pres['held']} | {pres['held_mass']:.3f} "
                        f"| {pres['ideal_mass_same_count']:.3f} | {bands} |")
        else:
            rows.append(f"| {kind} | {mix} | {hit} | - | - | - | - |")
        if "get_misses_unknown" in s2:
            m = [num(s2, f"get_misses_{c}") - num(s1, f"get_misses_{c}") for c in CAUSES]
            total = sum(m) or 1
            causes.append(f"| {kind} | {mix} | {sum(m)} | "
                          + " | ".join(f"{x} ({x / total:.0%})" for x in m) + " |")
            v = [num(s1, f"extstore_reclaim_{x}") - num(s0, f"extstore_reclaim_{x}") for x in VERDICTS]
            verdicts.append(f"| {kind} | {mix} | " + " | ".join(str(x) for x in v) + " |")
    bands = pres["bands"] if pres else []
    print("Keys held after the read phase (presence.py), by popularity rank band "
          + ", ".join(b["ranks"] for b in bands) + ":\n")
    print("| server | mix | read hit ratio | items held | zipf mass held | ideal mass, same count | share held per band |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    if causes:
        print("\nflashtier read-phase GET misses by how the key last left (get_misses_*):\n")
        print("| server | mix | misses | " + " | ".join(CAUSES) + " |")
        print("|---|---|---|" + "---|" * len(CAUSES))
        print("\n".join(causes))
        print("\nflashtier reclaim verdicts while flash was full, overwrite phase (extstore_reclaim_*):\n")
        print("| server | mix | " + " | ".join(VERDICTS) + " |")
        print("|---|---|" + "---|" * len(VERDICTS))
        print("\n".join(verdicts))


if __name__ == "__main__":
    main()
