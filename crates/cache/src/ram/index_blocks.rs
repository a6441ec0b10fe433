//! An index table's buckets, held in fixed 256-byte blocks of [`BLOCK`] buckets.
//!
//! # Why
//! The index has 1024 shard tables that each grow by a few per cent as items arrive. Held as one
//! contiguous `Vec` each, every growth asked the allocator for a size it had not asked for
//! before (tables of 1–20 KiB pass through every mimalloc size class on the way), and the
//! freed table left a hole in a page of its old class that only a table of that same class
//! could fill: pages partly used by a few live tables stayed resident. Measured
//! (docs/eviction.md, "RAM per flash item", third pass): 1024 tables grown from two
//! threads under mimalloc held 1.5 / 2.6 / 2.9 MB of RSS beyond their own bytes at 100k /
//! 300k / 1.1M entries (+5.6 B per entry from 100k to 300k); in blocks allocated anew at
//! each growth, 0.1 / 0.3 / 0.9 MB.
//! In blocks, a table grows in place (`Table::regrow` adds blocks and re-places its slots)
//! and its blocks are never freed, so no allocator page is left half used; every block is
//! one size class, one that stays in use. The price: one more load per bucket visited (the
//! block's pointer) and 8 bytes of pointer per block (3 %), counted in `memory_bytes`.
use super::index::Bucket;

/// Buckets per block: 4 × 64 = 256 bytes, one mimalloc size class.
pub const BLOCK: usize = 4;
const SHIFT: u32 = BLOCK.trailing_zeros();

/// A table's buckets: `blocks.len() × BLOCK` of them, numbered from 0.
#[derive(Debug)]
pub struct Blocks {
    // Boxed on purpose: each block is its own 256-byte allocation (module docs).
    #[allow(clippy::vec_box)]
    blocks: Vec<Box<[Bucket; BLOCK]>>,
}

impl Blocks {
    /// At least `buckets` empty buckets (rounded up to whole blocks, at least one block).
    pub fn new(buckets: usize) -> Self {
        let n = buckets.max(1).div_ceil(BLOCK);
        let mut blocks = Vec::with_capacity(n);
        blocks.resize_with(n, || Box::new([Bucket::default(); BLOCK]));
        Self { blocks }
    }

    /// Add empty blocks until at least `buckets` buckets are held (the block pointers' vector
    /// sized exactly: its spare capacity would be RAM per entry).
    pub fn grow_to(&mut self, buckets: usize) {
        let n = buckets.div_ceil(BLOCK);
        if n > self.blocks.len() {
            self.blocks.reserve_exact(n - self.blocks.len());
            self.blocks
                .resize_with(n, || Box::new([Bucket::default(); BLOCK]));
        }
    }

    /// Buckets held.
    pub fn len(&self) -> usize {
        self.blocks.len() << SHIFT
    }

    /// Bytes of RAM: the blocks and the block pointers.
    pub fn memory_bytes(&self) -> usize {
        self.blocks.len() * std::mem::size_of::<[Bucket; BLOCK]>()
            + self.blocks.capacity() * std::mem::size_of::<Box<[Bucket; BLOCK]>>()
    }

    /// Every bucket, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Bucket> {
        self.blocks.iter().flat_map(|b| b.iter())
    }

    /// Every bucket, in order, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Bucket> {
        self.blocks.iter_mut().flat_map(|b| b.iter_mut())
    }
}

impl std::ops::Index<usize> for Blocks {
    type Output = Bucket;
    #[inline]
    fn index(&self, b: usize) -> &Bucket {
        &self.blocks[b >> SHIFT][b & (BLOCK - 1)]
    }
}

impl std::ops::IndexMut<usize> for Blocks {
    #[inline]
    fn index_mut(&mut self, b: usize) -> &mut Bucket {
        &mut self.blocks[b >> SHIFT][b & (BLOCK - 1)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_blocks_numbered_in_order() {
        let mut b = Blocks::new(5);
        assert_eq!(b.len(), 8);
        for i in 0..8 {
            b[i] = Bucket::test_marked(i as u64 + 1);
        }
        let seen: Vec<u64> = b.iter().map(Bucket::test_mark).collect();
        assert_eq!(seen, (1..=8).collect::<Vec<_>>());
        assert_eq!(Blocks::new(0).len(), BLOCK);
        assert_eq!(Blocks::new(4).memory_bytes(), 256 + 8);
        // Growing keeps the buckets in place and adds empty ones after them.
        b.grow_to(13);
        assert_eq!(b.len(), 16);
        let seen: Vec<u64> = b.iter().map(Bucket::test_mark).collect();
        assert_eq!(&seen[..8], &(1..=8).collect::<Vec<_>>()[..]);
        assert!(seen[8..].iter().all(|&w| w == 0));
        assert_eq!(b.memory_bytes(), 4 * (256 + 8));
        b.grow_to(3);
        assert_eq!(b.len(), 16);
    }
}
