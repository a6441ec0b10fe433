#!/usr/bin/env python3
"""A cache may lose; it never lies — checked from outside, with every command and kill -9.

Black-box torture for `flashtier kv` (no code of ours on the client side but this script):
several client threads, each owning its own keys, run a random mix of memcached commands —
set/add/replace, append/prepend, incr/decr, cas, touch, delete, meta ms/mg/md, and multi-gets
of up to KEYS_PER_GET keys — with value sizes that land in RAM, the small-object tier and the
flash log. Every reply is checked against a per-key model as it arrives (a GET returns the
last acknowledged value or a miss, never anything else). At a random moment the server is
killed with SIGKILL; the next start on the same files must serve, for every key, its last
acknowledged value, the value of the one command that was in flight on it, or a miss —
never an older value, never a deleted key.

Usage: kill9_torture.py BIN [--trials N] [--seed S] [--threads T] [--keys K] [--dir D]
                         [--no-small] [--ram-only] [--run-min S] [--run-max S] [--extra FLAGS]
Server: `flashtier kv -m 16 -t 2 --flash F:256MiB --small-flash S:64MiB --small-item-max 300`.
After each restart it prints how many keys acknowledged before the kill were served, by the
age of their last acknowledgement at the kill (under 1 s, 1-3 s, 3 s or more) and by size
(small: at most 300 bytes).
Exit status 0 when no lie was seen; prints what each trial served, kept and lost.
"""

import argparse
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench"))
from probe import pick_port as free_port  # noqa: E402

SIZES = [(30, 8), (120, 8), (280, 4), (700, 3), (3000, 4), (9000, 2), (70000, 1)]
KEYS_PER_GET = 2000



def value_for(key, ver, size):
    head = f"{key}:{ver}:".encode()
    fill = bytes(97 + ((ver * 7 + i) % 26) for i in range(max(0, size - len(head))))
    return (head + fill)[: max(size, len(head))]


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def line(self):
        while b"\r\n" not in self.buf:
            d = self.s.recv(1 << 16)
            if not d:
                raise ConnectionError("closed")
            self.buf += d
        i = self.buf.index(b"\r\n")
        out, self.buf = self.buf[:i], self.buf[i + 2:]
        return out

    def exact(self, n):
        while len(self.buf) < n + 2:
            d = self.s.recv(1 << 16)
            if not d:
                raise ConnectionError("closed")
            self.buf += d
        out, self.buf = self.buf[:n], self.buf[n + 2:]
        return out

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


class Lie(Exception):
    pass


