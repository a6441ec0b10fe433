//! Devices and the IO executors that drive them off the caller's threads.
//!
//! - [`Device`]: positional, blocking IO of aligned buffers on one device: [`file`](mod@file)
//!   (`O_DIRECT`), [`memory`] (tests, crash images), [`faulty`] (errors and torn writes).
//! - Executors run [`IoRequest`]s and call their completion: [`uring`] (a ring per lane, the
//!   submitting thread enters the kernel, batched by [`plug`]; its lanes' reap handles come
//!   from [`uring::UringExecutor::reap_handle`], not from this module's trait) and [`psync`]
//!   (a thread pool).
//!
//! Invariants: callers never block (`submit` only enqueues); the engine bounds what it
//! enqueues (reads by a queue limit, writes by chunks in flight per stream; depth is the
//! `io_queue_depth` stat). Buffers are [`AlignedBuf`]s (4 KiB aligned, as `O_DIRECT`
//! requires); read buffers come unzeroed from [`pool::ReadPool`] and become the record's
//! `Bytes`, going back to the pool when the last slice is dropped.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::stats::FlashStats;

pub mod faulty;
pub mod file;
mod journal_map;
pub mod memory;
pub mod plug;
pub mod pool;
pub mod psync;
pub mod uring;
pub mod uring_setup;

/// IO alignment for direct IO.
pub const ALIGN: usize = 4096;

/// A storage device addressed by byte offset. Blocking; called only from IO executor threads
/// (and at open/format time).
pub trait Device: Send + Sync + 'static {
    /// Human-readable name (path or label) for errors and stats.
    fn name(&self) -> &str;
    /// Usable size in bytes.
    fn len(&self) -> u64;
    /// Always false for a usable device (provided for clippy's `len_without_is_empty`).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Fill `buf` from byte `off`. `buf` and `off` are 4 KiB aligned.
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()>;
    /// Write all of `buf` at byte `off`. `buf` and `off` are 4 KiB aligned.
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()>;
    /// Make every completed write durable (fdatasync).
    fn sync(&self) -> io::Result<()>;
    /// The file descriptor, if io_uring can drive this device directly.
    fn raw_fd(&self) -> Option<RawFd> {
        None
    }
    /// What the device held before this open ([`crate::probe::inspect`] over its bytes).
    /// The default reads through [`read_at`](Self::read_at) (whole 4 KiB pages of
    /// [`len`](Self::len)); a device that was created or will be grown by this open probes
    /// only the bytes it had.
    fn probe(&self) -> io::Result<crate::probe::Content> {
        let len = self.len() / ALIGN as u64 * ALIGN as u64;
        crate::probe::inspect(len, &mut |off, buf: &mut [u8]| {
            let mut a = AlignedBuf::zeroed(buf.len().div_ceil(ALIGN) * ALIGN);
            self.read_at(a.as_mut_slice(), off)?;
            let n = buf.len();
            buf.copy_from_slice(&a.as_slice()[..n]);
            Ok(n)
        })
    }
    /// The journal's region is `[off, off + len)` (page-aligned): a device that can map it
    /// into memory does (a file device: each entry is then a copy, not a system call). The
    /// default does nothing; an error leaves journal writes on their slower path.
    fn journal_attach(&self, off: u64, len: u64) -> io::Result<()> {
        let _ = (off, len);
        Ok(())
    }
    /// Write `bytes` (any length) at byte `off` (any offset) so that they survive this
    /// process without waiting for the device: the crash journal's entries (`journal`).
    /// The default reads the aligned pages around them, patches and writes them back
    /// (devices without a page cache: memory, test wrappers); a file device writes through
    /// the page cache. Calls on one device are serialized by the journal.
    fn journal_write(&self, bytes: &[u8], off: u64) -> io::Result<()> {
        let (start, mut page) = self.aligned_around(off, bytes.len())?;
        let at = (off - start) as usize;
        page.as_mut_slice()[at..at + bytes.len()].copy_from_slice(bytes);
        self.write_at(page.as_slice(), start)
    }
    /// Read `buf.len()` bytes at byte `off` (any length and offset), seeing every
    /// [`journal_write`](Self::journal_write) made before.
    fn journal_read(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let (start, page) = self.aligned_around(off, buf.len())?;
        let at = (off - start) as usize;
        buf.copy_from_slice(&page.as_slice()[at..at + buf.len()]);
        Ok(())
    }
    /// Make every [`journal_write`](Self::journal_write) durable (a power cut keeps it).
    fn journal_sync(&self) -> io::Result<()> {
        self.sync()
    }
    /// The 4 KiB-aligned pages covering `len` bytes at `off`, read: (their offset, bytes).
    fn aligned_around(&self, off: u64, len: usize) -> io::Result<(u64, AlignedBuf)> {
        let a = ALIGN as u64;
        let start = off / a * a;
        let end = (off + len as u64).div_ceil(a) * a;
        let mut page = AlignedBuf::zeroed((end - start) as usize);
        self.read_at(page.as_mut_slice(), start)?;
        Ok((start, page))
    }
    /// Make all of [`len`](Self::len) usable before the first write (a file device grows its
    /// file to the configured size). Called once the engine has decided to use the device.
    fn prepare(&self) -> io::Result<()> {
        Ok(())
    }
}

