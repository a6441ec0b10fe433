//! State shared with the flash engine's reclaimer ([`Shared`]) and the reclaim callbacks
//! ([`Handler`]).
//!
//! Invariant: the handler keeps every record newer than the persisted clean watermark (and
//! dirty blocks, and this run's warm-restart records), so a newer version can never be
//! evicted while an older dirty copy could still come back at restart. Other clean blocks
//! are dropped from the index when reclaim evicts them.
//!
//! Threads: the engine's reclaimer calls the handler; request tasks and the writeback task
//! share [`Shared`] through [`crate::cache::BlockCache`]. The index mutex is the one lock.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use flashtier_flash::{kind, Decision, Location, ReclaimHandler, RecordMeta};
use parking_lot::Mutex;

use crate::cache::KIND_WATERMARK;
use crate::index::Index;
use crate::stats::{add, BlockStats};
use crate::warm::{KIND_SESSION, KIND_SHUTDOWN, KIND_SNAPSHOT};

/// State shared with the reclaim handler.
pub(crate) struct Shared {
    pub index: Mutex<Index>,
    pub wm_persisted: AtomicU64,
    pub stats: BlockStats,
    /// Version of this run's session record (kept by reclaim; 0 = none yet).
    pub session_version: AtomicU64,
    /// Version of the shutdown snapshot being written (kept by reclaim; 0 = none).
    pub snapshot_version: AtomicU64,
}

impl Shared {
    /// Whether a warm-restart record (session, snapshot chunk, shutdown marker) belongs to
    /// this run and must survive reclaim.
    fn keeps_meta(&self, rec: &RecordMeta) -> Option<bool> {
        let v = match rec.kind {
            KIND_SESSION => self.session_version.load(Ordering::Acquire),
            KIND_SNAPSHOT | KIND_SHUTDOWN => self.snapshot_version.load(Ordering::Acquire),
            _ => return None,
        };
        Some(v != 0 && rec.version == v)
    }
}

/// The flash engine's reclaim callbacks: keep dirty blocks and anything newer than the
/// persisted watermark, drop (evict) other clean blocks.
pub(crate) struct Handler(pub Arc<Shared>);

impl ReclaimHandler for Handler {
    fn decide(&self, rec: &RecordMeta) -> Decision {
        if let Some(keep) = self.0.keeps_meta(rec) {
            return if keep { Decision::Keep } else { Decision::Drop };
        }
        let mut ix = self.0.index.lock();
        let loc = rec.location.pack();
        if rec.kind == KIND_WATERMARK {
            return if ix.wm_loc == Some(loc) {
                Decision::Keep
            } else {
                Decision::Drop
            };
        }
        match ix.map.get(rec.key_id) {
            Some(e) if e.loc == loc => {
                if e.dirty
                    || rec.version > self.0.wm_persisted.load(Ordering::Acquire)
                    || ix.writing.contains(&rec.key_id)
                {
                    Decision::Keep
                } else {
                    ix.remove_at(rec.key_id, loc);
                    add(&self.0.stats.replacements, 1);
                    Decision::Drop
                }
            }
            _ => Decision::Drop,
        }
    }

    fn relocated(&self, rec: &RecordMeta, new: Location) -> bool {
        if let Some(keep) = self.0.keeps_meta(rec) {
            // Found by the recovery scan, not through the index: the copy stays live.
            return keep;
        }
        let mut ix = self.0.index.lock();
        let old = rec.location.pack();
        if rec.kind == KIND_WATERMARK {
            if ix.wm_loc == Some(old) {
                ix.wm_loc = Some(new.pack());
                return true;
            }
            return false;
        }
        match ix.map.get(rec.key_id) {
            Some(e) if e.loc == old => ix.map.set_loc(rec.key_id, new.pack()),
            _ => false,
        }
    }

    fn evicted(&self, rec: &RecordMeta) {
        if rec.kind != kind::PUT {
            return;
        }
        let mut ix = self.0.index.lock();
        if let Some(e) = ix.remove_at(rec.key_id, rec.location.pack()) {
            if e.dirty {
                add(&self.0.stats.dirty_lost, 1);
                log::error!(
                    "cache device lost dirty block {} (version {})",
                    rec.key_id,
                    rec.version
                );
            }
        }
    }
}
