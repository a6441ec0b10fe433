//! [`Ghost`]: the LBAs of clean blocks evicted without a read since they were cached (by the
//! CLOCK hand at capacity or dropped by reclaim), so one read again soon is admitted as
//! already read once — S3-FIFO's ghost queue, fitted to a log: such a block survives the next
//! CLOCK pass or reclaim pass instead of being taken for a one-time read again.
//!
//! Bounded: a direct-mapped table of 32-bit fingerprints, one slot per block the device can
//! hold (4 bytes each, `ghost_bytes`); a newer eviction overwrites an older one in its slot,
//! so the ghost remembers about the last `capacity` evictions. A false match needs two LBAs
//! in one slot with equal 32-bit fingerprints. Guarded by the index mutex (inside `Index`).
#[derive(Debug, Default)]
pub struct Ghost {
    /// Fingerprint (never 0) of the LBA last evicted into each slot; 0 = empty.
    slots: Vec<u32>,
}

impl Ghost {
    /// A ghost of `blocks` slots rounded up to a power of two (none for 0).
    pub fn with_capacity(blocks: u64) -> Self {
        let n = if blocks == 0 {
            0
        } else {
            blocks.next_power_of_two() as usize
        };
        Ghost { slots: vec![0; n] }
    }

    /// The slot and fingerprint of `lba`.
    fn place(&self, lba: u64) -> Option<(usize, u32)> {
        if self.slots.is_empty() {
            return None;
        }
        let h = lba.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let slot = (h >> 32) as usize & (self.slots.len() - 1);
        Some((slot, (h as u32) | 1))
    }

    /// Remember that `lba` was evicted unread.
    pub fn insert(&mut self, lba: u64) {
        if let Some((i, f)) = self.place(lba) {
            self.slots[i] = f;
        }
    }

    /// Whether `lba` was evicted unread lately; forgets it.
    pub fn take(&mut self, lba: u64) -> bool {
        match self.place(lba) {
            Some((i, f)) if self.slots[i] == f => {
                self.slots[i] = 0;
                true
            }
            _ => false,
        }
    }

    /// Bytes of RAM the ghost holds.
    pub fn ram_bytes(&self) -> usize {
        self.slots.len() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_evictions_once_and_is_bounded() {
        let mut g = Ghost::with_capacity(1000);
        assert_eq!(g.ram_bytes(), 1024 * 4);
        g.insert(7);
        assert!(!g.take(8));
        assert!(g.take(7));
        assert!(!g.take(7), "a ghost hit forgets the LBA");
        // Far more evictions than slots: most early ones are overwritten, memory unchanged.
        for lba in 0..100_000 {
            g.insert(lba);
        }
        let kept = (0..1000).filter(|l| g.take(*l)).count();
        assert!(kept < 100, "{kept}");
        assert!((99_000..100_000).filter(|l| g.take(*l)).count() > 300);
        assert_eq!(g.ram_bytes(), 1024 * 4);
        let mut none = Ghost::with_capacity(0);
        none.insert(1);
        assert!(!none.take(1));
    }
}
