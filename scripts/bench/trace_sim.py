#!/usr/bin/env python3
"""Replay a `flashtier block --trace` file against simulated caches of a given capacity in
blocks and report the read hit ratio (block level, as flashtier's read_hits/reads) of LRU,
FIFO, S3-FIFO, ARC, LIRS, Belady's OPT (offline optimal with bypass: the ceiling of any cache of that
size), INF (unbounded: only first touches miss), and per phase TOP-C (the cap blocks read
most in the phase: a perfect-knowledge static LFU, held from the phase's start or, "cold",
missing once each), with writes allocating (a write-back cache caches every written block)
and with the reads alone (writes dropped from the stream).
Per phase when a phases file (mysql.sh TRACE=1: <config>-phases.txt) is given; the cache
stays warm across phases, as the real one.

Usage: trace_sim.py TRACE [--phases FILE] [--samples FILE] [--capacity N[,N..]]
                    [--stats FILE] [--block-size 4096] [--json OUT]
--stats: take capacity_blocks from a flashtier stats file; --samples: flashtier's own read
hit ratio per phase from mysql.sh's sampler (cumulative counters every few seconds). A TRACE
ending in .xz is decompressed.
stdlib only.
"""
import argparse
import bisect
import collections
import heapq
import json
import lzma
import struct
import sys

READ, WRITE = 0, 1
OPS = {0: READ, 1: WRITE, 3: WRITE}  # read, write, write zeroes; trim/flush/cache ignored


