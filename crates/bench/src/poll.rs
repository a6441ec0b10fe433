//! The two system calls the event loop needs and `std` lacks: `ppoll` with a nanosecond
//! timeout, and a per-thread timer slack.
//!
//! Why not tokio or mio: their timers and `epoll_wait` timeouts have millisecond resolution,
//! and an open-loop generator that wakes up to a millisecond late charges that lateness to the
//! server's latency. `ppoll` takes a `timespec`, and with the thread's timer slack lowered from
//! the default 50 µs to 1 µs it wakes within a few microseconds of the scheduled send time.
//! Called only by worker threads, on their own descriptors.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// Interest and readiness of one descriptor, a thin copy of `struct pollfd`.
pub type PollFd = libc::pollfd;

/// Readable.
pub const POLLIN: i16 = libc::POLLIN;
/// Writable.
pub const POLLOUT: i16 = libc::POLLOUT;
/// Error or hang-up (always reported).
pub const POLLERR_HUP: i16 = libc::POLLERR | libc::POLLHUP;

/// A `pollfd` watching `fd` for `events`.
pub fn pollfd(fd: RawFd, events: i16) -> PollFd {
    PollFd {
        fd,
        events,
        revents: 0,
    }
}

/// Waits until a descriptor in `fds` is ready or `timeout` passes; returns how many are
/// ready (0 on timeout). Interrupted calls return 0 so the caller re-checks its clock.
pub fn ppoll(fds: &mut [PollFd], timeout: Duration) -> io::Result<usize> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `fds` is an exclusively borrowed, initialised slice of `pollfd` whose length is
    // passed as `nfds`, so the kernel writes `revents` only inside it; `ts` lives on the stack
    // for the whole call; a null signal mask means the mask is left unchanged.
    let rc = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(rc as usize)
}

/// Lowers the calling thread's timer slack to `ns` nanoseconds so timed waits end on time.
/// Best effort: failure only makes wake-ups less punctual (visible as send lag in the report).
pub fn set_timer_slack_ns(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument by value and touches no memory of
    // ours; the remaining variadic arguments are ignored by the kernel for this option.
    let _ = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
}
