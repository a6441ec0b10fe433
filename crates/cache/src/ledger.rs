//! Why a GET missed: a record of how keys last left the cache, read when a GET finds no item,
//! so `stats` splits misses by cause (`get_misses_*`, docs/stats.md).
//!
//! A departure other than an overwrite — flash reclaim dropping the item (old or young, see
//! `flash_tier::reclaim`), RAM evicting an item with no flash copy, a failed flash write, an
//! expired or flushed item removed — writes the key hash's 29-bit fingerprint and a 3-bit
//! cause into a direct-mapped array (`ghost_entries` × 2 slots, 4 bytes each). A newer
//! departure overwrites an older one in the same slot; a key stored again keeps its entry
//! until it leaves again (so a miss after a later DELETE is counted under the earlier cause).
//! Misses that find no entry are `unknown` (never stored, deleted, or the slot was reused).
//! Lock-free, any thread.
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

/// How a key left the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Cause {
    /// Flash reclaim dropped it (unhit past the budget, or past the keep limit), appended at
    /// least half a turnover (items held ÷ 2) ago.
    ReclaimOld = 1,
    /// Flash reclaim dropped it although appended within the last half turnover.
    ReclaimYoung = 2,
    /// RAM evicted it and no flash copy took it.
    RamEvicted = 3,
    /// Its flash write failed after RAM had let it go.
    Lost = 4,
    /// Removed as expired or flushed.
    Expired = 5,
}

const CAUSES: usize = 6;
/// `stats` names, by cause number (0 = no entry).
pub(crate) const MISS_NAMES: [&str; CAUSES] = [
    "get_misses_unknown",
    "get_misses_reclaimed_old",
    "get_misses_reclaimed_young",
    "get_misses_ram_evicted",
    "get_misses_lost",
    "get_misses_expired",
];

/// The departure ledger and the misses it classified. See the module docs.
#[derive(Debug)]
pub(crate) struct Ledger {
    slots: Box<[AtomicU32]>,
    misses: [AtomicU64; CAUSES],
}

impl Ledger {
    /// A ledger of `n` entries (at least 1).
    pub fn new(n: usize) -> Self {
        Self {
            slots: (0..n.max(1)).map(|_| AtomicU32::new(0)).collect(),
            misses: Default::default(),
        }
    }

    fn place(&self, hash: u64) -> (usize, u32) {
        let mixed = hash.rotate_left(17).wrapping_mul(0xff51_afd7_ed55_8ccd) >> 32;
        let i = ((mixed * self.slots.len() as u64) >> 32) as usize;
        (i, ((hash >> 35) as u32) << 3)
    }

    /// `hash` left the cache by `cause`.
    pub fn departed(&self, hash: u64, cause: Cause) {
        let (i, fp) = self.place(hash);
        self.slots[i].store(fp | cause as u32, Relaxed);
    }

    /// A GET of `hash` missed: count it under the cause of its last departure.
    pub fn missed(&self, hash: u64) {
        let (i, fp) = self.place(hash);
        let v = self.slots[i].load(Relaxed);
        let cause = if v != 0 && v & !7 == fp { v & 7 } else { 0 };
        self.misses[cause as usize].fetch_add(1, Relaxed);
    }

    /// `(stats name, misses)` for every cause.
    pub fn counts(&self) -> Vec<(&'static str, u64)> {
        MISS_NAMES
            .iter()
            .zip(&self.misses)
            .map(|(n, c)| (*n, c.load(Relaxed)))
            .collect()
    }

    /// Bytes of RAM used.
    pub fn memory_bytes(&self) -> usize {
        self.slots.len() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(l: &Ledger, name: &str) -> u64 {
        l.counts().into_iter().find(|(n, _)| *n == name).unwrap().1
    }

    #[test]
    fn misses_are_counted_by_the_last_departure() {
        let l = Ledger::new(1024);
        l.missed(7);
        assert_eq!(count(&l, "get_misses_unknown"), 1);
        l.departed(7, Cause::ReclaimYoung);
        l.missed(7);
        assert_eq!(count(&l, "get_misses_reclaimed_young"), 1);
        l.departed(7, Cause::RamEvicted);
        l.missed(7);
        l.missed(8);
        assert_eq!(count(&l, "get_misses_ram_evicted"), 1);
        assert_eq!(count(&l, "get_misses_unknown"), 2);
        for c in [Cause::ReclaimOld, Cause::Lost, Cause::Expired] {
            l.departed(1 << 40, c);
            l.missed(1 << 40);
        }
        assert_eq!(count(&l, "get_misses_reclaimed_old"), 1);
        assert_eq!(count(&l, "get_misses_lost"), 1);
        assert_eq!(count(&l, "get_misses_expired"), 1);
    }
}
