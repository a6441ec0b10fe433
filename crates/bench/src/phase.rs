//! Runs one phase (load, warm-up + measurement at one offered rate, or closed loop) over a set
//! of connections on worker threads, each thread an event loop over its connections.
//!
//! Per iteration a worker: (1) for each connection, enqueues every request that is due
//! (open loop: scheduled time ≤ now) or that fits (closed loop) while fewer than `depth`
//! requests are in flight, and writes; (2) waits in `ppoll` until a reply arrives, a socket
//! drains, or the next scheduled send time; (3) parses replies and records latency from each
//! request's `t0`. Open-loop requests that find every pipeline slot busy wait and keep their
//! scheduled `t0`, so queueing delay counts as latency. Threads share nothing while running;
//! their stats are merged after the join.

use std::time::{Duration, Instant};

use crate::conn::{Conn, InFlight};
use crate::error::Error;
use crate::pattern;
use crate::poll::{self, POLLERR_HUP, POLLIN, POLLOUT};
use crate::protocol::{self, OpKind, Reply};
use crate::schedule::{Arrival, Schedule};
use crate::serverstats;
use crate::stats::Stats;
use crate::workload::{Op, OpSource, Scratch, Workload};

/// How requests are paced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pacing {
    /// Open loop at `rate` ops/s in total.
    Open {
        /// Offered load, ops/s, over all connections.
        rate: f64,
        /// Inter-arrival law.
        arrival: Arrival,
    },
    /// Closed loop: every connection keeps `depth` requests in flight.
    Closed,
}

/// What a phase does.
#[derive(Debug, Clone)]
pub struct PhaseSpec {
    /// Pacing.
    pub pacing: Pacing,
    /// Random operations, or the sequential load of every key.
    pub sequential_load: bool,
    /// Maximum requests in flight per connection (≥ 1).
    pub depth: usize,
    /// Warm-up before measuring.
    pub warmup: Duration,
    /// Measured duration; the phase may end earlier on `ops` or when a sequential load is done.
    pub duration: Duration,
    /// Measured operations to send in total, if bounded by count.
    pub ops: Option<u64>,
    /// How long to wait for outstanding replies after the last send.
    pub drain_timeout: Duration,
    /// Snapshot the server's `stats` at the end of the warm-up and after the phase.
    pub server_stats: Option<String>,
    /// Sample this process's CPU time (utime + stime) at the same two instants.
    pub server_pid: Option<u32>,
}

/// What a phase measured.
#[derive(Debug)]
pub struct PhaseResult {
    /// Merged stats.
    pub stats: Stats,
    /// Length of the measured window in seconds.
    pub window_s: f64,
    /// Generator CPU time (user + system, all threads) spent in the phase, seconds.
    pub cpu_s: f64,
    /// The server's own counters over the measured window (from the end of the warm-up to
    /// the end of the drain), if requested and available.
    pub server_stats_delta: Option<serverstats::Snapshot>,
    /// Seconds between the two server stats snapshots.
    pub server_stats_window_s: Option<f64>,
    /// The server process's CPU seconds (user + system) over the same window, if a pid was
    /// given and its `/proc/PID/stat` was readable at both ends.
    pub server_cpu_s: Option<f64>,
}

/// Per-connection state for one phase.
struct ConnPhase {
    source: OpSource,
    schedule: Option<Schedule>,
    /// Measured operations this connection may still send (`u64::MAX` if unbounded).
    quota: u64,
    /// No more requests will be generated.
    done: bool,
}

