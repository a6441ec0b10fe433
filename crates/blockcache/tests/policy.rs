//! Policy tests: a RAM backing and RAM flash, random IO checked against a byte model,
//! modes switched at runtime, a cache much smaller than the data, and recovery of dirty
//! blocks after the cache is reopened without writeback.
mod common;
use std::sync::Arc;

use bytes::Bytes;
use common::Rng;
use flashtier_backend::{BlockBackend, MemoryBackend, ZeroFlags};
use flashtier_blockcache::{BlockCache, BlockCacheConfig, FlushState};
use flashtier_flash::{Device, MemoryDevice};

fn cfg(tun: &[(&str, &str)]) -> BlockCacheConfig {
    BlockCacheConfig {
        tunables: tun
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    }
}

fn open(
    dev: &Arc<MemoryDevice>,
    backing: &Arc<MemoryBackend>,
    tun: &[(&str, &str)],
) -> Arc<BlockCache> {
    let devs: Vec<Arc<dyn Device>> = vec![Arc::clone(dev) as Arc<dyn Device>];
    BlockCache::open_devices(devs, Arc::clone(backing) as Arc<dyn BlockBackend>, cfg(tun))
        .expect("open cache")
}

async fn check_all(cache: &BlockCache, model: &[u8]) {
    let mut off = 0usize;
    while off < model.len() {
        let n = (model.len() - off).min(1 << 20);
        let got = cache.read(off as u64, n as u32).await.expect("read");
        assert!(
            got[..] == model[off..off + n],
            "mismatch in {off}..{}",
            off + n
        );
        off += n;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_io_matches_model_across_modes() {
    const SIZE: usize = 16 << 20;
    let dev = Arc::new(MemoryDevice::new("flash", 8 << 20));
    let backing = Arc::new(MemoryBackend::new(SIZE));
    let cache = open(
        &dev,
        &backing,
        &[("flush_period_s", "1"), ("seq_threshold_kb", "256")],
    );
    let wb = cache.start();
    let mut model = vec![0u8; SIZE];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let modes = ["writeback", "writethrough", "writearound"];
    for step in 0..3000 {
        if step % 500 == 499 {
            let m = modes[rng.below(3) as usize];
            cache.set_tunable("mode", m).expect("mode");
            cache
                .set_tunable("flush_order", ["fifo", "lru", "lba"][rng.below(3) as usize])
                .expect("order");
        }
        let big = rng.below(10) == 0;
        let len = if big {
            1 + rng.below(256 << 10)
        } else if rng.below(2) == 0 {
            4096
        } else {
            1 + rng.below(12000)
        };
        let off = if rng.below(2) == 0 {
            rng.below((SIZE as u64 - len) / 4096) * 4096
        } else {
            rng.below(SIZE as u64 - len)
        };
        match rng.below(10) {
            0..=4 => {
                let data = rng.bytes(len as usize);
                let fua = rng.below(8) == 0;
                cache
                    .write(off, Bytes::from(data.clone()), fua)
                    .await
                    .expect("write");
                model[off as usize..(off + len) as usize].copy_from_slice(&data);
            }
            5 => {
                cache
                    .write_zeroes(off, len as u32, ZeroFlags::default())
                    .await
                    .expect("zeroes");
                model[off as usize..(off + len) as usize].fill(0);
            }
            6 => cache.flush().await.expect("flush"),
            _ => {
                let got = cache.read(off, len as u32).await.expect("read");
                assert!(
                    got[..] == model[off as usize..(off + len) as usize],
                    "step {step}: read {off}+{len} differs"
                );
            }
        }
    }
    check_all(&cache, &model).await;
    cache.flush_wait().await.expect("flush");
    assert!(matches!(cache.flush_state(), FlushState::Done { .. }));
    assert_eq!(cache.dirty_blocks(), 0);
    assert!(backing.snapshot() == model, "backing differs after flush");
    let stats: std::collections::HashMap<String, String> =
        cache.stats_pairs().into_iter().collect();
    assert!(stats["read_hits"].parse::<u64>().unwrap() > 0);
    assert!(stats["cleanings"].parse::<u64>().unwrap() > 0);
    assert_eq!(stats["dirty_lost"], "0");
    cache.stop();
    wb.await.expect("writeback task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_cache_holds_no_stale_data() {
    // 32 MiB written through a 4 MiB cache (nbdkit's failing scenario), sequential bypass off.
    const SIZE: usize = 32 << 20;
    let dev = Arc::new(MemoryDevice::new("flash", 4 << 20));
    let backing = Arc::new(MemoryBackend::new(SIZE));
    let cache = open(&dev, &backing, &[("seq_threshold_kb", "0")]);
    let wb = cache.start();
    let mut rng = Rng(42);
    let model = rng.bytes(SIZE);
    for off in (0..SIZE).step_by(64 << 10) {
        cache
            .write(
                off as u64,
                Bytes::copy_from_slice(&model[off..off + (64 << 10)]),
                false,
            )
            .await
            .expect("write");
    }
    cache.flush().await.expect("flush");
    check_all(&cache, &model).await;
    cache.flush_wait().await.expect("flush wait");
    assert!(backing.snapshot() == model);
    let stats: std::collections::HashMap<String, String> =
        cache.stats_pairs().into_iter().collect();
    assert!(
        stats["replacements"].parse::<u64>().unwrap() > 0,
        "{stats:?}"
    );
    assert_eq!(stats["dirty_lost"], "0");
    cache.stop();
    wb.await.expect("writeback task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dirty_blocks_recovered_after_reopen() {
    const SIZE: usize = 4 << 20;
    let dev = Arc::new(MemoryDevice::new("flash", 8 << 20));
    let backing = Arc::new(MemoryBackend::new(SIZE));
    let mut rng = Rng(7);
    let mut model = vec![0u8; SIZE];
    {
        // No writeback task: everything stays dirty on flash.
        let cache = open(&dev, &backing, &[("flush_period_s", "0")]);
        for _ in 0..300 {
            let off = rng.below((SIZE as u64 - 8192) / 512) * 512;
            let data = rng.bytes(8192);
            cache
                .write(off, Bytes::from(data.clone()), false)
                .await
                .expect("write");
            model[off as usize..off as usize + 8192].copy_from_slice(&data);
        }
        cache.flush().await.expect("flush");
        assert!(cache.dirty_blocks() > 0);
        cache.stop();
    }
    assert!(
        backing.snapshot() != model,
        "nothing may reach the backing yet"
    );
    let cache = open(&dev, &backing, &[]);
    assert!(cache.recovery().dirty_blocks > 0);
    check_all(&cache, &model).await;
    let wb = cache.start();
    cache.flush_wait().await.expect("flush");
    assert!(backing.snapshot() == model);
    cache.stop();
    wb.await.expect("writeback");
    // A third open finds nothing dirty (the watermark covers the written-back blocks).
    let cache = open(&dev, &backing, &[]);
    assert_eq!(cache.recovery().dirty_blocks, 0);
    check_all(&cache, &model).await;
    cache.stop();
}

/// Each admission rule counts the requests it keeps out of the cache, once per request,
/// and the first refusing rule is the one counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_rules_are_counted() {
    const SIZE: usize = 4 << 20;
    let dev = Arc::new(MemoryDevice::new("flash", 8 << 20));
    let backing = Arc::new(MemoryBackend::new(SIZE));
    let cache = open(
        &dev,
        &backing,
        &[
            ("admit_max_kb", "16"),
            ("admit_offset_max", "2097152"),
            ("seq_threshold_kb", "0"),
        ],
    );
    let stat = |name: &str| common::stat(&cache, name);
    let block = Bytes::from(vec![1u8; 4096]);
    cache
        .write(0, block.clone(), false)
        .await
        .expect("admitted");
    cache
        .write(8192, Bytes::from(vec![2u8; 64 << 10]), false)
        .await
        .expect("too large");
    cache
        .write(3 << 20, block.clone(), false)
        .await
        .expect("past the range");
    cache
        .read(3 << 20, 4096)
        .await
        .expect("read past the range");
    cache.set_tunable("admit_reads", "0").expect("tunable");
    cache
        .read(1 << 20, 4096)
        .await
        .expect("read with reads off");
    assert_eq!(stat("bypass_size_requests"), 1);
    assert_eq!(stat("bypass_offset_requests"), 2);
    assert_eq!(stat("bypass_direction_requests"), 1);
    assert_eq!(stat("bypass_sequential_requests"), 0);
    // A sequential stream is counted as such, before any other rule.
    cache.set_tunable("seq_threshold_kb", "8").expect("tunable");
    for i in 0..8u64 {
        cache
            .write((1 << 20) + i * 4096, block.clone(), false)
            .await
            .expect("sequential write");
    }
    assert!(stat("bypass_sequential_requests") > 0);
    assert_eq!(stat("bypass_size_requests"), 1);
}
