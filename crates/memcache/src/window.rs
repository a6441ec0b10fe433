//! A connection's window of plain reads in flight ([`ReadWindow`]): the reads a client sent
//! one after another run together, and each reply goes out as soon as it and every reply
//! before it are ready, while the connection keeps reading the socket.
//!
//! Why: a connection used to run only the reads already in its read buffer together and
//! read the socket again only once all of them had replied. A client that sends one request
//! per packet (a thread per connection, memaslap, most libraries at low load) thus had one
//! flash read at a time per connection: its throughput was one request per device read, and
//! under load its requests queued in the socket (issue 30: 16 such connections at 30k
//! GETs/s saw `socket_wait` p90 ≥ 0.5 s while the device did 8k reads/s at p50 2.5 ms).
//!
//! A write on named keys joins too when no running request in the window touches its keys
//! ([`ReadWindow::conflicts`], [`crate::access`]): it runs at once instead of waiting for
//! the slowest read ahead of it, and its reply still leaves in order.
//!
//! Invariants: replies leave in request order ([`ReadWindow::poll_front`] moves only a
//! finished *front*); at most `limit` requests run at once, so a connection holds at most
//! `limit` reply buffers; a request enters only if it touches no key a running request in
//! the window writes, nor writes a key one touches, so a read after a write still sees it
//! and a write after a read does not change what that read returns; the connection runs a
//! request on no named key (`flush_all`, `stats`, ...) only once the window is empty.
//!
//! Threads: the connection's task only (futures are polled from it).
use std::collections::VecDeque;
use std::task::{Context, Poll};

use crate::access::Access;
use crate::join::BoxFuture;
use crate::output::Output;

/// One request in the window: running, or finished with its reply held until its turn.
struct Slot<'a> {
    run: Option<BoxFuture<'a, Output>>,
    reply: Option<Output>,
    /// What it touches (compared only while it runs: a finished one changes nothing more).
    access: Access,
}

/// The requests of one connection in flight (plain reads, and writes beside them), oldest
/// first.
pub struct ReadWindow<'a> {
    slots: VecDeque<Slot<'a>>,
    limit: usize,
}

impl<'a> ReadWindow<'a> {
    /// A window of at most `limit` reads (at least one).
    pub fn new(limit: usize) -> Self {
        Self {
            slots: VecDeque::new(),
            limit: limit.max(1),
        }
    }

    /// No read in flight or waiting for its turn.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Reads in the window.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// The window holds `limit` reads: the next one waits.
    pub fn is_full(&self) -> bool {
        self.slots.len() >= self.limit
    }

    /// A running request touches what `access` writes, or writes what it touches: the
    /// request must wait.
    pub fn conflicts(&self, access: &Access) -> bool {
        self.slots
            .iter()
            .any(|s| s.run.is_some() && s.access.conflicts(access))
    }

    /// Add a request behind the others (the caller checks [`Self::is_full`] and
    /// [`Self::conflicts`] first).
    pub fn push(&mut self, run: BoxFuture<'a, Output>, access: Access) {
        self.slots.push_back(Slot {
            run: Some(run),
            reply: None,
            access,
        });
    }

    /// Poll every running read once; then move the replies of the finished reads at the
    /// front to `out`, in order. Returns how many replies moved.
    pub fn poll_front(&mut self, cx: &mut Context<'_>, out: &mut Output) -> usize {
        for slot in &mut self.slots {
            if let Some(run) = slot.run.as_mut() {
                if let Poll::Ready(reply) = run.as_mut().poll(cx) {
                    slot.reply = Some(reply);
                    slot.run = None;
                }
            }
        }
        let mut moved = 0;
        while self.slots.front().is_some_and(|s| s.reply.is_some()) {
            if let Some(reply) = self.slots.pop_front().and_then(|s| s.reply) {
                out.append(reply);
                moved += 1;
            }
        }
        moved
    }

    /// Poll once without waiting (registering the task for wake-ups); see
    /// [`Self::poll_front`].
    pub async fn collect(&mut self, out: &mut Output) -> usize {
        std::future::poll_fn(|cx| Poll::Ready(self.poll_front(cx, out))).await
    }