/// Runs a phase over `conns` split across `threads` threads. Connections that fail are marked
/// dead and counted; the phase fails only if every connection is lost.
pub fn run_phase(
    conns: &mut [Conn],
    threads: usize,
    wl: &Workload,
    spec: &PhaseSpec,
) -> Result<PhaseResult, Error> {
    let live = conns.iter().filter(|c| !c.dead).count();
    if live == 0 {
        return Err(Error::AllConnectionsLost);
    }
    let threads = threads.clamp(1, live);
    let cpu0 = process_cpu_s();
    let base = Instant::now();
    let warm_ns = spec.warmup.as_nanos() as u64;
    let gen_end_ns = warm_ns + spec.duration.as_nanos() as u64;
    let n_keys = wl.keys.len();
    let quota_per_conn = spec.ops.map(|o| o.div_ceil(live as u64));

    // Per-connection phase state, in connection order; live connections get consecutive
    // numbers so the load phase covers every key exactly once.
    let mut states = Vec::with_capacity(conns.len());
    let mut live_no = 0u64;
    for c in conns.iter_mut() {
        let source = if spec.sequential_load && !c.dead {
            live_no += 1;
            OpSource::Sequential {
                next: live_no - 1,
                stride: live as u64,
                end: n_keys,
            }
        } else {
            OpSource::Random
        };
        let schedule = match spec.pacing {
            Pacing::Open { rate, arrival } => {
                Some(Schedule::new(arrival, rate / live as f64, 0, &mut c.rng))
            }
            Pacing::Closed => None,
        };
        states.push(ConnPhase {
            source,
            schedule,
            quota: quota_per_conn.unwrap_or(u64::MAX),
            done: c.dead,
        });
    }

    // Deal connections round-robin to threads.
    let mut per_thread: Vec<Vec<(&mut Conn, ConnPhase)>> =
        (0..threads).map(|_| Vec::new()).collect();
    for (i, pair) in conns.iter_mut().zip(states).enumerate() {
        if let Some(bucket) = per_thread.get_mut(i % threads) {
            bucket.push(pair);
        }
    }

    let (results, server) = around_window(spec, || {
        std::thread::scope(|s| {
            let handles: Vec<_> = per_thread
                .into_iter()
                .map(|mut bucket| {
                    s.spawn(move || worker(&mut bucket, wl, spec, base, warm_ns, gen_end_ns))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        let mut stats = Stats::default();
                        stats.note_error("worker thread panicked".into());
                        stats.c.connections_lost += 1;
                        (stats, 0)
                    })
                })
                .collect::<Vec<(Stats, u64)>>()
        })
    });

    let mut stats = Stats::default();
    let mut last_done = 0u64;
    for (thread_stats, t) in &results {
        stats.merge(thread_stats);
        last_done = last_done.max(*t);
    }
    let window_ns = if spec.ops.is_some() || spec.sequential_load {
        last_done.saturating_sub(warm_ns).min(gen_end_ns - warm_ns)
    } else {
        gen_end_ns - warm_ns
    };
    if conns.iter().all(|c| c.dead) {
        return Err(match stats.first_error.take() {
            Some(e) => Error::Protocol(e),
            None => Error::AllConnectionsLost,
        });
    }
    Ok(PhaseResult {
        stats,
        window_s: window_ns.max(1) as f64 / 1e9,
        cpu_s: process_cpu_s() - cpu0,
        server_stats_delta: server.stats_delta,
        server_stats_window_s: server.stats_window_s,
        server_cpu_s: server.cpu_s,
    })
}

/// What the server did over a measured window (see [`around_window`]).
#[derive(Debug, Default)]
pub(crate) struct ServerWindow {
    /// Its numeric `stats` at the end minus at the start, if requested and reachable.
    pub stats_delta: Option<serverstats::Snapshot>,
    /// Seconds between the two stats snapshots.
    pub stats_window_s: Option<f64>,
    /// Its CPU seconds (utime + stime) between the two instants, if a pid was given.
    pub cpu_s: Option<f64>,
}

/// Runs `body` (a phase's load, on the caller's thread) while a helper thread takes the
/// server's stats and CPU `spec.warmup` after the call starts, then takes them again when
/// `body` returns: the server's side of the measured window, for every client.
pub(crate) fn around_window<R>(spec: &PhaseSpec, body: impl FnOnce() -> R) -> (R, ServerWindow) {
    let stats_timeout = Duration::from_secs(5);
    let (r, snap0): (R, Option<TimedSnapshot>) = std::thread::scope(|s| {
        let want = spec.server_stats.is_some() || spec.server_pid.is_some();
        let snap = want.then(|| {
            s.spawn(move || {
                std::thread::sleep(spec.warmup);
                let at = Instant::now();
                let cpu = spec.server_pid.and_then(pid_cpu_s);
                let stats = spec
                    .server_stats
                    .as_deref()
                    .and_then(|addr| serverstats::fetch(addr, stats_timeout).ok());
                (at, stats, cpu)
            })
        });
        let r = body();
        (r, snap.and_then(|h| h.join().ok()))
    });
    // CPU first: the stats request below costs the server a little CPU of its own.
    let cpu_s = match (&snap0, spec.server_pid) {
        (Some((_, _, Some(c0))), Some(pid)) => pid_cpu_s(pid).map(|c1| c1 - c0),
        _ => None,
    };
    let mut w = ServerWindow {
        cpu_s,
        ..ServerWindow::default()
    };
    if let (Some((at, Some(before), _)), Some(addr)) = (snap0, spec.server_stats.as_deref()) {
        if let Ok(after) = serverstats::fetch(addr, stats_timeout) {
            w.stats_delta = Some(serverstats::delta(&before, &after));
            w.stats_window_s = Some(at.elapsed().as_secs_f64());
        }
    }
    (r, w)
}

