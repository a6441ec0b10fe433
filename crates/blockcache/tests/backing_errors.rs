//! Backing failures during writeback: errors are counted and reported, dirty blocks stay in
//! the cache (reads keep returning the new data), and once the backing recovers a flush
//! completes and the backing holds every byte. Under a steady rate of failed backing writes
//! writeback still progresses (per-range success and retry) and a flush completes; when
//! writeback cannot progress at all, writes waiting for dirty space fail with EIO after
//! `write_stall_max_ms` instead of hanging.
mod common;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{stat, Rng};
use flashtier_backend::{BackendError, BackendFuture, BlockBackend, MemoryBackend, ZeroFlags};
use flashtier_blockcache::{BlockCache, BlockCacheConfig, FlushState};
use flashtier_flash::{Device, MemoryDevice};

/// A RAM backing whose writes and flushes fail while `down` is set, and whose writes fail
/// one in `one_in` (pseudo-randomly) while that is non-zero.
struct Flaky {
    inner: MemoryBackend,
    down: AtomicBool,
    one_in: AtomicU64,
    rng: AtomicU64,
}

impl Flaky {
    fn new(size: usize, down: bool) -> Self {
        Flaky {
            inner: MemoryBackend::new(size),
            down: AtomicBool::new(down),
            one_in: AtomicU64::new(0),
            rng: AtomicU64::new(0x9e37_79b9_7f4a_7c15),
        }
    }

    fn fail(&self) -> Result<(), BackendError> {
        if self.down.load(Ordering::SeqCst) {
            Err(BackendError::Io(std::io::Error::other("backing offline")))
        } else {
            Ok(())
        }
    }

    fn fail_write(&self) -> Result<(), BackendError> {
        self.fail()?;
        let n = self.one_in.load(Ordering::SeqCst);
        let mut x = self.rng.load(Ordering::SeqCst);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, Ordering::SeqCst);
        if n > 0 && x.is_multiple_of(n) {
            return Err(BackendError::Io(std::io::Error::from_raw_os_error(5)));
        }
        Ok(())
    }
}

