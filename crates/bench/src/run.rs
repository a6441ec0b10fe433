//! A whole generator run: connect, optionally load every key, then one measured phase per
//! offered rate (or closed loop), and the JSON report.
//!
//! The report is one object: `config`, `load_phase` (or null) and `rows`, one row per rate in
//! the order given. Every number the side-by-side runner uses is a row field documented on
//! [`Row`]. Runs on the caller's thread; phases spawn their own worker threads. Which client
//! drives the connections ([`Client`]: the event loop of [`crate::phase`] or the
//! thread-per-connection one of [`crate::thread_client`]) changes nothing in the report but
//! `config.client` and `config.max_outstanding`.

use std::time::Duration;

use serde::Serialize;

use crate::conn::Conn;
use crate::error::Error;
use crate::phase::{run_phase, Pacing, PhaseResult, PhaseSpec};
use crate::schedule::Arrival;
use crate::stats::{Counters, LatencySummary};
use crate::thread_client::{self, ThreadConn};
use crate::workload::{Workload, WorkloadSpec};

/// Which client drives the connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    /// `--threads` event loops (`ppoll`) over non-blocking sockets, pipelining up to
    /// `--depth` per connection. The default.
    Async,
    /// A sending and a receiving thread per connection on a blocking socket; open loop keeps
    /// at most `max_outstanding` requests unanswered per connection, closed loop `--depth`.
    Threads {
        /// Most unanswered requests per connection in open loop. Default:
        /// [`thread_client::DEFAULT_MAX_OUTSTANDING`].
        max_outstanding: usize,
    },
}

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Client::Async => "async",
            Client::Threads { .. } => "threads",
        })
    }
}

impl std::str::FromStr for Client {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "async" => Ok(Client::Async),
            "threads" => Ok(Client::Threads {
                max_outstanding: thread_client::DEFAULT_MAX_OUTSTANDING,
            }),
            _ => Err(Error::Config(format!(
                "unknown client {s:?} (async|threads)"
            ))),
        }
    }
}

/// The connections of a run, as the chosen client holds them.
enum Conns {
    Async(Vec<Conn>),
    Threads {
        conns: Vec<ThreadConn>,
        max_outstanding: usize,
    },
}

impl Conns {
    fn connect(cfg: &RunConfig, client: Client) -> Result<Self, Error> {
        let seed = |i: usize| cfg.seed ^ ((i as u64 + 1) << 32);
        Ok(match client {
            Client::Async => Conns::Async(
                (0..cfg.connections)
                    .map(|i| Conn::connect(&cfg.server, seed(i)))
                    .collect::<Result<_, _>>()?,
            ),
            Client::Threads { max_outstanding } => Conns::Threads {
                conns: (0..cfg.connections)
                    .map(|i| ThreadConn::connect(&cfg.server, seed(i), cfg.drain_timeout))
                    .collect::<Result<_, _>>()?,
                max_outstanding,
            },
        })
    }

    fn phase(
        &mut self,
        threads: usize,
        wl: &Workload,
        spec: &PhaseSpec,
    ) -> Result<PhaseResult, Error> {
        match self {
            Conns::Async(conns) => run_phase(conns, threads, wl, spec),
            Conns::Threads {
                conns,
                max_outstanding,
            } => thread_client::run_phase(conns, wl, spec, *max_outstanding),
        }
    }
}

/// Offered load of one measured phase.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rate {
    /// Closed loop, as fast as the server answers.
    Max,
    /// Open loop at this many ops/s.
    Ops(f64),
}

impl std::str::FromStr for Rate {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let s = s.trim();
        if s == "max" {
            return Ok(Rate::Max);
        }
        let (num, mult) = match s.strip_suffix(['k', 'K']) {
            Some(n) => (n, 1e3),
            None => (s, 1.0),
        };
        match num.parse::<f64>() {
            Ok(r) if r > 0.0 && r.is_finite() => Ok(Rate::Ops(r * mult)),
            _ => Err(Error::Config(format!(
                "bad rate {s:?} (ops/s, e.g. 20000, 20k, max)"
            ))),
        }
    }
}

