"""Split a process's anonymous RSS by mapping (`/proc/PID/smaps` copies that
ram-per-item.sh saves as OUT/<label>.smaps), to say where RSS growth lands: the
allocator's arenas (large anonymous mappings mimalloc reserves), thread stacks (anonymous
mappings behind a guard page), the binary's own writable pages, and the rest.

Usage: smaps_split.py OUT LABEL_A LABEL_B   (prints a table of Anonymous kB per class)
"""
import sys


def mappings(path):
    """[(start, end, name, perms, anon_kb)] in address order."""
    out, cur = [], None
    for line in open(path):
        f = line.split()
        if not f:
            continue
        if "-" in f[0] and len(f) >= 5 and not f[0].endswith(":"):
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            cur = [lo, hi, f[5] if len(f) > 5 else "", f[1], 0]
            out.append(cur)
        elif f[0] == "Anonymous:" and cur is not None:
            cur[4] = int(f[1])
    return out


def classify(maps):
    """Anonymous kB per class."""
    cls = {}
    prev = None
    for lo, hi, name, perms, anon in maps:
        size = hi - lo
        if name.startswith("/"):
            c = "binary and libraries (writable data)"
        elif name == "[heap]":
            c = "[heap] (brk: glibc)"
        elif name.startswith("["):
            c = name
        elif prev is not None and prev[3] == "---p" and prev[1] == lo and size <= 16 << 20:
            c = "thread stacks"
        elif size >= 32 << 20:
            c = "allocator arenas (>= 32 MiB mappings)"
        else:
            c = "other anonymous mappings"
        cls[c] = cls.get(c, 0) + anon
        prev = (lo, hi, name, perms)
    return cls


def main():
    out, a, b = sys.argv[1:4]
    ca = classify(mappings(f"{out}/{a}.smaps"))
    cb = classify(mappings(f"{out}/{b}.smaps"))
    print(f"| anonymous RSS by mapping, KiB | {a} | {b} | growth |")
    print("|---|---|---|---|")
    for k in sorted(set(ca) | set(cb)):
        x, y = ca.get(k, 0), cb.get(k, 0)
        print(f"| {k} | {x:,} | {y:,} | {y - x:+,} |")
    x, y = sum(ca.values()), sum(cb.values())
    print(f"| all | {x:,} | {y:,} | {y - x:+,} |")


if __name__ == "__main__":
    main()
