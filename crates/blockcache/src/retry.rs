//! The one retry policy for the backing: the wait after the n-th consecutive failure is
//! [`backoff`] (100 ms doubling, capped at [`RETRY_MAX`]); range errors are never retried.
//!
//! A request's own backing read or write retries at once, up to [`REQUEST_RETRIES`] times, then
//! its error is the reply. A failed writeback run puts its blocks on hold ([`Retries`]) for a
//! jittered [`backoff`] of the run's failures, so a failing range retries on its own schedule
//! while other dirty data keeps draining (docs/block-cache.md "Backing retry policy").
//!
//! Invariant: holds exist only for dirty blocks whose last write failed (pruned to the dirty
//! set). Lock order: [`Retries`] is in its own mutex, taken after the index mutex or alone.
use std::collections::HashMap;
use std::time::{Duration, Instant};

use flashtier_backend::BackendError;

/// First hold after a failure.
const RETRY_BASE: Duration = Duration::from_millis(100);
/// Longest hold.
pub const RETRY_MAX: Duration = Duration::from_secs(5);

/// Retries of a request's own backing read or write before it fails.
pub(crate) const REQUEST_RETRIES: u32 = 3;

/// The wait after the `failures`-th consecutive failure (1 = the first).
pub(crate) fn backoff(failures: u32) -> Duration {
    RETRY_BASE
        .saturating_mul(1 << (failures.max(1) - 1).min(16))
        .min(RETRY_MAX)
}

/// Whether a backing error may go away on a retry (a range error never does).
pub(crate) fn retriable(err: &BackendError) -> bool {
    !matches!(err, BackendError::OutOfRange { .. })
}

/// Blocks on hold: LBA → (consecutive failures, not before).
#[derive(Debug)]
pub(crate) struct Retries {
    held: HashMap<u64, (u32, Instant)>,
    rng: u64,
}

impl Default for Retries {
    fn default() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Self {
            held: HashMap::new(),
            rng: seed | 1,
        }
    }
}

impl Retries {
    /// True if `lba` may be written back now.
    pub(crate) fn ready(&self, lba: u64, now: Instant) -> bool {
        self.held.get(&lba).is_none_or(|(_, at)| *at <= now)
    }

    fn jitter(&mut self, d: Duration) -> Duration {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        d.mul_f64(0.5 + (self.rng % 1024) as f64 / 2046.0)
    }

    /// The blocks of one failed range: hold them (the whole range shares one wait).
    pub(crate) fn failed(&mut self, lbas: impl IntoIterator<Item = u64> + Clone, now: Instant) {
        let n = lbas
            .clone()
            .into_iter()
            .filter_map(|l| self.held.get(&l).map(|(n, _)| *n))
            .max()
            .unwrap_or(0)
            + 1;
        let at = now + self.jitter(backoff(n));
        for l in lbas {
            self.held.insert(l, (n, at));
        }
    }

    /// Blocks written back: no longer held.
    pub(crate) fn succeeded(&mut self, lbas: impl IntoIterator<Item = u64>) {
        for l in lbas {
            self.held.remove(&l);
        }
    }

    /// Keep only blocks `dirty` still says are dirty, once the table holds more than
    /// `dirty_count` entries.
    pub(crate) fn prune(&mut self, dirty_count: usize, dirty: impl Fn(u64) -> bool) {
        if self.held.len() > dirty_count {
            self.held.retain(|l, _| dirty(*l));
        }
    }

    /// Blocks on hold.
    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_base_to_the_cap() {
        assert_eq!(backoff(1), RETRY_BASE);
        assert_eq!(backoff(2), RETRY_BASE * 2);
        assert_eq!(backoff(3), RETRY_BASE * 4);
        assert_eq!(backoff(40), RETRY_MAX);
        assert!(!retriable(&BackendError::OutOfRange {
            offset: 0,
            len: 1,
            size: 0
        }));
        assert!(retriable(&BackendError::Disconnected));
    }

    #[test]
    fn holds_grow_with_failures_are_capped_and_jittered() {
        let mut r = Retries::default();
        let t0 = Instant::now();
        r.failed([1u64, 2, 3], t0);
        assert!(!r.ready(1, t0) && !r.ready(3, t0) && r.ready(4, t0));
        let first = r.held[&1].1 - t0;
        assert!(first >= RETRY_BASE / 2 && first <= RETRY_BASE, "{first:?}");
        for _ in 0..30 {
            r.failed([1u64], t0);
        }
        let long = r.held[&1].1 - t0;
        assert!(long >= RETRY_MAX / 2 && long <= RETRY_MAX, "{long:?}");
        // Another range of the same blocks shares the worst count.
        r.failed([1u64, 2], t0);
        assert_eq!(r.held[&2].0, r.held[&1].0);
        r.succeeded([1u64, 2]);
        assert!(r.ready(1, t0) && r.ready(2, t0));
        assert!(r.ready(3, t0 + RETRY_BASE));
        r.prune(0, |l| l != 3);
        assert_eq!(r.len(), 0);
    }
}
