//! The recent mean size of the values appended to flash, which decides what counts as a
//! *small* record (reclaim keeps those past the write budget: docs/eviction.md, "Small items
//! outlive the budget").
//!
//! An exponential average over about 2^[`DECAY`] appends follows a change of workload within
//! tens of thousands of writes. Started cold, though, an exponential average remembers its
//! first samples far too long: with 300 values of 100 B and then 1,500 of 2,000 B it still
//! reads ~680 B against a mean of 1,683 B, just over the 640 B that makes a 160-byte record
//! small, so a reclaim pass about then is at the edge of taking small records for large ones.
//! So until 2^[`DECAY`] values have been seen the estimate is their plain mean, and an
//! exponential average only after that.

use std::sync::atomic::{AtomicU64, Ordering};

/// The estimate is fixed point with this many fraction bits.
const SHIFT: u32 = 8;
/// The estimate averages over about 2^this many appends.
const DECAY: u32 = 12;

/// Mean value size appended; relaxed atomics, any thread. Racing updates may lose a sample:
/// it is an estimate.
#[derive(Debug, Default)]
pub struct ValueMean {
    /// Fixed point (`SHIFT` fraction bits); 0 until the first sample.
    mean: AtomicU64,
    /// Samples folded in so far, saturating at 2^`DECAY`.
    samples: AtomicU64,
}

impl ValueMean {
    /// Fold in an appended value of `len` bytes.
    pub fn note(&self, len: usize) {
        let v = (len as u64) << SHIFT;
        let n = self.samples.load(Ordering::Relaxed);
        if n < 1 << DECAY {
            self.samples.store(n + 1, Ordering::Relaxed);
        }
        let weight = (n + 1).min(1 << DECAY);
        let old = self.mean.load(Ordering::Relaxed);
        let new = if v >= old {
            old + (v - old) / weight
        } else {
            old - (old - v) / weight
        };
        self.mean.store(new, Ordering::Relaxed);
    }

    /// True if a record of `len` bytes is at most 1/`divisor` of the mean (false before the
    /// first sample).
    pub fn at_most_share(&self, len: u32, divisor: u64) -> bool {
        let mean = self.mean.load(Ordering::Relaxed);
        mean > 0 && (u64::from(len) * divisor) << SHIFT <= mean
    }

    /// The estimate in bytes.
    #[cfg(test)]
    fn bytes(&self) -> u64 {
        self.mean.load(Ordering::Relaxed) >> SHIFT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_small_before_the_first_sample() {
        let m = ValueMean::default();
        assert!(!m.at_most_share(1, 4));
    }

    #[test]
    fn a_cold_start_is_a_plain_mean() {
        let m = ValueMean::default();
        for _ in 0..300 {
            m.note(100);
        }
        for _ in 0..1500 {
            m.note(2000);
        }
        // (300 × 100 + 1500 × 2000) / 1800 = 1683.
        assert!((1670..=1690).contains(&m.bytes()), "{}", m.bytes());
        assert!(m.at_most_share(160, 4));
        assert!(!m.at_most_share(500, 4));
    }

    #[test]
    fn after_the_window_it_follows_a_change() {
        let m = ValueMean::default();
        for _ in 0..(1 << DECAY) * 4 {
            m.note(4096);
        }
        assert_eq!(m.bytes(), 4096);
        for _ in 0..(1 << DECAY) * 4 {
            m.note(100);
        }
        // An exponential average: 100 + 3,996 × e^-4 ≈ 173 B after four windows (a little
        // more with the integer steps).
        assert!((170..200).contains(&m.bytes()), "{}", m.bytes());
    }
}
