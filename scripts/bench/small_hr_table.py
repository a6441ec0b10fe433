"""Tables of scripts/bench/small-hr.sh's runs: per server, phase and run, then min / median /
max per server and phase. Usage: small_hr_table.py OUT VALUE FLASH_MIB FT_LOG_MIB.

Definitions (each phase's window runs from the snapshot before its traffic to the one after
its read phase, so flushes that lag the SETs count):
  held      keys the server holds after the phase: the hit ratio of the uniform GETs that
            follow it (<tag>-count.json) x KEYS; "counted" beside it: curr_items (flashtier:
            RAM + main flash log; memcached: RAM + extstore) plus, for ft-small,
            small_live_items_estimate (a key in RAM and in the tier counts twice there)
  on flash  ft-small: small_live_items_estimate; memcached: extstore_objects_used; ft-index
            has no count of its flash items apart from RAM's ("-")
  live      on-flash objects x (key + value bytes) / the tier's flash bytes (ft-small: its
            --small-flash file; memcached: the flash budget); ft-index: its own
            extstore_live_bytes (records, headers included) / extstore_capacity
  wa io     /proc/PID/io write_bytes delta / (cmd_set delta x VALUE)
  wa stats  the server's own flash bytes written (flashtier flash_device_bytes_written +
            small_bytes_written; memcached extstore_bytes_written) / the same
  cpu       server CPU per op of the traffic and of the read phase (flashtier-bench's
            server_cpu_us_per_op)
"""

import json
import os
import statistics
import sys

from table_fmt import f

out, vsize, flash_mib, ft_log_mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
raw = os.path.join(out, "raw")
cfg = json.load(open(os.path.join(out, "config.json")))
keys = cfg["keys"]
prefix = "key:"
# mean key length of prefix + decimal index over [0, keys)
total, lo, d = 0, 0, 1
while lo < keys:
    hi = min(keys, 10**d)
    total += (hi - lo) * (len(prefix) + d)
    lo, d = hi, d + 1
obj_bytes = total / keys + vsize


def load(p):
    with open(p) as f:
        return json.load(f)


def text(d, name):
    p = os.path.join(d, name)
    return open(p).read().strip() if os.path.exists(p) else "?"


def num(st, name):
    try:
        return float(st[name])
    except (KeyError, ValueError, TypeError):
        return None


def delta(a, b, name):
    x, y = num(a["stats"], name), num(b["stats"], name)
    return None if x is None or y is None else y - x


def held(st, name):
    n = num(st, "curr_items") or 0
    if name.startswith("ft-small"):
        n += num(st, "small_live_items_estimate") or 0
    return n


def on_flash(st, name):
    if name.startswith("ft-small"):
        return num(st, "small_live_items_estimate")
    if name.startswith("mc"):
        return num(st, "extstore_objects_used")
    return None


def tier_bytes(name):
    return (flash_mib - ft_log_mib if name.startswith("ft-small") else flash_mib) * 2**20


def written(a, b, name):
    if name.startswith("mc"):
        return delta(a, b, "extstore_bytes_written")
    parts = [delta(a, b, "flash_device_bytes_written"), delta(a, b, "small_bytes_written")]
    return sum(p for p in parts if p is not None)


def row(d, name, phase, s0, s2, rj, tj, cj):
    st = s2["stats"]
    sets = delta(s0, s2, "cmd_set") or 0
    fl = on_flash(st, name)
    r = {"phase": phase, "held": cj["rows"][0]["hit_ratio"] * keys if cj else None,
         "counted": held(st, name), "on_flash": fl,
         "live": fl * obj_bytes / tier_bytes(name) if fl is not None
         else (num(st, "extstore_live_bytes") or 0) / (num(st, "extstore_capacity") or 1),
         "read_hit": rj["rows"][0]["hit_ratio"] if rj else None,
         "traffic_hit": tj["rows"][0]["hit_ratio"] if tj else None,
         "wa_io": (s2["io_write_bytes"] - s0["io_write_bytes"]) / (sets * vsize) if sets else None,
         "wa_stats": written(s0, s2, name) / (sets * vsize) if sets else None,
         "cpu_traffic": (tj or {}).get("rows", [{}])[0].get("server_cpu_us_per_op"),
         "cpu_read": (rj or {}).get("rows", [{}])[0].get("server_cpu_us_per_op"),
         "ops_s": (tj or {}).get("rows", [{}])[0].get("throughput_ops_per_sec"),
         "rss_mib": s2["vm_rss_bytes"] / 2**20 if s2.get("vm_rss_bytes") else None,
         "cg_peak_mib": (s2.get("cgroup_max_usage_bytes") or 0) / 2**20}
    if name.startswith("ft-small"):
        m, o = delta(s0, s2, "small_log_sets_merged"), delta(s0, s2, "small_log_objects_merged")
        r["objects_per_rewrite"] = o / m if m else None
        for k in ("small_evictions", "small_inserts", "small_inserts_refused", "small_insert_wait_timeouts",
                  "small_false_positives", "small_log_dropped", "evictions"):
            r[k] = delta(s0, s2, k)
        r["small_sets_used"] = num(st, "small_sets_used")
        r["small_sets"] = num(st, "small_sets")
    return r


