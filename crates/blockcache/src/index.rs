//! The RAM index: LBA → (flash location, dirty) in an [`LbaMap`], plus the dirty table and
//! the dirty sets that drive writeback order. A clean block costs one table slot (6–7 bytes,
//! see [`crate::lbamap`]): no LBA, no version. Everything only dirty blocks need — their
//! version, FIFO order and last access — lives in `dirty_meta`, bounded by the dirty limit.
//!
//! Invariants: an entry is the newest record of its LBA the cache holds; an entry is dirty
//! iff its LBA is in `dirty_meta` iff its version is in `dirty_versions` and it is in `fifo`
//! and `by_lba`; a dirty entry is never removed (only made clean by writeback or
//! superseded). Versions are handed out under the same mutex as the update, so the smallest
//! dirty version is exact. A clean block's version is not kept: it is in its record's
//! header on flash (the read check, reclaim and the fence do not need it from here, see
//! [`Entry::version`]), and a put always carries a version newer than every clean entry's
//! (it was just taken, or the index was empty: recovery).
//!
//! Fields are private: callers go through its methods, under the one mutex of
//! `crate::blocks::Blocks`, taken by request tasks, the writeback task and the engine's
//! reclaimer, only for memory work.
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

pub use crate::lbamap::{LbaMap, Shape, Stored};
pub use crate::loccode::LocCode;
use crate::shift::ShiftDetector;
use crate::sketch::Sketch;
use crate::tunables::FlushOrder;

/// One cached block (returned by value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Packed [`flashtier_flash::Location`].
    pub loc: u64,
    /// Version of the record at `loc` if the block is dirty; `None` for a clean block (its
    /// version is in the record's header: the index does not keep it).
    pub version: Option<u64>,
    /// The record is dirty (not yet on the backing).
    pub dirty: bool,
}

/// What the index is sized for (see [`Index::for_device`]).
#[derive(Clone, Copy, Debug)]
pub struct IndexShape {
    /// Blocks the cache holds (the table holds them without growing).
    pub blocks: u64,
    /// Block records the device holds (the sketch's size).
    pub sketch_blocks: u64,
    /// LBAs are below this (the backing's block count).
    pub lba_limit: u64,
    /// How locations are stored.
    pub loc: LocCode,
}

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
    /// Version of the dirty record.
    version: u64,
    /// Order of first becoming dirty (key in `fifo`).
    seq: u64,
    /// Access clock at the last read or write (LRU flush order).
    access: u64,
}

/// The index proper.
#[derive(Debug, Default)]
pub struct Index {
    /// LBA → location code and dirty flag.
    map: LbaMap,
    /// How `map` stores locations.
    loc: LocCode,
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
    /// Watches the read miss ratio for a moved working set (see [`ShiftDetector`]).
    shift: ShiftDetector,
}

impl Index {
    /// An empty index whose versions start after `max_seen`.
    pub fn new(max_seen: u64) -> Self {
        Self::with_capacity(max_seen, 0)
    }

    /// An empty index sized for `blocks` cached blocks of any LBA and location (it grows
    /// past that if needed).
    pub fn with_capacity(max_seen: u64, blocks: u64) -> Self {
        Self::for_device(
            max_seen,
            IndexShape {
                blocks,
                sketch_blocks: blocks,
                lba_limit: u64::MAX,
                loc: LocCode::default(),
            },
        )
    }

    /// An empty index for a device and backing of `shape`: the table stores only as many
    /// bits of LBA and location as they need.
    pub fn for_device(max_seen: u64, shape: IndexShape) -> Self {
        Index {
            map: LbaMap::new(Shape {
                entries: shape.blocks,
                lba_limit: shape.lba_limit,
                loc_bits: shape.loc.bits(),
            }),
            loc: shape.loc,
            sketch: Sketch::with_capacity(shape.sketch_blocks),
            shift: ShiftDetector::new(shape.blocks),
            next_version: max_seen + 1,
            next_dirty_seq: 1,
            ..Default::default()
        }
    }

    /// The entry of a stored slot.
    fn entry(&self, lba: u64, s: Stored) -> Entry {
        Entry {
            loc: self.loc.decode(s.loc),
            version: if s.dirty {
                self.dirty_meta.get(&lba).map(|d| d.version)
            } else {
                None
            },
            dirty: s.dirty,
        }
    }

    /// The code of `loc`, checked: every location the index is given is a block record
    /// within the device the index was sized for.
    fn code(&self, loc: u64) -> u64 {
        assert!(
            self.loc.exact(loc),
            "location {loc:#x} is not a block record of the indexed device"
        );
        self.loc.encode(loc)
    }

    /// Bytes a table slot, and slots (see [`crate::lbamap`]).
    pub fn table_shape(&self) -> (usize, usize) {
        (self.map.slot_bytes(), self.map.slots())
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
        self.map.get(lba).map(|s| self.entry(lba, s))
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
        let code = self.code(loc);
        self.map.set_loc(lba, code)
    }

    /// Clean blocks as (LBA, packed location).
    pub fn clean_locations(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.map
            .iter()
            .filter(|(_, e)| !e.dirty)
            .map(|(l, e)| (l, self.loc.decode(e.loc)))
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
        let e = self.get(lba)?;
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
        // hashbrown: (8 + 24) bytes + 1 control byte a bucket, buckets >= 8/7 of entries;
        // B-tree nodes: elements ~2/3 full plus edges, ~1.6x the elements' size.
        let dirty = self.dirty_meta.capacity() * 33
            + self.fifo.len() * 32 * 8 / 5
            + (self.by_lba.len() + self.dirty_versions.len() + self.writing.len()) * 8 * 8 / 5;
        self.map.ram_bytes() + dirty
    }

