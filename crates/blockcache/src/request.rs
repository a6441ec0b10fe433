//! The request paths of [`BlockCache`]: read, write (FLUSH and WRITE_ZEROES too) and waiting
//! for space.
//!
//! Read: index lookup; hits are read from flash (checked: kind, key_id = LBA, version); misses
//! are read from the backing under the blocks' stripe locks (re-checking the index there) and
//! admitted as clean records when the admission rules allow (not a sequential stream, request
//! size and offset range, `admit_reads`) and the frequency filter does (`BlockIo::try_append`:
//! at the fill line, or in a sequential stream, only blocks accessed often enough lately).
//!
//! Write, writeback mode: wait for space, then under the stripe locks append each block
//! (partial blocks read-modify-write) as a dirty record with a fresh version; FUA = append +
//! `flash.flush()`. Writethrough, writearound and the sequential bypass drop cached copies,
//! write the backing, then cache the new content clean. Invariant: a request that touches a
//! dirty block always takes the writeback path, so the cache never holds a clean entry whose
//! bytes the backing lacks; a request cancelled between the steps leaves the block uncached.
//! Every backing write here is preceded by a durable intent for its blocks (`fence`).
//! FLUSH: [`BlockIo::flush`](crate::block_io::BlockIo::flush).
//!
//! Space: a writeback write waits while dirty blocks are at `dirty_max_pct`, and any append
//! waits while flash is full or busy. Space comes from the writeback task (woken urgently), so
//! every wait is bounded by `write_stall_max_ms` from the request's start; past it the write
//! fails with EIO (counted, logged at most once a second) and a backing that stops taking
//! writeback never hangs a client. Admissions never wait.
//!
//! Threads: request tasks (tokio); flash reads complete on the engine's IO threads; the
//! writeback task is woken when writers wait for space and signals progress.
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use flashtier_backend::{check_range, BackendError};
use flashtier_flash::Location;

use crate::block_io::{flash_err, Append, BACKING_IO};
use crate::cache::BlockCache;
use crate::index::PutOutcome;
use crate::record::checked_block;
use crate::stats::{add, us_since};
use crate::tunables::Mode;

impl BlockCache {
    pub(crate) async fn do_read(&self, off: u64, len: u32) -> Result<Bytes, BackendError> {
        check_range(off, u64::from(len), self.io.size())?;
        let len = u64::from(len);
        if len == 0 {
            return Ok(Bytes::new());
        }
        let started = Instant::now();
        let s = &self.io.stats;
        add(&s.read_requests, 1);
        let bs = self.io.block_size;
        let (first, last) = (off / bs, (off + len - 1) / bs);
        add(&s.reads, last - first + 1);
        let verdict = self.admission.decide(&self.tunables, s, off, len, false);
        // A sequential stream's blocks bypass the cache unless their history admits them
        // (a loop); the other admission rules still apply to them.
        let why = match verdict {
            v if v.admit => Some(Append::ReadMiss),
            v if v.sequential && self.tunables.refusal(off, len, false).is_none() => {
                Some(Append::Sequential)
            }
            _ => None,
        };
        let seq = verdict.sequential;
        let mut out = vec![0u8; len as usize];
        let (entries, shifted) = self.io.blocks.lookup_all(first, last, seq);
        if shifted {
            add(&s.working_set_shifts, 1);
        }
        let mut pending = Vec::new();
        let mut misses = Vec::new();
        for (lba, e) in entries {
            match e {
                Some(e) => pending.push((lba, e, self.io.flash.read(Location::unpack(e.loc)))),
                None => misses.push(lba),
            }
        }
        for (lba, e, c) in pending {
            match c
                .await
                .ok()
                .and_then(|r| checked_block(&r, lba, e.version, bs))
            {
                Some(block) => {
                    add(&s.ssd_reads, 1);
                    add(&s.read_hits, 1);
                    self.copy_into(&mut out, off, lba, &block);
                }
                None => misses.push(lba),
            }
        }
        let blocks = last - first + 1;
        let missed = misses.len() as u64;
        misses.sort_unstable();
        let mut i = 0;
        while i < misses.len() {
            let mut j = i;
            while j + 1 < misses.len() && misses[j + 1] == misses[j] + 1 && j + 1 - i < 256 {
                j += 1;
            }
            self.fill_run(misses[i], misses[j], &mut out, off, why, seq)
                .await?;
            i = j + 1;
        }
        if missed == 0 {
            add(&s.read_hit_requests, 1);
            add(&s.read_hit_us, us_since(started));
        } else {
            add(&s.read_miss_requests, 1);
            if missed < blocks {
                add(&s.read_partial_requests, 1);
            }
            add(&s.read_miss_us, us_since(started));
        }
        Ok(Bytes::from(out))
    }

