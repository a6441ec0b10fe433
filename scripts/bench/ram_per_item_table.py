"""Summarise several ram-per-item.sh runs (their OUT dirs) as min / median / max per
quantity: RSS growth per item added, the stats' parts, the rest, and the RSS the stats do
not name at each snapshot.

Usage: ram_per_item_table.py LABEL=DIR[,DIR...] [LABEL=DIR,...]
"""
import statistics
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from statsfile import read_stats  # noqa: E402
from smaps_split import classify, mappings  # noqa: E402

PARTS = ["index_bytes", "flash_work_bytes", "flash_open_segment_table_bytes", "write_back_queue_bytes"]


def run(out):
    a, b = read_stats(out, "step1"), read_stats(out, "step2")
    items = b["curr_items"] - a["curr_items"]
    r = {"RSS growth (anonymous)": (b["rss_anon_kb"] - a["rss_anon_kb"]) * 1024 / items}
    rest = r["RSS growth (anonymous)"]
    for p in PARTS:
        if p in a and p in b:
            r[p] = (b[p] - a[p]) / items
            rest -= r[p]
    r["rest (RSS growth − the parts above)"] = rest
    for label, d in (("step1", a), ("step2", b)):
        r[f"RssAnon − ram_known_bytes at {label}, MiB"] = (
            d["rss_anon_kb"] * 1024 - d["ram_known_bytes"]) / 2**20
        outside = sum(v for k, v in classify(mappings(f"{out}/{label}.smaps")).items()
                      if not k.startswith("allocator"))
        r[f"  of which outside the allocator's arenas at {label}, MiB"] = outside / 1024
    r["RssAnon at step2, MiB"] = b["rss_anon_kb"] / 1024
    r["items at step2"] = b["curr_items"]
    for k in ("evictions", "extstore_evictions_deferred"):
        if k in b:
            r[f"{k} at step2"] = b[k]
    return r


def fmt(xs):
    xs = sorted(xs)
    if len(xs) == 1:
        return f"{xs[0]:.2f}"
    return f"{xs[0]:.2f} / {statistics.median(xs):.2f} / {xs[-1]:.2f}"


def main():
    cols = []
    for arg in sys.argv[1:]:
        label, _, dirs = arg.partition("=")
        cols.append((label, [run(d) for d in dirs.split(",") if d]))
    keys = []
    for _, rs in cols:
        for r in rs:
            keys += [k for k in r if k not in keys]
    first = ["RSS growth (anonymous)"] + PARTS
    keys = [k for k in first if k in keys] + [k for k in keys if k not in first]
    print("| per item added, B (min / median / max) | " + " | ".join(
        f"{label} ({len(rs)} runs)" for label, rs in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for k in keys:
        print(f"| {k} | " + " | ".join(fmt([r[k] for r in rs if k in r]) if any(k in r for r in rs)
                                        else "—" for _, rs in cols) + " |")


if __name__ == "__main__":
    main()
