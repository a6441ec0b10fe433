//! [`LbaMap`]: LBA → (location, version, dirty) in one flat open-addressing table, 24 bytes a
//! slot, sized once for the most blocks the cache device can hold (why not a `HashMap`:
//! docs/block-cache.md "The LBA table").
//!
//! Linear probing with backward-shift deletion (no tombstones). Invariant: every entry sits in
//! the cyclic run of occupied slots that starts at its home slot, so a lookup stops at the first
//! empty slot. A slot stores `LBA + 1`, so an all-zero slot is empty and the table is allocated
//! zeroed. No LBA is `u64::MAX` (LBAs are below the backing's block count).
//!
//! Guarded by the index mutex like the rest of [`crate::index`].

/// An empty slot's key (keys are LBA + 1).
const EMPTY: u64 = 0;
/// Dirty flag, packed above the location (locations use 45 bits).
const DIRTY: u64 = 1 << 63;
/// Reference count (CLOCK with frequency, 2 bits at 61..63): raised (up to 3) when the
/// block is read, lowered by one each time the CLOCK hand passes it or reclaim passes it
/// within its age budget, so a block read often survives several passes. Kept across
/// inserts that replace an entry.
const REF: u64 = 3 << REF_SHIFT;
const REF_SHIFT: u32 = 61;
const REF_ONE: u64 = 1 << REF_SHIFT;
/// Most entries per 100 slots before the table grows.
const MAX_LOAD_PCT: usize = 85;

/// One cached block as stored in the table (returned by value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Packed [`flashtier_flash::Location`].
    pub loc: u64,
    /// Version of the record at `loc`.
    pub version: u64,
    /// The record is dirty (not yet on the backing).
    pub dirty: bool,
}

/// `[LBA + 1, location | dirty, version]`; all zero = empty. An array, not a struct, so
/// `vec![FREE; n]` allocates zeroed memory.
type Slot = [u64; 3];

const FREE: Slot = [EMPTY, 0, 0];

/// The table.
#[derive(Debug, Default)]
pub struct LbaMap {
    slots: Vec<Slot>,
    len: usize,
}

impl LbaMap {
    /// A table that holds `n` entries without growing.
    pub fn with_capacity(n: usize) -> Self {
        LbaMap {
            slots: vec![FREE; Self::slots_for(n)],
            len: 0,
        }
    }

    fn slots_for(n: usize) -> usize {
        (n.saturating_mul(100) / MAX_LOAD_PCT + 1).max(16)
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
        self.slots.capacity() * std::mem::size_of::<Slot>()
    }

    fn home(&self, key: u64) -> usize {
        let h = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        ((u128::from(h) * self.slots.len() as u128) >> 64) as usize
    }

    fn next(&self, i: usize) -> usize {
        if i + 1 == self.slots.len() {
            0
        } else {
            i + 1
        }
    }

    /// Slot holding `key` (LBA + 1), or the empty slot where it would go.
    fn probe(&self, key: u64) -> (usize, bool) {
        let mut i = self.home(key);
        loop {
            let s = self.slots[i][0];
            if s == key {
                return (i, true);
            }
            if s == EMPTY {
                return (i, false);
            }
            i = self.next(i);
        }
    }

    fn entry_at(&self, i: usize) -> Entry {
        let [_, word, version] = self.slots[i];
        Entry {
            loc: word & !(DIRTY | REF),
            version,
            dirty: word & DIRTY != 0,
        }
    }

    /// The entry of `lba`.
    pub fn get(&self, lba: u64) -> Option<Entry> {
        if self.slots.is_empty() || lba == u64::MAX {
            return None;
        }
        match self.probe(lba.wrapping_add(1)) {
            (i, true) => Some(self.entry_at(i)),
            _ => None,
        }
    }

    /// Whether `lba` has an entry.
    pub fn contains_key(&self, lba: u64) -> bool {
        self.get(lba).is_some()
    }

