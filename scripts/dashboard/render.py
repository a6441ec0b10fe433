#!/usr/bin/env python3
"""Render the Grafana dashboard's panels from Prometheus's query API with matplotlib.

Grafana is not installable from the package registries this project uses (Debian has no
grafana package; npm's "grafana" is a placeholder), so this draws the same panels from
packaging/grafana/flashtier.json: every panel, every target expression, run through
/api/v1/query_range over [start, end], one subplot per panel with its title, unit and the
legend formats. `$instance` becomes `.*`, `$__rate_interval` becomes --rate-interval.

Usage: render.py --prometheus http://127.0.0.1:29090 --start UNIX --end UNIX --out PNG
"""
import argparse
import json
import re
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

DASHBOARD = "packaging/grafana/flashtier.json"


def query_range(base, expr, start, end, step):
    q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{base}/api/v1/query_range?{q}", timeout=30) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise SystemExit(f"query failed: {expr}: {body}")
    return body["data"]["result"]


def legend(fmt, labels):
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt) or str(labels)


def human(unit):
    def bytes_(v, _):
        for u in ["B", "KiB", "MiB", "GiB", "TiB"]:
            if abs(v) < 1024:
                return f"{v:.0f} {u}"
            v /= 1024
        return f"{v:.0f} PiB"

    def seconds(v, _):
        if v == 0:
            return "0"
        if abs(v) < 1e-3:
            return f"{v * 1e6:.0f} µs"
        if abs(v) < 1:
            return f"{v * 1e3:.1f} ms"
        return f"{v:.2f} s"

    def short(v, _):
        for s, u in [(1e9, "G"), (1e6, "M"), (1e3, "k")]:
            if abs(v) >= s:
                return f"{v / s:.1f}{u}"
        return f"{v:.3g}"

    return {
        "bytes": bytes_,
        "s": seconds,
        "percentunit": lambda v, _: f"{v * 100:.0f}%",
        "ops": lambda v, p: short(v, p) + "/s",
    }.get(unit, short)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--start", type=float, required=True)
    ap.add_argument("--end", type=float, required=True)
    ap.add_argument("--step", default="2s")
    ap.add_argument("--rate-interval", default="20s")
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="flashtier (rendered from Prometheus with matplotlib)")
    a = ap.parse_args()
    dash = json.load(open(DASHBOARD))
    cols = 3
    # Lay panels out as the dashboard does: a row header starts a new line of panels.
    cells = []
    for p in dash["panels"]:
        if p.get("type") == "row":
            while len(cells) % cols:
                cells.append(None)
        elif p.get("type") == "timeseries":
            cells.append(p)
    panels = [p for p in cells if p]
    rows = (len(cells) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 6.2, rows * 3.1), squeeze=False)
    for ax, p in zip(axes.flat, cells):
        if p is None:
            ax.axis("off")
            continue
        for t in p["targets"]:
            expr = t["expr"].replace("$instance", ".*").replace("$__rate_interval", a.rate_interval)
            for series in query_range(a.prometheus, expr, a.start, a.end, a.step):
                xs = [float(v[0]) - a.start for v in series["values"]]
                ys = [float(v[1]) for v in series["values"]]
                ys = [y if y == y and abs(y) != float("inf") else float("nan") for y in ys]
                ax.plot(xs, ys, linewidth=1.1, label=legend(t.get("legendFormat", ""), series["metric"]))
        ax.set_title(p["title"], fontsize=10, loc="left")
        ax.yaxis.set_major_formatter(FuncFormatter(human(p["fieldConfig"]["defaults"].get("unit", ""))))
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        ax.set_xlabel("seconds into the run", fontsize=7)
        if ax.lines:
            ax.legend(fontsize=6, loc="upper left", ncol=2)
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    for ax in list(axes.flat)[len(cells):]:
        ax.axis("off")
    fig.suptitle(a.title, fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(a.out, dpi=80)
    print(f"wrote {a.out}: {len(panels)} panels")


if __name__ == "__main__":
    main()
