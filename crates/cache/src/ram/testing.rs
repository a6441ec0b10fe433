//! The RAM tier alone, for its unit tests: a [`RamTier`] with an index and a [`Meta`] of its
//! own, over [`FakeLower`], a tier below that records what RAM hands it and answers
//! evictions as told. No core, no flash. Writes go through the RAM tier's own write path
//! (`target_log`, `reserve`, `write_record`, `publish`, `finish`), as a SET does.
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::clock::Clock;
use crate::config::CacheConfig;
use crate::meta::{Counters, Meta};
use crate::ram::arena::RecordRef;
use crate::ram::index::{Entry, Index, Tier};
use crate::ram::lower::{LowerTier, NewVersion, Taken};
use crate::ram::record;
use crate::ram::tier::{new_header, Env, Existing, RamTier};
use crate::ItemWrite;

/// Segment size of the rig: the smallest the config takes.
pub(crate) const SEG: usize = 64 << 10;

/// What [`FakeLower`] answers when RAM evicts a live item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Not kept (no tier below).
    Drop,
    /// Back-pressure: keep it in RAM for now.
    Later,
    /// Kept: the slot becomes a lower slot.
    Slot,
}

/// A tier below that records every call (see the module docs).
#[derive(Debug)]
pub(crate) struct FakeLower {
    /// `takes_evictions`.
    pub takes: bool,
    pub answer: Mutex<Answer>,
    /// Hashes of the items handed over at eviction (whatever the answer).
    pub offered: Mutex<Vec<u64>>,
    /// Lower copies forgotten.
    pub forgotten: Mutex<Vec<u64>>,
    /// Hashes covered.
    pub covered: Mutex<Vec<u64>>,
    pub deferred: AtomicU64,
    next_loc: AtomicU64,
}

impl FakeLower {
    pub fn new(takes: bool, answer: Answer) -> Self {
        Self {
            takes,
            answer: Mutex::new(answer),
            offered: Mutex::default(),
            forgotten: Mutex::default(),
            covered: Mutex::default(),
            deferred: AtomicU64::new(0),
            next_loc: AtomicU64::new(1),
        }
    }
}

impl LowerTier for FakeLower {
    fn takes_evictions(&self) -> bool {
        self.takes
    }

    fn take_evicted(&self, _rec: &RecordRef<'_>, hash: u64, _key: &[u8]) -> Taken {
        self.offered.lock().push(hash);
        match *self.answer.lock() {
            Answer::Drop => Taken::Drop,
            Answer::Later => Taken::Later,
            Answer::Slot => Taken::Slot(Entry {
                tier: Tier::Flash,
                freq: 0,
                size_hint: 0,
                loc: self.next_loc.fetch_add(1, Relaxed),
            }),
        }
    }

    fn deferred(&self) {
        self.deferred.fetch_add(1, Relaxed);
    }

    fn forget(&self, loc: u64) {
        self.forgotten.lock().push(loc);
    }

    fn cover(&self, hash: u64, _key: &[u8]) {
        self.covered.lock().push(hash);
    }

    fn cover_or_stall(&self, hash: u64, key: &[u8], _stall: bool) -> Option<bool> {
        self.cover(hash, key);
        Some(true)
    }

    fn flush(&self, _at: u32) {}

    fn home_for(&self, _v: &NewVersion<'_>) -> u64 {
        0
    }
}

/// A RAM tier with its own index and metadata over a [`FakeLower`].
pub(crate) struct Rig {
    pub ram: RamTier,
    pub slots: Index,
    pub meta: Meta,
    pub lower: FakeLower,
    pub clock: Clock,
}

impl Rig {
    /// `segments` segments of [`SEG`] bytes (at least 4), S3-FIFO, over `lower`.
    pub fn new(segments: usize, lower: FakeLower) -> Self {
        Self::with(segments, lower, |b| b)
    }

