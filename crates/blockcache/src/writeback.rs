//! The writeback task.
//!
//! One tokio task per cache. It writes back dirty blocks for four causes:
//! - *fallow*: blocks older than 3/4 of `flush_period_s` are due (oldest first, at most
//!   `writeback_batch` a batch), counted as fallow outside threshold draining;
//! - *period*: an age rate of `dirty / (flush_period_s / 2)` blocks per second spreads the
//!   period's work evenly, so a burst of writes is written back as a stream;
//! - *threshold*: from `dirty_high_pct` until back under `dirty_low_pct`, the rate of the
//!   controller in `rate` (bcache's writeback_rate: proportional + integral on the distance
//!   above `dirty_low_pct`, capped by `writeback_max_rate`); every block written back while
//!   draining is a threshold cleaning;
//! - *flush*: an explicit flush or mode switch, and a writer waiting at `dirty_max_pct`,
//!   lift the rate; while clients are active a flush takes at most
//!   `writeback_busy_share_pct` of the time (it rests between batches), so foreground
//!   requests keep most of the backing and the CPU.
//!
//! Order: due blocks first, then `flush_order` (default `lba`: ascending from a cyclic
//! cursor, so adjacent dirty blocks land in one batch and merge into one backing write of
//! up to 1 MiB). Batches of up to 8 × `writeback_batch` blocks when draining or flushing.
//! With work left in its budget the task goes on at once instead of waiting for a tick.
//!
//! A batch: read the records from flash, write contiguous runs to the backing
//! (`writeback_inflight` at a time), flush the backing, then mark the blocks of the runs
//! that were written clean if they were not rewritten meanwhile, then persist the new clean
//! watermark (a record plus a `flash.flush()`). Success is per run: a run that fails stays
//! dirty and is put on hold with its own jittered backoff (`retry`, 100 ms doubling to 5 s),
//! while the rest of the batch is cleaned and later batches keep draining other blocks; a
//! failed backing flush keeps the whole batch dirty. Errors are counted (`backing_errors`,
//! and `flush_errors` of a running flush), logged and kept in `last_error`.
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use flashtier_flash::Location;

use crate::cache::BlockCache;
use crate::index::{Entry, Index};
use crate::rate::RateCtl;
use crate::record::{checked_block, BlockRecord};
use crate::stats::add;
use crate::tunables::FlushOrder;

const TICK: Duration = Duration::from_millis(50);
/// Batches are this many times `writeback_batch` when draining or flushing.
const BIG: usize = 8;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Cause {
    Period,
    Threshold,
    Flush,
}

pub(crate) async fn run(cache: Arc<BlockCache>) {
    let mut ctl = RateCtl::default();
    let mut budget = 0.0f64;
    let mut last = Instant::now();
    let mut last_wm = Instant::now();
    let mut busy = false;
    let mut rest = Duration::ZERO;
    let mut cursor = 0u64;
    let mut last_reqs = cache.client_requests();
    while !cache.stopping.load(Ordering::Acquire) {
        if !rest.is_zero() {
            let _ =
                tokio::time::timeout(rest.min(Duration::from_secs(1)), cache.wb_wake.notified())
                    .await;
            rest = Duration::ZERO;
        } else if busy {
            tokio::task::yield_now().await;
        } else {
            let _ = tokio::time::timeout(TICK, cache.wb_wake.notified()).await;
        }
        if cache.stopping.load(Ordering::Acquire) {
            break;
        }
        let now = Instant::now();
        let dt = now.duration_since(last).as_secs_f64();
        last = now;
        let t = &cache.tunables;
        let (low_pct, high_pct, _) = t.dirty_pcts();
        let cap = cache.capacity_blocks as f64;
        let period = t.flush_period_s();
        let (batch, _, max_rate) = t.writeback();
        let dirty = cache.dirty_blocks() as f64;
        let low = cap * low_pct as f64 / 100.0;
        let high = cap * high_pct as f64 / 100.0;
        let thresh_rate = ctl.update(dirty, low, high, dt, max_rate as f64);
        // Outside writeback mode every dirty block is a leftover (or a rewrite of one)
        // that a mode switch is draining: write it back at flush speed.
        let flushing = cache.flush_running() || cache.switching();
        let urgent = cache.urgent.swap(false, Ordering::AcqRel);
        let reqs = cache.client_requests();
        let clients = reqs != last_reqs;
        last_reqs = reqs;
        let mut age_rate = if period > 0 {
            dirty / (period as f64 / 2.0)
        } else {
            0.0
        };
        if max_rate > 0 {
            age_rate = age_rate.min(max_rate as f64);
        }
        let rate = thresh_rate.max(age_rate);
        cache.wb_rate.store(
            if flushing || urgent { 0 } else { rate as u64 },
            Ordering::Relaxed,
        );
        let big = batch * BIG;
        let (cause, n, limit) = if flushing {
            (Cause::Flush, big, big)
        } else if urgent {
            (Cause::Threshold, big, big)
        } else {
            // Up to half a second of work may accumulate (at least two batches).
            budget = (budget + rate * dt).min((rate * 0.5).max(batch as f64 * 2.0));
            let c = if ctl.draining {
                Cause::Threshold
            } else {
                Cause::Period
            };
            let limit = if ctl.draining { big } else { batch };
            (c, (budget.floor() as usize).min(limit), limit)
        };
        let due_age = if period > 0 {
            Some(Duration::from_millis(period * 750))
        } else {
            None
        };
        // A stalled writer may wait for flash space, which comes from advancing the clean
        // watermark, which only the oldest dirty block holds back: go oldest first.
        let picks = cache.pick(n, due_age, batch, limit, urgent, &mut cursor);
        if picks.is_empty() {
            busy = false;
            if urgent || last_wm.elapsed() >= Duration::from_millis(500) {
                cache.persist_watermark().await;
                last_wm = Instant::now();
            }
            continue;
        }
        if !flushing && !urgent {
            let normal = picks.iter().filter(|p| !p.2).count();
            budget = (budget - normal as f64).max(0.0);
        }
        let started = Instant::now();
        let cleaned = cache.write_back(&picks, cause).await;
        if cleaned > 0 {
            cache.persist_watermark().await;
            last_wm = Instant::now();
        }
        cache.progress.notify_waiters();
        busy = flushing || urgent || budget >= 1.0;
        let share = t.busy_share_pct();
        if flushing && !urgent && clients && share < 100 {
            let took = started.elapsed();
            rest = took * (100 - share as u32) / share.max(1) as u32;
        }
    }
}

