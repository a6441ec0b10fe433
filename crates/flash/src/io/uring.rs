//! The io_uring executor: one ring per *lane* (`FlashConfig::uring_rings`; a thread submits on
//! the ring of the lane it chose with [`use_ring_lane`], lane 0 by default), so each serving
//! thread of a thread-per-core server submits and reaps its own flash reads and no read hops
//! threads. The submitting thread pushes its SQE and enters the kernel itself (once per batch
//! inside [`super::plug::batch_submissions`]; one thread at a time per ring, the others leave
//! their SQEs to it: see [`Ring::enter`]); completions are reaped by an event loop holding
//! that ring's [`ReapHandle`] (woken by the ring's eventfd), else by the ring's thread —
//! which blocks for completions while no reaper is attached (open, recovery, tests, the
//! block face) and otherwise only reaps every [`BACKSTOP`], so no completion waits on a
//! stopped event loop. How each ring is set up (registered files, cooperative task work, a
//! kernel poller) is [`super::uring_setup::UringSetup`]; the default is none of them.
//!
//! Invariants: a request's buffer is owned by its slot in `State::slots` from SQE push until
//! its CQE is reaped; at most `cap` requests are in flight (the rest wait in `pending`), so
//! the completion queue (2× entries) cannot overflow. Lock order: the submission queue only
//! under `state`, the completion queue only under `reap_lock`, never both; callbacks run with
//! no lock held.

// `unsafe` is needed here for raw syscalls/io_uring; each block states its SAFETY.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use io_uring::{opcode, types, IoUring};
use parking_lot::Mutex;

use super::uring_setup::UringSetup;
use super::{Device, Executor, IoOp, IoRequest};
use crate::stats::FlashStats;

/// How long the active ring thread waits for a completion before re-checking its mode.
const ACTIVE_WAIT: Duration = Duration::from_millis(20);
/// How often the ring thread reaps while a reaper is attached (a backstop only).
pub const BACKSTOP: Duration = Duration::from_millis(10);

/// io_uring executor over devices that expose a file descriptor.
pub struct UringExecutor {
    /// One ring per lane (at least one).
    rings: Vec<Arc<Ring>>,
    /// Each ring's thread (joined at shutdown).
    threads: Mutex<Vec<JoinHandle<()>>>,
}

thread_local! {
    static LANE: Cell<usize> = const { Cell::new(0) };
}

/// Submit this thread's flash IO on lane `lane`'s ring (taken modulo the rings an executor
/// has; 0, the default, is also the engine's own threads' lane). A thread-per-core server
/// gives each event-loop thread its own lane and attaches that lane's [`ReapHandle`] to the
/// same loop.
pub fn use_ring_lane(lane: usize) {
    LANE.with(|l| l.set(lane));
}

/// The ring and its bookkeeping, shared by submitters, reapers and the ring thread.
pub(crate) struct Ring {
    ring: IoUring,
    fds: Vec<i32>,
    /// `fds` are registered with the ring (`IORING_REGISTER_FILES`): SQEs name a device by
    /// its index (`types::Fixed`), which spares the kernel an fd lookup and reference per IO.
    fixed_files: bool,
    /// Keeps the descriptors in `fds` open.
    _devices: Vec<Arc<dyn Device>>,
    state: Mutex<State>,
    /// Held while draining the completion queue; holds [`Reaped`], reap's buffers, kept
    /// between reaps so a reap allocates nothing once they have grown.
    reap_lock: Mutex<Reaped>,
    /// Counted up by the kernel for every CQE (registered with the ring); non-blocking.
    events: File,
    /// Attached [`ReapHandle`]s.
    reapers: AtomicUsize,
    /// SQEs pushed since the last enter (so an enter with nothing to submit is skipped).
    queued: AtomicUsize,
    /// A thread is in [`Ring::enter`]'s submit (see there).
    entering: AtomicBool,
    stats: Arc<FlashStats>,
    cap: usize,
}

/// A finished request: the request, its transfer length, the CQE's result.
type Completed = (IoRequest, usize, i32);

