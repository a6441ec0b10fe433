//! Request latency per command family, for the metrics exporter: one lock-free histogram
//! ([`flashtier_metrics::Histogram`]) per family, recorded by [`crate::command::execute`]
//! from the moment a parsed request starts executing until its reply is in the output
//! buffer (socket writes excluded; a pipelined read batch's requests each count their own
//! time). Families follow memcached's command groups, meta commands included: `get`
//! (get gets gat gats mg), `set` (set add replace append prepend cas ms), `delete` (delete
//! md), `arith` (incr decr ma), `touch`, `flush` (flush_all), `other` (stats, version, mn,
//! me, verbosity, errors, ...).
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

/// One histogram per family, one per stage.
#[derive(Debug, Default)]
pub struct Latency {
    by_family: [Histogram; 7],
    by_stage: [Histogram; 3],
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
}
