//! Per-window rates of the block face's counters (`ctl stats --table`, `/rates`): a sampler
//! stores the counters every [`INTERVAL`] in a ring bounded to the longest window, and a
//! rate is (now − the oldest sample inside the window) ÷ the time between them. Until the
//! server has run a whole window the rate covers the time it has run (`span_seconds` says
//! how long). The ring holds at most `3600 / 10 + 2` samples.
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Sampling interval.
pub const INTERVAL: Duration = Duration::from_secs(10);
/// The windows reported, in seconds.
pub const WINDOWS: [u64; 3] = [60, 300, 3600];
const MAX_SAMPLES: usize = (3600 / 10) as usize + 2;

/// One sample: when, and every counter's value.
type Sample = (Instant, Vec<(String, u64)>);

/// The sample ring.
#[derive(Default)]
pub struct Rates {
    samples: Mutex<VecDeque<Sample>>,
}

/// Rates of one window.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    pub seconds: u64,
    /// Time actually covered (shorter than `seconds` while the server is young).
    pub span: f64,
    pub per_second: Vec<(String, f64)>,
}

impl Rates {
    /// Store one sample of `counters` taken at `at`.
    pub fn record(&self, at: Instant, counters: Vec<(String, u64)>) {
        let mut s = self.samples.lock();
        s.push_back((at, counters));
        while s.len() > MAX_SAMPLES {
            s.pop_front();
        }
    }

    /// Rates for every window, from the samples to `now`'s `current` counters.
    pub fn windows(&self, now: Instant, current: &[(String, u64)]) -> Vec<Window> {
        let s = self.samples.lock();
        WINDOWS
            .iter()
            .map(|&w| {
                let start = now.checked_sub(Duration::from_secs(w));
                let base = s
                    .iter()
                    .find(|(t, _)| start.is_none_or(|from| *t >= from))
                    .filter(|(t, _)| now > *t);
                let Some((t, old)) = base else {
                    return Window {
                        seconds: w,
                        span: 0.0,
                        per_second: Vec::new(),
                    };
                };
                let span = now.duration_since(*t).as_secs_f64();
                let per_second = current
                    .iter()
                    .map(|(k, v)| {
                        let was = old.iter().find(|(n, _)| n == k).map_or(0, |(_, x)| *x);
                        (k.clone(), v.saturating_sub(was) as f64 / span)
                    })
                    .collect();
                Window {
                    seconds: w,
                    span,
                    per_second,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_over_windows() {
        let r = Rates::default();
        let t0 = Instant::now();
        let c = |n: u64| vec![("reads".to_string(), n)];
        r.record(t0, c(0));
        r.record(t0 + Duration::from_secs(250), c(1000));
        let now = t0 + Duration::from_secs(300);
        let w = r.windows(now, &c(1600));
        assert_eq!(w.len(), 3);
        // 1 min: from the sample at 250 s.
        assert_eq!(w[0].span, 50.0);
        assert_eq!(w[0].per_second, vec![("reads".to_string(), 12.0)]);
        // 5 min and 1 h: from the first sample (the server is 300 s old).
        assert_eq!(w[1].span, 300.0);
        assert!((w[1].per_second[0].1 - 1600.0 / 300.0).abs() < 1e-9);
        assert_eq!(w[2].span, 300.0);
        // No sample inside the 1-min window yet.
        let w = r.windows(t0 + Duration::from_secs(400), &c(1600));
        assert_eq!(w[0].span, 0.0);
        for i in 0..1000 {
            r.record(t0 + Duration::from_secs(i), c(i));
        }
        assert!(r.samples.lock().len() <= MAX_SAMPLES);
    }
}
