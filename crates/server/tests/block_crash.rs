//! Crash test: a verifying writer logs acknowledged writes and FLUSHes while the server is
//! killed with SIGKILL at random moments (24 trials); after each restart every block
//! acknowledged before the last acknowledged FLUSH must read back as written or newer, and
//! every block must hold a well-formed version that was really written. At the end
//! `ctl flush --wait` must leave the backing file equal to what the device reads.
mod block_common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use block_common::{scratch, BlockServer, Rng};
use bytes::Bytes;
use flashtier_backend::BlockBackend;

const BS: usize = 4096;
const BLOCKS: u64 = 2048; // 8 MiB device
const TRIALS: usize = 24;

/// Block content for (lba, gen): header then a pattern derived from both.
fn content(lba: u64, gen: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(BS);
    v.extend_from_slice(&lba.to_le_bytes());
    v.extend_from_slice(&gen.to_le_bytes());
    let mut r = Rng(lba.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ gen ^ 1);
    v.extend_from_slice(&r.bytes(BS - 16));
    v
}

/// Parse a block read back: `Some(gen)` (0 = never written) or `None` if malformed.
fn parse(lba: u64, b: &[u8]) -> Option<u64> {
    if b.iter().all(|x| *x == 0) {
        return Some(0);
    }
    let l = u64::from_le_bytes(b[0..8].try_into().ok()?);
    let g = u64::from_le_bytes(b[8..16].try_into().ok()?);
    (l == lba && b == content(lba, g).as_slice()).then_some(g)
}

#[derive(Default)]
struct Log {
    /// Highest gen acknowledged per block.
    acked: HashMap<u64, u64>,
    /// Highest gen covered by an acknowledged FLUSH (or FUA) per block.
    durable: HashMap<u64, u64>,
    /// Every gen ever sent per block (acknowledged or not).
    sent: HashMap<u64, Vec<u64>>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_never_loses_flushed_writes() {
    let dir = scratch("crash");
    let backing = dir.join("backing.img");
    std::fs::File::create(&backing)
        .and_then(|f| f.set_len(BLOCKS * BS as u64))
        .expect("backing");
    let backing_s = backing.to_str().expect("utf8").to_string();
    let cache = format!("{}:4M", dir.join("cache.img").display());
    let flags = ["--seq-threshold-kb", "0", "--flush-period", "1"];
    let log = Arc::new(Mutex::new(Log::default()));
    let mut rng = Rng(0xc0ffee);
    let mut gen = 0u64;
    let started = Instant::now();
    let mut recovered_total = 0;
    for trial in 0..TRIALS {
        let mut server = BlockServer::start(&dir, &backing_s, &cache, &flags);
        let client = Arc::new(server.client().await);
        // Verify what survived the previous crash.
        verify(&client, &log).await;
        let stats = server.ctl(&["stats"]);
        recovered_total += stats
            .lines()
            .find_map(|l| l.strip_prefix("recovered_dirty_blocks="))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        // Write with up to 8 requests in flight, a FLUSH every ~16 writes, some FUA.
        let run_for = Duration::from_millis(80 + rng.below(300));
        let deadline = Instant::now() + run_for;
        let mut tasks = tokio::task::JoinSet::new();
        let mut busy: std::collections::HashSet<u64> = Default::default();
        let mut n = 0u64;
        while Instant::now() < deadline {
            while tasks.len() >= 8 {
                if let Some(Ok(lba)) = tasks.join_next().await {
                    busy.remove(&lba);
                }
            }
            n += 1;
            if n.is_multiple_of(16) {
                let c = Arc::clone(&client);
                let l = Arc::clone(&log);
                let snapshot = log.lock().expect("log").acked.clone();
                tasks.spawn(async move {
                    if c.flush().await.is_ok() {
                        let mut g = l.lock().expect("log");
                        for (k, v) in snapshot {
                            let d = g.durable.entry(k).or_insert(0);
                            *d = (*d).max(v);
                        }
                    }
                    u64::MAX
                });
                continue;
            }
            // Hot set of 256 blocks plus the rest: both overwrite and eviction paths.
            let lba = if rng.below(2) == 0 {
                rng.below(256)
            } else {
                rng.below(BLOCKS)
            };
            if busy.contains(&lba) {
                continue;
            }
            busy.insert(lba);
            gen += 1;
            let g = gen;
            let fua = rng.below(10) == 0;
            log.lock()
                .expect("log")
                .sent
                .entry(lba)
                .or_default()
                .push(g);
            let c = Arc::clone(&client);
            let l = Arc::clone(&log);
            tasks.spawn(async move {
                let data = Bytes::from(content(lba, g));
                if c.write(lba * BS as u64, data, fua).await.is_ok() {
                    let mut lg = l.lock().expect("log");
                    let a = lg.acked.entry(lba).or_insert(0);
                    *a = (*a).max(g);
                    if fua {
                        let d = lg.durable.entry(lba).or_insert(0);
                        *d = (*d).max(g);
                    }
                }
                lba
            });
        }
        // Crash with requests in flight.
        server.kill9();
        while tasks.join_next().await.is_some() {}
        drop(client);
        let _ = trial;
    }
    // Final: restart, verify, flush to the backing, compare the file with the device.
    let server = BlockServer::start(&dir, &backing_s, &cache, &flags);
    let client = server.client().await;
    let image = verify(&client, &log).await;
    let out = server.ctl(&["flush", "--wait"]);
    assert!(out.contains("flush done"), "{out}");
    let on_disk = std::fs::read(&backing).expect("backing");
    assert!(
        on_disk == image,
        "backing differs from the device after flush"
    );
    assert!(recovered_total > 0, "no trial recovered dirty blocks");
    eprintln!(
        "{TRIALS} kill -9 trials, {gen} writes, {recovered_total} dirty blocks recovered, {:?}",
        started.elapsed()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Read the whole device; check every block against the log; returns the image.
async fn verify(client: &flashtier_nbd::NbdClientBackend, log: &Mutex<Log>) -> Vec<u8> {
    let mut image = Vec::with_capacity(BLOCKS as usize * BS);
    let mut off = 0u64;
    while off < BLOCKS * BS as u64 {
        let b = client.read(off, 1 << 20).await.expect("read");
        image.extend_from_slice(&b);
        off += 1 << 20;
    }
    let mut lg = log.lock().expect("log");
    for lba in 0..BLOCKS {
        let b = &image[lba as usize * BS..(lba as usize + 1) * BS];
        let g =
            parse(lba, b).unwrap_or_else(|| panic!("block {lba} is malformed (torn or foreign)"));
        let durable = lg.durable.get(&lba).copied().unwrap_or(0);
        assert!(
            g >= durable,
            "block {lba}: read gen {g}, but gen {durable} was acknowledged before a FLUSH"
        );
        if g != 0 {
            assert!(
                lg.sent.get(&lba).is_some_and(|s| s.contains(&g)),
                "block {lba}: gen {g} was never written there"
            );
        }
        // What the device holds now is the baseline: it was read, so it must stay.
        lg.acked.insert(lba, g);
        lg.durable.insert(lba, g);
    }
    image
}
