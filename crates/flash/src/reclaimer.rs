//! Reclaim: keep enough segments free by emptying victims.
//!
//! A victim is a sealed segment on a healthy device (no writes go to a failing one): first any whose records have all expired
//! (dropped from its summary alone, no value is read), else the oldest (FIFO), the one
//! with most records marked dead (greedy), or the best LFS cost-benefit (cost-benefit). For every record the user decides (through
//! [`ReclaimHandler`]) to keep it — it is copied into the reclaim stream and the user told
//! its new location — or drop it. Kept bytes are capped by `keep_limit` so every pass frees
//! space. Before a victim is reused, the copies are made durable (flush) and its header page
//! is zeroed, so a crash can never resurrect its records.
//!
//! Runs on the `flash-reclaim` thread (woken when free segments fall below the low
//! watermark) or on a caller's thread through `Flash::reclaim_now`. Blocking IO is fine here.
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::{now_unix, Decision, Inner, RecordMeta, RecordWrite};
use crate::error::{Error, Result};
use crate::format::record::{self, Record};
use crate::format::segment::{decode_summary, tail_len, Footer, SummaryEntry, FOOTER_LEN};
use crate::io::{read_blocking, run_batch, run_one, AlignedBuf, IoOp};
use crate::location::PAGE;
use crate::recovery::scan;
use crate::segments::SegState;
use crate::stats::FlashStats;
use crate::ReclaimPolicy;

