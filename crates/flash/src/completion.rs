//! A one-shot completion: the engine's futures.
//!
//! The producer side ([`Promise`]) is completed where the IO is reaped; the consumer
//! ([`Completion`]) is either awaited (any executor: tokio, a hand-rolled loop) or waited on
//! with [`Completion::wait`] from a plain thread (tests, recovery, the reclaimer). Dropping a
//! `Promise` without completing it completes the consumer with [`Error::Closed`].
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};

struct Slot<T> {
    value: Option<Result<T>>,
    waker: Option<Waker>,
    done: bool,
}

struct Shared<T> {
    slot: Mutex<Slot<T>>,
    cond: Condvar,
}

/// The producer half.
pub struct Promise<T> {
    shared: Option<Arc<Shared<T>>>,
}

/// The consumer half: a future of `Result<T>`.
#[must_use = "a Completion does nothing unless awaited or waited on"]
pub struct Completion<T> {
    shared: Arc<Shared<T>>,
}

/// A connected promise/completion pair.
pub fn pair<T>() -> (Promise<T>, Completion<T>) {
    let shared = Arc::new(Shared {
        slot: Mutex::new(Slot {
            value: None,
            waker: None,
            done: false,
        }),
        cond: Condvar::new(),
    });
    (
        Promise {
            shared: Some(Arc::clone(&shared)),
        },
        Completion { shared },
    )
}

impl<T> Promise<T> {
    /// Complete with `v`, waking the consumer.
    pub fn complete(mut self, v: Result<T>) {
        self.finish(v);
    }

    fn finish(&mut self, v: Result<T>) {
        let Some(shared) = self.shared.take() else {
            return;
        };
        let waker = {
            let mut s = shared.slot.lock();
            s.value = Some(v);
            s.done = true;
            s.waker.take()
        };
        shared.cond.notify_all();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Drop for Promise<T> {
    fn drop(&mut self) {
        self.finish(Err(Error::Closed));
    }
}

impl<T> Completion<T> {
    /// A completion that is already done.
    pub fn ready(v: Result<T>) -> Self {
        let (p, c) = pair();
        p.complete(v);
        c
    }

    /// Block the calling thread until the result arrives. Never call from an async task.
    pub fn wait(self) -> Result<T> {
        let mut s = self.shared.slot.lock();
        while !s.done {
            self.shared.cond.wait(&mut s);
        }
        s.value.take().unwrap_or(Err(Error::Closed))
    }

    /// True once the result is available.
    pub fn is_ready(&self) -> bool {
        self.shared.slot.lock().done
    }
}

impl<T> Future for Completion<T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let mut s = self.shared.slot.lock();
        if s.done {
            return Poll::Ready(s.value.take().unwrap_or(Err(Error::Closed)));
        }
        match &s.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => s.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_from_another_thread_and_drop() {
        let (p, c) = pair::<u32>();
        std::thread::spawn(move || p.complete(Ok(5)));
        assert_eq!(c.wait().unwrap(), 5);
        let (p, c) = pair::<u32>();
        drop(p);
        assert!(matches!(c.wait(), Err(Error::Closed)));
        assert_eq!(Completion::ready(Ok(1u8)).wait().unwrap(), 1);
    }

    #[test]
    fn polled_as_a_future_wakes_the_task() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::task::Wake;

        struct Count(AtomicUsize);
        impl Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        let (p, mut c) = pair::<&'static str>();
        assert!(Pin::new(&mut c).poll(&mut cx).is_pending());
        std::thread::spawn(move || p.complete(Ok("done")))
            .join()
            .unwrap();
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "completion woke the task"
        );
        match Pin::new(&mut c).poll(&mut cx) {
            Poll::Ready(Ok(v)) => assert_eq!(v, "done"),
            other => panic!("not ready: {other:?}"),
        }
    }
}
