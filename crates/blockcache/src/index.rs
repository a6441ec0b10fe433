//! The RAM index: LBA → (flash location, version, dirty) in an [`LbaMap`], plus the dirty sets
//! that drive writeback order; per-block state only dirty blocks need lives in `dirty_meta`, so
//! a clean block costs one table slot.
//!
//! Invariants: an entry's `version` is the highest version of that LBA the cache holds; an
//! entry is dirty iff its LBA is in `dirty_meta` iff its version is in `dirty_versions` and it
//! is in `fifo` and `by_lba`; a dirty entry is never removed (only made clean by writeback or
//! superseded). Versions are handed out under the same mutex as the update, so the smallest
//! dirty version is exact.
//!
//! Fields are private: callers go through its methods, under the one mutex of
//! `crate::blocks::Blocks`, taken by request tasks, the writeback task and the engine's
//! reclaimer, only for memory work.
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

pub use crate::lbamap::{Entry, LbaMap};
use crate::sketch::Sketch;
use crate::tunables::FlushOrder;

/// What a put replaced.
#[derive(Debug, Default)]
pub struct PutOutcome {
    /// The block was cached before.
    pub hit: bool,
    /// The block was dirty before.
    pub was_dirty: bool,
    /// A location no longer referenced (mark it dead).
    pub dead: Option<u64>,
}

/// What only a dirty block needs.
#[derive(Clone, Copy, Debug)]
struct DirtyMeta {
    /// Order of first becoming dirty (key in `fifo`).
    seq: u64,
    /// Access clock at the last read or write (LRU flush order).
    access: u64,
}

/// The index proper.
#[derive(Debug, Default)]
pub struct Index {
    /// LBA → entry.
    map: LbaMap,
    /// Dirty LBA → its order and last access.
    dirty_meta: HashMap<u64, DirtyMeta>,
    /// dirty seq → (LBA, when it became dirty).
    fifo: BTreeMap<u64, (u64, Instant)>,
    /// Dirty LBAs in order.
    by_lba: BTreeSet<u64>,
    /// Versions of dirty entries.
    dirty_versions: BTreeSet<u64>,
    /// LBAs being written back now.
    writing: BTreeSet<u64>,
    /// Location of the newest persisted watermark record.
    wm_loc: Option<u64>,
    /// Next version to hand out.
    next_version: u64,
    next_dirty_seq: u64,
    clock: u64,
    /// The CLOCK hand over `map` (eviction at capacity).
    hand: usize,
    /// How often each block was accessed lately (see [`Sketch`]): the admission filter.
    sketch: Sketch,
}

impl Index {
    /// An empty index whose versions start after `max_seen`.
    pub fn new(max_seen: u64) -> Self {
        Self::with_capacity(max_seen, 0)
    }

    /// An empty index sized for `blocks` cached blocks (it grows past that if needed).
    pub fn with_capacity(max_seen: u64, blocks: u64) -> Self {
        Index {
            map: LbaMap::with_capacity(blocks as usize),
            sketch: Sketch::with_capacity(blocks),
            next_version: max_seen + 1,
            next_dirty_seq: 1,
            ..Default::default()
        }
    }

    /// Take a fresh version.
    pub fn take_version(&mut self) -> u64 {
        let v = self.next_version;
        self.next_version += 1;
        v
    }

    /// The next version [`Index::take_version`] would hand out.
    pub fn next_version(&self) -> u64 {
        self.next_version
    }

    /// Run `append` with the next version and take that version only if it succeeds (the
    /// version and the record it stamps are one critical section: the watermark is exact).
    pub fn stamp<T, E>(&mut self, append: impl FnOnce(u64) -> Result<T, E>) -> Result<T, E> {
        let r = append(self.next_version);
        if r.is_ok() {
            self.next_version += 1;
        }
        r
    }

    /// The entry of `lba`, without counting an access.
    pub fn get(&self, lba: u64) -> Option<Entry> {
        self.map.get(lba)
    }

    /// Whether `lba` is cached.
    pub fn contains(&self, lba: u64) -> bool {
        self.map.contains_key(lba)
    }