/// A heap buffer whose window is 4 KiB aligned.
///
/// Every IO buffer is one: 4 KiB aligned, a multiple of 4 KiB long when used for IO, as
/// `O_DIRECT` requires. They are built without `unsafe` by over-allocating a `Vec` and using
/// the aligned window inside it. Write chunks are recycled through a small pool (two per
/// stream). Read buffers come from [`pool::ReadPool`] and are not zeroed: the read buffer
/// becomes the returned record's `Bytes` (key and value are slices of it, no copy) and goes
/// back to the pool when the last slice is dropped.
pub struct AlignedBuf {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes.
    pub fn zeroed(len: usize) -> Self {
        let raw = vec![0u8; len + ALIGN];
        let start = raw.as_ptr().align_offset(ALIGN);
        Self { raw, start, len }
    }

    /// Length of the window.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if the window is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Capacity the window may grow to with [`set_len`](Self::set_len).
    pub fn capacity(&self) -> usize {
        self.raw.len() - self.start
    }

    /// Shrink or grow the window (bytes beyond the old length keep their old contents).
    /// Panics if `len` exceeds the capacity (a bug, never data-dependent).
    pub fn set_len(&mut self, len: usize) {
        assert!(
            len <= self.capacity(),
            "AlignedBuf::set_len beyond capacity"
        );
        self.len = len;
    }

    /// The window.
    pub fn as_slice(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }

    /// The window, mutable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }

