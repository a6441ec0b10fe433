//! Eviction, `RamTier`'s: S3-FIFO at segment granularity (rules and measurements:
//! docs/eviction.md), and the segment drain shared with the sweeper. A victim segment is walked record by record:
//! records no slot points at are skipped, dead ones reclaimed, live ones copied to a log head
//! (a second chance) or evicted — handed to the tier below first (`lower`), which keeps them
//! as flash slots when there is flash; one it cannot take now (back-pressure) is handled per
//! [`OnLater`]: it stops a stalling writer's drain (victim back at its queue's front), else
//! is copied within RAM ("deferred"); where it could only be dropped (no room for the copy,
//! or a forced eviction) a writer that may still wait stops there too, rather than lose an
//! item only because the flash writer is behind (docs/eviction.md, "No forced drop while
//! flash is only behind").
//!
//! Invariant: a writer always makes progress (stalls end with its budgets, `append_wait_ms`
//! and then `DROP_WAIT_TIMES` × that). Copies use the free-segment reserve and never evict
//! recursively (no segment: the record is evicted); after `2 × segments + 8` evictions that
//! freed nothing, eviction is *forced* (`evicted_forced` counts the items it drops).
//!
//! # Threads
//! Runs in whichever writer (or the sweeper) holds `AllocState`; takes shard locks one at a
//! time, and head locks under them.
use std::sync::atomic::Ordering;

use crate::config::EvictionPolicy;
use crate::meta::Counters;
use crate::ram::arena::{AllocState, Log, RecordRef, Space};
use crate::ram::index::{Entry, Pos, Shard, Tier};
use crate::ram::lower::{LowerTier, Taken};
use crate::ram::record::{self, Header, F_FETCHED, F_FILLER};
use crate::ram::tier::{Env, RamTier};
use crate::Error;

/// A drain stopped at a record the tier below could not take now (see `drain_until`).
#[derive(Debug)]
pub(crate) struct Stalled;

/// A sealed segment with at least this share of its bytes dead is compacted. Under
/// overwrites RAM holds dead versions until their segment is evicted or compacted: at 50 %
/// RAM held 67–72 % live bytes at steady state, at 25 % 83–87 %, with no measurable change
/// in server CPU per op (numbers: docs/eviction.md, "Dead versions in RAM").
pub(crate) const COMPACT_DEAD_PERCENT: u64 = 25;

/// What an eviction does with a live item the tier below cannot take now (back-pressure).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnLater {
    /// Stop the eviction there: `Error::FlashBusy`, the victim back at its queue's front
    /// (the records before it disposed of); the writer awaits room holding nothing.
    Stall,
    /// Keep it in RAM (copied to the main log: deferred); where it could only be dropped —
    /// no room for the copy, or a forced or FIFO eviction — stop as [`Self::Stall`] does.
    Keep,
    /// Keep it in RAM if a copy can be had, else drop it (a writer whose waits ran out,
    /// flash waits off, the sweeper).
    KeepOrDrop,
}

/// What a drain does with live records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Eviction of a segment of this log (S3-FIFO rules).
    Evict(Log),
    /// Eviction without second chances (FIFO).
    Drop,
    /// A forced eviction (`soft_tries` evictions freed nothing): no second chances, and an
    /// item the tier below cannot take now is not kept (`evicted_forced`).
    Forced,
    /// Compaction by the sweeper: live records move to this log's head, keeping frequency.
    Compact(Log),
}

impl RamTier {
    /// Seal `log`'s head if `words` no longer fit, then install a fresh segment (evicting to
    /// get one). Called by writers holding no lock. An eviction the tier below cannot take
    /// now (back-pressure) goes per `on_later`; one that stops ends here with
    /// [`Error::FlashBusy`]: the writer awaits room holding nothing and tries again.
    pub(super) fn advance<L: LowerTier + ?Sized>(
        &self,
        env: &Env<'_, L>,
        log: Log,
        words: usize,
        on_later: OnLater,
    ) -> Result<(), Error> {
        let mut alloc = self.arena.state.lock();
        if let Some((seg, off)) = self.arena.head(log) {
            if off + words <= self.arena.seg_words {
                return Ok(());
            }
            self.arena.seal_head(&mut alloc, log, Some(seg));
        }
        let seg = self.obtain_normal(env, &mut alloc, on_later)?;
        if let Err(seg) = self.arena.install_head(log, seg) {
            self.arena.release_normal(&mut alloc, seg);
        }
        Ok(())
    }