class Client:
    """One thread's keys and model. model[key] = (value bytes, flags) or None (gone/unknown)."""

    def __init__(self, idx, nkeys, rng):
        self.idx = idx
        self.keys = [f"t{idx}:k{j}" for j in range(nkeys)]
        self.model = {}  # key -> (bytes, flags) acknowledged; absent = never set / gone
        self.acked_at = {}  # key -> monotonic time its model value was last acknowledged
        self.pending = {}  # key -> set of possible outcomes ((bytes, flags) or None) in flight
        self.rng = rng
        self.ver = 0
        self.ops = 0
        self.hits = 0
        self.misses = 0

    def size(self):
        total = sum(w for _, w in SIZES)
        r = self.rng.randrange(total)
        for s, w in SIZES:
            if r < w:
                return s
            r -= w
        return SIZES[0][0]

    # --- checks -----------------------------------------------------------------------
    def check(self, key, got, during):
        want = self.model.get(key)
        if got is None:
            self.misses += 1
            return
        if want is not None and got == want:
            self.hits += 1
            return
        if got in self.pending.get(key, ()):
            self.hits += 1
            return
        # memcached may keep a decremented counter's length, space-padded
        if want is not None and (got[0].rstrip(b" "), got[1]) == want:
            self.hits += 1
            return
        raise Lie(
            f"{'live' if during else 'after restart'}: {key} served "
            f"{got[0][:40]!r}… ({len(got[0])} B, flags {got[1]}); acknowledged "
            f"{'miss' if want is None else repr(want[0][:40]) + '… (%d B, flags %d)' % (len(want[0]), want[1])}"
        )

    def get_many(self, c, keys, during):
        c.send(("get " + " ".join(keys) + "\r\n").encode())
        seen = {}
        while True:
            ln = c.line()
            if ln == b"END":
                break
            parts = ln.split()
            if parts[0] != b"VALUE":
                raise Lie(f"bad reply to get: {ln!r}")
            k = parts[1].decode()
            flags, n = int(parts[2]), int(parts[3])
            seen[k] = (c.exact(n), flags)
        for k in keys:
            got = seen.pop(k, None)
            self.check(k, got, during)
            if not during:
                # after a restart, what was read is what the key holds from now on
                if got is None:
                    self.model.pop(k, None)
                else:
                    self.model[k] = got
        if seen:
            raise Lie(f"get returned keys not asked for: {list(seen)[:3]}")

    # --- one random command ----------------------------------------------------------
    def step(self, c):
        key = self.rng.choice(self.keys)
        before = self.model.get(key)
        self.one(c, key, before)
        if self.model.get(key) is not before:
            self.acked_at[key] = time.monotonic()
        # the command was answered: nothing of it is in flight any more
        self.pending.pop(key, None)

    def one(self, c, key, cur):
        r = self.rng.random()
        if 0.40 <= r < 0.50 and cur is not None and len(cur[0]) > 100000:
            r = 0.1  # grown enough by appends: set it afresh
        self.ver += 1
        self.ops += 1
        if r < 0.30:
            size, flags = self.size(), self.rng.randrange(1 << 16)
            v = value_for(key, self.ver, size)
            cmd = self.rng.choice(["set", "set", "add", "replace", "ms"])
            new = (v, flags)
            self.pending[key] = {new}
            if cmd == "ms":
                c.send(f"ms {key} {len(v)} F{flags}\r\n".encode() + v + b"\r\n")
                rep = c.line()
                ok = rep == b"HD"
                if not ok:
                    raise Lie(f"ms {key}: {rep!r}")
            else:
                c.send(f"{cmd} {key} {flags} 0 {len(v)}\r\n".encode() + v + b"\r\n")
                rep = c.line()
                if rep == b"STORED":
                    ok = True
                elif rep == b"NOT_STORED" and cmd in ("add", "replace"):
                    ok = False  # add of a key that is there, replace of one that is not
                    if cmd == "add" and cur is None:
                        raise Lie(f"add {key}: NOT_STORED, but the key was deleted or never set")
                    if cmd == "replace":
                        self.model.pop(key, None)  # it was evicted: gone from now on
                else:
                    raise Lie(f"{cmd} {key}: {rep!r}")
            if ok:
                self.model[key] = new
        elif r < 0.40:
            self.pending[key] = {None}
            if self.rng.random() < 0.5:
                c.send(f"delete {key}\r\n".encode())
                rep = c.line()
                if rep not in (b"DELETED", b"NOT_FOUND"):
                    raise Lie(f"delete {key}: {rep!r}")
            else:
                c.send(f"md {key}\r\n".encode())
                rep = c.line()
                if rep not in (b"HD", b"NF"):
                    raise Lie(f"md {key}: {rep!r}")
            self.model.pop(key, None)
        elif r < 0.50:
            suffix = f"+{self.ver}".encode()
            cmd = self.rng.choice(["append", "prepend"])
            if cur is not None:
                nv = cur[0] + suffix if cmd == "append" else suffix + cur[0]
                self.pending[key] = {(nv, cur[1])}
            c.send(f"{cmd} {key} 0 0 {len(suffix)}\r\n".encode() + suffix + b"\r\n")
            rep = c.line()
            if rep == b"STORED":
                if cur is None:
                    raise Lie(f"{cmd} {key} stored onto a key that was gone")
                self.model[key] = (nv, cur[1])
            elif rep == b"NOT_STORED":
                self.model.pop(key, None)
            else:
                raise Lie(f"{cmd} {key}: {rep!r}")
        elif r < 0.58:
            # counters: make the key numeric first when it is not
            if cur is None or not cur[0].rstrip(b" ").isdigit() or len(cur[0]) > 18:
                n = str(self.rng.randrange(1000, 10**9)).encode()
                self.pending[key] = {(n, 0)}
                c.send(f"set {key} 0 0 {len(n)}\r\n".encode() + n + b"\r\n")
                if c.line() != b"STORED":
                    raise Lie(f"set {key} (counter)")
                self.model[key] = (n, 0)
                return
            d = self.rng.randrange(1, 1000)
            cmd = self.rng.choice(["incr", "decr"])
            old = int(cur[0].rstrip(b" "))
            nvi = old + d if cmd == "incr" else max(0, old - d)
            nv = str(nvi).encode()
            self.pending[key] = {(nv, cur[1])}
            c.send(f"{cmd} {key} {d}\r\n".encode())
            rep = c.line()
            if rep == b"NOT_FOUND":
                self.model.pop(key, None)
            elif rep.isdigit():
                if int(rep) != nvi:
                    raise Lie(f"{cmd} {key} {d} on {old}: {rep!r}, want {nvi}")
                # memcached keeps the length on decr: a shorter number is space-padded in
                # the stored value in memcached; the wire value of a get is the number.
                self.model[key] = (nv, cur[1])
            else:
                raise Lie(f"{cmd} {key}: {rep!r}")
        elif r < 0.66:
            c.send(f"gets {key}\r\n".encode())
            ln = c.line()
            if ln == b"END":
                self.check(key, None, True)
                self.model.pop(key, None)
                return
            p = ln.split()
            got = (c.exact(int(p[3])), int(p[2]))
            if c.line() != b"END":
                raise Lie("gets: no END")
            self.check(key, got, True)
            self.model[key] = got  # a pending value seen is now what the key holds
            cas = int(p[4])
            v = value_for(key, self.ver, self.size())
            new = (v, 7)
            self.pending[key] = {new}
            c.send(f"cas {key} 7 0 {len(v)} {cas}\r\n".encode() + v + b"\r\n")
            rep = c.line()
            if rep == b"STORED":
                self.model[key] = new
            elif rep in (b"NOT_FOUND",):
                self.model.pop(key, None)
            elif rep == b"EXISTS":
                raise Lie(f"cas {key}: EXISTS with no other writer")
            else:
                raise Lie(f"cas {key}: {rep!r}")
        elif r < 0.70:
            c.send(f"touch {key} 100000\r\n".encode())
            rep = c.line()
            if rep == b"NOT_FOUND":
                self.model.pop(key, None)
            elif rep != b"TOUCHED":
                raise Lie(f"touch {key}: {rep!r}")
        elif r < 0.80:
            c.send(f"mg {key} v f\r\n".encode())
            ln = c.line()
            if ln == b"EN":
                self.check(key, None, True)
            elif ln.startswith(b"VA "):
                p = ln.split()
                n = int(p[1])
                flags = next(int(t[1:]) for t in p[2:] if t.startswith(b"f"))
                self.check(key, (c.exact(n), flags), True)
            else:
                raise Lie(f"mg {key}: {ln!r}")
        else:
            n = self.rng.choice([1, 1, 1, 10, 10, 100, 100, KEYS_PER_GET])
            keys = self.rng.sample(self.keys, min(n, len(self.keys)))
            self.get_many(c, keys, True)


