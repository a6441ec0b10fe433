#!/usr/bin/env python3
"""Min / median / max over rounds of the rows scripts/bench/uring-cpu.sh prints.

Usage: scripts/bench/uring_cpu_table.py SUMMARY.txt [SUMMARY.txt ...]
Prints one markdown row per label and shape: GETs/s, server CPU per GET, system calls,
context switches, io_uring_enter calls and SQEs per GET, and the load average range.
"""
import statistics
import sys


def spread(xs, fmt):
    xs = sorted(xs)
    if len(xs) == 1:
        return fmt % xs[0]
    return " / ".join(fmt % x for x in (xs[0], statistics.median(xs), xs[-1]))


def main():
    rows = {}
    order = []
    for path in sys.argv[1:]:
        for line in open(path):
            f = line.split()
            if len(f) != 12 or f[0] == "label":
                continue
            key = (f[0], f[2])
            if key not in rows:
                rows[key] = []
                order.append(key)
            if f not in rows[key]:
                rows[key].append(f)
    print("| build | shape | runs | GETs/s | server µs/GET | sysc/GET | cs/GET | enters/GET | SQEs/GET | load1 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted(order, key=lambda k: (k[1], order.index(k))):
        rs = rows[key]
        col = lambda i: [float(r[i]) for r in rs]
        print("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %.0f–%.0f |" % (
            key[0], key[1], len(rs), spread(col(3), "%.0f"), spread(col(6), "%.1f"),
            spread(col(7), "%.2f"), spread(col(8), "%.2f"), spread(col(9), "%.3f"),
            spread(col(10), "%.2f"), min(col(11)), max(col(11))))


if __name__ == "__main__":
    main()