    /// An empty normal segment for a writer, evicting as needed; keeps one in reserve for
    /// eviction's copies while it can.
    fn obtain_normal<L: LowerTier + ?Sized>(
        &self,
        env: &Env<'_, L>,
        alloc: &mut AllocState,
        on_later: OnLater,
    ) -> Result<u32, Error> {
        let mut tries = 0;
        loop {
            if let Some(s) = self.arena.take_normal(alloc, 1) {
                return Ok(s);
            }
            tries += 1;
            if self.evict_one(env, alloc, tries > self.policy.soft_tries, on_later)? {
                continue;
            }
            if self.arena.seal_head(alloc, Log::Main, None)
                || self.arena.seal_head(alloc, Log::Small, None)
            {
                continue;
            }
            return self.arena.take_normal(alloc, 0).ok_or(Error::OutOfMemory);
        }
    }

    /// A large single-record segment of `words` (as many chunks as it needs), evicting as
    /// needed. A record larger than the whole limit (a value of nearly `memory_limit` bytes)
    /// may use the one spare chunk beyond the limit, once everything else is gone.
    pub(super) fn obtain_large<L: LowerTier + ?Sized>(
        &self,
        env: &Env<'_, L>,
        words: usize,
        log: Log,
        on_later: OnLater,
    ) -> Result<Space, Error> {
        let k = self.arena.chunks_for(words);
        let spare = k > self.arena.max_chunks();
        if k > self.arena.max_chunks() + 1 {
            return Err(Error::OutOfMemory);
        }
        let mut alloc = self.arena.state.lock();
        let mut tries = 0;
        loop {
            if self.arena.available(&alloc, spare) >= k {
                return self
                    .arena
                    .take_large(&mut alloc, words, log)
                    .ok_or(Error::OutOfMemory);
            }
            tries += 1;
            if self.evict_one(env, &mut alloc, tries > self.policy.soft_tries, on_later)? {
                continue;
            }
            if self.arena.seal_head(&mut alloc, Log::Main, None)
                || self.arena.seal_head(&mut alloc, Log::Small, None)
            {
                continue;
            }
            return Err(Error::OutOfMemory);
        }
    }

    /// Evict one segment. False when there is nothing to evict; `Error::FlashBusy` when it
    /// stopped (`on_later`, see [`Self::advance`]): the victim goes back to its queue's front.
    pub(super) fn evict_one<L: LowerTier + ?Sized>(
        &self,
        env: &Env<'_, L>,
        alloc: &mut AllocState,
        force: bool,
        on_later: OnLater,
    ) -> Result<bool, Error> {
        // Without a tier below, an eviction loses the item: reclaim dead space first. With
        // one, eviction moves items down (and stalls a writer rather than drop under
        // back-pressure), and the sweeper compacts.
        if !force && !env.lower.takes_evictions() && self.reclaim_dead(env, alloc) {
            return Ok(true);
        }
        let small = Log::Small as usize;
        let main = Log::Main as usize;
        let s3 = self.policy.eviction == EvictionPolicy::S3Fifo;
        let total = alloc.queue_bytes[small] + alloc.queue_bytes[main];
        let small_over =
            alloc.queue_bytes[small] * 100 >= total * u64::from(self.policy.small_percent);
        let log = if !alloc.queues[small].is_empty()
            && (!s3 || small_over || alloc.queues[main].is_empty())
        {
            Log::Small
        } else if !alloc.queues[main].is_empty() {
            Log::Main
        } else {
            return Ok(false);
        };
        // memcached -M: never drop a live item to make room (with flash, eviction only
        // moves items to flash, so it goes on).
        if !self.policy.evict_to_free && !env.lower.takes_evictions() {
            let victim = alloc.queues[log as usize].front().copied();
            if victim.is_some_and(|v| self.arena.slot(v).live.load(Ordering::Relaxed) > 0) {
                return Ok(false);
            }
        }
        let Some(seg) = self.arena.pop_queue(alloc, log) else {
            return Ok(false);
        };
        self.arena.wait_quiet(seg);
        let mode = if force {
            Mode::Forced
        } else if !s3 {
            Mode::Drop
        } else {
            Mode::Evict(log)
        };
        let Ok(kept) = self.drain_until(env, alloc, seg, mode, on_later) else {
            self.arena.requeue_front(alloc, log, seg);
            return Err(Error::FlashBusy);
        };
        self.retire(alloc, seg, kept);
        Ok(true)
    }

