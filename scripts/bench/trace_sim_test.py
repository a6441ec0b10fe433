#!/usr/bin/env python3
"""Checks of trace_sim.py's policies on streams with known answers (python3 -m unittest)."""
import os
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_sim as ts  # noqa: E402


def hits(policy, cap, stream):
    """Read hits (write hits are not counted, as in the simulator)."""
    return sum(h for h, (_, k) in zip(ts.POLICIES[policy](cap, iter(stream)), stream)
               if k == ts.READ)


class Policies(unittest.TestCase):
    def test_loop_one_larger_than_the_cache(self):
        # 5 blocks cycled 20 times through 4 slots: LRU and FIFO always miss; OPT keeps 3 of
        # them and misses about once per 4 after the first round.
        s = [(b, ts.READ) for _ in range(20) for b in range(5)]
        self.assertEqual(hits("LRU", 4, s), 0)
        self.assertEqual(hits("FIFO", 4, s), 0)
        h = hits("OPT", 4, s)
        self.assertGreaterEqual(h, 70)
        self.assertLessEqual(h, 95)

    def test_everything_fits(self):
        s = [(b, ts.READ) for _ in range(3) for b in range(10)]
        for p in ts.POLICIES:
            # LRU-2ND admits on the second miss: the first two rounds miss.
            self.assertEqual(hits(p, 10, s), 10 if p == "LRU-2ND" else 20, p)

    def test_opt_bounds_the_others(self):
        import random
        rnd = random.Random(7)
        s = [(int(rnd.paretovariate(1.2)) % 500, ts.READ if rnd.random() < 0.8 else ts.WRITE)
             for _ in range(20000)]
        o = hits("OPT", 50, s)
        for p in ("LRU", "FIFO", "S3-FIFO", "ARC", "LIRS"):
            self.assertLessEqual(hits(p, 50, s), o, p)

    def test_scan_resistance(self):
        # A hot set of 40 blocks read twice, then over and over interleaved with a scan of
        # 10,000 blocks read once: LRU loses the hot set to the scan, ARC and LIRS keep it.
        s = [(b, ts.READ) for _ in range(2) for b in range(40)]
        for i in range(10000):
            s.append((100000 + i, ts.READ))
            s.append((i % 40, ts.READ))
        lru, arc, lirs = (hits(p, 50, s) for p in ("LRU", "ARC", "LIRS"))
        self.assertLess(lru, 1000)
        self.assertGreater(arc, 9000)
        self.assertGreater(lirs, 9000)

    def test_lirs_keeps_most_of_a_loop_larger_than_the_cache(self):
        # 120 blocks cycled through 100 slots: LRU always misses; LIRS holds its LIR set.
        s = [(b, ts.READ) for _ in range(30) for b in range(120)]
        self.assertEqual(hits("LRU", 100, s), 0)
        self.assertGreater(hits("LIRS", 100, s), len(s) * 0.7)

    def test_a_write_makes_the_old_copy_worthless_to_opt(self):
        # Block 1 is read, rewritten, read: its first copy is never worth a slot; one slot
        # serves either 2's reread or 1's read after its write, two slots serve both.
        s = [(1, ts.READ), (2, ts.READ), (1, ts.WRITE), (2, ts.READ), (1, ts.READ)]
        self.assertEqual(hits("OPT", 1, s), 1)
        self.assertEqual(hits("OPT", 2, s), 2)
        self.assertEqual(hits("OPT", 1, [(1, ts.READ), (1, ts.WRITE), (1, ts.READ)]), 1)


class TraceFile(unittest.TestCase):
    def test_reads_the_binary_format(self):
        with tempfile.NamedTemporaryFile(suffix=".bin", delete=False) as f:
            f.write(b"FTTRACE1" + struct.pack("<Q", 10**18))
            f.write(struct.pack("<QQIB3x", 5, 8192, 8192, 0))  # read blocks 2, 3
            f.write(struct.pack("<QQIB3x", 6, 0, 0, 4))  # flush: ignored
            f.write(struct.pack("<QQIB3x", 7, 4095, 2, 1))  # write blocks 0, 1
        try:
            r = ts.load_trace(f.name, 4096)
        finally:
            os.unlink(f.name)
        self.assertEqual([x[1:] for x in r], [(ts.READ, 2, 3), (ts.WRITE, 0, 1)])
        blocks, kinds, _ = ts.expand(r, [])
        self.assertEqual(blocks, [2, 3, 0, 1])


if __name__ == "__main__":
    unittest.main()
