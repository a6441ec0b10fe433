//! [`RamTier`]: the RAM tier as one component — the arena of segments, S3-FIFO's ghost set and
//! policy — and its write path: pick the log, reserve arena space, publish the written record
//! in the index (replacing the key's old slot), give unused space back, and account for
//! records the index stops pointing at. Eviction is in `evict`, the sweeper's pass in
//! `sweeper`; nothing else implements methods on it.
//!
//! It owns the arena and the ghost set; the index (shared with the tier below), the cache's
//! [`Meta`] and the tier below are borrowed per call in an [`Env`], so it imports neither the
//! core nor the flash tier. Every write path goes reserve → write → publish under the key's
//! shard lock: SET, UPDATE (phase 2 decides there) and a copy from below at hit time
//! ([`RamTier::copy_up_now`]) bump and write under that lock; SET and UPDATE reserve the slow
//! way (which may evict) with no lock, as does a deferred copy ([`RamTier::copy_up_later`]).
//!
//! # Lock order
//! `AllocState` → index shard → arena head; the tier below's locks are leaves.
use crate::config::{CacheConfig, EvictionPolicy};
use crate::meta::{Counters, Meta};
use crate::ram::arena::{Arena, Log, RecordRef, Space};
use crate::ram::evict::OnLater;
use crate::ram::ghost::Ghost;
use crate::ram::index::{self, Entry, Index, Pos, Shard, Tier};
use crate::ram::lower::{CopyUp, LowerTier};
use crate::ram::record::{self, Header, F_FETCHED, F_STALE, F_WIN};
use crate::{Error, ItemWrite};

/// The log copies from the tier below go to, with frequency 0: S3-FIFO's probation queue. A
/// copy hit again before its segment is evicted moves on to the main log; one that is not is
/// evicted cheaply (its slot turns back into the lower slot it came from).
const COPY_UP_LOG: Log = Log::Small;

/// What the RAM tier works with but does not own, borrowed for one call: the index (shared
/// with the tier below), the cache's metadata (liveness, ledger, counters) and the tier below.
pub(crate) struct Env<'a, L: ?Sized> {
    pub slots: &'a Index,
    pub meta: &'a Meta,
    pub lower: &'a L,
}

/// S3-FIFO's settings, fixed at construction.
#[derive(Clone, Copy, Debug)]
pub(super) struct Policy {
    pub(super) eviction: EvictionPolicy,
    /// Share of the queued bytes the small log may hold before it is evicted first.
    pub(super) small_percent: u8,
    /// memcached's `-M` off: a live item may be dropped to make room.
    pub(super) evict_to_free: bool,
    /// Evictions that freed nothing before eviction is forced: `2 × segments + 8`.
    pub(super) soft_tries: usize,
}

/// The RAM tier. See the module docs.
#[derive(Debug)]
pub(crate) struct RamTier {
    pub(super) arena: Arena,
    pub(super) ghost: Ghost,
    pub(super) policy: Policy,
}

/// The slot a write replaces.
pub(crate) enum Existing {
    /// A RAM record.
    Ram(Pos, Entry),
    /// A lower-tier slot whose record was read and holds the key.
    Lower(Pos, Entry),
    /// Lower-tier slots taken as the key's without reading them (their packed locations; see
    /// `flash_tier::read` on blind views).
    Blind(Vec<u64>),
}

/// The header of a new version written by `w` for a key of `klen` bytes at `now`.
pub(crate) fn new_header(w: &ItemWrite, klen: usize, now: u32, cas: u64) -> Header {
    let mut rflags = 0;
    if w.meta.stale {
        rflags |= F_STALE;
    }
    if w.meta.win_token_sent {
        rflags |= F_WIN;
    }
    Header {
        cas,
        exptime: w.exptime,
        flags: w.flags,
        vlen: w.value.len() as u32,
        stored: now,
        last_access: now,
        klen: klen as u16,
        rflags,
        home: 0,
    }
}

impl RamTier {
    /// The RAM tier `cfg` describes (memory limit, segment size, eviction policy, ghost set).
    pub fn new(cfg: &CacheConfig) -> Self {
        Self {
            arena: Arena::new(cfg.memory_limit, cfg.segment_size),
            ghost: Ghost::new(cfg.ghost_len()),
            policy: Policy {
                eviction: cfg.eviction,
                small_percent: cfg.small_percent,
                evict_to_free: cfg.evict_to_free,
                soft_tries: 2 * (cfg.memory_limit / cfg.segment_size) + 8,
            },
        }
    }