    async fn fill_run(
        &self,
        a: u64,
        b: u64,
        out: &mut [u8],
        off: u64,
        why: Option<Append>,
        seq: bool,
    ) -> Result<(), BackendError> {
        let s = &self.io.stats;
        let bs = self.io.block_size;
        let _stripes = self.io.lock_stripes(a, b).await;
        let cached: Vec<bool> = self.io.blocks.cached(a, b);
        let data = if cached.iter().all(|c| *c) {
            Bytes::new()
        } else {
            self.io.backing_read(a * bs, (b - a + 1) * bs).await?
        };
        for (k, lba) in (a..=b).enumerate() {
            if cached[k] {
                let blk = self.io.current_block(lba).await?;
                self.copy_into(out, off, lba, &blk);
                continue;
            }
            let blk = data.slice(k * bs as usize..(k + 1) * bs as usize);
            self.copy_into(out, off, lba, &blk);
            let admitted = match why {
                Some(why) => self.append(lba, &blk, why, None).await?.is_some(),
                None => false,
            };
            if admitted {
                add(&s.read_admits, 1);
            } else {
                add(&s.uncached_reads, 1);
                if seq {
                    add(&s.uncached_sequential_reads, 1);
                }
            }
        }
        Ok(())
    }

    fn copy_into(&self, out: &mut [u8], off: u64, lba: u64, blk: &[u8]) {
        let bs = self.io.block_size;
        let b0 = lba * bs;
        let start = b0.max(off);
        let end = (b0 + bs).min(off + out.len() as u64);
        if start < end {
            let dst = &mut out[(start - off) as usize..(end - off) as usize];
            dst.copy_from_slice(&blk[(start - b0) as usize..(end - b0) as usize]);
        }
    }

    /// New content of block `lba` after writing `data` at `off`.
    async fn block_image(&self, lba: u64, off: u64, data: &Bytes) -> Result<Bytes, BackendError> {
        let bs = self.io.block_size;
        let b0 = lba * bs;
        let end = off + data.len() as u64;
        if off <= b0 && end >= b0 + bs {
            let s = (b0 - off) as usize;
            return Ok(data.slice(s..s + bs as usize));
        }
        add(&self.io.stats.partial_writes, 1);
        let base = self.io.current_block(lba).await?;
        let mut m = BytesMut::from(&base[..]);
        let start = b0.max(off);
        let stop = (b0 + bs).min(end);
        m[(start - b0) as usize..(stop - b0) as usize]
            .copy_from_slice(&data[(start - off) as usize..(stop - off) as usize]);
        Ok(m.freeze())
    }

    pub(crate) async fn do_write(
        &self,
        off: u64,
        data: Bytes,
        fua: bool,
    ) -> Result<(), BackendError> {
        let started = Instant::now();
        let r = self.write_request(off, data, fua).await;
        // Counted whatever the outcome, before a FUA write's own flush: a flush that starts
        // after this covers every block the request appended.
        self.io.barrier.wrote();
        let r = match r {
            Ok(true) => self.io.flush().await,
            Ok(false) => Ok(()),
            Err(e) => Err(e),
        };
        add(&self.io.stats.write_us, us_since(started));
        r
    }

