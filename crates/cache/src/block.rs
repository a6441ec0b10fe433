//! [`block_on`]: drive a future to completion on the calling thread, for the synchronous
//! entry points (`get_now`, `set_now`, ...), `flush_all`'s settle and the write-back thread's
//! wait for room. A RAM hit completes at the first poll and allocates nothing here.
//!
//! # Threads
//! The caller's; it parks between polls and is unparked by the future's waker.
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

/// Drive a future to completion on this thread (the `*_now` methods).
pub(crate) fn block_on<F: Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }
    thread_local! {
        // One waker per thread, so a RAM hit (ready at the first poll) allocates nothing.
        static WAKER: Waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    }
    WAKER.with(|waker| {
        let mut cx = Context::from_waker(waker);
        let mut f = std::pin::pin!(f);
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
            std::thread::park();
        }
    })
}
