//! Warm restart: clean blocks cached before a clean shutdown are served from flash after
//! reopening; after a crash (an image of the cache device taken while running) they are kept
//! too (intents and floors prove them current), but a block written around the cache just
//! before the crash is never shadowed by its older cached copy: it reads back new.
mod common;
use std::sync::Arc;

use bytes::Bytes;
use common::{open_on, stat};
use flashtier_backend::{BlockBackend, MemoryBackend};
use flashtier_blockcache::BlockCache;
use flashtier_flash::MemoryDevice;

const SIZE: usize = 4 << 20;

/// Read the whole device in 64 KiB requests, each followed by a FLUSH, until every block
/// was admitted: an admission is best effort (skipped while the flash engine's chunk
/// writes are all in flight or reclaim has not freed space yet, which a loaded machine
/// makes likely), and re-reading a range retries only its blocks that are not cached.
async fn cache_everything(cache: &BlockCache) {
    for off in (0..SIZE).step_by(64 << 10) {
        for _ in 0..200 {
            let before = stat(cache, "uncached_reads");
            cache.read(off as u64, 64 << 10).await.expect("read");
            cache.flush().await.expect("flush");
            if stat(cache, "uncached_reads") == before {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

fn pattern(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_blocks_survive_clean_shutdown_and_crash() {
    let dev = Arc::new(MemoryDevice::new("flash", 16 << 20));
    let backing = Arc::new(MemoryBackend::new(SIZE));
    let mut model = pattern(1, SIZE);
    backing
        .write(0, Bytes::from(model.clone()), false)
        .await
        .expect("fill backing");

    // Run 1: read everything (admitted clean), dirty a few blocks, shut down cleanly.
    let cache = open_on(&dev, &backing);
    assert!(
        cache.recovery().cold_reason.is_some(),
        "first start is cold"
    );
    let wb = cache.start();
    // 64 KiB reads, each followed by a FLUSH: admissions are best effort (skipped while
    // the flash engine's chunk writes are all in flight).
    for off in (0..SIZE).step_by(64 << 10) {
        let got = cache.read(off as u64, 64 << 10).await.expect("read");
        assert!(got[..] == model[off..off + (64 << 10)]);
        cache.flush().await.expect("flush");
    }
    let dirty = pattern(2, 8 * 4096);
    cache
        .write(64 * 4096, Bytes::from(dirty.clone()), false)
        .await
        .expect("write");
    model[64 * 4096..72 * 4096].copy_from_slice(&dirty);
    cache.interrupt();
    wb.await.expect("writeback");
    let report = cache.shutdown().await;
    assert!(report.skipped.is_none(), "{report:?}");
    assert!(report.clean_saved >= 900, "{report:?}");

    // Run 2: warm. Every block read right away is a hit and correct.
    let cache = open_on(&dev, &backing);
    let rec = cache.recovery().clone();
    assert!(rec.cold_reason.is_none(), "{rec:?}");
    assert_eq!(rec.clean_kept, report.clean_saved, "{rec:?}");
    let got = cache.read(0, SIZE as u32).await.expect("read");
    assert!(got[..] == model[..], "warm cache served wrong data");
    // Every kept block and every recovered dirty block is a hit.
    assert_eq!(
        stat(&cache, "read_hits"),
        rec.clean_kept + rec.dirty_blocks,
        "{rec:?}"
    );
    assert_eq!(stat(&cache, "recovered_clean_blocks"), rec.clean_kept);

    // Write around the cache to a cached block, then "crash": the device image as it is.
    cache.set_tunable("mode", "writearound").expect("mode");
    let fresh = pattern(3, 4096);
    cache
        .write(10 * 4096, Bytes::from(fresh.clone()), false)
        .await
        .expect("write around");
    model[10 * 4096..11 * 4096].copy_from_slice(&fresh);
    let image = dev.image();
    cache.stop();

    // Run 3 on the crash image: no snapshot, yet the clean blocks are kept (every block
    // but the one written around), and the new data is read.
    let crashed = Arc::new(MemoryDevice::from_image("flash", image));
    let cache = open_on(&crashed, &backing);
    let rec = cache.recovery().clone();
    assert!(rec.cold_reason.is_some(), "{rec:?}");
    assert!(rec.floor_reason.is_none(), "{rec:?}");
    assert!(rec.clean_kept >= report.clean_saved - 1, "{rec:?}");
    assert!(rec.intents >= 1, "{rec:?}");
    let before = stat(&cache, "read_hits");
    let got = cache.read(0, SIZE as u32).await.expect("read");
    assert!(got[..] == model[..], "stale block after a crash");
    assert_eq!(
        stat(&cache, "read_hits") - before,
        rec.clean_kept + rec.dirty_blocks
    );
    cache.stop();

    // A stop without a snapshot (run 2's device after `stop`) is a crash as well: warm.
    let cache = open_on(&dev, &backing);
    assert!(cache.recovery().clean_kept > 0);
    let got = cache.read(0, SIZE as u32).await.expect("read");
    assert!(got[..] == model[..]);
    cache.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_around_a_warm_cache_stay_correct_across_clean_restarts() {
    let dev = Arc::new(MemoryDevice::new("flash", 16 << 20));
    let backing = Arc::new(MemoryBackend::new(SIZE));
    let mut model = pattern(4, SIZE);
    backing
        .write(0, Bytes::from(model.clone()), false)
        .await
        .expect("fill backing");
    let modes = ["writethrough", "writearound", "writeback"];
    for run in 0..6u64 {
        let cache = open_on(&dev, &backing);
        let wb = cache.start();
        cache
            .set_tunable("mode", modes[run as usize % 3])
            .expect("mode");
        let got = cache.read(0, SIZE as u32).await.expect("read");
        assert!(got[..] == model[..], "run {run}: wrong data after restart");
        if run > 0 {
            assert!(cache.recovery().clean_kept > 0, "run {run}: cold");
        }
        // Partial and whole-block writes in this run's mode.
        for i in 0..50u64 {
            let off = (run * 7919 + i * 104_729) % (SIZE as u64 - 9000);
            let data = pattern(run * 100 + i + 10, 1 + (i as usize * 313) % 9000);
            cache
                .write(off, Bytes::from(data.clone()), false)
                .await
                .expect("write");
            model[off as usize..off as usize + data.len()].copy_from_slice(&data);
        }
        cache.interrupt();
        wb.await.expect("writeback");
        let report = cache.shutdown().await;
        assert!(report.skipped.is_none(), "{report:?}");
    }
    let cache = open_on(&dev, &backing);
    let got = cache.read(0, SIZE as u32).await.expect("read");
    assert!(got[..] == model[..]);
    let wb = cache.start();
    cache.flush_wait().await.expect("flush");
    assert!(backing.snapshot() == model);
    cache.stop();
    wb.await.expect("writeback");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_warm_start_never_serves_stale_blocks() {
    // Each round: a warm start (the previous round ended with a clean shutdown), random
    // write-through / write-around writes over cached blocks, then a crash image taken
    // without any FLUSH, reopened warm and checked byte for byte, then shut down cleanly.
    let mut dev = Arc::new(MemoryDevice::new("flash", 16 << 20));
    let backing = Arc::new(MemoryBackend::new(SIZE));
    let mut model = pattern(9, SIZE);
    backing
        .write(0, Bytes::from(model.clone()), false)
        .await
        .expect("fill backing");
    let cache = open_on(&dev, &backing);
    cache_everything(&cache).await;
    cache.shutdown().await;
    let mut x = 77u64;
    let mut rnd = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for round in 0..4 {
        let cache = open_on(&dev, &backing);
        assert!(cache.recovery().clean_kept > 0, "round {round}: cold");
        let mode = ["writethrough", "writearound"][round % 2];
        cache.set_tunable("mode", mode).expect("mode");
        // Few writes leave their cache records in the write buffer at the crash; many
        // push them to the device.
        for i in 0..[3u64, 6, 200, 40][round] {
            let len = 1 + rnd(12000);
            let off = rnd(SIZE as u64 - len);
            if i % 4 == 3 {
                let got = cache.read(off, len as u32).await.expect("read");
                assert!(got[..] == model[off as usize..(off + len) as usize]);
                continue;
            }
            let data = pattern(round as u64 * 1000 + i + 100, len as usize);
            cache
                .write(off, Bytes::from(data.clone()), false)
                .await
                .expect("write");
            model[off as usize..off as usize + data.len()].copy_from_slice(&data);
        }
        let image = dev.image();
        cache.stop();
        dev = Arc::new(MemoryDevice::from_image("flash", image));
        let cache = open_on(&dev, &backing);
        let rec = cache.recovery().clone();
        assert!(
            rec.clean_kept > 0,
            "round {round}: cold after the crash {rec:?}"
        );
        let got = cache.read(0, SIZE as u32).await.expect("read");
        assert!(
            got[..] == model[..],
            "round {round}: stale data after a crash"
        );
        // Re-cache for the next round's warm start.
        cache_everything(&cache).await;
        let report = cache.shutdown().await;
        assert!(report.skipped.is_none(), "{report:?}");
    }
}