/// Everything a run needs.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Server address, `host:port`.
    pub server: String,
    /// Connections in total. Default: 8.
    pub connections: usize,
    /// Worker threads. Default: 1 (the generator shares the machine with the server).
    pub threads: usize,
    /// Requests in flight per connection. Default: 1.
    pub depth: usize,
    /// The workload.
    pub workload: WorkloadSpec,
    /// Set every key once, sequentially, before measuring. Default: off.
    pub load_phase: bool,
    /// Requests in flight per connection during the load phase. Default: 16.
    pub load_depth: usize,
    /// Pace the load phase at this many SETs/s (open loop, uniform gaps) instead of as fast
    /// as the server answers. A server that writes to flash behind the client (memcached's
    /// extstore) may evict or refuse items it cannot flush in time under an unpaced load.
    /// Default: unpaced.
    pub load_rate: Option<f64>,
    /// Warm-up before each measured phase, excluded from stats. Default: 2 s.
    pub warmup: Duration,
    /// Measured duration of each phase. Default: 10 s.
    pub duration: Duration,
    /// Measured operations per phase instead of a duration, if set.
    pub ops: Option<u64>,
    /// Inter-arrival law in open loop. Default: Poisson.
    pub arrival: Arrival,
    /// Offered loads, one measured phase each.
    pub rates: Vec<Rate>,
    /// Run seed. Default: 1.
    pub seed: u64,
    /// Wait for late replies after a phase. Default: 5 s.
    pub drain_timeout: Duration,
    /// Record the server's `stats` deltas over each measured window. Default: on.
    pub server_stats: bool,
    /// The server's process id: its CPU time (utime + stime from `/proc/PID/stat`) is sampled
    /// at the same instants as the stats, giving server CPU per operation. Default: none.
    pub server_pid: Option<u32>,
}

/// The configuration, echoed into the report.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigEcho {
    server: String,
    connections: usize,
    threads: usize,
    depth: usize,
    keys: u64,
    key_prefix: String,
    key_dist: String,
    scramble: bool,
    value_size: String,
    value_size_mean: f64,
    get_ratio: f64,
    delete_ratio: f64,
    protocol: String,
    verify: bool,
    load_phase: bool,
    load_rate: Option<f64>,
    warmup_s: f64,
    duration_s: f64,
    ops: Option<u64>,
    arrival: String,
    seed: u64,
    server_pid: Option<u32>,
    client: String,
    /// Thread client only: most unanswered requests per connection in open loop.
    max_outstanding: Option<usize>,
}

/// The load phase's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// Keys set.
    pub sets: u64,
    /// Wall time, seconds.
    pub seconds: f64,
    /// SETs per second.
    pub ops_per_sec: f64,
    /// All counters (errors, bytes).
    pub counters: Counters,
    /// First error, if any.
    pub first_error: Option<String>,
}

/// One measured phase.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `"open"` or `"closed"`.
    pub mode: &'static str,
    /// Offered load in ops/s (open loop), or null (closed loop).
    pub offered_ops_per_sec: Option<f64>,
    /// Length of the measured window, seconds.
    pub window_s: f64,
    /// Measured operations completed.
    pub completed_ops: u64,
    /// completed_ops / window_s.
    pub throughput_ops_per_sec: f64,
    /// throughput / offered (open loop): below ~0.99 the server did not keep up.
    pub achieved_fraction: Option<f64>,
    /// get_hits / gets, or null without GETs.
    pub hit_ratio: Option<f64>,
    /// GET hits per second: what spares the backend.
    pub hits_per_sec: f64,
    /// All measured operations.
    pub latency: LatencySummary,
    /// Measured GETs.
    pub latency_get: LatencySummary,
    /// Measured SETs.
    pub latency_set: LatencySummary,
    /// Measured DELETEs (count 0 without `--delete-ratio`).
    pub latency_delete: LatencySummary,
    /// Open loop: scheduled-to-enqueued delay (generator wake-up + pipeline-slot wait).
    pub send_lag: LatencySummary,
    /// Errors of every kind (see [`Counters::errors`]).
    pub errors: u64,
    /// Counters.
    pub counters: Counters,
    /// First error message, if any.
    pub first_error: Option<String>,
    /// Generator CPU seconds in the phase (warm-up included).
    pub generator_cpu_s: f64,
    /// Generator CPU microseconds per completed operation (warm-up included).
    pub generator_cpu_us_per_op: f64,
    /// The server's numeric `stats` over the measured window (end of warm-up to end of
    /// drain), e.g. `get_hits`, `get_extstore`; null if not requested or unavailable.
    pub server_stats_delta: Option<std::collections::BTreeMap<String, f64>>,
    /// Seconds covered by `server_stats_delta`.
    pub server_stats_window_s: Option<f64>,
    /// Server CPU seconds (utime + stime of `--server-pid`) from the end of the warm-up to
    /// the end of the drain; null without a pid.
    pub server_cpu_s: Option<f64>,
    /// `server_cpu_s` in microseconds per measured completed operation.
    pub server_cpu_us_per_op: Option<f64>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Always `"flashtier-bench"`.
    pub tool: &'static str,
    /// Echo of the configuration.
    pub config: ConfigEcho,
    /// Load phase, if run.
    pub load_phase: Option<LoadReport>,
    /// One row per rate.
    pub rows: Vec<Row>,
}