    /// Cached blocks.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no block is cached.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Whether `lba` was read since its count was last used up (see [`LbaMap::referenced`]).
    pub fn referenced(&self, lba: u64) -> bool {
        self.map.referenced(lba)
    }

    /// Use up one read count of `lba`.
    pub fn take_ref(&mut self, lba: u64) -> bool {
        self.map.take_ref(lba)
    }

    /// Reclaim moved `lba`'s record to `loc`.
    pub fn set_loc(&mut self, lba: u64, loc: u64) -> bool {
        self.map.set_loc(lba, loc)
    }

    /// Clean blocks as (LBA, version).
    pub fn clean_versions(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.map
            .iter()
            .filter(|(_, e)| !e.dirty)
            .map(|(l, e)| (l, e.version))
    }

    /// Location of the newest persisted watermark record.
    pub fn wm_loc(&self) -> Option<u64> {
        self.wm_loc
    }

    /// Set the watermark record's location; returns the previous one.
    pub fn set_wm_loc(&mut self, loc: Option<u64>) -> Option<u64> {
        std::mem::replace(&mut self.wm_loc, loc)
    }

    /// Whether `lba` is being written back now.
    pub fn is_writing(&self, lba: u64) -> bool {
        self.writing.contains(&lba)
    }

    /// `lba` joins a writeback batch.
    pub fn start_writing(&mut self, lba: u64) {
        self.writing.insert(lba);
    }

    /// `lba`'s writeback batch ended.
    pub fn end_writing(&mut self, lba: u64) {
        self.writing.remove(&lba);
    }

    /// Whether `lba` is dirty.
    pub fn is_dirty(&self, lba: u64) -> bool {
        self.dirty_meta.contains_key(&lba)
    }

