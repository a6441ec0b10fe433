//! Admission of device reads: at most `read_queue_limit` record reads are at the device at
//! once (a record longer than its size hint takes a second device read in the same slot); a
//! read over the limit *waits* here, in arrival order, holding its target and its promise but
//! no buffer, and starts when an earlier read leaves the device. A read is never refused
//! because this queue is full: the kv face would answer a miss for an item that is there, and
//! a cache may lose but never lies.
//!
//! Invariants (one small mutex, never held while a read is started or completed): a read waits
//! only while `in_flight` ≥ the limit or a *dispatcher* runs. Whoever frees a slot, or parks a
//! read while a slot is free (the queue emptied right after it looked, or the knob grew), runs
//! the dispatch loop unless one runs already; that loop checks again after every start, so no
//! parked read is forgotten. The loop, not recursion, starts the next read: a start that fails
//! at once (executor shut down) and frees its slot inside `start` cannot nest. Lowering the
//! limit lets `in_flight` drain down to it. The waiting are bounded by the callers (the kv face
//! keeps at most `READ_BATCH` × `FETCH_WINDOW` lookups per connection outstanding).
//!
//! Threads: any reader (park, start) and any thread that completes a read — the event loop
//! holding the lane's `ReapHandle`, a ring thread, a psync worker — which starts the next
//! waiting read on its own lane.
use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use crate::completion::Promise;
use crate::format::record::Record;
use crate::stats::FlashStats;

/// A record read admitted to the engine's [`ReadQueue`], started or waiting for a slot:
/// what to read and who wants it (the reader, `reader.rs`, makes and runs it).
pub(crate) struct PendingRead {
    pub target: Target,
    /// Segment offset of the first page to read.
    pub page0: u64,
    /// Bytes to read (whole pages).
    pub len: u64,
    pub promise: Promise<Record>,
}

/// Where a device read goes and how to check it.
pub(crate) struct Target {
    pub dev: usize,
    /// Device offset of the segment.
    pub seg_dev_off: u64,
    /// Record offset in the segment.
    pub off: u32,
    /// The segment's checksum seed, captured when the read was looked up.
    pub seed: u32,
}

/// Reads at the device and reads waiting for a slot; `W` is what a waiting read keeps.
pub(crate) struct ReadQueue<W> {
    slots: Mutex<Slots<W>>,
    stats: Arc<FlashStats>,
}

struct Slots<W> {
    /// Reads started and not yet finished (each holds one slot).
    in_flight: u64,
    /// Reads waiting for a slot, oldest first.
    waiting: VecDeque<W>,
    /// A thread is in the dispatch loop, and will start waiting reads into free slots.
    dispatching: bool,
    /// The engine closed: nothing waits any more and nothing new is admitted.
    closed: bool,
}

impl<W> ReadQueue<W> {
    pub(crate) fn new(stats: Arc<FlashStats>) -> Self {
        Self {
            slots: Mutex::new(Slots {
                in_flight: 0,
                waiting: VecDeque::new(),
                dispatching: false,
                closed: false,
            }),
            stats,
        }
    }

    /// Start `read` with `start` now if fewer than `limit` reads are at the device and none is
    /// waiting; else park it behind the others (`start` then runs later, on the thread that
    /// frees its slot). `Err(read)`: the queue is closed, nothing was started.
    pub(crate) fn submit(&self, read: W, limit: u64, mut start: impl FnMut(W)) -> Result<(), W> {
        let mut s = self.slots.lock();
        if s.closed {
            return Err(read);
        }
        if s.waiting.is_empty() && s.in_flight < limit {
            s.in_flight += 1;
            self.note(&s);
            drop(s);
            start(read);
            return Ok(());
        }
        s.waiting.push_back(read);
        FlashStats::add(&self.stats.reads_waited, 1);
        self.note(&s);
        // Look again now it is parked: a slot may be free with no dispatcher to fill it.
        self.dispatch(s, limit, start);
        Ok(())
    }

    /// A started read left the device (done or failed): free its slot and start waiting reads
    /// while slots are free.
    pub(crate) fn finish(&self, limit: u64, start: impl FnMut(W)) {
        let mut s = self.slots.lock();
        s.in_flight = s.in_flight.saturating_sub(1);
        self.note(&s);
        self.dispatch(s, limit, start);
    }

    /// Close: nothing more is admitted; returns the waiting reads (oldest first) for the
    /// caller to fail. Reads already started finish as usual.
    pub(crate) fn close(&self) -> Vec<W> {
        let mut s = self.slots.lock();
        s.closed = true;
        let waiting = s.waiting.drain(..).collect();
        self.note(&s);
        waiting
    }

    /// Start waiting reads, oldest first, while fewer than `limit` are in flight, unless
    /// another thread is doing so (it will see the free slots: it checks after every start).
    fn dispatch(&self, mut s: MutexGuard<'_, Slots<W>>, limit: u64, mut start: impl FnMut(W)) {
        if s.dispatching {
            return;
        }
        s.dispatching = true;
        while s.in_flight < limit {
            let Some(read) = s.waiting.pop_front() else {
                break;
            };
            s.in_flight += 1;
            self.note(&s);
            MutexGuard::unlocked(&mut s, || start(read));
        }
        s.dispatching = false;
    }

