//! Per-connection and server-wide counters.
//!
//! Each connection owns an `Arc<ConnectionStats>` that its reader, request tasks and writer
//! bump with relaxed atomics (counters, not synchronisation). The server keeps every live
//! connection's stats in a map and folds a connection into `retired` when it closes, so
//! totals never go backwards. Snapshots are plain numbers for `ctl stats` or Prometheus.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::codec::transmission::Command;

/// Live counters of one connection.
#[derive(Debug, Default)]
pub struct ConnectionStats {
    reads: AtomicU64,
    writes: AtomicU64,
    flushes: AtomicU64,
    trims: AtomicU64,
    write_zeroes: AtomicU64,
    caches: AtomicU64,
    discs: AtomicU64,
    unknown: AtomicU64,
    fua: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    errors: AtomicU64,
    /// Requests received whose reply has not been written yet.
    in_flight: AtomicU64,
    /// Highest `in_flight` seen.
    max_in_flight: AtomicU64,
    /// Export chosen in the handshake; unset while negotiating.
    export: OnceLock<String>,
    /// Server-wide latency per op (shared by every connection of one server).
    latency: Arc<OpLatency>,
}

/// Request latency per NBD op, server-wide: from the request header being read to the
/// reply being handed to the connection's writer (socket write excluded). Lock-free
/// histograms ([`flashtier_metrics::Histogram`]).
#[derive(Debug, Default)]
pub struct OpLatency {
    read: flashtier_metrics::Histogram,
    write: flashtier_metrics::Histogram,
    flush: flashtier_metrics::Histogram,
    trim: flashtier_metrics::Histogram,
    write_zeroes: flashtier_metrics::Histogram,
    cache: flashtier_metrics::Histogram,
}

impl OpLatency {
    /// Records one request of `cmd` (other commands are not timed).
    pub fn record(&self, cmd: Command, d: std::time::Duration) {
        let h = match cmd {
            Command::Read => &self.read,
            Command::Write => &self.write,
            Command::Flush => &self.flush,
            Command::Trim => &self.trim,
            Command::WriteZeroes => &self.write_zeroes,
            Command::Cache => &self.cache,
            _ => return,
        };
        h.record(d);
    }

    /// `(op name, snapshot)` for every timed op.
    pub fn snapshots(&self) -> Vec<(&'static str, flashtier_metrics::Snapshot)> {
        vec![
            ("read", self.read.snapshot()),
            ("write", self.write.snapshot()),
            ("flush", self.flush.snapshot()),
            ("trim", self.trim.snapshot()),
            ("write_zeroes", self.write_zeroes.snapshot()),
            ("cache", self.cache.snapshot()),
        ]
    }
}

/// A point-in-time copy of counters (one connection, or summed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// READ requests.
    pub reads: u64,
    /// WRITE requests.
    pub writes: u64,
    /// FLUSH requests.
    pub flushes: u64,
    /// TRIM requests.
    pub trims: u64,
    /// WRITE_ZEROES requests.
    pub write_zeroes: u64,
    /// CACHE requests.
    pub caches: u64,
    /// DISC requests.
    pub discs: u64,
    /// Requests with an unknown command.
    pub unknown: u64,
    /// Requests carrying the FUA flag.
    pub fua: u64,
    /// Payload bytes sent to clients by successful READs.
    pub bytes_read: u64,
    /// Payload bytes accepted from clients by successful WRITEs.
    pub bytes_written: u64,
    /// Replies carrying an error, plus protocol violations that closed the connection.
    pub errors: u64,
    /// Requests in flight now.
    pub in_flight: u64,
    /// Highest number of requests in flight at once.
    pub max_in_flight: u64,
}

