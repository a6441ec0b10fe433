//! State shared with the flash engine's reclaimer ([`Shared`]) and the reclaim callbacks
//! ([`Handler`]).
//!
//! Invariant: the handler keeps every record newer than the persisted clean watermark, dirty
//! blocks, blocks being written back and this run's warm-restart records, so a newer version is
//! never evicted while an older dirty copy could come back at restart. Clean blocks with a
//! read count are moved, other clean blocks dropped; reclaim lowers counts at the rate of the
//! cache's own appends, not once per pass; a lost dirty record is appended again (same
//! version) or counted in `dirty_lost`. Details: docs/block-cache.md "Reclaim".
//!
//! Threads: the engine's reclaimer calls the handler; request tasks and the writeback task share
//! [`Shared`] through [`crate::block_io::BlockIo`]. The index mutex is the one lock here.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use flashtier_flash::{Decision, Flash, Location, LostRecord, ReclaimHandler, RecordMeta};
use parking_lot::Mutex;

use crate::cache::STREAM_DATA;
use crate::fence::Fence;
use crate::index::Index;
use crate::record::{BlockRecord, RecordKind};
use crate::stats::{add, BlockStats};
use crate::warm::Warm;

/// State shared with the reclaim handler.
pub(crate) struct Shared {
    pub index: Mutex<Index>,
    pub wm_persisted: AtomicU64,
    pub stats: BlockStats,
    /// This run's warm-restart records (kept by reclaim).
    pub warm: Warm,
    /// Intents and the floor table (crash-safe clean blocks).
    pub fence: Fence,
    /// The engine, for appending lost dirty blocks again (set once it is open).
    pub flash: OnceLock<Weak<Flash>>,
    /// The engine's reclaim stream (may use the reserved segments).
    pub reclaim_stream: u8,
    /// The persisted watermark record's write failed: write it again even if unchanged.
    pub wm_lost: AtomicBool,
    /// How many read counts reclaim may still lower: one per block the cache appended (at
    /// most `capacity_blocks` saved up), so counts age with the cache's own writes, not with
    /// how often reclaim passes (which rises with the share of records it must keep).
    pub age_budget: AtomicU64,
}

impl Shared {
    /// One block appended by the cache: reclaim may lower one more read count.
    pub fn aged_one(&self, cap: u64) {
        let _ = self
            .age_budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                (t < cap).then_some(t + 1)
            });
    }

    /// Spend one lowering of a read count, if any is left.
    fn take_age(&self) -> bool {
        self.age_budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| t.checked_sub(1))
            .is_ok()
    }
}

/// The flash engine's reclaim callbacks: keep dirty blocks, anything newer than the
/// persisted watermark and recently read clean blocks; drop (evict) other clean blocks.
pub(crate) struct Handler(pub Arc<Shared>);

impl Handler {
    /// Append a lost dirty block again (same version, dirty), waiting up to a second for a
    /// chunk buffer and falling back to the reclaim stream when flash is full.
    fn append_again(&self, flash: &Flash, m: &RecordMeta, value: &[u8]) -> Option<Location> {
        let w = BlockRecord::Block {
            lba: m.key_id,
            version: m.version,
            dirty: true,
            data: value,
        }
        .write();
        let wait = Duration::from_secs(1);
        match flash.append_blocking(STREAM_DATA, &w, wait) {
            Ok(l) => Some(l),
            Err(flashtier_flash::Error::NoSpace) => {
                flash.append_blocking(self.0.reclaim_stream, &w, wait).ok()
            }
            Err(_) => None,
        }
    }
}

