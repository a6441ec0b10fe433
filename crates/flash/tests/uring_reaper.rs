//! The io_uring executor driven the way the kv server drives it: reads submitted in batches
//! (a plugged poll, a plugged thread) and completions reaped by the caller's own loop through
//! a `ReapHandle`. Every read completes with the right record, and dropping the handle hands
//! reaping back to the ring thread. Files live under /var/tmp (O_DIRECT); a machine without
//! O_DIRECT or io_uring makes the test say so loudly and return.
mod common;

use std::future::Future;
use std::path::PathBuf;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use common::reap::{check, drive, fill, read_on_lane, readable};
use flashtier_flash::{
    batch_submissions, defer_submissions_on_this_thread, submit_deferred_each_turn, DropAll, Error,
    Flash, FlashConfig, IoBackend,
};

fn open(name: &str) -> Option<(Flash, PathBuf)> {
    open_with_rings(name, 1)
}

fn open_with_rings(name: &str, rings: usize) -> Option<(Flash, PathBuf)> {
    let p = common::disk_file(name);
    let _ = std::fs::remove_file(&p);
    let spec = common::file_spec(&p, 8 << 20);
    let cfg = FlashConfig {
        io_backend: IoBackend::Uring,
        uring_rings: rings,
        ..common::manual()
    };
    match Flash::open_specs(&[spec], cfg, Arc::new(DropAll), |_| {}) {
        Ok((f, _)) => Some((f, p)),
        Err(e @ (Error::DirectIoUnsupported(_) | Error::Io { op: "setup", .. })) => {
            eprintln!("SKIPPED: no O_DIRECT or io_uring here: {e}");
            let _ = std::fs::remove_file(&p);
            None
        }
        Err(e) => panic!("open {}: {e}", p.display()),
    }
}

#[test]
fn batched_reads_reaped_by_the_callers_loop() {
    let Some((flash, p)) = open("reaper") else {
        return;
    };
    let locs = fill(&flash, 48);
    let h = flash.reap_handle(0).expect("io_uring gives a reap handle");

    // One plugged poll starts every read; they enter the kernel when the poll returns.
    let mut fut = pin!(batch_submissions(async {
        locs.iter().map(|(l, _)| flash.read(*l)).collect::<Vec<_>>()
    }));
    let mut cx = Context::from_waker(Waker::noop());
    let Poll::Ready(comps) = fut.as_mut().poll(&mut cx) else {
        panic!("the batch future has no await point");
    };
    let reaped = drive(&h, &comps);
    assert!(reaped <= locs.len());
    check(comps, &locs);

    // A thread plugged for good: its reads wait for submit_deferred.
    read_on_lane(&flash, &h, 0, &locs[..8]);

    // No reaper attached: the ring thread completes reads for a plain waiter again.
    drop(h);
    let r = flash.read(locs[47].0).wait().unwrap();
    assert_eq!(&r.value[..], &locs[47].1[..]);
    flash.close().unwrap();
    let _ = std::fs::remove_file(&p);
}

#[test]
fn each_lane_submits_and_signals_on_its_own_ring() {
    let Some((flash, p)) = open_with_rings("reaper-lanes", 2) else {
        return;
    };
    let locs = fill(&flash, 24);
    let h0 = flash.reap_handle(0).expect("lane 0 handle");
    let h1 = flash.reap_handle(1).expect("lane 1 handle");
    h0.reap();
    h1.reap();
    assert!(!readable(&h0, 0) && !readable(&h1, 0));

    // A thread on lane 1: its reads enter ring 1 and only ring 1's eventfd fires.
    read_on_lane(&flash, &h1, 1, &locs[..12]);
    assert!(!readable(&h0, 0), "lane 1's reads signalled lane 0's ring");

    // And lane 0 (this thread's default) the other way round.
    h1.reap();
    let comps: Vec<_> = locs[12..].iter().map(|(l, _)| flash.read(*l)).collect();
    drive(&h0, &comps);
    check(comps, &locs[12..]);
    assert!(!readable(&h1, 0), "lane 0's reads signalled lane 1's ring");

    drop((h0, h1));
    flash.close().unwrap();
    let _ = std::fs::remove_file(&p);
}