def run_clients(clients, port, stop, errors):
    def body(cl):
        try:
            c = Conn(port)
        except OSError as e:
            errors.append(f"connect: {e}")
            return
        try:
            while not stop.is_set():
                cl.step(c)
        except Lie as e:
            errors.append(str(e))
            stop.set()
        except (ConnectionError, OSError, ValueError, IndexError, StopIteration):
            pass  # the kill: this command's outcome stays pending
        finally:
            c.close()

    ts = [threading.Thread(target=body, args=(cl,)) for cl in clients]
    for t in ts:
        t.start()
    return ts


def start(binary, port, d, extra, small=True, flash=True):
    args = [
        binary, "kv", "-l", f"127.0.0.1:{port}", "-m", "16", "-t", "2",
    ] + (["--flash", f"{d}/flash.bin:256MiB"] if flash else ["--ram-only"]) + (["--small-flash", f"{d}/small.bin:64MiB", "--small-item-max", "300"] if small else []) + extra
    log = open(f"{d}/server.log", "ab")
    p = subprocess.Popen(args, stdout=log, stderr=log)
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return p
        except OSError:
            if p.poll() is not None:
                raise SystemExit(f"server exited {p.returncode}; see {d}/server.log")
            time.sleep(0.05)
    raise SystemExit("server did not listen")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--keys", type=int, default=3000)
    ap.add_argument("--dir")
    ap.add_argument("--run-min", type=float, default=1.0)
    ap.add_argument("--run-max", type=float, default=6.0)
    ap.add_argument("--extra", default="", help="more server flags")
    ap.add_argument("--no-small", action="store_true", help="no small-object tier")
    ap.add_argument("--ram-only", action="store_true", help="no flash log (small tier only)")
    a = ap.parse_args()
    print(f"kill9_torture: seed {a.seed}, {a.threads} clients x {a.keys} keys, {a.trials} kills", flush=True)
    rng = random.Random(a.seed)
    d = a.dir or tempfile.mkdtemp(prefix="ft-torture-", dir="/var/tmp")
    os.makedirs(d, exist_ok=True)
    clients = [Client(i, a.keys, random.Random(rng.random())) for i in range(a.threads)]
    port = free_port()
    lies = 0
    try:
        for trial in range(a.trials):
            p = start(a.binary, port, d, a.extra.split(), not a.no_small, not a.ram_only)
            # after the restart: every key is what was acknowledged, in flight, or a miss
            chk = Conn(port)
            errors = []
            old = {cl.idx: {k: (cl.model[k], cl.acked_at.get(k, 0)) for k in cl.model} for cl in clients}
            before = [(cl.hits, cl.misses) for cl in clients]
            try:
                for cl in clients:
                    for i in range(0, len(cl.keys), KEYS_PER_GET):
                        cl.get_many(chk, cl.keys[i:i + KEYS_PER_GET], False)
            except Lie as e:
                errors.append(str(e))
            chk.close()
            if trial:
                ages = {}
                for cl in clients:
                    for k, (v, at) in old[cl.idx].items():
                        age = killed_at - at
                        b = "<1s" if age < 1 else "1-3s" if age < 3 else ">=3s"
                        sz = "small" if len(v[0]) <= 300 else "large"
                        e = ages.setdefault((b, sz), [0, 0])
                        e[0] += 1
                        e[1] += k in cl.model
                print("  kept by age of last ack at the kill:", ", ".join(
                    f"{b} {sz} {n1}/{n}" for (b, sz), (n, n1) in sorted(ages.items())), flush=True)
            kept = sum(cl.hits - b[0] for cl, b in zip(clients, before))
            lost = sum(cl.misses - b[1] for cl, b in zip(clients, before))
            # what a miss after the restart means from now on: the key is gone
            for cl in clients:
                cl.pending.clear()
            held = sum(len(cl.model) for cl in clients)
            stop = threading.Event()
            ops0 = sum(cl.ops for cl in clients)
            ts = run_clients(clients, port, stop, errors)
            t = rng.uniform(a.run_min, a.run_max)
            stop.wait(t)
            p.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            p.wait()
            stop.set()
            for th in ts:
                th.join()
            ops = sum(cl.ops for cl in clients) - ops0
            acked = sum(len(cl.model) for cl in clients)
            print(
                f"trial {trial}: restart served {kept} keys, missed {lost} "
                f"(model held {held}); then {ops} commands in {t:.1f} s, kill -9 with {acked} keys acknowledged",
                flush=True,
            )
            for e in errors:
                print("LIE:", e, flush=True)
                lies += 1
            if errors:
                break
        if not lies:
            p = start(a.binary, port, d, a.extra.split(), not a.no_small, not a.ram_only)
            chk = Conn(port)
            try:
                for cl in clients:
                    for i in range(0, len(cl.keys), KEYS_PER_GET):
                        cl.get_many(chk, cl.keys[i:i + KEYS_PER_GET], False)
            except Lie as e:
                print("LIE:", e)
                lies += 1
            chk.close()
            p.send_signal(signal.SIGKILL)
            p.wait()
    finally:
        if not a.dir and not lies:
            shutil.rmtree(d, ignore_errors=True)
    print("lies:", lies, "" if not lies else f"(files kept in {d})")
    return 1 if lies else 0


if __name__ == "__main__":
    sys.exit(main())