    /// [`Self::new`] with the config builder adjusted by `cfg`.
    pub fn with(
        segments: usize,
        lower: FakeLower,
        cfg: impl FnOnce(crate::config::CacheConfigBuilder) -> crate::config::CacheConfigBuilder,
    ) -> Self {
        let clock = Clock::system();
        let builder = CacheConfig::builder()
            .memory_limit(segments * SEG)
            .segment_size(SEG)
            .max_item_size(SEG)
            .index_shards(4)
            .sweep_interval(None)
            .clock(clock.clone());
        let cfg = cfg(builder).build().unwrap();
        Self {
            ram: RamTier::new(&cfg),
            slots: Index::new(cfg.index_shards, 7, 2),
            meta: Meta::new(clock.clone(), 1024, 0, None),
            lower,
            clock,
        }
    }

    pub fn env(&self) -> Env<'_, FakeLower> {
        Env {
            slots: &self.slots,
            meta: &self.meta,
            lower: &self.lower,
        }
    }

    /// Store `key` = `value` expiring at `exptime` (0 = never) through the write path,
    /// replacing its RAM version if any. Returns the new record's location.
    pub fn set(&self, key: &[u8], value: &[u8], exptime: u32) -> u64 {
        let env = self.env();
        let hash = self.slots.hash(key);
        let log = self.ram.target_log(hash);
        let words = record::rec_words(key.len(), value.len());
        let space = self
            .ram
            .reserve(&env, log, words, crate::ram::evict::OnLater::KeepOrDrop)
            .unwrap();
        let w = ItemWrite::new(Bytes::copy_from_slice(value), 0, exptime);
        let cas = self.meta.cas_for(w.cas, None);
        let h = new_header(&w, key.len(), self.meta.now(), cas);
        assert!(self.ram.write_record(&space, &h, key, value));
        let mut shard = self.slots.lock(hash);
        let existing = self
            .ram
            .find_key(&shard, hash, key)
            .map(|(pos, e)| Existing::Ram(pos, e));
        self.ram
            .publish(&env, &mut shard, hash, existing, &space, &h);
        let loc = shard.find(hash, |e| e.tier == Tier::Ram).unwrap().1.loc;
        drop(shard);
        self.ram.finish(space);
        loc
    }

    /// Overwrite `key`'s RAM record in place with `value`, as a SET of a same-size record
    /// does; false (nothing changed) when it does not fit there or the key is not in RAM.
    pub fn rewrite(&self, key: &[u8], value: &[u8], exptime: u32) -> bool {
        let env = self.env();
        let hash = self.slots.hash(key);
        let mut shard = self.slots.lock(hash);
        let Some((pos, e)) = self.ram.find_key(&shard, hash, key) else {
            return false;
        };
        if !self
            .ram
            .fits_in_place(e.loc, record::rec_words(key.len(), value.len()))
        {
            return false;
        }
        let w = ItemWrite::new(Bytes::copy_from_slice(value), 0, exptime);
        let h = new_header(
            &w,
            key.len(),
            self.meta.now(),
            self.meta.cas_for(w.cas, None),
        );
        self.ram.rewrite(&env, &mut shard, pos, e, &h, key, value)
    }

    /// The value RAM holds for `key`, if any (no hit recorded).
    pub fn get(&self, key: &[u8]) -> Option<Bytes> {
        let hash = self.slots.hash(key);
        let shard = self.slots.lock(hash);
        let (_, e) = self.ram.find_key(&shard, hash, key)?;
        self.ram.record(e.loc).map(|r| r.value())
    }

    /// A hit on `key`'s RAM slot: its frequency goes up, as a GET's does.
    pub fn hit(&self, key: &[u8]) {
        let hash = self.slots.hash(key);
        let mut shard = self.slots.lock(hash);
        let (pos, _) = self.ram.find_key(&shard, hash, key).unwrap();
        shard.touch(pos);
    }

    /// The key's slot, if any (RAM or lower).
    pub fn slot(&self, key: &[u8]) -> Option<Entry> {
        let hash = self.slots.hash(key);
        let shard = self.slots.lock(hash);
        let lower = shard.find(hash, |e| e.tier == Tier::Flash).map(|(_, e)| e);
        self.ram
            .find_key(&shard, hash, key)
            .map(|(_, e)| e)
            .or(lower)
    }

    pub fn count(&self, c: impl Fn(&Counters) -> &AtomicU64) -> u64 {
        Counters::get(c(&self.meta.counters))
    }
}

/// Key `i` of a test.
pub(crate) fn key(i: usize) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}