    /// Dirty LBAs with the time each became dirty, oldest first.
    pub fn dirty_since(&self) -> impl Iterator<Item = (u64, Instant)> + '_ {
        self.fifo.values().copied()
    }

    /// Dirty LBAs in flush `order`; `cursor` is where ascending-LBA order resumes.
    pub fn dirty_order(
        &self,
        order: FlushOrder,
        cursor: u64,
    ) -> Box<dyn Iterator<Item = u64> + '_> {
        match order {
            FlushOrder::Fifo => Box::new(self.fifo.values().map(|(l, _)| *l)),
            FlushOrder::Lba => Box::new(
                self.by_lba
                    .range(cursor..)
                    .chain(self.by_lba.range(..cursor))
                    .copied(),
            ),
            FlushOrder::Lru => {
                let mut v: Vec<(u64, u64)> = self
                    .by_lba
                    .iter()
                    .filter_map(|l| self.dirty_meta.get(l).map(|d| (d.access, *l)))
                    .collect();
                v.sort_unstable();
                Box::new(v.into_iter().map(|(_, l)| l))
            }
        }
    }

    /// Look a block up and count it as accessed (in the sketch, and referenced for CLOCK and
    /// reclaim if cached).
    pub fn lookup(&mut self, lba: u64) -> Option<Entry> {
        self.clock += 1;
        self.sketch.add(lba);
        let e = self.map.get(lba)?;
        self.map.touch(lba);
        if e.dirty {
            if let Some(d) = self.dirty_meta.get_mut(&lba) {
                d.access = self.clock;
            }
        }
        Some(e)
    }

    /// Number of dirty blocks.
    pub fn dirty(&self) -> usize {
        self.fifo.len()
    }

    /// Everything below this version is on the backing (or superseded).
    pub fn clean_watermark(&self) -> u64 {
        self.dirty_versions
            .first()
            .copied()
            .unwrap_or(self.next_version)
            .saturating_sub(1)
    }

    /// Approximate bytes of RAM the index holds: the table exactly, the dirty sets by
    /// their element sizes plus typical B-tree and hash-table overhead.
    pub fn ram_bytes(&self) -> usize {
        // hashbrown: (8 + 16) bytes + 1 control byte a bucket, buckets >= 8/7 of entries;
        // B-tree nodes: elements ~2/3 full plus edges, ~1.6x the elements' size.
        let dirty = self.dirty_meta.capacity() * 25
            + self.fifo.len() * 32 * 8 / 5
            + (self.by_lba.len() + self.dirty_versions.len() + self.writing.len()) * 8 * 8 / 5;
        self.map.ram_bytes() + dirty
    }

    fn clear_dirty(&mut self, lba: u64, e: &Entry) {
        if e.dirty {
            if let Some(d) = self.dirty_meta.remove(&lba) {
                self.fifo.remove(&d.seq);
            }
            self.by_lba.remove(&lba);
            self.dirty_versions.remove(&e.version);
        }
    }

    /// Record that `lba` now lives at `loc` with `version` (dirty or clean). If the index
    /// already holds a newer version the new record is the dead one.
    pub fn put(&mut self, lba: u64, loc: u64, version: u64, dirty: bool) -> PutOutcome {
        self.clock += 1;
        let mut out = PutOutcome::default();
        let mut stays_dirty = false;
        if let Some(o) = self.map.get(lba) {
            out.hit = true;
            out.was_dirty = o.dirty;
            if o.version > version {
                out.dead = Some(loc);
                return out;
            }
            out.dead = Some(o.loc);
            if dirty && o.dirty {
                // Keeps its place in the FIFO (order of first becoming dirty).
                stays_dirty = true;
                self.dirty_versions.remove(&o.version);
            } else {
                self.clear_dirty(lba, &o);
            }
        }
        if dirty {
            let clock = self.clock;
            if stays_dirty {
                if let Some(d) = self.dirty_meta.get_mut(&lba) {
                    d.access = clock;
                }
            } else {
                let seq = self.next_dirty_seq;
                self.next_dirty_seq += 1;
                self.fifo.insert(seq, (lba, Instant::now()));
                self.by_lba.insert(lba);
                self.dirty_meta
                    .insert(lba, DirtyMeta { seq, access: clock });
            }
            self.dirty_versions.insert(version);
        }
        self.map.insert(
            lba,
            Entry {
                loc,
                version,
                dirty,
            },
        );
        out
    }

    /// Writeback of `version` finished: clean the entry if it still holds that version.
    pub fn mark_clean(&mut self, lba: u64, version: u64) -> bool {
        match self.map.get(lba) {
            Some(e) if e.version == version && e.dirty => {
                self.clear_dirty(lba, &e);
                self.map.insert(lba, Entry { dirty: false, ..e });
                true
            }
            _ => false,
        }
    }

    /// Remove the entry if it is at `loc` (reclaim dropped or lost it, or a write-through
    /// invalidated it). Returns the removed entry.
    pub fn remove_at(&mut self, lba: u64, loc: u64) -> Option<Entry> {
        match self.map.get(lba) {
            Some(e) if e.loc == loc => {
                self.clear_dirty(lba, &e);
                self.map.remove(lba);
                Some(e)
            }
            _ => None,
        }
    }

    /// A clean block was just admitted: if the sketch saw it accessed before this miss, count
    /// it as read once, so the next CLOCK or reclaim pass keeps it. Returns whether it did.
    pub fn admitted(&mut self, lba: u64) -> bool {
        let seen = self.sketch.estimate(lba) >= 2;
        if seen {
            self.map.touch(lba);
        }
        seen
    }

    /// Count a write of `lba` as an access in the sketch (reads count in [`Index::lookup`]).
    pub fn written(&mut self, lba: u64) {
        self.sketch.add(lba);
    }

    /// About how often `lba` was accessed lately (see [`Sketch::estimate`]).
    pub fn frequency(&self, lba: u64) -> u64 {
        self.sketch.estimate(lba)
    }

    /// Count an access of `lba` (a rewrite of a cached block).
    pub fn touch(&mut self, lba: u64) {
        self.map.touch(lba);
    }

    /// Bytes of RAM the sketch holds.
    pub fn sketch_bytes(&self) -> usize {
        self.sketch.ram_bytes()
    }

    /// The clean block the CLOCK hand would evict next (lowering the counts it passes, as an
    /// eviction would), left in place with the hand on it: the admission filter compares a
    /// newcomer with it, and [`Index::evict_clean`] takes it if the newcomer wins.
    pub fn next_victim(&mut self) -> Option<(u64, Entry)> {
        let mut hand = self.hand;
        let writing = &self.writing;
        let v = self.map.clock_victim(&mut hand, |l| writing.contains(&l));
        // The hand stopped just past the victim's slot.
        self.hand = if v.is_some() { hand - 1 } else { hand };
        v
    }

    /// Make room for one more block: remove the clean block the CLOCK hand chooses (not
    /// being written back) and return it; its record is the caller's to mark dead.
    pub fn evict_clean(&mut self) -> Option<(u64, Entry)> {
        let mut hand = self.hand;
        let writing = &self.writing;
        let v = self.map.clock_victim(&mut hand, |l| writing.contains(&l));
        self.hand = hand;
        let (lba, e) = v?;
        self.map.remove(lba);
        Some((lba, e))
    }

    /// Dirty blocks with version <= `v`.
    pub fn dirty_at_or_below(&self, v: u64) -> usize {
        self.dirty_versions.range(..=v).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_clean_and_watermark() {
        let mut index = Index::new(0);
        let v1 = index.take_version();
        index.put(7, 100, v1, true);
        let v2 = index.take_version();
        let o = index.put(8, 200, v2, true);
        assert!(!o.hit);
        assert_eq!(index.dirty(), 2);
        assert_eq!(index.clean_watermark(), v1 - 1);
        let v3 = index.take_version();
        let o = index.put(7, 300, v3, true);
        assert!(o.hit && o.was_dirty && o.dead == Some(100));
        assert_eq!(index.dirty(), 2);
        assert_eq!(index.clean_watermark(), v2 - 1);
        assert!(!index.mark_clean(7, v1));
        assert!(index.mark_clean(7, v3));
        assert!(index.mark_clean(8, v2));
        assert_eq!(index.dirty(), 0);
        assert_eq!(index.clean_watermark(), v3);
        // an older version loses
        let o = index.put(7, 50, v1, false);
        assert_eq!(o.dead, Some(50));
        assert_eq!(index.get(7).map(|e| e.loc), Some(300));
        assert!(index.remove_at(7, 300).is_some());
        assert!(index.lookup(7).is_none());
    }

    #[test]
    fn a_block_read_before_is_admitted_as_read_once() {
        let mut index = Index::with_capacity(0, 64);
        // Block 5 missed twice (the second miss admits it); block 6 missed once.
        assert!(index.lookup(5).is_none());
        assert!(index.lookup(5).is_none());
        assert!(index.lookup(6).is_none());
        for lba in [5, 6] {
            let v = index.take_version();
            index.put(lba, 100 + lba, v, false);
        }
        assert!(
            index.admitted(5) && index.referenced(5),
            "counted as read once"
        );
        assert!(!index.admitted(6) && !index.referenced(6));
        assert_eq!(index.frequency(5), 2);
        index.written(6);
        assert_eq!(index.frequency(6), 2, "a write is an access");
        assert_eq!(index.sketch_bytes(), 64 * 4);
    }

    #[test]
    fn the_next_victim_stays_until_it_is_evicted() {
        let mut index = Index::with_capacity(0, 64);
        for lba in 0..3 {
            let v = index.take_version();
            index.put(lba, 100 + lba, v, lba == 1);
        }
        index.lookup(0);
        // Block 0 was read (its count is lowered as the hand passes), 1 is dirty: 2 is next,
        // however often the filter asks.
        let (v, _) = index.next_victim().expect("a clean block");
        assert_eq!(v, 2);
        assert_eq!(index.next_victim().map(|x| x.0), Some(2));
        assert_eq!(index.evict_clean().map(|x| x.0), Some(2));
        assert!(!index.contains(2));
        assert!(
            index.next_victim().is_some_and(|x| x.0 == 0),
            "then block 0"
        );
    }
}
