#!/usr/bin/env python3
"""Which keys a server holds, weighted by their zipf popularity (steady.sh, PRESENCE=1).

GETs every key of the benchmark's key space (prefix + decimal index, flashtier-bench's
scrambled rank -> index map) after the measured phases and reports: items held, the
popularity mass they cover (the hit ratio a zipf GET stream would see if nothing changed),
the mass an ideal cache of the same item count would cover (the top ranks), and the share
held per popularity band. A server that holds many items but a low mass keeps cold keys.

Usage: presence.py HOST:PORT KEYS THETA OUT.json [PREFIX]
"""
import json
import math
import socket
import sys


def scramble_multiplier(n):
    # crates/bench/src/keydist.rs coprime_multiplier
    if n <= 2:
        return 1
    m = max(int(n * 0.61803398875), 2)
    while math.gcd(m, n) != 1:
        m += 1
    return m


def held_keys(host, port, n, prefix, batch=100):
    s = socket.create_connection((host, port))
    f = s.makefile("rb")
    held = bytearray(n)
    for lo in range(0, n, batch):
        hi = min(n, lo + batch)
        s.sendall(b"get " + b" ".join(b"%s%d" % (prefix, i) for i in range(lo, hi)) + b"\r\n")
        plen = len(prefix)
        while True:
            line = f.readline()
            if line == b"END\r\n":
                break
            if not line.startswith(b"VALUE "):
                raise SystemExit(f"presence: unexpected reply {line[:80]!r}")
            _, key, _flags, nbytes = line.split()[:4]
            f.read(int(nbytes) + 2)
            held[int(key[plen:])] = 1
    s.close()
    return held


def main():
    addr, n, theta, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    prefix = (sys.argv[5] if len(sys.argv) > 5 else "key:").encode()
    host, port = addr.rsplit(":", 1)
    held = held_keys(host, int(port), n, prefix)
    m = scramble_multiplier(n)
    w = [(r + 1) ** -theta for r in range(n)]
    total = sum(w)
    bands = [0, 1000, 10000, 30000, 100000, 200000, 300000, n]
    bands = sorted(set(b for b in bands if b <= n))
    band_held = [0] * (len(bands) - 1)
    mass = 0.0
    count = 0
    b = 0
    for r in range(n):
        while r >= bands[b + 1]:
            b += 1
        if held[(r * m) % n]:
            mass += w[r]
            count += 1
            band_held[b] += 1
    ideal = sum(w[:count]) / total
    res = {
        "keys": n,
        "theta": theta,
        "held": count,
        "held_mass": round(mass / total, 4),
        "ideal_mass_same_count": round(ideal, 4),
        "bands": [
            {"ranks": f"{bands[i]}-{bands[i + 1]}", "held": band_held[i],
             "share": round(band_held[i] / (bands[i + 1] - bands[i]), 4)}
            for i in range(len(bands) - 1)
        ],
    }
    with open(out, "w") as fh:
        json.dump(res, fh, indent=1)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
