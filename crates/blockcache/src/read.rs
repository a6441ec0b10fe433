//! The read path: index lookup; hits are read from flash (checked: kind, key_id = LBA,
//! version); misses are read from the backing under the blocks' stripe locks (re-checking
//! the index there) and admitted as clean records when the admission rules allow (not a
//! sequential stream, request size and offset range, `admit_reads`).
//!
//! Threads: request tasks (tokio); flash reads complete on the engine's IO threads.

use bytes::Bytes;
use flashtier_backend::{check_range, BackendError};
use flashtier_flash::Location;

use crate::cache::BlockCache;
use crate::index::Entry;
use crate::record::checked_block;
use crate::stats::add;

impl BlockCache {
    pub(crate) async fn do_read(&self, off: u64, len: u32) -> Result<Bytes, BackendError> {
        check_range(off, u64::from(len), self.io.size())?;
        let len = u64::from(len);
        if len == 0 {
            return Ok(Bytes::new());
        }
        let s = &self.io.shared.stats;
        add(&s.read_requests, 1);
        let bs = self.io.block_size;
        let (first, last) = (off / bs, (off + len - 1) / bs);
        add(&s.reads, last - first + 1);
        let verdict = self.admission.decide(&self.tunables, s, off, len, false);
        let (admit, seq) = (verdict.admit, verdict.sequential);
        let mut out = vec![0u8; len as usize];
        let entries: Vec<(u64, Option<Entry>)> = {
            let mut index = self.io.shared.index.lock();
            (first..=last).map(|l| (l, index.lookup(l))).collect()
        };
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
        misses.sort_unstable();
        let mut i = 0;
        while i < misses.len() {
            let mut j = i;
            while j + 1 < misses.len() && misses[j + 1] == misses[j] + 1 && j + 1 - i < 256 {
                j += 1;
            }
            self.fill_run(misses[i], misses[j], &mut out, off, admit, seq)
                .await?;
            i = j + 1;
        }
        Ok(Bytes::from(out))
    }

    async fn fill_run(
        &self,
        a: u64,
        b: u64,
        out: &mut [u8],
        off: u64,
        admit: bool,
        seq: bool,
    ) -> Result<(), BackendError> {
        let s = &self.io.shared.stats;
        let bs = self.io.block_size;
        let _stripes = self.io.lock_stripes(a, b).await;
        let cached: Vec<bool> = {
            let index = self.io.shared.index.lock();
            (a..=b).map(|l| index.map.contains_key(l)).collect()
        };
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
            if admit && self.append(lba, &blk, false, None).await?.is_some() {
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
}
