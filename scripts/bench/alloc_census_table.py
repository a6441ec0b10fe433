"""Name the heap: read the allocation census a ram-per-item.sh run took at each snapshot
(`CENSUS=1` with a binary built `--features alloc-census`: OUT/<label>.census) beside its
stats, and print which size classes hold live heap, how much each grew per item added, and
how the anonymous RSS splits into named (`ram_known_bytes`), allocated but unnamed, and
resident with nothing live in it (RssAnon − live heap bytes: pages the allocator holds
free, plus the ~0.65 MiB of stacks and the binary's data that smaps_split.py shows).

Usage: alloc_census_table.py OUT_DIR [MIN_MIB]   (classes under MIN_MIB [0.25] at both
snapshots are summed in one row)
"""
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from statsfile import read_stats  # noqa: E402


def census(path):
    total, mi, classes = {}, {}, {}
    for line in open(path):
        f = line.split()
        if f[0] == "total":
            total = {f[1]: int(f[2]), f[3]: int(f[4])}
        elif f[0] == "mimalloc":
            mi = {f[i]: int(f[i + 1]) for i in range(1, len(f), 2)}
        elif f[0] == "class":
            classes[(int(f[1]), int(f[2]))] = {f[i]: int(f[i + 1]) for i in range(3, len(f), 2)}
    return total, mi, classes


def main():
    out = sys.argv[1]
    floor = float(sys.argv[2]) if len(sys.argv) > 2 else 0.25
    s = {lab: read_stats(out, lab) for lab in ("step1", "step2")}
    c = {lab: census(f"{out}/{lab}.census") for lab in ("step1", "step2")}
    # Objects held: RAM's index plus the small tier's (small-tier.sh; 0 without one).
    objs = {lab: s[lab]["curr_items"] + s[lab].get("small_items", 0) for lab in s}
    items = objs["step2"] - objs["step1"]
    mib = 2**20
    print(f"items {objs['step1']:.0f} -> {objs['step2']:.0f}")
    print("| size class (bytes) | live MiB at step1 | live MiB at step2 | allocations at step2 "
          "| growth per item added, B |")
    print("|---|---|---|---|---|")
    keys = sorted(set(c["step1"][2]) | set(c["step2"][2]))
    small = [0, 0, 0]
    for k in keys:
        a = c["step1"][2].get(k, {}).get("live_bytes", 0)
        b = c["step2"][2].get(k, {}).get("live_bytes", 0)
        n = c["step2"][2].get(k, {}).get("live_allocs", 0)
        if max(a, b) < floor * mib:
            small[0] += a
            small[1] += b
            small[2] += n
            continue
        print(f"| {k[0] + 1}–{k[1]} | {a / mib:.2f} | {b / mib:.2f} | {n} | {(b - a) / items:.2f} |")
    print(f"| all others | {small[0] / mib:.2f} | {small[1] / mib:.2f} | {small[2]} "
          f"| {(small[1] - small[0]) / items:.2f} |")
    print()
    print("| MiB | step1 | step2 | growth per item added, B |")
    print("|---|---|---|---|")
    rows = []
    for lab in ("step1", "step2"):
        st, (tot, mi, _) = s[lab], c[lab]
        rss = st["rss_anon_kb"] * 1024
        known = st.get("ram_known_bytes", 0)
        live = tot["live_bytes"]
        rows.append({
            "RssAnon": rss,
            "heap live (census: every allocation not yet freed)": live,
            "ram_known_bytes (named by the stats)": known,
            "heap live − ram_known_bytes (allocated, unnamed)": live - known,
            "RssAnon − heap live (resident, nothing live in it: allocator pages held, "
            "stacks, the binary's data)": rss - live,
            "mimalloc commit (reference: includes committed pages never touched)":
                mi.get("current_commit", 0),
        })
    for k in rows[0]:
        a, b = rows[0][k], rows[1][k]
        print(f"| {k} | {a / mib:.2f} | {b / mib:.2f} | {(b - a) / items:.2f} |")


if __name__ == "__main__":
    main()
