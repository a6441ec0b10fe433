//! One writeback batch: read the picked records from flash (checked), write contiguous runs
//! of at most 1 MiB to the backing (`writeback_inflight` at a time), flush the backing, then
//! mark the blocks of the runs that were written clean if they were not rewritten
//! meanwhile. Success is per run: a failed run stays dirty and its blocks are held with
//! their own backoff (`retry`); a failed backing flush keeps the whole batch dirty.
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use flashtier_flash::Location;

use super::{Cause, Writeback};
use crate::block_io::BlockIo;
use crate::index::Entry;
use crate::record::checked_block;
use crate::stats::add;
use crate::tunables::Tunables;

impl Writeback {
    /// Write `picks` back; returns blocks made clean.
    // Longer than clippy.toml's 120 lines; left as is by issue 29 (cache crate only).
    #[allow(clippy::too_many_lines)]
    pub(super) async fn write_back(
        &self,
        io: &BlockIo,
        tunables: &Tunables,
        picks: &[(u64, Entry, bool)],
        cause: Cause,
    ) -> u64 {
        let s = &io.shared.stats;
        let bs = io.block_size;
        let mut blocks = Vec::with_capacity(picks.len());
        let reads: Vec<_> = picks
            .iter()
            .map(|(lba, e, due)| (*lba, *e, *due, io.flash.read(Location::unpack(e.loc))))
            .collect();
        for (lba, e, due, c) in reads {
            // None: moved by reclaim or rewritten meanwhile; the next pass picks it again.
            if let Some(block) = c
                .await
                .ok()
                .and_then(|r| checked_block(&r, lba, e.version, bs))
            {
                add(&s.ssd_reads, 1);
                blocks.push((lba, e.version, due, block));
            }
        }
        blocks.sort_unstable_by_key(|b| b.0);
        // The records written back must be durable first: a crash must not leave an older
        // clean record on flash as the newest while the backing holds this newer data.
        if !blocks.is_empty() {
            if let Err(e) = io.flash.flush().await {
                self.flushes.error();
                self.report(io, format!("cache flush before writeback: {e}"));
                let mut index = io.shared.index.lock();
                for (lba, _, _) in picks {
                    index.writing.remove(lba);
                }
                return 0;
            }
        }
        // Contiguous runs of at most 1 MiB: (first LBA, bytes, how many blocks of `blocks`).
        let mut runs: Vec<(u64, BytesMut, usize)> = Vec::new();
        for (lba, _, _, v) in &blocks {
            match runs.last_mut() {
                Some((start, buf, n))
                    if *start + (buf.len() as u64 / bs) == *lba && buf.len() < (1 << 20) =>
                {
                    buf.extend_from_slice(v);
                    *n += 1;
                }
                _ => runs.push((*lba, BytesMut::from(&v[..]), 1)),
            }
        }
        // Which blocks (indexes into `blocks`) each run holds.
        let mut spans = Vec::with_capacity(runs.len());
        let mut at = 0;
        for (_, _, n) in &runs {
            spans.push(at..at + n);
            at += n;
        }
        let (_, inflight, _) = tunables.writeback();
        let mut written = vec![false; runs.len()];
        let mut set = tokio::task::JoinSet::new();
        let mut iter = runs.into_iter().enumerate();
        loop {
            while set.len() < inflight {
                let Some((i, (lba, buf, _))) = iter.next() else {
                    break;
                };
                let backing = Arc::clone(&io.backing);
                let off = lba * bs;
                let data = buf.freeze();
                add(&s.writeback_writes, 1);
                add(&s.writeback_bytes, data.len() as u64);
                if data.len() as u64 > bs {
                    add(&s.coalesced_writes, 1);
                }
                set.spawn(async move { (i, backing.write(off, data, false).await) });
            }
            match set.join_next().await {
                None => break,
                Some(Ok((i, Ok(())))) => {
                    add(&s.disk_writes, 1);
                    written[i] = true;
                }
                Some(Ok((i, Err(e)))) => {
                    add(&s.disk_writes, 1);
                    add(&s.writeback_write_errors, 1);
                    self.flushes.error();
                    let first = spans
                        .get(i)
                        .and_then(|r| blocks.get(r.start))
                        .map_or(0, |b| b.0);
                    let n = spans.get(i).map_or(0, ExactSizeIterator::len);
                    self.report(
                        io,
                        format!(
                            "writeback of blocks {first}..{} to the backing: {e}",
                            first + n as u64
                        ),
                    );
                }
                Some(Err(e)) => {
                    self.flushes.error();
                    self.report(io, format!("writeback task: {e}"));
                }
            }
        }
        // Durability: a written run is clean only once a backing flush after it succeeded.
        let mut flushed = written.iter().any(|w| *w);
        if flushed {
            if let Err(e) = io.backing.flush().await {
                flushed = false;
                add(&s.writeback_write_errors, 1);
                self.flushes.error();
                self.report(io, format!("backing flush after writeback: {e}"));
            }
        }
        let now = Instant::now();
        let mut cleaned = 0u64;
        let mut fallow = 0u64;
        {
            let mut index = io.shared.index.lock();
            for (lba, _, _) in picks {
                index.writing.remove(lba);
            }
            let mut holds = self.holds.lock();
            for (i, span) in spans.iter().enumerate() {
                let run = blocks.get(span.clone()).unwrap_or(&[]);
                if !(written[i] && flushed) {
                    holds.failed(run.iter().map(|b| b.0), now);
                    continue;
                }
                holds.succeeded(run.iter().map(|b| b.0));
                for (lba, v, due, _) in run {
                    if index.mark_clean(*lba, *v) {
                        cleaned += 1;
                        if *due && cause == Cause::Period {
                            fallow += 1;
                        }
                    }
                }
            }
            let dirty = index.dirty();
            holds.prune(dirty, |l| index.dirty_meta.contains_key(&l));
        }
        add(&s.cleanings, cleaned);
        add(&s.fallow_cleanings, fallow);
        let rest = cleaned - fallow;
        match cause {
            Cause::Period => add(&s.period_cleanings, rest),
            Cause::Threshold => add(&s.threshold_cleanings, rest),
            Cause::Flush => add(&s.flush_cleanings, rest),
        }
        cleaned
    }
}