/// Dirty LBAs in flush order; `cursor` is where ascending-LBA order resumes.
fn order<'a>(ix: &'a Index, order: FlushOrder, cursor: u64) -> Box<dyn Iterator<Item = u64> + 'a> {
    match order {
        FlushOrder::Fifo => Box::new(ix.fifo.values().map(|(l, _)| *l)),
        FlushOrder::Lba => Box::new(
            ix.by_lba
                .range(cursor..)
                .chain(ix.by_lba.range(..cursor))
                .copied(),
        ),
        FlushOrder::Lru => {
            let mut v: Vec<(u64, u64)> = ix
                .by_lba
                .iter()
                .filter_map(|l| ix.dirty_meta.get(l).map(|d| (d.access, *l)))
                .collect();
            v.sort_unstable();
            Box::new(v.into_iter().map(|(_, l)| l))
        }
    }
}

impl BlockCache {
    /// Client requests so far (reads and writes), to tell whether clients are active.
    fn client_requests(&self) -> u64 {
        let s = &self.shared.stats;
        s.read_requests.load(Ordering::Relaxed) + s.write_requests.load(Ordering::Relaxed)
    }

    /// Choose blocks to write back: up to `batch` blocks past `due_age` (oldest first),
    /// then up to `n` more (at most `limit` in all) in the configured order (FIFO if
    /// `oldest_first`). Returns (lba, entry, due) and marks them as being written.
    fn pick(
        &self,
        n: usize,
        due_age: Option<Duration>,
        batch: usize,
        limit: usize,
        oldest_first: bool,
        cursor: &mut u64,
    ) -> Vec<(u64, Entry, bool)> {
        let mut ix = self.shared.index.lock();
        let retries = self.retries.lock();
        let now = Instant::now();
        let mut out: Vec<(u64, Entry, bool)> = Vec::new();
        let mut chosen = std::collections::BTreeSet::new();
        if let Some(age) = due_age {
            for (_, (lba, since)) in ix.fifo.iter() {
                if out.len() >= batch.min(limit) || since.elapsed() < age {
                    break;
                }
                if ix.writing.contains(lba) || !retries.ready(*lba, now) {
                    continue;
                }
                if let Some(e) = ix.map.get(*lba) {
                    out.push((*lba, e, true));
                    chosen.insert(*lba);
                }
            }
        }
        let want = n.min(limit.saturating_sub(out.len()));
        if want > 0 {
            let o = if oldest_first {
                FlushOrder::Fifo
            } else {
                self.tunables.flush_order()
            };
            let mut taken = 0;
            let mut next_cursor = *cursor;
            for lba in order(&ix, o, *cursor) {
                if taken >= want {
                    break;
                }
                if ix.writing.contains(&lba) || chosen.contains(&lba) || !retries.ready(lba, now) {
                    continue;
                }
                if let Some(e) = ix.map.get(lba) {
                    out.push((lba, e, false));
                    taken += 1;
                    next_cursor = lba + 1;
                }
            }
            if o == FlushOrder::Lba {
                *cursor = next_cursor;
            }
        }
        drop(retries);
        for (lba, _, _) in &out {
            ix.writing.insert(*lba);
        }
        out
    }

