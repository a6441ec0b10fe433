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