impl BlockBackend for Flaky {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn can_multi_conn(&self) -> bool {
        true
    }
    fn read(&self, offset: u64, len: u32) -> BackendFuture<'_, Bytes> {
        self.inner.read(offset, len)
    }
    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BackendFuture<'_, ()> {
        Box::pin(async move {
            self.fail_write()?;
            self.inner.write(offset, data, fua).await
        })
    }
    fn flush(&self) -> BackendFuture<'_, ()> {
        Box::pin(async move {
            self.fail()?;
            self.inner.flush().await
        })
    }
    fn trim(&self, offset: u64, len: u32) -> BackendFuture<'_, ()> {
        self.inner.trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u32, flags: ZeroFlags) -> BackendFuture<'_, ()> {
        self.inner.write_zeroes(offset, len, flags)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dirty_data_survives_backing_outage() {
    const SIZE: usize = 4 << 20;
    let backing = Arc::new(Flaky::new(SIZE, true));
    let dev: Arc<dyn Device> = Arc::new(MemoryDevice::new("flash", 8 << 20));
    let cache = BlockCache::open_devices(
        vec![dev],
        Arc::clone(&backing) as Arc<dyn BlockBackend>,
        BlockCacheConfig {
            // One 1 MiB request would otherwise count as a sequential stream and bypass.
            tunables: vec![("seq_threshold_kb".into(), "0".into())],
            ..Default::default()
        },
    )
    .expect("open");
    let wb = cache.start();
    let data: Vec<u8> = (0..(1 << 20)).map(|i| (i * 7 % 251) as u8).collect();
    cache
        .write(65536, Bytes::from(data.clone()), false)
        .await
        .expect("write");
    cache.flush().await.expect("flush (flash only)");
    cache.start_flush();
    // Until the flush has met the outage: a fixed 600 ms sleep assumed writeback had tried
    // the backing by then, which a loaded machine need not have scheduled.
    let t0 = Instant::now();
    while stat(&cache, "backing_errors") == 0
        || !cache.last_error().is_some_and(|e| e.contains("offline"))
    {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the flush never met the outage: {:?}, last error {:?}",
            cache.flush_state(),
            cache.last_error()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(matches!(cache.flush_state(), FlushState::Running { .. }));
    assert_eq!(cache.dirty_blocks(), 256);
    let got = cache.read(65536, 1 << 20).await.expect("read");
    assert!(got[..] == data[..]);
    backing.down.store(false, Ordering::SeqCst);
    tokio::time::timeout(Duration::from_secs(20), cache.flush_wait())
        .await
        .expect("flush finishes once the backing is back")
        .expect("flush");
    assert_eq!(cache.dirty_blocks(), 0);
    assert!(backing.inner.snapshot()[65536..65536 + (1 << 20)] == data[..]);
    cache.stop();
    wb.await.expect("writeback");
}

fn open(backing: &Arc<Flaky>, flash: u64, tunables: &[(&str, &str)]) -> Arc<BlockCache> {
    let dev: Arc<dyn Device> = Arc::new(MemoryDevice::new("flash", flash));
    BlockCache::open_devices(
        vec![dev],
        Arc::clone(backing) as Arc<dyn BlockBackend>,
        BlockCacheConfig {
            tunables: tunables
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        },
    )
    .expect("open")
}

/// Random 4 KiB writes into a model; returns the model.
async fn scatter(cache: &BlockCache, size: usize, writes: usize, rng: &mut Rng) -> Vec<u8> {
    let mut model = vec![0u8; size];
    for _ in 0..writes {
        let blk = (rng.next() % (size as u64 / 4096)) as usize;
        let data: Vec<u8> = (0..4096).map(|_| rng.next() as u8).collect();
        model[blk * 4096..(blk + 1) * 4096].copy_from_slice(&data);
        cache
            .write(blk as u64 * 4096, Bytes::from(data), false)
            .await
            .expect("write");
    }
    model
}

/// One in 20 backing writes fails (5 %): a flush of scattered dirty blocks still completes,
/// its status counts the errors, reads are right throughout, and the backing ends up equal
/// to the cache's view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_progresses_under_partial_backing_errors() {
    const SIZE: usize = 32 << 20;
    let backing = Arc::new(Flaky::new(SIZE, false));
    let cache = open(
        &backing,
        32 << 20,
        &[("flush_period_s", "0"), ("seq_threshold_kb", "0")],
    );
    let wb = cache.start();
    let mut rng = Rng(7);
    let model = scatter(&cache, SIZE, 2000, &mut rng).await;
    backing.one_in.store(20, Ordering::SeqCst);
    let t0 = Instant::now();
    cache.start_flush();
    let mut saw_progress_with_errors = false;
    loop {
        match cache.flush_state() {
            FlushState::Done { errors, .. } => {
                assert!(errors > 0, "the flush met backing errors");
                break;
            }
            FlushState::Running { done, errors, .. } => {
                saw_progress_with_errors |= done > 0 && errors > 0;
            }
            FlushState::Idle => panic!("no flush"),
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "flush stuck: {:?}",
            cache.flush_state()
        );
        // Reads stay right while blocks wait for their retry.
        let blk = (rng.next() % (SIZE as u64 / 4096)) as usize;
        let got = cache.read(blk as u64 * 4096, 4096).await.expect("read");
        assert!(got[..] == model[blk * 4096..(blk + 1) * 4096]);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(saw_progress_with_errors || stat(&cache, "writeback_write_errors") > 0);
    assert!(stat(&cache, "backing_errors") > 0);
    assert_eq!(cache.dirty_blocks(), 0);
    backing.one_in.store(0, Ordering::SeqCst);
    assert!(
        backing.inner.snapshot() == model,
        "backing equals the cache's view"
    );
    let got = cache.read(0, SIZE as u32).await.expect("read all");
    assert!(got[..] == model[..]);
    cache.stop();
    wb.await.expect("writeback");
}

/// The backing takes no writes at all: once dirty blocks reach `dirty_max_pct`, a write
/// waits at most `write_stall_max_ms` and fails with EIO (counted); reads stay right; once the
/// backing is back, writes succeed again and a flush leaves the backing equal to the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_fail_after_the_stall_bound_when_writeback_cannot_progress() {
    const SIZE: usize = 16 << 20;
    let backing = Arc::new(Flaky::new(SIZE, true));
    let cache = open(
        &backing,
        8 << 20,
        &[
            ("seq_threshold_kb", "0"),
            ("dirty_low_pct", "5"),
            ("dirty_high_pct", "10"),
            ("dirty_max_pct", "20"),
            ("write_stall_max_ms", "300"),
        ],
    );
    let wb = cache.start();
    let mut rng = Rng(11);
    let mut model = vec![0u8; SIZE];
    let mut failed = 0;
    for _ in 0..2000 {
        let blk = (rng.next() % (SIZE as u64 / 4096)) as usize;
        let data: Vec<u8> = (0..4096).map(|_| rng.next() as u8).collect();
        let t = Instant::now();
        match cache
            .write(blk as u64 * 4096, Bytes::from(data.clone()), false)
            .await
        {
            Ok(()) => model[blk * 4096..(blk + 1) * 4096].copy_from_slice(&data),
            Err(e) => {
                assert_eq!(e.errno(), flashtier_backend::Errno::Io, "{e}");
                failed += 1;
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "a write hung for {:?}",
            t.elapsed()
        );
        if failed >= 3 {
            break;
        }
    }
    assert_eq!(failed, 3, "writes fail once dirty space is exhausted");
    assert_eq!(stat(&cache, "write_stall_timeouts"), 3);
    let got = cache.read(0, SIZE as u32).await.expect("read");
    assert!(
        got[..] == model[..],
        "a failed write changed nothing; reads are right"
    );
    backing.down.store(false, Ordering::SeqCst);
    let data = vec![9u8; 4096];
    cache
        .write(0, Bytes::from(data.clone()), false)
        .await
        .expect("writes work again");
    model[..4096].copy_from_slice(&data);
    tokio::time::timeout(Duration::from_secs(30), cache.flush_wait())
        .await
        .expect("flush finishes")
        .expect("flush");
    assert!(backing.inner.snapshot() == model);
    cache.stop();
    wb.await.expect("writeback");
}

/// One of two cache devices fails every write: dirty blocks whose records were in its lost
/// chunks are appended again on the other device (same version, still dirty), so nothing a
/// client wrote is lost; reads stay right and a flush leaves the backing equal to the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dirty_blocks_of_a_lost_cache_write_are_appended_again() {
    use flashtier_flash::{Faults, FaultyDevice, FlashConfig};
    const SIZE: usize = 16 << 20;
    let backing = Arc::new(Flaky::new(SIZE, false));
    let faults = Faults::new();
    let bad: Arc<dyn Device> = Arc::new(FaultyDevice::new(
        Arc::new(MemoryDevice::new("flash0", 16 << 20)),
        Arc::clone(&faults),
    ));
    let good: Arc<dyn Device> = Arc::new(MemoryDevice::new("flash1", 16 << 20));
    let cache = BlockCache::open_devices(
        vec![bad, good],
        Arc::clone(&backing) as Arc<dyn BlockBackend>,
        BlockCacheConfig {
            flash: Some(FlashConfig {
                flush_interval: None,
                ..FlashConfig::for_capacity(32 << 20)
            }),
            tunables: vec![
                ("seq_threshold_kb".into(), "0".into()),
                ("flush_period_s".into(), "0".into()),
            ],
            ..Default::default()
        },
    )
    .expect("open");
    let wb = cache.start();
    let mut rng = Rng(23);
    faults.write_eio.store(true, Ordering::SeqCst);
    let model = scatter(&cache, SIZE, 1500, &mut rng).await;
    // The FLUSH covering the lost chunk fails once; the data is not lost.
    let _ = cache.flush().await;
    let t0 = Instant::now();
    while stat(&cache, "flash_records_lost") == 0 || stat(&cache, "flash_devices_failed") == 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "no chunk was lost");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    cache.flush().await.expect("flush on the healthy device");
    assert_eq!(stat(&cache, "dirty_lost"), 0);
    let got = cache.read(0, SIZE as u32).await.expect("read");
    assert!(got[..] == model[..], "every write is served");
    faults.write_eio.store(false, Ordering::SeqCst);
    tokio::time::timeout(Duration::from_secs(30), cache.flush_wait())
        .await
        .expect("flush finishes")
        .expect("flush");
    assert!(
        backing.inner.snapshot() == model,
        "backing equals the model"
    );
    cache.stop();
    wb.await.expect("writeback");
}
