#!/usr/bin/python3
"""Random 4 KiB writers for the block power-cut test (libnbd, a real NBD client).

writer.py URI BLOCKS WRITERS MODE GEN_BASE LOGDIR SEED
Writer w owns the blocks with lba % WRITERS == w and has one request in flight, so each
block's order is its writer's. MODE fua: every write has FUA. MODE flush: plain writes and a
FLUSH every 8 writes. Log lines (log-w.txt, written before the request is sent / after
it is acknowledged): "S lba gen", "A lba gen", "FS" (flush sent), "FA" (flush acknowledged).
Exits when the server goes away.
"""
import random
import sys
import threading

import nbd

BS = 4096


def content(lba, gen):
    head = lba.to_bytes(8, "little") + gen.to_bytes(8, "little")
    return head + bytes([(lba * 31 + gen * 7) & 0xFF]) * (BS - 16)


def writer(uri, blocks, writers, w, mode, gen, logdir, seed):
    rnd = random.Random(seed * 1000 + w)
    own = list(range(w, blocks, writers))
    log = open(f"{logdir}/log-{w}.txt", "a", buffering=1)
    try:
        h = nbd.NBD()
        h.connect_uri(uri)
        n = 0
        while True:
            n += 1
            if mode == "flush" and n % 8 == 0:
                log.write("FS\n")
                h.flush()
                log.write("FA\n")
                continue
            lba = rnd.choice(own[: max(1, len(own) // 4)] if rnd.random() < 0.5 else own)
            gen += 1
            log.write(f"S {lba} {gen}\n")
            h.pwrite(content(lba, gen), lba * BS, nbd.CMD_FLAG_FUA if mode == "fua" else 0)
            log.write(f"A {lba} {gen}\n")
    except Exception:
        pass
    finally:
        log.close()


def main():
    uri, blocks, writers, mode, gen_base, logdir, seed = sys.argv[1:8]
    blocks, writers, gen_base, seed = int(blocks), int(writers), int(gen_base), int(seed)
    ts = [
        threading.Thread(
            target=writer,
            args=(uri, blocks, writers, w, mode, gen_base, logdir, seed),
        )
        for w in range(writers)
    ]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


if __name__ == "__main__":
    main()
