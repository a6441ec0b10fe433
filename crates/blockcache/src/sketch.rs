//! [`Sketch`]: how often each block was accessed lately, for the admission filter (TinyLFU,
//! Einziger, Friedman and Manes, ACM ToS 2017; Caffeine's `FrequencySketch`). A read miss is
//! admitted at the fill line only if its block was accessed more often than the block it would
//! replace, so a loop or a scan larger than the cache cannot wash out what the cache holds,
//! and a block read again soon after its eviction comes back counted as read once.
//!
//! A count-min sketch of 4-bit counters, sixteen to a `u64`: each access raises the lowest of
//! the block's four counters (conservative update), the estimate is the lowest of the four,
//! and after `6 ×` the blocks the device holds accesses every counter is halved, so counts
//! fade with age: a loop or rescan a few times the cache's size still shows as repeated
//! reads, and a hot set that moved stops shielding the old one after a few periods (Caffeine
//! halves every 10×; 6× forgot a moved hot set faster at no cost on stable OLTP, measured in
//! docs/block-cache.md). Bounded and fixed at open: 8 counters (4 bytes) a block record the device
//! holds, rounded up to a power of two (`sketch_bytes`). Estimates only err upward, when
//! other blocks share all four counters. Guarded by the index mutex (inside `Index`).

/// Four counters an access.
const DEPTH: u64 = 4;
/// A counter saturates here.
const MAX: u64 = 15;
/// Accesses between halvings, per block the device holds.
const PERIOD_PER_BLOCK: u64 = 6;

/// The sketch.
#[derive(Debug, Default)]
pub struct Sketch {
    /// Sixteen 4-bit counters a word.
    words: Vec<u64>,
    /// Counters − 1 (the count is a power of two).
    mask: u64,
    /// Accesses counted since the last halving.
    added: u64,
    /// Halve every counter after this many accesses (0: no sketch).
    period: u64,
}

impl Sketch {
    /// A sketch for a device of `blocks` block records (none for 0).
    pub fn with_capacity(blocks: u64) -> Self {
        if blocks == 0 {
            return Sketch::default();
        }
        let counters = blocks.next_power_of_two() * 8;
        Sketch {
            words: vec![0; (counters / 16) as usize],
            mask: counters - 1,
            added: 0,
            period: blocks.saturating_mul(PERIOD_PER_BLOCK),
        }
    }

    /// The four counters of `lba` as (word, shift).
    fn slots(&self, lba: u64) -> [(usize, u32); DEPTH as usize] {
        let h1 = mix(lba);
        let h2 = mix(h1) | 1;
        let mut out = [(0, 0); DEPTH as usize];
        for (i, o) in out.iter_mut().enumerate() {
            let c = h1.wrapping_add((i as u64).wrapping_mul(h2)) >> 20 & self.mask;
            *o = ((c / 16) as usize, (c % 16) as u32 * 4);
        }
        out
    }

    fn get(&self, (w, s): (usize, u32)) -> u64 {
        self.words[w] >> s & MAX
    }

    /// Count one access of `lba`.
    pub fn add(&mut self, lba: u64) {
        if self.words.is_empty() {
            return;
        }
        let slots = self.slots(lba);
        let low = slots.iter().map(|s| self.get(*s)).min().unwrap_or(MAX);
        if low < MAX {
            for s in slots {
                if self.get(s) == low {
                    self.words[s.0] += 1 << s.1;
                }
            }
        }
        self.added += 1;
        if self.added >= self.period {
            self.halve();
        }
    }

    /// About how many times `lba` was accessed lately (never less than the truth, up to 15,
    /// halved with every period).
    pub fn estimate(&self, lba: u64) -> u64 {
        if self.words.is_empty() {
            return 0;
        }
        self.slots(lba)
            .iter()
            .map(|s| self.get(*s))
            .min()
            .unwrap_or(0)
    }

    /// Forget every count (the working set moved: `crate::shift`).
    pub fn clear(&mut self) {
        self.words.fill(0);
        self.added = 0;
    }

    fn halve(&mut self) {
        for w in &mut self.words {
            *w = *w >> 1 & 0x7777_7777_7777_7777;
        }
        self.added /= 2;
    }

    /// Bytes of RAM the sketch holds.
    pub fn ram_bytes(&self) -> usize {
        self.words.len() * 8
    }
}

/// A 64-bit mix (splitmix64's finaliser).
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_accesses_saturates_and_fades() {
        let mut s = Sketch::with_capacity(1000);
        assert_eq!(s.ram_bytes(), 1024 * 4);
        for _ in 0..3 {
            s.add(7);
        }
        assert_eq!(s.estimate(7), 3);
        assert_eq!(s.estimate(8), 0);
        for _ in 0..20 {
            s.add(9);
        }
        assert_eq!(s.estimate(9), 15, "saturates at 15");
        // One period (6 × 1000 accesses) of accesses to other blocks halves the counts.
        for lba in 0..6_200 {
            s.add(1_000_000 + lba % 5000);
        }
        assert!(s.estimate(9) <= 7, "{}", s.estimate(9));
        assert!(s.estimate(7) <= 1);
        assert_eq!(s.ram_bytes(), 1024 * 4, "fixed size");
        s.clear();
        assert_eq!((s.estimate(9), s.estimate(7)), (0, 0), "cleared");
        s.add(9);
        assert_eq!(s.estimate(9), 1);
        let mut none = Sketch::with_capacity(0);
        none.add(1);
        assert_eq!(none.estimate(1), 0);
    }

    #[test]
    fn estimates_stay_close_when_the_device_is_full_of_distinct_blocks() {
        // As many distinct blocks as the device holds, each accessed once, one hot block
        // accessed five times: the hot one stands out, few cold ones look hot.
        let mut s = Sketch::with_capacity(4096);
        for lba in 0..4096u64 {
            s.add(lba * 7919);
        }
        for _ in 0..5 {
            s.add(42);
        }
        assert!(s.estimate(42) >= 5);
        let inflated = (0..4096u64).filter(|l| s.estimate(l * 7919) > 2).count();
        assert!(inflated < 41, "{inflated} of 4096 cold blocks look hot");
    }
}
