//! The write path, FLUSH and WRITE_ZEROES.
//!
//! Writeback mode: wait for space (`space`), then under the stripe locks append each block
//! (partial blocks read-modify-write) as a dirty record with a fresh version; FUA = append +
//! `flash.flush()`. Writethrough, writearound and the sequential bypass drop cached copies,
//! write the backing, then cache the new content clean. Invariant: a request that touches a
//! dirty block always takes the writeback path, so the cache never holds a clean entry whose
//! bytes the backing lacks; a request cancelled between the steps leaves the block uncached.
//! Every backing write here is preceded by a durable intent for its blocks (`fence`).
//! FLUSH: [`BlockIo::flush`](crate::block_io::BlockIo::flush).
//!
//! Threads: request tasks (tokio); the writeback task is woken when writers wait for space.
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use flashtier_backend::{check_range, BackendError};
use flashtier_flash::Location;

use crate::cache::{flash_err, BlockCache, BACKING_IO};
use crate::stats::add;
use crate::tunables::Mode;

impl BlockCache {
    /// New content of block `lba` after writing `data` at `off`.
    async fn block_image(&self, lba: u64, off: u64, data: &Bytes) -> Result<Bytes, BackendError> {
        let bs = self.io.block_size;
        let b0 = lba * bs;
        let end = off + data.len() as u64;
        if off <= b0 && end >= b0 + bs {
            let s = (b0 - off) as usize;
            return Ok(data.slice(s..s + bs as usize));
        }
        add(&self.io.shared.stats.partial_writes, 1);
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
        let len = data.len() as u64;
        check_range(off, len, self.io.size())?;
        let s = &self.io.shared.stats;
        add(&s.write_requests, 1);
        if fua {
            add(&s.fua_writes, 1);
        }
        if len == 0 {
            return if fua { self.do_flush().await } else { Ok(()) };
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
            self.throttle(deadline).await?;
        }
        let _stripes = self.io.lock_stripes(first, last).await;
        let any_dirty = {
            let index = self.io.shared.index.lock();
            (first..=last).any(|l| index.map.get(l).is_some_and(|e| e.dirty))
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
                self.io.flash.flush().await.map_err(flash_err)?;
            }
            return Ok(());
        }
        // Through or around: drop the cached copies, write the backing, then cache the new
        // content. A request cancelled or failing between the steps leaves the block
        // uncached, never a clean copy the backing no longer holds.
        let mut images = Vec::new();
        for lba in first..=last {
            let cached = self.io.shared.index.lock().map.contains_key(lba);
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
            let mut index = self.io.shared.index.lock();
            for (lba, cached, _) in &images {
                if !*cached {
                    continue;
                }
                // Clean: the request holds the stripe locks and saw no dirty block.
                if let Some(e) = index.map.get(*lba) {
                    index.remove_at(*lba, e.loc);
                    self.io.flash.mark_dead(Location::unpack(e.loc));
                }
            }
        }
        // The intent is durable before the backing changes, so a crash can never bring
        // back an older record of these blocks as current (`fence`).
        crate::fence::intent(&self.io.shared, &self.io.flash, first, last)
            .await
            .map_err(|e| BackendError::Io(std::io::Error::other(e)))?;
        self.io.backing_write(off, data, fua).await?;
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
        add(&self.io.shared.stats.flushes, 1);
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
}