    /// The published record at index location `loc` (see `Arena::record`). Caller holds the
    /// shard lock of a slot pointing at it.
    pub fn record(&self, loc: u64) -> Option<RecordRef<'_>> {
        self.arena.record(loc)
    }

    /// The key's RAM slot, found by comparing `key` with the records of the slots whose tag
    /// matches `hash` (the index holds no keys). Shard locked.
    pub fn find_key(&self, shard: &Shard<'_>, hash: u64, key: &[u8]) -> Option<(Pos, Entry)> {
        shard.find(hash, |e| {
            e.tier == Tier::Ram && self.arena.record(e.loc).is_some_and(|r| r.key_eq(key))
        })
    }

    /// Records above this many words get a large segment of their own.
    pub fn large_threshold(&self) -> usize {
        self.arena.large_threshold()
    }

    /// The log a new version of `hash` goes to: main if S3-FIFO's ghost remembers the key
    /// (evicted too early), else small.
    pub fn target_log(&self, hash: u64) -> Log {
        if self.policy.eviction == EvictionPolicy::S3Fifo && self.ghost.take(hash) {
            Log::Main
        } else {
            Log::Small
        }
    }

    /// Reserve `words` in `log`'s open segment without blocking on anything but its head
    /// mutex (never allocates or evicts); `None` if it has no room.
    pub fn try_bump(&self, log: Log, words: usize) -> Option<Space> {
        self.arena.try_bump(log, words)
    }

    /// Reserve space for a record, blocking on allocation and eviction if needed (never on
    /// the tier below: an eviction it cannot take now goes per `on_later` — kept in RAM,
    /// dropped, or stopped with `Error::FlashBusy`: nothing lost, the caller awaits room
    /// holding no lock and tries again).
    pub fn reserve<L: LowerTier + ?Sized>(
        &self,
        env: &Env<'_, L>,
        log: Log,
        words: usize,
        on_later: OnLater,
    ) -> Result<Space, Error> {
        if words > self.arena.large_threshold() {
            return self.obtain_large(env, words, log, on_later);
        }
        loop {
            if let Some(s) = self.arena.try_bump(log, words) {
                return Ok(s);
            }
            self.advance(env, log, words, on_later)?;
        }
    }

    /// Write a whole record into reserved `space`; false if the space cannot hold it.
    pub fn write_record(&self, space: &Space, h: &Header, key: &[u8], value: &[u8]) -> bool {
        self.arena.write_record(space, h, key, value)
    }

    /// Give back a reservation that will not be published.
    pub fn abandon(&self, space: Option<Space>) {
        let Some(space) = space else { return };
        if space.large {
            let mut alloc = self.arena.state.lock();
            self.arena.finish(space);
            self.arena.free_large(&mut alloc, space.seg);
        } else {
            if let Some(m) = self.arena.mem(space.seg) {
                record::write_filler(m, space.off, space.words);
            }
            self.arena.finish(space);
        }
    }

    /// Publish the record in `space` for `hash`, replacing `existing`. Shard lock held.
    pub fn publish<L: LowerTier + ?Sized>(
        &self,
        env: &Env<'_, L>,
        shard: &mut Shard<'_>,
        hash: u64,
        existing: Option<Existing>,
        space: &Space,
        h: &Header,
    ) {
        let mut entry = self.entry_for(space);
        match existing {
            Some(Existing::Ram(pos, old)) => {
                self.forget_slot(env, old.loc);
                entry.freq = old.freq;
                shard.set(pos, entry);
            }
            Some(Existing::Lower(pos, old)) => {
                env.lower.forget(old.lower_loc());
                entry.freq = old.freq;
                shard.set(pos, entry);
            }
            Some(Existing::Blind(locs)) => {
                for l in locs {
                    if shard.remove_lower(hash, l) {
                        env.lower.forget(l);
                    }
                }
                shard.insert(hash, entry);
            }
            None => shard.insert(hash, entry),
        }
        self.note_published(env.meta, space, h);
        Counters::add(&env.meta.counters.total_items, 1);
    }

    /// True when a new version of `words` can overwrite the RAM record at `loc` in place
    /// ([`Self::rewrite`]): the old record has exactly as many words and lies in a normal
    /// segment. Shard lock of a slot pointing at `loc` held.
    pub fn fits_in_place(&self, loc: u64, words: usize) -> bool {
        self.arena.record(loc).is_some_and(|r| {
            r.header.rflags & record::F_FILLER == 0
                && r.header.words() == words
                && !self.arena.slot(r.seg).is_large()
        })
    }

    /// Overwrite the RAM record of the slot at `pos` (`old`, checked by
    /// [`Self::fits_in_place`]) with the new version `h`, `key`, `value`, under the shard
    /// lock, so an overwrite of an item whose record keeps its size costs no arena space
    /// (memcached frees the old item at once; a log that appended would hold the dead version
    /// until its segment is compacted or evicted). Accounted as a publish over the old
    /// version: its lower copy, if any, is forgotten; the slot keeps its location and
    /// frequency, so the item keeps its place in its log.
    ///
    /// Safe for readers: every reader of a published record holds this shard lock (arena
    /// invariant 1a); a drain walking the segment (1b) reads the same key and the same
    /// record length whatever it sees, and rereads the header under the shard lock.
    #[allow(clippy::too_many_arguments)]
    pub fn rewrite<L: LowerTier + ?Sized>(
        &self,
        env: &Env<'_, L>,
        shard: &mut Shard<'_>,
        pos: Pos,
        old: Entry,
        h: &Header,
        key: &[u8],
        value: &[u8],
    ) -> bool {
        let Some(rec) = self.arena.record(old.loc) else {
            return false;
        };
        let old_h = rec.header;
        if !self.fits_in_place(old.loc, h.words()) {
            return false;
        }
        let space = Space {
            seg: rec.seg,
            off: rec.off,
            words: h.words(),
            large: false,
            log: Log::Small,
        };
        if !self.arena.write_record(&space, h, key, value) {
            return false;
        }
        self.release_rec(env, old.loc, &old_h);
        shard.set(pos, old);
        self.note_published(env.meta, &space, h);
        Counters::add(&env.meta.counters.total_items, 1);
        Counters::add(&env.meta.counters.rewritten_in_place, 1);
        true
    }

    /// The RAM slot of a record published in `space`, with frequency 0.
    fn entry_for(&self, space: &Space) -> Entry {
        Entry {
            tier: Tier::Ram,
            freq: 0,
            size_hint: index::size_hint(space.words * 8),
            loc: self.arena.loc(space.seg, space.off),
        }
    }

    /// Account for a record published in `space`: its segment's bookkeeping, `live_bytes`.
    fn note_published(&self, meta: &Meta, space: &Space, h: &Header) {
        self.arena
            .slot(space.seg)
            .note_publish(space.words, h.exptime, h.stored);
        Counters::add(&meta.counters.live_bytes, (space.words * 8) as u64);
    }

    /// After publishing (shard lock released): queue a large segment, end the reservation.
    pub fn finish(&self, space: Space) {
        if space.large {
            let mut alloc = self.arena.state.lock();
            self.arena.enqueue_large(&mut alloc, space.seg, space.log);
        }
        self.arena.finish(space);
    }

    /// Copy an item of the tier below into RAM over its lower slot at `pos` (a repeat hit),
    /// shard locked: only if the small log's open segment has room, so nothing is allocated
    /// or evicted here. `h` is the copy's header (its home word names the lower copy). The
    /// slot becomes a RAM slot with frequency 0.
    pub fn copy_up_now<L: LowerTier + ?Sized>(
        &self,
        env: &Env<'_, L>,
        shard: &mut Shard<'_>,
        pos: Pos,
        key: &[u8],
        h: &Header,
        value: &[u8],
    ) -> CopyUp {
        let words = record::rec_words(key.len(), value.len());
        let Some(space) = self.arena.try_bump(COPY_UP_LOG, words) else {
            return CopyUp::NoRoom;
        };
        if !self.arena.write_record(&space, h, key, value) {
            self.abandon(Some(space));
            return CopyUp::Abandoned;
        }
        shard.set(pos, self.entry_for(&space));
        self.note_published(env.meta, &space, h);
        self.finish(space);
        CopyUp::Done
    }

    /// [`Self::copy_up_now`] for a copy that found no room under the lock, holding no lock
    /// on entry: space is reserved the way a SET reserves it (which may seal the head and
    /// evict; an item flash cannot take now is kept in RAM, and where it could only be
    /// dropped the promotion is abandoned instead), the record written, and the shard of
    /// `hash` locked again to publish only if the key's slot is still the lower slot at
    /// packed `loc` (else the space is given back).
    #[allow(clippy::too_many_arguments)]
    pub fn copy_up_later<L: LowerTier + ?Sized>(
        &self,
        env: &Env<'_, L>,
        hash: u64,
        loc: u64,
        key: &[u8],
        h: &Header,
        value: &[u8],
    ) -> CopyUp {
        let words = record::rec_words(key.len(), value.len());
        let Ok(space) = self.reserve(env, COPY_UP_LOG, words, OnLater::Keep) else {
            return CopyUp::Abandoned;
        };
        // The copy is made now (reserving may have taken a while).
        let h = &Header {
            last_access: env.meta.now(),
            ..*h
        };
        if !self.arena.write_record(&space, h, key, value) {
            self.abandon(Some(space));
            return CopyUp::Abandoned;
        }
        let mut shard = env.slots.lock(hash);
        let Some((pos, _)) = shard.find(hash, |e| e.tier == Tier::Flash && e.lower_loc() == loc)
        else {
            drop(shard);
            self.abandon(Some(space));
            return CopyUp::Abandoned;
        };
        shard.set(pos, self.entry_for(&space));
        self.note_published(env.meta, &space, h);
        drop(shard);
        self.finish(space);
        CopyUp::Done
    }

    /// Account for a record the index stops pointing at.
    pub fn release(&self, meta: &Meta, loc: u64, words: usize) {
        let (seg, _) = self.arena.split(loc);
        self.arena
            .slot(seg)
            .live
            .fetch_sub(words as u64, std::sync::atomic::Ordering::Relaxed);
        Counters::sub(&meta.counters.live_bytes, (words * 8) as u64);
    }

    /// Account for a RAM record the index stops pointing at because the item is gone
    /// (overwritten, deleted, expired): its lower copy, if any, is dead too.
    pub fn release_rec<L: LowerTier + ?Sized>(&self, env: &Env<'_, L>, loc: u64, h: &Header) {
        self.release(env.meta, loc, h.words());
        if let Some(home) = h.home_loc() {
            env.lower.forget(home);
        }
    }

    /// [`Self::release_rec`] for the RAM slot at `loc` whose header is not at hand.
    pub fn forget_slot<L: LowerTier + ?Sized>(&self, env: &Env<'_, L>, loc: u64) {
        if let Some(r) = self.arena.record(loc) {
            self.release_rec(env, loc, &r.header);
        }
    }

    /// Remove the RAM slot at `pos` whose record header is `h`.
    pub fn unlink<L: LowerTier + ?Sized>(
        &self,
        env: &Env<'_, L>,
        shard: &mut Shard<'_>,
        pos: Pos,
        h: &Header,
    ) {
        let e = shard.remove(pos);
        self.release_rec(env, e.loc, h);
    }

    /// Remove a dead (expired or flushed) RAM item at `pos`: its older versions below stay
    /// gone (covered when it died before reaching the tier below over an older version there,
    /// or died by `flush_all`, which a restart cannot see); counted in `reclaimed`.
    pub fn reclaim<L: LowerTier + ?Sized>(
        &self,
        env: &Env<'_, L>,
        shard: &mut Shard<'_>,
        pos: Pos,
        h: &Header,
        hash: u64,
    ) {
        self.unlink(env, shard, pos, h);
        if h.home_loc().is_none() && h.flash_behind() {
            // Died before reaching the tier below over an older version there: cover that one.
            env.lower.cover(hash, &[]);
        } else if h.flash_behind() {
            env.lower.cover_if_flushed(hash, h.exptime, env.meta.now());
        }
        let fetched = h.rflags & F_FETCHED != 0;
        env.meta
            .departed(hash, crate::ledger::Cause::Expired, fetched);
    }

    /// Bytes of segment memory held against the limit.
    pub fn mem_used(&self) -> u64 {
        self.arena.mem_used()
    }

    /// The memory limit in force, in bytes (whole segments).
    pub fn limit(&self) -> u64 {
        self.arena.limit()
    }

    /// Change the memory limit at run time (see `Arena::set_limit`); fails, changing
    /// nothing, below two segments or above the largest limit the arena can take.
    pub fn set_limit(&self, bytes: u64) -> Result<(), Error> {
        if self.arena.set_limit(bytes) {
            Ok(())
        } else {
            Err(Error::MemoryLimit {
                requested: bytes,
                min: 2 * (self.arena.seg_words as u64 * 8),
                max: self.arena.max_limit(),
            })
        }
    }

    /// Segments by where they are, for `stats slabs`.
    pub fn segment_counts(&self) -> SegmentCounts {
        let alloc = self.arena.state.lock();
        SegmentCounts {
            large: alloc
                .queues
                .iter()
                .flatten()
                .filter(|&&s| self.arena.slot(s).is_large())
                .count() as u64,
            small: alloc.queues[Log::Small as usize].len() as u64,
            main: alloc.queues[Log::Main as usize].len() as u64,
            free: self.arena.free_count(&alloc) as u64,
        }
    }

    /// The store time of the newest record in the oldest queued segment of either log (the
    /// age of what eviction takes next), if any.
    pub fn oldest_stored(&self) -> Option<u32> {
        let alloc = self.arena.state.lock();
        [Log::Small, Log::Main]
            .iter()
            .filter_map(|&l| alloc.queues[l as usize].front().copied())
            .map(|s| {
                self.arena
                    .slot(s)
                    .max_stored
                    .load(std::sync::atomic::Ordering::Relaxed)
            })
            .filter(|&t| t != 0)
            .min()
    }

    /// Bytes of RAM the ghost set uses.
    pub fn ghost_bytes(&self) -> usize {
        self.ghost.memory_bytes()
    }
}

/// Segments by where they are (see [`RamTier::segment_counts`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SegmentCounts {
    pub small: u64,
    pub main: u64,
    pub free: u64,
    pub large: u64,
}

/// The write path, the removals and the copies from below, on a RAM tier alone.
#[cfg(test)]
#[path = "tier_tests.rs"]
mod tests;