/// When the end-of-warm-up snapshot was taken, the server's stats then, its CPU seconds then.
type TimedSnapshot = (Instant, Option<serverstats::Snapshot>, Option<f64>);

pub(crate) fn now_ns(base: Instant) -> u64 {
    base.elapsed().as_nanos() as u64
}

/// One worker thread's event loop. Returns its stats and the time (ns since base) at which
/// its last request completed or generation ended.
fn worker(
    conns: &mut [(&mut Conn, ConnPhase)],
    wl: &Workload,
    spec: &PhaseSpec,
    base: Instant,
    warm_ns: u64,
    gen_end_ns: u64,
) -> (Stats, u64) {
    poll::set_timer_slack_ns(1_000);
    let mut stats = Stats::default();
    let depth = spec.depth.max(1);
    let drain_ns = spec.drain_timeout.as_nanos() as u64;
    let mut drain_deadline: Option<u64> = None;
    let mut last_event = 0u64;
    let mut fds = Vec::with_capacity(conns.len());
    let mut fd_owner = Vec::with_capacity(conns.len());

    loop {
        let now = now_ns(base);
        let mut next_wake = u64::MAX;
        let mut active = false;
        for (c, ph) in conns.iter_mut() {
            if c.dead {
                continue;
            }
            if !ph.done {
                generate(
                    c,
                    ph,
                    wl,
                    depth,
                    now,
                    warm_ns,
                    gen_end_ns,
                    &mut stats,
                    &mut next_wake,
                );
            }
            if let Err(e) = c.flush() {
                lose(c, &mut stats, format!("write failed: {e}"));
                continue;
            }
            if !ph.done || !c.inflight.is_empty() {
                active = true;
            }
        }
        if !active {
            break;
        }
        if conns.iter().all(|(c, ph)| c.dead || ph.done) {
            let deadline = *drain_deadline.get_or_insert(now + drain_ns);
            if now >= deadline {
                for (c, _) in conns.iter_mut() {
                    if !c.dead && !c.inflight.is_empty() {
                        stats.c.timed_out +=
                            c.inflight.iter().filter(|f| f.measured).count() as u64;
                        // Replies still owed would desynchronise the next phase.
                        lose(
                            c,
                            &mut stats,
                            "replies not received before the drain timeout".into(),
                        );
                    }
                }
                break;
            }
            next_wake = next_wake.min(deadline);
        } else if now < gen_end_ns {
            next_wake = next_wake.min(gen_end_ns);
        }

        fds.clear();
        fd_owner.clear();
        for (i, (c, _)) in conns.iter().enumerate() {
            if c.dead {
                continue;
            }
            let mut ev = 0;
            if !c.inflight.is_empty() {
                ev |= POLLIN;
            }
            if c.wants_write() {
                ev |= POLLOUT;
            }
            if ev != 0 {
                fds.push(poll::pollfd(c.fd(), ev));
                fd_owner.push(i);
            }
        }
        let timeout = Duration::from_nanos(next_wake.saturating_sub(now).min(100_000_000));
        if let Err(e) = poll::ppoll(&mut fds, timeout) {
            stats.note_error(format!("ppoll failed: {e}"));
            for (c, _) in conns.iter_mut() {
                c.dead = true;
            }
            stats.c.connections_lost += 1;
            break;
        }
        let now = now_ns(base);
        for (pfd, &i) in fds.iter().zip(&fd_owner) {
            if pfd.revents & (POLLIN | POLLERR_HUP) == 0 {
                continue;
            }
            let Some((c, _)) = conns.get_mut(i) else {
                continue;
            };
            match c.fill() {
                Ok(open) => {
                    if let Err(e) = parse_replies(c, wl, now, &mut stats) {
                        lose(c, &mut stats, e.to_string());
                    } else if !open {
                        lose(c, &mut stats, "server closed the connection".into());
                    } else {
                        last_event = last_event.max(now);
                    }
                }
                Err(e) => lose(c, &mut stats, format!("read failed: {e}")),
            }
        }
    }
    (stats, last_event.max(now_ns(base).min(gen_end_ns)))
}

