//! Backing failures during writeback: errors are counted and reported, dirty blocks stay in
//! the cache (reads keep returning the new data), and once the backing recovers a flush
//! completes and the backing holds every byte.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use flashtier_blockcache::{BlockCache, BlockCacheConfig, FlushState};
use flashtier_flash::{Device, MemoryDevice};
use flashtier_nbd::{BackendError, BackendFuture, BlockBackend, MemoryBackend, ZeroFlags};

/// A RAM backing whose writes and flushes fail while `down` is set.
struct Flaky {
    inner: MemoryBackend,
    down: AtomicBool,
}

impl Flaky {
    fn fail(&self) -> Result<(), BackendError> {
        if self.down.load(Ordering::SeqCst) {
            Err(BackendError::Io(std::io::Error::other("backing offline")))
        } else {
            Ok(())
        }
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
            self.fail()?;
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
    let backing = Arc::new(Flaky {
        inner: MemoryBackend::new(SIZE),
        down: AtomicBool::new(true),
    });
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
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(matches!(cache.flush_state(), FlushState::Running { .. }));
    assert_eq!(cache.dirty_blocks(), 256);
    assert!(cache.last_error().is_some_and(|e| e.contains("offline")));
    let stats: std::collections::HashMap<String, String> =
        cache.stats_pairs().into_iter().collect();
    assert!(stats["backing_errors"].parse::<u64>().expect("n") > 0);
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
