//! Per-phase measurements: HDR latency histograms and counters, merged across threads, and
//! their JSON/table summary.
//!
//! Each worker thread fills its own [`Stats`] without sharing; the phase runner merges them
//! after joining. Latencies are recorded in nanoseconds (1 ns – 100 s, 3 significant digits)
//! and reported in microseconds. Only operations scheduled after the warm-up are recorded in
//! the histograms; byte counters cover every operation sent, since the server saw them all.

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::protocol::OpKind;

/// Highest trackable latency: 100 s in ns.
const MAX_NS: u64 = 100_000_000_000;

/// Counters of one phase.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Counters {
    /// Measured reads completed.
    pub gets: u64,
    /// Measured reads that found a value.
    pub get_hits: u64,
    /// Measured reads that found nothing.
    pub get_misses: u64,
    /// Measured writes completed.
    pub sets: u64,
    /// Measured writes the server refused without an error (`NOT_STORED`).
    pub sets_not_stored: u64,
    /// Measured deletes completed (`--delete-ratio`).
    pub deletes: u64,
    /// Measured deletes that removed a key (`DELETED`, `HD`).
    pub deletes_deleted: u64,
    /// Measured deletes that found no key (`NOT_FOUND`, `NF`).
    pub deletes_not_found: u64,
    /// `SERVER_ERROR` replies (measured operations).
    pub server_errors: u64,
    /// `CLIENT_ERROR`/`ERROR` replies (measured operations).
    pub client_errors: u64,
    /// GET hits whose bytes did not match the key's pattern (only with `--verify`).
    pub verify_mismatches: u64,
    /// GET hits checked against the pattern (only with `--verify`).
    pub verified: u64,
    /// GET hits on a key whose DELETE had been answered before the GET was sent, with no SET
    /// of it that could have come after that DELETE (only with `--verify` and deletes): the
    /// server brought a deleted value back.
    pub verify_resurrected: u64,
    /// Open loop: requests that came due before the end but were never sent because every
    /// pipeline slot of their connection was busy — offered load the server did not absorb.
    pub unsent: u64,
    /// Thread client, open loop: requests that came due while their connection's sender was
    /// waiting for a reply because `--max-outstanding` were unanswered; they were sent late
    /// (their latency still counts from the scheduled time).
    pub sends_waited: u64,
    /// Requests sent but unanswered when the drain timeout expired.
    pub timed_out: u64,
    /// Connections lost (EOF, socket error or unparsable reply) during the phase.
    pub connections_lost: u64,
    /// Operations completed during warm-up (not in the histograms).
    pub warmup_ops: u64,
    /// Every SET sent (warm-up included): value bytes.
    pub set_value_bytes: u64,
    /// Every SET sent (warm-up included): count.
    pub set_ops_sent: u64,
    /// `--cache-aside`: SETs sent to refill a missed key (warm-up included; also in
    /// `set_ops_sent`).
    pub cache_aside_sets: u64,
    /// `--cache-aside`: misses whose refill was not queued because the connection already
    /// had `REFILL_LIMIT` waiting.
    pub cache_aside_dropped: u64,
}

impl Counters {
    fn add(&mut self, o: &Counters) {
        self.gets += o.gets;
        self.get_hits += o.get_hits;
        self.get_misses += o.get_misses;
        self.sets += o.sets;
        self.sets_not_stored += o.sets_not_stored;
        self.deletes += o.deletes;
        self.deletes_deleted += o.deletes_deleted;
        self.deletes_not_found += o.deletes_not_found;
        self.server_errors += o.server_errors;
        self.client_errors += o.client_errors;
        self.verify_mismatches += o.verify_mismatches;
        self.verified += o.verified;
        self.verify_resurrected += o.verify_resurrected;
        self.unsent += o.unsent;
        self.sends_waited += o.sends_waited;
        self.timed_out += o.timed_out;
        self.connections_lost += o.connections_lost;
        self.warmup_ops += o.warmup_ops;
        self.set_value_bytes += o.set_value_bytes;
        self.set_ops_sent += o.set_ops_sent;
        self.cache_aside_sets += o.cache_aside_sets;
        self.cache_aside_dropped += o.cache_aside_dropped;
    }

    /// Errors of any kind: error replies, mismatches, resurrected keys, timeouts, lost
    /// connections.
    pub fn errors(&self) -> u64 {
        self.server_errors
            + self.client_errors
            + self.verify_mismatches
            + self.verify_resurrected
            + self.timed_out
            + self.connections_lost
    }
}

/// Histograms and counters of one phase on one thread (or merged).
#[derive(Debug, Clone)]
pub struct Stats {
    /// Latency of every measured operation.
    pub all: Histogram<u64>,
    /// Latency of measured reads.
    pub get: Histogram<u64>,
    /// Latency of measured writes.
    pub set: Histogram<u64>,
    /// Latency of measured deletes.
    pub delete: Histogram<u64>,
    /// Open loop: how late each request was enqueued relative to its schedule: the worker's
    /// own wake-up delay plus any wait for a free pipeline slot on its connection. A large
    /// value at low load means the generator (or a CPU it shares) is the bottleneck; near
    /// saturation it mostly measures pipeline queueing. Either way that time is already part
    /// of the reported latency, which is measured from the schedule.
    pub send_lag: Histogram<u64>,
    /// Counters.
    pub c: Counters,
    /// First error message seen, for the report.
    pub first_error: Option<String>,
}