def runs():
    rows = []
    for lab in sorted(os.listdir(raw)):
        d = os.path.join(raw, lab)
        if not os.path.exists(os.path.join(d, "name")):
            continue
        name = open(os.path.join(d, "name")).read().strip()
        load_s, load_e = text(d, "load_start"), text(d, "load_end")
        s_start, s_fill = os.path.join(d, "s_start.json"), os.path.join(d, "s_fill.json")
        if not os.path.exists(s_fill):
            continue
        prev = load(s_fill)
        fr = row(d, name, "fill", load(s_start), prev, None, None, load(os.path.join(d, "fill-count.json")))
        fj = load(os.path.join(d, "fill.json")) if os.path.exists(os.path.join(d, "fill.json")) else {}
        fr["ops_s"] = (fj.get("rows") or [{}])[0].get("throughput_ops_per_sec") if fj else None
        cpu = prev["cpu_s"] - load(s_start)["cpu_s"]
        fr["cpu_traffic"] = cpu * 1e6 / keys
        rows.append(dict(fr, label=lab, name=name, load=f"{load_s}-{load_e}"))
        prev = load(os.path.join(d, "s_fill_count.json"))
        i = 0
        while os.path.exists(os.path.join(d, f"p{i}.phase")):
            theta, sets = open(os.path.join(d, f"p{i}.phase")).read().split()
            s2 = load(os.path.join(d, f"p{i}-s2.json"))
            r = row(d, name, f"zipf {theta}, {float(sets):.0%} SET", prev, s2,
                    load(os.path.join(d, f"p{i}-read.json")), load(os.path.join(d, f"p{i}-traffic.json")),
                    load(os.path.join(d, f"p{i}-count.json")))
            rows.append(dict(r, label=lab, name=name, load=f"{load_s}-{load_e}"))
            # the next window starts after the count phase (uniform GETs, no SETs)
            prev, i = load(os.path.join(d, f"p{i}-s3.json")), i + 1
    return rows


rows = runs()
print(f"object = {obj_bytes:.1f} B (mean key {obj_bytes - vsize:.1f} B + {vsize} B value); "
      f"flash budget {flash_mib} MiB each (ft-small: {ft_log_mib} MiB main log + {flash_mib - ft_log_mib} MiB tier)")
print()
print("| run | phase | held (count GETs) | counted | on flash | live / tier | read hit | traffic hit | flash B / B SET io; stats "
      "| CPU µs/op traffic; read | ops/s | RSS MiB | cg peak MiB | load |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['label']} | {r['phase']} | {f(r['held'], '{:.0f}')} | {r['counted']:.0f} | {f(r['on_flash'], '{:.0f}')} | {f(r['live'], '{:.1%}')} "
          f"| {f(r['read_hit'], '{:.3f}')} | {f(r['traffic_hit'], '{:.3f}')} | {f(r['wa_io'], '{:.2f}')}; {f(r['wa_stats'], '{:.2f}')} "
          f"| {f(r['cpu_traffic'], '{:.1f}')}; {f(r['cpu_read'], '{:.1f}')} | {f(r['ops_s'], '{:.0f}')} "
          f"| {f(r['rss_mib'], '{:.0f}')} | {r['cg_peak_mib']:.0f} | {r['load']} |")
small = [r for r in rows if r["name"] == "ft-small"]
if small:
    print()
    print("ft-small, during each phase: " + "; ".join(
        f"{r['label']} {r['phase']}: log objects a set rewrite carried {f(r.get('objects_per_rewrite'), '{:.2f}')}, sets used {f(r.get('small_sets_used'), '{:.0f}')}/{f(r.get('small_sets'), '{:.0f}')}, "
        + ", ".join(f"{k.replace('small_', '')} {f(r.get(k), '{:.0f}')}" for k in
                    ("small_inserts", "small_evictions", "small_inserts_refused", "small_insert_wait_timeouts",
                     "small_log_dropped", "evictions"))
        for r in small))
print()
print("min / median / max over runs:")
print()
print("| server | phase | runs | held | live / tier | read hit | flash B / B SET (io) | CPU µs/op traffic | RSS MiB |")
print("|---|---|---|---|---|---|---|---|---|")
summary = {}
order = []
for r in rows:
    if (r["name"], r["phase"]) not in order:
        order.append((r["name"], r["phase"]))
for name, phase in order:
    rs = [r for r in rows if r["name"] == name and r["phase"] == phase]

    def mmm(key, fmt):
        xs = sorted(r[key] for r in rs if r.get(key) is not None)
        if not xs:
            return "-"
        summary.setdefault(name, {}).setdefault(phase, {})[key] = [xs[0], statistics.median(xs), xs[-1]]
        return " / ".join(fmt.format(x) for x in (xs[0], statistics.median(xs), xs[-1]))

    cols = [mmm(k, fm) for k, fm in (("held", "{:.0f}"), ("live", "{:.1%}"), ("read_hit", "{:.3f}"),
                                      ("wa_io", "{:.2f}"), ("cpu_traffic", "{:.1f}"), ("rss_mib", "{:.0f}"))]
    print(f"| {name} | {phase} | {len(rs)} | " + " | ".join(cols) + " |")
with open(os.path.join(out, "summary.json"), "w") as fh:
    json.dump({"object_bytes": obj_bytes, "runs": rows, "summary": summary}, fh, indent=1)
