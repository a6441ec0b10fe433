//! The flash engine's [`ReclaimHandler`]: what survives when flash is full.
//!
//! A record is *referenced* when its key's index slot is a flash slot at its location, or a
//! RAM slot whose record's home is its location. Rules:
//! - `decide`: the newest immediate and delayed flush markers are kept; a tombstone is kept
//!   while flash has room and dropped otherwise (known limit: if reclaim drops a tombstone
//!   while an older copy of the key survives in a newer segment — a reclaim copy made before
//!   the delete — that key can come back after a restart); an unreferenced record is dropped. An expired referenced record is dropped and
//!   its slot removed (reclaimed). While flash has room (more free segments than the reserve
//!   plus `drop_under`, by default the high watermark: a forced or early reclaim) every
//!   referenced record is kept, unless the `drop_unread` knob is on (then only hit ones are).
//!   Otherwise a referenced record that was hit (slot frequency > 0) is
//!   kept and its frequency decremented (it must be hit again to survive the next pass); an
//!   unhit one is kept (compacted) while the write budget allows (device bytes written ≤
//!   [`WRITE_BUDGET`](crate::flash_tier::WRITE_BUDGET) × bytes stored), else dropped: a flash slot is removed (counted in `evictions` and
//!   `extstore_objects_evicted`), a RAM copy just loses its home (it stays in RAM and is
//!   appended again if RAM evicts it).
//! - `relocated`: move the slot or home to the new location if it still points at the old.
//! - `evicted`: the engine could not keep it (keep limit, expiry, unreadable): as a drop.
//! - `lost`: the chunk write holding these records failed (see `flash_tier` "Failed
//!   writes"): a RAM copy loses its home, a flash-only slot is removed and counted lost,
//!   tombstones and markers are appended again with their own version. Logged once per
//!   failed write.
//!
//! # Threads
//! Called on the engine's reclaimer thread with no engine lock held; takes one index shard
//! lock per call. Until the cache is built (recovery) calls wait on the gate; if the cache
//! never comes up the gate is closed and everything is dropped.
use std::sync::{Arc, Weak};

use flashtier_flash::{Decision, Location, LostRecord, ReclaimHandler, RecordMeta};
use parking_lot::{Condvar, Mutex};

use crate::engine::Inner;
use crate::flash_tier::kv_record::KvKind;
use crate::flash_tier::{entry_of, home_word, packed_of};
use crate::ram::index::{Pos, Shard, Tier};
use crate::ram::record::{F_FETCHED, HOME_OLDER};
use crate::stats::Counters;

enum Gate {
    Waiting,
    Ready(Weak<Inner>),
    Closed,
}

/// The handler given to the engine at open.
pub(crate) struct Handler {
    gate: Mutex<Gate>,
    cv: Condvar,
}

impl Handler {
    pub fn new() -> Self {
        Self {
            gate: Mutex::new(Gate::Waiting),
            cv: Condvar::new(),
        }
    }

    /// The cache is built: start answering.
    pub fn ready(&self, inner: Weak<Inner>) {
        *self.gate.lock() = Gate::Ready(inner);
        self.cv.notify_all();
    }

    /// The cache will not come up (or is going away): drop everything.
    pub fn close(&self) {
        *self.gate.lock() = Gate::Closed;
        self.cv.notify_all();
    }

    fn inner(&self) -> Option<Arc<Inner>> {
        let mut g = self.gate.lock();
        loop {
            match &*g {
                Gate::Waiting => self.cv.wait(&mut g),
                Gate::Ready(w) => return w.upgrade(),
                Gate::Closed => return None,
            }
        }
    }
}

/// Where a record is referenced from.
enum Ref {
    Flash(Pos, crate::ram::index::Entry),
    Ram(Pos, crate::ram::index::Entry, u64),
}

impl Inner {
    fn find_ref(&self, shard: &Shard<'_>, m: &RecordMeta) -> Option<Ref> {
        let packed = m.location.pack();
        let home = home_word(m.location);
        let mut ram_loc = None;
        let found = shard.find(m.key_id, |e| match e.tier {
            Tier::Flash => packed_of(&e) == packed,
            Tier::Ram => {
                let hit = self
                    .arena
                    .record(e.loc)
                    .is_some_and(|r| r.header.home == home);
                if hit {
                    ram_loc = Some(e.loc);
                }
                hit
            }
        })?;
        Some(match (found.1.tier, ram_loc) {
            (Tier::Ram, Some(l)) => Ref::Ram(found.0, found.1, l),
            _ => Ref::Flash(found.0, found.1),
        })
    }

    fn set_ram_home(&self, loc: u64, home: u64) {
        if let Some(r) = self.arena.record(loc) {
            r.set_home(home);
        }
    }

    /// Forget the record `m` refers to: remove a flash slot, or clear a RAM copy's home.
    fn drop_ref(&self, shard: &mut Shard<'_>, r: Ref, m: &RecordMeta) {
        let Some(ft) = &self.ft else { return };
        match r {
            Ref::Flash(pos, e) => {
                shard.remove(pos);
                let expired = m.exptime != 0 && m.exptime <= self.now();
                if expired {
                    Counters::add(&self.counters.reclaimed, 1);
                    if e.freq == 0 {
                        Counters::add(&self.counters.expired_unfetched, 1);
                    }
                } else {
                    Counters::add(&self.counters.evictions, 1);
                    if e.freq == 0 {
                        Counters::add(&self.counters.evicted_unfetched, 1);
                    }
                    Counters::add(&ft.counters.evicted, 1);
                }
            }
            Ref::Ram(_, _, loc) => self.set_ram_home(loc, HOME_OLDER),
        }
    }