    /// Insert or replace the entry of `lba` (`lba` must not be `u64::MAX`).
    pub fn insert(&mut self, lba: u64, e: Entry) {
        debug_assert!(lba != u64::MAX && e.loc & (DIRTY | REF) == 0);
        if (self.len + 1) * 100 > self.slots.len() * MAX_LOAD_PCT {
            self.grow();
        }
        let key = lba.wrapping_add(1);
        let (i, found) = self.probe(key);
        let r = if found {
            self.slots[i][1] & REF
        } else {
            self.len += 1;
            0
        };
        self.slots[i] = [key, e.loc | r | if e.dirty { DIRTY } else { 0 }, e.version];
    }

    /// Count a read of `lba` (saturating); false if absent.
    pub fn touch(&mut self, lba: u64) -> bool {
        if self.slots.is_empty() || lba == u64::MAX {
            return false;
        }
        match self.probe(lba.wrapping_add(1)) {
            (i, true) => {
                if self.slots[i][1] & REF != REF {
                    self.slots[i][1] += REF_ONE;
                }
                true
            }
            _ => false,
        }
    }

    /// Whether `lba` was read since passes used up its count (the count is not changed).
    pub fn referenced(&self, lba: u64) -> bool {
        if self.slots.is_empty() || lba == u64::MAX {
            return false;
        }
        match self.probe(lba.wrapping_add(1)) {
            (i, true) => self.slots[i][1] & REF != 0,
            _ => false,
        }
    }

    /// Whether `lba` was read since passes used up its count; lowers the count by one.
    pub fn take_ref(&mut self, lba: u64) -> bool {
        if self.slots.is_empty() || lba == u64::MAX {
            return false;
        }
        match self.probe(lba.wrapping_add(1)) {
            (i, true) => Self::lower(&mut self.slots[i]),
            _ => false,
        }
    }

    fn lower(slot: &mut Slot) -> bool {
        let r = slot[1] & REF != 0;
        if r {
            slot[1] -= REF_ONE;
        }
        r
    }

    /// CLOCK: advance `hand` to the next clean entry whose count is 0 (lowering the counts
    /// it passes) for which `skip` is false. At most four sweeps of the table; `None` if
    /// every entry is dirty or skipped.
    pub fn clock_victim(
        &mut self,
        hand: &mut usize,
        skip: impl Fn(u64) -> bool,
    ) -> Option<(u64, Entry)> {
        let n = self.slots.len();
        if n == 0 || self.len == 0 {
            return None;
        }
        for _ in 0..4 * n {
            let i = *hand % n;
            *hand = i + 1;
            let [key, word, _] = self.slots[i];
            if key == EMPTY || word & DIRTY != 0 || skip(key - 1) {
                continue;
            }
            if Self::lower(&mut self.slots[i]) {
                continue;
            }
            return Some((key - 1, self.entry_at(i)));
        }
        None
    }

    /// Change an entry's location (reclaim moved the record); false if absent.
    pub fn set_loc(&mut self, lba: u64, loc: u64) -> bool {
        match self.get(lba) {
            Some(e) => {
                self.insert(lba, Entry { loc, ..e });
                true
            }
            None => false,
        }
    }

    /// Remove the entry of `lba`.
    pub fn remove(&mut self, lba: u64) -> Option<Entry> {
        if self.slots.is_empty() || lba == u64::MAX {
            return None;
        }
        let (mut hole, found) = self.probe(lba.wrapping_add(1));
        if !found {
            return None;
        }
        let out = self.entry_at(hole);
        let n = self.slots.len();
        let mut j = self.next(hole);
        // Backward shift: pull each later entry of the run into the hole if the hole lies
        // between its home and its slot.
        while self.slots[j][0] != EMPTY {
            let h = self.home(self.slots[j][0]);
            let from_home = (j + n - h) % n;
            let from_hole = (j + n - hole) % n;
            if from_home >= from_hole {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
            j = self.next(j);
        }
        self.slots[hole] = FREE;
        self.len -= 1;
        Some(out)
    }

    /// Every `(lba, entry)`, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, Entry)> + '_ {
        (0..self.slots.len())
            .filter(|i| self.slots[*i][0] != EMPTY)
            .map(|i| (self.slots[i][0] - 1, self.entry_at(i)))
    }