fn histogram() -> Histogram<u64> {
    // Bounds are constants within hdrhistogram's limits, so construction cannot fail; fall
    // back to an auto-resizing histogram rather than panic if it ever does.
    Histogram::new_with_bounds(1, MAX_NS, 3).unwrap_or_else(|_| {
        let mut h = Histogram::new(3).unwrap_or_else(|_| unreachable!("3 sigfig is valid"));
        h.auto(true);
        h
    })
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            all: histogram(),
            get: histogram(),
            set: histogram(),
            delete: histogram(),
            send_lag: histogram(),
            c: Counters::default(),
            first_error: None,
        }
    }
}

impl Stats {
    /// Adds another thread's stats into these.
    pub fn merge(&mut self, o: &Stats) {
        // Same bounds on both sides, so `add` cannot fail.
        let _ = self.all.add(&o.all);
        let _ = self.get.add(&o.get);
        let _ = self.set.add(&o.set);
        let _ = self.delete.add(&o.delete);
        let _ = self.send_lag.add(&o.send_lag);
        self.c.add(&o.c);
        if self.first_error.is_none() {
            self.first_error.clone_from(&o.first_error);
        }
    }

    /// Records a latency in ns into `all` and the per-kind histogram.
    pub fn record(&mut self, kind: OpKind, ns: u64) {
        let ns = ns.clamp(1, MAX_NS);
        self.all.saturating_record(ns);
        match kind {
            OpKind::Get => self.get.saturating_record(ns),
            OpKind::Set => self.set.saturating_record(ns),
            OpKind::Delete => self.delete.saturating_record(ns),
        }
    }

    /// Notes an error message if none was noted yet.
    pub fn note_error(&mut self, msg: String) {
        if self.first_error.is_none() {
            self.first_error = Some(msg);
        }
    }
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct LatencySummary {
    /// Operations recorded.
    pub count: u64,
    /// Mean.
    pub mean_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Maximum.
    pub max_us: f64,
}

impl LatencySummary {
    /// Summarises a nanosecond histogram.
    pub fn of(h: &Histogram<u64>) -> Self {
        let us = |ns: u64| ns as f64 / 1000.0;
        if h.is_empty() {
            return Self {
                count: 0,
                mean_us: 0.0,
                p50_us: 0.0,
                p90_us: 0.0,
                p99_us: 0.0,
                p999_us: 0.0,
                max_us: 0.0,
            };
        }
        Self {
            count: h.len(),
            mean_us: h.mean() / 1000.0,
            p50_us: us(h.value_at_quantile(0.50)),
            p90_us: us(h.value_at_quantile(0.90)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            max_us: us(h.max()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut s = Stats::default();
        // 1..=10000 µs, one each.
        for i in 1..=10_000u64 {
            let kind = match i % 4 {
                0 | 2 => OpKind::Get,
                1 => OpKind::Set,
                _ => OpKind::Delete,
            };
            s.record(kind, i * 1000);
        }
        let l = LatencySummary::of(&s.all);
        assert_eq!(l.count, 10_000);
        let close = |got: f64, want: f64| (got - want).abs() <= want * 0.002 + 0.01;
        assert!(close(l.p50_us, 5000.0), "{l:?}");
        assert!(close(l.p90_us, 9000.0), "{l:?}");
        assert!(close(l.p99_us, 9900.0), "{l:?}");
        assert!(close(l.p999_us, 9990.0), "{l:?}");
        assert!(close(l.max_us, 10_000.0), "{l:?}");
        assert!(close(l.mean_us, 5000.5), "{l:?}");
        assert_eq!(LatencySummary::of(&s.get).count, 5000);
        assert_eq!(LatencySummary::of(&s.set).count, 2500);
        let d = LatencySummary::of(&s.delete);
        assert_eq!(d.count, 2500);
        assert!(close(d.max_us, 9999.0), "{d:?}");

        let mut merged = Stats::default();
        merged.c.gets = 1;
        let mut other = s.clone();
        other.c.gets = 2;
        other.note_error("boom".into());
        merged.merge(&other);
        merged.merge(&s);
        assert_eq!(merged.all.len(), 20_000);
        assert_eq!(merged.delete.len(), 5000);
        assert_eq!(merged.c.gets, 3);
        assert_eq!(merged.first_error.as_deref(), Some("boom"));
        // Out-of-range values saturate instead of failing.
        merged.record(OpKind::Get, u64::MAX);
        assert_eq!(merged.all.len(), 20_001);
        assert!(LatencySummary::of(&Stats::default().all).count == 0);
    }
}
