//! The differential run: one request stream, two servers, compared after every request.
//!
//! Requests are sent one at a time (each possibly a pipelined batch), to the same connection
//! index on both servers, and both replies are read in full before the next request; with
//! several connections this interleaves them deterministically. Both servers are talked to in
//! parallel per request (a scoped thread per server when the request is large, so a big write
//! and a big reply cannot deadlock on full socket buffers).
//!
//! When both servers close a connection (or both stop answering), both sides reconnect that
//! connection index and the run goes on. The first disagreement ends the run.

use crate::casmap::CasMap;
use crate::error::Error;
use crate::generator::{GenConfig, Generator};
use crate::normalize::{normalize, Normalized};
use crate::reply::{read_reply, End, Reply};
use crate::report::escape;
use crate::request::{Command, Request};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::io::{BufReader, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Requests larger than this are written from a separate thread while the reply is read.
const THREADED_WRITE: usize = 64 * 1024;

/// Settings of a run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The reference server, `HOST:PORT`.
    pub a: String,
    /// The server under test, `HOST:PORT`.
    pub b: String,
    /// The stream.
    pub gen: GenConfig,
    /// Commands to send (a batch counts each of its commands). Default: 100 000.
    pub ops: u64,
    /// How long a reply may take before the server is declared hung. Default: 2 s.
    pub timeout: Duration,
    /// Stop early (without failing) once this much time has passed. Default: none.
    pub max_duration: Option<Duration>,
    /// Requests kept for the divergence report. Default: 12.
    pub history: usize,
    /// When set, every request and both replies are appended to this file. Default: none.
    pub trace: Option<std::path::PathBuf>,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            a: "127.0.0.1:11211".into(),
            b: "127.0.0.1:11212".into(),
            gen: GenConfig::default(),
            ops: 100_000,
            timeout: Duration::from_secs(2),
            max_duration: None,
            history: 12,
            trace: None,
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Commands sent.
    pub commands: u64,
    /// Requests (round trips) sent.
    pub requests: u64,
    /// Commands sent per kind.
    pub by_kind: BTreeMap<&'static str, u64>,
    /// Connections both servers closed and that were reopened.
    pub reconnects: u64,
    /// Requests neither server answered within the timeout (a suspicious but agreed outcome).
    pub both_timed_out: u64,
    /// Distinct CAS values seen from server A.
    pub cas_versions: usize,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// True when the run stopped at `max_duration` before `ops`.
    pub stopped_early: bool,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} commands in {} requests, {:.1}s; {} reconnects, {} agreed timeouts, {} CAS versions{}",
            self.commands,
            self.requests,
            self.elapsed.as_secs_f64(),
            self.reconnects,
            self.both_timed_out,
            self.cas_versions,
            if self.stopped_early { " (stopped at the time limit)" } else { "" }
        )?;
        let kinds: Vec<String> = self
            .by_kind
            .iter()
            .map(|(k, n)| format!("{k}={n}"))
            .collect();
        write!(f, "by kind: {}", kinds.join(" "))
    }
}

/// The first disagreement of a run.
#[derive(Debug, Clone)]
pub struct Divergence {
    /// The seed of the run.
    pub seed: u64,
    /// Index of the request (0-based) that diverged.
    pub request_index: u64,
    /// Connection index it was sent on.
    pub conn: usize,
    /// Bytes sent to A and to B (they differ only in CAS values).
    pub sent_a: Vec<u8>,
    /// Bytes sent to B.
    pub sent_b: Vec<u8>,
    /// A's reply.
    pub reply_a: Reply,
    /// B's reply.
    pub reply_b: Reply,
    /// A's reply, normalized.
    pub norm_a: Normalized,
    /// B's reply, normalized.
    pub norm_b: Normalized,
    /// The requests before it, oldest first: `(request index, connection, bytes sent to A)`.
    pub history: Vec<(u64, usize, Vec<u8>)>,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "DIVERGENCE at request #{} on connection {} (seed {})",
            self.request_index, self.conn, self.seed
        )?;
        writeln!(f, "recent requests (to A):")?;
        for (i, c, bytes) in &self.history {
            writeln!(f, "  #{i} conn {c}: {}", escape(bytes, 300))?;
        }
        writeln!(f, "request sent to A: {}", escape(&self.sent_a, 2000))?;
        if self.sent_b != self.sent_a {
            writeln!(f, "request sent to B: {}", escape(&self.sent_b, 2000))?;
        }
        writeln!(
            f,
            "reply A ({:?}): {}",
            self.reply_a.end,
            escape(&self.reply_a.raw(), 600)
        )?;
        writeln!(
            f,
            "reply B ({:?}): {}",
            self.reply_b.end,
            escape(&self.reply_b.raw(), 600)
        )?;
        let (ta, tb) = (&self.norm_a.text, &self.norm_b.text);
        let common = ta.iter().zip(tb.iter()).take_while(|(x, y)| x == y).count();
        let from = common.saturating_sub(200);
        writeln!(
            f,
            "normalized replies first differ at byte {common} (shown from byte {from}):"
        )?;
        writeln!(
            f,
            "  A: {} clock {:?}",
            escape(&ta[from.min(ta.len())..], 600),
            self.norm_a.clock_values
        )?;
        write!(
            f,
            "  B: {} clock {:?}",
            escape(&tb[from.min(tb.len())..], 600),
            self.norm_b.clock_values
        )
    }
}

