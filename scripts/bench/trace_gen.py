#!/usr/bin/env python3
"""Write synthetic block traces in flashtier's trace format (FTTRACE1, as `flashtier block
--trace` writes them) for the replay harness (block-replay.sh) and trace_sim.py.

Shapes (BLOCKS = the working set in 4 KiB blocks):
  oltp       zipf(THETA) reads and writes (WRITE_PCT % writes) over BLOCKS blocks, hot blocks
             scattered over the device (a permutation), one block a request; with
             --shift-every N the permutation is drawn again every N requests (the hot set
             moves: a policy must forget, not only count)
  oltp-scan  the same OLTP stream with a concurrent sequential full scan of a separate
             table of SCAN blocks, one scan request (32 blocks) every SCAN_EVERY OLTP ones
  loop       reads cycling over BLOCKS blocks in order, 8 blocks a request (a loop larger
             than a cache smaller than BLOCKS)

Usage: trace_gen.py SHAPE OUT [--blocks N] [--requests N] [--theta 0.9] [--write-pct 0]
                    [--scan N] [--scan-every 4] [--shift-every 0] [--seed 1]
stdlib only.
"""
import argparse
import bisect
import random
import struct

BS = 4096


def zipf_cdf(n, theta):
    w = [1.0 / (i + 1) ** theta for i in range(n)]
    total = sum(w)
    acc, cdf = 0.0, []
    for x in w:
        acc += x / total
        cdf.append(acc)
    return cdf


def oltp(a, rng):
    cdf = zipf_cdf(a.blocks, a.theta)
    perm = list(range(a.blocks))
    rng.shuffle(perm)
    n = 0
    while True:
        n += 1
        if a.shift_every and n % a.shift_every == 0:
            rng.shuffle(perm)
        rank = min(bisect.bisect_left(cdf, rng.random()), a.blocks - 1)
        op = 1 if rng.random() * 100 < a.write_pct else 0
        yield perm[rank], 1, op


def oltp_scan(a, rng):
    base = a.blocks  # the scanned table lies past the OLTP blocks
    pos, n = 0, 0
    for req in oltp(a, rng):
        yield req
        n += 1
        if n % a.scan_every == 0:
            yield base + pos, 32, 0
            pos = (pos + 32) % a.scan


def loop(a, rng):
    pos = 0
    while True:
        yield pos, 8, 0
        pos = (pos + 8) % a.blocks


SHAPES = {"oltp": oltp, "oltp-scan": oltp_scan, "loop": loop}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("out")
    ap.add_argument("--blocks", type=int, default=20000)
    ap.add_argument("--requests", type=int, default=200000)
    ap.add_argument("--theta", type=float, default=0.9)
    ap.add_argument("--write-pct", type=float, default=0.0)
    ap.add_argument("--scan", type=int, default=40000)
    ap.add_argument("--scan-every", type=int, default=4)
    ap.add_argument("--shift-every", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    with open(a.out, "wb") as f:
        f.write(b"FTTRACE1" + struct.pack("<Q", 0))
        for i, (blk, n, op) in zip(range(a.requests), SHAPES[a.shape](a, rng)):
            f.write(struct.pack("<QQIB3x", i * 1000, blk * BS, n * BS, op))


if __name__ == "__main__":
    main()