def load_trace(path, bs):
    with (lzma.open if path.endswith(".xz") else open)(path, "rb") as f:
        data = f.read()
    if data[:8] != b"FTTRACE1":
        sys.exit(f"{path}: not a flashtier trace (magic {data[:8]!r})")
    (epoch_ns,) = struct.unpack_from("<Q", data, 8)
    body = data[16:]
    body = body[: len(body) - len(body) % 24]
    reqs = []  # (abs time s, kind, first block, last block)
    for t, off, ln, op in struct.iter_unpack("<QQIB3x", body):
        kind = OPS.get(op)
        if kind is None or ln == 0:
            continue
        reqs.append(((epoch_ns + t) / 1e9, kind, off // bs, (off + ln - 1) // bs))
    return reqs


def load_phases(path):
    out = []
    for line in open(path):
        t, name = line.split()
        out.append((float(t), name))
    return out


def expand(reqs, phases):
    """Block accesses: parallel lists of block, kind, phase index."""
    starts = [t for t, _ in phases]
    blocks, kinds, ph = [], [], []
    for t, kind, a, b in reqs:
        p = max(0, bisect.bisect_right(starts, t) - 1) if phases else 0
        for blk in range(a, b + 1):
            blocks.append(blk)
            kinds.append(kind)
            ph.append(p)
    return blocks, kinds, ph


def lru(cap, stream):
    c = collections.OrderedDict()
    for blk, kind in stream:
        hit = blk in c
        if hit:
            c.move_to_end(blk)
        else:
            c[blk] = None
            if len(c) > cap:
                c.popitem(last=False)
        yield hit


def fifo(cap, stream):
    c = collections.OrderedDict()
    for blk, kind in stream:
        hit = blk in c
        if not hit:
            c[blk] = None
            if len(c) > cap:
                c.popitem(last=False)
        yield hit


def s3fifo(cap, stream):
    """S3-FIFO (Yang et al., SOSP'23): a small FIFO (10 %), a main FIFO with reinsertion of
    blocks hit while in it, a ghost FIFO (main's size) of blocks evicted from small; when
    the cache is full, small is evicted from while it holds more than its share."""
    small_cap = max(1, cap // 10)
    small, main = collections.OrderedDict(), collections.OrderedDict()
    ghost = collections.OrderedDict()
    freq = {}

    def evict_one():
        if len(small) > small_cap or not main:
            b, _ = small.popitem(last=False)
            if freq.get(b, 0) > 0:
                freq[b] = 0
                main[b] = None
            else:
                freq.pop(b, None)
                ghost[b] = None
                if len(ghost) > cap - small_cap:
                    ghost.popitem(last=False)
        else:
            b, _ = main.popitem(last=False)
            if freq.get(b, 0) > 0:
                freq[b] -= 1
                main[b] = None
            else:
                freq.pop(b, None)

    for blk, kind in stream:
        if blk in small or blk in main:
            freq[blk] = min(3, freq.get(blk, 0) + 1)
            yield True
            continue
        freq[blk] = 0
        if blk in ghost:
            del ghost[blk]
            main[blk] = None
        else:
            small[blk] = None
        while len(small) + len(main) > cap:
            evict_one()
        yield False


def arc(cap, stream):
    """ARC (Megiddo and Modha, FAST'03): T1 (seen once recently) and T2 (seen at least
    twice) share `cap` slots, ghosts B1 and B2 remember what each evicted, and a target p
    for T1 moves toward whichever ghost list is hit."""
    t1, t2 = collections.OrderedDict(), collections.OrderedDict()
    b1, b2 = collections.OrderedDict(), collections.OrderedDict()
    p = 0

    def replace(in_b2):
        if t1 and (len(t1) > p or (in_b2 and len(t1) == p) or not t2):
            k, _ = t1.popitem(last=False)
            b1[k] = None
        elif t2:
            k, _ = t2.popitem(last=False)
            b2[k] = None

    for blk, kind in stream:
        if blk in t1:
            del t1[blk]
            t2[blk] = None
            yield True
            continue
        if blk in t2:
            t2.move_to_end(blk)
            yield True
            continue
        if blk in b1:
            p = min(cap, p + max(len(b2) // len(b1), 1))
            replace(False)
            del b1[blk]
            t2[blk] = None
            yield False
            continue
        if blk in b2:
            p = max(0, p - max(len(b1) // len(b2), 1))
            replace(True)
            del b2[blk]
            t2[blk] = None
            yield False
            continue
        l1 = len(t1) + len(b1)
        total = l1 + len(t2) + len(b2)
        if l1 >= cap:
            if len(t1) < cap:
                b1.popitem(last=False)
                replace(False)
            else:
                t1.popitem(last=False)
        elif total >= cap:
            if total >= 2 * cap:
                b2.popitem(last=False)
            replace(False)
        t1[blk] = None
        yield False


def lirs(cap, stream):
    """LIRS (Jiang and Zhang, SIGMETRICS'02): blocks with a low inter-reference recency
    (LIR, 99 % of the slots) stay; the other 1 % (resident HIR, queue Q) turn over; the
    recency stack S also keeps non-resident HIR blocks, so one re-referenced soon enough
    becomes LIR."""
    hir_cap = max(1, cap // 100)
    lir_cap = cap - hir_cap
    s = collections.OrderedDict()  # recency stack: first = bottom, last = top
    q = collections.OrderedDict()  # resident HIR: first = next victim
    lir = set()

    def prune():
        while s:
            b = next(iter(s))
            if b in lir:
                return
            del s[b]

    def promote(blk):
        """`blk` (in S, at its top) becomes LIR; the bottom LIR block becomes resident HIR."""
        lir.add(blk)
        b = next(iter(s))
        del s[b]
        lir.discard(b)
        q[b] = None
        prune()

    for blk, kind in stream:
        if blk in lir:
            bottom = next(iter(s))
            s.move_to_end(blk)
            if bottom == blk:
                prune()
            yield True
            continue
        if blk in q:
            if blk in s:
                s.move_to_end(blk)
                del q[blk]
                promote(blk)
            else:
                s[blk] = None
                q.move_to_end(blk)
            yield True
            continue
        if len(lir) < lir_cap:
            lir.add(blk)
            s[blk] = None
            s.move_to_end(blk)
            yield False
            continue
        if len(q) >= hir_cap:
            q.popitem(last=False)  # stays in S as a non-resident HIR block
        if blk in s:
            s.move_to_end(blk)
            promote(blk)
        else:
            s[blk] = None
            q[blk] = None
        yield False


def opt(cap, stream):
    """Belady with bypass: keep the blocks whose next read comes soonest; a block whose next
    access is a write (or that is never accessed again) is worthless. Optimal read hits."""
    stream = list(stream)
    n = len(stream)
    inf = n + 1
    nxt = [inf] * n
    last = {}
    for i in range(n - 1, -1, -1):
        blk, kind = stream[i]
        j = last.get(blk)
        if j is not None and stream[j][1] == READ:
            nxt[i] = j
        last[blk] = i
    cache = {}
    heap = []
    for i, (blk, kind) in enumerate(stream):
        hit = blk in cache
        yield hit
        nu = nxt[i]
        if nu == inf:
            cache.pop(blk, None)  # never read again before a rewrite: drop (bypass)
            continue
        cache[blk] = nu
        heapq.heappush(heap, (-nu, blk))
        while len(cache) > cap:
            nnu, b = heapq.heappop(heap)
            if cache.get(b) == -nnu:
                del cache[b]


def lru_second(cap, stream):
    """LRU that admits a read miss only on its second miss within a ghost list of the last
    `cap` missed blocks (2Q's A1out / a doorkeeper); writes are always admitted."""
    c = collections.OrderedDict()
    ghost = collections.OrderedDict()
    for blk, kind in stream:
        hit = blk in c
        if hit:
            c.move_to_end(blk)
        elif kind == WRITE or blk in ghost:
            ghost.pop(blk, None)
            c[blk] = None
            if len(c) > cap:
                c.popitem(last=False)
        else:
            ghost[blk] = None
            if len(ghost) > cap:
                ghost.popitem(last=False)
        yield hit


def infinite(cap, stream):
    """No eviction: only first accesses miss (the bound of any cache on this trace)."""
    seen = set()
    for blk, kind in stream:
        yield blk in seen
        seen.add(blk)


POLICIES = {"LRU": lru, "FIFO": fifo, "S3-FIFO": s3fifo, "ARC": arc, "LIRS": lirs,
            "LRU-2ND": lru_second, "OPT": opt, "INF": infinite}


def simulate(policy, cap, blocks, kinds, ph, nphases, writes_allocate):
    idx = [i for i in range(len(blocks)) if writes_allocate or kinds[i] == READ]
    stream = ((blocks[i], kinds[i]) for i in idx)
    hits = [0] * nphases
    reads = [0] * nphases
    for i, hit in zip(idx, POLICIES[policy](cap, stream)):
        if kinds[i] == READ:
            reads[ph[i]] += 1
            hits[ph[i]] += hit
    return hits, reads


def flashtier_phases(samples, phases):
    """flashtier's read hits and reads per phase from the sampler's cumulative counters,
    taken at the last sample before each phase start (and the last sample overall)."""
    rows = []
    for line in open(samples):
        kv = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "reads" in kv and "read_hits" in kv:
            rows.append((float(kv["t"]), int(kv["reads"]), int(kv["read_hits"])))
    if not rows:
        return None
    ts = [r[0] for r in rows]

    def at(t):
        i = bisect.bisect_right(ts, t) - 1
        return rows[i] if i >= 0 else (t, 0, 0)

    out = []
    for k, (t, _) in enumerate(phases):
        end = at(phases[k + 1][0]) if k + 1 < len(phases) else rows[-1]
        beg = at(t)
        out.append((end[2] - beg[2], end[1] - beg[1]))
    return out


def pct(h, r):
    return round(100.0 * h / r, 2) if r else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--phases")
    ap.add_argument("--samples")
    ap.add_argument("--stats")
    ap.add_argument("--capacity", help="blocks, comma-separated (default: --stats capacity_blocks)")
    ap.add_argument("--block-size", type=int, default=4096)
    ap.add_argument("--policies", default="LRU,FIFO,S3-FIFO,ARC,LIRS,LRU-2ND,OPT,INF",
                    help="of LRU, FIFO, S3-FIFO, ARC, LIRS, LRU-2ND (admit on a second miss), "
                    "OPT, INF (an unbounded cache)")
    ap.add_argument("--modes", default="wr-alloc,reads-only",
                    help="wr-alloc (writes allocate), reads-only (writes dropped), or both")
    ap.add_argument("--no-top-c", action="store_true", help="skip the TOP-C oracle")
    ap.add_argument("--json")
    a = ap.parse_args()
    caps = []
    if a.capacity:
        caps = [int(x) for x in a.capacity.split(",")]
    elif a.stats:
        for line in open(a.stats):
            if line.startswith("capacity_blocks="):
                caps = [int(line.split("=", 1)[1])]
    if not caps:
        sys.exit("give --capacity or --stats (with capacity_blocks)")
    phases = load_phases(a.phases) if a.phases else []
    names = [p for _, p in phases] or ["all"]
    reqs = load_trace(a.trace, a.block_size)
    blocks, kinds, ph = expand(reqs, phases)
    nph = len(names)
    reads = [0] * nph
    writes = [0] * nph
    uniq_r = [set() for _ in range(nph)]
    for b, k, p in zip(blocks, kinds, ph):
        if k == READ:
            reads[p] += 1
            uniq_r[p].add(b)
        else:
            writes[p] += 1
    all_r = {b for b, k in zip(blocks, kinds) if k == READ}
    all_w = {b for b, k in zip(blocks, kinds) if k == WRITE}
    res = {
        "trace": a.trace,
        "requests": len(reqs),
        "block_size": a.block_size,
        "phases": names,
        "block_reads": reads,
        "block_writes": writes,
        "distinct_blocks_read": [len(s) for s in uniq_r],
        "distinct_blocks_read_total": len(all_r),
        "distinct_blocks_written_total": len(all_w),
        "distinct_blocks_total": len(all_r | all_w),
        "sim": [],
    }
    if a.samples and phases:
        ft = flashtier_phases(a.samples, phases)
        if ft:
            res["flashtier"] = {
                "read_hits": [h for h, _ in ft],
                "reads": [r for _, r in ft],
                "read_hit_pct": [pct(h, r) for h, r in ft],
            }
    print(f"{len(reqs)} requests; per phase block reads {reads}, writes {writes}; "
          f"distinct blocks read {len(all_r)}, written {len(all_w)}, either {len(all_r | all_w)}")
    print("phases: " + " ".join(names))
    if "flashtier" in res:
        print(f"{'flashtier (measured)':32} " + " ".join(
            f"{x if x is not None else '-':>8}" for x in res["flashtier"]["read_hit_pct"]))
    for cap in caps:
        for wa in [m == "wr-alloc" for m in a.modes.split(",")]:
            for pol in a.policies.split(","):
                h, r = simulate(pol, cap, blocks, kinds, ph, nph, wa)
                row = {"policy": pol, "capacity_blocks": cap, "writes_allocate": wa,
                       "read_hits": h, "reads": r, "read_hit_pct": [pct(x, y) for x, y in zip(h, r)]}
                res["sim"].append(row)
                label = f"{pol} cap={cap} {'wr-alloc' if wa else 'reads-only'}"
                print(f"{label:32} " + " ".join(
                    f"{x if x is not None else '-':>8}" for x in row["read_hit_pct"]), flush=True)
    # Static oracle per phase: the `cap` blocks read most often in the phase, held from the
    # phase's start (a perfect-knowledge LFU; IRM's best online policy converges to it).
    res["top_c"] = []
    for cap in [] if a.no_top_c else caps:
        held, cold = [], []
        for p in range(nph):
            cnt = collections.Counter(b for b, k, q in zip(blocks, kinds, ph) if k == READ and q == p)
            top = cnt.most_common(cap)
            held.append(pct(sum(c for _, c in top), reads[p]))
            cold.append(pct(sum(c - 1 for _, c in top), reads[p]))
        res["top_c"].append({"capacity_blocks": cap, "held_pct": held, "cold_pct": cold})
        for label, row in ((f"TOP-C held cap={cap}", held), (f"TOP-C cold cap={cap}", cold)):
            print(f"{label:32} " + " ".join(f"{x if x is not None else '-':>8}" for x in row))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
