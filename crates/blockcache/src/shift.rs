//! [`ShiftDetector`]: notices that the working set moved, so the clean-block policy can forget
//! the old hot set at once instead of over several sketch periods (issue 27, `oltp-shift` in
//! docs/block-cache.md).
//!
//! Why: the frequency filter (`sketch`) and the 2-bit read counts (`lbamap`) are what let the
//! cache beat recency policies on a stable mix, and exactly what holds a moved hot set out:
//! the old hot blocks keep sketch counts of up to 15, halved once a sketch period, and read
//! counts of up to 3, lowered once a reclaim lap, so for about a period the filter refuses the
//! new hot blocks in favour of blocks nobody reads any more. A move shows as a step in the
//! read miss ratio: the new hot blocks are mostly not cached. The detector keeps the miss
//! ratio of windows of `capacity_blocks / 4` read lookups (outside sequential streams, whose
//! misses say nothing of the random working set) against its smoothed usual level; a window
//! whose miss ratio rises past the usual one by [`RISE_PCT`] % of the hits the cache
//! usually made, or by [`MISS_RISE_PCT`] % of the misses it usually made if that is less (a
//! large cache misses little, and a move raises its misses by half or more; floored at four
//! standard deviations of a window's ratio), is a shift. The cache then clears the sketch and every read count
//! (`Index::forget`), and the new hot set is admitted at once, as after a cold start with the
//! old blocks still in place to lose.
//!
//! A shift resets the usual level to the shifted window's, so a slow recovery does not fire
//! again; the usual level otherwise follows the windows with weight 1/8. Measured: no shift is
//! seen on the stable traces (`oltp`, `oltp-rw`) nor on the loop; on `oltp-shift` the moves are
//! seen within a window at 32 and 64 MiB; with the hits' share alone, the moves were missed
//! in some replays at 64 and 66 MiB (docs/block-cache.md, "Sitting 16"). Guarded by the
//! index mutex (inside `Index`).

/// A window's miss ratio must pass the usual one by this share (%) of the usual hit ratio...
pub const RISE_PCT: u64 = 20;
/// ...or by this share (%) of the usual miss ratio, whichever is less (sixteenth sitting: a
/// cache that misses little sees a move as a large rise of its misses that still falls short
/// of 20 % of its hits: `oltp-shift` at 66 MiB went undetected). The hits' share decides
/// above 2/7 (28.6 %) misses, as before.
pub const MISS_RISE_PCT: u64 = 50;
/// Either way the rise must pass this many standard deviations of a window's miss ratio at
/// the usual level (binomial), so a small usual miss ratio does not make noise a shift.
const SIGMAS: u64 = 4;
/// Windows are this share of `capacity_blocks` read lookups (1/4).
const WINDOW_DIV: u64 = 4;
/// Ratios are kept in 1/1024.
const ONE: u64 = 1024;

/// The detector.
#[derive(Debug, Default)]
pub struct ShiftDetector {
    /// Read lookups a window (0: off).
    window: u64,
    /// Lookups and misses in the current window.
    seen: u64,
    misses: u64,
    /// Usual miss ratio (of [`ONE`]), smoothed over past windows; `None` until one ended.
    usual: Option<u64>,
}

impl ShiftDetector {
    /// A detector for a cache of `capacity_blocks` (off for 0).
    pub fn new(capacity_blocks: u64) -> Self {
        ShiftDetector {
            window: capacity_blocks / WINDOW_DIV,
            ..Default::default()
        }
    }

    /// Count one read lookup; true when it ends a window whose miss ratio says the working
    /// set moved.
    pub fn saw(&mut self, miss: bool) -> bool {
        if self.window == 0 {
            return false;
        }
        self.seen += 1;
        self.misses += u64::from(miss);
        if self.seen < self.window {
            return false;
        }
        let ratio = self.misses * ONE / self.seen;
        self.seen = 0;
        self.misses = 0;
        let Some(usual) = self.usual else {
            self.usual = Some(ratio);
            return false;
        };
        if ratio > usual + rise(usual, self.window) {
            self.usual = Some(ratio);
            return true;
        }
        self.usual = Some((usual * 7 + ratio) / 8);
        false
    }
}

/// How far (of [`ONE`]) a window's miss ratio must rise above the `usual` one to be a shift,
/// for windows of `window` lookups: the lesser of [`RISE_PCT`] % of the usual hits and
/// [`MISS_RISE_PCT`] % of the usual misses, but at least [`SIGMAS`] standard deviations.
fn rise(usual: u64, window: u64) -> u64 {
    let by_hits = (ONE - usual) * RISE_PCT / 100;
    let by_misses = usual * MISS_RISE_PCT / 100;
    // Variance of a window's ratio, in ONE² units: p (1 − p) / n.
    let sigma = (usual * (ONE - usual) / window.max(1)).isqrt();
    by_hits.min(by_misses).max(SIGMAS * sigma)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `n` lookups missing `pct` % of the time (evenly spread); returns shifts seen.
    fn feed(d: &mut ShiftDetector, n: u64, pct: u64) -> u64 {
        (0..n).filter(|i| d.saw(i * pct % 100 < pct)).count() as u64
    }

    #[test]
    fn a_stable_miss_ratio_is_no_shift_and_a_step_is_one() {
        let mut d = ShiftDetector::new(4000); // windows of 1000 lookups
        assert_eq!(feed(&mut d, 20_000, 30), 0, "stable at 30 % misses");
        // Small wobbles (30 -> 40 %: under 20 % of the 70 % hits) are not shifts.
        assert_eq!(feed(&mut d, 5_000, 40), 0);
        assert_eq!(feed(&mut d, 5_000, 30), 0);
        // The hot set moves: misses jump to 80 %; one shift, not one a window.
        assert_eq!(feed(&mut d, 10_000, 80), 1);
        // Recovery back down is no shift either.
        assert_eq!(feed(&mut d, 20_000, 30), 0);
        // A second move is seen again.
        assert_eq!(feed(&mut d, 3_000, 75), 1);
    }

    #[test]
    fn a_cache_that_misses_little_sees_its_misses_double() {
        // 20 % misses, windows of 4000 lookups: a move to 32 % misses is 12 points, short
        // of 20 % of the hits (16 points) but over 50 % of the misses (10 points).
        let mut d = ShiftDetector::new(16_000);
        assert_eq!(feed(&mut d, 40_000, 20), 0, "stable at 20 % misses");
        assert_eq!(
            feed(&mut d, 12_000, 24),
            0,
            "a wobble under 50 % more misses"
        );
        assert_eq!(feed(&mut d, 40_000, 20), 0);
        assert_eq!(feed(&mut d, 8_000, 32), 1, "the hot set moved");
    }

    #[test]
    fn a_small_miss_ratio_needs_a_rise_past_the_noise() {
        // 2 % misses in windows of 100 lookups: one standard deviation is 1.4 points, so
        // 50 % of the misses (1 point) is not enough; four deviations (5.6) are needed.
        assert_eq!(rise(20, 100), 4 * (20 * 1004 / 100u64).isqrt());
        assert!(rise(20, 100) > 20 * MISS_RISE_PCT / 100);
        // Large windows: the share of the misses decides.
        assert_eq!(rise(205, 1_000_000), 205 * MISS_RISE_PCT / 100);
        // A high miss ratio: the share of the hits decides, as before.
        assert_eq!(rise(800, 1_000_000), (ONE - 800) * RISE_PCT / 100);
    }

    #[test]
    fn off_without_a_capacity() {
        let mut d = ShiftDetector::new(0);
        assert_eq!(feed(&mut d, 10_000, 100), 0);
    }
}
