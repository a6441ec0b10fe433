//! The reclaim callbacks ([`Handler`]): what the flash engine's reclaimer keeps, moves, drops
//! or appends again.
//!
//! Invariant: the handler keeps every record newer than the persisted clean watermark, dirty
//! blocks, blocks being written back and this run's warm-restart records, so a newer version is
//! never evicted while an older dirty copy could come back at restart. Clean blocks with a
//! read count are moved, other clean blocks dropped; reclaim lowers counts at the rate of the
//! cache's own appends, not once per pass; a lost dirty record is appended again (same
//! version) or counted in `dirty_lost`. Details: docs/block-cache.md "Reclaim".
//!
//! Threads: the engine's reclaimer calls the handler; it shares [`Blocks`] with
//! [`crate::block_io::BlockIo`] and [`Durability`] with the cache. The index mutex is the one
//! lock here.
use std::sync::Arc;
use std::time::Duration;

use flashtier_flash::{Decision, Flash, Location, LostRecord, ReclaimHandler, RecordMeta};

use crate::blocks::Blocks;
use crate::durability::Durability;
use crate::meta_log::STREAM_DATA;
use crate::open_gate::OpenGate;
use crate::record::{BlockRecord, RecordKind};
use crate::stats::add;

/// The flash engine's reclaim callbacks: keep dirty blocks, anything newer than the
/// persisted watermark and recently read clean blocks; drop (evict) other clean blocks.
pub(crate) struct Handler {
    pub(crate) blocks: Arc<Blocks>,
    pub(crate) durable: Arc<Durability>,
    /// Every callback waits here until open has rebuilt the index (see `open_gate`).
    pub(crate) gate: Arc<OpenGate>,
}

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
            Err(flashtier_flash::Error::NoSpace) => flash
                .append_blocking(self.durable.reclaim_stream(), &w, wait)
                .ok(),
            Err(_) => None,
        }
    }
}

impl ReclaimHandler for Handler {
    fn decide(&self, rec: &RecordMeta) -> Decision {
        self.gate.wait();
        let d = &self.durable;
        if let Some(keep) = d.warm.keeps(rec) {
            return if keep { Decision::Keep } else { Decision::Drop };
        }
        if let Some(keep) = d.fence.keeps(rec, d.wm_persisted()) {
            return if keep { Decision::Keep } else { Decision::Drop };
        }
        let is_block = RecordKind::of(rec.kind, rec.key_id) == RecordKind::Block;
        let loc = rec.location.pack();
        let stats = d.stats();
        // A dropped block record, told to `fence` once the index lock is released.
        let mut note = None;
        let decision = self.blocks.locked(|index| {
            if RecordKind::of(rec.kind, rec.key_id) == RecordKind::Watermark {
                return if index.wm_loc() == Some(loc) {
                    Decision::Keep
                } else {
                    Decision::Drop
                };
            }
            // Every record reclaim looks at spends the budget, so a read count is lowered
            // about once per `capacity_blocks` appends however many records reclaim keeps.
            let age = self.blocks.take_age();
            match index.get(rec.key_id) {
                Some(e) if e.loc == loc => {
                    if e.dirty || rec.version > d.wm_persisted() || index.is_writing(rec.key_id) {
                        add(&stats.moved_dirty_blocks, 1);
                        Decision::Keep
                    } else if index.referenced(rec.key_id) {
                        // Read since its count was last used up: worth a copy. The count is
                        // lowered only within the age budget.
                        if age {
                            index.take_ref(rec.key_id);
                        }
                        add(&stats.moved_clean_blocks, 1);
                        Decision::Keep
                    } else if self.blocks.take_fill(index.len() as u64) {
                        // Below the fill line: room for it, keep the cache full.
                        add(&stats.moved_fill_blocks, 1);
                        Decision::Keep
                    } else {
                        index.remove_at(rec.key_id, loc);
                        self.blocks.dropped_clean();
                        add(&stats.replacements, 1);
                        note = Some(false);
                        Decision::Drop
                    }
                }
                other => {
                    if is_block {
                        note = Some(other.is_some_and(|e| shadows(&e, rec.version)));
                    }
                    Decision::Drop
                }
            }
        });
        if let Some(shadowed) = note {
            d.fence
                .dropped(d.log(), &self.blocks, rec.key_id, rec.version, shadowed);
        }
        decision
    }

