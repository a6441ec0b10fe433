//! [`Durability`]: what keeps acknowledged and clean data correct across a crash — the
//! persisted clean watermark, the backing-write fence (intents and floors, `fence`) and this
//! run's warm-restart records (`warm`). Shared by the cache and the reclaim handler.
//!
//! Invariant: reclaim may evict a block record only at or below the *persisted* watermark
//! ([`Durability::wm_persisted`]), which rises only after its record and a flash flush; a lost
//! watermark record is written again (`take_wm_lost`). Records that must survive reclaim (the
//! fence's and warm restart's) go to the reclaim stream when flash is full.
//!
//! Threads: request tasks (intents), the writeback task (watermark), shutdown (snapshot) and
//! the engine's reclaimer (floors, drop intents). No lock of its own beyond the fence's.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use flashtier_flash::Flash;

use crate::fence::Fence;
use crate::meta_log::MetaLog;
use crate::stats::BlockStats;
use crate::warm::Warm;

/// The watermark, the fence and the warm-restart records.
pub(crate) struct Durability {
    /// The highest clean watermark whose record is durable.
    wm_persisted: AtomicU64,
    /// The persisted watermark record's write failed: write it again even if unchanged.
    wm_lost: AtomicBool,
    /// This run's warm-restart records (kept by reclaim).
    pub(crate) warm: Warm,
    /// Intents and the floor table (crash-safe clean blocks).
    pub(crate) fence: Fence,
    /// The engine, the reclaim stream and the counters (what the fence and warm append with).
    log: MetaLog,
}

impl Durability {
    pub(crate) fn new(fence: Fence, reclaim_stream: u8, stats: Arc<BlockStats>) -> Self {
        Durability {
            wm_persisted: AtomicU64::new(0),
            wm_lost: AtomicBool::new(false),
            warm: Warm::default(),
            fence,
            log: MetaLog::new(reclaim_stream, stats),
        }
    }

    /// The engine is open: reclaim callbacks may append through it.
    pub(crate) fn set_flash(&self, flash: &Arc<Flash>) {
        self.log.set_flash(flash);
    }

    /// The engine, if open and not dropped.
    pub(crate) fn flash(&self) -> Option<Arc<Flash>> {
        self.log.flash()
    }

    /// The engine's reclaim stream.
    pub(crate) fn reclaim_stream(&self) -> u8 {
        self.log.reclaim_stream()
    }

    /// The cache's counters.
    pub(crate) fn stats(&self) -> &BlockStats {
        self.log.stats()
    }

    /// The handle the fence and the warm records append with.
    pub(crate) fn log(&self) -> &MetaLog {
        &self.log
    }

    /// The persisted clean watermark.
    pub(crate) fn wm_persisted(&self) -> u64 {
        self.wm_persisted.load(Ordering::Acquire)
    }

    /// The watermark found at open.
    pub(crate) fn set_wm_persisted(&self, w: u64) {
        self.wm_persisted.store(w, Ordering::Release);
    }

    /// A watermark record for `w` is durable.
    pub(crate) fn persisted(&self, w: u64) {
        self.wm_persisted.fetch_max(w, Ordering::AcqRel);
    }

    /// Whether the watermark record must be written again (and clear that).
    pub(crate) fn take_wm_lost(&self) -> bool {
        self.wm_lost.swap(false, Ordering::AcqRel)
    }

    /// The watermark record was lost: write it again on the next pass.
    pub(crate) fn set_wm_lost(&self) {
        self.wm_lost.store(true, Ordering::Release);
    }
}