    /// Reclaim dead space before evicting anything live (no tier below): compact (live records to the same
    /// log's head, frequency kept) the queued normal segment with the most dead words, if at
    /// least [`COMPACT_DEAD_PERCENT`] of it is dead (overwritten with another size, deleted,
    /// expired) and a free segment can take its survivors. So an overwrite, a delete or an
    /// expiry never costs a live item its place while RAM holds a segment that dead. False
    /// when there is no such segment. Cost: a walk over the queues' slots, only when the
    /// arena holds at least that much dead space in all.
    fn reclaim_dead<L: LowerTier + ?Sized>(
        &self,
        env: &Env<'_, L>,
        alloc: &mut AllocState,
    ) -> bool {
        let seg_words = self.arena.seg_words as u64;
        let threshold = seg_words * COMPACT_DEAD_PERCENT / 100;
        let queued_words = (alloc.queue_bytes[0] + alloc.queue_bytes[1]) / 8;
        let live_words = Counters::get(&env.meta.counters.live_bytes) / 8;
        if queued_words.saturating_sub(live_words) < threshold
            || self.arena.available(alloc, false) == 0
        {
            return false;
        }
        let mut best: Option<(u64, u32, Log)> = None;
        for (log, q) in [Log::Small, Log::Main].into_iter().zip(&alloc.queues) {
            for &seg in q {
                let slot = self.arena.slot(seg);
                if slot.is_large() || slot.pending.load(Ordering::Acquire) != 0 {
                    continue;
                }
                let end = u64::from(slot.end.load(Ordering::Relaxed));
                let dead = end.saturating_sub(slot.live.load(Ordering::Relaxed));
                if dead >= threshold && best.is_none_or(|(d, _, _)| dead > d) {
                    best = Some((dead, seg, log));
                }
            }
        }
        let Some((_, seg, log)) = best else {
            return false;
        };
        if !self.arena.unqueue(alloc, seg) {
            return false;
        }
        let kept = self.drain(env, alloc, seg, Mode::Compact(log));
        self.retire(alloc, seg, kept);
        Counters::add(&env.meta.counters.segments_reclaimed, 1);
        true
    }

    /// After a drain: requeue a kept large segment, free a dropped one, recycle a normal one.
    pub(super) fn retire(&self, alloc: &mut AllocState, seg: u32, kept: Option<Log>) {
        if self.arena.slot(seg).is_large() {
            match kept {
                Some(log) => self.arena.enqueue_large(alloc, seg, log),
                None => self.arena.free_large(alloc, seg),
            }
        } else {
            self.arena.release_normal(alloc, seg);
        }
    }

    /// Reserve `words` in `log`'s head for a copy, taking a segment from the free list or the
    /// budget (reserve included) but never evicting. `None` when no space can be had.
    fn bump_for_copy(&self, alloc: &mut AllocState, log: Log, words: usize) -> Option<Space> {
        if let Some(s) = self.arena.try_bump(log, words) {
            return Some(s);
        }
        let seen = self.arena.head(log).map(|(s, _)| s);
        self.arena.seal_head(alloc, log, seen);
        let seg = self.arena.take_normal(alloc, 0)?;
        if let Err(seg) = self.arena.install_head(log, seg) {
            self.arena.release_normal(alloc, seg);
        }
        self.arena.try_bump(log, words)
    }

    /// Walk segment `seg` (taken off its queue, quiet) and dispose of every record per
    /// `mode`. Returns the log a large segment should be requeued on, if it is kept.
    pub(super) fn drain<L: LowerTier + ?Sized>(
        &self,
        env: &Env<'_, L>,
        alloc: &mut AllocState,
        seg: u32,
        mode: Mode,
    ) -> Option<Log> {
        self.drain_until(env, alloc, seg, mode, OnLater::KeepOrDrop)
            .unwrap_or_default()
    }

