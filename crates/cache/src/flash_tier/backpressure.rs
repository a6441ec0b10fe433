//! Back-pressure from the flash writer, taken before any lock and without blocking a thread.
//! Appends made under a shard lock (write-through, eviction, tombstones, write-back) never
//! wait: when the engine refuses one for back-pressure (`Busy`, `NoSpace`) the [`Gate`] is
//! marked *pressured*, and the next operations await [`Gate::writable`] — a future — before
//! they lock anything, for at most `append_wait_ms`; then they go on either way, as a
//! blocking wait that expired did (an append still refused leaves the item in RAM).
//!
//! # Threads
//! One `flashtier-appendwait` thread per cache with flash: asleep while nobody waits, else
//! it asks the engine every [`PROBE_EVERY`] whether it takes appends again and wakes the
//! waiters that can go (room, or deadline passed). Its only lock is the gate's own (a leaf).
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// How often the gate thread asks the engine for room while someone waits.
pub(crate) const PROBE_EVERY: Duration = Duration::from_millis(1);
const PENDING: u8 = 0;
const ROOM: u8 = 1;
const EXPIRED: u8 = 2;

/// One waiting operation.
struct Slot {
    state: AtomicU8,
    waker: Mutex<Option<Waker>>,
    deadline: Instant,
}

impl Slot {
    fn finish(&self, how: u8) {
        let w = {
            let mut g = self.waker.lock();
            self.state.store(how, Ordering::Release);
            g.take()
        };
        if let Some(w) = w {
            w.wake();
        }
    }
}

/// How long one request may still wait for back-pressure (`FlashTier::await_room`): the
/// budget of `append_wait_ms` starts at its first wait and is shared by all its waits.
#[derive(Debug, Default)]
pub(crate) struct Budget {
    until: Option<Instant>,
}

impl Budget {
    /// The wait left, starting a budget of `wait` at the first call.
    pub(crate) fn left(&mut self, wait: Duration) -> Duration {
        let now = Instant::now();
        let until = *self.until.get_or_insert_with(|| now + wait);
        until.saturating_duration_since(now)
    }

    /// True once the budget started (its first `left`).
    pub(crate) fn started(&self) -> bool {
        self.until.is_some()
    }

    /// True once the budget started and ran out.
    pub(crate) fn spent(&self) -> bool {
        self.until.is_some_and(|d| Instant::now() >= d)
    }
}

/// The second budget of a write ([`Patience`]) is this many times `append_wait_ms` (2 s at
/// the default 200 ms): long enough for a flash writer that is only behind (on a shared
/// disk it fell behind by more than 200 ms, docs/eviction.md), short enough that writes go
/// on, dropping what flash cannot take, when the device hangs.
pub(crate) const DROP_WAIT_TIMES: u32 = 10;

/// A write's patience with back-pressure. `first`: its budget of `append_wait_ms` for any
/// wait. Once that is spent its evictions keep items flash refuses in RAM (deferred), and
/// where one could only be dropped — a forced eviction, a deferred copy with no room — the
/// write stops (`Error::FlashBusy` from an `OnLater::Keep` eviction) and is *holding*: it
/// waits and stalls again within `before_drop`, [`DROP_WAIT_TIMES`] × `append_wait_ms`
/// from then (`extstore_drop_waits`); after that it drops (today's forced eviction), so a
/// write always makes progress.
#[derive(Debug, Default)]
pub(crate) struct Patience {
    pub(crate) first: Budget,
    pub(crate) before_drop: Budget,
}

impl Patience {
    /// True once the write stopped rather than drop deferred items: its second budget is
    /// started then, and only then (`FlashTier::busy`).
    pub(crate) fn holding(&self) -> bool {
        self.before_drop.started()
    }
}

/// Back-pressure state shared by every operation (see the module docs).
#[derive(Default)]
pub(crate) struct Gate {
    pressured: AtomicBool,
    /// The gate thread runs (else nobody would wake a waiter: nobody waits).
    running: AtomicBool,
    stop: AtomicBool,
    waiters: Mutex<Vec<Arc<Slot>>>,
    cv: Condvar,
    /// Operations that waited, total microseconds waited, waits that ran out.
    pub waits: AtomicU64,
    pub wait_us: AtomicU64,
    pub wait_timeouts: AtomicU64,
}

impl Gate {
    /// An append under a lock was refused for back-pressure: later operations wait first.
    pub(crate) fn pressure(&self) {
        self.pressured.store(true, Ordering::Relaxed);
    }

