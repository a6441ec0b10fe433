//! The writeback rate controller, after bcache's `writeback_rate` PI(D) controller: the
//! rate (blocks per second) is a proportional term on how far dirty blocks are above the
//! target, plus an integral term that removes a steady error, clamped to
//! `[minimum, maximum]`. Anti-windup: the integral only grows while the output is not
//! saturated, and it never makes the rate negative.
//!
//! Target: `dirty_high_pct` of the capacity until dirty blocks cross it, then
//! `dirty_low_pct` until they are back under it (hysteresis, counted as threshold
//! cleaning). Pure arithmetic, no clock: the caller passes the elapsed time.

/// Seconds to write back the error at the proportional term alone.
pub(crate) const P_TERM_INVERSE: f64 = 8.0;
/// Seconds² for the integral term (bcache: 10000 ms² scale; ours is gentler and faster).
pub(crate) const I_TERM_INVERSE: f64 = 64.0;
/// Smallest rate while above the target (blocks per second).
pub(crate) const MIN_RATE: f64 = 64.0;

/// The controller's state.
#[derive(Debug, Default, Clone)]
pub(crate) struct RateCtl {
    integral: f64,
    /// Last output (blocks per second).
    pub rate: f64,
    /// Above the high-water mark and not yet back under the low one.
    pub draining: bool,
}

impl RateCtl {
    /// New rate for `dirty` blocks, with marks `low` and `high` (blocks), after `dt`
    /// seconds; `max` caps the rate (0 = none). Returns 0 when not draining.
    pub fn update(&mut self, dirty: f64, low: f64, high: f64, dt: f64, max: f64) -> f64 {
        if dirty >= high && dirty > 0.0 {
            self.draining = true;
        } else if dirty <= low {
            self.draining = false;
        }
        if !self.draining {
            self.integral = 0.0;
            self.rate = 0.0;
            return 0.0;
        }
        let error = dirty - low;
        let p = error / P_TERM_INVERSE;
        let unclamped = p + self.integral / I_TERM_INVERSE;
        let cap = if max > 0.0 { max } else { f64::INFINITY };
        let saturated = unclamped >= cap;
        if !saturated {
            self.integral = (self.integral + error * dt).max(0.0);
        }
        self.rate = (p + self.integral / I_TERM_INVERSE).clamp(MIN_RATE.min(cap), cap);
        self.rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_at_high_water_and_stops_at_low_water() {
        let mut c = RateCtl::default();
        // Under high: no threshold cleaning.
        assert_eq!(c.update(39.0, 20.0, 40.0, 0.05, 0.0), 0.0);
        assert!(!c.draining);
        // At high: drains, proportional to the distance above low.
        let r = c.update(40.0, 20.0, 40.0, 0.05, 0.0);
        assert!(c.draining && r >= MIN_RATE, "{r}");
        // Between the marks it keeps draining (hysteresis).
        assert!(c.update(30.0, 20.0, 40.0, 0.05, 0.0) > 0.0);
        assert_eq!(c.update(20.0, 20.0, 40.0, 0.05, 0.0), 0.0);
        assert!(!c.draining);
    }

    #[test]
    fn rate_grows_with_the_error_and_a_steady_error_is_integrated() {
        let mut a = RateCtl::default();
        let mut b = RateCtl::default();
        let ra = a.update(60_000.0, 20_000.0, 40_000.0, 0.05, 0.0);
        let rb = b.update(80_000.0, 20_000.0, 40_000.0, 0.05, 0.0);
        assert!(rb > ra, "{ra} {rb}");
        assert!((ra - 40_000.0 / P_TERM_INVERSE).abs() / ra < 0.01);
        let mut last = ra;
        for _ in 0..100 {
            let r = a.update(60_000.0, 20_000.0, 40_000.0, 0.05, 0.0);
            assert!(r >= last);
            last = r;
        }
        assert!(
            last > ra * 1.05,
            "integral term raises a stuck rate: {ra} -> {last}"
        );
    }

    #[test]
    fn a_cap_holds_and_does_not_wind_up() {
        let mut c = RateCtl::default();
        for _ in 0..1000 {
            assert_eq!(c.update(90_000.0, 20_000.0, 40_000.0, 0.05, 500.0), 500.0);
        }
        assert_eq!(c.integral, 0.0, "no windup while saturated");
        assert_eq!(c.update(41_000.0, 20_000.0, 40_000.0, 0.05, 500.0), 500.0);
    }
}