    /// [`Self::drain`]; stops (`Err`) at the first live record the tier below cannot take
    /// now if `on_later` says so (see [`OnLater`]): the records before it are disposed of, it
    /// and those after are intact (the segment must go back on its queue).
    fn drain_until<L: LowerTier + ?Sized>(
        &self,
        env: &Env<'_, L>,
        alloc: &mut AllocState,
        seg: u32,
        mode: Mode,
        on_later: OnLater,
    ) -> Result<Option<Log>, Stalled> {
        let now = env.meta.now();
        let slot = self.arena.slot(seg);
        let end = slot.end.load(Ordering::Relaxed) as usize;
        let large = slot.is_large();
        let Some(m) = self.arena.mem(seg) else {
            return Ok(None);
        };
        let mut kept = None;
        let mut key = Vec::new();
        let mut off = 0;
        while off < end {
            let Some(rec) = self.arena.record_at(seg, off) else {
                break;
            };
            let h = rec.header;
            let n = h.words();
            if off + n > end {
                break;
            }
            if h.rflags & F_FILLER != 0 {
                off += n;
                continue;
            }
            rec.read_key(&mut key);
            let hash = env.slots.hash(&key);
            let loc = self.arena.loc(seg, off);
            let mut shard = env.slots.lock(hash);
            let Some((pos, e)) = shard.find(hash, |e| e.tier == Tier::Ram && e.loc == loc) else {
                off += n;
                continue;
            };
            // Read again under the shard lock: an overwrite in place (`RamTier::rewrite`) may
            // have changed the header since (never the key or the record's length).
            let Some(rec) = self.arena.record_at(seg, off) else {
                break;
            };
            let h = rec.header;
            if env.meta.dead_at(h.exptime, h.stored, now) {
                self.reclaim(env, &mut shard, pos, &h, hash);
                off += n;
                continue;
            }
            let target = match mode {
                Mode::Drop | Mode::Forced => None,
                Mode::Evict(Log::Small) if e.freq > 0 => Some((Log::Main, 0)),
                Mode::Evict(Log::Main) if e.freq > 0 => Some((Log::Main, e.freq - 1)),
                Mode::Evict(_) => None,
                Mode::Compact(log) => Some((log, e.freq)),
            };
            let counter = match mode {
                Mode::Evict(Log::Small) => &env.meta.counters.moves_to_main,
                Mode::Compact(_) => &env.meta.counters.compacted,
                _ => &env.meta.counters.reinserted,
            };
            match target {
                Some((log, freq)) if large => {
                    shard.set(pos, Entry { freq, ..e });
                    kept = Some(log);
                    Counters::add(counter, 1);
                }
                Some((log, freq)) => {
                    if self.copy_live(alloc, &mut shard, pos, e, (m, off, &h), log, freq) {
                        Counters::add(counter, 1);
                    } else if let Some(l) = self.evict_record(
                        env, alloc, &mut shard, pos, &rec, hash, mode, &key, on_later,
                    )? {
                        kept = Some(l);
                    }
                }
                None => {
                    if let Some(l) = self.evict_record(
                        env, alloc, &mut shard, pos, &rec, hash, mode, &key, on_later,
                    )? {
                        kept = Some(l);
                    }
                }
            }
            off += n;
        }
        Ok(kept)
    }

    /// Copy the live record at `src` (segment memory, word offset, header) to `log`'s head
    /// with frequency `freq` and point its slot there. False when no space can be had
    /// without evicting.
    #[allow(clippy::too_many_arguments)]
    fn copy_live(
        &self,
        alloc: &mut AllocState,
        shard: &mut Shard<'_>,
        pos: Pos,
        e: Entry,
        src: (&[std::sync::atomic::AtomicU64], usize, &Header),
        log: Log,
        freq: u8,
    ) -> bool {
        let (m, off, h) = src;
        let n = h.words();
        let (seg, _) = self.arena.split(e.loc);
        let Some(sp) = self.bump_for_copy(alloc, log, n) else {
            return false;
        };
        let Some(dst) = self.arena.mem(sp.seg) else {
            self.abandon(Some(sp));
            return false;
        };
        record::copy(m, off, dst, sp.off, n);
        let new_loc = self.arena.loc(sp.seg, sp.off);
        shard.set(
            pos,
            Entry {
                freq,
                loc: new_loc,
                ..e
            },
        );
        self.arena.slot(sp.seg).note_publish(n, h.exptime, h.stored);
        self.arena
            .slot(seg)
            .live
            .fetch_sub(n as u64, Ordering::Relaxed);
        self.arena.finish(sp);
        true
    }