    /// The write; `Ok(true)`: a FUA write the cache holds, which needs a cache flush.
    async fn write_request(&self, off: u64, data: Bytes, fua: bool) -> Result<bool, BackendError> {
        let len = data.len() as u64;
        check_range(off, len, self.io.size())?;
        let s = &self.io.stats;
        add(&s.write_requests, 1);
        if fua {
            add(&s.fua_writes, 1);
        }
        if len == 0 {
            return Ok(fua);
        }
        let bs = self.io.block_size;
        let (first, last) = (off / bs, (off + len - 1) / bs);
        add(&s.writes, last - first + 1);
        let mode = self.tunables.mode();
        let verdict = self.admission.decide(&self.tunables, s, off, len, true);
        let (admit, seq) = (verdict.admit, verdict.sequential);
        let want_wb = mode == Mode::WriteBack && admit && !seq;
        // No write waits for space longer than this (see `write_stall_max_ms`).
        let deadline = Instant::now() + self.tunables.write_stall_max();
        if want_wb {
            let t = Instant::now();
            let r = self.throttle(deadline).await;
            let us = us_since(t);
            add(&s.write_wait_us, us);
            add(&s.write_wait_dirty_us, us);
            r?;
        }
        let _stripes = self.io.lock_stripes(first, last).await;
        let any_dirty = self.io.blocks.any_dirty(first, last);
        if want_wb || any_dirty {
            for lba in first..=last {
                let blk = self.block_image(lba, off, &data).await?;
                if let Some(o) = self
                    .append(lba, &blk, Append::Dirty, Some(deadline))
                    .await?
                {
                    if o.hit {
                        add(&s.write_hits, 1);
                    }
                    if o.was_dirty {
                        add(&s.dirty_write_hits, 1);
                    }
                }
            }
            return Ok(fua);
        }
        // Through or around: drop the cached copies, write the backing, then cache the new
        // content. A request cancelled or failing between the steps leaves the block
        // uncached, never a clean copy the backing no longer holds.
        let mut images = Vec::new();
        for lba in first..=last {
            let cached = self.io.blocks.contains(lba);
            let b0 = lba * bs;
            let full = off <= b0 && off + len >= b0 + bs;
            if cached || (mode == Mode::WriteThrough && admit && !seq && full) {
                images.push((lba, cached, self.block_image(lba, off, &data).await?));
            } else {
                add(&s.uncached_writes, 1);
                if seq {
                    add(&s.uncached_sequential_writes, 1);
                }
            }
        }
        // Clean: the request holds the stripe locks and saw no dirty block.
        let cached = images.iter().filter(|i| i.1).map(|i| i.0);
        self.io
            .blocks
            .uncache(cached, |loc| self.io.flash.mark_dead(Location::unpack(loc)));
        // The intent is durable before the backing changes, so a crash can never bring
        // back an older record of these blocks as current (`fence`).
        let d = &self.durable;
        d.fence
            .intent(d.log(), &self.io.blocks, &self.io.flash, first, last)
            .await
            .map_err(|e| BackendError::Io(std::io::Error::other(e)))?;
        self.io.backing_write(off, data, fua).await?;
        for (lba, cached, blk) in images {
            if cached {
                add(&s.write_hits, 1);
            }
            // Flash full: the block stays uncached.
            let _ = self.append(lba, &blk, Append::Written, None).await?;
        }
        // A FUA write reached the backing with FUA: nothing for the cache to flush.
        Ok(false)
    }

    pub(crate) async fn do_flush(&self) -> Result<(), BackendError> {
        add(&self.io.stats.flushes, 1);
        self.io.flush().await
    }

    pub(crate) async fn do_zeroes(
        &self,
        off: u64,
        len: u32,
        fua: bool,
    ) -> Result<(), BackendError> {
        check_range(off, u64::from(len), self.io.size())?;
        let mut pos = 0u64;
        let len = u64::from(len);
        while pos < len {
            let n = (len - pos).min(BACKING_IO);
            self.do_write(off + pos, Bytes::from(vec![0u8; n as usize]), false)
                .await?;
            pos += n;
        }
        if fua {
            self.do_flush().await?;
        }
        Ok(())
    }

    /// Append block `lba` (if `why` admits it: `BlockIo::try_append`). With a `wait` deadline
    /// (writes) it retries while flash is full or busy and fails with EIO at the deadline;
    /// without one a full flash returns `Ok(None)` (admissions).
    pub(crate) async fn append(
        &self,
        lba: u64,
        data: &[u8],
        why: Append,
        wait: Option<Instant>,
    ) -> Result<Option<PutOutcome>, BackendError> {
        let mut stalled = false;
        let mut waiting: Option<Instant> = None;
        let out = loop {
            match self.io.try_append(
                &self.durable.fence,
                lba,
                data,
                why,
                self.tunables.fill_moves(),
                self.tunables.door_pct(),
            ) {
                Ok(out) => break Ok(out),
                Err(e @ (flashtier_flash::Error::Busy(_) | flashtier_flash::Error::NoSpace)) => {
                    let Some(deadline) = wait else {
                        // A request that never waits for space: the block stays uncached.
                        add(&self.io.stats.uncached_flash_full, 1);
                        break Ok(None);
                    };
                    if self.stopping.load(Ordering::Acquire) {
                        break Err(BackendError::Shutdown);
                    }
                    if Instant::now() >= deadline {
                        break Err(self.stall_timeout("flash stayed full of dirty blocks"));
                    }
                    // Busy: the stream's chunk writes are all in flight, which only time
                    // cures. NoSpace: flash is full, and space comes from writeback.
                    waiting.get_or_insert_with(Instant::now);
                    let (cause, slept) = if matches!(e, flashtier_flash::Error::NoSpace) {
                        if !stalled {
                            stalled = true;
                            add(&self.io.stats.write_stalls, 1);
                        }
                        self.writeback.wake_urgently();
                        // Reclaim's optional copies (fill moves) yield to a waiting writer.
                        self.io
                            .blocks
                            .writer_waited(self.io.capacity_blocks, self.tunables.fill_floor_pct());
                        let slept = Instant::now();
                        // Woken when reclaim frees a segment; the poll bounds a missed wake.
                        self.io.blocks.space_wait(Duration::from_millis(2)).await;
                        (&self.io.stats.write_wait_nospace_us, slept)
                    } else {
                        let slept = Instant::now();
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        (&self.io.stats.write_wait_busy_us, slept)
                    };
                    add(cause, us_since(slept));
                }
                Err(e) => break Err(flash_err(e)),
            }
        };
        // Every way out counts the time waited, so the per-cause counters never exceed it.
        if let Some(t) = waiting {
            add(&self.io.stats.write_wait_us, us_since(t));
        }
        out
    }

