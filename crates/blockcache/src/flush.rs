//! Explicit flushes (`ctl flush`, detach, the start of a mode switch): a flush job covers
//! every block dirty when it started (versions up to its target) and is done when none of
//! them is dirty. The writeback task does the work at flush speed (see `writeback`), shared
//! with client requests by `writeback_busy_share_pct`.
//!
//! Invariant: a running job that is extended keeps its id, and its total only grows.
//! Lock order: the job mutex, then the index mutex.
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use crate::blocks::Blocks;

/// Progress of an explicit flush.
#[derive(Clone, Debug, PartialEq)]
pub enum FlushState {
    /// No flush was requested yet.
    Idle,
    /// Writing back: `done` of `total` blocks.
    Running {
        /// Blocks written back so far.
        done: u64,
        /// Blocks to write back.
        total: u64,
        /// Backing writes and flushes that failed since the flush started (retried).
        errors: u64,
    },
    /// Finished.
    Done {
        /// Blocks written back.
        total: u64,
        /// Seconds it took.
        secs: f64,
        /// Backing writes and flushes that failed on the way (and were retried).
        errors: u64,
    },
}

#[derive(Debug)]
struct FlushJob {
    /// Id reported by `/status` (`flush_id`).
    id: u64,
    /// Highest version the job covers.
    target: u64,
    total: u64,
    started: Instant,
    finished: Option<f64>,
    /// Failed backing writes and flushes while it ran.
    errors: u64,
}

/// The latest explicit flush and the ids handed out.
#[derive(Debug, Default)]
pub(crate) struct Flushes {
    job: Mutex<Option<FlushJob>>,
    /// The last id used.
    ids: AtomicU64,
}

impl Flushes {
    /// Cover every block of `index` dirty now; returns the job's id.
    pub(crate) fn start(&self, blocks: &Blocks) -> u64 {
        let (target, pending) = blocks.locked(|index| {
            let target = index.next_version().saturating_sub(1);
            (target, index.dirty_at_or_below(target) as u64)
        });
        let mut job = self.job.lock();
        match job.as_mut() {
            Some(j) if j.finished.is_none() => {
                let remaining_old = blocks.dirty_at_or_below(j.target);
                let done = j.total.saturating_sub(remaining_old);
                j.target = target;
                j.total = done + pending;
                j.id
            }
            _ => {
                let id = self.ids.fetch_add(1, Ordering::AcqRel) + 1;
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
        }
    }

    /// Id of the latest job (0 = none yet).
    pub(crate) fn id(&self) -> u64 {
        self.job.lock().as_ref().map_or(0, |j| j.id)
    }

    /// Progress of the latest job; marks it finished once none of its blocks is dirty.
    pub(crate) fn state(&self, blocks: &Blocks) -> FlushState {
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
        let remaining = blocks.dirty_at_or_below(j.target);
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

    /// A writeback write or backing flush failed: count it against a running job.
    pub(crate) fn error(&self) {
        if let Some(j) = self.job.lock().as_mut().filter(|j| j.finished.is_none()) {
            j.errors += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirty(blocks: &Blocks, lba: u64) -> u64 {
        blocks.locked(|index| {
            let version = index.take_version();
            index.put(lba, lba, version, true);
            version
        })
    }

    #[test]
    fn a_job_covers_what_was_dirty_and_an_extension_keeps_its_id() {
        let (index, flushes) = (Blocks::default(), Flushes::default());
        assert_eq!(flushes.state(&index), FlushState::Idle);
        let v1 = dirty(&index, 1);
        let v2 = dirty(&index, 2);
        let id = flushes.start(&index);
        assert_eq!(id, 1);
        index.locked(|ix| ix.mark_clean(1, v1));
        flushes.error();
        assert_eq!(
            flushes.state(&index),
            FlushState::Running {
                done: 1,
                total: 2,
                errors: 1
            }
        );
        // Extended while running: same id, the new block counted, done kept.
        dirty(&index, 3);
        assert_eq!(flushes.start(&index), id);
        assert!(matches!(
            flushes.state(&index),
            FlushState::Running {
                done: 1,
                total: 3,
                ..
            }
        ));
        // A block dirtied after the last start is not waited for.
        let v3 = index.locked(|ix| ix.get(3).and_then(|e| e.version).unwrap_or(0));
        index.locked(|ix| ix.mark_clean(2, v2));
        index.locked(|ix| ix.mark_clean(3, v3));
        dirty(&index, 4);
        assert!(matches!(
            flushes.state(&index),
            FlushState::Done {
                total: 3,
                errors: 1,
                ..
            }
        ));
        // Finished: errors no longer count, the next start is a new job.
        flushes.error();
        assert!(matches!(
            flushes.state(&index),
            FlushState::Done { errors: 1, .. }
        ));
        assert_eq!(flushes.start(&index), 2);
        assert_eq!(flushes.id(), 2);
    }
}
