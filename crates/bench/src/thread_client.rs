//! The thread-per-connection client (`--client threads`): every connection gets a sending and
//! a receiving thread on one blocking socket, the structure of the open-loop clients written
//! outside this project, where [`crate::phase`] drives all its connections from one event loop.
//!
//! The sender sleeps until each request's scheduled time (open loop: the connection's share of
//! the rate, Poisson or uniform gaps), writes that one request with a blocking `write` and
//! never waits for its reply. Only when `limit` requests are already unanswered on its
//! connection does it wait for one (`sends_waited` counts the requests that came due while it
//! waited, itself included), keeping the scheduled time, so
//! latency still counts from when the request should have gone out (no coordinated omission)
//! and a stalled server costs at most `limit` records per connection. In closed loop it keeps
//! `depth` requests outstanding. The receiver reads, parses replies in order and records each
//! latency when its reply is parsed.
//!
//! Invariants: a request's [`InFlight`] record is queued to the receiver before its bytes are
//! written, and the receiver drains the queue after each read, so every reply it parses has
//! its record; it blocks only in `read`, never on the queue, so a request costs the two
//! threads one wake-up each. `outstanding` = records queued − replies parsed ≤ `limit`. The two
//! threads share only the queue, the [`Shared`] slot count and flags; each fills its own
//! [`Stats`], merged after the join.

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::conn::{Conn, InFlight};
use crate::error::Error;
use crate::phase::{
    around_window, encode_op, now_ns, parse_replies, process_cpu_s, Pacing, PhaseResult, PhaseSpec,
};
use crate::poll;
use crate::rng::Rng;
use crate::schedule::Schedule;
use crate::stats::Stats;
use crate::workload::{OpSource, Scratch, Workload};

/// Longest a thread blocks before it looks at the clock and the other thread's flags again.
const TICK: Duration = Duration::from_millis(100);

/// Default bound on unanswered requests per connection in open loop (`--max-outstanding`).
pub const DEFAULT_MAX_OUTSTANDING: usize = 1024;

/// One connection of the thread client.
#[derive(Debug)]
pub struct ThreadConn {
    /// The sender's handle on the socket.
    writer: TcpStream,
    /// The receiver's handle and buffers (blocking socket, `TICK` read timeout).
    reader: Conn,
    /// Shuts the socket down to wake a blocked thread when the connection is given up.
    control: TcpStream,
    /// The sender's random stream (schedule and operations).
    rng: Rng,
    /// Set once the connection failed or was left with replies owed; skipped from then on.
    pub dead: bool,
}

impl ThreadConn {
    /// Connects to `addr` with Nagle off, blocking, with a read timeout of `TICK` on the
    /// receiver's side (so it can look at the clock) and `write_timeout` on the sender's.
    pub fn connect(addr: &str, seed: u64, write_timeout: Duration) -> Result<Self, Error> {
        let connect_err = |source| Error::Connect {
            addr: addr.to_string(),
            source,
        };
        let stream = TcpStream::connect(addr).map_err(connect_err)?;
        stream.set_nodelay(true).map_err(connect_err)?;
        let writer = stream.try_clone().map_err(connect_err)?;
        writer
            .set_write_timeout(Some(write_timeout.max(TICK)))
            .map_err(connect_err)?;
        let control = stream.try_clone().map_err(connect_err)?;
        stream.set_read_timeout(Some(TICK)).map_err(connect_err)?;
        Ok(Self {
            writer,
            reader: Conn::from_stream(stream, seed),
            control,
            rng: Rng::new(seed),
            dead: false,
        })
    }
}

/// The slot count a connection's two threads share.
#[derive(Default)]
struct Slots {
    /// Requests queued to the receiver and not yet answered.
    outstanding: usize,
    /// The sender is waiting for a slot: only then does a reply signal it (a signal costs a
    /// system call per reply otherwise).
    sender_waiting: bool,
}

/// What a connection's two threads share during one phase.
struct Shared {
    slots: Mutex<Slots>,
    /// Signalled by the receiver when replies free slots the sender waits for, and when the
    /// connection dies.
    slot_freed: Condvar,
    /// The connection failed; both threads stop.
    dead: AtomicBool,
    /// When the sender stopped (ns since the phase's base), `u64::MAX` while it sends.
    sender_done_ns: AtomicU64,
    /// A clone of the socket, to shut it down.
    control: TcpStream,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks the connection lost (counted once, by whichever thread sees it first) and wakes
    /// the other thread: a blocked write or read ends when the socket is shut down.
    fn lose(&self, stats: &mut Stats, msg: String) {
        if !self.dead.swap(true, Ordering::SeqCst) {
            stats.c.connections_lost += 1;
            stats.note_error(msg);
            let _ = self.control.shutdown(Shutdown::Both);
        }
        drop(self.lock());
        self.slot_freed.notify_all();
    }

