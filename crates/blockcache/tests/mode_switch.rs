//! Switching away from writeback at runtime: the switch is reported (flush id, dirty blocks
//! left, `mode_switch_in_progress`), waiting for it ends with no dirty block, and writes
//! acknowledged during the switch are neither lost nor read back stale; at the end the
//! backing holds every byte. Switching back to writeback cancels the switch.
mod common;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::Rng;
use flashtier_backend::{BackendFuture, BlockBackend, MemoryBackend, ZeroFlags};
use flashtier_blockcache::{BlockCache, BlockCacheConfig, Mode, SwitchPhase};
use flashtier_flash::{Device, MemoryDevice};

/// A RAM backing whose writes take 2 ms (a slow disk), so writeback takes a while.
struct Slow(Arc<MemoryBackend>);

impl BlockBackend for Slow {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn can_multi_conn(&self) -> bool {
        true
    }
    fn read(&self, offset: u64, len: u32) -> BackendFuture<'_, Bytes> {
        self.0.read(offset, len)
    }
    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BackendFuture<'_, ()> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(2)).await;
            self.0.write(offset, data, fua).await
        })
    }
    fn flush(&self) -> BackendFuture<'_, ()> {
        self.0.flush()
    }
    fn trim(&self, offset: u64, len: u32) -> BackendFuture<'_, ()> {
        self.0.trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u32, flags: ZeroFlags) -> BackendFuture<'_, ()> {
        self.0.write_zeroes(offset, len, flags)
    }
}

const SIZE: usize = 8 << 20;

fn stats(cache: &BlockCache) -> HashMap<String, String> {
    cache.stats_pairs().into_iter().collect()
}

async fn write(cache: &BlockCache, model: &mut [u8], off: u64, data: Vec<u8>) {
    cache
        .write(off, Bytes::from(data.clone()), false)
        .await
        .expect("write");
    model[off as usize..off as usize + data.len()].copy_from_slice(&data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switch_drains_dirty_blocks_without_losing_writes() {
    let dev = Arc::new(MemoryDevice::new("flash", 16 << 20));
    let mem = Arc::new(MemoryBackend::new(SIZE));
    let tun = [
        ("flush_period_s", "0"),
        ("dirty_max_pct", "95"),
        ("dirty_high_pct", "90"),
        ("dirty_low_pct", "80"),
        ("seq_threshold_kb", "0"),
        ("writeback_batch", "16"),
        ("writeback_inflight", "2"),
    ];
    let cfg = BlockCacheConfig {
        tunables: tun
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    let cache = BlockCache::open_devices(
        vec![Arc::clone(&dev) as Arc<dyn Device>],
        Arc::new(Slow(Arc::clone(&mem))) as Arc<dyn BlockBackend>,
        cfg,
    )
    .expect("open");
    let wb = cache.start();
    let mut rng = Rng(0x51c4);
    let mut model = vec![0u8; SIZE];
    for _ in 0..1200 {
        let off = rng.below(SIZE as u64 / 4096) * 4096;
        write(&cache, &mut model, off, rng.bytes(4096)).await;
    }
    let dirty = cache.dirty_blocks();
    assert!(dirty > 500, "{dirty} dirty blocks");

    let sw = cache.set_mode(Mode::WriteThrough).expect("a switch");
    assert_eq!(sw.phase, SwitchPhase::Running);
    assert_eq!((sw.from, sw.to), (Mode::WriteBack, Mode::WriteThrough));
    assert_eq!(sw.id, cache.flush_id());
    assert!(sw.total >= dirty - 64, "{sw:?}");
    let st = stats(&cache);
    assert_eq!(st["mode_switch_in_progress"], "1");
    assert!(st["mode_switch_dirty_left"].parse::<u64>().unwrap() > 0);
    // Writes and reads during the switch: whole and partial blocks, dirty or not.
    let mut saw_running = 0;
    for step in 0..400 {
        let len = if rng.below(2) == 0 {
            4096
        } else {
            1 + rng.below(10000)
        };
        let off = rng.below(SIZE as u64 - len);
        if rng.below(3) == 0 {
            let got = cache.read(off, len as u32).await.expect("read");
            assert!(
                got[..] == model[off as usize..(off + len) as usize],
                "step {step}: read {off}+{len} is stale"
            );
        } else {
            write(&cache, &mut model, off, rng.bytes(len as usize)).await;
        }
        if cache.mode_switch().expect("switch").phase == SwitchPhase::Running {
            saw_running += 1;
        }
    }
    assert!(saw_running > 0, "the switch finished before any write");
    let done = tokio::time::timeout(Duration::from_secs(60), cache.mode_switch_wait())
        .await
        .expect("switch finishes")
        .expect("switch done");
    assert_eq!(done.phase, SwitchPhase::Done);
    assert_eq!(done.dirty_left, 0);
    assert_eq!(cache.dirty_blocks(), 0);
    assert_eq!(stats(&cache)["mode_switch_in_progress"], "0");
    assert!(
        mem.snapshot() == model,
        "backing lacks a write acknowledged during the switch"
    );
    let got = cache.read(0, SIZE as u32).await.expect("read all");
    assert!(got[..] == model[..], "device differs from the model");

    // Back to writeback, dirty some blocks, switch away and back: cancelled.
    assert!(cache
        .set_mode(Mode::WriteBack)
        .is_some_and(|s| s.phase == SwitchPhase::Done));
    for _ in 0..200 {
        let off = rng.below(SIZE as u64 / 4096) * 4096;
        write(&cache, &mut model, off, rng.bytes(4096)).await;
    }
    let first = cache.set_mode(Mode::WriteAround).expect("switch");
    assert!(first.id > sw.id);
    let again = cache.set_mode(Mode::WriteBack).expect("switch");
    if again.phase == SwitchPhase::Cancelled {
        assert!(cache.mode_switch_wait().await.is_err());
    }
    cache.flush_wait().await.expect("flush");
    assert!(mem.snapshot() == model);
    cache.stop();
    wb.await.expect("writeback task");
}