pub(crate) fn run(inner: &Arc<Inner>) {
    loop {
        {
            let mut state = inner.state.lock();
            loop {
                if state.closed {
                    return;
                }
                if !state.reclaim_paused && inner.spare(&state) < inner.knobs.free_low() {
                    break;
                }
                inner.wake.wait_for(&mut state, Duration::from_secs(1));
            }
            state.reclaim_running = true;
        }
        let res = reclaim_pass(inner, false);
        inner.state.lock().reclaim_running = false;
        inner.wake.notify_all();
        match res {
            Ok(n) if n > 0 => {}
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Reclaim until `free_high_watermark` spare segments exist (or one victim if `force`).
pub(crate) fn reclaim_pass(inner: &Arc<Inner>, force: bool) -> Result<u32> {
    let mut freed = 0;
    loop {
        let started = Instant::now();
        let victim = {
            let mut state = inner.state.lock();
            if state.closed {
                return Err(Error::Closed);
            }
            let enough = inner.spare(&state) >= inner.knobs.free_high();
            if (enough || state.reclaim_paused) && !(force && freed == 0) {
                break;
            }
            pick_victim(inner, &mut state)
        };
        let Some(seg) = victim else { break };
        if let Err(e) = reclaim_segment(inner, seg) {
            // A victim that cannot be read is retired (never reused, never picked again, its
            // reads fail) rather than retried forever; other failures leave it sealed.
            let unreadable = matches!(
                &e,
                Error::Io {
                    op: "read summary" | "scan" | "read",
                    ..
                }
            );
            let mut state = inner.state.lock();
            if state.segs[seg as usize].state == SegState::Reclaiming {
                state.segs[seg as usize].state = if unreadable {
                    SegState::Failed
                } else {
                    SegState::Sealed
                };
            }
            if unreadable {
                FlashStats::add(&inner.stats.read_errors, 1);
                FlashStats::add(&inner.stats.segments_retired, 1);
                inner.update_gauges(&state);
                log::error!(
                    "flash reclaim: segment {seg} cannot be read ({e}): retired (never reused \
                     this run); records it held that the user still indexes are lost (their \
                     reads fail and are counted)"
                );
            }
            return Err(e);
        }
        freed += 1;
        let rate = inner.knobs.reclaim_rate();
        if rate > 0 {
            let budget = Duration::from_secs_f64(inner.seg_size as f64 / rate as f64);
            if let Some(rest) = budget.checked_sub(started.elapsed()) {
                std::thread::sleep(rest);
            }
        }
    }
    Ok(freed)
}

fn pick_victim(inner: &Inner, state: &mut crate::engine::State) -> Option<u32> {
    let now = now_unix();
    let candidates = state
        .segs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.state == SegState::Sealed && !state.out[s.dev]);
    let expired = candidates
        .clone()
        .filter(|(_, s)| s.all_expired(now))
        .min_by_key(|(_, s)| s.order);
    // Age bound: a segment that has outlived two turns of the whole flash goes next whatever
    // its score, so every segment is reclaimed in bounded time (tombstones and drop notes
    // are kept until every segment older than them is gone; cost-benefit alone would never
    // pick a segment that stays fully live).
    let newest = state.segs.iter().map(|s| s.order).max().unwrap_or(0);
    let age_bound = 2 * state.segs.len() as u64;
    let aged = candidates
        .clone()
        .filter(|(_, s)| newest.saturating_sub(s.order) >= age_bound)
        .min_by_key(|(_, s)| s.order);
    let pick = expired.or(aged).or_else(|| match inner.knobs.policy() {
        ReclaimPolicy::Fifo => candidates.min_by_key(|(_, s)| s.order),
        ReclaimPolicy::Greedy => candidates.min_by(|(_, a), (_, b)| {
            let ra = f64::from(a.dead) / f64::from(a.records.max(1));
            let rb = f64::from(b.dead) / f64::from(b.records.max(1));
            rb.total_cmp(&ra).then(a.order.cmp(&b.order))
        }),
        ReclaimPolicy::CostBenefit => {
            let score = |s: &crate::segments::SegInfo| {
                let u = 1.0 - s.dead_bytes() as f64 / s.data_bytes.max(1) as f64;
                (1.0 - u) * (newest.saturating_sub(s.order) + 1) as f64 / (1.0 + u)
            };
            candidates
                .max_by(|(_, a), (_, b)| score(a).total_cmp(&score(b)).then(b.order.cmp(&a.order)))
        }
    });
    let seg = pick.map(|(i, _)| i as u32)?;
    state.segs[seg as usize].state = SegState::Reclaiming;
    Some(seg)
}

// Longer than clippy.toml's 120 lines; left as is by issue 29 (cache crate only).
#[allow(clippy::too_many_lines)]
fn reclaim_segment(inner: &Arc<Inner>, seg: u32) -> Result<()> {
    let (dev, dev_off, seed, has_summary, records, data_end, data_bytes, all_expired, seg_seq) = {
        let state = inner.state.lock();
        let s = &state.segs[seg as usize];
        (
            s.dev,
            s.dev_off,
            s.seed,
            s.has_summary,
            s.records,
            s.data_end,
            s.data_bytes,
            s.all_expired(now_unix()),
            s.seq,
        )
    };
    let exec = inner.exec.as_ref();
    let name = inner.dev_name(dev).to_string();
    let seg_size = inner.seg_size;
    let stats = &inner.stats;

    let mut data: Option<AlignedBuf> = None;
    let mut entries: Option<Vec<SummaryEntry>> = None;
    if has_summary {
        let tl = tail_len(records as usize);
        let tail = read_blocking(exec, dev, dev_off + seg_size - tl, tl as usize)
            .map_err(|e| Error::io(&name, "read summary", e))?;
        FlashStats::add(&stats.device_bytes_read, tl);
        FlashStats::add(&stats.reclaim_bytes_read, tl);
        let fb = &tail.as_slice()[tl as usize - FOOTER_LEN..];
        entries = Footer::decode(fb, seed).and_then(|f| decode_summary(tail.as_slice(), &f, seed));
        if entries.is_none() {
            FlashStats::add(&stats.checksum_failures, 1);
        }
    }
    let entries = match entries {
        Some(e) => e,
        None => {
            let len = u64::from(data_end).max(PAGE);
            let buf = read_blocking(exec, dev, dev_off, len as usize)
                .map_err(|e| Error::io(&name, "scan", e))?;
            FlashStats::add(&stats.device_bytes_read, len);
            FlashStats::add(&stats.reclaim_bytes_read, len);
            let (e, _, _) = scan(buf.as_slice(), seed);
            data = Some(buf);
            e
        }
    };
    // A segment without a readable summary was scanned whole: its area is working memory.
    let _scan_lease = data.as_ref().map(|d| WorkLease::new(inner, d.len() as u64));
    let meta = |e: &SummaryEntry| inner.record_meta(seg, e, seg_seq).ok();
    let handler = &inner.handler;
    let now = now_unix();
    let mut dropped = 0u64;
    let mut keeps = Vec::new();
    // Records the user indexed that are dropped: each gets a drop note (see `Decision`).
    let mut notes: Vec<RecordMeta> = Vec::new();
    let noting = handler.notes_on_eviction();
    let evict = |m: &RecordMeta, notes: &mut Vec<RecordMeta>| {
        handler.evicted(m);
        if noting && m.kind == crate::kind::PUT {
            notes.push(*m);
        }
    };
    if all_expired {
        FlashStats::add(&stats.reclaims_expired, 1);
    }
    let cap = (inner.knobs.keep_limit() * data_bytes as f64) as u64;
    let mut kept = 0u64;
    for e in &entries {
        let Some(m) = meta(e) else { continue };
        // Expired records are asked about too: the user may still index them, and then an
        // older version of the key elsewhere needs a drop note.
        let expired = all_expired || (e.exptime != 0 && e.exptime <= now);
        match handler.decide(&m) {
            Decision::Drop => dropped += 1,
            Decision::Forget => {
                notes.push(m);
                dropped += 1;
            }
            Decision::Keep if !expired && kept + u64::from(e.len) <= cap => {
                kept += u64::from(e.len);
                keeps.push((*e, m));
            }
            Decision::Keep => {
                evict(&m, &mut notes);
                dropped += 1;
            }
        }
    }
    if !keeps.is_empty() {
        // Kept records are read in groups whose pages span at most one chunk (every record
        // fits in one), a batch of groups at most one chunk in all, and each is appended
        // before the next is decoded: reclaim's read memory is one chunk, not a segment.
        let window = inner.cfg.chunk_size;
        let mut unreadable = 0u64;
        let mut next = 0;
        while next < keeps.len() {
            let batch = match &data {
                Some(_) => vec![(0, keeps.len(), 0, 0)],
                None => next_batch(&keeps[next..], window, next),
            };
            let _lease = WorkLease::new(inner, batch.iter().map(|g| g.3 - g.2).sum());
            let bufs: Vec<Option<AlignedBuf>> = match &data {
                Some(_) => vec![None],
                None => {
                    let ops = batch
                        .iter()
                        .map(|g| IoOp::Read {
                            dev,
                            off: dev_off + g.2,
                            buf: AlignedBuf::zeroed((g.3 - g.2) as usize),
                        })
                        .collect();
                    let mut out = Vec::with_capacity(batch.len());
                    let mut failed = None;
                    for r in run_batch(exec, ops) {
                        match r {
                            Ok(b) => {
                                let n = b.as_ref().map_or(0, |b| b.len() as u64);
                                FlashStats::add(&stats.device_bytes_read, n);
                                FlashStats::add(&stats.reclaim_bytes_read, n);
                                out.push(b);
                            }
                            Err(e) => failed = Some(e),
                        }
                    }
                    if let Some(e) = failed {
                        // The records left to keep cannot be read: they are lost; tell the
                        // user (those already copied have moved).
                        for (_, m) in &keeps[next..] {
                            evict(m, &mut notes);
                        }
                        let n = (keeps.len() - next) as u64;
                        FlashStats::add(&stats.records_unreadable, n);
                        FlashStats::add(&stats.records_dropped, dropped + n);
                        // The victim is retired, not erased; its notes still go down.
                        write_notes(inner, &notes);
                        let _ = inner.flush().wait();
                        return Err(Error::io(&name, "read", e));
                    }
                    out
                }
            };
            for (g, buf) in batch.iter().zip(&bufs) {
                for (e, m) in &keeps[g.0..g.1] {
                    let rec = match (&data, buf) {
                        (Some(d), _) => decode_at(d.as_slice(), e.offset, seed),
                        (None, Some(b)) => decode_at(b.as_slice(), e.offset - g.2 as u32, seed),
                        (None, None) => Err(record::DecodeError::Truncated),
                    };
                    let rec = match rec {
                        Ok(r) => r,
                        Err(err) => {
                            let _ = inner.decode_error(err);
                            evict(m, &mut notes);
                            dropped += 1;
                            unreadable += 1;
                            continue;
                        }
                    };
                    let w = RecordWrite {
                        kind: rec.header.kind,
                        key_id: rec.header.key_id,
                        version: rec.header.version,
                        flags: rec.header.flags,
                        exptime: rec.header.exptime,
                        key: &rec.key,
                        value: &rec.value,
                    };
                    match append_retrying(inner, &w) {
                        Ok(loc) => {
                            FlashStats::add(&stats.records_rewritten, 1);
                            FlashStats::add(&stats.bytes_rewritten, rec.header.padded_len() as u64);
                            if !handler.relocated(m, loc) {
                                inner.mark_dead(loc);
                            }
                        }
                        Err(_) => {
                            evict(m, &mut notes);
                            dropped += 1;
                        }
                    }
                }
            }
            next = batch.last().map_or(keeps.len(), |g| g.1);
        }
        if unreadable > 0 {
            FlashStats::add(&stats.records_unreadable, unreadable);
            log::warn!(
                "flash reclaim: {unreadable} records of segment {seg} failed their checksum: \
                 dropped (the user's index entries removed)"
            );
        }
    }
    write_notes(inner, &notes);
    // The copies and notes must be durable before the originals disappear, and so must
    // whatever superseded a dropped record (a newer version or tombstone may still sit in
    // a write buffer).
    inner.flush().wait()?;
    FlashStats::add(&stats.records_dropped, dropped);
    handler
        .before_erase()
        .map_err(|e| Error::io(&name, "before erase", std::io::Error::other(e)))?;
    // Zero the header page so recovery never resurrects this segment's records.
    let zero = Arc::new(AlignedBuf::zeroed(PAGE as usize));
    if let Err(e) = run_one(
        exec,
        IoOp::Write {
            dev,
            off: dev_off,
            buf: zero,
        },
    ) {
        FlashStats::add(&stats.write_errors, 1);
        let mut state = inner.state.lock();
        inner.device_error(
            &mut state,
            dev,
            "write (reclaim, segment header)",
            &e.to_string(),
        );
        return Err(Error::io(&name, "write", e));
    }
    FlashStats::add(&stats.device_bytes_written, PAGE);
    let mut state = inner.state.lock();
    let info = &mut state.segs[seg as usize];
    info.state = SegState::Free;
    info.records = 0;
    info.dead = 0;
    info.data_bytes = 0;
    info.data_end = 0;
    // A failing device keeps its free segments listed; allocation skips them until it is back.
    state.free.push(dev, seg);
    FlashStats::add(&stats.reclaims, 1);
    inner.update_gauges(&state);
    Ok(())
}

/// Kept records closer than this to the previous one's end are read in the same group (the
/// dead bytes between them are read too) rather than on their own.
const GROUP_GAP: u64 = 64 << 10;

/// The next read batch for `keeps` (offset order; `base` is the first one's index): groups
/// `(first, end, page0, page_end)` of consecutive keeps whose pages span at most `window`
/// (with gaps under [`GROUP_GAP`]), as many groups as fit in `window` bytes, at least one.
fn next_batch(keeps: &[(SummaryEntry, RecordMeta)], window: u64, base: usize) -> Vec<Group> {
    let span = |e: &SummaryEntry| {
        let p0 = u64::from(e.offset) / PAGE * PAGE;
        (
            p0,
            (u64::from(e.offset) + u64::from(e.len)).div_ceil(PAGE) * PAGE,
        )
    };
    let mut out: Vec<Group> = Vec::new();
    let mut total = 0u64;
    for (i, (e, _)) in keeps.iter().enumerate() {
        let (p0, p1) = span(e);
        if let Some(g) = out.last_mut() {
            let merged = p0 >= g.2 && p1.max(g.3) - g.2 <= window && p0 <= g.3 + GROUP_GAP;
            if merged && total - (g.3 - g.2) + (p1.max(g.3) - g.2) <= window {
                total += p1.max(g.3) - g.3;
                g.3 = p1.max(g.3);
                g.1 = base + i + 1;
                continue;
            }
            if total + (p1 - p0) > window {
                break;
            }
        }
        total += p1 - p0;
        out.push((base + i, base + i + 1, p0, p1));
    }
    out
}

/// A read group: keeps `first..end`, read as the pages `page0..page_end` of the segment.
type Group = (usize, usize, u64, u64);

/// Reclaim read memory held, counted in the engine's `work_bytes` until dropped.
struct WorkLease<'a>(&'a Inner, u64);

impl<'a> WorkLease<'a> {
    fn new(inner: &'a Inner, bytes: u64) -> Self {
        inner.reclaim_buf_bytes.fetch_add(bytes, Ordering::Relaxed);
        inner.note_work();
        Self(inner, bytes)
    }
}

impl Drop for WorkLease<'_> {
    fn drop(&mut self) {
        self.0
            .reclaim_buf_bytes
            .fetch_sub(self.1, Ordering::Relaxed);
        self.0.note_work();
    }
}

