//! The write path, FLUSH and WRITE_ZEROES.
//!
//! - writeback: wait while dirty blocks are at `dirty_max_pct`, then under the stripe locks
//!   each block (partial blocks read-modify-write) is appended as a dirty record with a
//!   fresh version; FUA = append + `flash.flush()`. Waiting for space (dirty limit, or flash
//!   full of dirty blocks) is bounded by `write_stall_max_ms` from the request's start; past
//!   it the write fails with EIO (`write_stall_timeouts`, logged), so a backing that stops
//!   taking writeback never hangs a client.
//! - writethrough/writearound, sequential bypass: cached copies are dropped from the index,
//!   the backing is written, then the new content is cached as clean records (writethrough
//!   also admits full blocks). A request that touches a dirty block always takes the
//!   writeback path, so the cache never holds a clean entry whose bytes the backing lacks;
//!   a request cancelled between the steps leaves the block uncached.
//! - FLUSH: `flash.flush()`, plus a backing flush if a write reached the backing since the
//!   last one.
//!
//! Threads: request tasks (tokio); the writeback task is woken when writers wait for space.
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use flashtier_backend::{check_range, BackendError, BlockBackend};
use flashtier_flash::Location;

use crate::cache::{flash_err, BlockCache, BACKING_IO};
use crate::stats::add;
use crate::tunables::Mode;

impl BlockCache {
    /// Wait while dirty blocks are at `dirty_max_pct`, until `deadline` (then EIO).
    async fn throttle(&self, deadline: Instant) -> Result<(), BackendError> {
        let mut stalled = false;
        loop {
            let (_, _, max_pct) = self.tunables.dirty_pcts();
            let max = (self.capacity_blocks * max_pct / 100).max(1);
            if self.dirty_blocks() < max || self.stopping.load(Ordering::Acquire) {
                return Ok(());
            }
            if !stalled {
                stalled = true;
                add(&self.shared.stats.write_stalls, 1);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.stall_timeout("dirty blocks stayed at dirty_max_pct"));
            }
            self.urgent.store(true, Ordering::Release);
            self.wb_wake.notify_one();
            let nap = left.min(Duration::from_millis(20));
            let _ = tokio::time::timeout(nap, self.progress.notified()).await;
        }
    }

    /// New content of block `lba` after writing `data` at `off`.
    async fn block_image(&self, lba: u64, off: u64, data: &Bytes) -> Result<Bytes, BackendError> {
        let bs = self.block_size;
        let b0 = lba * bs;
        let end = off + data.len() as u64;
        if off <= b0 && end >= b0 + bs {
            let s = (b0 - off) as usize;
            return Ok(data.slice(s..s + bs as usize));
        }
        add(&self.shared.stats.partial_writes, 1);
        let base = self.current_block(lba).await?;
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
        let len = data.len() as u64;
        check_range(off, len, self.nblocks * self.block_size)?;
        let s = &self.shared.stats;
        add(&s.write_requests, 1);
        if fua {
            add(&s.fua_writes, 1);
        }
        if len == 0 {
            return if fua { self.do_flush().await } else { Ok(()) };
        }
        let bs = self.block_size;
        let (first, last) = (off / bs, (off + len - 1) / bs);
        add(&s.writes, last - first + 1);
        let mode = self.tunables.mode();
        let seq = self.seq_run(off, len);
        let admit = self.admission(off, len, true, seq);
        let want_wb = mode == Mode::WriteBack && admit && !seq;
        // No write waits for space longer than this (see `write_stall_max_ms`).
        let deadline = Instant::now() + self.tunables.write_stall_max();
        if want_wb {
            self.throttle(deadline).await?;
        }
        let _g = self.lock_stripes(first, last).await;
        let any_dirty = {
            let ix = self.shared.index.lock();
            (first..=last).any(|l| ix.map.get(l).is_some_and(|e| e.dirty))
        };
        if want_wb || any_dirty {
            for lba in first..=last {
                let blk = self.block_image(lba, off, &data).await?;
                if let Some(o) = self.append(lba, &blk, true, Some(deadline)).await? {
                    if o.hit {
                        add(&s.write_hits, 1);
                    }
                    if o.was_dirty {
                        add(&s.dirty_write_hits, 1);
                    }
                }
            }
            if fua {
                self.flash.flush().await.map_err(flash_err)?;
            }
            return Ok(());
        }
        // Through or around: drop the cached copies, write the backing, then cache the new
        // content. A request cancelled or failing between the steps leaves the block
        // uncached, never a clean copy the backing no longer holds.
        let mut images = Vec::new();
        for lba in first..=last {
            let cached = self.shared.index.lock().map.contains_key(lba);
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
        {
            let mut ix = self.shared.index.lock();
            for (lba, cached, _) in &images {
                if !*cached {
                    continue;
                }
                // Clean: the request holds the stripe locks and saw no dirty block.
                if let Some(e) = ix.map.get(*lba) {
                    ix.remove_at(*lba, e.loc);
                    self.flash.mark_dead(Location::unpack(e.loc));
                }
            }
        }
        self.backing_write(off, data, fua).await?;
        for (lba, cached, blk) in images {
            if cached {
                add(&s.write_hits, 1);
            }
            // Flash full: the block stays uncached.
            let _ = self.append(lba, &blk, false, None).await?;
        }
        Ok(())
    }

    pub(crate) async fn do_flush(&self) -> Result<(), BackendError> {
        add(&self.shared.stats.flushes, 1);
        self.flash.flush().await.map_err(flash_err)?;
        if self.backing_dirty.swap(false, Ordering::AcqRel) {
            if let Err(e) = self.backing.flush().await {
                self.backing_dirty.store(true, Ordering::Release);
                return Err(e);
            }
        }
        Ok(())
    }

    pub(crate) async fn do_zeroes(
        &self,
        off: u64,
        len: u32,
        fua: bool,
    ) -> Result<(), BackendError> {
        check_range(off, u64::from(len), self.nblocks * self.block_size)?;
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
}
