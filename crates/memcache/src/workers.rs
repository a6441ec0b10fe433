//! Thread-per-core serving: `--threads` event-loop threads, each a current-thread tokio
//! runtime with its own epoll, its own flash IO lane (an io_uring of its own, see
//! `flashtier_flash::use_ring_lane`) and the task that reaps that ring. The accept loop hands
//! each new connection to the next worker in turn; the connection stays there for its life.
//!
//! Why not one work-stealing runtime: a perf profile of a low-rate open loop (24k ops/s, 16
//! connections, flash GETs) showed 7 % of the server's CPU in `futex` waits and another 5 % in
//! wake-ups: the worker holding the IO driver woke a parked one for every event, and flash
//! completions reaped on one worker woke connection tasks queued on the other. Here an event,
//! the request it carries, the flash read it starts and that read's completion all stay on
//! one thread, as in memcached (one libevent loop per worker). The cost: a connection never
//! moves, so a few very busy connections can load one worker more than another (memcached
//! has the same trade). Numbers: docs/serving.md, "Thread per core".
//!
//! Invariants: flash reads a worker submits are deferred to the end of its loop's turn
//! (`on_thread_park` → `submit_deferred`, at most `FLUSH_AT` waiting) and reaped by its own
//! reaper task; [`Workers::stop`] ends every loop (tasks still on it are dropped) and joins
//! the threads.
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;

use flashtier_cache::KvStore;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The serving threads (see the module docs).
pub struct Workers {
    handles: Vec<Handle>,
    next: AtomicUsize,
    stops: Vec<oneshot::Sender<()>>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    /// Start `n` (at least one) worker threads named `name-<i>`; worker `i` submits its flash
    /// IO on lane `i` and reaps that lane's completions (`store.flash_reaper(i)`).
    pub fn start<S: KvStore>(n: usize, name: &str, store: &S) -> std::io::Result<Self> {
        let mut w = Workers {
            handles: Vec::new(),
            next: AtomicUsize::new(0),
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
            let (tx, rx) = oneshot::channel::<()>();
            w.stops.push(tx);
            let spawned = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    flashtier_cache::flash::use_ring_lane(i);
                    flashtier_cache::flash::defer_submissions_on_this_thread();
                    rt.block_on(async move {
                        let reaper = reaper.map(|h| tokio::spawn(reap_flash(h)));
                        // Ends at `stop` (or when the sender is dropped).
                        let _ = rx.await;
                        if let Some(r) = reaper {
                            r.abort();
                        }
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

    /// How many worker threads serve.
    pub fn len(&self) -> usize {
        self.handles.len()
    }

    /// Always false (at least one worker runs); for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    /// The worker the next connection goes to (round robin).
    pub fn next_handle(&self) -> &Handle {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        &self.handles[i]
    }

    /// Run `f` on the next worker.
    pub fn spawn<F>(&self, f: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.next_handle().spawn(f)
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
        fd.get_ref().reap();
        ready.clear_ready();
    }
}
