//! [`Traced`]: a decorator that records every request reaching a backend (time, kind, offset,
//! length) into a compact binary file for offline analysis (`scripts/bench/trace_sim.py`
//! replays it against ideal caches). Costs nothing when off: a server wraps its export only
//! when asked to trace.
//!
//! File: the 8 bytes `FTTRACE1`, a u64 start time (ns since the Unix epoch), then 24-byte
//! records, all little-endian: u64 ns since the start, u64 offset, u32 length, u8 [`Op`],
//! 3 zero bytes. Records are in the order requests arrived (not completed).
//!
//! Bounded: records collect in batches of [`BATCH`] bytes that go over a channel of
//! [`QUEUE`] batches to a writer thread. A request never waits for the file: when the writer
//! falls behind (or failed), the batch is dropped and counted in [`Tracer::dropped`].
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::{BackendFuture, BlockBackend, BlockSizes, ZeroFlags};

/// The file's first 8 bytes.
pub const MAGIC: &[u8; 8] = b"FTTRACE1";
/// Bytes of one record.
pub const RECORD: usize = 24;
/// Bytes of a batch handed to the writer thread (2730 records).
pub const BATCH: usize = RECORD * 2730;
/// Batches the channel to the writer holds (~1 MiB of records in flight at most).
pub const QUEUE: usize = 16;

/// A request's kind, as stored in a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// READ.
    Read = 0,
    /// WRITE.
    Write = 1,
    /// TRIM.
    Trim = 2,
    /// WRITE_ZEROES.
    WriteZeroes = 3,
    /// FLUSH (offset and length 0).
    Flush = 4,
    /// CACHE (a read-ahead hint).
    Cache = 5,
}

struct Buffer {
    buf: Vec<u8>,
    tx: Option<SyncSender<Vec<u8>>>,
}

/// The recorder: owns the file's writer thread. [`Tracer::finish`] (or drop) writes what is
/// buffered and closes the file.
pub struct Tracer {
    start: Instant,
    buffer: Mutex<Buffer>,
    writer: Mutex<Option<JoinHandle<io::Result<()>>>>,
    recorded: AtomicU64,
    dropped: AtomicU64,
}

impl Tracer {
    /// Create (truncate) `path` and start its writer thread.
    pub fn create(path: &Path) -> io::Result<Arc<Tracer>> {
        let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
        let epoch_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        out.write_all(MAGIC)?;
        out.write_all(&epoch_ns.to_le_bytes())?;
        let (tx, rx) = sync_channel::<Vec<u8>>(QUEUE);
        let writer = std::thread::Builder::new()
            .name("trace-writer".into())
            .spawn(move || {
                for batch in rx {
                    out.write_all(&batch)?;
                }
                out.flush()?;
                out.into_inner().map_err(|e| e.into_error())?.sync_all()
            })?;
        Ok(Arc::new(Tracer {
            start: Instant::now(),
            buffer: Mutex::new(Buffer {
                buf: Vec::with_capacity(BATCH),
                tx: Some(tx),
            }),
            writer: Mutex::new(Some(writer)),
            recorded: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }))
    }