    /// Wait until at least one reply moved to `out` (at once, with 0, when empty).
    pub async fn next(&mut self, out: &mut Output) -> usize {
        std::future::poll_fn(|cx| {
            if self.slots.is_empty() {
                return Poll::Ready(0);
            }
            match self.poll_front(cx, out) {
                0 => Poll::Pending,
                n => Poll::Ready(n),
            }
        })
        .await
    }

    /// Wait for every read in the window, moving all replies to `out` in order.
    pub async fn finish(&mut self, out: &mut Output) {
        while !self.slots.is_empty() {
            self.next(out).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::Keys;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    fn reply(s: &str) -> Output {
        let mut o = Output::new();
        crate::reply::line(&mut o, s.as_bytes());
        o
    }

    /// A read that finishes once `gate` is set (waking is not needed: tests poll by hand).
    fn gated(gate: Arc<AtomicBool>, s: &'static str) -> BoxFuture<'static, Output> {
        Box::pin(std::future::poll_fn(move |_| {
            if gate.load(Ordering::SeqCst) {
                Poll::Ready(reply(s))
            } else {
                Poll::Pending
            }
        }))
    }

    fn read(key: u64) -> Access {
        Access {
            keys: Keys::One(key),
            write: false,
        }
    }

    fn write(key: u64) -> Access {
        Access {
            keys: Keys::One(key),
            write: true,
        }
    }

    fn poll(w: &mut ReadWindow<'_>, out: &mut Output) -> usize {
        let waker = std::task::Waker::noop();
        w.poll_front(&mut Context::from_waker(waker), out)
    }

    #[test]
    fn replies_leave_in_order_as_soon_as_the_front_is_done() {
        let (a, b, c) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let mut w = ReadWindow::new(3);
        w.push(gated(a.clone(), "A"), read(1));
        w.push(gated(b.clone(), "B"), read(2));
        assert!(!w.is_full());
        w.push(gated(c.clone(), "C"), read(3));
        assert!(w.is_full());
        let mut out = Output::new();
        // B finished first: it waits for A.
        b.store(true, Ordering::SeqCst);
        assert_eq!(poll(&mut w, &mut out), 0);
        assert!(out.is_empty());
        a.store(true, Ordering::SeqCst);
        assert_eq!(poll(&mut w, &mut out), 2);
        assert_eq!(out.to_vec(), b"A\r\nB\r\n");
        assert_eq!(w.len(), 1);
        c.store(true, Ordering::SeqCst);
        assert_eq!(poll(&mut w, &mut out), 1);
        assert_eq!(out.to_vec(), b"A\r\nB\r\nC\r\n");
        assert!(w.is_empty());
    }

    #[test]
    fn finish_waits_for_every_read() {
        let gate = Arc::new(AtomicBool::new(true));
        let mut w = ReadWindow::new(0);
        assert!(!w.is_full());
        w.push(gated(gate.clone(), "x"), read(1));
        assert!(w.is_full(), "a window holds at least one read");
        let mut out = Output::new();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(w.finish(&mut out));
        assert_eq!(out.to_vec(), b"x\r\n");
        assert_eq!(rt.block_on(w.next(&mut out)), 0);
    }

    #[test]
    fn only_a_running_request_on_the_same_key_holds_a_write_back() {
        let (a, b) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let mut w = ReadWindow::new(4);
        w.push(gated(a.clone(), "A"), read(1));
        assert!(!w.conflicts(&read(1)), "reads share a key");
        assert!(w.conflicts(&write(1)));
        assert!(!w.conflicts(&write(2)));
        w.push(gated(b.clone(), "B"), write(2));
        assert!(w.conflicts(&read(2)), "a read waits for a running write");
        // B finished (its reply held behind A's): it changes nothing more.
        b.store(true, Ordering::SeqCst);
        let mut out = Output::new();
        assert_eq!(poll(&mut w, &mut out), 0);
        assert!(!w.conflicts(&read(2)));
        assert!(w.conflicts(&write(1)));
        a.store(true, Ordering::SeqCst);
        assert_eq!(poll(&mut w, &mut out), 2);
        assert_eq!(out.to_vec(), b"A\r\nB\r\n");
        assert!(!w.conflicts(&write(1)));
    }
}
