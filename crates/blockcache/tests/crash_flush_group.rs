//! FLUSHes share cache flushes (group commit, `barrier.rs`): a FLUSH that arrives while another
//! runs waits for it and then for one flush that covers every waiter, and a FLUSH with no write
//! since the last flush returns at once. That must never acknowledge a FLUSH before the writes
//! it covers are durable. Writers rewrite blocks (each write's bytes name its block and
//! version) while flushers send FLUSHes, all at once on a multi-threaded runtime; at a random
//! moment the device image is taken as a crash would leave it (records still in RAM buffers
//! lost). After reopening on the image, every block must hold a version at least the one
//! the last FLUSH acknowledged before the image covered (a write that returned before that
//! FLUSH was sent), and never bytes no write wrote.
mod common;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::flash_dump::records_naming;
use common::{open_on, stat, Rng};
use flashtier_backend::{BlockBackend, MemoryBackend};
use flashtier_blockcache::BlockCache;
use flashtier_flash::MemoryDevice;
use parking_lot::Mutex;

const BLOCKS: u64 = 512;
const BS: u64 = 4096;
const FLASH: u64 = 16 << 20;

/// The bytes of version `v` of block `lba` (version 0: the backing's original content).
fn content(lba: u64, v: u64) -> Vec<u8> {
    let mut r = Rng((lba << 20 | v) ^ 0x9e37_79b9_7f4a_7c15);
    let mut b = r.bytes(BS as usize);
    b[..8].copy_from_slice(&lba.to_le_bytes());
    b[8..16].copy_from_slice(&v.to_le_bytes());
    b
}

/// Block `lba` as the cache on `dev` reads it; a failed read panics with the block's index
/// entry and every record naming it on the device (summaries and scans), to show the cause.
async fn read_block(
    cache: &BlockCache,
    crash: &[u8],
    dev: &MemoryDevice,
    round: u64,
    lba: u64,
) -> Bytes {
    match cache.read(lba * BS, BS as u32).await {
        Ok(got) => got,
        Err(e) => panic!(
            "round {round}: block {lba} does not read: {e}\nindex entry: {:?}\nrecovery: {:?}\n\
             records naming it on the crash image:\n{}on the device now:\n{}",
            cache.index_entry(lba),
            cache.recovery(),
            records_naming(crash, lba),
            records_naming(&dev.image(), lba)
        ),
    }
}

/// Versions per block: the newest each writer finished (returned) and the newest issued.
#[derive(Default)]
struct Model {
    returned: HashMap<u64, u64>,
    issued: HashMap<u64, u64>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_flushes_hold_after_a_crash_while_flushes_are_grouped() {
    let backing = Arc::new(MemoryBackend::new((BLOCKS * BS) as usize));
    for lba in 0..BLOCKS {
        backing
            .write(lba * BS, Bytes::from(content(lba, 0)), false)
            .await
            .expect("fill backing");
    }
    let mut dev = Arc::new(MemoryDevice::new("flash", FLASH));
    let mut rng = Rng(0x000f_1a54);
    let mut next_version = 1u64;
    let (mut grouped, mut checked) = (0u64, 0u64);
    // Across rounds: the newest version ever issued per block, and the floors FLUSHes set.
    let (mut ever, mut floors) = (HashMap::<u64, u64>::new(), HashMap::<u64, u64>::new());
    for round in 0..6u64 {
        let cache = open_on(&dev, &backing);
        let wb = cache.start();
        let model = Arc::new(Mutex::new(Model::default()));
        // Versions every acknowledged FLUSH made durable: the crash image is taken under
        // this lock, so it holds exactly the FLUSHes acknowledged before it.
        let durable = Arc::new(Mutex::new(HashMap::<u64, u64>::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        // Writers own disjoint blocks (w, w + 8, ...), so a block's versions are ordered.
        for w in 0..8u64 {
            let (cache, model, stop) = (Arc::clone(&cache), Arc::clone(&model), Arc::clone(&stop));
            let mut r = Rng(rng.next() | 1);
            let base = next_version + w * 1_000_000;
            tasks.push(tokio::spawn(async move {
                let mut v = base;
                while !stop.load(Ordering::Acquire) {
                    let lba = w + 8 * r.below(BLOCKS / 8);
                    v += 1;
                    model.lock().issued.insert(lba, v);
                    cache
                        .write(lba * BS, Bytes::from(content(lba, v)), false)
                        .await
                        .expect("write");
                    model.lock().returned.insert(lba, v);
                    if r.below(4) == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            }));
        }
        for _ in 0..4 {
            let (cache, model, durable, stop) = (
                Arc::clone(&cache),
                Arc::clone(&model),
                Arc::clone(&durable),
                Arc::clone(&stop),
            );
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Acquire) {
                    let covers = model.lock().returned.clone();
                    cache.flush().await.expect("flush");
                    let mut d = durable.lock();
                    for (lba, v) in covers {
                        let e = d.entry(lba).or_insert(0);
                        *e = (*e).max(v);
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(30 + rng.below(120))).await;
        let (image, must) = {
            let d = durable.lock();
            (dev.image(), d.clone())
        };
        stop.store(true, Ordering::Release);
        for t in tasks {
            t.await.expect("task");
        }
        for (lba, v) in model.lock().issued.iter() {
            ever.insert(*lba, *v);
        }
        for (lba, v) in must {
            let e = floors.entry(lba).or_insert(0);
            *e = (*e).max(v);
        }
        let flushes = stat(&cache, "flushes");
        let syncs = stat(&cache, "flush_cache_syncs");
        assert!(
            syncs <= flushes,
            "{syncs} cache flushes for {flushes} FLUSHes"
        );
        grouped += flushes - syncs;
        cache.interrupt();
        wb.await.expect("writeback");
        cache.stop();
        // Versions of the next round start past every version written so far.
        next_version += 8 * 1_000_000 + 1;
        let crash = image.clone();
        dev = Arc::new(MemoryDevice::from_image("flash", image));
        let cache = open_on(&dev, &backing);
        for lba in 0..BLOCKS {
            let got = read_block(&cache, &crash, &dev, round, lba).await;
            let v = u64::from_le_bytes(got[8..16].try_into().expect("8 bytes"));
            assert_eq!(
                got[..],
                content(lba, v)[..],
                "round {round}: block {lba} holds bytes no write wrote"
            );
            let floor = floors.get(&lba).copied().unwrap_or(0);
            assert!(
                v >= floor,
                "round {round}: block {lba} lost a FLUSHed write: version {v} < {floor}"
            );
            assert!(
                v <= ever.get(&lba).copied().unwrap_or(0),
                "round {round}: block {lba} holds version {v}, never written"
            );
            checked += u64::from(floor > 0);
        }
        cache.stop();
    }
    eprintln!("FLUSHes answered without their own cache flush: {grouped}; blocks checked against a FLUSH: {checked}");
    assert!(grouped > 0, "no FLUSH was grouped: the test lost its point");
    assert!(
        checked > 0,
        "no FLUSH was acknowledged before a crash image"
    );
}
