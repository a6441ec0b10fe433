//! Thread-per-core serving: `--threads` event-loop threads, each a current-thread tokio
//! runtime with its own epoll, its own flash IO lane (an io_uring of its own, see
//! `flashtier_flash::use_ring_lane`) and the task that reaps that ring. The accept loop hands
//! each new connection to the worker serving the fewest connections (the lowest-numbered
//! one on a tie, so a steady stream of connections goes round in turn); the connection stays
//! there for its life.
//!
//! Why not one work-stealing runtime: a perf profile of a low-rate open loop (24k ops/s, 16
//! connections, flash GETs) showed 7 % of the server's CPU in `futex` waits and another 5 % in
//! wake-ups: the two workers parked on and woke each other through futexes as events came
//! in, and flash completions reaped on one worker woke connection tasks queued on the other. Here an event,
//! the request it carries, the flash read it starts and that read's completion all stay on
//! one thread, as in memcached (one libevent loop per worker). The cost: a connection never
//! moves, so a few very busy connections can load one worker more than another (memcached
//! has the same trade). Numbers: docs/serving.md, "Thread per core".
//!
//! Invariants: flash reads a worker submits are deferred to the end of its loop's turn
//! (the `submit_deferred_each_turn` task, queued behind the tasks ready when the first read
//! was deferred; `on_thread_park` → `submit_deferred` before it sleeps; at most `FLUSH_AT`
//! waiting) and reaped by its own
//! reaper task; [`Workers::stop`] ends every loop (tasks still on it are dropped) and joins
//! the threads.
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use flashtier_cache::KvStore;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The serving threads (see the module docs).
pub struct Workers {
    handles: Vec<Handle>,
    /// Tasks each worker runs for [`Workers::spawn`] (connections), as they start and end.
    load: Arc<[AtomicUsize]>,
    /// Each worker thread's kernel thread id, once it runs (0 before): its scheduler
    /// statistics ([`schedstat`]) say how long it waited on the run queue.
    tids: Arc<[AtomicU64]>,
    stops: Vec<oneshot::Sender<()>>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    /// Start `n` (at least one) worker threads named `name-<i>`; worker `i` submits its flash
    /// IO on lane `i` and reaps that lane's completions (`store.flash_reaper(i)`, and the
    /// small tier's, `store.small_reaper(i)`).
    pub fn start<S: KvStore>(n: usize, name: &str, store: &S) -> std::io::Result<Self> {
        let mut w = Workers {
            handles: Vec::new(),
            load: (0..n.max(1)).map(|_| AtomicUsize::new(0)).collect(),
            tids: (0..n.max(1)).map(|_| AtomicU64::new(0)).collect(),
            stops: Vec::new(),
            threads: Vec::new(),
        };
        for i in 0..n.max(1) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                // Flash reads started in this turn enter the ring together, once.
                .on_thread_park(flashtier_cache::flash::submit_deferred)
                .build()?;
            w.handles.push(rt.handle().clone());
            let reaper = store.flash_reaper(i);
            let small_reaper = store.small_reaper(i);
            let (tx, rx) = oneshot::channel::<()>();
            w.stops.push(tx);
            let tids = Arc::clone(&w.tids);
            let spawned = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    if let Some(slot) = tids.get(i) {
                        slot.store(thread_id(), Ordering::Relaxed);
                    }
                    flashtier_cache::flash::use_ring_lane(i);
                    flashtier_cache::flash::defer_submissions_on_this_thread();
                    rt.block_on(async move {
                        let reaper = reaper.map(|h| tokio::spawn(reap_flash(h)));
                        // The small tier's page reads: same lane, its own ring.
                        let small_reaper = small_reaper.map(|h| tokio::spawn(reap_flash(h)));
                        let flusher =
                            tokio::spawn(flashtier_cache::flash::submit_deferred_each_turn());
                        // Ends at `stop` (or when the sender is dropped).
                        let _ = rx.await;
                        if let Some(r) = reaper {
                            r.abort();
                        }
                        if let Some(r) = small_reaper {
                            r.abort();
                        }
                        flusher.abort();
                    });
                    // Tasks still on this loop are dropped with it, on this thread.
                    drop(rt);
                    flashtier_cache::flash::submit_deferred();
                });
            match spawned {
                Ok(t) => w.threads.push(t),
                Err(e) => {
                    w.stop();
                    return Err(e);
                }
            }
        }
        Ok(w)
    }

    /// The live per-worker task counts (for stats).
    pub fn load_counters(&self) -> Arc<[AtomicUsize]> {
        Arc::clone(&self.load)
    }

    /// The worker threads' kernel thread ids (0 until a thread runs), for [`schedstat`].
    pub fn thread_ids(&self) -> Arc<[AtomicU64]> {
        Arc::clone(&self.tids)
    }

    /// Tasks (connections) each worker runs now.
    pub fn loads(&self) -> Vec<usize> {
        self.load
            .iter()
            .map(|l| l.load(Ordering::Relaxed))
            .collect()
    }

    /// The worker with the fewest tasks (the lowest-numbered on a tie). Called from the one
    /// accept loop, so the choice and the count's increment do not race each other.
    fn least_loaded(&self) -> usize {
        let mut best = 0;
        for (i, l) in self.load.iter().enumerate() {
            if l.load(Ordering::Relaxed) < self.load[best].load(Ordering::Relaxed) {
                best = i;
            }
        }
        best
    }

    /// Run `f` on the worker with the fewest tasks, counted there until `f` ends (or is
    /// dropped). Returns the task's future, for a `JoinSet` or to await.
    pub fn place<F>(&self, f: F) -> (&Handle, impl Future<Output = F::Output> + Send + 'static)
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let i = self.least_loaded();
        self.load[i].fetch_add(1, Ordering::Relaxed);
        let counted = Counted {
            load: Arc::clone(&self.load),
            i,
        };
        let fut = async move {
            let _counted = counted;
            f.await
        };
        (&self.handles[i], fut)
    }

    /// Run `f` on the worker with the fewest tasks (see [`Workers::place`]).
    pub fn spawn<F>(&self, f: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let (h, fut) = self.place(f);
        h.spawn(fut)
    }

    /// End every worker's loop and join its thread. Blocks: call it outside any runtime, or
    /// where blocking is allowed.
    pub fn stop(&mut self) {
        for s in self.stops.drain(..) {
            let _ = s.send(());
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Counts a task against its worker until dropped.
struct Counted {
    load: Arc<[AtomicUsize]>,
    i: usize,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.load[self.i].fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Reap flash IO completions whenever the ring's eventfd turns readable, on the thread that
/// runs this task (the connection tasks it wakes are on the same loop when the ring is this
/// worker's own). If the fd cannot be registered the engine's own thread keeps reaping.
#[allow(unsafe_code)]
pub(crate) async fn reap_flash(handle: flashtier_cache::flash::ReapHandle) {
    // SAFETY: the handle owns its descriptor (a dup of the ring's eventfd) and neither
    // closes nor replaces it while it is registered: it is only dropped with the AsyncFd.
    let registered = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(handle, tokio::io::Interest::READABLE)
    };
    let fd = match registered {
        Ok(fd) => fd,
        Err(e) => {
            log::warn!("flash completions stay on the engine thread: {e}");
            return;
        }
    };
    loop {
        let Ok(mut ready) = fd.readable().await else {
            return;
        };
        // Clear first, then reap: a completion posted after the clear raises a new edge
        // (tokio's readiness is edge-triggered; the eventfd is never drained, see
        // `reap_undrained`), one posted before it is reaped now.
        ready.clear_ready();
        fd.get_ref().reap_undrained();
    }
}

/// The calling thread's kernel thread id, from `/proc/thread-self` (0 if unreadable).
fn thread_id() -> u64 {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse().ok())
        .unwrap_or(0)
}

/// A thread's scheduler statistics (`/proc/self/task/TID/schedstat`): nanoseconds on a CPU,
/// nanoseconds runnable but waiting on a run queue, and times it was scheduled in. `None`
/// for an unknown thread or a kernel without schedstats.
pub fn schedstat(tid: u64) -> Option<(u64, u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    let mut it = s.split_whitespace().map(|f| f.parse::<u64>().ok());
    Some((it.next()??, it.next()??, it.next()??))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashtier_cache::{Clock, ModelStore};

    #[test]
    fn connections_go_to_the_least_busy_worker_and_are_counted_until_they_end() {
        let store = ModelStore::new(Clock::system(), 1024);
        let mut w = Workers::start(3, "test-worker", &store).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (txs, handles): (Vec<_>, Vec<_>) = (0..4)
            .map(|_| {
                let (tx, rx) = oneshot::channel::<()>();
                (tx, w.spawn(async move { rx.await.is_ok() }))
            })
            .unzip();
        // In turn while all are equal: 0, 1, 2, then 0 again.
        assert_eq!(w.loads(), [2, 1, 1]);
        let mut txs: Vec<Option<oneshot::Sender<()>>> = txs.into_iter().map(Some).collect();
        // End the second task (on worker 1) and the third (worker 2)...
        for i in [1, 2] {
            txs[i].take().unwrap().send(()).unwrap();
        }
        rt.block_on(async {
            for h in handles.into_iter().skip(1).take(2) {
                assert!(h.await.unwrap());
            }
        });
        assert_eq!(w.loads(), [2, 0, 0]);
        // ...and the next two go there, not to worker 0.
        let (tx5, rx5) = oneshot::channel::<()>();
        let (tx6, rx6) = oneshot::channel::<()>();
        let h5 = w.spawn(async move { rx5.await.is_ok() });
        let h6 = w.spawn(async move { rx6.await.is_ok() });
        assert_eq!(w.loads(), [2, 1, 1]);
        drop((tx5, tx6));
        rt.block_on(async {
            assert!(!h5.await.unwrap() && !h6.await.unwrap());
        });
        assert_eq!(w.loads(), [2, 0, 0]);
        drop(txs);
        w.stop();
        assert_eq!(w.loads(), [0, 0, 0], "tasks dropped at stop are uncounted");
    }
}