    /// Takes a slot, waiting while `limit` are taken. `Some(waited)`, or `None` if the
    /// connection died or `until_ns` passed first.
    fn acquire(&self, limit: usize, base: Instant, until_ns: u64) -> Option<bool> {
        let mut slots = self.lock();
        let mut waited = false;
        while slots.outstanding >= limit {
            waited = true;
            let now = now_ns(base);
            if self.dead.load(Ordering::SeqCst) || now >= until_ns {
                slots.sender_waiting = false;
                return None;
            }
            let wait = Duration::from_nanos(until_ns - now).min(TICK);
            slots.sender_waiting = true;
            slots = self
                .slot_freed
                .wait_timeout(slots, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        slots.sender_waiting = false;
        slots.outstanding += 1;
        Some(waited)
    }

    fn release(&self, k: usize) {
        let mut slots = self.lock();
        slots.outstanding = slots.outstanding.saturating_sub(k);
        let wake = slots.sender_waiting;
        drop(slots);
        if wake {
            self.slot_freed.notify_one();
        }
    }
}

/// What one connection's sender does in a phase.
struct SendPlan {
    source: OpSource,
    schedule: Option<Schedule>,
    /// Measured operations it may still send (`u64::MAX` if unbounded).
    quota: u64,
    /// Most requests unanswered at once.
    limit: usize,
}

/// Times of a phase, ns since its base instant.
#[derive(Clone, Copy)]
struct Clock {
    base: Instant,
    warm_ns: u64,
    gen_end_ns: u64,
    drain_ns: u64,
}

/// Runs a phase over `conns`, two threads per live connection. `max_outstanding` bounds the
/// unanswered requests per connection in open loop; closed loop keeps `spec.depth`.
/// Connections that fail are marked dead and counted; the phase fails only if all are lost.
pub fn run_phase(
    conns: &mut [ThreadConn],
    wl: &Workload,
    spec: &PhaseSpec,
    max_outstanding: usize,
) -> Result<PhaseResult, Error> {
    let live = conns.iter().filter(|c| !c.dead).count();
    if live == 0 {
        return Err(Error::AllConnectionsLost);
    }
    let cpu0 = process_cpu_s();
    let clock = Clock {
        base: Instant::now(),
        warm_ns: spec.warmup.as_nanos() as u64,
        gen_end_ns: (spec.warmup + spec.duration).as_nanos() as u64,
        drain_ns: spec.drain_timeout.as_nanos() as u64,
    };
    let limit = match spec.pacing {
        Pacing::Open { .. } => max_outstanding.max(1),
        Pacing::Closed => spec.depth.max(1),
    };
    let quota = spec.ops.map_or(u64::MAX, |o| o.div_ceil(live as u64));

    // Live connections get consecutive numbers, so the load phase covers every key once.
    let mut work = Vec::with_capacity(live);
    for (i, c) in conns.iter_mut().filter(|c| !c.dead).enumerate() {
        let source = if spec.sequential_load {
            OpSource::Sequential {
                next: i as u64,
                stride: live as u64,
                end: wl.keys.len(),
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
        let shared = Shared {
            slots: Mutex::new(Slots::default()),
            slot_freed: Condvar::new(),
            dead: AtomicBool::new(false),
            sender_done_ns: AtomicU64::new(u64::MAX),
            control: c.control.try_clone()?,
        };
        let plan = SendPlan {
            source,
            schedule,
            quota,
            limit,
        };
        work.push((c, shared, plan));
    }

    let (results, server) = around_window(spec, || {
        std::thread::scope(|s| {
            let mut handles = Vec::with_capacity(2 * work.len());
            for (c, shared, plan) in work.iter_mut() {
                let (tx, rx) = mpsc::channel();
                let shared = &*shared;
                let (writer, reader, rng) = (&mut c.writer, &mut c.reader, &mut c.rng);
                handles.push(s.spawn(move || {
                    let stats = sender(writer, rng, plan, shared, tx, wl, clock);
                    (stats, 0)
                }));
                handles.push(s.spawn(move || receiver(reader, shared, rx, wl, clock)));
            }
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        let mut stats = Stats::default();
                        stats.note_error("client thread panicked".into());
                        stats.c.connections_lost += 1;
                        (stats, 0)
                    })
                })
                .collect::<Vec<(Stats, u64)>>()
        })
    });
    for (c, shared, _) in &mut work {
        c.dead = shared.dead.load(Ordering::SeqCst);
    }

