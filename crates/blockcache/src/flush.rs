//! Explicit flushes (`ctl flush`, detach, the start of a mode switch): a [`FlushJob`]
//! covers every block dirty when it started (versions up to its target) and is done when
//! none of them is dirty. The writeback task does the work at flush speed (see
//! `writeback`), shared with client requests by `writeback_busy_share_pct`.
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::cache::{BlockCache, FlushJob, FlushState};

impl BlockCache {
    /// Start writing back every block dirty now; returns at once with the flush's id. A
    /// running flush is extended to cover the new blocks (and keeps its id).
    pub fn start_flush(&self) -> u64 {
        let ix = self.shared.index.lock();
        let target = ix.next_version.saturating_sub(1);
        let pending = ix.dirty_at_or_below(target) as u64;
        drop(ix);
        let mut job = self.job.lock();
        let id = match job.as_mut() {
            Some(j) if j.finished.is_none() => {
                let remaining_old = self.shared.index.lock().dirty_at_or_below(j.target) as u64;
                let done = j.total.saturating_sub(remaining_old);
                j.target = target;
                j.total = done + pending;
                j.id
            }
            _ => {
                let id = self.flush_ids.fetch_add(1, Ordering::AcqRel) + 1;
                *job = Some(FlushJob {
                    id,
                    target,
                    total: pending,
                    started: Instant::now(),
                    finished: None,
                    errors: 0,
                });
                id
            }
        };
        drop(job);
        self.wb_wake.notify_one();
        id
    }

    /// Id of the latest explicit flush (0 = none yet).
    pub fn flush_id(&self) -> u64 {
        self.job.lock().as_ref().map_or(0, |j| j.id)
    }

    pub(crate) fn flush_running(&self) -> bool {
        matches!(self.flush_state(), FlushState::Running { .. })
    }

    /// Progress of the latest explicit flush.
    pub fn flush_state(&self) -> FlushState {
        let mut job = self.job.lock();
        let Some(j) = job.as_mut() else {
            return FlushState::Idle;
        };
        if let Some(secs) = j.finished {
            return FlushState::Done {
                total: j.total,
                secs,
                errors: j.errors,
            };
        }
        let remaining = self.shared.index.lock().dirty_at_or_below(j.target) as u64;
        if remaining == 0 {
            let secs = j.started.elapsed().as_secs_f64();
            j.finished = Some(secs);
            return FlushState::Done {
                total: j.total,
                secs,
                errors: j.errors,
            };
        }
        FlushState::Running {
            done: j.total.saturating_sub(remaining),
            total: j.total.max(remaining),
            errors: j.errors,
        }
    }

    /// Write back every block dirty now and wait until they are on the backing (and the
    /// backing flushed). Fails only if the cache is stopping.
    pub async fn flush_wait(&self) -> Result<(), crate::Error> {
        self.start_flush();
        loop {
            if let FlushState::Done { .. } = self.flush_state() {
                return Ok(());
            }
            if self.stopping.load(Ordering::Acquire) {
                return Err(crate::Error::Config("cache stopped during flush".into()));
            }
            let _ =
                tokio::time::timeout(Duration::from_millis(100), self.progress.notified()).await;
        }
    }
}