    /// A live record S3-FIFO does not keep in RAM: demote it to its flash home (the slot
    /// becomes a flash slot, the item stays), or drop it if it has none and cannot get one.
    /// If flash refuses it for back-pressure (it never waits here, under `AllocState` and the
    /// shard lock), the record is copied to the main log instead, keeping its frequency
    /// (`extstore_evictions_deferred`; appended later by write-back or the next eviction);
    /// a forced or FIFO eviction, or one with no space for the copy, drops it — unless
    /// `on_later` is [`OnLater::Keep`]: then the drain stops there (`Stalled`; nothing
    /// changed), as it does at any refusal with [`OnLater::Stall`]. A large record's segment
    /// is kept whole instead: the log to requeue it on is returned.
    #[allow(clippy::too_many_arguments)]
    fn evict_record<L: LowerTier + ?Sized>(
        &self,
        env: &Env<'_, L>,
        alloc: &mut AllocState,
        shard: &mut Shard<'_>,
        pos: Pos,
        rec: &RecordRef<'_>,
        hash: u64,
        mode: Mode,
        key: &[u8],
        on_later: OnLater,
    ) -> Result<Option<Log>, Stalled> {
        let h = &rec.header;
        let taken = env.lower.take_evicted(rec, hash, key);
        let later = matches!(taken, Taken::Later);
        match taken {
            Taken::Slot(slot) => {
                let e = shard.get(pos);
                self.release(env.meta, e.loc, h.words());
                shard.set(pos, slot);
                return Ok(None);
            }
            Taken::Later if on_later == OnLater::Stall => return Err(Stalled),
            Taken::Later if matches!(mode, Mode::Evict(_) | Mode::Compact(_)) => {
                let e = shard.get(pos);
                let (seg, off) = self.arena.split(e.loc);
                if self.arena.slot(seg).is_large() {
                    env.lower.deferred();
                    return Ok(Some(Log::Main));
                }
                if let Some(m) = self.arena.mem(seg) {
                    if self.copy_live(alloc, shard, pos, e, (m, off, h), Log::Main, e.freq) {
                        env.lower.deferred();
                        return Ok(None);
                    }
                }
            }
            Taken::Below => {
                self.unlink(env, shard, pos, h);
                return Ok(None);
            }
            Taken::Later | Taken::Drop => {}
        }
        if later && on_later == OnLater::Keep {
            return Err(Stalled);
        }
        self.unlink(env, shard, pos, h);
        if mode == Mode::Forced {
            Counters::add(&env.meta.counters.evicted_forced, 1);
        }
        let fetched = h.rflags & F_FETCHED != 0;
        env.meta
            .departed(hash, crate::ledger::Cause::RamEvicted, fetched);
        if mode == Mode::Evict(Log::Small) {
            self.ghost.insert(hash);
        }
        Ok(None)
    }
}