    /// True while the last refusal has not been followed by a probe finding room.
    pub(crate) fn is_pressured(&self) -> bool {
        self.pressured.load(Ordering::Relaxed)
    }

    /// Ready at once unless pressured; else when the engine takes appends again or `wait`
    /// has passed (counted in `waits`, `wait_us`, `wait_timeouts`).
    pub(crate) fn writable(&self, wait: Duration) -> Writable<'_> {
        Writable {
            gate: self,
            wait,
            slot: None,
            start: None,
        }
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let _g = self.waiters.lock();
        self.cv.notify_all();
    }
}

/// The future of [`Gate::writable`]; output: true if room was found, false if the wait ran out.
pub(crate) struct Writable<'a> {
    gate: &'a Gate,
    wait: Duration,
    slot: Option<Arc<Slot>>,
    start: Option<Instant>,
}

impl Future for Writable<'_> {
    type Output = bool;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        let gate = self.gate;
        let Some(slot) = self.slot.clone() else {
            if !gate.is_pressured()
                || self.wait.is_zero()
                || !gate.running.load(Ordering::Relaxed)
                || gate.stop.load(Ordering::Relaxed)
            {
                return Poll::Ready(true);
            }
            let now = Instant::now();
            let slot = Arc::new(Slot {
                state: AtomicU8::new(PENDING),
                waker: Mutex::new(Some(cx.waker().clone())),
                deadline: now + self.wait,
            });
            gate.waits.fetch_add(1, Ordering::Relaxed);
            {
                let mut w = gate.waiters.lock();
                w.push(slot.clone());
                gate.cv.notify_one();
            }
            self.slot = Some(slot);
            self.start = Some(now);
            return Poll::Pending;
        };
        let mut w = slot.waker.lock();
        let state = slot.state.load(Ordering::Acquire);
        if state == PENDING {
            *w = Some(cx.waker().clone());
            return Poll::Pending;
        }
        drop(w);
        let waited = self.start.map_or(0, |s| s.elapsed().as_micros() as u64);
        gate.wait_us.fetch_add(waited, Ordering::Relaxed);
        if state == EXPIRED {
            gate.wait_timeouts.fetch_add(1, Ordering::Relaxed);
        }
        self.slot = None;
        self.start = None;
        Poll::Ready(state == ROOM)
    }
}

/// Handle of the gate thread; dropping it stops and joins the thread (waiters are let go).
pub(crate) struct GateThread {
    gate: Arc<Gate>,
    handle: Option<JoinHandle<()>>,
}

impl GateThread {
    /// Start the thread of `gate` (with flash only); `probe` answers whether the engine takes
    /// appends again (`FlashTier::takes_appends`).
    pub(crate) fn spawn(
        gate: Arc<Gate>,
        probe: impl FnMut() -> bool + Send + 'static,
    ) -> std::io::Result<Self> {
        gate.running.store(true, Ordering::Relaxed);
        let g = gate.clone();
        let handle = std::thread::Builder::new()
            .name("flashtier-appendwait".into())
            .spawn(move || run(&g, probe));
        match handle {
            Ok(h) => Ok(Self {
                gate,
                handle: Some(h),
            }),
            Err(e) => {
                gate.running.store(false, Ordering::Relaxed);
                Err(e)
            }
        }
    }
}

impl Drop for GateThread {
    fn drop(&mut self) {
        self.gate.stop();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn run(gate: &Gate, mut probe: impl FnMut() -> bool) {
    loop {
        {
            let mut w = gate.waiters.lock();
            while w.is_empty() && !gate.stop.load(Ordering::Relaxed) {
                gate.cv.wait(&mut w);
            }
            if gate.stop.load(Ordering::Relaxed) {
                gate.running.store(false, Ordering::Relaxed);
                for s in w.drain(..) {
                    s.finish(EXPIRED);
                }
                return;
            }
        }
        let room = probe();
        if room {
            gate.pressured.store(false, Ordering::Relaxed);
        }
        let now = Instant::now();
        let mut w = gate.waiters.lock();
        w.retain(|s| {
            if room {
                s.finish(ROOM);
            } else if now >= s.deadline {
                s.finish(EXPIRED);
            } else {
                return true;
            }
            false
        });
        if !w.is_empty() {
            gate.cv.wait_for(&mut w, PROBE_EVERY);
        }
    }
}
