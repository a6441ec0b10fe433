//! Whether promotions pay: the share of promoted copies that are read in RAM, and the
//! sampling rate it sets.
//!
//! # Why
//! A promotion copies a flash item into RAM's small log and, the log being full, evicts
//! something there: about a record's copy and a share of a segment drain per promotion
//! (measured: ~1 µs of server CPU per GET at 8×16 uniform GETs, 90 % of them from flash,
//! docs/serving.md, "Promotions that pay"). It pays back only when the copy is read in
//! RAM before it is evicted — each such read is a flash read saved. Under a skewed load most
//! promoted copies are read again; under a uniform one, or a working set far larger than
//! RAM, almost none are, and every promotion is lost work (and pushes out a copy that
//! might have been read). memcached's extstore promotes one flash hit in `ext_recache_rate`
//! (2000) whatever the load; here the rate follows the measured payback.
//!
//! # The rule
//! Every [`WINDOW`] promotions, the copies read in RAM for the first time since their
//! promotion are counted against them: under 1 in [`LOWER_BELOW`] halves the sampling rate
//! (a repeat flash hit promotes one time in 2, 4, … up to [`MAX_SHIFT`] = 1 in 1024), at or
//! above 1 in [`RAISE_AT`] doubles it back (to every repeat hit). Between the two it stays
//! put. The period multiplies the `recache_rate` knob's (`FlashTier::should_recache` samples
//! repeat hits with its one counter); `recache_adaptive=0` turns the rule off.
//!
//! # Threads
//! Any GET's thread: [`Payback::period`] and [`Payback::promoted`] from a flash hit,
//! [`Payback::read`] from a RAM hit. Relaxed atomics: the counts are a measure, not an
//! invariant (a window's count may be off by a few racing updates).
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

/// Promotions per evaluation.
pub const WINDOW: u32 = 256;
/// Under one read copy in this many promotions, the rate halves.
pub const LOWER_BELOW: u32 = 16;
/// At or above one read copy in this many promotions, the rate doubles.
pub const RAISE_AT: u32 = 8;
/// The lowest rate: one candidate in 2^MAX_SHIFT.
pub const MAX_SHIFT: u32 = 10;

/// The measured payback of promotions and the sampling rate it sets (module docs).
#[derive(Debug, Default)]
pub(crate) struct Payback {
    /// log2 of the sampling period: 0 = every candidate.
    shift: AtomicU32,
    /// Promotions in the current window.
    promoted: AtomicU32,
    /// First RAM reads of promoted copies in the current window.
    read: AtomicU32,
    /// First RAM reads of promoted copies since start (`extstore_promotions_read`).
    read_total: AtomicU64,
    /// Windows that lowered the rate, and that raised it (stats).
    lowered: AtomicU64,
    raised: AtomicU64,
}

impl Payback {
    /// A promotion was made: at the end of a window, move the rate.
    pub fn promoted(&self) {
        if self.promoted.fetch_add(1, Relaxed) + 1 < WINDOW {
            return;
        }
        self.promoted.store(0, Relaxed);
        let read = self.read.swap(0, Relaxed);
        let shift = self.shift.load(Relaxed);
        let next = next_shift(shift, read, WINDOW);
        if next != shift {
            self.shift.store(next, Relaxed);
            let c = if next > shift {
                &self.lowered
            } else {
                &self.raised
            };
            c.fetch_add(1, Relaxed);
        }
    }

    /// A promoted copy was read in RAM for the first time.
    pub fn read(&self) {
        self.read.fetch_add(1, Relaxed);
        self.read_total.fetch_add(1, Relaxed);
    }

    /// The sampling period now: a candidate in this many is promoted.
    pub fn period(&self) -> u64 {
        1 << self.shift.load(Relaxed)
    }

    /// (first reads of promoted copies since start, windows that lowered the rate, windows
    /// that raised it).
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.read_total.load(Relaxed),
            self.lowered.load(Relaxed),
            self.raised.load(Relaxed),
        )
    }

    /// The `stats extstore` pairs (docs/stats.md).
    pub fn pairs(&self) -> [(&'static str, u64); 4] {
        let (read, lowered, raised) = self.counts();
        [
            ("extstore_promotions_read", read),
            ("extstore_promotion_period", self.period()),
            ("extstore_promotion_rate_lowered", lowered),
            ("extstore_promotion_rate_raised", raised),
        ]
    }
}

/// The rule: `read` first reads of promoted copies over `promoted` promotions move `shift`.
pub fn next_shift(shift: u32, read: u32, promoted: u32) -> u32 {
    if read.saturating_mul(LOWER_BELOW) < promoted {
        (shift + 1).min(MAX_SHIFT)
    } else if read.saturating_mul(RAISE_AT) >= promoted {
        shift.saturating_sub(1)
    } else {
        shift
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_halves_when_few_copies_are_read_and_doubles_back_when_many_are() {
        assert_eq!(next_shift(0, 0, 256), 1, "none read: halve");
        assert_eq!(next_shift(0, 15, 256), 1, "1 in 17: halve");
        assert_eq!(next_shift(3, 16, 256), 3, "1 in 16: hold");
        assert_eq!(next_shift(3, 31, 256), 3, "1 in 8.3: hold");
        assert_eq!(next_shift(3, 32, 256), 2, "1 in 8: double");
        assert_eq!(next_shift(0, 200, 256), 0, "already every candidate");
        assert_eq!(next_shift(MAX_SHIFT, 0, 256), MAX_SHIFT, "floor");
    }

    #[test]
    fn a_window_of_unread_promotions_lowers_the_rate_and_read_ones_raise_it() {
        let p = Payback::default();
        assert_eq!(p.period(), 1, "every candidate at first");
        for _ in 0..WINDOW {
            p.promoted();
        }
        // The sampling at this period (one candidate in two; every one with the rule off)
        // is `FlashTier::should_recache`'s, tested in `promote`.
        assert_eq!(p.period(), 2);
        for _ in 0..WINDOW {
            p.promoted();
        }
        assert_eq!(p.period(), 4);
        for _ in 0..WINDOW / 4 {
            p.read();
        }
        for _ in 0..WINDOW {
            p.promoted();
        }
        assert_eq!(p.period(), 2, "a quarter read: doubles back");
        assert_eq!(p.counts(), (u64::from(WINDOW / 4), 2, 1));
    }
}