    fn relocated(&self, rec: &RecordMeta, new: Location) -> bool {
        self.gate.wait();
        let d = &self.durable;
        if let Some(keep) = d.warm.keeps(rec) {
            // Found by the recovery scan, not through the index: the copy stays live.
            return keep;
        }
        if let Some(keep) = d.fence.keeps(rec, d.wm_persisted()) {
            return keep;
        }
        let old = rec.location.pack();
        self.blocks.locked(|index| {
            if RecordKind::of(rec.kind, rec.key_id) == RecordKind::Watermark {
                if index.wm_loc() == Some(old) {
                    index.set_wm_loc(Some(new.pack()));
                    return true;
                }
                return false;
            }
            match index.get(rec.key_id) {
                Some(e) if e.loc == old => index.set_loc(rec.key_id, new.pack()),
                _ => false,
            }
        })
    }

    fn lost(&self, recs: &[LostRecord]) {
        self.gate.wait();
        let d = &self.durable;
        let flash = d.flash();
        let (mut again, mut clean, mut gone) = (0u64, 0u64, 0u64);
        for r in recs {
            let m = &r.meta;
            let loc = m.location.pack();
            let record_kind = RecordKind::of(m.kind, m.key_id);
            self.blocks.locked(|index| {
                if record_kind == RecordKind::Watermark {
                    if index.wm_loc() == Some(loc) {
                        index.set_wm_loc(None);
                        d.set_wm_lost();
                    }
                    return;
                }
                // Warm-restart records are written with a sync that reports their failure.
                if record_kind != RecordKind::Block {
                    return;
                }
                d.fence.raise(m.key_id, m.version);
                let Some(e) = index.get(m.key_id).filter(|e| e.loc == loc) else {
                    return;
                };
                if !e.dirty {
                    index.remove_at(m.key_id, loc);
                    clean += 1;
                    return;
                }
                let appended = match (&flash, &r.record) {
                    (Some(f), Some(rec)) => self.append_again(f, m, &rec.value),
                    _ => None,
                };
                match appended {
                    Some(new) => {
                        index.set_loc(m.key_id, new.pack());
                        again += 1;
                    }
                    None => {
                        index.remove_at(m.key_id, loc);
                        gone += 1;
                        add(&d.stats().dirty_lost, 1);
                        log::error!(
                            "cache device lost dirty block {} (version {}): its write failed \
                             and no device takes it again; reads now return the backing's \
                             older data",
                            m.key_id,
                            m.version
                        );
                    }
                }
            });
        }
        if again + clean + gone > 0 {
            log::warn!(
                "cache device write failed: {again} dirty blocks appended again, {clean} clean \
                 blocks dropped from the cache, {gone} dirty blocks lost"
            );
        }
    }

    fn before_erase(&self) -> Result<(), String> {
        self.gate.wait();
        // Raised floors must be durable before the dropped records disappear.
        let d = &self.durable;
        match d.flash() {
            Some(flash) => d.fence.persist_blocking(d.log(), &self.blocks, &flash),
            None => Ok(()),
        }
    }

    fn segments_freed(&self, _n: u32) {
        // Writers waiting for a free segment retry now, not at their next poll.
        self.blocks.space_freed();
    }

    fn evicted(&self, rec: &RecordMeta) {
        self.gate.wait();
        if RecordKind::of(rec.kind, rec.key_id) != RecordKind::Block {
            return;
        }
        let (indexed, removed) = self.blocks.locked(|index| {
            let indexed = index.get(rec.key_id);
            (indexed, index.remove_at(rec.key_id, rec.location.pack()))
        });
        let shadowed = removed.is_none() && indexed.is_some_and(|e| shadows(&e, rec.version));
        let d = &self.durable;
        d.fence
            .dropped(d.log(), &self.blocks, rec.key_id, rec.version, shadowed);
        if let Some(e) = removed {
            if e.dirty {
                add(&d.stats().dirty_lost, 1);
                log::error!(
                    "cache device lost dirty block {} (version {})",
                    rec.key_id,
                    rec.version
                );
            }
        }
    }
}

