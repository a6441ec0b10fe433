//! Await many futures with at most `window` of them running, keeping their results in order.
//!
//! Used wherever independent store reads should overlap on flash: the keys of one multi-key
//! get ([`crate::command::retrieval`], window [`crate::command::retrieval::FETCH_WINDOW`]) and
//! a run of pipelined read requests on one connection ([`crate::connection`], all of its at
//! most [`crate::connection::READ_WINDOW`]).
//!
//! Why a window and per-future wakers: a lookup of a flash item holds a device read or waits
//! for one in the engine's read queue, so the window bounds what one request can park there
//! (the engine starts waiting reads in arrival order, so a 10,000-key get would otherwise
//! queue ahead of every other client). Each running future gets its own waker, which queues
//! its slot: a wake-up polls the futures that were woken and those started into freed slots,
//! so n futures cost O(n) polls, where polling every unfinished one on each wake cost O(n²).
//!
//! Invariants: at most `window` futures exist at once (the next is taken from the iterator
//! only when one finishes); outputs are in input order. Runs inside the caller's task.
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

/// A boxed future that may be polled from any worker thread.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Futures made one at a time as a window slot frees. Boxed so that no closure type is held
/// across the await (rustc cannot prove such a future `Send` for every lifetime).
pub type FutureIter<'a, T> = Box<dyn Iterator<Item = BoxFuture<'a, T>> + Send + 'a>;

/// Run the futures of `futures` to completion, at most `window` (at least 1) at a time, in
/// input order as slots free; returns the outputs in input order.
pub async fn join_window<'a, T>(futures: FutureIter<'a, T>, window: usize) -> Vec<T> {
    let mut set = Window::new(futures, window.max(1));
    std::future::poll_fn(|cx| set.poll(cx)).await;
    set.results.into_iter().flatten().collect()
}

/// The running futures of one [`join_window`].
struct Window<'a, T, I> {
    pending: I,
    /// Nothing left in `pending`.
    exhausted: bool,
    window: usize,
    /// Slot `s` runs `slots[s].fut` under waker `slots[s].waker`; freed slots are reused.
    slots: Vec<Slot<'a, T>>,
    free: Vec<usize>,
    running: usize,
    /// Output of the i-th future, once it finished.
    results: Vec<Option<T>>,
    woken: Arc<Woken>,
}

struct Slot<'a, T> {
    /// The future and its input position; `None` while the slot is free.
    fut: Option<(usize, BoxFuture<'a, T>)>,
    waker: Waker,
    flag: Arc<SlotWaker>,
}

/// Slots woken since the owner last looked, and the owner task's waker.
#[derive(Default)]
struct Woken {
    inner: Mutex<WokenInner>,
}

#[derive(Default)]
struct WokenInner {
    slots: Vec<usize>,
    owner: Option<Waker>,
}

struct SlotWaker {
    slot: usize,
    /// Already in `Woken::slots` (a second wake before the poll adds nothing).
    queued: AtomicBool,
    woken: Arc<Woken>,
}

impl Wake for SlotWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let owner = {
            let mut w = self
                .woken
                .inner
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            w.slots.push(self.slot);
            // Only the first wake since the owner last took the list needs to wake it.
            if w.slots.len() == 1 {
                w.owner.clone()
            } else {
                None
            }
        };
        if let Some(owner) = owner {
            owner.wake();
        }
    }
}

