#!/usr/bin/env python3
"""The small-object tier across `kill -9` (issue 28), counted: fill N keys (version 1, values
of VALUE bytes derived from key and version) into `flashtier kv -m MEM --ram-only
--small-flash S:SMALL_SIZE --small-item-max SMALL_MAX` (no main flash log: only the small
tier can keep an item across the kill), so the tier is full and its log holds objects;
then overwrite every 10th key (version 2) and delete another 10th; wait SETTLE seconds (the
flusher appends what is staged every 100 ms); `kill -9`; restart on the same file and GET
every key. Prints, per trial: untouched keys served / untouched keys, keys served before the
kill (small_items), the restart's small_recovered_* stats, the open time (spawn to the first
stats reply) and the number of stale values served (an older version or a deleted key:
must be 0). One line of JSON per trial on stdout (prefixed `trial`).
Usage: small_kill.py BIN [TRIALS] ; env N [600000], VALUE [100], MEM [8], SMALL_SIZE
[128MiB], SMALL_MAX [300], SETTLE [2], DIR [/var/tmp/small-kill], EXTRA (more flags).
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

from pymemcache.client.base import Client
from probe import pick_port as free_port  # noqa: E402

BIN = sys.argv[1]
TRIALS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
N = int(os.environ.get("N", 600000))
VALUE = int(os.environ.get("VALUE", 100))
MEM = os.environ.get("MEM", "8")
SMALL_SIZE = os.environ.get("SMALL_SIZE", "128MiB")
SMALL_MAX = os.environ.get("SMALL_MAX", "300")
SETTLE = float(os.environ.get("SETTLE", 2))
DIR = os.environ.get("DIR", "/var/tmp/small-kill")
EXTRA = os.environ.get("EXTRA", "").split()
BATCH = 500


def key(k):
    return f"sk:{k}"


def value(k, v):
    seed = f"{k}:{v}:".encode()
    return (seed * (VALUE // len(seed) + 1))[:VALUE]



def start(path, port):
    # --ram-only: no main flash log (its crash journal would serve keys the tier lost).
    args = ["nice", "-n", "19", BIN, "kv", "-l", "127.0.0.1", "-p", str(port), "-m", MEM,
            "-t", "2", "--ram-only", "--small-flash", f"{path}:{SMALL_SIZE}", "--small-item-max", SMALL_MAX]
    t0 = time.monotonic()
    p = subprocess.Popen(args + EXTRA, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        try:
            c = Client(("127.0.0.1", port), connect_timeout=1, timeout=30)
            c.stats()
            return p, c, time.monotonic() - t0
        except (ConnectionRefusedError, OSError):
            if p.poll() is not None:
                raise SystemExit(f"server exited: {p.returncode}")
            time.sleep(0.01)


def small(c):
    s = c.stats("small")
    return {k.decode(): v for k, v in s.items()}


def trial(i):
    os.makedirs(DIR, exist_ok=True)
    path = os.path.join(DIR, f"small-{os.getpid()}-{i}.bin")
    if os.path.exists(path):
        os.remove(path)
    port = free_port()
    p, c, _ = start(path, port)
    try:
        for lo in range(0, N, BATCH):
            c.set_many({key(k): value(k, 1) for k in range(lo, min(N, lo + BATCH))},
                       noreply=False)
        model = {}
        for lo in range(0, N, BATCH):
            ks = range(lo, min(N, lo + BATCH))
            c.set_many({key(k): value(k, 2) for k in ks if k % 10 == 1}, noreply=False)
            c.delete_many([key(k) for k in ks if k % 10 == 2], noreply=False)
        for k in range(N):
            model[k] = 2 if k % 10 == 1 else (None if k % 10 == 2 else 1)
        time.sleep(SETTLE)
        before = small(c)
        p.send_signal(signal.SIGKILL)
        p.wait()
        p, c, open_s = start(path, port)
        after = small(c)
        served_untouched = untouched = stale = served = 0
        for lo in range(0, N, BATCH):
            ks = list(range(lo, min(N, lo + BATCH)))
            got = c.get_many([key(k) for k in ks])
            for k in ks:
                want = model[k]
                v = got.get(key(k))
                if k % 10 > 2:
                    untouched += 1
                if v is None:
                    continue
                served += 1
                if want is None or v != value(k, want):
                    stale += 1
                elif k % 10 > 2:
                    served_untouched += 1
        out = {
            "bin": BIN, "trial": i, "n": N, "untouched": untouched,
            "served_untouched": served_untouched, "served": served, "stale": stale,
            "open_s": round(open_s, 3),
            "before_small_items": int(before.get("small_items", 0)),
            "before_log_items": int(before.get("small_log_items", 0)),
            "before_staged": int(before.get("small_staged_items", 0)),
            "before_bytes_written": int(before.get("small_bytes_written", 0)),
            "before_bytes_stored": int(before.get("small_bytes_stored", 0)),
            "before_log_bytes_written": int(before.get("small_log_bytes_written", 0)),
            "before_log_records": int(before.get("small_log_records", 0)),
            "recovered_items": int(after.get("small_recovered_items", 0)),
            "recovered_log_items": int(after.get("small_recovered_log_items", 0)),
            "recovered_dirty_sets": int(after.get("small_recovered_dirty_sets", 0)),
            "sets": int(after.get("small_sets", 0)),
            "loadavg": open("/proc/loadavg").read().split()[0],
        }
        print("trial " + json.dumps(out), flush=True)
        return out
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
        if os.path.exists(path):
            os.remove(path)


if __name__ == "__main__":
    for i in range(TRIALS):
        trial(i)
