//! Capacity of the block face: `capacity_blocks` is most of the cache device (the rule and
//! where the rest goes: docs/block-cache.md "Capacity"), and a full cache stays full while
//! writes run well past its capacity.
//! For measurements: CAPACITY_STATS=1 prints every stat of the write test, CAPACITY_POLICY
//! sets flash.reclaim_policy.
mod common;
use std::sync::Arc;

use bytes::Bytes;
use common::{stat, Rng};
use flashtier_backend::{BlockBackend, MemoryBackend};
use flashtier_blockcache::{BlockCache, BlockCacheConfig};
use flashtier_flash::{Device, MemoryDevice};

const BS: u64 = 4096;

fn open(flash: u64, backing: u64, tunables: &[(&str, &str)]) -> Arc<BlockCache> {
    let dev: Arc<dyn Device> = Arc::new(MemoryDevice::new("flash", flash));
    let backing: Arc<dyn BlockBackend> = Arc::new(MemoryBackend::new(backing as usize));
    let cfg = BlockCacheConfig {
        tunables: tunables
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    BlockCache::open_devices(vec![dev], backing, cfg).expect("open cache")
}

/// The share of the device's blocks `capacity_blocks` covers, per size; 95 % from 128 MiB.
/// At 32 MiB the nine segments reclaim keeps free (reserve 2, free target 3, one open per
/// stream, 4) are 4.9 % of the device on their own: 90.8 % is what is left after the
/// record format (2.1 %) and page padding.
#[test]
fn capacity_blocks_is_most_of_the_device() {
    for (mib, min_pct) in [(32u64, 90.5), (128, 95.0), (512, 96.5)] {
        let cache = open(mib << 20, 64 << 20, &[]);
        let device_blocks = (mib << 20) / BS;
        let pct = cache.capacity_blocks() as f64 * 100.0 / device_blocks as f64;
        eprintln!(
            "{mib} MiB: capacity_blocks {} of {device_blocks} device blocks ({pct:.1} %), \
             segments of {} KiB",
            cache.capacity_blocks(),
            cache.flash_info().segment_size >> 10
        );
        assert!(pct >= min_pct, "{mib} MiB: {pct:.1} % < {min_pct} %");
        cache.stop();
    }
}

/// Random 4 KiB writes over a device four times the cache, three times the capacity in
/// all, with writeback running, and fill moves that never yield to a waiting writer
/// (`reclaim_fill_floor_pct` 97): once full, the cache holds >= 95 % of `capacity_blocks`
/// throughout (reclaim moves clean blocks within `reclaim_fill_moves` instead of dropping
/// them), and never more than it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_cache_stays_full_under_writes() {
    let (cap, min_cached, per_block) = fill_under_writes("97").await;
    assert!(
        min_cached * 100 >= cap * 95,
        "cached fell to {min_cached} of {cap}"
    );
    assert!(per_block > 1.0, "{per_block}");
}

/// The same writes with a floor of 90 % (the default until 2026-11-29; 95 now): writers
/// wait for free segments all along, so fill moves yield to them while the cache holds at least 90 % of
/// `capacity_blocks`: it settles near that floor (never far under it) and reclaim copies
/// fewer clean blocks per client block than when it keeps the cache at its fill line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fill_moves_yield_to_waiting_writers_down_to_the_floor() {
    let (cap, min_cached, per_block) = fill_under_writes("90").await;
    assert!(
        min_cached * 100 >= cap * 86,
        "cached fell to {min_cached} of {cap}, far under the 90 % floor"
    );
    assert!(
        per_block < 3.0,
        "flash bytes written per client block {per_block:.2}: fill moves did not yield"
    );
}

/// Write three times the capacity at random over four times the cache; returns
/// (capacity, the fewest blocks cached in the second half, flash bytes written per client
/// byte). `CAPACITY_FILL_MOVES` (default 4) and `CAPACITY_POLICY` measure other settings.
async fn fill_under_writes(floor_pct: &str) -> (u64, u64, f64) {
    let fill = std::env::var("CAPACITY_FILL_MOVES").unwrap_or_else(|_| "4".into());
    let cache = open(
        32 << 20,
        160 << 20,
        &[
            ("flush_period_s", "1"),
            ("seq_threshold_kb", "0"),
            ("reclaim_fill_moves", &fill),
            ("reclaim_fill_floor_pct", floor_pct),
        ],
    );
    let wb = cache.start();
    if let Ok(p) = std::env::var("CAPACITY_POLICY") {
        cache
            .set_tunable("flash.reclaim_policy", &p)
            .expect("policy");
    }
    let cap = cache.capacity_blocks();
    let nblocks = cap * 4;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut min_cached = u64::MAX;
    for i in 0..cap * 3 {
        let lba = rng.below(nblocks);
        cache
            .write(lba * BS, Bytes::from(vec![i as u8; BS as usize]), false)
            .await
            .expect("write");
        if i % 256 == 0 {
            let cached = stat(&cache, "cached_blocks");
            assert!(
                cached <= cap,
                "cached_blocks {cached} > capacity_blocks {cap}"
            );
            if i >= cap * 3 / 2 {
                min_cached = min_cached.min(cached);
            }
        }
    }
    if std::env::var_os("CAPACITY_STATS").is_some() {
        for (k, v) in cache.stats_pairs() {
            eprintln!("  {k} = {v}");
        }
    }
    let per_block =
        stat(&cache, "flash_bytes_written") as f64 / (stat(&cache, "writes") * BS) as f64;
    eprintln!(
        "floor {floor_pct} %: capacity {cap}, min cached in the second half {min_cached} \
         ({:.1} %), moved for fill {}, fill moves withheld {}, flash bytes written per \
         client block {per_block:.2}",
        min_cached as f64 * 100.0 / cap as f64,
        stat(&cache, "moved_fill_blocks"),
        stat(&cache, "fill_moves_withheld"),
    );
    cache.stop();
    wb.abort();
    (cap, min_cached, per_block)
}