impl ReclaimHandler for Handler {
    fn decide(&self, rec: &RecordMeta) -> Decision {
        if let Some(keep) = self.0.warm.keeps(rec) {
            return if keep { Decision::Keep } else { Decision::Drop };
        }
        let wm = self.0.wm_persisted.load(Ordering::Acquire);
        if let Some(keep) = self.0.fence.keeps(rec, wm) {
            return if keep { Decision::Keep } else { Decision::Drop };
        }
        let is_block = RecordKind::of(rec.kind, rec.key_id) == RecordKind::Block;
        let mut index = self.0.index.lock();
        let loc = rec.location.pack();
        if RecordKind::of(rec.kind, rec.key_id) == RecordKind::Watermark {
            return if index.wm_loc == Some(loc) {
                Decision::Keep
            } else {
                Decision::Drop
            };
        }
        // Every record reclaim looks at spends the budget, so a read count is lowered about
        // once per `capacity_blocks` appends however many records reclaim keeps.
        let age = self.0.take_age();
        // A dropped block record, told to `fence` once the index lock is released.
        let mut note = None;
        let decision = match index.map.get(rec.key_id) {
            Some(e) if e.loc == loc => {
                if e.dirty
                    || rec.version > self.0.wm_persisted.load(Ordering::Acquire)
                    || index.writing.contains(&rec.key_id)
                {
                    add(&self.0.stats.moved_dirty_blocks, 1);
                    Decision::Keep
                } else if index.map.referenced(rec.key_id) {
                    // Read since its count was last used up: worth a copy. The count is
                    // lowered only within the age budget.
                    if age {
                        index.map.take_ref(rec.key_id);
                    }
                    add(&self.0.stats.moved_clean_blocks, 1);
                    Decision::Keep
                } else {
                    index.remove_at(rec.key_id, loc);
                    add(&self.0.stats.replacements, 1);
                    note = Some(None);
                    Decision::Drop
                }
            }
            other => {
                if is_block {
                    note = Some(other.map(|e| e.version));
                }
                Decision::Drop
            }
        };
        drop(index);
        if let Some(indexed) = note {
            self.0
                .fence
                .dropped(&self.0, rec.key_id, rec.version, indexed);
        }
        decision
    }

    fn relocated(&self, rec: &RecordMeta, new: Location) -> bool {
        if let Some(keep) = self.0.warm.keeps(rec) {
            // Found by the recovery scan, not through the index: the copy stays live.
            return keep;
        }
        let wm = self.0.wm_persisted.load(Ordering::Acquire);
        if let Some(keep) = self.0.fence.keeps(rec, wm) {
            return keep;
        }
        let mut index = self.0.index.lock();
        let old = rec.location.pack();
        if RecordKind::of(rec.kind, rec.key_id) == RecordKind::Watermark {
            if index.wm_loc == Some(old) {
                index.wm_loc = Some(new.pack());
                return true;
            }
            return false;
        }
        match index.map.get(rec.key_id) {
            Some(e) if e.loc == old => index.map.set_loc(rec.key_id, new.pack()),
            _ => false,
        }
    }

    fn lost(&self, recs: &[LostRecord]) {
        let flash = self.0.flash.get().and_then(Weak::upgrade);
        let (mut again, mut clean, mut gone) = (0u64, 0u64, 0u64);
        for r in recs {
            let m = &r.meta;
            let loc = m.location.pack();
            let mut index = self.0.index.lock();
            let record_kind = RecordKind::of(m.kind, m.key_id);
            if record_kind == RecordKind::Watermark {
                if index.wm_loc == Some(loc) {
                    index.wm_loc = None;
                    self.0.wm_lost.store(true, Ordering::Release);
                }
                continue;
            }
            // Warm-restart records are written with a sync that reports their failure.
            if record_kind != RecordKind::Block {
                continue;
            }
            self.0.fence.raise(m.key_id, m.version);
            let Some(e) = index.map.get(m.key_id).filter(|e| e.loc == loc) else {
                continue;
            };
            if !e.dirty {
                index.remove_at(m.key_id, loc);
                clean += 1;
                continue;
            }
            let appended = match (&flash, &r.record) {
                (Some(f), Some(rec)) => self.append_again(f, m, &rec.value),
                _ => None,
            };
            match appended {
                Some(new) => {
                    index.map.set_loc(m.key_id, new.pack());
                    again += 1;
                }
                None => {
                    index.remove_at(m.key_id, loc);
                    gone += 1;
                    add(&self.0.stats.dirty_lost, 1);
                    log::error!(
                        "cache device lost dirty block {} (version {}): its write failed and \
                         no device takes it again; reads now return the backing's older data",
                        m.key_id,
                        m.version
                    );
                }
            }
        }
        if again + clean + gone > 0 {
            log::warn!(
                "cache device write failed: {again} dirty blocks appended again, {clean} clean \
                 blocks dropped from the cache, {gone} dirty blocks lost"
            );
        }
    }