/// Enqueues the requests this connection may send now.
#[allow(clippy::too_many_arguments)]
fn generate(
    c: &mut Conn,
    ph: &mut ConnPhase,
    wl: &Workload,
    depth: usize,
    now: u64,
    warm_ns: u64,
    gen_end_ns: u64,
    stats: &mut Stats,
    next_wake: &mut u64,
) {
    if now >= gen_end_ns {
        ph.done = true;
        if let Some(s) = ph.schedule.as_mut() {
            stats.c.unsent += s.drain_until(gen_end_ns, &mut c.rng);
        }
        return;
    }
    while c.inflight.len() < depth {
        let t0 = match ph.schedule.as_mut() {
            Some(s) => {
                let t = s.next_ns();
                if t > now {
                    *next_wake = (*next_wake).min(t);
                    break;
                }
                if t >= gen_end_ns {
                    ph.done = true;
                    break;
                }
                s.advance(&mut c.rng);
                if t >= warm_ns {
                    stats.send_lag.saturating_record((now - t).max(1));
                }
                t
            }
            None => now,
        };
        let measured = t0 >= warm_ns;
        if measured {
            if ph.quota == 0 {
                ph.done = true;
                break;
            }
            ph.quota -= 1;
        }
        let op = match c.refill.pop_front() {
            Some(key) => {
                stats.c.cache_aside_sets += 1;
                Op {
                    kind: OpKind::Set,
                    key,
                    len: wl.sizes.sample(&mut c.rng),
                }
            }
            None => match ph.source.next(wl, &mut c.rng) {
                Some(op) => op,
                None => {
                    ph.done = true;
                    break;
                }
            },
        };
        let stamp = encode_op(wl, &op, &mut c.wbuf, &mut c.scratch, stats);
        c.inflight.push_back(InFlight {
            t0,
            kind: op.kind,
            key: op.key,
            stamp,
            measured,
        });
    }
}

/// Appends `op` to `wbuf`, counts what a SET sends, and returns the stamp its [`InFlight`]
/// carries (the delete history's clock, stamped before the bytes are written; else 0).
pub(crate) fn encode_op(
    wl: &Workload,
    op: &Op,
    wbuf: &mut Vec<u8>,
    scratch: &mut Scratch,
    stats: &mut Stats,
) -> u64 {
    let history = wl.history.as_ref();
    match op.kind {
        OpKind::Get => {
            wl.encode_get(op.key, wbuf, scratch);
            history.map_or(0, |h| h.get_sent(op.key))
        }
        OpKind::Set => {
            wl.encode_set(op.key, op.len as usize, wbuf, scratch);
            stats.c.set_ops_sent += 1;
            stats.c.set_value_bytes += u64::from(op.len);
            if let Some(h) = history {
                h.set_sent(op.key);
            }
            0
        }
        OpKind::Delete => {
            wl.encode_delete(op.key, wbuf, scratch);
            history.map_or(0, |h| h.delete_sent())
        }
    }
}

/// Parses every complete reply in the connection's buffer and records it, latency up to
/// `now`; `c.inflight` must hold the requests of every reply already read.
pub(crate) fn parse_replies(
    c: &mut Conn,
    wl: &Workload,
    now: u64,
    stats: &mut Stats,
) -> Result<(), Error> {
    loop {
        let Some(front) = c.inflight.front().copied() else {
            if !c.unparsed().is_empty() {
                return Err(Error::Protocol(format!(
                    "{} unsolicited bytes from the server",
                    c.unparsed().len()
                )));
            }
            return Ok(());
        };
        let Some((reply, used)) = protocol::parse_reply(c.unparsed(), wl.protocol, front.kind)?
        else {
            return Ok(());
        };
        c.inflight.pop_front();
        if let Some(h) = wl.history.as_ref() {
            match (front.kind, &reply) {
                // Whatever a SET's reply says, the SET may have taken effect.
                (OpKind::Set, _) => h.set_answered(front.key),
                (OpKind::Delete, Reply::Deleted | Reply::NotFound) => {
                    h.delete_answered(front.key, front.stamp)
                }
                _ => {}
            }
        }
        if matches!(reply, Reply::ServerError | Reply::ClientError) && stats.first_error.is_none() {
            let text = c.unparsed().get(..used).unwrap_or(&[]);
            stats.note_error(format!(
                "{:?} reply: {}",
                front.kind,
                String::from_utf8_lossy(text).trim_end()
            ));
        }
        if front.measured {
            stats.record(front.kind, now.saturating_sub(front.t0));
            account(c, wl, &front, &reply, stats);
        } else {
            stats.c.warmup_ops += 1;
            if wl.verify {
                // Mismatches count even during warm-up and loading: corruption is never noise.
                if let Reply::Hit { .. } = reply {
                    check_value(c, wl, &front, &reply, stats);
                }
            }
            match reply {
                Reply::ServerError => stats.c.server_errors += 1,
                Reply::ClientError => stats.c.client_errors += 1,
                _ => {}
            }
        }
        if wl.cache_aside && front.kind == OpKind::Get && matches!(reply, Reply::Miss) {
            if c.refill.len() < crate::conn::REFILL_LIMIT {
                c.refill.push_back(front.key);
            } else {
                stats.c.cache_aside_dropped += 1;
            }
        }
        c.consume(used);
    }
}