impl StatsSnapshot {
    /// Name/value pairs, names prefixed `nbd_`, for a key=value stats file or Prometheus.
    pub fn key_values(&self) -> [(&'static str, u64); 14] {
        [
            ("nbd_reads", self.reads),
            ("nbd_writes", self.writes),
            ("nbd_flushes", self.flushes),
            ("nbd_trims", self.trims),
            ("nbd_write_zeroes", self.write_zeroes),
            ("nbd_caches", self.caches),
            ("nbd_discs", self.discs),
            ("nbd_unknown_commands", self.unknown),
            ("nbd_fua_requests", self.fua),
            ("nbd_bytes_read", self.bytes_read),
            ("nbd_bytes_written", self.bytes_written),
            ("nbd_errors", self.errors),
            ("nbd_in_flight", self.in_flight),
            ("nbd_max_in_flight", self.max_in_flight),
        ]
    }

    fn add(&mut self, o: &StatsSnapshot) {
        self.reads += o.reads;
        self.writes += o.writes;
        self.flushes += o.flushes;
        self.trims += o.trims;
        self.write_zeroes += o.write_zeroes;
        self.caches += o.caches;
        self.discs += o.discs;
        self.unknown += o.unknown;
        self.fua += o.fua;
        self.bytes_read += o.bytes_read;
        self.bytes_written += o.bytes_written;
        self.errors += o.errors;
        self.in_flight += o.in_flight;
        self.max_in_flight = self.max_in_flight.max(o.max_in_flight);
    }
}

impl ConnectionStats {
    /// Counts a received request.
    pub fn request(&self, cmd: Command) {
        let counter = match cmd {
            Command::Read => &self.reads,
            Command::Write => &self.writes,
            Command::Flush => &self.flushes,
            Command::Trim => &self.trims,
            Command::WriteZeroes => &self.write_zeroes,
            Command::Cache => &self.caches,
            Command::Disc => &self.discs,
            _ => &self.unknown,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request carrying FUA.
    pub fn fua(&self) {
        self.fua.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an error reply or a protocol violation.
    pub fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts READ payload bytes sent.
    pub fn read_bytes(&self, n: u64) {
        self.bytes_read.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts WRITE payload bytes stored.
    pub fn written_bytes(&self, n: u64) {
        self.bytes_written.fetch_add(n, Ordering::Relaxed);
    }

    /// Records the export chosen in the handshake (first call wins).
    pub fn set_export(&self, name: &str) {
        let _ = self.export.set(name.to_string());
    }

    /// The export chosen in the handshake, if negotiation has finished.
    pub fn export(&self) -> Option<&str> {
        self.export.get().map(String::as_str)
    }

    /// A request entered flight.
    pub fn begin(&self) {
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.max_in_flight.fetch_max(now, Ordering::Relaxed);
    }

    /// A request's reply was written (or dropped with the connection).
    pub fn end(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// Records the latency of one request of `cmd` in the server-wide histograms.
    pub fn latency(&self, cmd: Command, d: std::time::Duration) {
        self.latency.record(cmd, d);
    }

    /// Copies the counters.
    pub fn snapshot(&self) -> StatsSnapshot {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            reads: g(&self.reads),
            writes: g(&self.writes),
            flushes: g(&self.flushes),
            trims: g(&self.trims),
            write_zeroes: g(&self.write_zeroes),
            caches: g(&self.caches),
            discs: g(&self.discs),
            unknown: g(&self.unknown),
            fua: g(&self.fua),
            bytes_read: g(&self.bytes_read),
            bytes_written: g(&self.bytes_written),
            errors: g(&self.errors),
            in_flight: g(&self.in_flight),
            max_in_flight: g(&self.max_in_flight),
        }
    }
}

/// One live connection as listed by [`ServerStats::connections`].
#[derive(Clone, Debug)]
pub struct ConnectionInfo {
    /// Server-assigned id, increasing from 1.
    pub id: u64,
    /// Peer address as text (`unix` for Unix sockets).
    pub peer: String,
    /// Export in use; `None` while the handshake is still running.
    pub export: Option<String>,
    /// Counters of this connection.
    pub stats: StatsSnapshot,
}

#[derive(Debug, Default)]
struct Registry {
    live: BTreeMap<u64, (String, Arc<ConnectionStats>)>,
    retired: StatsSnapshot,
}

/// Server-wide view: live connections and the totals of closed ones.
#[derive(Debug, Default)]
pub struct ServerStats {
    next_id: AtomicU64,
    /// Connections accepted since start.
    accepted: AtomicU64,
    registry: Mutex<Registry>,
    latency: Arc<OpLatency>,
}

impl ServerStats {
    /// Registers a new connection and returns its id and counters.
    pub(crate) fn open(&self, peer: String) -> (u64, Arc<ConnectionStats>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        self.accepted.fetch_add(1, Ordering::Relaxed);
        let stats = Arc::new(ConnectionStats {
            latency: Arc::clone(&self.latency),
            ..ConnectionStats::default()
        });
        self.lock().live.insert(id, (peer, Arc::clone(&stats)));
        (id, stats)
    }

    /// Folds a closed connection into the retired totals.
    pub(crate) fn close(&self, id: u64) {
        let mut reg = self.lock();
        if let Some((_, stats)) = reg.live.remove(&id) {
            let mut snap = stats.snapshot();
            snap.in_flight = 0;
            reg.retired.add(&snap);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        match self.registry.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Request latency per op, every connection since start.
    pub fn latency(&self) -> &OpLatency {
        &self.latency
    }

    /// Connections accepted since the server started.
    pub fn connections_accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Connections open now.
    pub fn connections_active(&self) -> u64 {
        self.lock().live.len() as u64
    }

    /// Live connections with their counters.
    pub fn connections(&self) -> Vec<ConnectionInfo> {
        self.lock()
            .live
            .iter()
            .map(|(id, (peer, stats))| ConnectionInfo {
                id: *id,
                peer: peer.clone(),
                export: stats.export().map(str::to_string),
                stats: stats.snapshot(),
            })
            .collect()
    }

    /// Totals over closed and live connections.
    pub fn totals(&self) -> StatsSnapshot {
        let reg = self.lock();
        let mut total = reg.retired;
        for (_, stats) in reg.live.values() {
            total.add(&stats.snapshot());
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_survive_close() {
        let s = ServerStats::default();
        let (id, c) = s.open("a".into());
        c.request(Command::Read);
        c.read_bytes(10);
        c.begin();
        c.begin();
        c.end();
        assert_eq!(s.connections().len(), 1);
        assert_eq!(s.totals().in_flight, 1);
        s.close(id);
        let t = s.totals();
        assert_eq!(
            (t.reads, t.bytes_read, t.in_flight, t.max_in_flight),
            (1, 10, 0, 2)
        );
        assert_eq!(s.connections_active(), 0);
        assert_eq!(s.connections_accepted(), 1);
    }
}
