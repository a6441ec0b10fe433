//! The writeback task and explicit flushes.
//!
//! One tokio task per cache. Every tick (50 ms, or at once when woken) it decides how many
//! dirty blocks to write back:
//! - blocks older than 3/4 of `flush_period_s` are due now (*fallow* cleanings);
//! - an age rate of `dirty / (flush_period_s / 2)` blocks per second spreads the period's
//!   work evenly (*period* cleanings), so a burst of writes is written back as a stream,
//!   not as a burst;
//! - above `dirty_high_pct` (until back under `dirty_low_pct`) a proportional rate of
//!   `2 × (dirty − low)` per second plus a floor (*threshold* cleanings);
//! - an explicit flush or a writer waiting at `dirty_max_pct` lifts the limit.
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
use flashtier_flash::{kind, Location, RecordWrite};

use crate::cache::{BlockCache, FlushJob, FlushState, KIND_WATERMARK, WM_KEY};
use crate::index::Entry;
use crate::stats::add;
use crate::tunables::FlushOrder;

const TICK: Duration = Duration::from_millis(50);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Cause {
    Period,
    Threshold,
    Flush,
}

pub(crate) async fn run(cache: Arc<BlockCache>) {
    let mut budget = 0.0f64;
    let mut draining = false;
    let mut last = Instant::now();
    let mut last_wm = Instant::now();
    while !cache.stopping.load(Ordering::Acquire) {
        let _ = tokio::time::timeout(TICK, cache.wb_wake.notified()).await;
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
        if dirty >= high && dirty > 0.0 {
            draining = true;
        } else if dirty <= low {
            draining = false;
        }
        // Outside writeback mode every dirty block is a leftover (or a rewrite of one)
        // that a mode switch is draining: write it back at flush speed.
        let flushing = cache.flush_running() || cache.switching();
        let urgent = cache.urgent.swap(false, Ordering::AcqRel);
        let thresh_rate = if draining {
            2.0 * (dirty - low).max(0.0) + 64.0
        } else {
            0.0
        };
        let age_rate = if period > 0 {
            dirty / (period as f64 / 2.0)
        } else {
            0.0
        };
        let mut rate = thresh_rate.max(age_rate);
        if max_rate > 0 {
            rate = rate.min(max_rate as f64);
        }
        // An explicit flush or a waiting writer wants throughput: bigger batches amortise
        // the backing flush that ends each one.
        let (cause, n, batch) = if flushing {
            (Cause::Flush, batch * 4, batch * 4)
        } else if urgent {
            (Cause::Threshold, batch * 4, batch * 4)
        } else {
            budget = (budget + rate * dt).min(batch as f64 * 2.0);
            let c = if thresh_rate >= age_rate {
                Cause::Threshold
            } else {
                Cause::Period
            };
            (c, (budget.floor() as usize).min(batch), batch)
        };
        let due_age = if period > 0 {
            Some(Duration::from_millis(period * 750))
        } else {
            None
        };
        // A stalled writer waits for space, and space comes from advancing the clean
        // watermark, which only the oldest dirty block holds back: go oldest first.
        let picks = cache.pick(n, due_age, batch, urgent);
        if picks.is_empty() {
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
        let cleaned = cache.write_back(&picks, cause).await;
        if cleaned > 0 {
            cache.persist_watermark().await;
            last_wm = Instant::now();
        }
        cache.progress.notify_waiters();
    }
}

impl BlockCache {
    /// Choose up to `n` dirty blocks in the configured order (FIFO if `oldest_first`), plus
    /// (up to `batch`) blocks past `due_age`. Returns (lba, entry, due) and marks them as being written.
    fn pick(
        &self,
        n: usize,
        due_age: Option<Duration>,
        batch: usize,
        oldest_first: bool,
    ) -> Vec<(u64, Entry, bool)> {
        let mut ix = self.shared.index.lock();
        let retries = self.retries.lock();
        let now = Instant::now();
        let mut out: Vec<(u64, Entry, bool)> = Vec::new();
        let mut chosen = std::collections::BTreeSet::new();
        if let Some(age) = due_age {
            for (_, (lba, since)) in ix.fifo.iter() {
                if out.len() >= batch || since.elapsed() < age {
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
        let want = n.min(batch.saturating_sub(out.len()));
        if want > 0 {
            let order = if oldest_first {
                FlushOrder::Fifo
            } else {
                self.tunables.flush_order()
            };
            let candidates: Vec<u64> = match order {
                FlushOrder::Fifo => ix.fifo.values().map(|(l, _)| *l).collect(),
                FlushOrder::Lba => ix.by_lba.iter().copied().collect(),
                FlushOrder::Lru => {
                    let mut v: Vec<(u64, u64)> = ix
                        .by_lba
                        .iter()
                        .filter_map(|l| ix.dirty_meta.get(l).map(|d| (d.access, *l)))
                        .collect();
                    v.sort_unstable();
                    v.into_iter().map(|(_, l)| l).collect()
                }
            };
            let mut taken = 0;
            for lba in candidates {
                if taken >= want {
                    break;
                }
                if ix.writing.contains(&lba) || chosen.contains(&lba) || !retries.ready(lba, now) {
                    continue;
                }
                if let Some(e) = ix.map.get(lba) {
                    out.push((lba, e, false));
                    taken += 1;
                }
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
            match c.await {
                Ok(r)
                    if r.header.kind == kind::PUT
                        && r.header.key_id == lba
                        && r.header.version == e.version =>
                {
                    add(&s.ssd_reads, 1);
                    blocks.push((lba, e.version, due, r.value));
                }
                Ok(_) | Err(_) => {
                    // Moved by reclaim or rewritten meanwhile: the next pass picks it again.
                }
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
                        if *due {
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
            let rec = RecordWrite {
                kind: KIND_WATERMARK,
                key_id: WM_KEY,
                version: w,
                flags: 0,
                exptime: 0,
                key: &[],
                value: &[],
            };
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

    /// Start writing back every block dirty now; returns at once with the flush's id. A
    /// running flush is extended to cover the new blocks (and keeps its id).
    pub fn start_flush(&self) -> u64 {
        let ix = self.shared.index.lock();
        let target = ix.next_version.saturating_sub(1);
        let pending = ix.dirty_at_or_below(target) as u64;
        drop(ix);
        let mut job = self.job.lock();
        let id = match job.as_mut() {
            Some(j) if j.finished.is_none() => {
                let remaining_old = self.shared.index.lock().dirty_at_or_below(j.target) as u64;
                let done = j.total.saturating_sub(remaining_old);
                j.target = target;
                j.total = done + pending;
                j.id
            }
            _ => {
                let id = self.flush_ids.fetch_add(1, Ordering::AcqRel) + 1;
                *job = Some(FlushJob {
                    id,
                    target,
                    total: pending,
                    started: Instant::now(),
                    finished: None,
                    errors: 0,
                });
                id
            }
        };
        drop(job);
        self.wb_wake.notify_one();
        id
    }

    /// Id of the latest explicit flush (0 = none yet).
    pub fn flush_id(&self) -> u64 {
        self.job.lock().as_ref().map_or(0, |j| j.id)
    }

    fn flush_running(&self) -> bool {
        matches!(self.flush_state(), FlushState::Running { .. })
    }

    /// Progress of the latest explicit flush.
    pub fn flush_state(&self) -> FlushState {
        let mut job = self.job.lock();
        let Some(j) = job.as_mut() else {
            return FlushState::Idle;
        };
        if let Some(secs) = j.finished {
            return FlushState::Done {
                total: j.total,
                secs,
                errors: j.errors,
            };
        }
        let remaining = self.shared.index.lock().dirty_at_or_below(j.target) as u64;
        if remaining == 0 {
            let secs = j.started.elapsed().as_secs_f64();
            j.finished = Some(secs);
            return FlushState::Done {
                total: j.total,
                secs,
                errors: j.errors,
            };
        }
        FlushState::Running {
            done: j.total.saturating_sub(remaining),
            total: j.total.max(remaining),
            errors: j.errors,
        }
    }

    /// Write back every block dirty now and wait until they are on the backing (and the
    /// backing flushed). Fails only if the cache is stopping.
    pub async fn flush_wait(&self) -> Result<(), crate::Error> {
        self.start_flush();
        loop {
            if let FlushState::Done { .. } = self.flush_state() {
                return Ok(());
            }
            if self.stopping.load(Ordering::Acquire) {
                return Err(crate::Error::Config("cache stopped during flush".into()));
            }
            let _ =
                tokio::time::timeout(Duration::from_millis(100), self.progress.notified()).await;
        }
    }
}
