//! [`BlockIo`]: what the request paths, writeback and shutdown do to blocks — stripe locks, the
//! versioned record append, the checked read of a cached block, and backing I/O under the one
//! retry policy (`retry`).
//!
//! Invariants: stripe locks (1024 async mutexes by LBA) are taken in ascending order, and a
//! request holds its blocks' stripes across backing I/O and the cache update. Versions are
//! taken and the index updated in the same index critical section as the flash append, so the
//! clean watermark is exact. A clean block that cannot be read is dropped from the index; a
//! dirty one is an error.
//!
//! Lock order: stripes, then the index mutex, then `last_error`. Threads: request tasks, the
//! writeback task and shutdown; flash completions arrive on the engine's IO threads.
use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use flashtier_backend::{BackendError, BlockBackend};
use flashtier_flash::{Flash, Location};
use parking_lot::Mutex;

use crate::barrier::Barrier;
use crate::blocks::Blocks;
use crate::fence::Fence;
use crate::index::{Entry, Index, PutOutcome};
use crate::meta_log::STREAM_DATA;
use crate::record::{checked_block, BlockRecord};
use crate::retry;
use crate::stats::{add, us_since, BlockStats};

/// Stripe locks (by LBA modulo this).
pub(crate) const STRIPES: u64 = 1024;
/// Largest single backing request the cache issues.
pub(crate) const BACKING_IO: u64 = 1 << 20;

/// A flash engine error as the backend's IO error (what an NBD client sees).
pub(crate) fn flash_err(e: flashtier_flash::Error) -> BackendError {
    BackendError::Io(std::io::Error::other(e.to_string()))
}

/// Why a block is appended, which decides whether an uncached block is admitted
/// ([`BlockIo::try_append`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Append {
    /// A write in writeback mode (a dirty record): always.
    Dirty,
    /// The new content of a block written through or around the cache (clean): always.
    Written,
    /// A read miss: through the frequency filter.
    ReadMiss,
    /// A read miss in a sequential stream past `seq_threshold_kb`: only a block accessed
    /// before lately, then through the frequency filter.
    Sequential,
}

/// Blocks on flash and on the backing.
pub(crate) struct BlockIo {
    /// The cached blocks, shared with the reclaim handler.
    pub(crate) blocks: Arc<Blocks>,
    /// The cache's counters.
    pub(crate) stats: Arc<BlockStats>,
    pub(crate) flash: Arc<Flash>,
    pub(crate) backing: Arc<dyn BlockBackend>,
    /// Cache block size in bytes (a power of two).
    pub(crate) block_size: u64,
    /// Blocks on the backing.
    pub(crate) nblocks: u64,
    /// Blocks the cache holds at most (records that fit beyond reclaim's reserve).
    pub(crate) capacity_blocks: u64,
    stripes: Vec<tokio::sync::Mutex<()>>,
    /// Group commit of client FLUSHes (what the last cache and backing flushes covered).
    pub(crate) barrier: Barrier,
    /// The last backing or cache error seen.
    last_error: Mutex<Option<String>>,
}