    /// Append one record (never blocks on the file).
    pub fn record(&self, op: Op, offset: u64, len: u32) {
        let t = self.start.elapsed().as_nanos() as u64;
        let mut b = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(tx) = b.tx.clone() else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        b.buf.extend_from_slice(&t.to_le_bytes());
        b.buf.extend_from_slice(&offset.to_le_bytes());
        b.buf.extend_from_slice(&len.to_le_bytes());
        b.buf.extend_from_slice(&[op as u8, 0, 0, 0]);
        self.recorded.fetch_add(1, Ordering::Relaxed);
        if b.buf.len() >= BATCH {
            let full = std::mem::replace(&mut b.buf, Vec::with_capacity(BATCH));
            let n = (full.len() / RECORD) as u64;
            match tx.try_send(full) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                    self.recorded.fetch_sub(n, Ordering::Relaxed);
                    self.dropped.fetch_add(n, Ordering::Relaxed);
                }
            }
        }
    }

    /// Records written or waiting to be.
    pub fn recorded(&self) -> u64 {
        self.recorded.load(Ordering::Relaxed)
    }

    /// Records lost because the writer fell behind or failed (or came after `finish`).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Write the buffered records, close the file and stop the writer; later records are
    /// dropped. Returns the writer's error, if it had one. Idempotent.
    pub fn finish(&self) -> io::Result<()> {
        {
            let mut b = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(tx) = b.tx.take() {
                let last = std::mem::take(&mut b.buf);
                let n = (last.len() / RECORD) as u64;
                if !last.is_empty() && tx.send(last).is_err() {
                    self.recorded.fetch_sub(n, Ordering::Relaxed);
                    self.dropped.fetch_add(n, Ordering::Relaxed);
                }
            }
        }
        let handle = self
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match handle.map(JoinHandle::join) {
            None => Ok(()),
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(io::Error::other("trace writer thread panicked")),
        }
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// A backend whose requests are recorded by a [`Tracer`] before they go to `inner`.
pub struct Traced {
    inner: Arc<dyn BlockBackend>,
    tracer: Arc<Tracer>,
}

impl Traced {
    /// Wrap `inner`; every request is recorded in `tracer`.
    pub fn new(inner: Arc<dyn BlockBackend>, tracer: Arc<Tracer>) -> Traced {
        Traced { inner, tracer }
    }
}

impl BlockBackend for Traced {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn block_sizes(&self) -> BlockSizes {
        self.inner.block_sizes()
    }
    fn can_multi_conn(&self) -> bool {
        self.inner.can_multi_conn()
    }
    fn is_read_only(&self) -> bool {
        self.inner.is_read_only()
    }
    fn is_rotational(&self) -> bool {
        self.inner.is_rotational()
    }
    fn read(&self, offset: u64, len: u32) -> BackendFuture<'_, Bytes> {
        self.tracer.record(Op::Read, offset, len);
        self.inner.read(offset, len)
    }
    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BackendFuture<'_, ()> {
        self.tracer.record(Op::Write, offset, data.len() as u32);
        self.inner.write(offset, data, fua)
    }
    fn flush(&self) -> BackendFuture<'_, ()> {
        self.tracer.record(Op::Flush, 0, 0);
        self.inner.flush()
    }
    fn trim(&self, offset: u64, len: u32) -> BackendFuture<'_, ()> {
        self.tracer.record(Op::Trim, offset, len);
        self.inner.trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u32, flags: ZeroFlags) -> BackendFuture<'_, ()> {
        self.tracer.record(Op::WriteZeroes, offset, len);
        self.inner.write_zeroes(offset, len, flags)
    }
    fn cache(&self, offset: u64, len: u32) -> BackendFuture<'_, ()> {
        self.tracer.record(Op::Cache, offset, len);
        self.inner.cache(offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryBackend;

    /// A directory removed on drop (no tempfile dependency here).
    struct TempDir(std::path::PathBuf);
    impl TempDir {
        fn new() -> TempDir {
            static N: AtomicU64 = AtomicU64::new(0);
            let p = std::env::temp_dir().join(format!(
                "ft-trace-test-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn records(path: &Path) -> Vec<(u64, u64, u32, u8)> {
        let data = std::fs::read(path).unwrap();
        assert_eq!(&data[..8], MAGIC);
        assert_eq!((data.len() - 16) % RECORD, 0);
        data[16..]
            .chunks(RECORD)
            .map(|r| {
                assert_eq!(&r[21..24], &[0, 0, 0]);
                (
                    u64::from_le_bytes(r[0..8].try_into().unwrap()),
                    u64::from_le_bytes(r[8..16].try_into().unwrap()),
                    u32::from_le_bytes(r[16..20].try_into().unwrap()),
                    r[20],
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn records_every_request_in_order_and_passes_it_through() {
        let dir = TempDir::new();
        let path = dir.0.join("t.bin");
        let tracer = Tracer::create(&path).unwrap();
        let mem: Arc<dyn BlockBackend> = Arc::new(MemoryBackend::new(1 << 20));
        let t = Traced::new(mem, Arc::clone(&tracer));
        t.write(4096, Bytes::from(vec![7u8; 8192]), false)
            .await
            .unwrap();
        assert_eq!(&t.read(8192, 4096).await.unwrap()[..], &[7u8; 4096][..]);
        t.flush().await.unwrap();
        t.trim(0, 512).await.unwrap();
        t.write_zeroes(4096, 4096, ZeroFlags::default())
            .await
            .unwrap();
        assert_eq!(tracer.recorded(), 5);
        tracer.finish().unwrap();
        let r = records(&path);
        let ops: Vec<_> = r.iter().map(|x| (x.1, x.2, x.3)).collect();
        assert_eq!(
            ops,
            vec![
                (4096, 8192, 1),
                (8192, 4096, 0),
                (0, 0, 4),
                (0, 512, 2),
                (4096, 4096, 3)
            ]
        );
        assert!(r.windows(2).all(|w| w[0].0 <= w[1].0), "times ascend");
        // After finish: dropped, not written.
        t.read(0, 512).await.unwrap();
        assert_eq!(tracer.dropped(), 1);
        assert_eq!(records(&path).len(), 5);
    }

    #[test]
    fn many_batches_are_all_written_when_the_writer_keeps_up() {
        let dir = TempDir::new();
        let path = dir.0.join("t.bin");
        let tracer = Tracer::create(&path).unwrap();
        let n = 3 * BATCH / RECORD + 17;
        for i in 0..n {
            tracer.record(Op::Read, i as u64 * 4096, 4096);
            if i % 1000 == 0 {
                // Let the writer drain so nothing is dropped.
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        tracer.finish().unwrap();
        let r = records(&path);
        assert_eq!(r.len() as u64 + tracer.dropped(), n as u64);
        assert_eq!(tracer.dropped(), 0);
        assert_eq!(r.len() as u64, tracer.recorded());
        assert!(r.iter().enumerate().all(|(i, x)| x.1 == i as u64 * 4096));
    }

    #[test]
    fn a_full_queue_drops_whole_batches_and_counts_them() {
        let dir = TempDir::new();
        let path = dir.0.join("t.bin");
        let tracer = Tracer::create(&path).unwrap();
        // Far more than the queue holds, as fast as possible: the writer may fall behind.
        let n = (QUEUE + 40) * BATCH / RECORD;
        for i in 0..n {
            tracer.record(Op::Write, i as u64, 1);
        }
        tracer.finish().unwrap();
        let written = records(&path).len() as u64;
        assert_eq!(written, tracer.recorded());
        assert_eq!(written + tracer.dropped(), n as u64);
        assert_eq!(tracer.dropped() % (BATCH / RECORD) as u64, 0);
    }
}