/// [`Ring::reap`]'s scratch buffers (a reap ran two fresh `Vec`s per call before: one per
/// flash GET at low depth).
#[derive(Default)]
struct Reaped {
    /// The CQEs drained (user data, result); empty between reaps.
    cqes: Vec<(u64, i32)>,
    /// A spare for the completed requests: taken by a reap, given back once its callbacks
    /// have run (a reap nested in a callback, or one racing it, uses a fresh one).
    done: Vec<Completed>,
}

struct State {
    slots: Vec<Option<(IoRequest, usize)>>,
    free: Vec<usize>,
    pending: VecDeque<IoRequest>,
    in_flight: usize,
    /// Shut down (or the ring failed): new requests fail at once.
    closed: bool,
}

impl UringExecutor {
    /// Set up `rings` rings (at least one) of `entries` slots each over `devices` (all must
    /// have a raw fd), with the default [`UringSetup`]. Fails if the kernel refuses io_uring
    /// (old kernel, seccomp, `io_uring_disabled`).
    pub fn new(
        devices: Vec<Arc<dyn Device>>,
        entries: u32,
        rings: usize,
        stats: Arc<FlashStats>,
    ) -> io::Result<Self> {
        Self::with_setup(devices, entries, rings, stats, &UringSetup::default())
    }

    /// As [`new`](Self::new), each ring set up as `setup` says (with `sqpoll`, the rings
    /// after the first share the first one's kernel poller thread, `IORING_SETUP_ATTACH_WQ`).
    pub fn with_setup(
        devices: Vec<Arc<dyn Device>>,
        entries: u32,
        rings: usize,
        stats: Arc<FlashStats>,
        setup: &UringSetup,
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
        let mut all: Vec<Arc<Ring>> = Vec::with_capacity(rings.max(1));
        for _ in 0..rings.max(1) {
            let attach = all.first().map(|r| r.ring.as_raw_fd());
            all.push(Arc::new(Ring::new(
                &fds, &devices, entries, &stats, setup, attach,
            )?));
        }
        let exec = Self {
            rings: all,
            threads: Mutex::new(Vec::new()),
        };
        for (i, r) in exec.rings.iter().enumerate() {
            let r = Arc::clone(r);
            // On failure `exec` drops here: the rings already running are closed and joined.
            // The ring thread submits on its own ring: a completion it reaps may start a
            // waiting read (`read_queue`), whose completion then comes back to this lane.
            let t = std::thread::Builder::new()
                .name(format!("flash-uring-{i}"))
                .spawn(move || {
                    use_ring_lane(i);
                    r.run()
                })?;
            exec.threads.lock().push(t);
        }
        Ok(exec)
    }

    /// The ring of lane `lane` (modulo the rings there are).
    fn ring_of(&self, lane: usize) -> &Arc<Ring> {
        &self.rings[lane % self.rings.len()]
    }

    /// The ring of the calling thread's lane.
    fn ring(&self) -> &Arc<Ring> {
        self.ring_of(LANE.with(Cell::get))
    }
}

impl Ring {
    fn new(
        fds: &[i32],
        devices: &[Arc<dyn Device>],
        entries: u32,
        stats: &Arc<FlashStats>,
        setup: &UringSetup,
        attach: Option<RawFd>,
    ) -> io::Result<Self> {
        let mut builder = IoUring::builder();
        if setup.coop_taskrun {
            builder.setup_coop_taskrun();
        }
        if let Some(idle) = setup.sqpoll_idle {
            builder.setup_sqpoll(u32::try_from(idle.as_millis()).unwrap_or(u32::MAX));
            if let Some(fd) = attach {
                builder.setup_attach_wq(fd);
            }
        }
        let ring = builder.build(entries.next_power_of_two())?;
        if !ring.params().is_feature_ext_arg() {
            // The ring thread's timed wait needs IORING_ENTER_EXT_ARG (Linux 5.11).
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "io_uring without EXT_ARG (kernel older than 5.11)",
            ));
        }
        // SAFETY: eventfd takes no pointers; the returned descriptor is checked below and
        // then owned by exactly one OwnedFd.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `efd` is a freshly created descriptor nobody else owns.
        let events = File::from(unsafe { OwnedFd::from_raw_fd(efd) });
        ring.submitter().register_eventfd(events.as_raw_fd())?;
        if setup.fixed_files {
            ring.submitter().register_files(fds)?;
        }
        Ok(Ring {
            ring,
            fds: fds.to_vec(),
            fixed_files: setup.fixed_files,
            _devices: devices.to_vec(),
            state: Mutex::new(State {
                slots: Vec::new(),
                free: Vec::new(),
                pending: VecDeque::new(),
                in_flight: 0,
                closed: false,
            }),
            reap_lock: Mutex::new(Reaped::default()),
            events,
            reapers: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            entering: AtomicBool::new(false),
            stats: Arc::clone(stats),
            cap: entries as usize,
        })
    }
}