/// Counts wake-ups (stands in for the event loop that would queue the task).
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_busy_plugged_loop_enters_its_reads_at_the_end_of_the_turn() {
    let Some((flash, p)) = open("reaper-turn") else {
        return;
    };
    let locs = fill(&flash, 16);
    let h = flash.reap_handle(0).expect("io_uring gives a reap handle");
    std::thread::scope(|s| {
        s.spawn(|| {
            defer_submissions_on_this_thread();
            let wakes = Arc::new(CountingWaker(AtomicUsize::new(0)));
            let waker = Waker::from(Arc::clone(&wakes));
            let mut cx = Context::from_waker(&waker);
            let mut flusher = pin!(submit_deferred_each_turn());
            // First poll: nothing deferred yet; the task waits for a deferral.
            assert!(flusher.as_mut().poll(&mut cx).is_pending());
            assert_eq!(wakes.0.load(Ordering::SeqCst), 0);

            // One turn's reads wake the flusher once, at the first deferral...
            let comps: Vec<_> = locs[..8].iter().map(|(l, _)| flash.read(*l)).collect();
            assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
            // ...and when the loop runs it (no park in between), they enter and complete.
            assert!(flusher.as_mut().poll(&mut cx).is_pending());
            drive(&h, &comps);
            check(comps, &locs[..8]);

            // The next turn wakes it again.
            let comps: Vec<_> = locs[8..].iter().map(|(l, _)| flash.read(*l)).collect();
            assert_eq!(wakes.0.load(Ordering::SeqCst), 2);
            assert!(flusher.as_mut().poll(&mut cx).is_pending());
            drive(&h, &comps);
            check(comps, &locs[8..]);
        });
    });
    drop(h);
    flash.close().unwrap();
    let _ = std::fs::remove_file(&p);
}

/// Wait up to `timeout_ms` for an edge-triggered epoll on the handle's eventfd to report it
/// (retrying `EINTR`: io_uring runs a completion's task work on the submitting thread by
/// interrupting its syscall, as tokio's poller also retries).
fn edge(ep: i32, timeout_ms: i32) -> bool {
    let mut ev = libc::epoll_event { events: 0, u64: 0 };
    loop {
        // SAFETY: one valid epoll_event for the duration of the call.
        #[allow(unsafe_code)]
        let n = unsafe { libc::epoll_wait(ep, &mut ev, 1, timeout_ms) };
        if n >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return n == 1;
        }
    }
}

/// The tokio reaper never drains the eventfd (`reap_undrained`): with an edge-triggered
/// poller every completion signal must still be a new edge while the counter stays non-zero.
#[test]
fn undrained_reaping_sees_a_new_edge_for_every_batch() {
    use std::os::fd::AsRawFd;
    let Some((flash, p)) = open("reaper-edge") else {
        return;
    };
    let locs = fill(&flash, 6);
    let h = flash.reap_handle(0).expect("io_uring gives a reap handle");
    h.reap();
    // SAFETY: plain epoll syscalls on descriptors this test owns.
    #[allow(unsafe_code)]
    let ep = unsafe {
        let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
        assert!(ep >= 0);
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLET) as u32,
            u64: 1,
        };
        assert_eq!(
            libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, h.as_raw_fd(), &mut ev),
            0
        );
        ep
    };
    let mut by_edge = 0;
    for (loc, v) in &locs {
        let c = flash.read(*loc);
        // Each batch's completion raises an edge although nothing reads the counter.
        let mut reaped = 0;
        while !c.is_ready() {
            assert!(edge(ep, 1000), "no edge for the read at {loc:?}");
            reaped += h.reap_undrained();
        }
        assert!(reaped <= 1);
        by_edge += reaped;
        assert_eq!(&c.wait().unwrap().value[..], &v[..]);
    }
    // (The ring thread's 10 ms backstop may complete one first, not all of them.)
    assert!(by_edge > 0, "no read was completed by this loop");
    // The counter was never drained: a level-triggered poll still sees it set.
    assert!(readable(&h, 0));
    // SAFETY: closing the epoll descriptor this test created.
    #[allow(unsafe_code)]
    unsafe {
        libc::close(ep);
    }
    drop(h);
    flash.close().unwrap();
    let _ = std::fs::remove_file(&p);
}
