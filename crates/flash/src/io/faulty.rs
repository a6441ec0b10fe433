//! A fault-injecting wrapper for tests: EIO on read or write (always, the next N writes, or
//! every Nth write), ENOSPC on write, EIO on sync, writes held back (slow), and torn writes that freeze the device (a crash image: the inner device then holds exactly what a
//! power cut in the middle of that write could leave).
//!
//! Faults are armed through [`Faults`], shared with the test, and checked on every call from
//! whichever executor thread performs the IO.
use std::io;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use super::Device;

/// Switches a test flips while the engine runs.
#[derive(Default)]
pub struct Faults {
    /// Every read fails with EIO while set.
    pub read_eio: AtomicBool,
    /// Reads that touch the 4 KiB page at this byte offset fail with EIO (`u64::MAX`: none,
    /// the default): one bad sector.
    pub bad_read_page: AtomicU64,
    /// Every write fails with EIO while set.
    pub write_eio: AtomicBool,
    /// Every write fails with ENOSPC while set.
    pub write_enospc: AtomicBool,
    /// The next this many writes fail with EIO (counts down).
    pub fail_next_writes: AtomicU64,
    /// Every Nth write fails with EIO while non-zero (a steady error rate of 1/N).
    pub fail_every_nth_write: AtomicU64,
    /// Writes seen (for `fail_every_nth_write`).
    pub writes: AtomicU64,
    /// Every sync fails with EIO while set.
    pub sync_eio: AtomicBool,
    /// Writes allowed before the device "crashes": the write that finds this at 0 is torn
    /// (only its first `torn_pages` pages land) and every later write or sync is silently
    /// dropped. Negative = disarmed (the default).
    pub crash_after_writes: AtomicI64,
    /// Pages of the torn write that land (the rest is lost).
    pub torn_pages: AtomicU64,
    /// Set once the crash happened.
    pub crashed: AtomicBool,
    /// Writes covering this byte offset wait (on their executor thread) until it is set
    /// back to `u64::MAX` (the default): a slow write that later writes overtake.
    pub hold_writes_at: AtomicU64,
}

impl Faults {
    /// All faults off.
    pub fn new() -> Arc<Self> {
        let f = Self::default();
        f.crash_after_writes.store(-1, Ordering::SeqCst);
        f.bad_read_page.store(u64::MAX, Ordering::SeqCst);
        f.hold_writes_at.store(u64::MAX, Ordering::SeqCst);
        Arc::new(f)
    }
}

/// Wraps a device and injects the armed faults.
pub struct FaultyDevice {
    inner: Arc<dyn Device>,
    faults: Arc<Faults>,
}

impl FaultyDevice {
    /// Wrap `inner`; `faults` stays with the test to arm.
    pub fn new(inner: Arc<dyn Device>, faults: Arc<Faults>) -> Self {
        Self { inner, faults }
    }
}

impl Device for FaultyDevice {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let bad = self.faults.bad_read_page.load(Ordering::SeqCst);
        let hits_bad =
            bad != u64::MAX && off < bad + super::ALIGN as u64 && bad < off + buf.len() as u64;
        if self.faults.read_eio.load(Ordering::SeqCst) || hits_bad {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.read_at(buf, off)
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let f = &self.faults;
        let end = off + buf.len() as u64;
        while (off..end).contains(&f.hold_writes_at.load(Ordering::SeqCst)) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        if f.write_enospc.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        let nth = f.writes.fetch_add(1, Ordering::SeqCst) + 1;
        let every = f.fail_every_nth_write.load(Ordering::SeqCst);
        let next = f
            .fail_next_writes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if f.write_eio.load(Ordering::SeqCst) || next || (every > 0 && nth.is_multiple_of(every)) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        if f.crashed.load(Ordering::SeqCst) {
            return Ok(()); // the process "still runs" but nothing reaches the media
        }
        let left = f.crash_after_writes.load(Ordering::SeqCst);
        if left == 0 {
            f.crashed.store(true, Ordering::SeqCst);
            let pages = f.torn_pages.load(Ordering::SeqCst) as usize;
            let n = (pages * super::ALIGN).min(buf.len());
            return self.inner.write_at(&buf[..n], off);
        }
        if left > 0 {
            f.crash_after_writes.fetch_sub(1, Ordering::SeqCst);
        }
        self.inner.write_at(buf, off)
    }

    fn sync(&self) -> io::Result<()> {
        if self.faults.sync_eio.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.sync()
    }
}