fn account(c: &mut Conn, wl: &Workload, f: &InFlight, reply: &Reply, stats: &mut Stats) {
    match (f.kind, reply) {
        (OpKind::Get, Reply::Hit { .. }) => {
            stats.c.gets += 1;
            stats.c.get_hits += 1;
            if wl.verify {
                check_value(c, wl, f, reply, stats);
            }
        }
        (OpKind::Get, Reply::Miss) => {
            stats.c.gets += 1;
            stats.c.get_misses += 1;
        }
        (OpKind::Set, Reply::Stored) => stats.c.sets += 1,
        (OpKind::Set, Reply::NotStored) => {
            stats.c.sets += 1;
            stats.c.sets_not_stored += 1;
        }
        (OpKind::Delete, Reply::Deleted) => {
            stats.c.deletes += 1;
            stats.c.deletes_deleted += 1;
        }
        (OpKind::Delete, Reply::NotFound) => {
            stats.c.deletes += 1;
            stats.c.deletes_not_found += 1;
        }
        (_, Reply::ServerError) => stats.c.server_errors += 1,
        (_, Reply::ClientError) => stats.c.client_errors += 1,
        // parse_reply only returns replies that fit the request kind.
        _ => stats.c.client_errors += 1,
    }
}

fn check_value(c: &mut Conn, wl: &Workload, f: &InFlight, reply: &Reply, stats: &mut Stats) {
    let Reply::Hit { start, len, key } = *reply else {
        return;
    };
    stats.c.verified += 1;
    let mut expect_key = std::mem::take(&mut c.scratch.key);
    wl.key(f.key, &mut expect_key);
    let buf = c.unparsed();
    let value = buf.get(start..start + len).unwrap_or(&[]);
    let seed = pattern::seed(wl.prefix_hash, f.key, len);
    let mut ok = value.len() == len && pattern::verify(value, seed);
    if let Some((ko, kl)) = key {
        ok &= buf.get(ko..ko + kl) == Some(expect_key.as_slice());
    }
    c.scratch.key = expect_key;
    if !ok {
        stats.c.verify_mismatches += 1;
        stats.note_error(format!(
            "value mismatch for key index {} ({len} bytes)",
            f.key
        ));
    }
    if let Some(h) = wl.history.as_ref() {
        if !h.hit_allowed(f.key, f.stamp) {
            stats.c.verify_resurrected += 1;
            stats.note_error(format!(
                "GET hit on key index {} after its DELETE was answered, with no later SET",
                f.key
            ));
        }
    }
}

fn lose(c: &mut Conn, stats: &mut Stats, msg: String) {
    if !c.dead {
        c.dead = true;
        stats.c.connections_lost += 1;
        stats.note_error(msg);
    }
}

/// CPU time of this process (user + system) in seconds. 0 if unreadable.
pub fn process_cpu_s() -> f64 {
    stat_cpu_s("/proc/self/stat").unwrap_or(0.0)
}

/// CPU time (user + system, all threads) of process `pid` in seconds, or `None` if its
/// `/proc/PID/stat` cannot be read (the process is gone).
pub fn pid_cpu_s(pid: u32) -> Option<f64> {
    stat_cpu_s(&format!("/proc/{pid}/stat"))
}

/// utime + stime from a `/proc/*/stat` file (clock ticks of 1/100 s, Linux's fixed USER_HZ).
fn stat_cpu_s(path: &str) -> Option<f64> {
    let s = std::fs::read_to_string(path).ok()?;
    // Fields after the ")" that closes the command name: state is field 3, utime 14, stime 15.
    let rest = s.rsplit_once(')').map(|(_, r)| r)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok());
    Some((tick(11)? + tick(12)?) / 100.0)
}