/// The result of a run.
#[derive(Debug)]
pub enum Outcome {
    /// Every reply agreed.
    Agreed(Summary),
    /// The run stopped at the first disagreement.
    Diverged(Box<Divergence>, Summary),
}

/// One server: its connections and its CAS map.
struct Server {
    addr: String,
    conns: Vec<Option<BufReader<TcpStream>>>,
    map: CasMap,
    timeout: Duration,
}

impl Server {
    fn new(addr: &str, conns: usize, timeout: Duration) -> Result<Self, Error> {
        let mut s = Server {
            addr: addr.to_string(),
            conns: (0..conns).map(|_| None).collect(),
            map: CasMap::new(),
            timeout,
        };
        for i in 0..conns {
            s.reconnect(i)?;
        }
        Ok(s)
    }

    fn reconnect(&mut self, i: usize) -> Result<(), Error> {
        if let Some(old) = self.conns[i].take() {
            let _ = old.get_ref().shutdown(Shutdown::Both);
        }
        let err = |source| Error::Connect {
            addr: self.addr.clone(),
            source,
        };
        let addr = self
            .addr
            .to_socket_addrs()
            .map_err(err)?
            .next()
            .ok_or_else(|| Error::Config(format!("{} resolves to nothing", self.addr)))?;
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(err)?;
        stream.set_nodelay(true).map_err(err)?;
        stream.set_read_timeout(Some(self.timeout)).map_err(err)?;
        stream.set_write_timeout(Some(self.timeout)).map_err(err)?;
        self.conns[i] = Some(BufReader::with_capacity(256 * 1024, stream));
        Ok(())
    }
}

/// Writes `bytes` and reads the reply on one connection. A failed write is not reported on
/// its own: the read then sees the closed connection.
fn exchange(conn: &mut BufReader<TcpStream>, bytes: &[u8], expected_mn: usize) -> Reply {
    if bytes.len() <= THREADED_WRITE {
        let _ = conn.get_mut().write_all(bytes);
        return read_reply(conn, expected_mn);
    }
    let writer = conn.get_ref().try_clone();
    std::thread::scope(|s| {
        if let Ok(mut w) = writer {
            s.spawn(move || {
                let _ = w.write_all(bytes);
            });
        }
        read_reply(conn, expected_mn)
    })
}

fn closed_reply() -> Reply {
    Reply {
        frames: Vec::new(),
        end: End::Closed,
    }
}

/// Sends one request to both servers and returns both replies.
fn round_trip(
    a: &mut Server,
    b: &mut Server,
    req: &Request,
    sent_a: &[u8],
    sent_b: &[u8],
) -> (Reply, Reply) {
    let mn = req.expected_mn();
    let (ca, cb) = (&mut a.conns[req.conn], &mut b.conns[req.conn]);
    let big = sent_a.len().max(sent_b.len()) > THREADED_WRITE;
    match (ca.as_mut(), cb.as_mut()) {
        (Some(ca), Some(cb)) if big => std::thread::scope(|s| {
            let ha = s.spawn(|| exchange(ca, sent_a, mn));
            let rb = exchange(cb, sent_b, mn);
            let ra = ha.join().unwrap_or_else(|_| closed_reply());
            (ra, rb)
        }),
        (Some(ca), Some(cb)) => {
            let _ = ca.get_mut().write_all(sent_a);
            let _ = cb.get_mut().write_all(sent_b);
            (read_reply(ca, mn), read_reply(cb, mn))
        }
        _ => (closed_reply(), closed_reply()),
    }
}