    /// Convert into `Bytes` without copying.
    pub fn into_bytes(self) -> Bytes {
        Bytes::from(self.raw).slice(self.start..self.start + self.len)
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

/// One IO operation on device `dev` (index into the executor's device list).
pub enum IoOp {
    /// Read `buf.len()` bytes at `off`.
    Read {
        /// Device index.
        dev: usize,
        /// Byte offset (aligned).
        off: u64,
        /// Destination, returned in the completion.
        buf: AlignedBuf,
    },
    /// Write all of `buf` at `off`.
    Write {
        /// Device index.
        dev: usize,
        /// Byte offset (aligned).
        off: u64,
        /// Source; shared so readers can serve from it while the write is in flight.
        buf: Arc<AlignedBuf>,
    },
    /// fdatasync the device.
    Sync {
        /// Device index.
        dev: usize,
    },
}

/// Completion callback: runs on the thread that reaps the IO (an executor thread, or an event
/// loop holding a [`uring::ReapHandle`]), must not block. Receives the read buffer
/// for reads, `None` for writes and syncs.
pub type IoDone = Box<dyn FnOnce(io::Result<Option<AlignedBuf>>) + Send>;

/// An operation and what to do when it finishes.
pub struct IoRequest {
    /// The operation.
    pub op: IoOp,
    /// Called exactly once with the outcome.
    pub done: IoDone,
}

/// Runs IO requests off the caller's thread.
pub trait Executor: Send + Sync {
    /// Enqueue; never blocks. After shutdown the request completes with an error.
    fn submit(&self, req: IoRequest);
    /// Finish queued requests and stop the threads.
    fn shutdown(&self);
    /// Backend name for stats (`io_uring`, `psync`).
    fn backend(&self) -> &'static str;
}

/// Run one request synchronously against a device (used by the psync pool and as the
/// reference behaviour the io_uring executor must match).
pub(crate) fn run_blocking(dev: &dyn Device, op: IoOp) -> io::Result<Option<AlignedBuf>> {
    match op {
        IoOp::Read { off, mut buf, .. } => {
            dev.read_at(buf.as_mut_slice(), off)?;
            Ok(Some(buf))
        }
        IoOp::Write { off, buf, .. } => dev.write_at(buf.as_slice(), off).map(|()| None),
        IoOp::Sync { .. } => dev.sync().map(|()| None),
    }
}

/// Run a batch of operations through `exec` and wait for all of them (open, recovery and the
/// reclaimer use this; never call it from a network thread). Results come back in order.
pub(crate) fn run_batch(
    exec: &dyn Executor,
    ops: Vec<IoOp>,
) -> Vec<io::Result<Option<AlignedBuf>>> {
    let n = ops.len();
    let (tx, rx) = std::sync::mpsc::channel();
    for (i, op) in ops.into_iter().enumerate() {
        let tx = tx.clone();
        exec.submit(IoRequest {
            op,
            done: Box::new(move |r| {
                let _ = tx.send((i, r));
            }),
        });
    }
    drop(tx);
    let mut out: Vec<Option<io::Result<Option<AlignedBuf>>>> = (0..n).map(|_| None).collect();
    while let Ok((i, r)) = rx.recv() {
        if let Some(slot) = out.get_mut(i) {
            *slot = Some(r);
        }
    }
    out.into_iter()
        .map(|r| r.unwrap_or_else(|| Err(io::Error::other("executor dropped a request"))))
        .collect()
}

/// Run one operation and wait for it (see [`run_batch`]).
pub(crate) fn run_one(exec: &dyn Executor, op: IoOp) -> io::Result<Option<AlignedBuf>> {
    run_batch(exec, vec![op])
        .pop()
        .unwrap_or_else(|| Err(io::Error::other("no result")))
}

/// Read `len` bytes at `off` of device `dev` and wait.
pub(crate) fn read_blocking(
    exec: &dyn Executor,
    dev: usize,
    off: u64,
    len: usize,
) -> io::Result<AlignedBuf> {
    run_one(
        exec,
        IoOp::Read {
            dev,
            off,
            buf: AlignedBuf::zeroed(len),
        },
    )?
    .ok_or_else(|| io::Error::other("read returned no buffer"))
}

/// The executors' common `submit` step: count `req` in `io_queue_depth` and send it to the
/// executor's thread(s). After shutdown (`tx` taken, or the receiving side gone) the request
/// is uncounted and completes at once with an error, on the caller's thread. Returns true if
/// the request was sent.
pub(crate) fn enqueue(
    tx: &Mutex<Option<Sender<IoRequest>>>,
    stats: &FlashStats,
    req: IoRequest,
) -> bool {
    stats.io_queue_depth.fetch_add(1, Ordering::Relaxed);
    let tx = tx.lock();
    let rejected = match tx.as_ref() {
        Some(tx) => tx.send(req).err().map(|e| e.0),
        None => Some(req),
    };
    drop(tx);
    match rejected {
        None => true,
        Some(req) => {
            stats.io_queue_depth.fetch_sub(1, Ordering::Relaxed);
            (req.done)(Err(io::Error::other("flash executor shut down")));
            false
        }
    }
}

pub(crate) fn op_dev(op: &IoOp) -> usize {
    match op {
        IoOp::Read { dev, .. } | IoOp::Write { dev, .. } | IoOp::Sync { dev } => *dev,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_buf_is_aligned() {
        for n in [0, 1, 4096, 8192, 100_000] {
            let b = AlignedBuf::zeroed(n);
            assert_eq!(b.as_slice().as_ptr() as usize % ALIGN, 0);
            assert_eq!(b.len(), n);
            assert!(b.as_slice().iter().all(|&x| x == 0));
        }
        let mut b = AlignedBuf::zeroed(8192);
        b.as_mut_slice()[5] = 9;
        let by = b.into_bytes();
        assert_eq!(by.len(), 8192);
        assert_eq!(by[5], 9);
    }
}
