//! Batched submission: while the current thread is *plugged*, flash reads it submits are
//! queued in the ring and handed to the kernel later in one `io_uring_enter` (one device
//! doorbell per batch instead of one per read). [`batch_submissions`] plugs for each
//! synchronous poll of one future (a connection's turn); [`defer_submissions_on_this_thread`]
//! plugs an event-loop thread for good, its IO entering at the end of the loop's turn
//! ([`submit_deferred_each_turn`], a task that runs after the tasks ready when the first read
//! was deferred), when the loop is about to sleep ([`submit_deferred`], e.g. from tokio's
//! `on_thread_park`), or at [`FLUSH_AT`] waiting.
//!
//! Why a task and not only the park hook: a busy loop does not park. tokio's current-thread
//! scheduler polls for IO every few dozen tasks without calling `on_thread_park`, so under
//! steady load a deferred read could wait for the first idle moment, bounded only by the
//! ring thread's 10 ms backstop (`uring::BACKSTOP`). The flusher task is queued behind the tasks already ready, so a
//! read waits at most one pass over them and still shares its enter with theirs.
//!
//! Invariants: the plug is per thread; a deferred enter is never lost: the outermost
//! [`batch_submissions`] poll of an unplugged thread, [`submit_deferred`], the [`FLUSH_AT`]
//! bound, or at worst the ring thread's backstop hands it to the kernel. The plug holds rings
//! only as [`Enter`] (one virtual call per deferred enter), so it imports nothing of `uring`.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;
use std::task::{Poll, Waker};

/// Deferred requests on a thread-plugged event loop that trigger an enter at once.
pub const FLUSH_AT: u32 = 32;

/// A ring whose enter a plug can defer: what the plug keeps of each ring its thread deferred
/// IO on (`uring::Ring` implements it; the plug knows nothing else of rings).
pub(crate) trait Enter: Send + Sync {
    /// Hand the ring's queued submissions to the kernel.
    fn enter(&self);
}

#[derive(Default)]
struct Plug {
    depth: u32,
    /// Plugged for good (an event-loop thread).
    sticky: bool,
    /// Requests deferred since the last enter.
    waiting: u32,
    rings: Vec<Arc<dyn Enter>>,
    /// The thread's [`submit_deferred_each_turn`] task, woken by the first deferral.
    flusher: Option<Waker>,
}

thread_local! {
    static PLUG: RefCell<Plug> = RefCell::new(Plug::default());
}

/// Called by a submitter: true if the current thread is plugged and `ring`'s enter was
/// deferred; false if the caller must enter now.
pub(crate) fn defer<R: Enter + 'static>(ring: &Arc<R>) -> bool {
    let (deferred, flusher) = PLUG.with(|p| {
        let mut p = p.borrow_mut();
        if p.depth == 0 && !p.sticky {
            return (false, None);
        }
        if p.waiting >= FLUSH_AT {
            p.waiting = 0;
            return (false, None);
        }
        p.waiting += 1;
        if !p
            .rings
            .iter()
            .any(|r| std::ptr::addr_eq(Arc::as_ptr(r), Arc::as_ptr(ring)))
        {
            p.rings.push(Arc::clone(ring) as Arc<dyn Enter>);
        }
        // A loop plugged for good enters at the end of the turn (a plug that is not sticky
        // enters when its outermost `batch_submissions` poll ends).
        let first = p.waiting == 1 && p.sticky;
        (true, if first { p.flusher.take() } else { None })
    });
    // Woken with no borrow held: waking may poll nothing now, but be safe.
    if let Some(w) = flusher {
        w.wake();
    }
    deferred
}

/// Enter every ring this thread deferred IO on. Call it when an event-loop thread is about
/// to sleep (tokio: `Builder::on_thread_park`).
pub fn submit_deferred() {
    let rings = PLUG.with(|p| {
        let mut p = p.borrow_mut();
        p.waiting = 0;
        std::mem::take(&mut p.rings)
    });
    for r in rings {
        r.enter();
    }
}

/// Plug the current thread for good: its IO enters at [`submit_deferred`] (or every
/// [`FLUSH_AT`] requests). Only for a thread that calls [`submit_deferred`] before it sleeps
/// (tokio: `on_thread_start` + `on_thread_park`) and, on a loop that may stay busy, runs
/// [`submit_deferred_each_turn`].
pub fn defer_submissions_on_this_thread() {
    PLUG.with(|p| p.borrow_mut().sticky = true);
}

/// Run on a plugged event loop (spawned on it, never completes): whenever a read is deferred
/// on an idle plug, this task is woken, runs after the tasks already queued on the loop, and
/// enters what they deferred, once (see the module docs). On a loop whose scheduler is not
/// FIFO it still bounds the wait, only less tightly.
pub async fn submit_deferred_each_turn() {
    std::future::poll_fn(|cx| {
        submit_deferred();
        PLUG.with(|p| p.borrow_mut().flusher = Some(cx.waker().clone()));
        Poll::<()>::Pending
    })
    .await
}

struct Guard;

impl Guard {
    fn new() -> Self {
        PLUG.with(|p| p.borrow_mut().depth += 1);
        Guard
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let done = PLUG.with(|p| {
            let mut p = p.borrow_mut();
            p.depth -= 1;
            p.depth == 0 && !p.sticky
        });
        if done {
            submit_deferred();
        }
    }
}

/// Run `f` with flash submissions batched per poll (see the module docs).
pub async fn batch_submissions<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    std::future::poll_fn(|cx| {
        let _plug = Guard::new();
        f.as_mut().poll(cx)
    })
    .await
}