fn decode_at(buf: &[u8], off: u32, seed: u32) -> Result<Record, record::DecodeError> {
    let b = buf
        .get(off as usize..)
        .ok_or(record::DecodeError::Truncated)?;
    record::decode_record(b, seed)
}

/// Append a drop note for each of `dropped` into the reclaim stream (see
/// [`Decision::Forget`]); a note that cannot be appended is counted and logged — the
/// record is dropped all the same, as before notes existed.
fn write_notes(inner: &Arc<Inner>, dropped: &[RecordMeta]) {
    if dropped.is_empty() {
        return;
    }
    let horizon = inner.horizon();
    let mut failed = 0u64;
    for m in dropped {
        let w = RecordWrite {
            kind: crate::kind::TOMBSTONE,
            key_id: m.key_id,
            version: m.version,
            flags: horizon,
            exptime: 0,
            key: &[],
            value: &[],
        };
        match append_retrying(inner, &w) {
            Ok(_) => FlashStats::add(&inner.stats.drop_notes, 1),
            Err(_) => failed += 1,
        }
    }
    if failed > 0 {
        FlashStats::add(&inner.stats.drop_notes_failed, failed);
        log::warn!(
            "flash reclaim: {failed} drop notes could not be written; an older version of              those keys may come back after a restart"
        );
    }
}

