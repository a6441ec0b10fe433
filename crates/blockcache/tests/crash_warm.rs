//! Clean blocks after a crash, against a model: rounds of writeback writes (made durable by a
//! FLUSH), then writes around the cache (writethrough, writearound, write-zeroes) and reads
//! with no FLUSH, then a crash image of a flash device small enough that reclaim drops
//! blocks all along (drop intents). Every restart must read back the model byte for byte — no
//! older cached copy may shadow a write that went around the cache — and keep clean blocks.
mod common;
use std::sync::Arc;

use bytes::Bytes;
use common::{stat, Rng};
use flashtier_backend::{BlockBackend, MemoryBackend, ZeroFlags};
use flashtier_blockcache::{BlockCache, BlockCacheConfig};
use flashtier_flash::{Device, MemoryDevice};

const SIZE: u64 = 16 << 20;
const FLASH: u64 = 12 << 20;

fn open(dev: &Arc<MemoryDevice>, backing: &Arc<MemoryBackend>) -> Arc<BlockCache> {
    let cfg = BlockCacheConfig {
        tunables: vec![("seq_threshold_kb".into(), "0".into())],
        ..Default::default()
    };
    BlockCache::open_devices(
        vec![Arc::clone(dev) as Arc<dyn Device>],
        Arc::clone(backing) as Arc<dyn BlockBackend>,
        cfg,
    )
    .expect("open cache")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_images_under_reclaim_stay_correct_and_warm() {
    let backing = Arc::new(MemoryBackend::new(SIZE as usize));
    let mut rng = Rng(0x5eed);
    let mut model = rng.bytes(SIZE as usize);
    backing
        .write(0, Bytes::from(model.clone()), false)
        .await
        .expect("fill backing");
    let mut dev = Arc::new(MemoryDevice::new("flash", FLASH));
    let (mut warm_rounds, mut stale, mut drops) = (0, 0, 0);
    for round in 0..8u64 {
        let cache = open(&dev, &backing);
        let rec = cache.recovery().clone();
        if round > 0 {
            if rec.clean_kept > 0 {
                warm_rounds += 1;
            }
            stale += rec.stale_dropped;
            assert!(rec.floor_reason.is_none(), "round {round}: {rec:?}");
        }
        // Right after the (crash) restart: every byte is the model's.
        let got = cache.read(0, SIZE as u32).await.expect("read");
        assert!(
            got[..] == model[..],
            "round {round}: wrong data after a crash"
        );
        let wb = cache.start();
        // Reads over a range larger than the flash (admissions, reclaim), writeback writes.
        for _ in 0..400 {
            let len = 1 + rng.below(64 << 10);
            let off = rng.below(SIZE - len);
            if rng.below(3) == 0 {
                let data = rng.bytes(len as usize);
                cache
                    .write(off, Bytes::from(data.clone()), false)
                    .await
                    .expect("write");
                model[off as usize..(off + len) as usize].copy_from_slice(&data);
            } else {
                let got = cache.read(off, len as u32).await.expect("read");
                assert!(got[..] == model[off as usize..(off + len) as usize]);
            }
        }
        cache.flush().await.expect("flush");
        // Around the cache, no FLUSH after: these must win over any older cached copy.
        let mode = ["writethrough", "writearound"][round as usize % 2];
        cache.set_tunable("mode", mode).expect("mode");
        for i in 0..(10 + rng.below(60)) {
            let len = 1 + rng.below(3 * 4096);
            let off = rng.below(SIZE - len);
            match i % 5 {
                0 => {
                    let got = cache.read(off, len as u32).await.expect("read");
                    assert!(got[..] == model[off as usize..(off + len) as usize]);
                }
                1 => {
                    cache
                        .write_zeroes(off, len as u32, ZeroFlags::default())
                        .await
                        .expect("zeroes");
                    model[off as usize..(off + len) as usize].fill(0);
                }
                _ => {
                    let data = rng.bytes(len as usize);
                    cache
                        .write(off, Bytes::from(data.clone()), false)
                        .await
                        .expect("write");
                    model[off as usize..(off + len) as usize].copy_from_slice(&data);
                }
            }
        }
        drops += stat(&cache, "drop_intents");
        // A crash: writeback stopped first (it must not reach the backing after the image),
        // then the device image as it is.
        cache.interrupt();
        wb.await.expect("writeback");
        let image = dev.image();
        cache.stop();
        dev = Arc::new(MemoryDevice::from_image("flash", image));
    }
    let cache = open(&dev, &backing);
    let got = cache.read(0, SIZE as u32).await.expect("read");
    assert!(got[..] == model[..], "wrong data after the last crash");
    cache.stop();
    eprintln!("warm rounds {warm_rounds}/7, stale dropped {stale}, drop intents {drops}");
    assert!(
        drops > 100,
        "reclaim dropped no newest record: the test lost its point"
    );
    assert!(
        stale > 7,
        "no write around the cache made a cached copy stale"
    );
    assert!(
        warm_rounds >= 6,
        "clean blocks kept after only {warm_rounds} of 7 crashes"
    );
}
