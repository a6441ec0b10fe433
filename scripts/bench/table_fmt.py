#!/usr/bin/env python3
"""Formatting and plotting helpers shared by tables.py and shapes_table.py (a leaf: it imports
neither, so the two table scripts do not import each other)."""
import os
import sys

from report import first_stat


def stat(stats, names):
    return first_stat(stats, names)[1]


def f(x, fmt="{:.2f}"):
    return "-" if x is None else fmt.format(x)


def ratio(a, b):
    return None if a is None or b in (None, 0) else a / b


def plot(out, name, xlabel, ylabel, series, logx=False, logy=False, title=None):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("tables.py: matplotlib missing, no plot", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for label, pts in series.items():
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    if logx:
        ax.set_xscale("log", base=2)
        xs = sorted({p[0] for pts in series.values() for p in pts})
        ax.set_xticks(xs)
        ax.set_xticklabels([str(x) for x in xs])
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, name), dpi=110)
    plt.close(fig)
