//! S3-FIFO's ghost set: hashes of items recently evicted from the small log without a hit.
//!
//! A set (on a key whose hash is here) means the item was evicted too early, so it is written
//! straight into the main log. Bounded and lock-free: a direct-mapped array of 32-bit
//! fingerprints, `ghost_entries × 4` bytes fixed; a newer ghost overwrites an older one that
//! maps to the same slot (an approximation of the paper's FIFO of ghosts). Any thread.
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

/// The ghost set. See the module docs.
#[derive(Debug)]
pub struct Ghost {
    slots: Box<[AtomicU32]>,
}

impl Ghost {
    /// A ghost set of `n` entries (at least 1).
    pub fn new(n: usize) -> Self {
        Self {
            slots: (0..n.max(1)).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    fn place(&self, hash: u64) -> (usize, u32) {
        let mixed = hash.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
        let i = ((mixed * self.slots.len() as u64) >> 32) as usize;
        (i, (hash >> 32) as u32 | 1)
    }

    /// Remember `hash`.
    pub fn insert(&self, hash: u64) {
        let (i, fp) = self.place(hash);
        self.slots[i].store(fp, Relaxed);
    }

    /// True (and forget it) when `hash` is remembered.
    pub fn take(&self, hash: u64) -> bool {
        let (i, fp) = self.place(hash);
        // A plain load first: most sets miss the ghost and need no read-modify-write.
        self.slots[i].load(Relaxed) == fp
            && self.slots[i]
                .compare_exchange(fp, 0, Relaxed, Relaxed)
                .is_ok()
    }

    /// Bytes of RAM used.
    pub fn memory_bytes(&self) -> usize {
        self.slots.len() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_take() {
        let g = Ghost::new(1024);
        g.insert(42);
        assert!(g.take(42));
        assert!(!g.take(42));
        assert!(!g.take(43));
    }
}
