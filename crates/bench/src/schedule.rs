//! Open-loop send schedules: when each request *should* be sent, independent of replies.
//!
//! Each connection owns one [`Schedule`] at `rate / connections` ops/s; the sum of independent
//! Poisson processes is a Poisson process at the total rate. Latency is measured from the
//! scheduled time, not the actual send time, so a server stall that delays sends is charged to
//! the server (no coordinated omission). Times are nanoseconds since the run's base instant.
//! Owned by the worker thread of its connection.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;
use crate::rng::Rng;

/// Inter-arrival law.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Exponential gaps (Poisson arrivals), the usual model of many independent clients.
    Poisson,
    /// Constant gaps.
    Uniform,
}

impl fmt::Display for Arrival {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Arrival::Poisson => "poisson",
            Arrival::Uniform => "uniform",
        })
    }
}

impl FromStr for Arrival {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "poisson" => Ok(Arrival::Poisson),
            "uniform" => Ok(Arrival::Uniform),
            _ => Err(Error::Config(format!(
                "unknown arrival {s:?} (poisson|uniform)"
            ))),
        }
    }
}

/// The send schedule of one connection.
#[derive(Debug, Clone)]
pub struct Schedule {
    arrival: Arrival,
    /// Mean gap in nanoseconds (> 0).
    mean_gap_ns: f64,
    /// Scheduled time of the next request, ns since the base instant. Kept as f64 so
    /// sub-nanosecond gaps at very high rates do not round away.
    next: f64,
}

impl Schedule {
    /// A schedule at `rate` ops/s (> 0) whose first request falls at or after `start_ns`.
    /// Connections start at a random phase so they do not send in lockstep.
    pub fn new(arrival: Arrival, rate: f64, start_ns: u64, rng: &mut Rng) -> Self {
        let mean_gap_ns = 1e9 / rate;
        let mut s = Self {
            arrival,
            mean_gap_ns,
            next: start_ns as f64,
        };
        s.next += match arrival {
            Arrival::Poisson => s.gap(rng),
            Arrival::Uniform => rng.next_f64() * mean_gap_ns,
        };
        s
    }

    fn gap(&self, rng: &mut Rng) -> f64 {
        match self.arrival {
            // -ln(1-u) with u in [0,1) is finite and exponentially distributed.
            Arrival::Poisson => -(1.0 - rng.next_f64()).ln() * self.mean_gap_ns,
            Arrival::Uniform => self.mean_gap_ns,
        }
    }

    /// Scheduled time of the next request.
    pub fn next_ns(&self) -> u64 {
        self.next as u64
    }

    /// Consumes the next slot and returns its scheduled time.
    pub fn advance(&mut self, rng: &mut Rng) -> u64 {
        let t = self.next_ns();
        self.next += self.gap(rng);
        t
    }

    /// Consumes and counts every slot scheduled before `end_ns` (requests that were due but
    /// never sent because the connection was saturated).
    pub fn drain_until(&mut self, end_ns: u64, rng: &mut Rng) -> u64 {
        let mut n = 0;
        while self.next_ns() < end_ns {
            self.advance(rng);
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_schedule_has_the_target_rate_and_exponential_gaps() {
        let mut rng = Rng::new(11);
        let rate = 50_000.0;
        let mut s = Schedule::new(Arrival::Poisson, rate, 1_000, &mut rng);
        assert!(s.next_ns() >= 1_000);
        let mut last = s.advance(&mut rng);
        let n = 200_000;
        let mut gaps = Vec::with_capacity(n);
        for _ in 0..n {
            let t = s.advance(&mut rng);
            assert!(t >= last);
            gaps.push((t - last) as f64);
            last = t;
        }
        let mean = gaps.iter().sum::<f64>() / n as f64;
        assert!((mean - 20_000.0).abs() < 200.0, "mean gap {mean}");
        // Exponential: standard deviation equals the mean.
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(
            (var.sqrt() / mean - 1.0).abs() < 0.03,
            "cv {}",
            var.sqrt() / mean
        );
        // P(gap > mean) = 1/e.
        let above = gaps.iter().filter(|&&g| g > mean).count() as f64 / n as f64;
        assert!((above - (-1.0f64).exp()).abs() < 0.01, "{above}");
    }

    #[test]
    fn uniform_schedule_is_evenly_spaced_and_drain_counts_missed_slots() {
        let mut rng = Rng::new(2);
        let mut s = Schedule::new(Arrival::Uniform, 1000.0, 0, &mut rng);
        let first = s.advance(&mut rng);
        assert!(first < 1_000_000);
        assert_eq!(s.advance(&mut rng), first + 1_000_000);
        // From here, slots every 1 ms: 98 more fit before 100 ms (plus the one at the boundary
        // depends on phase).
        let missed = s.drain_until(first + 100_000_000, &mut rng);
        assert_eq!(missed, 98);
    }
}