    fn clear_dirty(&mut self, lba: u64) {
        if let Some(d) = self.dirty_meta.remove(&lba) {
            self.fifo.remove(&d.seq);
            self.by_lba.remove(&lba);
            self.dirty_versions.remove(&d.version);
        }
    }

    /// Record that `lba` now lives at `loc` with `version` (dirty or clean). `version` is
    /// newer than every clean entry's (see the module doc); if the index holds a dirty entry
    /// of a newer version, the new record is the dead one.
    pub fn put(&mut self, lba: u64, loc: u64, version: u64, dirty: bool) -> PutOutcome {
        self.clock += 1;
        let code = self.code(loc);
        let mut out = PutOutcome::default();
        let mut stays_dirty = false;
        if let Some(o) = self.get(lba) {
            out.hit = true;
            out.was_dirty = o.dirty;
            if o.version.is_some_and(|v| v > version) {
                out.dead = Some(loc);
                return out;
            }
            out.dead = Some(o.loc);
            if dirty && o.dirty {
                // Keeps its place in the FIFO (order of first becoming dirty).
                stays_dirty = true;
                if let Some(v) = o.version {
                    self.dirty_versions.remove(&v);
                }
            } else {
                self.clear_dirty(lba);
            }
        }
        if dirty {
            let clock = self.clock;
            if stays_dirty {
                if let Some(d) = self.dirty_meta.get_mut(&lba) {
                    d.access = clock;
                    d.version = version;
                }
            } else {
                let seq = self.next_dirty_seq;
                self.next_dirty_seq += 1;
                self.fifo.insert(seq, (lba, Instant::now()));
                self.by_lba.insert(lba);
                self.dirty_meta.insert(
                    lba,
                    DirtyMeta {
                        version,
                        seq,
                        access: clock,
                    },
                );
            }
            self.dirty_versions.insert(version);
        }
        self.map.insert(lba, Stored { loc: code, dirty });
        out
    }

    /// Writeback of `version` finished: clean the entry if it still holds that version.
    pub fn mark_clean(&mut self, lba: u64, version: u64) -> bool {
        match self.get(lba) {
            Some(e) if e.dirty && e.version == Some(version) => {
                self.clear_dirty(lba);
                self.map.set_dirty(lba, false);
                true
            }
            _ => false,
        }
    }

    /// Remove the entry if it is at `loc` (reclaim dropped or lost it, or a write-through
    /// invalidated it). Returns the removed entry.
    pub fn remove_at(&mut self, lba: u64, loc: u64) -> Option<Entry> {
        match self.get(lba) {
            Some(e) if e.loc == loc => {
                self.clear_dirty(lba);
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

    /// Count a read lookup outside a sequential stream for the shift detector; when it says
    /// the working set moved, forget every access count (sketch and read counts: the old
    /// hot set no longer shields itself) and return true.
    pub fn saw_read(&mut self, miss: bool) -> bool {
        if !self.shift.saw(miss) {
            return false;
        }
        self.sketch.clear();
        self.map.clear_refs();
        true
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
        let v = self
            .map
            .clock_victim(&mut hand, !writing.is_empty(), |l| writing.contains(&l));
        // The hand stopped just past the victim's slot.
        self.hand = if v.is_some() { hand - 1 } else { hand };
        v.map(|(l, s)| (l, self.entry(l, s)))
    }

    /// Make room for one more block: remove the clean block the CLOCK hand chooses (not
    /// being written back) and return it; its record is the caller's to mark dead.
    pub fn evict_clean(&mut self) -> Option<(u64, Entry)> {
        let mut hand = self.hand;
        let writing = &self.writing;
        let v = self
            .map
            .clock_victim(&mut hand, !writing.is_empty(), |l| writing.contains(&l));
        self.hand = hand;
        let (lba, s) = v?;
        let e = self.entry(lba, s);
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
        // A clean entry keeps no version; a dirty one does.
        assert_eq!(index.get(7).and_then(|e| e.version), None);
        let v4 = index.take_version();
        index.put(7, 400, v4, true);
        assert_eq!(index.get(7).and_then(|e| e.version), Some(v4));
        // An older version loses against a dirty entry.
        let o = index.put(7, 50, v1, false);
        assert_eq!(o.dead, Some(50));
        assert_eq!(index.get(7).map(|e| e.loc), Some(400));
        assert!(index.mark_clean(7, v4));
        assert!(index.remove_at(7, 400).is_some());
        assert!(index.lookup(7).is_none());
        assert_eq!(index.clean_locations().collect::<Vec<_>>(), vec![(8, 200)]);
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
    fn a_moved_working_set_clears_every_count() {
        // 64 blocks: shift windows of 16 read lookups.
        let mut index = Index::with_capacity(0, 64);
        for lba in 0..8 {
            let v = index.take_version();
            index.put(lba, 100 + lba, v, false);
        }
        // Stable: the 8 cached blocks read over and over (all hits).
        for round in 0..8 {
            for lba in 0..8 {
                let hit = index.lookup(lba).is_some();
                assert!(!index.saw_read(!hit), "round {round}");
            }
        }
        assert!(index.referenced(3) && index.frequency(3) >= 8);
        // The reads move to blocks never cached: within a window the policy forgets.
        let shifted = (1000..1016u64).any(|lba| {
            let hit = index.lookup(lba).is_some();
            index.saw_read(!hit)
        });
        assert!(shifted);
        assert!(!index.referenced(3), "read counts cleared");
        assert_eq!(index.frequency(3), 0, "sketch cleared");
        assert!(index.contains(3), "nothing evicted by forgetting");
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
