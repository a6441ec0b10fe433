//! Batched submission: inside [`batch_submissions`], flash IO submitted by the current thread
//! is queued in the ring but handed to the kernel only when the wrapped future's poll
//! returns — one `io_uring_enter` for every read a connection's batch of requests started.
//!
//! Invariants: the plug is per thread and lives only for one synchronous `poll` of the
//! wrapped future (a future moved to another thread between polls is never left plugged);
//! when the outermost plug ends, every ring that deferred an enter is entered, so no SQE is
//! left waiting for a later event.
use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;

use super::uring::Ring;

#[derive(Default)]
struct Plug {
    depth: u32,
    rings: Vec<Arc<Ring>>,
}

thread_local! {
    static PLUG: RefCell<Plug> = RefCell::new(Plug::default());
}

/// Called by a submitter: true if the current thread is plugged and `ring`'s enter was
/// deferred to the end of the plug.
pub(crate) fn defer(ring: &Arc<Ring>) -> bool {
    PLUG.with(|p| {
        let mut p = p.borrow_mut();
        if p.depth == 0 {
            return false;
        }
        if !p.rings.iter().any(|r| Arc::ptr_eq(r, ring)) {
            p.rings.push(Arc::clone(ring));
        }
        true
    })
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
        let rings = PLUG.with(|p| {
            let mut p = p.borrow_mut();
            p.depth -= 1;
            if p.depth == 0 {
                std::mem::take(&mut p.rings)
            } else {
                Vec::new()
            }
        });
        for r in rings {
            r.enter();
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