    /// A writeback write failed: count it against a running flush.
    fn flush_error(&self) {
        if let Some(j) = self.job.lock().as_mut().filter(|j| j.finished.is_none()) {
            j.errors += 1;
        }
    }

    /// Write `picks` back; returns blocks made clean.
    async fn write_back(&self, picks: &[(u64, Entry, bool)], cause: Cause) -> u64 {
        let s = &self.shared.stats;
        let bs = self.block_size;
        let mut blocks = Vec::with_capacity(picks.len());
        let reads: Vec<_> = picks
            .iter()
            .map(|(lba, e, due)| (*lba, *e, *due, self.flash.read(Location::unpack(e.loc))))
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
        let (_, inflight, _) = self.tunables.writeback();
        let mut written = vec![false; runs.len()];
        let mut set = tokio::task::JoinSet::new();
        let mut iter = runs.into_iter().enumerate();
        loop {
            while set.len() < inflight {
                let Some((i, (lba, buf, _))) = iter.next() else {
                    break;
                };
                let backing = Arc::clone(&self.backing);
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
                    self.flush_error();
                    let first = spans
                        .get(i)
                        .and_then(|r| blocks.get(r.start))
                        .map_or(0, |b| b.0);
                    let n = spans.get(i).map_or(0, ExactSizeIterator::len);
                    self.report(format!(
                        "writeback of blocks {first}..{} to the backing: {e}",
                        first + n as u64
                    ));
                }
                Some(Err(e)) => {
                    self.flush_error();
                    self.report(format!("writeback task: {e}"));
                }
            }
        }
        // Durability: a written run is clean only once a backing flush after it succeeded.
        let mut flushed = written.iter().any(|w| *w);
        if flushed {
            if let Err(e) = self.backing.flush().await {
                flushed = false;
                add(&s.writeback_write_errors, 1);
                self.flush_error();
                self.report(format!("backing flush after writeback: {e}"));
            }
        }
        let now = Instant::now();
        let mut cleaned = 0u64;
        let mut fallow = 0u64;
        {
            let mut ix = self.shared.index.lock();
            for (lba, _, _) in picks {
                ix.writing.remove(lba);
            }
            let mut retries = self.retries.lock();
            for (i, span) in spans.iter().enumerate() {
                let run = blocks.get(span.clone()).unwrap_or(&[]);
                if !(written[i] && flushed) {
                    retries.failed(run.iter().map(|b| b.0), now);
                    continue;
                }
                retries.succeeded(run.iter().map(|b| b.0));
                for (lba, v, due, _) in run {
                    if ix.mark_clean(*lba, *v) {
                        cleaned += 1;
                        if *due && cause == Cause::Period {
                            fallow += 1;
                        }
                    }
                }
            }
            let dirty = ix.dirty();
            retries.prune(dirty, |l| ix.dirty_meta.contains_key(&l));
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

    /// Count, log and remember a writeback error. Logged at most once a second (with the
    /// count since the last line), so a failing backing does not flood the log.
    fn report(&self, msg: String) {
        add(&self.shared.stats.backing_errors, 1);
        let mut last = self.last_error.lock();
        let mut log = self.error_log.lock();
        log.1 += 1;
        if log.0.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            log::warn!(
                "{msg} (retried with backoff; {} errors since the last line)",
                log.1
            );
            *log = (Some(Instant::now()), 0);
        }
        *last = Some(msg);
    }

    /// Persist the clean watermark if it moved: a record, then a flash flush; only then may
    /// reclaim evict blocks at or below it.
    pub(crate) async fn persist_watermark(&self) {
        let w = {
            let mut ix = self.shared.index.lock();
            let w = ix.clean_watermark();
            let rewrite = self.shared.wm_lost.swap(false, Ordering::AcqRel);
            if w <= self.shared.wm_persisted.load(Ordering::Acquire) && !rewrite {
                return;
            }
            let rec = BlockRecord::Watermark { version: w }.write();
            // When flash is full of records newer than the persisted watermark, only a new
            // watermark lets reclaim evict them: write it into the reclaim stream, which may
            // use the reserved segments (a 64-byte record per batch at most).
            let r = match self.flash.append(crate::cache::STREAM_META, &rec) {
                Err(flashtier_flash::Error::NoSpace | flashtier_flash::Error::Busy(_)) => {
                    self.flash.append(self.reclaim_stream, &rec)
                }
                other => other,
            };
            match r {
                Ok(loc) => {
                    if let Some(old) = ix.wm_loc.replace(loc.pack()) {
                        self.flash.mark_dead(Location::unpack(old));
                    }
                }
                Err(_) => {
                    if rewrite {
                        self.shared.wm_lost.store(true, Ordering::Release);
                    }
                    return;
                }
            }
            w
        };
        if self.flash.flush().await.is_ok() {
            self.shared.wm_persisted.fetch_max(w, Ordering::AcqRel);
            add(&self.shared.stats.watermark_writes, 1);
        }
    }
}
