//! Latency histograms cheap enough for every request: fixed bucket bounds (seconds, the
//! Prometheus convention), one relaxed atomic add per bucket hit plus one for the sum, no
//! lock and no allocation on the recording path. Readers take a [`Snapshot`] (plain numbers)
//! and render it however they export (Prometheus text, percentiles for a table).
//!
//! Invariants: bounds are fixed at compile time ([`BOUNDS_SECONDS`]); counts only grow; a
//! snapshot taken while recording goes on may see a bucket incremented but not yet the sum
//! (or the reverse) — the skew is at most the requests in flight, which is what Prometheus
//! client libraries accept too.
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the finite buckets, in nanoseconds: 1 µs .. 10 s, nine a decade
/// (1-1.5-2-2.5-3-4-5-6-8), each at most 1.5× the one before, so a percentile read as its
/// bucket's bound is off by at most that much. The 1-2.5-5 bounds of the first versions are
/// among them: a dashboard query on one of those `le` labels still finds its series.
pub const BOUNDS_NS: [u64; 64] = [
    1_000,
    1_500,
    2_000,
    2_500,
    3_000,
    4_000,
    5_000,
    6_000,
    8_000,
    10_000,
    15_000,
    20_000,
    25_000,
    30_000,
    40_000,
    50_000,
    60_000,
    80_000,
    100_000,
    150_000,
    200_000,
    250_000,
    300_000,
    400_000,
    500_000,
    600_000,
    800_000,
    1_000_000,
    1_500_000,
    2_000_000,
    2_500_000,
    3_000_000,
    4_000_000,
    5_000_000,
    6_000_000,
    8_000_000,
    10_000_000,
    15_000_000,
    20_000_000,
    25_000_000,
    30_000_000,
    40_000_000,
    50_000_000,
    60_000_000,
    80_000_000,
    100_000_000,
    150_000_000,
    200_000_000,
    250_000_000,
    300_000_000,
    400_000_000,
    500_000_000,
    600_000_000,
    800_000_000,
    1_000_000_000,
    1_500_000_000,
    2_000_000_000,
    2_500_000_000,
    3_000_000_000,
    4_000_000_000,
    5_000_000_000,
    6_000_000_000,
    8_000_000_000,
    10_000_000_000,
];

/// The same bounds in seconds, as Prometheus `le` labels print them.
pub const BOUNDS_SECONDS: [&str; 64] = [
    "1e-06", "1.5e-06", "2e-06", "2.5e-06", "3e-06", "4e-06", "5e-06", "6e-06", "8e-06", "1e-05",
    "1.5e-05", "2e-05", "2.5e-05", "3e-05", "4e-05", "5e-05", "6e-05", "8e-05", "0.0001",
    "0.00015", "0.0002", "0.00025", "0.0003", "0.0004", "0.0005", "0.0006", "0.0008", "0.001",
    "0.0015", "0.002", "0.0025", "0.003", "0.004", "0.005", "0.006", "0.008", "0.01", "0.015",
    "0.02", "0.025", "0.03", "0.04", "0.05", "0.06", "0.08", "0.1", "0.15", "0.2", "0.25", "0.3",
    "0.4", "0.5", "0.6", "0.8", "1", "1.5", "2", "2.5", "3", "4", "5", "6", "8", "10",
];

/// Number of buckets including the last, unbounded one.
pub const BUCKETS: usize = BOUNDS_NS.len() + 1;

/// A latency histogram. `Default` is empty.
#[derive(Debug)]
pub struct Histogram {
    /// Non-cumulative counts; the last bucket is `+Inf`.
    buckets: [AtomicU64; BUCKETS],
    sum_ns: AtomicU64,
}

/// A point-in-time copy of a [`Histogram`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Non-cumulative counts per bucket (the last is `+Inf`).
    pub buckets: [u64; BUCKETS],
    /// Sum of every recorded duration, in nanoseconds.
    pub sum_ns: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_ns: AtomicU64::new(0),
        }
    }
}

impl Default for Snapshot {
    fn default() -> Self {
        Self {
            buckets: [0; BUCKETS],
            sum_ns: 0,
        }
    }
}

impl Histogram {
    /// Record one duration.
    #[inline]
    pub fn record(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.record_ns(ns);
    }

    /// Record one duration given in nanoseconds.
    #[inline]
    pub fn record_ns(&self, ns: u64) {
        let i = BOUNDS_NS.partition_point(|&b| b < ns);
        if let Some(b) = self.buckets.get(i) {
            b.fetch_add(1, Ordering::Relaxed);
        }
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Copy the counts.
    pub fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot {
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
            ..Snapshot::default()
        };
        for (out, b) in s.buckets.iter_mut().zip(&self.buckets) {
            *out = b.load(Ordering::Relaxed);
        }
        s
    }
}

