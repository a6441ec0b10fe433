//! Clean blocks after a crash, against a model: rounds of writeback writes (made durable by a
//! FLUSH), then writes around the cache (writethrough, writearound, write-zeroes) and reads
//! with no FLUSH, then a crash image of a flash device small enough that reclaim drops
//! blocks all along (drop intents). Every restart must read back the model byte for byte — no
//! older cached copy may shadow a write that went around the cache — and keep clean blocks.
mod common;
use std::sync::Arc;

use bytes::Bytes;
use common::{open_on, stat, Rng};
use flashtier_backend::{BlockBackend, MemoryBackend, ZeroFlags};
use flashtier_flash::MemoryDevice;

const SIZE: u64 = 16 << 20;
const FLASH: u64 = 12 << 20;

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
        let cache = open_on(&dev, &backing);
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
    let cache = open_on(&dev, &backing);
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

/// The case drop intents exist for: a block's newest record (written back, so the backing
/// holds its data) is dropped by reclaim while an older record of it, whose data the backing
/// no longer holds, survives in a segment kept for its hot neighbours (greedy victims pick
/// the segment of cold, evicted blocks first). After a crash the older record must not come
/// back as the block's content. The crash comes after 1 to 8 rounds of cold reads, so at
/// some of them older records are still on flash while their newer ones are gone. (Without
/// drop intents this fails at 2 rounds: "an older record came back".)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_record_outliving_the_dropped_newest_one_is_not_served() {
    for rounds in [1u64, 2, 3, 4, 6, 8] {
        older_record_case(rounds).await;
    }
}

async fn older_record_case(rounds: u64) {
    let backing = Arc::new(MemoryBackend::new(SIZE as usize));
    let mut rng = Rng(0xdead + rounds);
    let mut model = rng.bytes(SIZE as usize);
    backing
        .write(0, Bytes::from(model.clone()), false)
        .await
        .expect("fill backing");
    let dev = Arc::new(MemoryDevice::new("flash", FLASH));
    let cache = open_on(&dev, &backing);
    cache
        .set_tunable("flash.reclaim_policy", "greedy")
        .expect("greedy");
    let wb = cache.start();
    let cap = cache.capacity_blocks();
    let bs = 4096u64;
    // Hot blocks 0..hot cached clean, the victims (every 8th) among them: first records.
    let hot = cap / 3 / 16 * 16;
    // Admissions are best effort (skipped while chunk writes are in flight): 64 KiB reads,
    // each followed by a FLUSH, let the cache device keep up.
    for lba in (0..hot).step_by(16) {
        cache.read(lba * bs, 16 * bs as u32).await.expect("read");
        cache.flush().await.expect("flush");
    }
    // The victims rewritten in writeback mode and written back (the backing holds the new
    // data), each next to a junk block written twice: the victims' segments are a third dead,
    // more than the hot segments (an eighth: the victims' first records), so greedy reclaim
    // takes them first.
    for (i, lba) in (0..hot).step_by(8).enumerate() {
        let junk = SIZE / bs - 1 - i as u64;
        for l in [lba, junk, junk] {
            let data = rng.bytes(bs as usize);
            cache
                .write(l * bs, Bytes::from(data.clone()), false)
                .await
                .expect("write");
            model[(l * bs) as usize..((l + 1) * bs) as usize].copy_from_slice(&data);
        }
    }
    cache.flush_wait().await.expect("write back");
    // Cold reads beyond the cache while the hot blocks (not the victims) stay read: the
    // victims' new records are evicted and reclaim drops them, keeping the hot segments.
    let mut cold = hot;
    for round in 0..rounds {
        for _ in 0..cap / 2 / 16 {
            cold = hot + (cold + 16 - hot) % (SIZE / bs - hot - 1024);
            cache.read(cold * bs, 16 * bs as u32).await.expect("read");
            cache.flush().await.expect("flush");
        }
        for lba in (0..hot).filter(|l| l % 8 != 0) {
            if (lba + round) % 2 == 0 {
                cache.read(lba * bs, bs as u32).await.expect("read");
            }
        }
    }
    cache.interrupt();
    wb.await.expect("writeback");
    let image = dev.image();
    cache.stop();
    let crashed = Arc::new(MemoryDevice::from_image("flash", image));
    let cache = open_on(&crashed, &backing);
    let rec = cache.recovery().clone();
    let got = cache.read(0, SIZE as u32).await.expect("read");
    for lba in (0..hot).step_by(8) {
        let r = (lba * bs) as usize..((lba + 1) * bs) as usize;
        assert!(
            got[r.clone()] == model[r],
            "{rounds} rounds, block {lba}: an older record came back ({rec:?})"
        );
    }
    assert!(got[..] == model[..]);
    assert!(rec.clean_kept > 0, "{rec:?}");
    cache.stop();
}