    fn reclaim_decide(&self, m: &RecordMeta) -> Decision {
        let Some(ft) = &self.ft else {
            return Decision::Drop;
        };
        match KvKind::of(m) {
            KvKind::Put => {}
            KvKind::Flush { .. } if ft.is_current_marker(m) => return Decision::Keep,
            KvKind::Tombstone if ft.has_room() => return Decision::Keep,
            _ => return Decision::Drop,
        }
        let mut shard = self.index.lock(m.key_id);
        let Some(r) = self.find_ref(&shard, m) else {
            return Decision::Drop;
        };
        let expired = m.exptime != 0 && m.exptime <= self.now();
        let (pos, e) = match &r {
            Ref::Flash(p, e) | Ref::Ram(p, e, _) => (*p, *e),
        };
        let unread_ok = !ft.tiering.drop_unread();
        if !expired && e.freq == 0 && unread_ok && (ft.has_room() || ft.compaction_budget()) {
            return Decision::Keep;
        }
        if !expired && e.freq > 0 {
            shard.set(
                pos,
                crate::ram::index::Entry {
                    freq: e.freq - 1,
                    ..e
                },
            );
            return Decision::Keep;
        }
        self.drop_ref(&mut shard, r, m);
        Decision::Drop
    }

    fn reclaim_relocated(&self, m: &RecordMeta, new: Location) -> bool {
        if KvKind::of(m) != KvKind::Put {
            // A kept marker or tombstone: nothing points at it; its new copy is live.
            return true;
        }
        let mut shard = self.index.lock(m.key_id);
        let moved = match self.find_ref(&shard, m) {
            Some(Ref::Flash(pos, e)) => {
                shard.set(pos, entry_of(new, e.freq));
                true
            }
            Some(Ref::Ram(_, _, loc)) => {
                self.set_ram_home(loc, home_word(new));
                true
            }
            None => false,
        };
        if let (true, Some(ft)) = (moved, &self.ft) {
            Counters::add(&ft.counters.relocated, 1);
        }
        moved
    }

    fn reclaim_evicted(&self, m: &RecordMeta) {
        let mut shard = self.index.lock(m.key_id);
        if let Some(r) = self.find_ref(&shard, m) {
            self.drop_ref(&mut shard, r, m);
        }
    }

    /// The engine could not write these records (see the module docs).
    pub(crate) fn write_lost(&self, recs: &[LostRecord]) {
        let Some(ft) = &self.ft else { return };
        let (mut in_ram, mut lost, mut again, mut failed) = (0u64, 0u64, 0u64, 0u64);
        for r in recs {
            let m = &r.meta;
            if KvKind::of(m) != KvKind::Put {
                if ft.append_again(m, r.record.as_ref()) {
                    again += 1;
                } else {
                    failed += 1;
                }
                continue;
            }
            let mut shard = self.index.lock(m.key_id);
            match self.find_ref(&shard, m) {
                Some(Ref::Ram(_, _, loc)) => {
                    self.set_ram_home(loc, HOME_OLDER);
                    in_ram += 1;
                }
                Some(Ref::Flash(pos, _)) => {
                    shard.remove(pos);
                    lost += 1;
                }
                None => {}
            }
        }
        let c = &ft.counters;
        Counters::add(&c.write_failed_in_ram, in_ram);
        Counters::add(&c.write_failed_lost, lost);
        Counters::add(&c.markers_rewritten, again);
        Counters::add(&c.marker_failures, failed);
        let msg = format!(
            "flash write failed: {lost} items lost (on flash only), {in_ram} kept in RAM \
             without a flash copy (written again when RAM evicts them), {again} tombstones or \
             markers appended again ({failed} could not be)"
        );
        if lost > 0 || failed > 0 {
            log::error!("{msg}");
        } else {
            log::warn!("{msg}");
        }
    }
}

impl ReclaimHandler for Handler {
    fn decide(&self, rec: &RecordMeta) -> Decision {
        match self.inner() {
            Some(i) => i.reclaim_decide(rec),
            None => Decision::Drop,
        }
    }

    fn relocated(&self, rec: &RecordMeta, new: Location) -> bool {
        self.inner().is_some_and(|i| i.reclaim_relocated(rec, new))
    }

    fn evicted(&self, rec: &RecordMeta) {
        if let Some(i) = self.inner() {
            i.reclaim_evicted(rec);
        }
    }

    fn lost(&self, recs: &[LostRecord]) {
        if let Some(i) = self.inner() {
            i.write_lost(recs);
        }
    }
}

/// `F_FETCHED` decides the frequency a demoted RAM record's flash slot starts with.
pub(crate) fn demoted_freq(rflags: u8) -> u8 {
    u8::from(rflags & F_FETCHED != 0)
}
