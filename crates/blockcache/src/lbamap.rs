//! [`LbaMap`]: LBA → (location code, dirty, read count) in one flat table of bit-packed slots,
//! sized once for the blocks the cache holds: 6 or 7 bytes a slot on realistic devices
//! (why not a `HashMap`, and the arithmetic: docs/block-cache.md "The LBA table").
//!
//! A slot does not store the LBA: [`KeySplit`] turns it into a home slot and a short stored
//! key (the rest of an invertible hash), and the slot keeps its displacement from home, so
//! the LBA is recovered exactly. Robin Hood linear probing with backward-shift deletion:
//! invariant — entries of a run are ordered by home, every entry sits at most
//! [`MAX_DISP`] slots past its home, and a lookup stops at an empty slot or at an entry closer
//! to its home than the probe is. The location is a code the caller chose (see
//! [`crate::index`]); nothing else per block lives here (versions of dirty blocks are in the
//! index's dirty table).
//!
//! Slot bits, lowest first: read count (2), dirty (1), displacement + 1 (7; 0 = empty slot),
//! stored key (`KeySplit::key_bits`), location code (`loc_bits`); the slot is the fewest
//! whole bytes that hold them, read and written as a little-endian `u128` window over a
//! byte array padded by 16 bytes at its end. Guarded by the index mutex like the rest of
//! [`crate::index`].
use crate::lbakey::KeySplit;

/// Reference count (CLOCK with frequency, 2 bits): raised (up to 3) when the block is read,
/// lowered by one each time the CLOCK hand passes it or reclaim passes it within its age
/// budget, so a block read often survives several passes. Kept across inserts that replace
/// an entry.
const REF: u128 = 3;
const REF_ONE: u128 = 1;
/// Dirty flag.
const DIRTY: u128 = 1 << 2;
/// Displacement + 1 (0: empty slot).
const DISP_SHIFT: u32 = 3;
const DISP_BITS: u32 = 7;
const DISP_MASK: u128 = ((1 << DISP_BITS) - 1) << DISP_SHIFT;
/// Farthest an entry may sit from its home; an insert that would go farther grows the table.
pub const MAX_DISP: u64 = (1 << DISP_BITS) - 2;
const KEY_SHIFT: u32 = DISP_SHIFT + DISP_BITS;
/// Entries per 100 slots the table is sized for.
const LOAD_PCT: u64 = 90;
/// Most entries per 100 slots before the table grows.
const MAX_LOAD_PCT: u64 = 95;
/// Read window (bytes): every slot is read as this many bytes.
const WINDOW: usize = 16;

/// What the table holds for one block (returned by value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stored {
    /// Location code (below `2^loc_bits`).
    pub loc: u64,
    /// The record is dirty (not yet on the backing).
    pub dirty: bool,
}

/// What a table is sized for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Entries it holds without growing (at [`LOAD_PCT`] of its slots).
    pub entries: u64,
    /// LBAs are below this.
    pub lba_limit: u64,
    /// Bits of a location code.
    pub loc_bits: u32,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            entries: 0,
            lba_limit: u64::MAX,
            loc_bits: 45,
        }
    }
}

/// The table.
#[derive(Debug)]
pub struct LbaMap {
    /// `n × width` bytes of slots, then [`WINDOW`] bytes of padding.
    bytes: Vec<u8>,
    /// Slots.
    n: usize,
    /// Bytes a slot.
    width: usize,
    /// Bits of a slot.
    slot_mask: u128,
    key_mask: u128,
    loc_shift: u32,
    loc_mask: u128,
    split: KeySplit,
    shape: Shape,
    len: usize,
    /// Slots between two looks of the CLOCK hand (see [`LbaMap::clock_slot`]).
    clock_stride: usize,
}

impl Default for LbaMap {
    fn default() -> Self {
        LbaMap::new(Shape::default())
    }
}

impl LbaMap {
    /// A table that holds `n` entries of any LBA without growing (locations of 45 bits).
    pub fn with_capacity(n: usize) -> Self {
        LbaMap::new(Shape {
            entries: n as u64,
            ..Shape::default()
        })
    }

