//! Request latency per command family, for the metrics exporter: one lock-free histogram
//! ([`flashtier_metrics::Histogram`]) per family, recorded by [`crate::command::execute`]
//! from the moment a parsed request starts executing until its reply is in the output
//! buffer (socket writes excluded; a pipelined read batch's requests each count their own
//! time). Families follow memcached's command groups, meta commands included: `get`
//! (get gets gat gats mg), `set` (set add replace append prepend cas ms), `delete` (delete
//! md), `arith` (incr decr ma), `touch`, `flush` (flush_all), `other` (stats, version, mn,
//! me, verbosity, errors, ...).
use std::collections::HashMap;
use std::sync::Mutex;

use flashtier_metrics::{Histogram, Snapshot};

use crate::request::Request;

/// A command family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Get,
    Set,
    Delete,
    Arith,
    Touch,
    Flush,
    Other,
}

impl Family {
    /// Every family, in export order.
    pub const ALL: [Family; 7] = [
        Family::Get,
        Family::Set,
        Family::Delete,
        Family::Arith,
        Family::Touch,
        Family::Flush,
        Family::Other,
    ];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Family::Get => "get",
            Family::Set => "set",
            Family::Delete => "delete",
            Family::Arith => "arith",
            Family::Touch => "touch",
            Family::Flush => "flush",
            Family::Other => "other",
        }
    }

    /// The family of a parsed request.
    pub fn of(r: &Request) -> Family {
        match r {
            Request::Retrieval(_) | Request::MetaGet(_) => Family::Get,
            Request::Storage(_) | Request::MetaSet { .. } | Request::TooLarge { .. } => Family::Set,
            Request::Delete { .. } | Request::MetaDelete(_) => Family::Delete,
            Request::Arith { .. } | Request::MetaArith { .. } => Family::Arith,
            Request::Touch { .. } => Family::Touch,
            Request::FlushAll { .. } => Family::Flush,
            _ => Family::Other,
        }
    }
}

/// A stage of a request's life on the server, outside its command's own execution (which
/// [`Family`] times): where the time between a request reaching the socket and its reply
/// leaving goes. With the flash engine's device read time (`flash_io_duration_seconds`)
/// they answer "is it the scheduler, the device or us" (docs/serving.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The kernel received the bytes → the worker read them: socket queue, wake-up and run
    /// queue (a descheduled worker shows here). TCP only ([`crate::rxstamp`]).
    SocketWait,
    /// The worker read the bytes → their replies were written: parse, execute (flash reads
    /// included), reply write; one record per read burst.
    Turnaround,
    /// The socket write of a burst's replies.
    Write,
}

impl Stage {
    /// Every stage, in export order.
    pub const ALL: [Stage; 3] = [Stage::SocketWait, Stage::Turnaround, Stage::Write];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Stage::SocketWait => "socket_wait",
            Stage::Turnaround => "turnaround",
            Stage::Write => "write",
        }
    }
}

/// One histogram per family, one per stage, and where `stats latency`'s window starts.
#[derive(Debug, Default)]
pub struct Latency {
    by_family: [Histogram; 7],
    by_stage: [Histogram; 3],
    /// Each series' counts at the last `stats reset` (by the name `stats latency` prints):
    /// what `stats latency` subtracts. `/metrics` never does (its histograms are counters).
    window_start: Mutex<HashMap<String, Snapshot>>,
}

impl Latency {
    /// The histogram of `f`.
    pub fn of(&self, f: Family) -> &Histogram {
        // One array slot per variant: the discriminant is in range.
        &self.by_family[f as usize]
    }

    /// `(family name, snapshot)` for every family.
    pub fn snapshots(&self) -> Vec<(&'static str, Snapshot)> {
        Family::ALL
            .iter()
            .map(|f| (f.name(), self.of(*f).snapshot()))
            .collect()
    }

    /// The histogram of stage `s`.
    pub fn stage(&self, s: Stage) -> &Histogram {
        // One array slot per variant: the discriminant is in range.
        &self.by_stage[s as usize]
    }

    /// `(stage name, snapshot)` for every stage.
    pub fn stage_snapshots(&self) -> Vec<(&'static str, Snapshot)> {
        Stage::ALL
            .iter()
            .map(|s| (s.name(), self.stage(*s).snapshot()))
            .collect()
    }

    /// `stats reset`: `stats latency` counts from here on (`series`: every histogram it
    /// shows, named as it names them, the flash engine's included).
    pub fn start_window(&self, series: &[(String, Snapshot)]) {
        let mut start = self.window_start.lock().unwrap_or_else(|p| p.into_inner());
        start.clear();
        start.extend(series.iter().cloned());
    }

    /// `series` minus each one's counts at the last `stats reset` (unchanged before any).
    pub fn in_window(&self, series: Vec<(String, Snapshot)>) -> Vec<(String, Snapshot)> {
        let start = self.window_start.lock().unwrap_or_else(|p| p.into_inner());
        series
            .into_iter()
            .map(|(name, s)| {
                let w = start.get(&name).map_or(s, |base| s.since(base));
                (name, w)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_counts_what_came_after_its_start() {
        let l = Latency::default();
        l.of(Family::Get).record_ns(5_000);
        let series = |l: &Latency| -> Vec<(String, Snapshot)> {
            l.snapshots()
                .into_iter()
                .map(|(n, s)| (n.to_string(), s))
                .collect()
        };
        assert_eq!(
            l.in_window(series(&l))[0].1.count(),
            1,
            "no reset yet: since start"
        );
        l.start_window(&series(&l));
        assert_eq!(l.in_window(series(&l))[0].1.count(), 0);
        l.of(Family::Get).record_ns(7_000_000);
        let w = l.in_window(series(&l));
        assert_eq!((w[0].0.as_str(), w[0].1.count()), ("get", 1));
        assert_eq!(w[0].1.quantile_bound(0.5), Some(0.008));
        assert_eq!(
            l.of(Family::Get).snapshot().count(),
            2,
            "the histogram itself keeps all"
        );
    }
}