/// S3-FIFO on a RAM tier alone, over a fake tier below.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::ram::testing::{key, Answer, FakeLower, Rig, SEG};

    const VALUE: [u8; 1000] = [7; 1000];

    /// Items of `VALUE` one segment holds.
    fn per_segment() -> usize {
        SEG / 8 / record::rec_words(key(0).len(), VALUE.len())
    }

    /// A rig whose RAM is full (the tier below has taken one eviction) and whose tier below
    /// now refuses every eviction for back-pressure; with the number of keys set.
    fn full_rig_refusing() -> (Rig, usize) {
        let rig = Rig::new(4, FakeLower::new(true, Answer::Slot));
        let mut i = 0;
        while rig.lower.offered.lock().is_empty() {
            rig.set(&key(i), &VALUE, 0);
            i += 1;
        }
        *rig.lower.answer.lock() = Answer::Later;
        (rig, i)
    }

    #[test]
    fn unhit_items_leave_the_small_log_first_in_first_out_into_the_ghost_set() {
        let rig = Rig::with(4, FakeLower::new(false, Answer::Drop), |b| {
            b.ghost_entries(1 << 16)
        });
        let n = 8 * per_segment();
        for i in 0..n {
            rig.set(&key(i), &VALUE, 0);
        }
        let evicted = rig.count(|c| &c.evictions) as usize;
        assert!(evicted > 0 && evicted < n);
        assert_eq!(rig.count(|c| &c.evicted_unfetched) as usize, evicted);
        assert_eq!(
            rig.lower.offered.lock().len(),
            evicted,
            "each offered below first"
        );
        assert!(
            (0..evicted).all(|i| rig.get(&key(i)).is_none()),
            "oldest first"
        );
        assert!((evicted..n).all(|i| rig.get(&key(i)).is_some()));
        assert_eq!(rig.slots.len() as usize, n - evicted);
        // Stored again, a ghost goes straight to the main log (the set forgets it then).
        let ghosts = (0..evicted)
            .filter(|&i| rig.ram.target_log(rig.slots.hash(&key(i))) == Log::Main)
            .count();
        assert!(
            ghosts * 10 >= evicted * 9,
            "{ghosts} of {evicted} remembered"
        );
    }

    #[test]
    fn a_writer_reclaims_dead_versions_before_it_evicts_a_live_item() {
        let rig = Rig::new(16, FakeLower::new(false, Answer::Drop));
        let n = 10 * per_segment();
        for i in 0..n {
            rig.set(&key(i), &VALUE, 0);
        }
        // Keys at random appended again (as an overwrite of another size is): dead versions
        // pile up in every segment, enough to need space five times over.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..5 * n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            rig.set(&key((x % n as u64) as usize), &VALUE, 0);
        }
        assert_eq!(rig.count(|c| &c.evictions), 0, "a live item was evicted");
        assert_eq!(rig.slots.len() as usize, n);
        assert!(rig.count(|c| &c.segments_reclaimed) > 0);
        assert!((0..n).all(|i| rig.get(&key(i)).is_some()));
    }

    #[test]
    fn a_hit_item_moves_to_the_main_log_and_outlives_a_cold_stream() {
        let rig = Rig::new(8, FakeLower::new(false, Answer::Drop));
        let hot = 40;
        for i in 0..hot {
            rig.set(&key(i), &VALUE, 0);
            rig.hit(&key(i));
        }
        for i in hot..16 * per_segment() {
            rig.set(&key(i), &VALUE, 0);
        }
        assert!(rig.count(|c| &c.evictions) > 0);
        assert!(
            (0..hot).all(|i| rig.get(&key(i)).is_some()),
            "a hot item was evicted"
        );
        assert_eq!(rig.count(|c| &c.moves_to_main), hot as u64);
    }

    #[test]
    fn items_the_tier_below_takes_become_its_slots_and_are_not_lost() {
        let rig = Rig::new(4, FakeLower::new(true, Answer::Slot));
        let n = 8 * per_segment();
        for i in 0..n {
            rig.set(&key(i), &VALUE, 0);
        }
        let taken = rig.lower.offered.lock().len();
        assert!(taken > 0);
        assert_eq!(rig.count(|c| &c.evictions), 0, "nothing dropped");
        assert_eq!(rig.slots.len() as usize, n, "every key keeps a slot");
        assert_eq!(rig.slot(&key(0)).unwrap().tier, Tier::Flash);
        assert_eq!(rig.slot(&key(n - 1)).unwrap().tier, Tier::Ram);
    }

    #[test]
    fn without_a_tier_below_and_with_evictions_off_no_live_item_is_dropped() {
        let rig = Rig::with(4, FakeLower::new(false, Answer::Drop), |b| {
            b.evict_to_free(false)
        });
        let env = rig.env();
        let words = record::rec_words(key(0).len(), VALUE.len());
        let mut stored = 0;
        loop {
            match rig
                .ram
                .reserve(&env, Log::Small, words, OnLater::KeepOrDrop)
            {
                Ok(space) => {
                    rig.ram.abandon(Some(space));
                    rig.set(&key(stored), &VALUE, 0);
                    stored += 1;
                }
                Err(Error::OutOfMemory) => break,
                Err(e) => panic!("{e}"),
            }
            assert!(stored < 10 * per_segment(), "RAM never filled");
        }
        assert_eq!(rig.count(|c| &c.evictions), 0);
        assert!((0..stored).all(|i| rig.get(&key(i)).is_some()));
    }

    #[test]
    fn a_writer_that_may_still_wait_stops_rather_than_drop_a_deferred_item() {
        let (rig, _) = full_rig_refusing();
        let env = rig.env();
        let before = rig.slots.len();
        // Keep: refused items are copied within RAM until a copy finds no room or eviction
        // would be forced; then the writer is told to wait (nothing dropped).
        let mut stopped = false;
        for _ in 0..64 * per_segment() {
            match rig.ram.reserve(&env, Log::Small, 100, OnLater::Keep) {
                Ok(space) => rig.ram.abandon(Some(space)),
                Err(Error::FlashBusy) => {
                    stopped = true;
                    break;
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(stopped, "the writer never had to wait");
        assert!(rig.lower.deferred.load(Ordering::Relaxed) > 0);
        assert_eq!(
            rig.count(|c| &c.evictions),
            0,
            "a deferred item was dropped"
        );
        assert_eq!(rig.slots.len(), before);
        // Once its waits ran out (KeepOrDrop), the same eviction drops by force: counted.
        for _ in 0..64 * per_segment() {
            match rig.ram.reserve(&env, Log::Small, 100, OnLater::KeepOrDrop) {
                Ok(space) => rig.ram.abandon(Some(space)),
                Err(e) => panic!("{e}"),
            }
            if rig.count(|c| &c.evicted_forced) > 0 {
                break;
            }
        }
        assert!(rig.count(|c| &c.evicted_forced) > 0, "no forced eviction");
        assert_eq!(
            rig.slots.len() + rig.count(|c| &c.evictions),
            before,
            "every item still has a slot or is counted as evicted"
        );
    }

    #[test]
    fn an_eviction_the_tier_below_cannot_take_now_stalls_or_stays_in_ram() {
        // RAM is full: from here every new segment needs an eviction, which the tier below
        // refuses for back-pressure.
        let (rig, i) = full_rig_refusing();
        let env = rig.env();
        let before = rig.slots.len();
        let in_ram = |k: usize| rig.slot(&key(k)).is_some_and(|e| e.tier == Tier::Ram);
        let ram_items = (0..i).filter(|&k| in_ram(k)).count();
        let offered = rig.lower.offered.lock().len();
        let mut stalled = false;
        for _ in 0..4 * per_segment() {
            match rig.ram.reserve(&env, Log::Small, 100, OnLater::Stall) {
                Ok(space) => rig.ram.abandon(Some(space)),
                Err(Error::FlashBusy) => {
                    stalled = true;
                    break;
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(stalled, "a stalling writer never met the refusal");
        assert_eq!(rig.lower.offered.lock().len(), offered + 1);
        assert_eq!(rig.slots.len(), before);
        assert_eq!(
            (0..i).filter(|&k| in_ram(k)).count(),
            ram_items,
            "nothing evicted: the victim is back at its queue's front"
        );
        assert_eq!(rig.count(|c| &c.evictions), 0);
        assert_eq!(
            rig.lower
                .deferred
                .load(std::sync::atomic::Ordering::Relaxed),
            0
        );
        // Without stalling an item stays in RAM, copied to the main log (deferred), while
        // there is room for the copy; one without room is dropped and counted.
        rig.ram
            .reserve(&env, Log::Small, 100, OnLater::KeepOrDrop)
            .map(|s| rig.ram.abandon(Some(s)))
            .unwrap();
        assert!(
            rig.lower
                .deferred
                .load(std::sync::atomic::Ordering::Relaxed)
                > 0
        );
        assert_eq!(
            rig.slots.len() + rig.count(|c| &c.evictions),
            before,
            "every item still has a slot or is counted as evicted"
        );
    }
}
