//! [`Admission`]: which requests the cache takes in. A request that continues a sequential
//! stream of at least `seq_threshold_kb` bypasses the cache (its blocks are not admitted,
//! unless the frequency filter of `BlockIo::try_append` finds them read before lately);
//! otherwise the first admission rule refusing it (direction, size, offset range: see
//! `tunables`) keeps it out. Each refusal is counted under the rule that made it. The
//! decision is per request, made before any stripe lock, from atomics plus one short mutex
//! around the stream detector.
use parking_lot::Mutex;

use crate::seq::SeqDetector;
use crate::stats::{add, BlockStats};
use crate::tunables::{Refusal, Tunables};

/// What to do with one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// Its blocks may be cached.
    pub admit: bool,
    /// It continues a sequential stream past the threshold.
    pub sequential: bool,
}

/// The admission policy's state: the sequential stream detector.
#[derive(Debug, Default)]
pub(crate) struct Admission {
    streams: Mutex<SeqDetector>,
}

impl Admission {
    /// Observe a request of `len` bytes at `offset` and decide, counting a refusal in `stats`.
    pub(crate) fn decide(
        &self,
        tunables: &Tunables,
        stats: &BlockStats,
        offset: u64,
        len: u64,
        write: bool,
    ) -> Verdict {
        let threshold = tunables.seq_threshold();
        let run = self.streams.lock().observe(offset, len);
        let sequential = threshold != 0 && run >= threshold;
        if sequential {
            add(&stats.bypass_sequential_requests, 1);
            return Verdict {
                admit: false,
                sequential,
            };
        }
        let refusal = tunables.refusal(offset, len, write);
        if let Some(rule) = refusal {
            let counter = match rule {
                Refusal::Direction => &stats.bypass_direction_requests,
                Refusal::Size => &stats.bypass_size_requests,
                Refusal::Offset => &stats.bypass_offset_requests,
            };
            add(counter, 1);
        }
        Verdict {
            admit: refusal.is_none(),
            sequential,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering::Relaxed;

    use super::*;

    fn tunables(pairs: &[(&str, &str)]) -> Tunables {
        let t = Tunables::default();
        for (k, v) in pairs {
            t.set(k, v).expect("valid tunable");
        }
        t
    }

    #[test]
    fn a_sequential_stream_bypasses_once_past_the_threshold() {
        let t = tunables(&[("seq_threshold_kb", "16")]);
        let (a, s) = (Admission::default(), BlockStats::default());
        let kb4 = 4096;
        // 4, 8, 12 KiB into the stream: admitted; 16 KiB reaches the threshold.
        for i in 0..3 {
            let v = a.decide(&t, &s, i * kb4, kb4, false);
            assert_eq!(
                v,
                Verdict {
                    admit: true,
                    sequential: false
                },
                "request {i}"
            );
        }
        let v = a.decide(&t, &s, 3 * kb4, kb4, true);
        assert_eq!(
            v,
            Verdict {
                admit: false,
                sequential: true
            }
        );
        assert_eq!(s.bypass_sequential_requests.load(Relaxed), 1);
        // A random request elsewhere is still admitted; the stream goes on bypassing.
        assert!(a.decide(&t, &s, 1 << 30, kb4, false).admit);
        assert!(a.decide(&t, &s, 4 * kb4, kb4, false).sequential);
        // Threshold 0 turns detection off.
        let off = tunables(&[("seq_threshold_kb", "0")]);
        let a = Admission::default();
        for i in 0..64 {
            assert!(a.decide(&off, &s, i * kb4, kb4, false).admit);
        }
    }

    #[test]
    fn each_rule_refuses_and_is_counted() {
        let t = tunables(&[
            ("seq_threshold_kb", "0"),
            ("admit_reads", "0"),
            ("admit_max_kb", "64"),
            ("admit_offset_min", "4096"),
            ("admit_offset_max", "1048576"),
        ]);
        let (a, s) = (Admission::default(), BlockStats::default());
        assert!(
            !a.decide(&t, &s, 8192, 4096, false).admit,
            "reads not admitted"
        );
        assert!(
            a.decide(&t, &s, 8192, 4096, true).admit,
            "a small write inside the range"
        );
        assert!(
            !a.decide(&t, &s, 8192, 128 << 10, true).admit,
            "larger than admit_max_kb"
        );
        assert!(
            !a.decide(&t, &s, 0, 4096, true).admit,
            "below admit_offset_min"
        );
        assert!(
            !a.decide(&t, &s, 1 << 20, 4096, true).admit,
            "at admit_offset_max"
        );
        assert_eq!(s.bypass_direction_requests.load(Relaxed), 1);
        assert_eq!(s.bypass_size_requests.load(Relaxed), 1);
        assert_eq!(s.bypass_offset_requests.load(Relaxed), 2);
        assert_eq!(s.bypass_sequential_requests.load(Relaxed), 0);
    }
}