    fn grow(&mut self) {
        let old = std::mem::take(&mut self.slots);
        self.slots = vec![FREE; Self::slots_for((self.len + 1) * 2)];
        self.len = 0;
        for s in old.into_iter().filter(|s| s[0] != EMPTY) {
            let (i, _) = self.probe(s[0]);
            self.slots[i] = s;
            self.len += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn matches_a_hashmap_under_random_operations() {
        let mut m = LbaMap::with_capacity(40);
        let mut model: HashMap<u64, Entry> = HashMap::new();
        let mut x = 12345u64;
        for step in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // A small key space so runs collide, wrap and shift; u64::MAX is never stored.
            let lba = if step % 1000 == 999 {
                u64::MAX
            } else {
                x % 300
            };
            match x >> 60 {
                0..=6 if lba != u64::MAX => {
                    let e = Entry {
                        loc: step & ((1 << 45) - 1),
                        version: step,
                        dirty: step % 3 == 0,
                    };
                    m.insert(lba, e);
                    model.insert(lba, e);
                }
                7..=12 => assert_eq!(m.remove(lba), model.remove(&lba), "step {step}"),
                _ => assert_eq!(m.get(lba), model.get(&lba).copied(), "step {step}"),
            }
            assert_eq!(m.len(), model.len());
        }
        let mut all: Vec<(u64, Entry)> = m.iter().collect();
        all.sort_unstable_by_key(|e| e.0);
        let mut want: Vec<(u64, Entry)> = model.into_iter().collect();
        want.sort_unstable_by_key(|e| e.0);
        assert_eq!(all, want);
    }

    #[test]
    fn sized_table_stays_under_thirty_bytes_a_block_when_full() {
        let n = 100_000;
        let mut m = LbaMap::with_capacity(n);
        let before = m.ram_bytes();
        for i in 0..n as u64 {
            m.insert(
                i * 7919,
                Entry {
                    loc: i,
                    version: i,
                    dirty: false,
                },
            );
        }
        assert_eq!(m.ram_bytes(), before, "grew although sized for n");
        let per = m.ram_bytes() as f64 / n as f64;
        assert!(per < 30.0, "{per} bytes per block");
        assert!(m.set_loc(7919, 5));
        assert_eq!(m.get(7919).map(|e| e.loc), Some(5));
    }

    #[test]
    fn clock_gives_referenced_blocks_a_second_chance_and_skips_dirty_ones() {
        let mut m = LbaMap::with_capacity(8);
        for lba in 0..4u64 {
            let e = Entry {
                loc: lba,
                version: lba,
                dirty: lba == 3,
            };
            m.insert(lba, e);
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
        let (lba, e) = m.clock_victim(&mut hand, |_| false).unwrap();
        assert_eq!(lba, 2, "the only clean unreferenced block");
        assert!(!e.dirty);
        m.remove(lba);
        // Both marks were cleared by the pass: next victims are 0 and 1, never dirty 3.
        let mut got = Vec::new();
        while let Some((l, _)) = m.clock_victim(&mut hand, |_| false) {
            got.push(l);
            m.remove(l);
        }
        got.sort_unstable();
        assert_eq!(got, vec![0, 1]);
        assert!(m.contains_key(3));
        assert!(m.take_ref(3) && m.take_ref(3) && m.take_ref(3) && !m.take_ref(3));
        m.touch(3);
        assert!(m.take_ref(3) && !m.take_ref(3));
    }
}