    let mut stats = Stats::default();
    let mut last_done = 0u64;
    for (thread_stats, t) in &results {
        stats.merge(thread_stats);
        last_done = last_done.max(*t);
    }
    let (warm_ns, gen_end_ns) = (clock.warm_ns, clock.gen_end_ns);
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

/// Sleeps until `t_ns` (since `base`), in steps of at most `TICK`; false if the connection
/// died meanwhile.
fn sleep_until(base: Instant, t_ns: u64, shared: &Shared) -> bool {
    loop {
        if shared.dead.load(Ordering::Relaxed) {
            return false;
        }
        let now = now_ns(base);
        if now >= t_ns {
            return true;
        }
        std::thread::sleep(Duration::from_nanos(t_ns - now).min(TICK));
    }
}

/// The sending thread of one connection.
fn sender(
    writer: &mut TcpStream,
    rng: &mut Rng,
    plan: &mut SendPlan,
    shared: &Shared,
    tx: Sender<InFlight>,
    wl: &Workload,
    clock: Clock,
) -> Stats {
    poll::set_timer_slack_ns(1_000);
    let Clock {
        base,
        warm_ns,
        gen_end_ns,
        ..
    } = clock;
    let mut stats = Stats::default();
    let mut wbuf = Vec::with_capacity(8192);
    let mut scratch = Scratch::default();
    // When the last wait for a slot ended (ns since base).
    let mut held_until = 0u64;
    loop {
        let due = match plan.schedule.as_mut() {
            Some(s) => {
                let t = s.next_ns();
                if t >= gen_end_ns || !sleep_until(base, t, shared) {
                    break;
                }
                s.advance(rng);
                Some(t)
            }
            None => {
                if now_ns(base) >= gen_end_ns || shared.dead.load(Ordering::Relaxed) {
                    break;
                }
                None
            }
        };
        let Some(waited) = shared.acquire(plan.limit, base, gen_end_ns) else {
            // The phase ended (or the connection died) while every slot was taken: this
            // request and the rest of the schedule were offered but never sent.
            if let (Some(s), false) = (plan.schedule.as_mut(), shared.dead.load(Ordering::SeqCst)) {
                stats.c.unsent += 1 + s.drain_until(gen_end_ns, rng);
            }
            break;
        };
        let now = now_ns(base);
        if waited {
            held_until = now;
        }
        let t0 = match due {
            Some(t) => {
                // Due while the limit held its connection: it waited itself, or came due
                // behind one that did.
                if waited || t < held_until {
                    stats.c.sends_waited += 1;
                }
                if t >= warm_ns {
                    stats.send_lag.saturating_record((now - t).max(1));
                }
                t
            }
            None => now,
        };
        let measured = t0 >= warm_ns;
        let op = if measured && plan.quota == 0 {
            None
        } else {
            plan.source.next(wl, rng)
        };
        let Some(op) = op else {
            shared.release(1);
            break;
        };
        if measured {
            plan.quota -= 1;
        }
        wbuf.clear();
        let stamp = encode_op(wl, &op, &mut wbuf, &mut scratch, &mut stats);
        let record = InFlight {
            t0,
            kind: op.kind,
            key: op.key,
            stamp,
            measured,
        };
        if tx.send(record).is_err() {
            // The receiver stopped: it has already marked the connection dead.
            break;
        }
        if let Err(e) = writer.write_all(&wbuf) {
            shared.lose(&mut stats, format!("write failed: {e}"));
            break;
        }
    }
    shared.sender_done_ns.store(now_ns(base), Ordering::SeqCst);
    drop(tx);
    stats
}

/// The receiving thread of one connection. Returns its stats and when its last reply was
/// parsed (ns since the base).
fn receiver(
    c: &mut Conn,
    shared: &Shared,
    rx: Receiver<InFlight>,
    wl: &Workload,
    clock: Clock,
) -> (Stats, u64) {
    poll::set_timer_slack_ns(1_000);
    let base = clock.base;
    let mut stats = Stats::default();
    let mut last = 0u64;
    loop {
        if shared.dead.load(Ordering::SeqCst) {
            break;
        }
        if c.inflight.is_empty() {
            match rx.try_recv() {
                Ok(f) => c.inflight.push_back(f),
                // Nothing owed: wait in `read` below like any blocking client (the reply to
                // a request sent meanwhile wakes it; its record is queued by then).
                Err(TryRecvError::Empty) => {}
                // The sender is done and every request it sent is answered.
                Err(TryRecvError::Disconnected) => break,
            }
        }
        let done_at = shared.sender_done_ns.load(Ordering::SeqCst);
        if done_at != u64::MAX && now_ns(base) > done_at.saturating_add(clock.drain_ns) {
            while let Ok(f) = rx.try_recv() {
                c.inflight.push_back(f);
            }
            if !c.inflight.is_empty() {
                stats.c.timed_out += c.inflight.iter().filter(|f| f.measured).count() as u64;
                // Replies still owed would desynchronise the next phase.
                shared.lose(
                    &mut stats,
                    "replies not received before the drain timeout".into(),
                );
            }
            break;
        }
        match c.read_once() {
            Ok(true) => {}
            Ok(false) => {
                shared.lose(&mut stats, "server closed the connection".into());
                break;
            }
            Err(e) => {
                shared.lose(&mut stats, format!("read failed: {e}"));
                break;
            }
        }
        let now = now_ns(base);
        // After the read: every reply read so far was written after its record was queued.
        while let Ok(f) = rx.try_recv() {
            c.inflight.push_back(f);
        }
        let before = c.inflight.len();
        if let Err(e) = parse_replies(c, wl, now, &mut stats) {
            shared.lose(&mut stats, e.to_string());
            break;
        }
        let answered = before - c.inflight.len();
        if answered > 0 {
            last = now;
            shared.release(answered);
        }
    }
    // A connection given up mid-phase must not carry records into the next one.
    c.inflight.clear();
    (stats, last.max(now_ns(base).min(clock.gen_end_ns)))
}