/// Append into the reclaim stream, waiting out `Busy` (chunk writes in flight).
fn append_retrying(inner: &Arc<Inner>, w: &RecordWrite<'_>) -> Result<crate::Location> {
    inner.append_wait(inner.cfg.reclaim_stream, w, Duration::from_secs(10))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keep(offset: u32, len: u32) -> (SummaryEntry, RecordMeta) {
        let e = SummaryEntry {
            key_id: 1,
            version: 1,
            offset,
            len,
            exptime: 0,
            flags: 0,
            kind: 1,
        };
        let m = RecordMeta {
            location: crate::Location::new(u64::from(offset), u64::from(len)).unwrap(),
            key_id: 1,
            version: 1,
            flags: 0,
            exptime: 0,
            kind: 1,
            len,
            seq: 1,
        };
        (e, m)
    }

    #[test]
    fn batches_cover_every_keep_within_the_window() {
        let window = 64 << 10;
        // Dense 4 KiB records, then sparse ones far apart, then one window-sized record.
        let mut keeps: Vec<_> = (0..40).map(|i| keep(64 + i * 4112, 4100)).collect();
        keeps.extend((0..5).map(|i| keep(1 << 20 | i << 18, 300)));
        keeps.push(keep(3 << 20, (window - PAGE) as u32));
        let mut next = 0;
        let mut batches = 0;
        while next < keeps.len() {
            let b = next_batch(&keeps[next..], window, next);
            assert!(!b.is_empty());
            assert!(b.iter().map(|g| g.3 - g.2).sum::<u64>() <= window);
            for g in &b {
                assert_eq!(g.0, next, "groups are consecutive");
                for (e, _) in &keeps[g.0..g.1] {
                    assert!(g.2 <= u64::from(e.offset));
                    assert!(u64::from(e.offset + e.len) <= g.3);
                }
                next = g.1;
            }
            batches += 1;
        }
        assert_eq!(next, keeps.len());
        assert!(
            batches >= 4,
            "{batches} batches: 164 KiB dense + far sparse ones"
        );
    }
}
