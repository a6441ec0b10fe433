//! A shorter scheduler slice for the serving threads (Linux ≥ 6.12, EEVDF).
//!
//! Why: with a thread-per-connection client on the same few cores (issue 30: 32 client
//! threads on 2 vCPUs), a serving thread woken by a socket or by its ring's completion
//! eventfd waited on the run queue about as long as it ran, and every connection it serves
//! waited with it. EEVDF picks the runnable thread with the earliest virtual deadline, and a
//! thread's deadline is its eligible time plus its slice: a thread that asks for a short
//! slice (`sched_setattr` with `sched_runtime` on a `SCHED_OTHER` thread) is picked sooner
//! when it wakes, and preempted sooner when it runs long. Its share of the CPU (its weight,
//! i.e. its nice value) does not change. Numbers: docs/serving.md, "More workers than cores,
//! or a shorter slice".
//!
//! Invariants: only the calling thread changes; its policy stays `SCHED_OTHER` and its nice
//! value is kept; on a kernel without custom slices (or without `sched_setattr`) the call
//! fails with the kernel's error and the thread keeps the default slice.
use std::time::Duration;

/// The kernel's bounds for a custom slice (`kernel/sched/syscalls.c`: 0.1 ms to 100 ms).
pub const MIN_SLICE: Duration = Duration::from_micros(100);
/// See [`MIN_SLICE`].
pub const MAX_SLICE: Duration = Duration::from_millis(100);

/// `struct sched_attr` (include/uapi/linux/sched/types.h), version 1 (56 bytes).
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
    util_min: u32,
    util_max: u32,
}

/// Ask the kernel for a `slice`-long scheduler slice on the calling thread, keeping its
/// policy (`SCHED_OTHER`) and nice value. `slice` is clamped to [`MIN_SLICE`, `MAX_SLICE`].
/// Returns the slice the kernel now reports for the thread.
#[allow(unsafe_code)]
pub fn request_slice(slice: Duration) -> std::io::Result<Duration> {
    let slice = slice.clamp(MIN_SLICE, MAX_SLICE);
    let mut attr = current()?;
    if attr.policy != libc::SCHED_OTHER as u32 {
        return Err(std::io::Error::other(format!(
            "thread policy {} is not SCHED_OTHER: its slice is left alone",
            attr.policy
        )));
    }
    attr.size = std::mem::size_of::<SchedAttr>() as u32;
    attr.flags = 0;
    attr.runtime = u64::try_from(slice.as_nanos()).unwrap_or(u64::MAX);
    // SAFETY: `attr` is a valid, initialised `struct sched_attr` of the size it declares,
    // borrowed for the call only; pid 0 is the calling thread.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0u32) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    current_slice()
}

/// The calling thread's slice as the kernel reports it (`sched_runtime`; 0 before any
/// request: the kernel's default slice).
pub fn current_slice() -> std::io::Result<Duration> {
    Ok(Duration::from_nanos(current()?.runtime))
}

#[allow(unsafe_code)]
fn current() -> std::io::Result<SchedAttr> {
    let mut attr = SchedAttr::default();
    let size = std::mem::size_of::<SchedAttr>() as u32;
    // SAFETY: the kernel writes at most `size` bytes into `attr`, which is that large and
    // exclusively borrowed for the call; pid 0 is the calling thread.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut attr as *mut SchedAttr,
            size,
            0u32,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(attr)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel older than 6.12 ignores `sched_runtime` for SCHED_OTHER (it reads back 0):
    /// then this test says so and checks only that the call did not change the policy.
    #[test]
    fn a_thread_gets_the_slice_it_asks_for_and_keeps_its_nice_value() {
        std::thread::spawn(|| {
            let before = current().unwrap();
            let got = request_slice(Duration::from_micros(250)).unwrap();
            let after = current().unwrap();
            assert_eq!(after.policy, libc::SCHED_OTHER as u32);
            assert_eq!(after.nice, before.nice);
            if got.is_zero() {
                eprintln!("kernel without custom slices: nothing else to check");
                return;
            }
            assert_eq!(got, Duration::from_micros(250));
            // Clamped to the kernel's bounds.
            assert_eq!(request_slice(Duration::from_micros(1)).unwrap(), MIN_SLICE);
            assert_eq!(request_slice(Duration::from_secs(1)).unwrap(), MAX_SLICE);
        })
        .join()
        .unwrap();
    }
}
