//! What RAM keeps per set instead of an index entry per object: a 64-bit Bloom filter of the
//! keys on the set's page (2 bits per key) and 16 hit bits (Kangaroo's RRIParoo: the RRIP
//! values live on flash, only "read since the page was written" in RAM; entry `i` of the page
//! has hit bit `i % 16`, so on a page of more than 16 entries two share a bit and a read of one
//! keeps the other too). 10 bytes a set; with ~21 objects of 100 bytes a set (a 4 GiB file
//! holding 20M) that is ~3.8 bits an object.
//!
//! Why this size (issue 28, RAM per object): until 2026-11-28 a set took 20 bytes (a 128-bit
//! filter with 3 bits a key, 32 hit bits), 0.96 B an object of the 20M shape — alone near the
//! ≤ 1 B target. Halving the filter raises its false-positive rate at 21 keys from ~6 % to
//! ~23 % (2 bits of 64: the best count at that load): a GET of a key the tier does not hold
//! reads a page ~23 % of the time instead of ~6 %, and a SET of a new key stages a delete
//! that often (a false "maybe" costs a tombstone in the log; it never changes an answer).
//! Measured: docs/benchmarks.md, "Smaller set summaries".
//!
//! Invariants: the filter holds every key on the page (no false negatives): the merge first
//! ORs the new page's keys in, writes the page, then stores the new page's exact filter,
//! which is a subset of what was there. Hit bits are cleared when the page is rewritten.
//! Nothing here is on flash: the open rebuilds every filter from the pages, so the size
//! changed no file layout.
//!
//! # Threads
//! Lock-free: readers on any thread, the flusher thread writes.
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering::Relaxed};

use crate::hugepages::Fixed;

/// Bytes of RAM one set's summary takes: the filter word and the hit bits.
pub const BYTES_PER_SET: u64 = 10;
/// Hit bits a set keeps (entry `i` uses bit `i % HIT_BITS`).
const HIT_BITS: u32 = 16;

/// Mix a 64-bit key hash (splitmix64's finalizer): the set and filter bits must not reuse the
/// bits the cache's index already used.
pub fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The filter's two bits for a key hash.
fn bits(hash: u64) -> u64 {
    let m = mix(hash ^ 0x5851_f42d_4c95_7f2d);
    (1u64 << (m & 63)) | (1u64 << ((m >> 6) & 63))
}

/// A filter value holding `hashes`.
pub fn filter_of(hashes: impl IntoIterator<Item = u64>) -> u64 {
    hashes.into_iter().fold(0, |f, h| f | bits(h))
}

/// Every set's filter and hit bits.
pub struct Summaries {
    filters: Fixed<AtomicU64>,
    hits: Fixed<AtomicU16>,
}

impl Summaries {
    /// Summaries of `sets` empty sets.
    #[cfg(test)]
    pub fn new(sets: u32) -> Self {
        Self::with_hugepages(sets, false)
    }

    /// Summaries of `sets` empty sets, with `huge` in huge-page mappings where worth it
    /// (`hugepages`).
    pub fn with_hugepages(sets: u32, huge: bool) -> Self {
        Self {
            filters: Fixed::new(sets as usize, huge),
            hits: Fixed::new(sets as usize, huge),
        }
    }

    /// Bytes of the summaries advised `MADV_HUGEPAGE` (`small_hugepage_bytes`).
    pub fn hugepage_bytes(&self) -> u64 {
        self.filters.advised_bytes() + self.hits.advised_bytes()
    }

    /// True when the set's page may hold the key (false: it does not).
    pub fn may_hold(&self, set: u32, hash: u64) -> bool {
        let Some(f) = self.filters.get(set as usize) else {
            return false;
        };
        let b = bits(hash);
        f.load(Relaxed) & b == b
    }

    /// Add the keys of a page about to be written (before the write).
    pub fn widen(&self, set: u32, f: u64) {
        if let Some(cur) = self.filters.get(set as usize) {
            cur.fetch_or(f, Relaxed);
        }
    }