/// A ring with registered files gives them back before it goes: closing a ring only queues
/// its teardown in the kernel, and until that runs the registered references keep each
/// device's open file (and its `flock`, `file::lock_exclusive`) alive, so an engine
/// reopened at once in the same process would find its own device locked. Unregistering is
/// synchronous; a request still in flight (none after a shutdown) keeps its own reference.
impl Drop for Ring {
    fn drop(&mut self) {
        if self.fixed_files {
            if let Err(e) = self.ring.submitter().unregister_files() {
                log::warn!("io_uring: unregistering the flash files failed: {e}");
            }
        }
    }
}

/// Dropping the executor (an engine that failed to open, or the last handle going away)
/// stops and joins its thread, so none outlives it.
impl Drop for UringExecutor {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Executor for UringExecutor {
    fn submit(&self, req: IoRequest) {
        let r = self.ring();
        // Only reads wait for the end of a plug: a chunk write or sync may have a thread
        // waiting on it (buffer space, a flush), so it enters at once.
        let deferrable = matches!(req.op, IoOp::Read { .. });
        r.stats.io_queue_depth.fetch_add(1, Ordering::Relaxed);
        let failed = {
            let mut state = r.state.lock();
            if state.closed {
                drop(state);
                r.stats.io_queue_depth.fetch_sub(1, Ordering::Relaxed);
                (req.done)(Err(io::Error::other("flash executor shut down")));
                return;
            }
            state.pending.push_back(req);
            r.push_pending(&mut state)
        };
        r.fail(failed);
        if !(deferrable && super::plug::defer(r)) {
            r.enter();
        }
    }

    fn shutdown(&self) {
        for r in &self.rings {
            r.state.lock().closed = true;
        }
        for h in std::mem::take(&mut *self.threads.lock()) {
            if h.thread().id() != std::thread::current().id() {
                h.thread().unpark();
                let _ = h.join();
            }
        }
    }

    fn backend(&self) -> &'static str {
        "io_uring"
    }
}

impl UringExecutor {
    /// A handle an event loop polls to reap the completions of lane `lane`'s IO on its own
    /// thread (see [`use_ring_lane`]).
    pub fn reap_handle(&self, lane: usize) -> Option<ReapHandle> {
        let ring = self.ring_of(lane);
        let fd = ring.events.try_clone().ok()?;
        ring.reapers.fetch_add(1, Ordering::SeqCst);
        Some(ReapHandle {
            ring: Arc::clone(ring),
            fd,
        })
    }
}

/// Lets an event loop reap one ring's completions on its own thread: poll its fd
/// for readability and call [`reap`](Self::reap). While one is alive the ring thread only
/// reaps as a backstop; dropping it hands reaping back to the ring thread.
pub struct ReapHandle {
    ring: Arc<Ring>,
    fd: File,
}

impl ReapHandle {
    /// Clear the eventfd, then complete every finished request (callbacks run on this
    /// thread). Returns how many completed.
    pub fn reap(&self) -> usize {
        let mut b = [0u8; 8];
        while matches!((&self.fd).read(&mut b), Ok(8)) {}
        self.ring.reap()
    }

    /// Complete every finished request without reading the eventfd: for a caller whose
    /// poller is edge-triggered (tokio's `AsyncFd`, epoll `EPOLLET`), where each completion's
    /// signal is a new edge whatever the counter holds, so draining it costs two `read`s per
    /// wake-up for nothing. The caller clears its readiness *before* calling this, so a
    /// completion posted meanwhile raises a fresh edge. (The counter is a `u64` and grows by
    /// one per signal.) Returns how many completed.
    pub fn reap_undrained(&self) -> usize {
        self.ring.reap()
    }
}