    fn before_erase(&self) -> Result<(), String> {
        // Raised floors must be durable before the dropped records disappear.
        match self.0.flash.get().and_then(Weak::upgrade) {
            Some(flash) => self.0.fence.persist_blocking(&self.0, &flash),
            None => Ok(()),
        }
    }

    fn evicted(&self, rec: &RecordMeta) {
        if RecordKind::of(rec.kind, rec.key_id) != RecordKind::Block {
            return;
        }
        let mut index = self.0.index.lock();
        let indexed = index.map.get(rec.key_id).map(|e| e.version);
        let current = indexed == Some(rec.version);
        let removed = index.remove_at(rec.key_id, rec.location.pack());
        drop(index);
        let newer = if current { None } else { indexed };
        self.0
            .fence
            .dropped(&self.0, rec.key_id, rec.version, newer);
        if let Some(e) = removed {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::KIND_BLOCK;

    fn shared() -> Arc<Shared> {
        Arc::new(Shared {
            index: Mutex::new(Index::new(0)),
            wm_persisted: AtomicU64::new(u64::MAX),
            stats: BlockStats::default(),
            warm: Default::default(),
            fence: Fence::new(1024, 4096, 1 << 20, 64 << 20, 0),
            flash: OnceLock::new(),
            reclaim_stream: 1,
            wm_lost: AtomicBool::new(false),
            age_budget: AtomicU64::new(0),
        })
    }

    fn meta(lba: u64, loc: Location) -> RecordMeta {
        RecordMeta {
            location: loc,
            key_id: lba,
            version: 1,
            kind: KIND_BLOCK,
            exptime: 0,
            flags: 0,
            len: 4096,
            seq: 1,
        }
    }

    #[test]
    fn age_budget_is_one_per_append_up_to_the_cap() {
        let s = shared();
        for _ in 0..10 {
            s.aged_one(4);
        }
        assert_eq!(s.age_budget.load(Ordering::Relaxed), 4);
        assert!((0..4).all(|_| s.take_age()));
        assert!(!s.take_age());
    }

    #[test]
    fn reclaim_lowers_a_read_count_only_within_the_budget() {
        let s = shared();
        let h = Handler(Arc::clone(&s));
        let loc = Location::new(4096, 4096).expect("location");
        {
            let mut index = s.index.lock();
            index.put(7, loc.pack(), 1, false);
            index.lookup(7); // one read: count 1
        }
        // No budget: every pass keeps the read block and leaves its count.
        for _ in 0..5 {
            assert_eq!(h.decide(&meta(7, loc)), Decision::Keep);
        }
        assert!(s.index.lock().map.referenced(7));
        // One append's worth of budget: this pass keeps it and uses the count up...
        s.aged_one(100);
        assert_eq!(h.decide(&meta(7, loc)), Decision::Keep);
        assert!(!s.index.lock().map.referenced(7));
        // ...and the next drops it (clean, not read since).
        assert_eq!(h.decide(&meta(7, loc)), Decision::Drop);
        assert!(s.index.lock().map.get(7).is_none());
        assert_eq!(s.stats.moved_clean_blocks.load(Ordering::Relaxed), 6);
        assert_eq!(s.stats.replacements.load(Ordering::Relaxed), 1);
    }
}