fn row(rate: Rate, r: &PhaseResult) -> Row {
    let c = &r.stats.c;
    let completed = c.gets + c.sets + c.deletes + c.server_errors + c.client_errors;
    let throughput = completed as f64 / r.window_s;
    let hit_ratio = (c.gets > 0).then(|| c.get_hits as f64 / c.gets as f64);
    let total_done = completed + c.warmup_ops;
    Row {
        mode: match rate {
            Rate::Max => "closed",
            Rate::Ops(_) => "open",
        },
        offered_ops_per_sec: match rate {
            Rate::Max => None,
            Rate::Ops(x) => Some(x),
        },
        window_s: r.window_s,
        completed_ops: completed,
        throughput_ops_per_sec: throughput,
        achieved_fraction: match rate {
            Rate::Max => None,
            Rate::Ops(x) => Some(throughput / x),
        },
        hit_ratio,
        hits_per_sec: c.get_hits as f64 / r.window_s,
        latency: LatencySummary::of(&r.stats.all),
        latency_get: LatencySummary::of(&r.stats.get),
        latency_set: LatencySummary::of(&r.stats.set),
        latency_delete: LatencySummary::of(&r.stats.delete),
        send_lag: LatencySummary::of(&r.stats.send_lag),
        errors: c.errors(),
        counters: c.clone(),
        first_error: r.stats.first_error.clone(),
        generator_cpu_s: r.cpu_s,
        generator_cpu_us_per_op: if total_done > 0 {
            r.cpu_s * 1e6 / total_done as f64
        } else {
            0.0
        },
        server_stats_delta: r.server_stats_delta.clone(),
        server_stats_window_s: r.server_stats_window_s,
        server_cpu_s: r.server_cpu_s,
        server_cpu_us_per_op: r
            .server_cpu_s
            .filter(|_| completed > 0)
            .map(|s| s * 1e6 / completed as f64),
    }
}

/// Runs the whole configuration with the event-loop client. `progress` is called with a
/// one-line message before each phase (the binary prints it to stderr).
pub fn run(cfg: &RunConfig, progress: impl FnMut(&str)) -> Result<Report, Error> {
    run_with(cfg, Client::Async, progress)
}

/// Refuses a configuration the run cannot honour.
fn check_config(cfg: &RunConfig, client: Client) -> Result<(), Error> {
    if cfg.connections == 0 || cfg.depth == 0 || cfg.threads == 0 {
        return Err(Error::Config(
            "connections, depth and threads must be at least 1".into(),
        ));
    }
    if cfg.rates.is_empty() && !cfg.load_phase {
        return Err(Error::Config("no rate given".into()));
    }
    if let Client::Threads { max_outstanding } = client {
        if max_outstanding == 0 {
            return Err(Error::Config("max outstanding must be at least 1".into()));
        }
        if cfg.workload.cache_aside {
            return Err(Error::Config(
                "--cache-aside needs the async client (the thread client's sender never sees \
                 the replies)"
                    .into(),
            ));
        }
    }
    Ok(())
}

/// The configuration as the report echoes it.
fn config_echo(cfg: &RunConfig, client: Client) -> ConfigEcho {
    let w = &cfg.workload;
    ConfigEcho {
        server: cfg.server.clone(),
        connections: cfg.connections,
        threads: cfg.threads,
        depth: cfg.depth,
        keys: w.keys,
        key_prefix: w.prefix.clone(),
        key_dist: w.dist.to_string(),
        scramble: w.scramble,
        value_size: w.sizes.to_string(),
        value_size_mean: w.sizes.mean(),
        get_ratio: w.get_ratio,
        delete_ratio: w.delete_ratio,
        protocol: w.protocol.to_string(),
        verify: w.verify,
        load_phase: cfg.load_phase,
        load_rate: cfg.load_rate,
        warmup_s: cfg.warmup.as_secs_f64(),
        duration_s: cfg.duration.as_secs_f64(),
        ops: cfg.ops,
        arrival: cfg.arrival.to_string(),
        seed: cfg.seed,
        server_pid: cfg.server_pid,
        client: client.to_string(),
        max_outstanding: match client {
            Client::Async => None,
            Client::Threads { max_outstanding } => Some(max_outstanding),
        },
    }
}

