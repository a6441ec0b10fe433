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

/// Upper bounds of the finite buckets, in nanoseconds (1 µs .. 10 s, 1-2.5-5 steps).
pub const BOUNDS_NS: [u64; 22] = [
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// The same bounds in seconds, as Prometheus `le` labels print them.
pub const BOUNDS_SECONDS: [&str; 22] = [
    "1e-06", "2.5e-06", "5e-06", "1e-05", "2.5e-05", "5e-05", "0.0001", "0.00025", "0.0005",
    "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5",
    "10",
];

/// Number of buckets including the last, unbounded one.
pub const BUCKETS: usize = BOUNDS_NS.len() + 1;

/// A latency histogram. `Default` is empty.
#[derive(Debug, Default)]
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
        assert_eq!(s.buckets[11], 1);
        assert_eq!(s.buckets[BUCKETS - 1], 1);
        let c = s.cumulative();
        assert_eq!(c.first(), Some(&("1e-06", 1)));
        assert_eq!(c.last(), Some(&("+Inf", 4)));
        assert_eq!(s.sum_ns, 1_000 + 1_001 + 3_000_000 + 100_000_000_000);
        assert_eq!(s.quantile_bound(0.5), Some(2.5e-6));
        assert_eq!(s.quantile_bound(0.75), Some(0.005));
        assert_eq!(s.quantile_bound(1.0), None);
        assert_eq!(Snapshot::default().quantile_bound(0.5), None);
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