    /// A table for `shape`.
    pub fn new(shape: Shape) -> Self {
        let n = (shape.entries.saturating_mul(100) / LOAD_PCT + 1).max(16);
        let split = KeySplit::new(n, shape.lba_limit);
        let kb = split.key_bits();
        let loc_shift = KEY_SHIFT + kb;
        let bits = loc_shift + shape.loc_bits;
        debug_assert!(bits <= 128, "{bits} bits a slot");
        let width = bits.div_ceil(8).min(16) as usize;
        let mask = |b: u32| {
            if b >= 128 {
                u128::MAX
            } else {
                (1u128 << b) - 1
            }
        };
        LbaMap {
            bytes: vec![0; n as usize * width + WINDOW],
            n: n as usize,
            width,
            slot_mask: mask(width as u32 * 8),
            key_mask: mask(kb) << KEY_SHIFT,
            loc_shift,
            loc_mask: mask(shape.loc_bits) << loc_shift,
            split,
            shape,
            len: 0,
            clock_stride: stride_for(n as usize),
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No entry held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes allocated by the table.
    pub fn ram_bytes(&self) -> usize {
        self.bytes.capacity()
    }

    /// Bytes a slot.
    pub fn slot_bytes(&self) -> usize {
        self.width
    }

    /// Slots.
    pub fn slots(&self) -> usize {
        self.n
    }

    fn read(&self, i: usize) -> u128 {
        let at = i * self.width;
        if self.width <= 8 {
            // The usual case (6 or 7 bytes): one 8-byte load.
            let mut w = [0u8; 8];
            w.copy_from_slice(&self.bytes[at..at + 8]);
            return u128::from(u64::from_le_bytes(w)) & self.slot_mask;
        }
        let mut w = [0u8; WINDOW];
        w.copy_from_slice(&self.bytes[at..at + WINDOW]);
        u128::from_le_bytes(w) & self.slot_mask
    }

    fn write(&mut self, i: usize, v: u128) {
        let at = i * self.width;
        if self.width <= 8 {
            let mut w = [0u8; 8];
            w.copy_from_slice(&self.bytes[at..at + 8]);
            let mask = self.slot_mask as u64;
            let new = (u64::from_le_bytes(w) & !mask) | (v as u64 & mask);
            self.bytes[at..at + 8].copy_from_slice(&new.to_le_bytes());
            return;
        }
        let mut w = [0u8; WINDOW];
        w.copy_from_slice(&self.bytes[at..at + WINDOW]);
        let old = u128::from_le_bytes(w);
        let new = (old & !self.slot_mask) | (v & self.slot_mask);
        self.bytes[at..at + WINDOW].copy_from_slice(&new.to_le_bytes());
    }

    fn disp(s: u128) -> Option<u64> {
        match ((s & DISP_MASK) >> DISP_SHIFT) as u64 {
            0 => None,
            d => Some(d - 1),
        }
    }

    fn with_disp(s: u128, d: u64) -> u128 {
        (s & !DISP_MASK) | (u128::from(d + 1) << DISP_SHIFT)
    }

    fn next(&self, i: usize) -> usize {
        if i + 1 == self.n {
            0
        } else {
            i + 1
        }
    }

    fn home_of(&self, i: usize, d: u64) -> usize {
        (i + self.n - (d as usize % self.n)) % self.n
    }

    fn stored(&self, s: u128) -> Stored {
        Stored {
            loc: ((s & self.loc_mask) >> self.loc_shift) as u64,
            dirty: s & DIRTY != 0,
        }
    }

    /// The LBA of the occupied slot `i` holding `s`.
    fn lba_at(&self, i: usize, s: u128) -> u64 {
        self.lba_from(i, Self::disp(s).unwrap_or(0), s)
    }

    /// The LBA of an entry with key bits `s` at slot `i`, `d` slots past its home.
    fn lba_from(&self, i: usize, d: u64, s: u128) -> u64 {
        let key = ((s & self.key_mask) >> KEY_SHIFT) as u64;
        self.split.join(self.home_of(i, d), key)
    }

    /// Slot holding `lba`.
    fn find(&self, lba: u64) -> Option<usize> {
        if !self.split.holds(lba) {
            return None;
        }
        let (home, key) = self.split.split(lba);
        let key = u128::from(key) << KEY_SHIFT;
        let mut i = home;
        let mut d = 0;
        loop {
            let s = self.read(i);
            match Self::disp(s) {
                None => return None,
                Some(sd) if sd < d => return None,
                Some(sd) if sd == d && s & self.key_mask == key => return Some(i),
                _ => {}
            }
            i = self.next(i);
            d += 1;
        }
    }

    /// The entry of `lba`.
    pub fn get(&self, lba: u64) -> Option<Stored> {
        self.find(lba).map(|i| self.stored(self.read(i)))
    }

    /// Whether `lba` has an entry.
    pub fn contains_key(&self, lba: u64) -> bool {
        self.find(lba).is_some()
    }

    /// Insert or replace the entry of `lba` (a replaced entry keeps its read count).
    /// Panics (a caller bug) if `lba` is not below the shape's `lba_limit` rounded up to a
    /// power of two or `e.loc` does not fit its `loc_bits`.
    pub fn insert(&mut self, lba: u64, e: Stored) {
        self.put(lba, e, None);
    }

    /// Insert or replace; `refs`: the read count of a new entry (`None`: 0, or the replaced
    /// entry's).
    fn put(&mut self, lba: u64, e: Stored, refs: Option<u128>) {
        assert!(
            self.split.holds(lba)
                && (self.shape.loc_bits >= 64 || e.loc >> self.shape.loc_bits == 0),
            "LBA {lba} or location code {} outside the table's shape",
            e.loc
        );
        let payload = (u128::from(e.loc) << self.loc_shift) | if e.dirty { DIRTY } else { 0 };
        if let Some(i) = self.find(lba) {
            let s = self.read(i);
            let keep = s & (DISP_MASK | self.key_mask);
            let r = refs.unwrap_or(s & REF);
            self.write(i, keep | r | payload);
            return;
        }
        let r = refs.unwrap_or(0);
        if (self.len as u64 + 1) * 100 > self.n as u64 * MAX_LOAD_PCT {
            self.grow((lba, e, r));
            return;
        }
        let (home, key) = self.split.split(lba);
        let carry = (u128::from(key) << KEY_SHIFT) | payload | r;
        match self.place(home, carry, 0) {
            None => self.len += 1,
            Some((i, c, d)) => {
                // Too far from its home: the entry still carried (the new one is in the
                // table) and all the others go to a bigger table.
                let out = (self.lba_from(i, d, c), self.stored(c), c & REF);
                self.grow(out);
            }
        }
    }

    /// Robin Hood placement of `carry` (no displacement bits) starting at slot `i`, `d` past
    /// its home. `None` when placed; else the entry still carried, its slot and distance.
    fn place(&mut self, mut i: usize, mut carry: u128, mut d: u64) -> Option<(usize, u128, u64)> {
        loop {
            if d > MAX_DISP {
                return Some((i, carry, d));
            }
            let s = self.read(i);
            match Self::disp(s) {
                None => {
                    self.write(i, Self::with_disp(carry, d));
                    return None;
                }
                Some(sd) if sd < d => {
                    self.write(i, Self::with_disp(carry, d));
                    carry = s & !DISP_MASK;
                    d = sd;
                }
                _ => {}
            }
            i = self.next(i);
            d += 1;
        }
    }

    /// Count a read of `lba` (saturating); false if absent.
    pub fn touch(&mut self, lba: u64) -> bool {
        match self.find(lba) {
            Some(i) => {
                let s = self.read(i);
                if s & REF != REF {
                    self.write(i, s + REF_ONE);
                }
                true
            }
            None => false,
        }
    }

    /// Whether `lba` was read since passes used up its count (the count is not changed).
    pub fn referenced(&self, lba: u64) -> bool {
        self.find(lba).is_some_and(|i| self.read(i) & REF != 0)
    }

    /// Whether `lba` was read since passes used up its count; lowers the count by one.
    pub fn take_ref(&mut self, lba: u64) -> bool {
        match self.find(lba) {
            Some(i) => self.lower(i),
            None => false,
        }
    }

    fn lower(&mut self, i: usize) -> bool {
        let s = self.read(i);
        let r = s & REF != 0;
        if r {
            self.write(i, s - REF_ONE);
        }
        r
    }

    /// Forget every read count (the working set moved: `crate::shift`). One pass over the
    /// slots, rare (at most once a window of `capacity_blocks / 4` reads).
    pub fn clear_refs(&mut self) {
        for i in 0..self.n {
            let s = self.read(i);
            if s & REF != 0 {
                self.write(i, s & !REF);
            }
        }
    }

    /// Mark `lba` dirty or clean; false if absent.
    pub fn set_dirty(&mut self, lba: u64, dirty: bool) -> bool {
        match self.find(lba) {
            Some(i) => {
                let s = self.read(i) & !DIRTY;
                self.write(i, if dirty { s | DIRTY } else { s });
                true
            }
            None => false,
        }
    }

    /// The slot the CLOCK hand looks at in its `k`th step of a sweep: steps of
    /// `clock_stride` slots, not consecutive ones. Evictions stepping through consecutive
    /// slots would empty the region behind the hand while inserts land everywhere, leaving
    /// the slots just ahead of it fuller than the table can hold (runs past [`MAX_DISP`],
    /// the table doubles: measured, docs/block-cache.md); a stride near `n / φ` spreads
    /// each sweep's evictions over the whole table. Each slot is still looked at once a
    /// sweep (the stride is coprime with `n`).
    fn clock_slot(&self, k: usize) -> usize {
        match (k as u64).checked_mul(self.clock_stride as u64) {
            Some(x) => (x % self.n as u64) as usize,
            None => ((k as u128 * self.clock_stride as u128) % self.n as u128) as usize,
        }
    }

    /// CLOCK: advance `hand` to the next clean entry whose count is 0 (lowering the counts
    /// it passes) for which `skip` is false (`skip` is asked only if `skipping`). At most
    /// four sweeps of the table; `None` if every entry is dirty or skipped.
    pub fn clock_victim(
        &mut self,
        hand: &mut usize,
        skipping: bool,
        skip: impl Fn(u64) -> bool,
    ) -> Option<(u64, Stored)> {
        if self.len == 0 {
            return None;
        }
        for _ in 0..4 * self.n {
            let k = *hand % self.n;
            *hand = k + 1;
            let i = self.clock_slot(k);
            let s = self.read(i);
            if Self::disp(s).is_none() || s & DIRTY != 0 {
                continue;
            }
            if skipping && skip(self.lba_at(i, s)) {
                continue;
            }
            if self.lower(i) {
                continue;
            }
            return Some((self.lba_at(i, s), self.stored(s)));
        }
        None
    }

    /// Change an entry's location (reclaim moved the record); false if absent.
    pub fn set_loc(&mut self, lba: u64, loc: u64) -> bool {
        match self.get(lba) {
            Some(e) => {
                self.insert(lba, Stored { loc, ..e });
                true
            }
            None => false,
        }
    }

    /// Remove the entry of `lba`.
    pub fn remove(&mut self, lba: u64) -> Option<Stored> {
        let mut hole = self.find(lba)?;
        let out = self.stored(self.read(hole));
        // Backward shift: pull each later entry of the run one slot nearer its home.
        loop {
            let j = self.next(hole);
            let s = self.read(j);
            match Self::disp(s) {
                Some(d) if d > 0 => {
                    self.write(hole, Self::with_disp(s, d - 1));
                    hole = j;
                }
                _ => break,
            }
        }
        self.write(hole, 0);
        self.len -= 1;
        Some(out)
    }

    /// Every `(lba, entry)`, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, Stored)> + '_ {
        (0..self.n).filter_map(|i| {
            let s = self.read(i);
            Self::disp(s).map(|_| (self.lba_at(i, s), self.stored(s)))
        })
    }

    /// Rebuild for twice the entries, with one more entry (LBA, entry, read count).
    fn grow(&mut self, extra: (u64, Stored, u128)) {
        let entries = (self.len as u64 + 1)
            .max(self.shape.entries)
            .saturating_mul(2);
        let mut bigger = LbaMap::new(Shape {
            entries,
            ..self.shape
        });
        for i in 0..self.n {
            let s = self.read(i);
            if Self::disp(s).is_some() {
                bigger.put(self.lba_at(i, s), self.stored(s), Some(s & REF));
            }
        }
        bigger.put(extra.0, extra.1, Some(extra.2));
        *self = bigger;
    }
}

/// A stride near `n / φ` coprime with `n`.
fn stride_for(n: usize) -> usize {
    let gcd = |mut a: usize, mut b: usize| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let mut s = ((n as f64 * 0.618_034) as usize).max(1);
    while gcd(s, n) != 1 {
        s += 1;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn st(loc: u64, dirty: bool) -> Stored {
        Stored { loc, dirty }
    }

    /// Apply `ops` (insert, remove, get, touch/take_ref, clear_refs) to a table of `shape` and to a
    /// `HashMap` model; every answer and the final contents must agree.
    fn check_against_model(shape: Shape, lbas: &[u64], ops: &[(u8, usize, u64)]) {
        let mut m = LbaMap::new(shape);
        let mut model: HashMap<u64, (Stored, u8)> = HashMap::new();
        let loc_mask = if shape.loc_bits >= 64 {
            u64::MAX
        } else {
            (1 << shape.loc_bits) - 1
        };
        for (step, &(op, which, x)) in ops.iter().enumerate() {
            let lba = lbas[which % lbas.len()];
            match op % 7 {
                6 => {
                    m.clear_refs();
                    for v in model.values_mut() {
                        v.1 = 0;
                    }
                }
                0 | 1 => {
                    let e = st(x & loc_mask, x % 3 == 0);
                    m.insert(lba, e);
                    let refs = model.get(&lba).map_or(0, |v| v.1);
                    model.insert(lba, (e, refs));
                }
                2 => assert_eq!(
                    m.remove(lba),
                    model.remove(&lba).map(|v| v.0),
                    "step {step}"
                ),
                3 => {
                    assert_eq!(m.touch(lba), model.contains_key(&lba));
                    if let Some(v) = model.get_mut(&lba) {
                        v.1 = (v.1 + 1).min(3);
                    }
                }
                4 => {
                    let want = model.get(&lba).is_some_and(|v| v.1 > 0);
                    assert_eq!(m.take_ref(lba), want, "step {step}");
                    if let Some(v) = model.get_mut(&lba) {
                        v.1 = v.1.saturating_sub(1);
                    }
                }
                _ => {
                    assert_eq!(m.get(lba), model.get(&lba).map(|v| v.0), "step {step}");
                    assert_eq!(m.referenced(lba), model.get(&lba).is_some_and(|v| v.1 > 0));
                }
            }
            assert_eq!(m.len(), model.len());
        }
        let mut all: Vec<(u64, Stored)> = m.iter().collect();
        all.sort_unstable_by_key(|e| e.0);
        let mut want: Vec<(u64, Stored)> = model.into_iter().map(|(l, v)| (l, v.0)).collect();
        want.sort_unstable_by_key(|e| e.0);
        assert_eq!(all, want);
    }

    /// LBAs of a backing of `limit` blocks: both ends of the range, and random ones.
    fn lbas_for(limit: u64, seed: u64, k: usize) -> Vec<u64> {
        let mut v = vec![0, 1, limit - 1, limit - 2, limit / 2];
        let mut x = seed | 1;
        while v.len() < k {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            v.push(x % limit);
        }
        v
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn matches_a_hashmap_model(
            limit in prop_oneof![Just(u64::MAX), 8u64..=1 << 20, (1u64 << 30)..=1 << 40],
            entries in 1u64..200,
            loc_bits in prop_oneof![Just(45u32), 1u32..=40],
            seed in any::<u64>(),
            ops in proptest::collection::vec((any::<u8>(), any::<usize>(), any::<u64>()), 1..3000),
        ) {
            // A key space a little larger than the table: runs collide, wrap, shift and
            // the table grows past its shape.
            let k = (entries as usize * 3 / 2).clamp(5, 400);
            let lbas = lbas_for(limit, seed, k);
            check_against_model(Shape { entries, lba_limit: limit, loc_bits }, &lbas, &ops);
        }
    }

    #[test]
    fn a_full_table_and_a_crowded_home_still_answer_exactly() {
        // 200 LBAs that all share one home slot in a 16-slot table: the table grows as
        // displacements pass MAX_DISP or the load passes MAX_LOAD_PCT.
        let probe = LbaMap::new(Shape {
            entries: 10,
            lba_limit: 1 << 16,
            loc_bits: 20,
        });
        let same: Vec<u64> = (0..1u64 << 16)
            .filter(|l| probe.split.split(*l).0 == 3)
            .take(200)
            .collect();
        assert!(same.len() >= 150, "{}", same.len());
        let ops: Vec<(u8, usize, u64)> = (0..same.len())
            .map(|i| (0, i, i as u64))
            .chain((0..same.len()).map(|i| (5, i, 0)))
            .chain((0..same.len()).step_by(3).map(|i| (2, i, 0)))
            .chain((0..same.len()).map(|i| (5, i, 0)))
            .collect();
        check_against_model(
            Shape {
                entries: 10,
                lba_limit: 1 << 16,
                loc_bits: 20,
            },
            &same,
            &ops,
        );
        // Exactly the sized number of entries at a device's extremes: no growth.
        let shape = Shape {
            entries: 5000,
            lba_limit: (1 << 36) + 7,
            loc_bits: 32,
        };
        let mut m = LbaMap::new(shape);
        let before = m.ram_bytes();
        let lbas = lbas_for(shape.lba_limit, 99, 5000);
        for (i, l) in lbas.iter().enumerate() {
            m.insert(
                *l,
                st(if i == 0 { u32::MAX as u64 } else { i as u64 }, false),
            );
        }
        assert_eq!(m.ram_bytes(), before, "grew although sized for the entries");
        assert_eq!(m.get(lbas[0]), Some(st(u32::MAX as u64, false)));
        assert_eq!(m.get(lbas[2]), Some(st(2, false)), "the last LBA");
        assert!(m.get(lbas[3] + 1).is_none() || lbas.contains(&(lbas[3] + 1)));
        assert!(m.get(1 << 40).is_none(), "outside the domain");
    }

    #[test]
    fn slots_are_six_or_seven_bytes_on_realistic_devices() {
        // (cache blocks, backing blocks, location bits: device bytes / 16) → bytes a slot.
        for (blocks, backing, loc_bits, width) in [
            (7_000u64, 1u64 << 28, 21u32, 6usize), // 32 MiB cache, 1 TiB backing
            (120_000, 1 << 28, 25, 6),             // 512 MiB
            (16_000_000, 1 << 30, 32, 6),          // 64 GiB, 4 TiB backing
            (16_000_000, 1 << 36, 32, 7),          // 64 GiB, 256 TiB backing
        ] {
            let m = LbaMap::new(Shape {
                entries: blocks,
                lba_limit: backing,
                loc_bits,
            });
            assert_eq!(m.slot_bytes(), width, "{blocks} {backing}");
            let per = m.ram_bytes() as f64 / blocks as f64;
            assert!(per <= 8.0, "{per} bytes a block");
        }
    }

    #[test]
    fn sized_table_stays_under_eight_bytes_a_block_when_full() {
        let n = 100_000u64;
        let mut m = LbaMap::new(Shape {
            entries: n,
            lba_limit: 1 << 32,
            loc_bits: 28,
        });
        let before = m.ram_bytes();
        for i in 0..n {
            m.insert(i * 7919, st(i, false));
        }
        assert_eq!(m.ram_bytes(), before, "grew although sized for n");
        let per = m.ram_bytes() as f64 / n as f64;
        assert!(per <= 8.0, "{per} bytes per block");
        assert!(m.set_loc(7919, 5));
        assert_eq!(m.get(7919).map(|e| e.loc), Some(5));
    }

    #[test]
    fn clock_gives_referenced_blocks_a_second_chance_and_skips_dirty_ones() {
        let mut m = LbaMap::with_capacity(8);
        for lba in 0..4u64 {
            m.insert(lba, st(lba, lba == 3));
        }
        assert!(m.touch(0) && m.touch(1) && !m.touch(9));
        // A count saturates at 3 and the hand takes one per pass.
        for _ in 0..5 {
            m.touch(3);
        }
        // The mark survives a replacement (a move by reclaim) and hides from `get`.
        assert!(m.set_loc(0, 40));
        assert_eq!(m.get(0).map(|e| e.loc), Some(40));
        let mut hand = 0;
        let (lba, e) = m.clock_victim(&mut hand, false, |_| false).unwrap();
        assert_eq!(lba, 2, "the only clean unreferenced block");
        assert!(!e.dirty);
        m.remove(lba);
        // Both marks were cleared by the pass: next victims are 0 and 1, never dirty 3.
        let mut got = Vec::new();
        while let Some((l, _)) = m.clock_victim(&mut hand, true, |l| l == 99) {
            got.push(l);
            m.remove(l);
        }
        got.sort_unstable();
        assert_eq!(got, vec![0, 1]);
        assert!(m.contains_key(3));
        assert!(m.take_ref(3) && m.take_ref(3) && m.take_ref(3) && !m.take_ref(3));
        m.touch(3);
        assert!(m.take_ref(3) && !m.take_ref(3));
        // A skipped block is passed over; clean again, it is the victim.
        assert!(m.set_dirty(3, false));
        assert!(m.clock_victim(&mut hand, true, |l| l == 3).is_none());
        assert_eq!(
            m.clock_victim(&mut hand, true, |_| false).map(|v| v.0),
            Some(3)
        );
    }
}

#[cfg(test)]
mod churn {
    use super::*;

    /// Entries' distance from home after `steps` replacements by the CLOCK hand (no block
    /// read: the hand evicts whatever it reaches) at the sized load: (slots, max, mean).
    fn churn(n: u64, steps: u64) -> (usize, u64, f64) {
        let mut m = LbaMap::new(Shape {
            entries: n,
            lba_limit: 1 << 28,
            loc_bits: 30,
        });
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % (1 << 28)
        };
        while (m.len() as u64) < n {
            m.insert(
                next(),
                Stored {
                    loc: 1,
                    dirty: false,
                },
            );
        }
        let mut hand = 0;
        for _ in 0..steps {
            let l = next();
            if m.contains_key(l) {
                continue;
            }
            let (v, _) = m.clock_victim(&mut hand, false, |_| false).unwrap();
            m.remove(v);
            m.insert(
                l,
                Stored {
                    loc: 1,
                    dirty: false,
                },
            );
        }
        let (mut max, mut sum) = (0, 0);
        for i in 0..m.n {
            if let Some(d) = LbaMap::disp(m.read(i)) {
                max = max.max(d);
                sum += d;
            }
        }
        (m.slots(), max, sum as f64 / m.len() as f64)
    }

    #[test]
    fn clock_evictions_do_not_crowd_the_table() {
        let n = 200_000;
        let sized = LbaMap::new(Shape {
            entries: n,
            lba_limit: 1 << 28,
            loc_bits: 30,
        })
        .slots();
        let (slots, max, mean) = churn(n, 4 * n);
        eprintln!(
            "after {} replacements: {slots} slots, distance max {max} mean {mean:.2}",
            4 * n
        );
        assert_eq!(slots, sized, "the table grew (max {max}, mean {mean:.1})");
        assert!(mean < 8.0, "mean distance {mean:.1}");
    }
}
