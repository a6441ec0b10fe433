//! The flash engine's [`ReclaimHandler`]: which flash records survive reclaim. A record is
//! *referenced* when its key's slot is a flash slot at its location, or a RAM slot whose
//! record's home is its location. Kept: the newest flush markers; tombstones while flash has
//! room; referenced live records while flash has room, else (a RAM copy's home is dropped
//! first when `ram_exclusive`: RAM serves it and writes it again at eviction) those hit since
//! the last pass (frequency decremented) and unhit ones within the write budget
//! (`WRITE_BUDGET`) or small ones past it (`SMALL_KEEP_DIVISOR`). Otherwise
//! dropped: a flash slot is removed (an eviction), a RAM copy only loses its home. A relocated
//! record moves its slot or home; a failed chunk write (`lost`) costs homes and flash-only
//! items, and its markers are appended again. Full rules: docs/eviction.md.
//!
//! [`Reclaim`] is the policy, over the tier and the RAM it reaches ([`RamAccess`]); [`Handler`]
//! is what the engine holds, and reaches the cache (its [`Host`]) once it is built.
//!
//! # Threads
//! The engine's reclaimer thread, no engine lock held; one index shard lock per call. Until
//! the cache is built, calls wait on the gate; if it never comes up, everything is dropped.
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use flashtier_flash::{Decision, Location, LostRecord, ReclaimHandler, RecordMeta};
use parking_lot::{Condvar, Mutex};

use crate::flash_tier::kv_record::KvKind;
use crate::flash_tier::tier::{FlashTier, Host};
use crate::flash_tier::{entry_of, home_word, RamAccess};
use crate::ledger::Cause;
use crate::meta::Counters;
use crate::ram::index::{Entry, Pos, Shard, Tier};
use crate::ram::record::HOME_OLDER;

enum Gate<H> {
    Waiting,
    Ready(Weak<H>),
    Closed,
}

/// The handler given to the engine at open; answers through `H` (the cache) once it is
/// built ([`Handler::ready`]).
pub(crate) struct Handler<H> {
    gate: Mutex<Gate<H>>,
    cv: Condvar,
}

impl<H: Host> Handler<H> {
    pub fn new() -> Self {
        Self {
            gate: Mutex::new(Gate::Waiting),
            cv: Condvar::new(),
        }
    }

    /// The cache is built: start answering.
    pub fn ready(&self, host: Weak<H>) {
        *self.gate.lock() = Gate::Ready(host);
        self.cv.notify_all();
    }

    /// The cache will not come up (or is going away): drop everything.
    pub fn close(&self) {
        *self.gate.lock() = Gate::Closed;
        self.cv.notify_all();
    }

    fn host(&self) -> Option<Arc<H>> {
        let mut g = self.gate.lock();
        loop {
            match &*g {
                Gate::Waiting => self.cv.wait(&mut g),
                Gate::Ready(w) => return w.upgrade(),
                Gate::Closed => return None,
            }
        }
    }

    /// Run `f` with the reclaim policy over the cache's flash tier, once the cache is built;
    /// `None` if it never comes up or is gone.
    fn with<T>(&self, f: impl FnOnce(Reclaim<'_, H::Ram>) -> T) -> Option<T> {
        let host = self.host()?;
        let (tier, ram) = host.parts()?;
        Some(f(Reclaim::new(tier, ram)))
    }
}

impl<H: Host> ReclaimHandler for Handler<H> {
    fn decide(&self, rec: &RecordMeta) -> Decision {
        self.with(|r| r.decide(rec)).unwrap_or(Decision::Drop)
    }

    fn relocated(&self, rec: &RecordMeta, new: Location) -> bool {
        self.with(|r| r.relocated(rec, new)).unwrap_or(false)
    }

    fn evicted(&self, rec: &RecordMeta) {
        self.with(|r| r.evicted(rec));
    }

    fn notes_on_eviction(&self) -> bool {
        true
    }