/// The single keyed command of a request, if it has exactly one command.
fn single_key(req: &Request) -> Option<&[u8]> {
    match req.commands.as_slice() {
        [only] => only.key.as_deref(),
        _ => None,
    }
}

/// Empties both servers so a run starts from the same (empty) state whatever ran before.
fn flush_both(a: &mut Server, b: &mut Server) -> Result<(), Error> {
    let req = Request {
        conn: 0,
        commands: vec![Command::literal("flush_all", b"flush_all\r\n".to_vec())],
    };
    let bytes = req.render(&a.map);
    let (ra, rb) = round_trip(a, b, &req, &bytes, &bytes);
    for (server, reply) in [(&a.addr, ra), (&b.addr, rb)] {
        if reply.end != End::Complete || reply.raw() != b"OK\r\n" {
            return Err(Error::Config(format!(
                "{server} answered the initial flush_all with {}",
                escape(&reply.raw(), 200)
            )));
        }
    }
    Ok(())
}

/// Runs the differential test. Both servers are flushed first.
pub fn run(cfg: &RunConfig) -> Result<Outcome, Error> {
    if cfg.gen.conns == 0 {
        return Err(Error::Config("at least one connection is needed".into()));
    }
    let mut a = Server::new(&cfg.a, cfg.gen.conns, cfg.timeout)?;
    let mut b = Server::new(&cfg.b, cfg.gen.conns, cfg.timeout)?;
    flush_both(&mut a, &mut b)?;
    let mut gen = Generator::new(cfg.gen.clone());
    let mut summary = Summary::default();
    let mut history: VecDeque<(u64, usize, Vec<u8>)> = VecDeque::new();
    let mut trace = match &cfg.trace {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path)
                .map_err(|e| Error::Config(format!("trace file {}: {e}", path.display())))?,
        )),
        None => None,
    };
    let start = Instant::now();
    while summary.commands < cfg.ops {
        if let Some(limit) = cfg.max_duration {
            if start.elapsed() >= limit {
                summary.stopped_early = true;
                break;
            }
        }
        let req = gen.next_request();
        let sent_a = req.render(&a.map);
        let sent_b = req.render(&b.map);
        let (reply_a, reply_b) = round_trip(&mut a, &mut b, &req, &sent_a, &sent_b);
        let key = single_key(&req);
        let norm_a = normalize(&reply_a, &mut a.map, key);
        let norm_b = normalize(&reply_b, &mut b.map, key);
        let index = summary.requests;
        summary.requests += 1;
        if let Some(t) = trace.as_mut() {
            let mut shown = String::new();
            for c in &req.commands {
                let mut bytes = Vec::new();
                c.render(&a.map, &mut bytes);
                shown.push_str("\n  >  ");
                shown.push_str(&escape(&bytes, 300));
            }
            let _ = writeln!(
                t,
                "#{index} conn {}{}\n  A< {} ({:?})\n  B< {} ({:?})",
                req.conn,
                shown,
                escape(&reply_a.raw(), 4000),
                reply_a.end,
                escape(&reply_b.raw(), 4000),
                reply_b.end
            );
        }
        for c in &req.commands {
            summary.commands += 1;
            *summary.by_kind.entry(c.kind).or_default() += 1;
        }
        if !norm_a.matches(&norm_b) {
            summary.elapsed = start.elapsed();
            summary.cas_versions = a.map.len();
            let div = Divergence {
                seed: cfg.gen.seed,
                request_index: index,
                conn: req.conn,
                sent_a,
                sent_b,
                reply_a,
                reply_b,
                norm_a,
                norm_b,
                history: history.into_iter().collect(),
            };
            return Ok(Outcome::Diverged(Box::new(div), summary));
        }
        gen.observe(&norm_a.versions);
        if norm_a.end != End::Complete {
            if norm_a.end == End::TimedOut {
                summary.both_timed_out += 1;
            }
            summary.reconnects += 1;
            a.reconnect(req.conn)?;
            b.reconnect(req.conn)?;
        }
        if cfg.history > 0 {
            let mut shown = sent_a;
            shown.truncate(300);
            history.push_back((index, req.conn, shown));
            if history.len() > cfg.history {
                history.pop_front();
            }
        }
    }
    summary.elapsed = start.elapsed();
    summary.cas_versions = a.map.len();
    Ok(Outcome::Agreed(summary))
}
