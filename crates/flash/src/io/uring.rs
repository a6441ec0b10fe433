//! The io_uring executor: one thread owns a ring, turns queued requests into SQEs in batches
//! and runs completion callbacks as CQEs arrive.
//!
//! Wake-up protocol: submitters push to a channel and, only if the ring thread announced it is
//! about to sleep (`sleeping`), write to an eventfd. The ring thread always keeps one read of
//! that eventfd armed in the ring, so `submit_and_wait(1)` returns on either a completion or a
//! new submission, and re-checks the channel after announcing sleep so no wake-up is lost.
//!
//! Invariants: a request's buffer is owned by its slot in `slots` from SQE push until its CQE
//! is reaped, so the kernel never sees a freed buffer; at most `entries` requests are in
//! flight (the rest wait in `pending`), so the completion queue (2× entries) cannot overflow.
// `unsafe` is needed here for raw syscalls/io_uring; each block states its SAFETY.
#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;

use io_uring::{opcode, types, IoUring};
use parking_lot::Mutex;

use super::{enqueue, Device, Executor, IoOp, IoRequest};
use crate::stats::FlashStats;

const WAKE_TOKEN: u64 = u64::MAX;

/// io_uring executor over devices that expose a file descriptor.
pub struct UringExecutor {
    tx: Mutex<Option<Sender<IoRequest>>>,
    wake: Arc<File>,
    sleeping: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
    stats: Arc<FlashStats>,
}

impl UringExecutor {
    /// Set up a ring of `entries` slots over `devices` (all must have a raw fd). Fails if the
    /// kernel refuses io_uring (old kernel, seccomp, `io_uring_disabled`).
    pub fn new(
        devices: Vec<Arc<dyn Device>>,
        entries: u32,
        stats: Arc<FlashStats>,
    ) -> io::Result<Self> {
        let mut fds = Vec::with_capacity(devices.len());
        for d in &devices {
            fds.push(d.raw_fd().ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("{} has no fd", d.name()),
                )
            })?);
        }
        let ring = IoUring::new(entries.next_power_of_two())?;
        // SAFETY: eventfd takes no pointers; the returned descriptor is checked below and
        // then owned by exactly one OwnedFd.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `efd` is a freshly created descriptor nobody else owns.
        let wake = Arc::new(File::from(unsafe { OwnedFd::from_raw_fd(efd) }));
        let (tx, rx) = channel();
        let sleeping = Arc::new(AtomicBool::new(false));
        let mut ring_thread = RingThread {
            ring,
            rx,
            fds,
            _devices: devices,
            wake: Arc::clone(&wake),
            sleeping: Arc::clone(&sleeping),
            stats: Arc::clone(&stats),
            slots: Vec::new(),
            free: Vec::new(),
            pending: VecDeque::new(),
            in_flight: 0,
            cap: entries as usize,
            wake_buf: Box::new([0u8; 8]),
            wake_armed: false,
        };
        let thread = std::thread::Builder::new()
            .name("flash-uring".into())
            .spawn(move || ring_thread.run())?;
        Ok(Self {
            tx: Mutex::new(Some(tx)),
            wake,
            sleeping,
            thread: Mutex::new(Some(thread)),
            stats,
        })
    }

    fn kick(&self) {
        // The eventfd counter is a native-endian u64 by the kernel's definition.
        let _ = (&*self.wake).write(&1u64.to_ne_bytes());
    }
}

/// Dropping the executor (an engine that failed to open, or the last handle going away)
/// stops and joins its threads, so none outlives it.
impl Drop for UringExecutor {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Executor for UringExecutor {
    fn submit(&self, req: IoRequest) {
        if enqueue(&self.tx, &self.stats, req) && self.sleeping.swap(false, Ordering::SeqCst) {
            self.kick();
        }
    }

