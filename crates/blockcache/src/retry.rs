//! Writeback retries: per-block holds after a failed backing write.
//!
//! A writeback run (contiguous dirty blocks written in one backing request) that fails puts
//! each of its blocks on hold for `100 ms × 2^(failures − 1)`, capped at [`RETRY_MAX`], the
//! wait drawn with jitter from [½, 1] of that. The writeback task skips held blocks, so a
//! range that fails retries on its own schedule while the rest of the dirty data keeps
//! draining; a block written back leaves the table. Entries exist only for dirty blocks whose
//! last write failed: the table is pruned to the dirty set when it outgrows it.
//!
//! Lock order: [`Retries`] sits in its own mutex, taken after the index mutex or alone.
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// First hold after a failure.
const RETRY_BASE: Duration = Duration::from_millis(100);
/// Longest hold.
pub const RETRY_MAX: Duration = Duration::from_secs(5);

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
        let wait = RETRY_BASE
            .saturating_mul(1 << (n - 1).min(16))
            .min(RETRY_MAX);
        let at = now + self.jitter(wait);
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
