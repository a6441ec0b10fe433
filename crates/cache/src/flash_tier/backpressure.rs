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

    /// True once the budget started and ran out.
    pub(crate) fn spent(&self) -> bool {
        self.until.is_some_and(|d| Instant::now() >= d)
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

/// A write waiting out back-pressure holds no shard lock: a GET of another key of the same
/// shard answers while it waits (event order, no timing bound), and the write completes once
/// reclaim frees room.
#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering::Relaxed;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use bytes::Bytes;

    use crate::flash::{FlashConfig, IoBackend};
    use crate::store::KvStore;
    use crate::{Cache, ItemWrite};

    fn open(write_back: Duration) -> Cache {
        let engine = FlashConfig {
            io_backend: IoBackend::Psync,
            background_reclaim: false,
            ..FlashConfig::small()
        };
        let (mut settings, builder) = crate::config::test_flash("bp", 4 << 20, engine);
        settings.append_wait = Duration::ZERO;
        settings.write_back = write_back;
        let cfg = builder.flash(settings).build().unwrap();
        Cache::new(cfg).unwrap()
    }

    fn value(i: u32) -> Bytes {
        Bytes::from(vec![(i % 251) as u8; 4000])
    }

    /// SETs until flash (no background reclaim) has no segment left beyond its reserve and
    /// refuses appends of any size even with no write in flight.
    fn fill(c: &Cache) -> u32 {
        let t = c.tier();
        let reserve = FlashConfig::small().reserve_segments;
        let full = || {
            t.flash.free_segments() <= reserve
                && t.flash.flush().wait().is_ok()
                && !t.flash.can_append(crate::flash_tier::STREAM, 1)
        };
        let mut i = 0;
        while !full() {
            c.set_now(
                format!("fill{i}").as_bytes(),
                ItemWrite::new(value(i), 0, 0),
            )
            .unwrap();
            i += 1;
            assert!(i < 100_000, "flash never filled");
        }
        i
    }

    /// A key other than `not` whose hash falls in the same index shard as `of`'s.
    fn same_shard(c: &Cache, of: &[u8], prefix: &str) -> Vec<u8> {
        let idx = &c.core().slots;
        let mask = idx.shard_count() as u64 - 1;
        let want = idx.hash(of) & mask;
        (0..1_000_000)
            .map(|i| format!("{prefix}{i}").into_bytes())
            .find(|k| idx.hash(k) & mask == want && k != of)
            .unwrap()
    }

    /// Reclaim until the waiting writer has stored what it waits with (room one reclaim frees
    /// may go to the writer's own evictions or to drop notes first).
    fn free_until_done<'a>(
        tier: impl Fn() -> &'a crate::flash_tier::tier::FlashTier,
        writer: &std::thread::JoinHandle<()>,
    ) {
        let t = Instant::now();
        while !writer.is_finished() {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "the writer never got room"
            );
            let _ = tier().flash.reclaim_now(true);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
        let t = Instant::now();
        while !f() {
            assert!(t.elapsed() < Duration::from_secs(60), "timed out: {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn waiting_write_does_not_block_its_shard() {
        let c = Arc::new(open(Duration::ZERO));
        fill(&c);
        let writer_key = b"writer".to_vec();
        let reader_key = same_shard(&c, &writer_key, "reader");
        // RAM only (flash is full), stored before any wait is configured.
        c.set_now(&reader_key, ItemWrite::new(Bytes::from_static(b"r"), 0, 0))
            .unwrap();
        // The write-back thread retries the stores flash refused (fill's last ones, this
        // one), and once waits are on its next refusal marks the gate: it would race any
        // SET meant to mark it (that SET then waits, on this thread, for room nobody
        // frees). A window of 10 minutes makes none of them due (a pass under way ends at
        // its first refusal), so the writer below is the only one to wait; the gate is
        // marked as a refused append marks it.
        c.set_knob("write_back_ms", "600000").unwrap();
        std::thread::sleep(crate::flash_tier::writeback::PASS_EVERY * 3);
        c.set_knob("append_wait_ms", "60000").unwrap();
        let tier = || c.tier();
        tier().gate.pressure();
        let w = c.clone();
        let key = writer_key.clone();
        let writer = std::thread::spawn(move || {
            w.set_now(&key, ItemWrite::new(value(7), 0, 0)).unwrap();
        });
        wait_for("the writer waits", || tier().gate.waits.load(Relaxed) >= 1);
        let got = c.get_now(&reader_key).unwrap().unwrap();
        assert_eq!(&got.value[..], b"r");
        assert!(
            !writer.is_finished(),
            "the GET answered while the SET of the same shard was waiting for flash"
        );
        // Room again (reclaim drops unread items): the waiter goes on and stores its item;
        // no more waits (its evictions may find flash full again).
        c.set_knob("append_wait_ms", "0").unwrap();
        c.set_knob("drop_unread", "1").unwrap();
        free_until_done(tier, &writer);
        writer.join().unwrap();
        assert_eq!(c.get_now(&writer_key).unwrap().unwrap().value, value(7));
        assert!(tier().gate.waits.load(Relaxed) >= 1);
        assert!(tier().gate.wait_us.load(Relaxed) > 0);
        assert_eq!(tier().gate.wait_timeouts.load(Relaxed), 0);
    }

    #[test]
    fn eviction_flash_refuses_waits_outside_every_lock() {
        let c = Arc::new(open(Duration::from_secs(600)));
        let n = fill(&c);
        let tier = || c.tier();
        c.set_knob("append_wait_ms", "60000").unwrap();
        let evictions = c.stats().evictions;
        // Every RAM item is dirty (write-back window 600 s): evicting one needs an append,
        // which flash refuses; the writer stalls and waits holding nothing.
        let w = c.clone();
        let writer = std::thread::spawn(move || {
            for i in 0..400 {
                let k = format!("more{i}");
                w.set_now(k.as_bytes(), ItemWrite::new(value(i), 0, 0))
                    .unwrap();
            }
        });
        wait_for("the writer waits", || tier().gate.waits.load(Relaxed) >= 1);
        // Every shard and the allocator are free: reads of all the loaded keys answer, and
        // nothing was evicted meanwhile.
        let mut found = 0;
        for i in 0..n {
            found += usize::from(c.get_now(format!("fill{i}").as_bytes()).unwrap().is_some());
        }
        assert!(found > 0);
        assert!(
            !writer.is_finished(),
            "reads answered while the writer waited for flash"
        );
        assert_eq!(
            c.stats().evictions,
            evictions,
            "a stalled eviction drops nothing"
        );
        // Let it go: no more waits, and room for the waiting one.
        c.set_knob("append_wait_ms", "0").unwrap();
        c.set_knob("drop_unread", "1").unwrap();
        free_until_done(tier, &writer);
        writer.join().unwrap();
        assert!(c.get_now(b"more399").unwrap().is_some());
    }
}