    fn shutdown(&self) {
        self.tx.lock().take();
        self.kick();
        if let Some(h) = self.thread.lock().take() {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }

    fn backend(&self) -> &'static str {
        "io_uring"
    }
}

struct RingThread {
    ring: IoUring,
    rx: Receiver<IoRequest>,
    fds: Vec<i32>,
    /// Keeps the descriptors in `fds` open.
    _devices: Vec<Arc<dyn Device>>,
    wake: Arc<File>,
    sleeping: Arc<AtomicBool>,
    stats: Arc<FlashStats>,
    slots: Vec<Option<(IoRequest, usize)>>,
    free: Vec<usize>,
    pending: VecDeque<IoRequest>,
    in_flight: usize,
    cap: usize,
    wake_buf: Box<[u8; 8]>,
    wake_armed: bool,
}

impl RingThread {
    fn run(&mut self) {
        let mut closing = false;
        loop {
            loop {
                match self.rx.try_recv() {
                    Ok(r) => self.pending.push_back(r),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        closing = true;
                        break;
                    }
                }
            }
            self.push_pending();
            if closing && self.in_flight == 0 && self.pending.is_empty() {
                return;
            }
            if !self.wake_armed && !closing {
                self.arm_wake();
            }
            self.sleeping.store(true, Ordering::SeqCst);
            match self.rx.try_recv() {
                Ok(r) => {
                    self.sleeping.store(false, Ordering::SeqCst);
                    self.pending.push_back(r);
                    continue;
                }
                Err(TryRecvError::Disconnected) => closing = true,
                Err(TryRecvError::Empty) => {}
            }
            let want = if closing && self.in_flight == 0 { 0 } else { 1 };
            match self.ring.submit_and_wait(want) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
                Err(e) => {
                    self.fail_all(&e);
                    return;
                }
            }
            self.sleeping.store(false, Ordering::SeqCst);
            self.reap();
        }
    }

    fn arm_wake(&mut self) {
        let e = opcode::Read::new(
            types::Fd(self.wake.as_raw_fd()),
            self.wake_buf.as_mut_ptr(),
            8,
        )
        .build()
        .user_data(WAKE_TOKEN);
        // SAFETY: `wake_buf` is heap memory owned by this struct and outlives the SQE (it is
        // only freed when the thread exits, after the ring is dropped); the fd is kept open
        // by `wake`.
        if unsafe { self.ring.submission().push(&e) }.is_ok() {
            self.wake_armed = true;
        }
    }

    fn push_pending(&mut self) {
        while self.in_flight < self.cap {
            let Some(mut req) = self.pending.pop_front() else {
                break;
            };
            let (fd, entry, len) = match &mut req.op {
                IoOp::Read { dev, off, buf } => {
                    let fd = self.fds.get(*dev).copied();
                    let len = buf.len();
                    let p = buf.as_mut_slice().as_mut_ptr();
                    let e = fd.map(|fd| {
                        opcode::Read::new(types::Fd(fd), p, len as u32)
                            .offset(*off)
                            .build()
                    });
                    (fd, e, len)
                }
                IoOp::Write { dev, off, buf } => {
                    let fd = self.fds.get(*dev).copied();
                    let len = buf.len();
                    let p = buf.as_slice().as_ptr();
                    let e = fd.map(|fd| {
                        opcode::Write::new(types::Fd(fd), p, len as u32)
                            .offset(*off)
                            .build()
                    });
                    (fd, e, len)
                }
                IoOp::Sync { dev } => {
                    let fd = self.fds.get(*dev).copied();
                    let e = fd.map(|fd| {
                        opcode::Fsync::new(types::Fd(fd))
                            .flags(types::FsyncFlags::DATASYNC)
                            .build()
                    });
                    (fd, e, 0)
                }
            };
            let (Some(_), Some(entry)) = (fd, entry) else {
                self.stats.io_queue_depth.fetch_sub(1, Ordering::Relaxed);
                (req.done)(Err(io::Error::other("no such device")));
                continue;
            };
            let slot = match self.free.pop() {
                Some(s) => s,
                None => {
                    self.slots.push(None);
                    self.slots.len() - 1
                }
            };
            let entry = entry.user_data(slot as u64);
            // SAFETY: the buffer the entry points to belongs to `req`, which is stored in
            // `slots[slot]` right below and stays there until the CQE with this user_data is
            // reaped; moving `req` does not move the buffer's heap allocation.
            let pushed = unsafe { self.ring.submission().push(&entry) };
            if pushed.is_err() {
                // Submission queue full: submit what we have and retry this one next round.
                self.free.push(slot);
                self.pending.push_front(req);
                let _ = self.ring.submit();
                break;
            }
            if let Some(s) = self.slots.get_mut(slot) {
                *s = Some((req, len));
            }
            self.in_flight += 1;
        }
    }

    fn reap(&mut self) {
        let done: Vec<(u64, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (ud, res) in done {
            if ud == WAKE_TOKEN {
                self.wake_armed = false;
                continue;
            }
            let Some((req, len)) = self.slots.get_mut(ud as usize).and_then(Option::take) else {
                continue;
            };
            self.free.push(ud as usize);
            self.in_flight -= 1;
            self.stats.io_queue_depth.fetch_sub(1, Ordering::Relaxed);
            let outcome = if res < 0 {
                Err(io::Error::from_raw_os_error(-res))
            } else if (res as usize) < len {
                Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "short io_uring transfer",
                ))
            } else {
                Ok(())
            };
            let result = outcome.map(|()| match req.op {
                IoOp::Read { buf, .. } => Some(buf),
                _ => None,
            });
            (req.done)(result);
        }
    }

    fn fail_all(&mut self, e: &io::Error) {
        for req in self.pending.drain(..) {
            self.stats.io_queue_depth.fetch_sub(1, Ordering::Relaxed);
            (req.done)(Err(io::Error::new(e.kind(), e.to_string())));
        }
        // In-flight requests may still be touched by the kernel: leak their buffers rather
        // than free memory the device may write into.
        for slot in self.slots.drain(..).flatten() {
            std::mem::forget(slot);
        }
    }
}
