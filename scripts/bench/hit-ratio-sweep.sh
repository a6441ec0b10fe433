#!/usr/bin/env bash
# Hit ratio vs RAM budget: runs compare.sh once per RAM budget (cgroup limit = 2 x budget
# unless --cg-factor says otherwise) and plots each server's hit ratio against the budget.
# Usage: scripts/bench/hit-ratio-sweep.sh --mems 128,256,512 [--out DIR] [--cg-factor F]
#          [any compare.sh option, e.g. --scenario d --rates 10k --servers memcached,flashtier]
# Writes DIR/mem-<MB>/ (one compare.sh run each), DIR/hit-ratio.json and DIR/hit-ratio.png.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
MEMS="" OUT="" FACTOR=2 PASS=() SCEN=x
while (($#)); do
  case "$1" in
    --mems) MEMS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --cg-factor) FACTOR=$2; shift 2 ;;
    --scenario) SCEN=$2; PASS+=("$1" "$2"); shift 2 ;;
    *) PASS+=("$1"); shift ;;
  esac
done
[ -n "$MEMS" ] || { echo "hit-ratio-sweep.sh: --mems is required" >&2; exit 2; }
OUT=${OUT:-$ROOT/bench-results/hit-ratio-$SCEN-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
IFS=, read -r -a MLIST <<< "$MEMS"
for m in "${MLIST[@]}"; do
  cg=$(python3 -c "print(int($m * $FACTOR))")
  "$ROOT/scripts/bench/compare.sh" "${PASS[@]}" --mem "$m" --cg-limit "$cg" --no-plot \
    --out "$OUT/mem-$m" > "$OUT/mem-$m.log" 2>&1 || { echo "run at $m MiB failed (see $OUT/mem-$m.log)" >&2; exit 1; }
  echo "hit-ratio-sweep: $m MiB done" >&2
done
python3 -c 'import matplotlib' 2>/dev/null || python3 -m pip install -q matplotlib >&2 || true
python3 - "$OUT" "${MLIST[@]}" <<'PY'
import json, os, sys
out, mems = sys.argv[1], sys.argv[2:]
series = {}
for m in mems:
    s = json.load(open(os.path.join(out, f"mem-{m}", "summary.json")))
    for srv in s["servers"]:
        # The first open-loop row if any (same offered load for every budget), else closed loop.
        rows = [r for r in srv["rows"] if r["mode"] == "open"] or srv["rows"]
        series.setdefault(srv["label"], []).append({"mem_mb": int(m), "hit_ratio": rows[0]["hit_ratio"],
                                                    "offered": rows[0]["offered"]})
json.dump(series, open(os.path.join(out, "hit-ratio.json"), "w"), indent=2)
print("| server | " + " | ".join(f"{m} MiB" for m in mems) + " |")
print("|---|" + "---|" * len(mems))
for label, pts in series.items():
    print(f"| {label} | " + " | ".join(f"{p['hit_ratio']:.4f}" if p["hit_ratio"] is not None else "-" for p in pts) + " |")
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, pts in series.items():
        ax.plot([p["mem_mb"] for p in pts], [p["hit_ratio"] for p in pts], marker="o", label=label)
    ax.set_xlabel("RAM budget (MiB; cgroup limit = budget x factor)")
    ax.set_ylabel("GET hit ratio")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "hit-ratio.png"), dpi=110)
except ImportError:
    print("matplotlib missing: no plot", file=sys.stderr)
PY