impl Snapshot {
    /// Number of recorded durations.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Sum of the recorded durations in seconds.
    pub fn sum_seconds(&self) -> f64 {
        self.sum_ns as f64 / 1e9
    }

    /// Cumulative counts paired with their `le` label (finite bounds, then `+Inf`).
    pub fn cumulative(&self) -> Vec<(&'static str, u64)> {
        let mut acc = 0;
        let mut out = Vec::with_capacity(BUCKETS);
        for (i, n) in self.buckets.iter().enumerate() {
            acc += n;
            out.push((BOUNDS_SECONDS.get(i).copied().unwrap_or("+Inf"), acc));
        }
        out
    }

    /// Add another snapshot's counts (e.g. to fold several histograms into one).
    pub fn merge(&mut self, o: &Snapshot) {
        for (a, b) in self.buckets.iter_mut().zip(&o.buckets) {
            *a += b;
        }
        self.sum_ns += o.sum_ns;
    }

    /// The counts recorded after `base` was taken (`base` an earlier snapshot of the same
    /// histogram; counts only grow, the subtraction saturates for any other `base`).
    pub fn since(&self, base: &Snapshot) -> Snapshot {
        let mut s = *self;
        for (a, b) in s.buckets.iter_mut().zip(&base.buckets) {
            *a = a.saturating_sub(*b);
        }
        s.sum_ns = s.sum_ns.saturating_sub(base.sum_ns);
        s
    }

    /// Upper bound (seconds) of the bucket holding quantile `q` (0..=1), the way
    /// `histogram_quantile` bounds it without interpolation; `None` when empty or when the
    /// quantile falls in the unbounded bucket.
    pub fn quantile_bound(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * total as f64).ceil().max(1.0) as u64;
        let mut acc = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            acc += n;
            if acc >= rank {
                return BOUNDS_NS.get(i).map(|&ns| ns as f64 / 1e9);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_and_bounds_agree() {
        for (ns, s) in BOUNDS_NS.iter().zip(BOUNDS_SECONDS) {
            assert_eq!(*ns as f64 / 1e9, s.parse::<f64>().unwrap());
        }
        assert!(BOUNDS_NS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn records_into_the_right_bucket() {
        let h = Histogram::default();
        h.record_ns(1_000); // exactly on a bound: that bucket (le is inclusive)
        h.record_ns(1_001);
        h.record(Duration::from_millis(3));
        h.record(Duration::from_secs(100));
        let s = h.snapshot();
        assert_eq!(s.count(), 4);
        assert_eq!(s.buckets[0], 1);
        assert_eq!(s.buckets[1], 1);
        assert_eq!(s.buckets[31], 1);
        assert_eq!(s.buckets[BUCKETS - 1], 1);
        let c = s.cumulative();
        assert_eq!(c.first(), Some(&("1e-06", 1)));
        assert_eq!(c.last(), Some(&("+Inf", 4)));
        assert_eq!(s.sum_ns, 1_000 + 1_001 + 3_000_000 + 100_000_000_000);
        assert_eq!(s.quantile_bound(0.5), Some(1.5e-6));
        assert_eq!(s.quantile_bound(0.75), Some(0.003));
        assert_eq!(s.quantile_bound(1.0), None);
        assert_eq!(Snapshot::default().quantile_bound(0.5), None);
    }

    #[test]
    fn bounds_grow_by_at_most_one_and_a_half() {
        assert!(BOUNDS_NS.windows(2).all(|w| w[1] * 2 <= w[0] * 3));
        for old in [
            1_000,
            2_500,
            5_000,
            100_000,
            250_000,
            1_000_000_000,
            10_000_000_000,
        ] {
            assert!(BOUNDS_NS.contains(&old), "{old} ns kept as a bound");
        }
    }

    #[test]
    fn since_is_what_came_after() {
        let h = Histogram::default();
        h.record_ns(3_000);
        let base = h.snapshot();
        h.record_ns(3_000);
        h.record_ns(2_000_000);
        let w = h.snapshot().since(&base);
        assert_eq!(w.count(), 2);
        assert_eq!(w.sum_ns, 2_003_000);
        assert_eq!(w.quantile_bound(0.5), Some(3e-6));
        assert_eq!(h.snapshot().since(&h.snapshot()).count(), 0);
    }

    #[test]
    fn merge_adds() {
        let (a, b) = (Histogram::default(), Histogram::default());
        a.record_ns(10);
        b.record_ns(10_000_000);
        let mut s = a.snapshot();
        s.merge(&b.snapshot());
        assert_eq!(s.count(), 2);
        assert_eq!(s.sum_ns, 10_000_010);
    }
}