/// Whether index entry `e`, at another location than a dropped record of its LBA at
/// `version`, shadows it: a dirty entry if newer (its version is known); a clean entry
/// always — the index holds the newest record of its LBA the cache has, so a clean entry
/// elsewhere is newer or a copy of the same record (see `Fence::dropped`).
fn shadows(e: &crate::index::Entry, version: u64) -> bool {
    e.version.is_none_or(|v| v > version)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::fence::Fence;
    use crate::record::KIND_BLOCK;
    use crate::stats::BlockStats;

    fn handler() -> Handler {
        let stats = Arc::new(BlockStats::default());
        let durable = Durability::new(Fence::new(1024, 4096, 1 << 20, 64 << 20, 0), 1, stats);
        durable.set_wm_persisted(u64::MAX);
        Handler {
            blocks: Arc::new(Blocks::default()),
            durable: Arc::new(durable),
            gate: Arc::new(OpenGate::opened()),
        }
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

    /// The engine's reclaimer runs from inside `Flash::open`, before open rebuilds the index:
    /// a decision then saw an empty index and dropped a dirty block's record (its segment
    /// erased, the block indexed there anyway). A decision now waits for the rebuilt index.
    #[test]
    fn a_decision_waits_until_open_has_rebuilt_the_index() {
        let mut h = handler();
        let gate = Arc::new(OpenGate::default());
        h.gate = Arc::clone(&gate);
        let h = Arc::new(h);
        let loc = Location::new(4096, 4096).expect("location");
        let rebuilding = gate.guard();
        let decision = {
            let h = Arc::clone(&h);
            std::thread::spawn(move || h.decide(&meta(7, loc)))
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !decision.is_finished(),
            "decided on an index not rebuilt yet"
        );
        // Open puts the dirty block back, then opens the gate.
        h.blocks.locked(|index| index.put(7, loc.pack(), 1, true));
        drop(rebuilding);
        assert_eq!(decision.join().expect("decide"), Decision::Keep);
        assert!(h.blocks.locked(|ix| ix.get(7).is_some()));
    }

    #[test]
    fn reclaim_lowers_a_read_count_only_within_the_budget() {
        let h = handler();
        let loc = Location::new(4096, 4096).expect("location");
        h.blocks.locked(|index| {
            index.put(7, loc.pack(), 1, false);
            index.lookup(7); // one read: count 1
        });
        // No budget: every pass keeps the read block and leaves its count.
        for _ in 0..5 {
            assert_eq!(h.decide(&meta(7, loc)), Decision::Keep);
        }
        assert!(h.blocks.locked(|ix| ix.referenced(7)));
        // One append's worth of budget: this pass keeps it and uses the count up...
        h.blocks.aged_one(100, 0, 0);
        assert_eq!(h.decide(&meta(7, loc)), Decision::Keep);
        assert!(!h.blocks.locked(|ix| ix.referenced(7)));
        // ...and the next drops it (clean, not read since).
        assert_eq!(h.decide(&meta(7, loc)), Decision::Drop);
        assert!(h.blocks.locked(|ix| ix.get(7).is_none()));
        let stats = h.durable.stats();
        assert_eq!(stats.moved_clean_blocks.load(Ordering::Relaxed), 6);
        assert_eq!(stats.replacements.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn below_the_fill_line_clean_blocks_are_moved_within_the_budget() {
        let h = handler();
        let (a, b) = (
            Location::new(4096, 4096).expect("location"),
            Location::new(8192, 4096).expect("location"),
        );
        h.blocks.locked(|index| {
            index.put(7, a.pack(), 1, false);
            index.put(8, b.pack(), 1, false);
        });
        h.blocks.set_capacity(1000);
        // One append's worth of budget (one move): block 7 is moved, block 8 dropped.
        h.blocks.aged_one(1000, 1, 0);
        assert_eq!(h.decide(&meta(7, a)), Decision::Keep);
        assert_eq!(h.decide(&meta(8, b)), Decision::Drop);
        let stats = h.durable.stats();
        assert_eq!(stats.moved_fill_blocks.load(Ordering::Relaxed), 1);
        assert_eq!(stats.replacements.load(Ordering::Relaxed), 1);
        // At the fill line nothing is moved for fill, budget or not.
        h.blocks.set_capacity(1);
        h.blocks.aged_one(1000, 8, 0);
        assert_eq!(h.decide(&meta(7, a)), Decision::Drop);
    }
}
