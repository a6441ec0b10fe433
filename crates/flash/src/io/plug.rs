//! Batched submission: while the current thread is *plugged*, flash reads it submits are
//! queued in the ring and handed to the kernel later in one `io_uring_enter` (one device
//! doorbell per batch instead of one per read). [`batch_submissions`] plugs for each
//! synchronous poll of one future (a connection's turn); [`defer_submissions_on_this_thread`]
//! plugs an event-loop thread for good, its IO entering when the loop is about to sleep
//! ([`submit_deferred`], e.g. from tokio's `on_thread_park`) or at [`FLUSH_AT`] waiting.
//!
//! Invariants: the plug is per thread; a deferred enter is never lost: the outermost
//! [`batch_submissions`] poll of an unplugged thread, [`submit_deferred`], the [`FLUSH_AT`]
//! bound, or at worst the ring thread's backstop hands it to the kernel.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;

use super::uring::Ring;

/// Deferred requests on a thread-plugged event loop that trigger an enter at once.
pub const FLUSH_AT: u32 = 32;

#[derive(Default)]
struct Plug {
    depth: u32,
    /// Plugged for good (an event-loop thread).
    sticky: bool,
    /// Requests deferred since the last enter.
    waiting: u32,
    rings: Vec<Arc<Ring>>,
}

thread_local! {
    static PLUG: RefCell<Plug> = RefCell::new(Plug::default());
}

/// Called by a submitter: true if the current thread is plugged and `ring`'s enter was
/// deferred; false if the caller must enter now.
pub(crate) fn defer(ring: &Arc<Ring>) -> bool {
    PLUG.with(|p| {
        let mut p = p.borrow_mut();
        if p.depth == 0 && !p.sticky {
            return false;
        }
        if p.waiting >= FLUSH_AT {
            p.waiting = 0;
            return false;
        }
        p.waiting += 1;
        if !p.rings.iter().any(|r| Arc::ptr_eq(r, ring)) {
            p.rings.push(Arc::clone(ring));
        }
        true
    })
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
/// (tokio: `on_thread_start` + `on_thread_park`).
pub fn defer_submissions_on_this_thread() {
    PLUG.with(|p| p.borrow_mut().sticky = true);
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