    fn lost(&self, recs: &[LostRecord]) {
        self.with(|r| r.lost(recs));
    }
}

/// Where a record is referenced from.
enum Ref {
    Flash(Pos, Entry),
    Ram(Pos, Entry, u64),
}

/// Reclaim's rules over `tier` and the RAM it reaches (see the module docs).
pub(crate) struct Reclaim<'a, R> {
    tier: &'a FlashTier,
    ram: &'a R,
}

impl<'a, R: RamAccess> Reclaim<'a, R> {
    pub(crate) fn new(tier: &'a FlashTier, ram: &'a R) -> Self {
        Self { tier, ram }
    }

    fn find_ref(&self, shard: &Shard<'_>, m: &RecordMeta) -> Option<Ref> {
        let packed = m.location.pack();
        let home = home_word(m.location);
        let mut ram_loc = None;
        let found = shard.find(m.key_id, |e| match e.tier {
            Tier::Flash => e.lower_loc() == packed,
            Tier::Ram => {
                let hit = self
                    .ram
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

    /// True if the key's index entry is a RAM version with no flash home while an older
    /// version may be on flash (dirty, or its home dropped).
    fn newest_only_in_ram(&self, shard: &Shard<'_>, key_id: u64) -> bool {
        shard
            .find(key_id, |e| {
                e.tier == Tier::Ram
                    && self
                        .ram
                        .record(e.loc)
                        .is_some_and(|r| r.header.home_loc().is_none() && r.header.flash_behind())
            })
            .is_some()
    }

    fn set_ram_home(&self, loc: u64, home: u64) {
        if let Some(r) = self.ram.record(loc) {
            r.set_home(home);
        }
    }

    fn expired(&self, m: &RecordMeta) -> bool {
        m.exptime != 0 && m.exptime <= self.tier.clock.now()
    }

    /// Forget the record `m` refers to: remove a flash slot, or clear a RAM copy's home.
    fn drop_ref(&self, shard: &mut Shard<'_>, r: Ref, m: &RecordMeta) {
        match r {
            Ref::Flash(pos, e) => {
                shard.remove(pos);
                let expired = self.expired(m);
                let cause = if expired {
                    Cause::Expired
                } else if self.recently_appended(m) {
                    Cause::ReclaimYoung
                } else {
                    Cause::ReclaimOld
                };
                self.ram.meta().departed(m.key_id, cause, e.freq > 0);
                if !expired {
                    Counters::add(&self.tier.counters.evicted, 1);
                }
            }
            Ref::Ram(_, _, loc) => self.set_ram_home(loc, HOME_OLDER),
        }
    }

    /// True when fewer versions were appended since `m` than half the items the cache holds
    /// (half a turnover; a FIFO would drop at about one): how the stats tell a recent write
    /// dropped from a cold item dropped.
    fn recently_appended(&self, m: &RecordMeta) -> bool {
        self.tier.current_version().saturating_sub(m.version) < self.ram.slots().len() / 2
    }

    /// The engine's `decide`: keep, drop or forget record `m` of a victim segment.
    pub(crate) fn decide(&self, m: &RecordMeta) -> Decision {
        let tier = self.tier;
        match KvKind::of(m) {
            KvKind::Put => {}
            KvKind::Flush { .. } if tier.is_current_marker(m) => return Decision::Keep,
            KvKind::Tombstone if tier.tombstone_needed(m) => return Decision::Keep,
            _ => return Decision::Drop,
        }
        let mut shard = self.ram.slots().lock(m.key_id);
        let Some(r) = self.find_ref(&shard, m) else {
            // Superseded. If the newest version is only in RAM (not yet written back), this
            // record still hides older ones from recovery: leave a note in its place.
            return if self.newest_only_in_ram(&shard, m.key_id) {
                Decision::Forget
            } else {
                Decision::Drop
            };
        };
        let expired = self.expired(m);
        let (pos, e) = match &r {
            Ref::Flash(p, e) | Ref::Ram(p, e, _) => (*p, *e),
        };
        let c = &tier.counters;
        if !expired && matches!(r, Ref::Ram(..)) && tier.closed.load(Ordering::SeqCst) {
            // A clean shutdown is under way: RAM is about to go, so its flash copy is the
            // only one a restart will have. Keep it (a relocation costs what appending it
            // again at close would).
            return Decision::Keep;
        }
        // One look at the free segments per record (it takes the engine's state lock).
        let room = tier.has_room();
        if !expired && matches!(r, Ref::Ram(..)) && tier.tiering.ram_exclusive() && !room {
            // RAM serves this version: free its flash copy rather than rewrite it; RAM
            // eviction writes it again (`has_room` is true while no device takes writes, so
            // never then). RAM then adds to what the cache holds.
            Counters::add(&c.reclaim_dropped_in_ram, 1);
            self.drop_ref(&mut shard, r, m);
            return Decision::Forget;
        }
        if !expired && e.freq > 0 {
            shard.set(
                pos,
                Entry {
                    freq: e.freq - 1,
                    ..e
                },
            );
            if !room {
                Counters::add(&c.reclaim_kept_hit, 1);
            }
            return Decision::Keep;
        }
        if !expired && !tier.tiering.drop_unread() {
            // Unread items kept for room or budget come after every read and small one
            // within the victim's keep limit (`KeepIfRoom`): the limit evicts them first.
            if room {
                return Decision::KeepIfRoom;
            }
            if tier.small_record(m.len) {
                Counters::add(&c.reclaim_kept_small, 1);
                return Decision::Keep;
            }
            if tier.compaction_budget() {
                Counters::add(&c.reclaim_kept_unhit, 1);
                return Decision::KeepIfRoom;
            }
            Counters::add(
                if self.recently_appended(m) {
                    &c.reclaim_dropped_young
                } else {
                    &c.reclaim_dropped_old
                },
                1,
            );
        }
        self.drop_ref(&mut shard, r, m);
        // Indexed until now: an older version of the key in another segment must not come
        // back at recovery, so the engine leaves a drop note.
        Decision::Forget
    }

    /// The engine's `relocated`: record `m` was rewritten at `new`; true if its slot or
    /// home followed.
    pub(crate) fn relocated(&self, m: &RecordMeta, new: Location) -> bool {
        if KvKind::of(m) != KvKind::Put {
            // A kept marker or tombstone: nothing points at it; its new copy is live.
            return true;
        }
        let mut shard = self.ram.slots().lock(m.key_id);
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
        if moved {
            Counters::add(&self.tier.counters.relocated, 1);
        }
        moved
    }

    /// The engine's `evicted`: record `m` was dropped with its segment.
    pub(crate) fn evicted(&self, m: &RecordMeta) {
        let mut shard = self.ram.slots().lock(m.key_id);
        if let Some(r) = self.find_ref(&shard, m) {
            self.drop_ref(&mut shard, r, m);
        }
    }

    /// The engine could not write these records (see the module docs).
    pub(crate) fn lost(&self, recs: &[LostRecord]) {
        let tier = self.tier;
        let (mut in_ram, mut lost, mut again, mut failed) = (0u64, 0u64, 0u64, 0u64);
        for r in recs {
            let m = &r.meta;
            if KvKind::of(m) != KvKind::Put {
                if tier.append_again(m, r.record.as_ref()) {
                    again += 1;
                } else {
                    failed += 1;
                }
                continue;
            }
            let mut shard = self.ram.slots().lock(m.key_id);
            match self.find_ref(&shard, m) {
                Some(Ref::Ram(_, _, loc)) => {
                    self.set_ram_home(loc, HOME_OLDER);
                    in_ram += 1;
                }
                Some(Ref::Flash(pos, _)) => {
                    shard.remove(pos);
                    self.ram.meta().departed(m.key_id, Cause::Lost, false);
                    lost += 1;
                }
                None => {}
            }
        }
        let c = &tier.counters;
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

/// Reclaim's rules on a flash tier alone, over a fake RAM.
#[cfg(test)]
mod tests {
    use flashtier_flash::{kind, Record};

    use super::*;
    use crate::flash_tier::kv_record::KvRecord;
    use crate::flash_tier::testing::{append_put, meta_of, open, put_flash, FakeRam};
    use crate::flash_tier::STREAM;
    use crate::ledger::MISS_NAMES;
    use crate::ram::record::HOME_VALID;

    const VALUE: [u8; 2000] = [9; 2000];

    /// Flash past what the tier counts as room, writes past any budget: reclaim drops unhit
    /// items from here on.
    fn no_room_no_budget(tier: &FlashTier) {
        crate::knobs::set(&tier.tiering, &tier.flash, "drop_under", "100000").unwrap();
        crate::knobs::set(&tier.tiering, &tier.flash, "write_budget", "0").unwrap();
        append_put(tier, 1, b"written", &VALUE);
        tier.flash.flush().wait().unwrap();
        assert!(!tier.has_room() && !tier.compaction_budget());
    }

    fn misses(ram: &FakeRam, key_id: u64) -> &'static str {
        ram.meta.ledger.missed(key_id);
        let counts = ram.meta.ledger.counts();
        let (name, _) = counts.iter().find(|(_, n)| *n == 1).unwrap();
        MISS_NAMES.iter().find(|n| *n == name).unwrap()
    }

    #[test]
    fn an_unhit_flash_item_is_kept_while_flash_has_room_then_dropped() {
        let (tier, ram) = open("reclaim-unhit", |_| {});
        let (_, m) = put_flash(&tier, &ram, b"k", &VALUE, 0);
        let r = Reclaim::new(&tier, &ram);
        assert_eq!(r.decide(&m), Decision::KeepIfRoom);
        assert!(ram.slot(m.key_id).is_some());
        no_room_no_budget(&tier);
        assert_eq!(
            r.decide(&m),
            Decision::Forget,
            "a drop note hides older versions"
        );
        assert!(ram.slot(m.key_id).is_none(), "an eviction");
        let c = &ram.meta.counters;
        assert_eq!(Counters::get(&c.evictions), 1);
        assert_eq!(Counters::get(&c.evicted_unfetched), 1);
        assert_eq!(Counters::get(&tier.counters.evicted), 1);
        assert_eq!(Counters::get(&tier.counters.reclaim_dropped_old), 1);
        assert_eq!(misses(&ram, m.key_id), "get_misses_reclaimed_old");
    }

    #[test]
    fn a_hit_item_is_kept_and_its_hit_count_lowered() {
        let (tier, ram) = open("reclaim-hit", |_| {});
        no_room_no_budget(&tier);
        let (_, m) = put_flash(&tier, &ram, b"k", &VALUE, 2);
        let r = Reclaim::new(&tier, &ram);
        assert_eq!(r.decide(&m), Decision::Keep);
        assert_eq!(ram.slot(m.key_id).unwrap().freq, 1);
        assert_eq!(r.decide(&m), Decision::Keep);
        assert_eq!(r.decide(&m), Decision::Forget, "no hits left");
        assert_eq!(Counters::get(&tier.counters.reclaim_kept_hit), 2);
    }

    #[test]
    fn a_ram_copys_flash_copy_is_freed_when_ram_exclusive_and_kept_at_close() {
        let (tier, ram) = open("reclaim-ram", |_| {});
        no_room_no_budget(&tier);
        let key_id = ram.slots.hash(b"k");
        let loc = append_put(&tier, key_id, b"k", &VALUE);
        let m = meta_of(&tier, key_id, loc, VALUE.len());
        let at = ram.put_ram(key_id, b"k", &VALUE, home_word(loc));
        let r = Reclaim::new(&tier, &ram);
        assert_eq!(r.decide(&m), Decision::Forget);
        assert_eq!(ram.record(at).unwrap().header.home, HOME_OLDER);
        assert_eq!(Counters::get(&tier.counters.reclaim_dropped_in_ram), 1);
        assert_eq!(
            Counters::get(&ram.meta.counters.evictions),
            0,
            "RAM still serves it"
        );
        // A clean shutdown under way: RAM is about to go, its flash copy is kept.
        ram.record(at).unwrap().set_home(home_word(loc));
        assert!(tier.begin_close());
        assert_eq!(r.decide(&m), Decision::Keep);
    }

    #[test]
    fn a_superseded_record_leaves_a_note_only_while_the_newest_is_in_ram_alone() {
        let (tier, ram) = open("reclaim-superseded", |_| {});
        let key_id = ram.slots.hash(b"k");
        let loc = append_put(&tier, key_id, b"k", &VALUE);
        let m = meta_of(&tier, key_id, loc, VALUE.len());
        let r = Reclaim::new(&tier, &ram);
        assert_eq!(r.decide(&m), Decision::Drop, "nothing refers to it");
        let at = ram.put_ram(key_id, b"k", b"new", HOME_OLDER);
        assert_eq!(r.decide(&m), Decision::Forget, "the newest is in RAM only");
        ram.record(at).unwrap().set_home(HOME_VALID | 1);
        assert_eq!(r.decide(&m), Decision::Drop, "the newest is on flash");
    }

    #[test]
    fn markers_and_tombstones_follow_their_own_rules() {
        let (tier, ram) = open("reclaim-markers", |_| {});
        let r = Reclaim::new(&tier, &ram);
        let loc = tier.append(STREAM, &KvRecord::Flush { at: 0 }).unwrap();
        let mut marker = meta_of(&tier, 0, loc, 0);
        marker.kind = KvRecord::Flush { at: 0 }
            .encode(0, &mut Default::default())
            .kind;
        assert_eq!(r.decide(&marker), Decision::Keep, "the newest marker");
        tier.append(STREAM, &KvRecord::Flush { at: 0 }).unwrap();
        assert_eq!(r.decide(&marker), Decision::Drop, "an older marker");
        let loc = tier
            .append(
                STREAM,
                &KvRecord::Tombstone {
                    key_id: 3,
                    key: b"t",
                },
            )
            .unwrap();
        let mut tomb = meta_of(&tier, 3, loc, 0);
        tomb.kind = kind::TOMBSTONE;
        assert_eq!(r.decide(&tomb), Decision::Keep, "while flash has room");
        no_room_no_budget(&tier);
        assert_eq!(r.decide(&tomb), Decision::Drop, "no horizon, no room");
    }

    #[test]
    fn a_relocation_moves_the_slot_or_the_home_that_refers_to_the_record() {
        let (tier, ram) = open("reclaim-relocate", |_| {});
        let r = Reclaim::new(&tier, &ram);
        let (_, m) = put_flash(&tier, &ram, b"f", &VALUE, 1);
        let new = append_put(&tier, m.key_id, b"f", &VALUE);
        assert!(r.relocated(&m, new));
        assert_eq!(ram.slot(m.key_id), Some(entry_of(new, 1)));
        assert!(
            !r.relocated(&m, new),
            "the old location is no one's any more"
        );
        let key_id = ram.slots.hash(b"r");
        let loc = append_put(&tier, key_id, b"r", &VALUE);
        let at = ram.put_ram(key_id, b"r", &VALUE, home_word(loc));
        let new = append_put(&tier, key_id, b"r", &VALUE);
        assert!(r.relocated(&meta_of(&tier, key_id, loc, VALUE.len()), new));
        assert_eq!(ram.record(at).unwrap().header.home, home_word(new));
        assert_eq!(Counters::get(&tier.counters.relocated), 2);
    }

    #[test]
    fn a_lost_write_costs_flash_only_items_and_ram_copies_their_home() {
        let (tier, ram) = open("reclaim-lost", |_| {});
        let r = Reclaim::new(&tier, &ram);
        let (_, flash_only) = put_flash(&tier, &ram, b"f", &VALUE, 0);
        let key_id = ram.slots.hash(b"r");
        let loc = append_put(&tier, key_id, b"r", &VALUE);
        let at = ram.put_ram(key_id, b"r", &VALUE, home_word(loc));
        let in_ram = meta_of(&tier, key_id, loc, VALUE.len());
        let lost = |meta: RecordMeta| LostRecord {
            meta,
            record: None::<Record>,
        };
        r.lost(&[lost(flash_only), lost(in_ram)]);
        assert!(ram.slot(flash_only.key_id).is_none());
        assert_eq!(ram.record(at).unwrap().header.home, HOME_OLDER);
        assert_eq!(Counters::get(&tier.counters.write_failed_lost), 1);
        assert_eq!(Counters::get(&tier.counters.write_failed_in_ram), 1);
        assert_eq!(misses(&ram, flash_only.key_id), "get_misses_lost");
    }
}
