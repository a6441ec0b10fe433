//! Writes that find flash full while it holds read-hot clean blocks: reclaim then copies a
//! clean block only within the fill budget and drops the other read ones
//! (`Blocks::want_space`, stat `space_pressure_drops`). That must cost only cached copies: after a crash image taken once every write was acknowledged
//! and FLUSHed, every byte reads back as the model's, and the writes never failed.
mod common;
use std::sync::Arc;

use bytes::Bytes;
use common::{open_on, stat, Rng};
use flashtier_backend::{BlockBackend, MemoryBackend};
use flashtier_flash::MemoryDevice;

const SIZE: u64 = 16 << 20;
const FLASH: u64 = 8 << 20;
const BS: u64 = 4096;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_stalled_on_a_full_flash_of_read_blocks_lose_nothing_after_a_crash() {
    let backing = Arc::new(MemoryBackend::new(SIZE as usize));
    let mut rng = Rng(0x57a11);
    let mut model = rng.bytes(SIZE as usize);
    backing
        .write(0, Bytes::from(model.clone()), false)
        .await
        .expect("fill backing");
    let mut dev = Arc::new(MemoryDevice::new("flash", FLASH));
    let mut pressure = 0;
    for round in 0..4u64 {
        let cache = open_on(&dev, &backing);
        let got = cache.read(0, SIZE as u32).await.expect("read");
        assert!(
            got[..] == model[..],
            "round {round}: wrong data after a crash"
        );
        // Dirty blocks may fill the flash: writes then wait for reclaim and writeback.
        for (k, v) in [
            ("dirty_max_pct", "95"),
            ("dirty_high_pct", "90"),
            ("dirty_low_pct", "10"),
        ] {
            cache.set_tunable(k, v).expect("tunable");
        }
        let wb = cache.start();
        let cap = cache.capacity_blocks();
        // Fill the cache with clean blocks read twice (read counts set: reclaim would copy
        // them), 64 KiB at a time with a FLUSH after each so admissions keep up.
        let hot = (cap * 9 / 10).min(SIZE / BS) / 16 * 16;
        for _ in 0..2 {
            for lba in (0..hot).step_by(16) {
                let got = cache.read(lba * BS, 16 * BS as u32).await.expect("read");
                let r = (lba * BS) as usize..((lba + 16) * BS) as usize;
                assert!(got[..] == model[r]);
            }
            cache.flush().await.expect("flush");
        }
        // Then writes, four at a time, over the whole device: more blocks than the flash
        // holds, partial blocks included, with a FLUSH now and then.
        let mut acked = 0u64;
        while acked < 3 * cap {
            let mut batch = Vec::new();
            // One write in each quarter of the device: concurrent writes never overlap, so
            // the model's order is theirs.
            for q in 0..4 {
                let len = 1 + rng.below(32 << 10);
                let off = q * (SIZE / 4) + rng.below(SIZE / 4 - len);
                let data = rng.bytes(len as usize);
                model[off as usize..(off + len) as usize].copy_from_slice(&data);
                acked += len.div_ceil(BS);
                let c = Arc::clone(&cache);
                batch.push(tokio::spawn(async move {
                    c.write(off, Bytes::from(data), false).await
                }));
            }
            for t in batch {
                t.await.expect("task").expect("a write failed");
            }
            if rng.below(8) == 0 {
                cache.flush().await.expect("flush");
            }
        }
        cache.flush().await.expect("flush");
        pressure += stat(&cache, "space_pressure_drops");
        assert_eq!(stat(&cache, "write_stall_timeouts"), 0);
        assert_eq!(stat(&cache, "dirty_lost"), 0);
        // A crash: writeback stopped first, then the device image as it is.
        cache.interrupt();
        wb.await.expect("writeback");
        let image = dev.image();
        cache.stop();
        dev = Arc::new(MemoryDevice::from_image("flash", image));
    }
    let cache = open_on(&dev, &backing);
    let got = cache.read(0, SIZE as u32).await.expect("read");
    assert!(got[..] == model[..], "wrong data after the last crash");
    cache.stop();
    eprintln!("space_pressure_drops {pressure}");
    assert!(
        pressure > 0,
        "no write found flash full: the test lost its point"
    );
}