/// Runs the whole configuration with the given client.
pub fn run_with(
    cfg: &RunConfig,
    client: Client,
    mut progress: impl FnMut(&str),
) -> Result<Report, Error> {
    check_config(cfg, client)?;
    let wl = Workload::new(&cfg.workload)?;
    let mut conns = Conns::connect(cfg, client)?;
    let forever = Duration::from_secs(365 * 24 * 3600);

    let load_phase = if cfg.load_phase {
        progress(&format!("load phase: setting {} keys", cfg.workload.keys));
        let spec = PhaseSpec {
            pacing: match cfg.load_rate {
                Some(rate) => Pacing::Open {
                    rate,
                    arrival: Arrival::Uniform,
                },
                None => Pacing::Closed,
            },
            sequential_load: true,
            depth: cfg.load_depth.max(1),
            warmup: Duration::ZERO,
            duration: forever,
            ops: None,
            drain_timeout: cfg.drain_timeout,
            server_stats: None,
            server_pid: None,
        };
        let r = conns.phase(cfg.threads, &wl, &spec)?;
        Some(LoadReport {
            sets: r.stats.c.sets,
            seconds: r.window_s,
            ops_per_sec: r.stats.c.sets as f64 / r.window_s,
            counters: r.stats.c.clone(),
            first_error: r.stats.first_error.clone(),
        })
    } else {
        None
    };

    let mut rows = Vec::with_capacity(cfg.rates.len());
    for &rate in &cfg.rates {
        let (pacing, label) = match rate {
            Rate::Max => (Pacing::Closed, "closed loop".to_string()),
            Rate::Ops(x) => (
                Pacing::Open {
                    rate: x,
                    arrival: cfg.arrival,
                },
                format!("open loop at {x:.0} ops/s"),
            ),
        };
        progress(&format!(
            "{label}: warm-up {:?}, measure {}",
            cfg.warmup,
            match cfg.ops {
                Some(o) => format!("{o} ops"),
                None => format!("{:?}", cfg.duration),
            }
        ));
        let spec = PhaseSpec {
            pacing,
            sequential_load: false,
            depth: cfg.depth,
            warmup: cfg.warmup,
            duration: if cfg.ops.is_some() {
                forever
            } else {
                cfg.duration
            },
            ops: cfg.ops,
            drain_timeout: cfg.drain_timeout,
            server_stats: cfg.server_stats.then(|| cfg.server.clone()),
            server_pid: cfg.server_pid,
        };
        let r = conns.phase(cfg.threads, &wl, &spec)?;
        rows.push(row(rate, &r));
    }

    Ok(Report {
        tool: "flashtier-bench",
        config: config_echo(cfg, client),
        load_phase,
        rows,
    })
}

/// A short human-readable table of a report.
pub fn table(r: &Report) -> String {
    let mut out = String::new();
    if let Some(l) = &r.load_phase {
        out.push_str(&format!(
            "load phase: {} sets in {:.2} s ({:.0} ops/s), errors {}\n",
            l.sets,
            l.seconds,
            l.ops_per_sec,
            l.counters.errors()
        ));
    }
    out.push_str(&format!(
        "{:>10} {:>10} {:>7} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>7} {:>8} {:>8}\n",
        "offered",
        "achieved",
        "hit%",
        "p50us",
        "p90us",
        "p99us",
        "p99.9us",
        "max_us",
        "lag99us",
        "errors",
        "cpu_us/op",
        "srv_us/op"
    ));
    for row in &r.rows {
        let offered = row
            .offered_ops_per_sec
            .map_or("max".to_string(), |x| format!("{x:.0}"));
        out.push_str(&format!(
            "{:>10} {:>10.0} {:>7} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>9.1} {:>9.1} {:>7} {:>8.2} {:>8}\n",
            offered,
            row.throughput_ops_per_sec,
            row.hit_ratio
                .map_or("-".to_string(), |h| format!("{:.2}", h * 100.0)),
            row.latency.p50_us,
            row.latency.p90_us,
            row.latency.p99_us,
            row.latency.p999_us,
            row.latency.max_us,
            row.send_lag.p99_us,
            row.errors,
            row.generator_cpu_us_per_op,
            row.server_cpu_us_per_op
                .map_or("-".to_string(), |c| format!("{c:.2}")),
        ));
        if let Some(e) = &row.first_error {
            out.push_str(&format!("           first error: {e}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rates() {
        assert_eq!("max".parse::<Rate>().unwrap(), Rate::Max);
        assert_eq!("20k".parse::<Rate>().unwrap(), Rate::Ops(20_000.0));
        assert_eq!("1500".parse::<Rate>().unwrap(), Rate::Ops(1500.0));
        assert!("0".parse::<Rate>().is_err());
        assert!("fast".parse::<Rate>().is_err());
    }
}