    /// Wait while dirty blocks are at `dirty_max_pct`, until `deadline` (then EIO).
    pub(crate) async fn throttle(&self, deadline: Instant) -> Result<(), BackendError> {
        let mut stalled = false;
        loop {
            let (_, _, max_pct) = self.tunables.dirty_pcts();
            let max = (self.io.capacity_blocks * max_pct / 100).max(1);
            if self.dirty_blocks() < max || self.stopping.load(Ordering::Acquire) {
                return Ok(());
            }
            if !stalled {
                stalled = true;
                add(&self.io.stats.write_stalls, 1);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.stall_timeout("dirty blocks stayed at dirty_max_pct"));
            }
            self.writeback.wake_urgently();
            self.writeback
                .wait_progress(left.min(Duration::from_millis(20)))
                .await;
        }
    }

    /// A write waited `write_stall_max_ms` for space: count it, log (at most once a second,
    /// with the count and the last error), and fail the write with EIO.
    fn stall_timeout(&self, why: &str) -> BackendError {
        add(&self.io.stats.write_stall_timeouts, 1);
        let max = self.tunables.write_stall_max();
        let msg = format!(
            "write failed after waiting {} ms for space: {why} (writeback cannot progress; \
             last error: {})",
            max.as_millis(),
            self.last_error().unwrap_or_else(|| "none".into())
        );
        if let Some(n) = self.stall_log.event() {
            log::error!("{msg} ({n} such writes since the last line)");
        }
        BackendError::Io(std::io::Error::other(msg))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering::Relaxed;
    use std::sync::Arc;

    use bytes::Bytes;
    use flashtier_backend::{BlockBackend, MemoryBackend};
    use flashtier_flash::{Device, MemoryDevice};

    use crate::{BlockCache, BlockCacheConfig};

    fn open(tunables: &[(&str, &str)]) -> Arc<BlockCache> {
        let device: Arc<dyn Device> = Arc::new(MemoryDevice::new("space", 64 << 20));
        let backing: Arc<dyn BlockBackend> = Arc::new(MemoryBackend::new(8 << 20));
        let cfg = BlockCacheConfig {
            tunables: tunables
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        };
        BlockCache::open_devices(vec![device], backing, cfg).expect("open cache")
    }

    /// Without writeback, dirty blocks stop at `dirty_max_pct`: the next write waits the
    /// stall bound and fails; once the writeback task runs, writes go through again.
    #[tokio::test]
    async fn writes_wait_at_dirty_max_pct_until_writeback_makes_room() {
        let cache = open(&[
            ("dirty_low_pct", "1"),
            ("dirty_high_pct", "2"),
            ("dirty_max_pct", "2"),
            ("write_stall_max_ms", "100"),
            ("flush_period_s", "0"),
            // The blocks are written in order: no sequential bypass.
            ("seq_threshold_kb", "0"),
        ]);
        let max = (cache.capacity_blocks() * 2 / 100).max(1);
        let block = Bytes::from(vec![7u8; 4096]);
        for lba in 0..max {
            cache
                .do_write(lba * 4096, block.clone(), false)
                .await
                .expect("under the limit");
        }
        assert_eq!(cache.dirty_blocks(), max);
        let started = std::time::Instant::now();
        let err = cache
            .do_write(max * 4096, block.clone(), false)
            .await
            .expect_err("at dirty_max_pct with no writeback");
        assert!(
            started.elapsed() >= std::time::Duration::from_millis(100),
            "{err}"
        );
        let stats = &cache.io.stats;
        assert_eq!(stats.write_stalls.load(Relaxed), 1);
        assert_eq!(stats.write_stall_timeouts.load(Relaxed), 1);
        // The wait is counted under its cause: dirty_max_pct, not a full flash.
        assert!(stats.write_wait_dirty_us.load(Relaxed) >= 100_000);
        assert_eq!(stats.write_wait_nospace_us.load(Relaxed), 0);
        assert_eq!(
            cache.dirty_blocks(),
            max,
            "the refused write left nothing dirty"
        );
        let task = cache.start();
        cache
            .do_write(max * 4096, block, false)
            .await
            .expect("writeback made room");
        cache.interrupt();
        task.await.expect("writeback task");
    }
}
