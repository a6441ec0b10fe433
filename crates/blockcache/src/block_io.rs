//! The primitives the read and write paths share: stripe locks, the versioned record
//! append, checked reads of cached blocks, and backing I/O with retries.
//!
//! Invariants:
//! - Stripe locks (1024 async mutexes by LBA) are always taken in ascending order, so two
//!   requests never deadlock; a request holds its blocks' stripes across backing I/O and
//!   the cache update.
//! - Versions are taken and the index updated under the index mutex, in the same critical
//!   section as the flash append, so the *clean watermark* (every version at or below it is
//!   on the backing or superseded) is exact.
//! - A cached read is checked (kind, key_id = LBA, version, length); a clean block that
//!   cannot be read is dropped from the index, a dirty one is an error.
//!
//! Threads: request tasks and the shutdown path (stripe locks); completions arrive from the
//! engine's IO threads.
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use flashtier_backend::{BackendError, BlockBackend};
use flashtier_flash::Location;

use crate::cache::{flash_err, BlockCache, BACKING_IO, STREAM_DATA, STRIPES};
use crate::index::{Entry, PutOutcome};
use crate::record::{checked_block, BlockRecord};
use crate::retry;
use crate::stats::add;

impl BlockCache {
    /// Every stripe lock (a clean shutdown).
    pub(crate) async fn lock_all_stripes(&self) -> Vec<tokio::sync::MutexGuard<'_, ()>> {
        self.lock_stripes(0, STRIPES - 1).await
    }

    pub(crate) async fn lock_stripes(
        &self,
        first: u64,
        last: u64,
    ) -> Vec<tokio::sync::MutexGuard<'_, ()>> {
        let mut ids: Vec<u64> = if last - first + 1 >= STRIPES {
            (0..STRIPES).collect()
        } else {
            (first..=last).map(|l| l % STRIPES).collect()
        };
        ids.sort_unstable();
        ids.dedup();
        let mut guards = Vec::with_capacity(ids.len());
        for i in ids {
            guards.push(self.stripes[i as usize].lock().await);
        }
        guards
    }

    /// Append a block record. With a `wait` deadline (writes) it retries while flash is full
    /// or busy and fails with EIO at the deadline; without one a full flash returns
    /// `Ok(None)` (admissions).
    pub(crate) async fn append(
        &self,
        lba: u64,
        data: &[u8],
        dirty: bool,
        wait: Option<Instant>,
    ) -> Result<Option<PutOutcome>, BackendError> {
        let mut stalled = false;
        loop {
            let res = {
                let mut ix = self.shared.index.lock();
                // At capacity a new block takes the place of the clean block the CLOCK hand
                // picks; with none to give (all dirty), an admission is refused and a
                // write goes ahead (dirty blocks are bounded by dirty_max_pct).
                if !ix.map.contains_key(lba) && ix.map.len() as u64 >= self.capacity_blocks {
                    match ix.evict_clean() {
                        Some((_, e)) => {
                            self.flash.mark_dead(Location::unpack(e.loc));
                            add(&self.shared.stats.capacity_evictions, 1);
                        }
                        None if !dirty => return Ok(None),
                        None => {}
                    }
                }
                let v = ix.next_version;
                let record = BlockRecord::Block {
                    lba,
                    version: v,
                    dirty,
                    data,
                };
                let r = self.flash.append(STREAM_DATA, &record.write());
                match r {
                    Ok(loc) => {
                        ix.next_version += 1;
                        let out = ix.put(lba, loc.pack(), v, dirty);
                        if let Some(d) = out.dead {
                            self.flash.mark_dead(Location::unpack(d));
                        }
                        Ok(out)
                    }
                    Err(e) => Err(e),
                }
            };
            match res {
                Ok(out) => {
                    add(&self.shared.stats.ssd_writes, 1);
                    return Ok(Some(out));
                }
                Err(e @ (flashtier_flash::Error::Busy(_) | flashtier_flash::Error::NoSpace)) => {
                    let Some(deadline) = wait else {
                        return Ok(None);
                    };
                    if self.stopping.load(Ordering::Acquire) {
                        return Err(BackendError::Shutdown);
                    }
                    if Instant::now() >= deadline {
                        return Err(self.stall_timeout("flash stayed full of dirty blocks"));
                    }
                    // Busy: the stream's chunk writes are all in flight, which only time
                    // cures. NoSpace: flash is full, and space comes from writeback.
                    if matches!(e, flashtier_flash::Error::NoSpace) {
                        if !stalled {
                            stalled = true;
                            add(&self.shared.stats.write_stalls, 1);
                        }
                        self.urgent.store(true, Ordering::Release);
                        self.wb_wake.notify_one();
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                Err(e) => return Err(flash_err(e)),
            }
        }
    }

    /// Read a cached block. `Ok(None)`: the entry moved or vanished (look again); a clean
    /// block that cannot be read is reported as `Ok(None)` after removing it.
    pub(crate) async fn read_cached(
        &self,
        lba: u64,
        e: Entry,
    ) -> Result<Option<Bytes>, BackendError> {
        let res = self.flash.read(Location::unpack(e.loc)).await;
        let block = match &res {
            Ok(r) => checked_block(r, lba, e.version, self.block_size),
            Err(_) => None,
        };
        match (block, res) {
            (Some(block), _) => {
                add(&self.shared.stats.ssd_reads, 1);
                Ok(Some(block))
            }
            (None, other) => {
                let mut ix = self.shared.index.lock();
                match ix.map.get(lba) {
                    Some(now) if now.loc == e.loc && now.version == e.version => {
                        add(&self.shared.stats.ssd_read_errors, 1);
                        if now.dirty {
                            let why = match other {
                                Err(err) => err.to_string(),
                                Ok(_) => "record mismatch".into(),
                            };
                            return Err(BackendError::Io(std::io::Error::other(format!(
                                "dirty block {lba} unreadable on the cache device: {why}"
                            ))));
                        }
                        ix.remove_at(lba, e.loc);
                        self.flash.mark_dead(Location::unpack(e.loc));
                        Ok(None)
                    }
                    _ => Ok(None),
                }
            }
        }
    }

    /// The current content of one block (cache, else backing). Caller holds its stripe lock.
    pub(crate) async fn current_block(&self, lba: u64) -> Result<Bytes, BackendError> {
        for _ in 0..16 {
            let e = self.shared.index.lock().lookup(lba);
            match e {
                Some(e) => {
                    if let Some(b) = self.read_cached(lba, e).await? {
                        return Ok(b);
                    }
                }
                None => {
                    return self
                        .backing_read(lba * self.block_size, self.block_size)
                        .await
                }
            }
        }
        Err(BackendError::Io(std::io::Error::other("block kept moving")))
    }

    /// Read `len` bytes of the backing at `off`, in pieces of at most [`BACKING_IO`], each
    /// under the backing retry policy.
    pub(crate) async fn backing_read(&self, off: u64, len: u64) -> Result<Bytes, BackendError> {
        let mut out = BytesMut::with_capacity(len as usize);
        let mut pos = off;
        while pos < off + len {
            let n = (off + len - pos).min(BACKING_IO);
            let stats = &self.shared.stats;
            let piece = self
                .with_retries("backing read", &stats.disk_reads, || {
                    self.backing.read(pos, n as u32)
                })
                .await?;
            out.extend_from_slice(&piece);
            pos += n;
        }
        Ok(out.freeze())
    }

    /// Write `data` to the backing at `off`, in pieces of at most [`BACKING_IO`], each under
    /// the backing retry policy.
    pub(crate) async fn backing_write(
        &self,
        off: u64,
        data: Bytes,
        fua: bool,
    ) -> Result<(), BackendError> {
        let mut pos = 0u64;
        let len = data.len() as u64;
        while pos < len {
            let n = (len - pos).min(BACKING_IO);
            let piece = data.slice(pos as usize..(pos + n) as usize);
            let stats = &self.shared.stats;
            self.with_retries("backing write", &stats.disk_writes, || {
                self.backing.write(off + pos, piece.clone(), fua)
            })
            .await?;
            pos += n;
        }
        self.backing_dirty.store(true, Ordering::Release);
        Ok(())
    }

    /// One backing request under the retry policy of `retry`: each try counted in
    /// `requests`, each failure in `backing_errors` and `last_error`.
    async fn with_retries<T, F>(
        &self,
        what: &str,
        requests: &AtomicU64,
        mut request: impl FnMut() -> F,
    ) -> Result<T, BackendError>
    where
        F: Future<Output = Result<T, BackendError>>,
    {
        let mut failures = 0;
        loop {
            add(requests, 1);
            match request().await {
                Ok(v) => return Ok(v),
                Err(e) if failures < retry::REQUEST_RETRIES && retry::retriable(&e) => {
                    failures += 1;
                    add(&self.shared.stats.backing_errors, 1);
                    *self.last_error.lock() = Some(format!("{what}: {e}"));
                    tokio::time::sleep(retry::backoff(failures)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A write waited `write_stall_max_ms` for space: count it, log (at most once a second,
    /// with the count), remember it as the last error, and fail the write with EIO.
    pub(crate) fn stall_timeout(&self, why: &str) -> BackendError {
        add(&self.shared.stats.write_stall_timeouts, 1);
        let max = self.tunables.write_stall_max();
        let msg = format!(
            "write failed after waiting {} ms for space: {why} (writeback cannot progress; \
             last error: {})",
            max.as_millis(),
            self.last_error().unwrap_or_else(|| "none".into())
        );
        let mut log = self.stall_log.lock();
        log.1 += 1;
        if log.0.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            log::error!("{msg} ({} such writes since the last line)", log.1);
            *log = (Some(Instant::now()), 0);
        }
        drop(log);
        BackendError::Io(std::io::Error::other(msg))
    }

    pub(crate) fn seq_run(&self, off: u64, len: u64) -> bool {
        let thr = self.tunables.seq_threshold();
        let run = self.seq.lock().observe(off, len);
        thr != 0 && run >= thr
    }
}