impl<'a, T, I: Iterator<Item = BoxFuture<'a, T>>> Window<'a, T, I> {
    fn new(pending: I, window: usize) -> Self {
        Self {
            pending,
            exhausted: false,
            window,
            slots: Vec::new(),
            free: Vec::new(),
            running: 0,
            results: Vec::new(),
            woken: Arc::default(),
        }
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut to_poll = {
            let mut w = self
                .woken
                .inner
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if !w.owner.as_ref().is_some_and(|o| o.will_wake(cx.waker())) {
                w.owner = Some(cx.waker().clone());
            }
            std::mem::take(&mut w.slots)
        };
        loop {
            self.start_into_free_slots(&mut to_poll);
            if to_poll.is_empty() {
                break;
            }
            let mut finished = false;
            for s in to_poll.drain(..) {
                finished |= self.poll_slot(s);
            }
            // Go round again only to fill the slots that freed; futures woken meanwhile have
            // woken this task and wait for its next poll (no future can keep this loop busy).
            if !finished || self.exhausted {
                break;
            }
        }
        if self.running == 0 && self.exhausted {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Take futures from `pending` into free slots up to the window; note their slots.
    fn start_into_free_slots(&mut self, to_poll: &mut Vec<usize>) {
        while self.running < self.window && !self.exhausted {
            let Some(fut) = self.pending.next() else {
                self.exhausted = true;
                break;
            };
            let index = self.results.len();
            self.results.push(None);
            let s = match self.free.pop() {
                Some(s) => s,
                None => {
                    let flag = Arc::new(SlotWaker {
                        slot: self.slots.len(),
                        queued: AtomicBool::new(false),
                        woken: Arc::clone(&self.woken),
                    });
                    self.slots.push(Slot {
                        fut: None,
                        waker: Waker::from(Arc::clone(&flag)),
                        flag,
                    });
                    self.slots.len() - 1
                }
            };
            if let Some(slot) = self.slots.get_mut(s) {
                slot.fut = Some((index, fut));
                self.running += 1;
                to_poll.push(s);
            }
        }
    }

    /// Poll slot `s` once (nothing if it is free: a late wake); true if its future finished.
    fn poll_slot(&mut self, s: usize) -> bool {
        let Some(slot) = self.slots.get_mut(s) else {
            return false;
        };
        // Cleared before the poll, and also for a free slot (or the next future in it could
        // never be queued again): a wake during the poll queues the slot again.
        slot.flag.queued.store(false, Ordering::Release);
        let Some((index, fut)) = slot.fut.as_mut() else {
            return false;
        };
        let mut scx = Context::from_waker(&slot.waker);
        let Poll::Ready(out) = fut.as_mut().poll(&mut scx) else {
            return false;
        };
        if let Some(r) = self.results.get_mut(*index) {
            *r = Some(out);
        }
        slot.fut = None;
        self.free.push(s);
        self.running -= 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime")
    }

    #[test]
    fn keeps_order_and_overlaps() {
        // The first future can only finish after the second has run: awaited one after the
        // other they would never complete.
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let first: BoxFuture<'_, u32> = Box::pin(async move { rx.await.unwrap_or(0) + 1 });
        let second: BoxFuture<'_, u32> = Box::pin(async move {
            let _ = tx.send(41);
            7
        });
        let out = runtime().block_on(async {
            tokio::time::timeout(
                std::time::Duration::from_secs(10),
                join_window(Box::new(vec![first, second].into_iter()), 2),
            )
            .await
        });
        assert_eq!(out.ok(), Some(vec![42, 7]));
    }

    #[test]
    fn never_more_than_the_window_and_results_in_order() {
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let futs = (0..1000u32).map(|i| -> BoxFuture<'_, u32> {
            let (running, peak) = (Arc::clone(&running), Arc::clone(&peak));
            Box::pin(async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                for _ in 0..i % 4 {
                    tokio::task::yield_now().await;
                }
                running.fetch_sub(1, Ordering::SeqCst);
                i * 2
            })
        });
        let out = runtime().block_on(join_window(Box::new(futs), 64));
        assert_eq!(out, (0..1000).map(|i| i * 2).collect::<Vec<_>>());
        assert_eq!(peak.load(Ordering::SeqCst), 64);
    }

    /// A future that finishes on its `n`-th poll, counting every poll.
    struct Polls {
        left: u32,
        polls: Arc<AtomicUsize>,
        waker: Arc<Mutex<Vec<Waker>>>,
    }

    impl Future for Polls {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.left == 0 {
                return Poll::Ready(());
            }
            self.left -= 1;
            if let Ok(mut w) = self.waker.lock() {
                w.push(cx.waker().clone());
            }
            Poll::Pending
        }
    }

    #[test]
    fn a_wake_polls_only_the_woken_future() {
        // 10,000 futures, each waiting once for an outside wake (a flash read): woken one at a
        // time, each wake-up polls one future (and starts the next), not every one pending.
        const N: usize = 10_000;
        let polls = Arc::new(AtomicUsize::new(0));
        let wakers = Arc::new(Mutex::new(Vec::new()));
        let futs = (0..N).map(|_| -> BoxFuture<'_, ()> {
            Box::pin(Polls {
                left: 1,
                polls: Arc::clone(&polls),
                waker: Arc::clone(&wakers),
            })
        });
        let mut join = Box::pin(join_window(Box::new(futs), N));
        let owner = Waker::from(Arc::new(Noop));
        let mut cx = Context::from_waker(&owner);
        assert!(join.as_mut().poll(&mut cx).is_pending());
        assert_eq!(
            polls.load(Ordering::SeqCst),
            N,
            "each started and polled once"
        );
        let woken: Vec<Waker> = wakers.lock().map(|mut w| w.drain(..).collect()).unwrap();
        let mut done = false;
        for w in woken {
            w.wake();
            done = join.as_mut().poll(&mut cx).is_ready();
        }
        assert!(done);
        assert_eq!(
            polls.load(Ordering::SeqCst),
            2 * N,
            "one more poll each, no more"
        );
    }

    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
}