    /// The exact filter of the page just written; its hit bits start clear.
    pub fn store(&self, set: u32, f: u64) {
        if let Some(cur) = self.filters.get(set as usize) {
            cur.store(f, Relaxed);
        }
        if let Some(h) = self.hits.get(set as usize) {
            h.store(0, Relaxed);
        }
    }

    /// Entry `slot` of the set's page was read.
    pub fn hit(&self, set: u32, slot: u8) {
        if let Some(h) = self.hits.get(set as usize) {
            h.fetch_or(1 << (u32::from(slot) % HIT_BITS), Relaxed);
        }
    }

    /// The set's hit bits by page entry (entry `i` read since the page was written — or, past
    /// the 16th entry, the entry sharing its bit: bit `i`), for the merge's 32 entries.
    pub fn hits(&self, set: u32) -> u32 {
        let h = self.hits.get(set as usize).map_or(0, |h| h.load(Relaxed));
        u32::from(h) | (u32::from(h) << HIT_BITS)
    }

    /// Forget every page (`flush_all`): nothing is on flash for the new generation.
    pub fn clear(&self) {
        for (f, h) in self.filters.iter().zip(self.hits.iter()) {
            f.store(0, Relaxed);
            h.store(0, Relaxed);
        }
    }

    /// Bytes of RAM the summaries take.
    pub fn ram_bytes(&self) -> u64 {
        self.filters.len() as u64 * BYTES_PER_SET
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_filter_never_forgets_its_keys_and_rarely_claims_others() {
        let s = Summaries::new(4);
        let keys: Vec<u64> = (0..21u64).map(|i| mix(i + 1)).collect();
        s.store(2, filter_of(keys.iter().copied()));
        assert!(keys.iter().all(|&h| s.may_hold(2, h)));
        assert!(!s.may_hold(1, keys[0]));
        let false_pos = (1000..11000u64).filter(|&i| s.may_hold(2, mix(i))).count();
        // Two bits of 64 per key, 21 keys: about 23 % in theory.
        assert!(false_pos < 3500, "{false_pos} of 10000");
    }

    /// The false-positive rate over many sets at the loads the tier sees (15–28 keys a set)
    /// stays near the theory the module docs quote, and a filter widened then stored with a
    /// subset still holds that subset (what a reader between the two sees).
    #[test]
    fn false_positive_rates_match_the_docs() {
        for (keys, theory) in [(15u64, 0.140), (21, 0.232), (28, 0.340)] {
            let sets = 2000u32;
            let s = Summaries::new(sets);
            for set in 0..sets {
                let base = u64::from(set) << 20;
                s.widen(set, filter_of((0..keys + 5).map(|i| mix(base + i))));
                s.store(set, filter_of((0..keys).map(|i| mix(base + i))));
                assert!((0..keys).all(|i| s.may_hold(set, mix(base + i))));
            }
            let probes = 50u64;
            let fp = (0..sets)
                .flat_map(|set| {
                    (0..probes).map(move |i| (set, mix((u64::from(set) << 20) + 1000 + i)))
                })
                .filter(|&(set, h)| s.may_hold(set, h))
                .count() as f64
                / (f64::from(sets) * probes as f64);
            assert!(
                (fp - theory).abs() < 0.03,
                "{keys} keys: {fp:.3} vs {theory}"
            );
        }
    }

    #[test]
    fn hits_are_per_entry_shared_past_16_and_cleared_by_a_rewrite() {
        let s = Summaries::new(2);
        s.hit(1, 0);
        s.hit(1, 31);
        s.hit(1, 40);
        // 31 shares bit 15 with entry 15; 40 shares bit 8 with entries 8 and 24.
        let both = |i: u32| 1u32 << i | 1 << (i + 16);
        assert_eq!(s.hits(1), both(0) | both(15) | both(8));
        assert_eq!(s.hits(0), 0);
        s.store(1, 0);
        assert_eq!(s.hits(1), 0);
        assert_eq!(s.ram_bytes(), 20);
    }
}