impl AsRawFd for ReapHandle {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl Drop for ReapHandle {
    fn drop(&mut self) {
        self.ring.reapers.fetch_sub(1, Ordering::SeqCst);
    }
}

impl std::fmt::Debug for ReapHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReapHandle(fd {})", self.fd.as_raw_fd())
    }
}

/// Build an SQE on device `dev` (descriptor `fd`): by its registered index when the ring's
/// files are registered, else by descriptor. (A macro: `types::Fixed` and `types::Fd` are
/// two types and the opcode builders are generic over them.)
macro_rules! on_target {
    ($ring:expr, $dev:expr, $fd:expr, |$t:ident| $build:expr) => {
        if $ring.fixed_files {
            let $t = types::Fixed($dev as u32);
            $build
        } else {
            let $t = types::Fd($fd);
            $build
        }
    };
}

impl super::plug::Enter for Ring {
    fn enter(&self) {
        Ring::enter(self);
    }
}

impl Ring {
    fn run(&self) {
        loop {
            {
                let state = self.state.lock();
                if state.closed && state.in_flight == 0 && state.pending.is_empty() {
                    return;
                }
            }
            if self.reapers.load(Ordering::SeqCst) > 0 {
                std::thread::park_timeout(BACKSTOP);
                self.enter();
                self.reap();
                continue;
            }
            let ts = types::Timespec::from(ACTIVE_WAIT);
            let args = types::SubmitArgs::new().timespec(&ts);
            match self.ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ETIME | libc::EINTR | libc::EBUSY | libc::EAGAIN)
                    ) => {}
                Err(e) => {
                    self.fail_all(&e);
                    return;
                }
            }
            self.reap();
        }
    }

    /// Hand queued SQEs to the kernel (a no-op syscall-free check when none are queued).
    ///
    /// One thread enters at a time: a thread that finds another entering leaves its SQEs
    /// to it, and that one checks `queued` again once its submit returns. Two threads
    /// entering the shared ring together serialize on the kernel's ring mutex, and the
    /// second spins on it while the first rings the device (measured: 7 % of the server's
    /// CPU in `mutex_spin_on_owner` with two network threads reading from flash).
    pub(crate) fn enter(&self) {
        loop {
            // An SQE is published (tail stored) before `queued` counts it, so whoever swaps
            // a non-zero count submits it.
            if self.queued.load(Ordering::SeqCst) == 0 || self.entering.swap(true, Ordering::SeqCst)
            {
                return;
            }
            let transient = self.queued.swap(0, Ordering::SeqCst) > 0 && !self.submit_queued();
            self.entering.store(false, Ordering::SeqCst);
            // A thread that found this one entering counted its SQEs before it looked:
            // they show here (all four operations are SeqCst).
            if transient {
                return;
            }
        }
    }

    /// One `io_uring_enter` for the queued SQEs; false on a transient failure (they stay
    /// queued, counted again, for the next enter of any thread).
    fn submit_queued(&self) -> bool {
        match self.ring.submit() {
            Ok(_) => true,
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EBUSY | libc::EAGAIN)
                ) =>
            {
                self.queued.fetch_add(1, Ordering::SeqCst);
                false
            }
            Err(e) => {
                log::warn!("io_uring submit failed: {e}");
                true
            }
        }
    }

    /// Move pending requests into the submission queue while capacity allows. Requests
    /// naming no device are returned to be failed outside the lock.
    fn push_pending(&self, state: &mut State) -> Vec<IoRequest> {
        let mut failed = Vec::new();
        while state.in_flight < self.cap {
            let Some(mut req) = state.pending.pop_front() else {
                break;
            };
            let (fd, entry, len) = match &mut req.op {
                IoOp::Read { dev, off, buf } => {
                    let fd = self.fds.get(*dev).copied();
                    let len = buf.len();
                    let p = buf.as_mut_slice().as_mut_ptr();
                    let e = fd.map(|fd| {
                        on_target!(self, *dev, fd, |t| opcode::Read::new(t, p, len as u32)
                            .offset(*off)
                            .build())
                    });
                    (fd, e, len)
                }
                IoOp::Write { dev, off, buf } => {
                    let fd = self.fds.get(*dev).copied();
                    let len = buf.len();
                    let p = buf.as_slice().as_ptr();
                    let e = fd.map(|fd| {
                        on_target!(self, *dev, fd, |t| opcode::Write::new(t, p, len as u32)
                            .offset(*off)
                            .build())
                    });
                    (fd, e, len)
                }
                IoOp::Sync { dev } => {
                    let fd = self.fds.get(*dev).copied();
                    let e = fd.map(|fd| {
                        on_target!(self, *dev, fd, |t| opcode::Fsync::new(t)
                            .flags(types::FsyncFlags::DATASYNC)
                            .build())
                    });
                    (fd, e, 0)
                }
            };
            let (Some(_), Some(entry)) = (fd, entry) else {
                failed.push(req);
                continue;
            };
            let slot = match state.free.pop() {
                Some(s) => s,
                None => {
                    state.slots.push(None);
                    state.slots.len() - 1
                }
            };
            let entry = entry.user_data(slot as u64);
            // SAFETY: the submission queue is only accessed under `state`, which the caller
            // holds. The buffer the entry points to belongs to `req`, which is stored in
            // `slots[slot]` right below and stays there until the CQE with this user_data is
            // reaped; moving `req` does not move the buffer's heap allocation.
            let pushed = unsafe { self.ring.submission_shared().push(&entry) };
            if pushed.is_err() {
                // Submission queue full: submit what we have and retry this one next round.
                state.free.push(slot);
                state.pending.push_front(req);
                let _ = self.ring.submit();
                break;
            }
            if let Some(s) = state.slots.get_mut(slot) {
                *s = Some((req, len));
            }
            state.in_flight += 1;
            self.queued.fetch_add(1, Ordering::SeqCst);
        }
        failed
    }

    fn fail(&self, failed: Vec<IoRequest>) {
        for req in failed {
            self.stats.io_queue_depth.fetch_sub(1, Ordering::Relaxed);
            (req.done)(Err(io::Error::other("no such device")));
        }
    }

    /// Complete every request whose CQE is there; returns how many.
    fn reap(&self) -> usize {
        let (mut done, failed) = {
            let mut scratch = self.reap_lock.lock();
            let Reaped { cqes, done: spare } = &mut *scratch;
            cqes.clear();
            // SAFETY: the completion queue is only accessed under `reap_lock`.
            cqes.extend(
                unsafe { self.ring.completion_shared() }.map(|c| (c.user_data(), c.result())),
            );
            if cqes.is_empty() {
                return 0;
            }
            let mut done = std::mem::take(spare);
            done.reserve(cqes.len());
            let mut state = self.state.lock();
            for (ud, res) in cqes.drain(..) {
                let Some((req, len)) = state.slots.get_mut(ud as usize).and_then(Option::take)
                else {
                    continue;
                };
                state.free.push(ud as usize);
                state.in_flight -= 1;
                done.push((req, len, res));
            }
            let failed = if state.pending.is_empty() {
                Vec::new()
            } else {
                self.push_pending(&mut state)
            };
            (done, failed)
        };
        self.enter();
        self.fail(failed);
        let n = done.len();
        for (req, len, res) in done.drain(..) {
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
        // Give the (now empty) buffer back for the next reap; if another reap holds the
        // lock, drop it rather than wait.
        if let Some(mut scratch) = self.reap_lock.try_lock() {
            if scratch.done.capacity() < done.capacity() {
                scratch.done = done;
            }
        }
        n
    }

    fn fail_all(&self, e: &io::Error) {
        log::error!("io_uring failed: {e}; flash IO stops");
        let pending: Vec<IoRequest> = {
            let mut state = self.state.lock();
            state.closed = true;
            // In-flight requests may still be touched by the kernel: leak their buffers
            // rather than free memory the device may write into.
            for slot in state.slots.drain(..).flatten() {
                std::mem::forget(slot);
            }
            state.in_flight = 0;
            state.pending.drain(..).collect()
        };
        for req in pending {
            self.stats.io_queue_depth.fetch_sub(1, Ordering::Relaxed);
            (req.done)(Err(io::Error::new(e.kind(), e.to_string())));
        }
    }
}