    /// Refresh the gauges (under the lock, so they are never stale in the wrong order).
    fn note(&self, s: &Slots<W>) {
        FlashStats::set(&self.stats.reads_in_flight, s.in_flight);
        FlashStats::set(&self.stats.reads_waiting, s.waiting.len() as u64);
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    fn queue() -> ReadQueue<u32> {
        ReadQueue::new(Arc::default())
    }

    fn gauges(q: &ReadQueue<u32>) -> (u64, u64, u64) {
        let st = &q.stats;
        (
            FlashStats::get(&st.reads_in_flight),
            FlashStats::get(&st.reads_waiting),
            FlashStats::get(&st.reads_waited),
        )
    }

    #[test]
    fn over_the_limit_waits_in_order_and_starts_as_slots_free() {
        let q = queue();
        let started = RefCell::new(Vec::new());
        let start = |r| started.borrow_mut().push(r);
        for r in 0..5 {
            assert!(q.submit(r, 2, start).is_ok());
        }
        assert_eq!(*started.borrow(), [0, 1]);
        assert_eq!(gauges(&q), (2, 3, 3));
        q.finish(2, start);
        assert_eq!(*started.borrow(), [0, 1, 2]);
        // A newcomer queues behind the waiting even though it could have taken a slot later.
        assert!(q.submit(5, 2, start).is_ok());
        q.finish(2, start);
        q.finish(2, start);
        q.finish(2, start);
        assert_eq!(*started.borrow(), [0, 1, 2, 3, 4, 5]);
        assert_eq!(gauges(&q), (2, 0, 4));
    }

    #[test]
    fn a_parked_read_starts_when_a_slot_is_already_free() {
        // The knob grew (or the queue emptied just as the read looked): parking finds a free
        // slot and no dispatcher, and starts the read itself.
        let q = queue();
        let started = RefCell::new(Vec::new());
        let start = |r| started.borrow_mut().push(r);
        for r in 0..3 {
            assert!(q.submit(r, 1, start).is_ok());
        }
        assert_eq!(*started.borrow(), [0]);
        assert!(q.submit(3, 3, start).is_ok());
        assert_eq!(*started.borrow(), [0, 1, 2]);
        assert_eq!(gauges(&q), (3, 1, 3));
    }

    #[test]
    fn a_start_that_finishes_at_once_does_not_nest() {
        // A start that completes inside `start` (an executor shut down fails the read on the
        // caller's thread) frees its slot there; the outer loop starts the next one.
        let q = Arc::new(queue());
        let depth = std::cell::Cell::new(0u32);
        let deepest = std::cell::Cell::new(0u32);
        let started = RefCell::new(Vec::new());
        for r in 0..1000 {
            assert!(q.submit(r, 1, |_| {}).is_ok());
        }
        fn start_failing(
            q: &ReadQueue<u32>,
            r: u32,
            depth: &std::cell::Cell<u32>,
            deepest: &std::cell::Cell<u32>,
            started: &RefCell<Vec<u32>>,
        ) {
            depth.set(depth.get() + 1);
            deepest.set(deepest.get().max(depth.get()));
            started.borrow_mut().push(r);
            q.finish(1, |n| start_failing(q, n, depth, deepest, started));
            depth.set(depth.get() - 1);
        }
        q.finish(1, |r| start_failing(&q, r, &depth, &deepest, &started));
        assert_eq!(started.borrow().len(), 999);
        assert_eq!(deepest.get(), 1, "each start ran from the outer loop");
        assert_eq!(gauges(&q).0, 0);
    }

    #[test]
    fn close_hands_back_the_waiting_and_admits_nothing() {
        let q = queue();
        let started = RefCell::new(Vec::new());
        let start = |r| started.borrow_mut().push(r);
        for r in 0..4 {
            assert!(q.submit(r, 1, start).is_ok());
        }
        assert_eq!(q.close(), [1, 2, 3]);
        assert_eq!(q.submit(9, 1, start), Err(9));
        q.finish(1, start);
        assert_eq!(*started.borrow(), [0]);
        assert_eq!(gauges(&q), (0, 0, 3));
    }

    #[test]
    fn many_threads_never_exceed_the_limit_and_every_read_starts() {
        use std::sync::atomic::{AtomicU64, Ordering};
        const LIMIT: u64 = 3;
        const READS: u32 = 4000;
        struct Dev {
            q: ReadQueue<u32>,
            at_device: AtomicU64,
            peak: AtomicU64,
            tx: Mutex<std::sync::mpsc::Sender<u32>>,
        }
        fn start(d: &Dev, r: u32) {
            let now = d.at_device.fetch_add(1, Ordering::SeqCst) + 1;
            d.peak.fetch_max(now, Ordering::SeqCst);
            let _ = d.tx.lock().send(r);
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let d = Arc::new(Dev {
            q: queue(),
            at_device: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            tx: Mutex::new(tx),
        });
        // The "device": finishes reads in the order they were started, and starts the
        // waiting ones from its own thread, as a completion does.
        let device = {
            let d = Arc::clone(&d);
            std::thread::spawn(move || {
                let mut done: Vec<u32> = Vec::new();
                while done.len() < READS as usize {
                    let Ok(r) = rx.recv_timeout(std::time::Duration::from_secs(10)) else {
                        break;
                    };
                    d.at_device.fetch_sub(1, Ordering::SeqCst);
                    done.push(r);
                    d.q.finish(LIMIT, |n| start(&d, n));
                }
                done
            })
        };
        let readers: Vec<_> = (0..4u32)
            .map(|t| {
                let d = Arc::clone(&d);
                std::thread::spawn(move || {
                    for i in 0..READS / 4 {
                        assert!(d
                            .q
                            .submit(t * READS / 4 + i, LIMIT, |r| start(&d, r))
                            .is_ok());
                    }
                })
            })
            .collect();
        for r in readers {
            r.join().unwrap();
        }
        let mut done = device.join().unwrap();
        done.sort_unstable();
        assert_eq!(done, (0..READS).collect::<Vec<_>>(), "every read ran once");
        assert!(d.peak.load(Ordering::SeqCst) <= LIMIT);
        assert_eq!(gauges(&d.q).0, 0);
        assert_eq!(gauges(&d.q).1, 0);
    }
}
