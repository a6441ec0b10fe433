//! One writeback batch: read the picked records from flash (checked), write contiguous runs
//! of at most 1 MiB to the backing (`writeback_inflight` at a time), flush the backing, then
//! mark the blocks of the runs that were written clean if they were not rewritten
//! meanwhile. Success is per run: a failed run stays dirty and its blocks are held with
//! their own backoff (`retry`); a failed backing flush keeps the whole batch dirty.
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use flashtier_flash::Location;

use super::{Cause, Writeback};
use crate::block_io::BlockIo;
use crate::index::Entry;
use crate::record::checked_block;
use crate::stats::add;
use crate::tunables::Tunables;

/// A block read back for writeback: (LBA, version, due, bytes).
type ReadBlock = (u64, u64, bool, Bytes);
/// A run to write: (first LBA, bytes, how many blocks).
type Run = (u64, BytesMut, usize);

impl Writeback {
    /// Write `picks` back; returns blocks made clean.
    pub(super) async fn write_back(
        &self,
        io: &BlockIo,
        tunables: &Tunables,
        picks: &[(u64, Entry, bool)],
        cause: Cause,
    ) -> u64 {
        let blocks = read_picks(io, picks).await;
        // The records written back must be durable first: a crash must not leave an older
        // clean record on flash as the newest while the backing holds this newer data.
        if !blocks.is_empty() {
            if let Err(e) = io.flash.flush().await {
                self.flushes.error();
                self.report(io, format!("cache flush before writeback: {e}"));
                io.blocks.locked(|index| {
                    for (lba, _, _) in picks {
                        index.end_writing(*lba);
                    }
                });
                return 0;
            }
        }
        let (runs, spans) = runs_of(&blocks, io.block_size);
        let mut written = self.write_runs(io, tunables, runs, &blocks, &spans).await;
        // Durability: a written run is clean only once a backing flush after it succeeded.
        let mut flushed = written.iter().any(|w| *w);
        if flushed {
            if let Err(e) = io.backing.flush().await {
                flushed = false;
                add(&io.stats.writeback_write_errors, 1);
                self.flushes.error();
                self.report(io, format!("backing flush after writeback: {e}"));
            }
        }
        if !flushed {
            written.iter_mut().for_each(|w| *w = false);
        }
        let (cleaned, fallow) = self.finish(io, picks, &blocks, &spans, &written, cause);
        let s = &io.stats;
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

    /// Write `runs` to the backing, `writeback_inflight` at a time; which were written.
    async fn write_runs(
        &self,
        io: &BlockIo,
        tunables: &Tunables,
        runs: Vec<Run>,
        blocks: &[ReadBlock],
        spans: &[Range<usize>],
    ) -> Vec<bool> {
        let s = &io.stats;
        let bs = io.block_size;
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
        written
    }

    /// End the batch: the picks are no longer being written; runs written (and flushed) are
    /// made clean (unless rewritten meanwhile), the others held. Returns (cleaned, fallow).
    fn finish(
        &self,
        io: &BlockIo,
        picks: &[(u64, Entry, bool)],
        blocks: &[ReadBlock],
        spans: &[Range<usize>],
        written: &[bool],
        cause: Cause,
    ) -> (u64, u64) {
        let now = Instant::now();
        let mut cleaned = 0u64;
        let mut fallow = 0u64;
        io.blocks.locked(|index| {
            for (lba, _, _) in picks {
                index.end_writing(*lba);
            }
            let mut holds = self.holds.lock();
            for (i, span) in spans.iter().enumerate() {
                let run = blocks.get(span.clone()).unwrap_or(&[]);
                if !written[i] {
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
            holds.prune(dirty, |l| index.is_dirty(l));
        });
        (cleaned, fallow)
    }
}

/// Read the picked records back from flash (checked), in LBA order. A record moved by
/// reclaim or rewritten meanwhile is left out; the next pass picks it again.
async fn read_picks(io: &BlockIo, picks: &[(u64, Entry, bool)]) -> Vec<ReadBlock> {
    let mut blocks = Vec::with_capacity(picks.len());
    let reads: Vec<_> = picks
        .iter()
        .map(|(lba, e, due)| (*lba, *e, *due, io.flash.read(Location::unpack(e.loc))))
        .collect();
    for (lba, e, due, c) in reads {
        if let Some(block) = c
            .await
            .ok()
            .and_then(|r| checked_block(&r, lba, e.version, io.block_size))
        {
            add(&io.stats.ssd_reads, 1);
            // Picks are dirty: the index knows their version.
            if let Some(v) = e.version {
                blocks.push((lba, v, due, block));
            }
        }
    }
    blocks.sort_unstable_by_key(|b| b.0);
    blocks
}

/// Contiguous runs of at most 1 MiB, as (first LBA, bytes, how many blocks), and which
/// blocks (indexes into `blocks`) each run holds.
fn runs_of(blocks: &[ReadBlock], bs: u64) -> (Vec<Run>, Vec<Range<usize>>) {
    let mut runs: Vec<Run> = Vec::new();
    for (lba, _, _, v) in blocks {
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
    let mut spans = Vec::with_capacity(runs.len());
    let mut at = 0;
    for (_, _, n) in &runs {
        spans.push(at..at + n);
        at += n;
    }
    (runs, spans)
}