impl BlockIo {
    pub(crate) fn new(
        blocks: Arc<Blocks>,
        stats: Arc<BlockStats>,
        flash: Arc<Flash>,
        backing: Arc<dyn BlockBackend>,
        block_size: u64,
        capacity_blocks: u64,
    ) -> Self {
        let nblocks = backing.size() / block_size;
        blocks.set_capacity(capacity_blocks);
        BlockIo {
            blocks,
            stats,
            flash,
            backing,
            block_size,
            nblocks,
            capacity_blocks,
            stripes: (0..STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
            barrier: Barrier::default(),
            last_error: Mutex::new(None),
        }
    }

    /// Size of the device in bytes.
    pub(crate) fn size(&self) -> u64 {
        self.nblocks * self.block_size
    }

    /// Dirty blocks now.
    pub(crate) fn dirty_blocks(&self) -> u64 {
        self.blocks.dirty()
    }

    /// Remember `msg` as the last error (reported by `/status` and stall errors).
    pub(crate) fn note_error(&self, msg: String) {
        *self.last_error.lock() = Some(msg);
    }

    /// The last backing or cache error, if any.
    pub(crate) fn last_error(&self) -> Option<String> {
        self.last_error.lock().clone()
    }

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

    /// Append block `lba` once, if `why` admits it (see [`Append`]). At capacity the new block
    /// takes the place of the clean block the CLOCK hand picks; with none to give (all dirty)
    /// a clean block is refused with `Ok(None)` and a write goes ahead (dirty blocks are
    /// bounded by `dirty_max_pct`). A full or busy flash is the engine's error; waiting for
    /// space is the caller's policy. `fence` is told the block has a record; each append
    /// grants reclaim `fill_moves` (none during a fill hold: `Blocks::writer_waited`).
    pub(crate) fn try_append(
        &self,
        fence: &Fence,
        lba: u64,
        data: &[u8],
        why: Append,
        fill_moves: u64,
        door_pct: u64,
    ) -> Result<Option<PutOutcome>, flashtier_flash::Error> {
        let dirty = why == Append::Dirty;
        let out = self.blocks.locked(|index| {
            if matches!(why, Append::Dirty | Append::Written) {
                index.written(lba);
            }
            let new = !index.contains(lba);
            if new && !self.admits(index, lba, why, door_pct) {
                add(&self.stats.admit_refusals, 1);
                return Ok(None);
            }
            if new && index.len() as u64 >= self.capacity_blocks {
                match index.evict_clean() {
                    Some((_, e)) => {
                        self.flash.mark_dead(Location::unpack(e.loc));
                        add(&self.stats.capacity_evictions, 1);
                    }
                    None if !dirty => return Ok(None),
                    None => {}
                }
            }
            fence.saw(lba);
            let (loc, version) = index.stamp(|version| {
                let record = BlockRecord::Block {
                    lba,
                    version,
                    dirty,
                    data,
                };
                let loc = self.flash.append(STREAM_DATA, &record.write())?;
                Ok::<_, flashtier_flash::Error>((loc, version))
            })?;
            let out = index.put(lba, loc.pack(), version, dirty);
            if !dirty && !out.hit && index.admitted(lba) {
                add(&self.stats.history_hits, 1);
            }
            if dirty && out.hit {
                // A rewrite is an access too (as LRU and ARC count it).
                index.touch(lba);
            }
            if let Some(dead) = out.dead {
                self.flash.mark_dead(Location::unpack(dead));
            }
            Ok(Some((out, index.len() as u64)))
        })?;
        let Some((out, cached)) = out else {
            return Ok(None);
        };
        add(&self.stats.ssd_writes, 1);
        if self
            .blocks
            .aged_one(self.capacity_blocks, fill_moves, cached)
        {
            add(&self.stats.fill_moves_withheld, fill_moves);
        }
        Ok(Some(out))
    }

    /// The frequency filter (TinyLFU) for an uncached block: writes always; a read miss below
    /// the fill line always unless the door is shut (`admit_door_pct`, `Blocks::door_shut`)
    /// and the sketch did not see `lba` accessed before this miss; at the fill line only if
    /// the sketch saw `lba` accessed more often lately than the clean block the CLOCK hand
    /// would evict next; a sequential read miss only if it was accessed before lately (a
    /// loop, not a one-time scan), then as a read miss.
    fn admits(&self, index: &mut Index, lba: u64, why: Append, door_pct: u64) -> bool {
        let seen = index.frequency(lba);
        match why {
            Append::Dirty | Append::Written => return true,
            Append::Sequential if seen < 2 => return false,
            Append::ReadMiss | Append::Sequential => {}
        }
        let cached = index.len() as u64;
        if cached < self.blocks.fill_line() {
            // The lookup of this miss is counted: below 2, the block was not seen before.
            if seen < 2
                && self
                    .blocks
                    .door_shut(cached, self.capacity_blocks, door_pct)
            {
                add(&self.stats.door_refusals, 1);
                return false;
            }
            return true;
        }
        index
            .next_victim()
            .is_none_or(|(victim, _)| seen > index.frequency(victim))
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
                add(&self.stats.ssd_reads, 1);
                Ok(Some(block))
            }
            (None, other) => {
                let stats = &self.stats;
                self.blocks.locked(|index| match index.get(lba) {
                    Some(now) if now == e => {
                        add(&stats.ssd_read_errors, 1);
                        if now.dirty {
                            let why = match other {
                                Err(err) => err.to_string(),
                                Ok(_) => "record mismatch".into(),
                            };
                            let at = Location::unpack(e.loc);
                            return Err(BackendError::Io(std::io::Error::other(format!(
                                "dirty block {lba} unreadable on the cache device (record at \
                                 {at}): {why}"
                            ))));
                        }
                        index.remove_at(lba, e.loc);
                        self.flash.mark_dead(Location::unpack(e.loc));
                        Ok(None)
                    }
                    _ => Ok(None),
                })
            }
        }
    }

    /// The current content of one block (cache, else backing). Caller holds its stripe lock.
    pub(crate) async fn current_block(&self, lba: u64) -> Result<Bytes, BackendError> {
        for _ in 0..16 {
            let e = self.blocks.lookup(lba);
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
            let stats = &self.stats;
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
            let stats = &self.stats;
            self.with_retries("backing write", &stats.disk_writes, || {
                self.backing.write(off + pos, piece.clone(), fua)
            })
            .await?;
            pos += n;
        }
        self.barrier.wrote_backing();
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
                    add(&self.stats.backing_errors, 1);
                    self.note_error(format!("{what}: {e}"));
                    tokio::time::sleep(retry::backoff(failures)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Persist every client write that returned before this call (`barrier`: a FLUSH that
    /// finds them covered by another's flush, or arrives during one, shares it): the flash
    /// engine's buffers and device, and the backing if a write reached it around the cache.
    pub(crate) async fn flush(&self) -> Result<(), BackendError> {
        let s = &self.stats;
        let started = Instant::now();
        let r = self
            .barrier
            .sync(
                || async {
                    let t = Instant::now();
                    let r = self.flash.flush().await.map_err(flash_err);
                    add(&s.flush_cache_us, us_since(t));
                    r
                },
                || async {
                    let t = Instant::now();
                    let r = self.backing.flush().await;
                    add(&s.flush_backing_us, us_since(t));
                    r
                },
            )
            .await;
        if let Ok(run) = r {
            add(&s.flush_cache_syncs, u64::from(run.cache));
            add(&s.backing_flushes, u64::from(run.backing));
        }
        add(&s.flush_us, us_since(started));
        r.map(|_| ())
    }
}
