//! How a request waits for space: a writeback write waits while dirty blocks are at
//! `dirty_max_pct`, and any append waits while flash is full or busy. Space comes from the
//! writeback task (woken urgently), so every wait is bounded by `write_stall_max_ms` from the
//! request's start; past it the write fails with EIO (counted, logged at most once a second)
//! and a backing that stops taking writeback never hangs a client. Admissions never wait.
//!
//! Threads: request tasks; the writeback task signals progress.
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use flashtier_backend::BackendError;

use crate::cache::{flash_err, BlockCache};
use crate::index::PutOutcome;
use crate::stats::add;

impl BlockCache {
    /// Append block `lba`. With a `wait` deadline (writes) it retries while flash is full or
    /// busy and fails with EIO at the deadline; without one a full flash returns `Ok(None)`
    /// (admissions).
    pub(crate) async fn append(
        &self,
        lba: u64,
        data: &[u8],
        dirty: bool,
        wait: Option<Instant>,
    ) -> Result<Option<PutOutcome>, BackendError> {
        let mut stalled = false;
        loop {
            match self.io.try_append(lba, data, dirty) {
                Ok(out) => return Ok(out),
                Err(e @ (flashtier_flash::Error::Busy(_) | flashtier_flash::Error::NoSpace)) => {
                    let Some(deadline) = wait else {
                        return Ok(None);
                    };
                    if self.stopping.load(Ordering::Acquire) {
                        return Err(BackendError::Shutdown);
                    }
                    if Instant::now() >= deadline {
                        return Err(self.stall_timeout("flash stayed full of dirty blocks"));
                    }
                    // Busy: the stream's chunk writes are all in flight, which only time
                    // cures. NoSpace: flash is full, and space comes from writeback.
                    if matches!(e, flashtier_flash::Error::NoSpace) {
                        if !stalled {
                            stalled = true;
                            add(&self.io.shared.stats.write_stalls, 1);
                        }
                        self.writeback.wake_urgently();
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                Err(e) => return Err(flash_err(e)),
            }
        }
    }

    /// Wait while dirty blocks are at `dirty_max_pct`, until `deadline` (then EIO).
    pub(crate) async fn throttle(&self, deadline: Instant) -> Result<(), BackendError> {
        let mut stalled = false;
        loop {
            let (_, _, max_pct) = self.tunables.dirty_pcts();
            let max = (self.io.capacity_blocks * max_pct / 100).max(1);
            if self.dirty_blocks() < max || self.stopping.load(Ordering::Acquire) {
                return Ok(());
            }
            if !stalled {
                stalled = true;
                add(&self.io.shared.stats.write_stalls, 1);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.stall_timeout("dirty blocks stayed at dirty_max_pct"));
            }
            self.writeback.wake_urgently();
            self.writeback
                .wait_progress(left.min(Duration::from_millis(20)))
                .await;
        }
    }

    /// A write waited `write_stall_max_ms` for space: count it, log (at most once a second,
    /// with the count and the last error), and fail the write with EIO.
    fn stall_timeout(&self, why: &str) -> BackendError {
        add(&self.io.shared.stats.write_stall_timeouts, 1);
        let max = self.tunables.write_stall_max();
        let msg = format!(
            "write failed after waiting {} ms for space: {why} (writeback cannot progress; \
             last error: {})",
            max.as_millis(),
            self.last_error().unwrap_or_else(|| "none".into())
        );
        if let Some(n) = self.stall_log.event() {
            log::error!("{msg} ({n} such writes since the last line)");
        }
        BackendError::Io(std::io::Error::other(msg))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering::Relaxed;
    use std::sync::Arc;

    use bytes::Bytes;
    use flashtier_backend::{BlockBackend, MemoryBackend};
    use flashtier_flash::{Device, MemoryDevice};

    use crate::{BlockCache, BlockCacheConfig};

    fn open(tunables: &[(&str, &str)]) -> Arc<BlockCache> {
        let device: Arc<dyn Device> = Arc::new(MemoryDevice::new("space", 64 << 20));
        let backing: Arc<dyn BlockBackend> = Arc::new(MemoryBackend::new(8 << 20));
        let cfg = BlockCacheConfig {
            tunables: tunables
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        };
        BlockCache::open_devices(vec![device], backing, cfg).expect("open cache")
    }

    /// Without writeback, dirty blocks stop at `dirty_max_pct`: the next write waits the
    /// stall bound and fails; once the writeback task runs, writes go through again.
    #[tokio::test]
    async fn writes_wait_at_dirty_max_pct_until_writeback_makes_room() {
        let cache = open(&[
            ("dirty_low_pct", "1"),
            ("dirty_high_pct", "2"),
            ("dirty_max_pct", "2"),
            ("write_stall_max_ms", "100"),
            ("flush_period_s", "0"),
            // The blocks are written in order: no sequential bypass.
            ("seq_threshold_kb", "0"),
        ]);
        let max = (cache.capacity_blocks() * 2 / 100).max(1);
        let block = Bytes::from(vec![7u8; 4096]);
        for lba in 0..max {
            cache
                .do_write(lba * 4096, block.clone(), false)
                .await
                .expect("under the limit");
        }
        assert_eq!(cache.dirty_blocks(), max);
        let started = std::time::Instant::now();
        let err = cache
            .do_write(max * 4096, block.clone(), false)
            .await
            .expect_err("at dirty_max_pct with no writeback");
        assert!(
            started.elapsed() >= std::time::Duration::from_millis(100),
            "{err}"
        );
        let stats = &cache.io.shared.stats;
        assert_eq!(stats.write_stalls.load(Relaxed), 1);
        assert_eq!(stats.write_stall_timeouts.load(Relaxed), 1);
        assert_eq!(
            cache.dirty_blocks(),
            max,
            "the refused write left nothing dirty"
        );
        let task = cache.start();
        cache
            .do_write(max * 4096, block, false)
            .await
            .expect("writeback made room");
        cache.interrupt();
        task.await.expect("writeback task");
    }
}
