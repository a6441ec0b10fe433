//! What RAM keeps per set instead of an index entry per object: a 128-bit Bloom filter of the
//! keys on the set's page (3 bits per key) and one hit bit per page entry (Kangaroo's
//! RRIParoo: the RRIP values live on flash, only "read since the page was written" in RAM).
//! 20 bytes a set; with ~30 objects of 100 bytes a set that is ~5.3 bits an object.
//!
//! Invariants: the filter holds every key on the page (no false negatives): the merge first
//! ORs the new page's keys in, writes the page, then stores the new page's exact filter,
//! which is a subset of what was there; a reader mixing old and new words still sees every
//! key of the new page. Hit bits are cleared when the page is rewritten.
//!
//! # Threads
//! Lock-free: readers on any thread, the flusher thread writes.
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

/// Bytes of RAM one set's summary takes.
pub const BYTES_PER_SET: u64 = 20;

/// Mix a 64-bit key hash (splitmix64's finalizer): the set and filter bits must not reuse the
/// bits the cache's index already used.
pub fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The filter's three bit positions (0..128) for a key hash.
fn bits(hash: u64) -> [u32; 3] {
    let m = mix(hash ^ 0x5851_f42d_4c95_7f2d);
    [
        (m & 127) as u32,
        ((m >> 7) & 127) as u32,
        ((m >> 14) & 127) as u32,
    ]
}

/// A filter value (two words) holding `hashes`.
pub fn filter_of(hashes: impl IntoIterator<Item = u64>) -> [u64; 2] {
    let mut f = [0u64; 2];
    for h in hashes {
        for b in bits(h) {
            let w = (b / 64) as usize;
            if let Some(word) = f.get_mut(w) {
                *word |= 1 << (b % 64);
            }
        }
    }
    f
}

/// Every set's filter and hit bits.
pub struct Summaries {
    filters: Vec<[AtomicU64; 2]>,
    hits: Vec<AtomicU32>,
}

impl Summaries {
    /// Summaries of `sets` empty sets.
    pub fn new(sets: u32) -> Self {
        Self {
            filters: (0..sets)
                .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
                .collect(),
            hits: (0..sets).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// True when the set's page may hold the key (false: it does not).
    pub fn may_hold(&self, set: u32, hash: u64) -> bool {
        let Some(f) = self.filters.get(set as usize) else {
            return false;
        };
        let f = [f[0].load(Relaxed), f[1].load(Relaxed)];
        bits(hash)
            .iter()
            .all(|&b| f[(b / 64) as usize] & (1 << (b % 64)) != 0)
    }

    /// Add the keys of a page about to be written (before the write).
    pub fn widen(&self, set: u32, f: [u64; 2]) {
        if let Some(cur) = self.filters.get(set as usize) {
            cur[0].fetch_or(f[0], Relaxed);
            cur[1].fetch_or(f[1], Relaxed);
        }
    }

    /// The exact filter of the page just written; its hit bits start clear.
    pub fn store(&self, set: u32, f: [u64; 2]) {
        if let Some(cur) = self.filters.get(set as usize) {
            cur[0].store(f[0], Relaxed);
            cur[1].store(f[1], Relaxed);
        }
        if let Some(h) = self.hits.get(set as usize) {
            h.store(0, Relaxed);
        }
    }

    /// Entry `slot` of the set's page was read.
    pub fn hit(&self, set: u32, slot: u8) {
        if let (Some(h), true) = (self.hits.get(set as usize), slot < 32) {
            h.fetch_or(1 << slot, Relaxed);
        }
    }

    /// The set's hit bits (entry `i` read since the page was written: bit `i`).
    pub fn hits(&self, set: u32) -> u32 {
        self.hits.get(set as usize).map_or(0, |h| h.load(Relaxed))
    }

    /// Forget every page (`flush_all`): nothing is on flash for the new generation.
    pub fn clear(&self) {
        for (f, h) in self.filters.iter().zip(&self.hits) {
            f[0].store(0, Relaxed);
            f[1].store(0, Relaxed);
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
        let keys: Vec<u64> = (0..30u64).map(|i| mix(i + 1)).collect();
        s.store(2, filter_of(keys.iter().copied()));
        assert!(keys.iter().all(|&h| s.may_hold(2, h)));
        assert!(!s.may_hold(1, keys[0]));
        let false_pos = (1000..11000u64).filter(|&i| s.may_hold(2, mix(i))).count();
        // Three bits of 128 per key, 30 keys: about 13 % in theory.
        assert!(false_pos < 2000, "{false_pos} of 10000");
    }

    #[test]
    fn hits_are_per_entry_and_cleared_by_a_rewrite() {
        let s = Summaries::new(2);
        s.hit(1, 0);
        s.hit(1, 31);
        s.hit(1, 40);
        assert_eq!(s.hits(1), 1 | 1 << 31);
        s.store(1, [0, 0]);
        assert_eq!(s.hits(1), 0);
        assert_eq!(s.ram_bytes(), 40);
    }
}
