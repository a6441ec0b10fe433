//! Reclaim: keep enough segments free by emptying victims.
//!
//! A victim is a sealed segment on a healthy device (no writes go to a failing one), chosen
//! by the segment table (`segment_table.rs`): first any whose records have all expired
//! (dropped from its summary alone, no value is read), else the oldest (FIFO), the one with
//! most records marked dead (greedy), or the best LFS cost-benefit (cost-benefit). For every
//! record the user decides (through [`ReclaimHandler`](crate::ReclaimHandler)) to keep it —
//! it is copied into the reclaim stream and the user told its new location — or drop it.
//! Kept bytes are capped by `keep_limit` so every pass frees space. Before a victim is
//! reused, the copies are made durable (flush) and its header page is zeroed, so a crash can
//! never resurrect its records.
//!
//! Runs on the `flash-reclaim` thread (woken when free segments fall below the low
//! watermark) or on a caller's thread through `Flash::reclaim_now`. Blocking IO is fine here;
//! the pass holds the state lock only to pick, read or release its victim's row (its appends
//! and flushes take it as any caller's do).
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clock::now_unix;
use crate::error::{Error, Result};
use crate::format::record::{self, kind, Record};
use crate::format::segment::{decode_summary, tail_len, Footer, SummaryEntry, FOOTER_LEN};
use crate::handler::{Decision, RecordMeta, RecordWrite};
use crate::inner::Inner;
use crate::io::{read_blocking, run_batch, AlignedBuf, IoOp};
use crate::location::{Location, PAGE};
use crate::recovery::scan;
use crate::stats::FlashStats;

/// Victims freed together: one durability flush (the chunk writes in flight, then a device
/// sync) covers them all instead of one each. That flush is most of a victim's cost while
/// writers keep the device busy (docs/eviction.md, "Refill over a full flash"). A batch
/// holds at most one victim chosen by policy; the others are dead victims.
pub(crate) const RECLAIM_BATCH: usize = 8;

/// Free segments reclaim keeps beyond `free_high_watermark` when it can do so by freeing
/// segments whose value records are all dead: those hold nothing the user indexes, so
/// freeing them early costs no item, and writers find room instead of waiting for a pass.
pub(crate) const DEAD_AHEAD: u32 = 8;

pub(crate) fn run(inner: &Arc<Inner>) {
    loop {
        {
            let mut state = inner.state.lock();
            loop {
                if state.closed() {
                    return;
                }
                if !state.reclaim.paused() && wanted(inner, &state) {
                    break;
                }
                inner.wake.wait_for(&mut state, Duration::from_secs(1));
            }
            state.reclaim.set_running(true);
        }
        let res = reclaim_pass(inner, false, true);
        inner.state.lock().reclaim.set_running(false);
        inner.wake.notify_all();
        match res {
            Ok(n) if n > 0 => {}
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// True when the reclaimer should run a pass: fewer spare segments than the low watermark,
/// or fewer than the high one plus [`DEAD_AHEAD`] while a segment of dead values waits, or
/// fewer than the high one plus `free_ahead` while a segment at least a quarter dead waits.
pub(crate) fn wanted(inner: &Inner, state: &crate::state::State) -> bool {
    let spare = inner.spare(state);
    let high = inner.knobs.free_high();
    let out = state.health.out_mask();
    spare < inner.knobs.free_low()
        || (spare < high + DEAD_AHEAD && state.segments.has_dead_victim(out))
        || (spare < high + inner.knobs.free_ahead() && state.segments.has_cheap_victim(out))
}

/// Reclaim until `free_high_watermark` spare segments exist (or one victim if `force`), and
/// with `ahead` (the background reclaimer) beyond it: up to [`DEAD_AHEAD`] more by freeing
/// segments whose values are all dead, and up to `free_ahead` more by freeing segments at
/// least a quarter dead, one a batch. Victims go in batches of up to [`RECLAIM_BATCH`] under one
/// flush.
pub(crate) fn reclaim_pass(inner: &Arc<Inner>, force: bool, ahead: bool) -> Result<u32> {
    let mut freed = 0;
    loop {
        let started = Instant::now();
        let batch = {
            let mut guard = inner.state.lock();
            let state = &mut *guard;
            if state.closed() {
                return Err(Error::Closed);
            }
            let first = force && freed == 0;
            if state.reclaim.paused() && !first {
                break;
            }
            let spare = inner.spare(state);
            let high = inner.knobs.free_high();
            let needed = if first {
                1
            } else {
                high.saturating_sub(spare) as usize
            };
            let out = state.health.out_mask().to_vec();
            let policy = inner.knobs.policy();
            let mut batch = Vec::new();
            // One victim by policy per batch: its keeps (up to `keep_limit` of it) go to the
            // reclaim stream, whose only room may be the reserve until the batch's erases;
            // the reserve holds one victim's keeps, not several. Dead victims keep at most
            // their needed tombstones.
            if needed > 0 {
                if let Some(seg) = state.segments.pick_victim(&out, policy, now_unix()) {
                    batch.push(seg);
                }
            } else if ahead && spare < high + inner.knobs.free_ahead() {
                // Ahead of need: only a victim that frees at least as much as it copies.
                if let Some(seg) = state.segments.pick_cheap_victim(&out) {
                    FlashStats::add(&inner.stats.reclaims_ahead, 1);
                    batch.push(seg);
                }
            }
            while ahead
                && batch.len() < RECLAIM_BATCH
                && spare + (batch.len() as u32) < high + DEAD_AHEAD
            {
                match state.segments.pick_dead_victim(&out) {
                    Some(seg) => {
                        FlashStats::add(&inner.stats.reclaims_ahead, 1);
                        batch.push(seg);
                    }
                    None => break,
                }
            }
            batch
        };
        if batch.is_empty() {
            break;
        }
        freed += reclaim_batch(inner, &batch)?;
        let rate = inner.knobs.reclaim_rate();
        if rate > 0 {
            let bytes = inner.seg_size * batch.len() as u64;
            let budget = Duration::from_secs_f64(bytes as f64 / rate as f64);
            if let Some(rest) = budget.checked_sub(started.elapsed()) {
                std::thread::sleep(rest);
            }
        }
    }
    Ok(freed)
}

/// Reclaim the victims `segs` (all `Reclaiming`): each one's records decided and its keeps
/// copied, then one flush for all, then each erased and freed. Returns how many were freed;
/// the first victim that fails ends the batch (the ones decided before it are still
/// flushed and freed; the ones after it go back to sealed) and its error is returned.
fn reclaim_batch(inner: &Arc<Inner>, segs: &[u32]) -> Result<u32> {
    let started = Instant::now();
    let mut ready = Vec::with_capacity(segs.len());
    let mut failure = None;
    for &seg in segs {
        if failure.is_some() {
            inner.state.lock().segments.reclaim_failed(seg, false);
            continue;
        }
        match prepare(inner, seg) {
            Ok(p) => ready.push(p),
            Err(e) => {
                victim_failed(inner, seg, &e);
                failure = Some(e);
            }
        }
    }
    let freed = match finish(inner, &ready) {
        Ok(n) => n,
        Err(e) => {
            failure.get_or_insert(e);
            0
        }
    };
    FlashStats::add(
        &inner.stats.reclaim_us,
        started.elapsed().as_micros() as u64,
    );
    match failure {
        Some(e) => Err(e),
        None => Ok(freed),
    }
}

/// Victim `seg` could not be reclaimed (`e`): one that cannot be read is retired (never
/// reused, never picked again, its reads fail) rather than retried forever; other failures
/// leave it sealed.
fn victim_failed(inner: &Inner, seg: u32, e: &Error) {
    let unreadable = matches!(
        e,
        Error::Io {
            op: "read summary" | "scan" | "read",
            ..
        }
    );
    let mut state = inner.state.lock();
    state.segments.reclaim_failed(seg, unreadable);
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
}

/// What reclaim needs of its victim's row, read under the lock before any IO.
struct Victim {
    seg: u32,
    dev: usize,
    /// Device offset of the segment.
    dev_off: u64,
    seed: u32,
    has_summary: bool,
    records: u32,
    data_end: u32,
    data_bytes: u64,
    all_expired: bool,
    seq: u64,
    /// The device's name, for errors.
    name: String,
}

impl Victim {
    fn of(inner: &Inner, seg: u32) -> Result<Self> {
        let state = inner.state.lock();
        let s = state
            .segments
            .get(seg)
            .ok_or(Error::InvalidLocation(u64::from(seg) * inner.seg_size))?;
        Ok(Self {
            seg,
            dev: s.dev,
            dev_off: s.dev_off,
            seed: s.seed,
            has_summary: s.has_summary,
            records: s.records,
            data_end: s.data_end,
            data_bytes: s.data_bytes,
            all_expired: s.all_expired(now_unix()),
            seq: s.seq,
            name: inner.dev_name(s.dev).to_string(),
        })
    }
}

/// What the user decided so far for the victim's records, and the drop notes owed.
struct Verdicts<'a> {
    inner: &'a Inner,
    /// The user asked for drop notes of evicted records (`notes_on_eviction`).
    noting: bool,
    /// Records dropped.
    dropped: u64,
    /// Records the user indexed that are dropped: each gets a drop note (see `Decision`).
    notes: Vec<RecordMeta>,
}

impl<'a> Verdicts<'a> {
    fn new(inner: &'a Inner) -> Self {
        Self {
            inner,
            noting: inner.handler.notes_on_eviction(),
            dropped: 0,
            notes: Vec::new(),
        }
    }

    /// A record the user wanted kept goes: tell it, and owe a note if it asked for them.
    fn evict(&mut self, m: &RecordMeta) {
        self.inner.handler.evicted(m);
        if self.noting && m.kind == kind::PUT {
            self.notes.push(*m);
        }
    }

    /// Ask the user about every record of `entries`; returns those to keep (in offset
    /// order): every kept tombstone and marker of at most a page, and values within
    /// `keep_limit` of the victim's bytes — every `Keep` first, in offset order, then the
    /// `KeepIfRoom`s while room is left. Expired records are asked about too: the user may
    /// still index them, and then an older version of the key elsewhere needs a drop note.
    fn decide(&mut self, v: &Victim, entries: &[SummaryEntry]) -> Vec<(SummaryEntry, RecordMeta)> {
        let inner = self.inner;
        let now = now_unix();
        let cap = (inner.knobs.keep_limit() * v.data_bytes as f64) as u64;
        let mut kept = 0u64;
        let mut keeps = Vec::new();
        let mut if_room = Vec::new();
        for e in entries {
            let Ok(m) = inner.record_meta(v.seg, e, v.seq) else {
                continue;
            };
            let expired = v.all_expired || (e.exptime != 0 && e.exptime <= now);
            match inner.handler.decide(&m) {
                Decision::Drop => self.dropped += 1,
                Decision::Forget => {
                    self.notes.push(m);
                    self.dropped += 1;
                }
                // A tombstone or marker the user keeps (a record other than a value, at
                // most a page) is kept whatever the limit: dropping one could bring an
                // older version back at recovery. The limit, which makes every pass free
                // some room, counts values.
                Decision::Keep if !expired && m.kind != kind::PUT && u64::from(e.len) <= PAGE => {
                    keeps.push((*e, m))
                }
                Decision::Keep if !expired && kept + u64::from(e.len) <= cap => {
                    kept += u64::from(e.len);
                    keeps.push((*e, m));
                }
                Decision::KeepIfRoom if !expired => if_room.push((*e, m)),
                Decision::Keep | Decision::KeepIfRoom => {
                    self.evict(&m);
                    self.dropped += 1;
                }
            }
        }
        if if_room.is_empty() {
            return keeps;
        }
        for (e, m) in if_room {
            if kept + u64::from(e.len) <= cap {
                kept += u64::from(e.len);
                keeps.push((e, m));
            } else {
                self.evict(&m);
                self.dropped += 1;
            }
        }
        keeps.sort_by_key(|(e, _)| e.offset);
        keeps
    }
}

/// A victim whose records are decided (keeps copied, drop notes appended), waiting for the
/// batch's flush before its erase.
struct Prepared {
    v: Victim,
    dropped: u64,
}

/// Decide victim `seg`'s records and copy its keeps into the reclaim stream.
fn prepare(inner: &Arc<Inner>, seg: u32) -> Result<Prepared> {
    let v = Victim::of(inner, seg)?;
    let (entries, data) = read_entries(inner, &v)?;
    // A segment without a readable summary was scanned whole: its area is working memory.
    let _scan_lease = data.as_ref().map(|d| WorkLease::new(inner, d.len() as u64));
    let mut verdicts = Verdicts::new(inner);
    if v.all_expired {
        FlashStats::add(&inner.stats.reclaims_expired, 1);
    }
    let keeps = verdicts.decide(&v, &entries);
    if !keeps.is_empty() {
        copy_keeps(inner, &v, &keeps, data.as_ref(), &mut verdicts)?;
    }
    write_notes(inner, &verdicts.notes);
    Ok(Prepared {
        v,
        dropped: verdicts.dropped,
    })
}

/// Flush, then erase and free every victim of `ready`. The copies and notes must be durable
/// before the originals disappear, and so must whatever superseded a dropped record (a newer
/// version or tombstone may still sit in a write buffer): one flush covers the batch. On a
/// failure before the erases every victim goes back to sealed; an erase that fails leaves
/// its victim sealed and the others are still freed.
fn finish(inner: &Arc<Inner>, ready: &[Prepared]) -> Result<u32> {
    if ready.is_empty() {
        return Ok(0);
    }
    let back = |e: Error| {
        let mut state = inner.state.lock();
        for p in ready {
            state.segments.reclaim_failed(p.v.seg, false);
        }
        e
    };
    let flushing = Instant::now();
    FlashStats::add(&inner.stats.reclaim_batches, 1);
    let flushed = inner.flush().wait();
    FlashStats::add(
        &inner.stats.reclaim_flush_us,
        flushing.elapsed().as_micros() as u64,
    );
    flushed.map_err(back)?;
    FlashStats::add(
        &inner.stats.records_dropped,
        ready.iter().map(|p| p.dropped).sum(),
    );
    let name = &ready[0].v.name;
    inner
        .handler
        .before_erase()
        .map_err(|e| back(Error::io(name, "before erase", std::io::Error::other(e))))?;
    let erased = erase(inner, ready);
    // A failed erase still frees the victims it could (how many is not returned: 0).
    inner
        .handler
        .segments_freed(erased.as_ref().map_or(0, |n| *n));
    erased
}

/// The victim's summary entries: from its summary if it has a valid one, else by scanning
/// the whole segment (then its image is returned too, to copy kept records from).
fn read_entries(inner: &Inner, v: &Victim) -> Result<(Vec<SummaryEntry>, Option<AlignedBuf>)> {
    let exec = inner.exec.as_ref();
    let stats = &inner.stats;
    if v.has_summary {
        let tl = tail_len(v.records as usize);
        let tail = read_blocking(exec, v.dev, v.dev_off + inner.seg_size - tl, tl as usize)
            .map_err(|e| Error::io(&v.name, "read summary", e))?;
        FlashStats::add(&stats.device_bytes_read, tl);
        FlashStats::add(&stats.reclaim_bytes_read, tl);
        let fb = &tail.as_slice()[tl as usize - FOOTER_LEN..];
        let entries =
            Footer::decode(fb, v.seed).and_then(|f| decode_summary(tail.as_slice(), &f, v.seed));
        match entries {
            Some(e) => return Ok((e, None)),
            None => FlashStats::add(&stats.checksum_failures, 1),
        }
    }
    let len = u64::from(v.data_end).max(PAGE);
    let buf = read_blocking(exec, v.dev, v.dev_off, len as usize)
        .map_err(|e| Error::io(&v.name, "scan", e))?;
    FlashStats::add(&stats.device_bytes_read, len);
    FlashStats::add(&stats.reclaim_bytes_read, len);
    let (e, _, _) = scan(buf.as_slice(), v.seed);
    Ok((e, Some(buf)))
}

/// Copy the `keeps` into the reclaim stream: from `data` (the scanned image) if given, else
/// read in groups whose pages span at most one chunk (every record fits in one), a batch of
/// groups at most one chunk in all, each appended before the next is decoded: reclaim's read
/// memory is one chunk, not a segment. A record that does not verify is dropped (the user
/// told); a batch that cannot be read fails the victim (`Error::Io` "read").
fn copy_keeps(
    inner: &Arc<Inner>,
    v: &Victim,
    keeps: &[(SummaryEntry, RecordMeta)],
    data: Option<&AlignedBuf>,
    verdicts: &mut Verdicts<'_>,
) -> Result<()> {
    let window = inner.cfg.chunk_size;
    let mut unreadable = 0u64;
    let mut next = 0;
    while next < keeps.len() {
        let batch = match data {
            Some(_) => vec![(0, keeps.len(), 0, 0)],
            None => next_batch(&keeps[next..], window, next),
        };
        let _lease = WorkLease::new(inner, batch.iter().map(|g| g.3 - g.2).sum());
        let bufs = match data {
            Some(_) => vec![None],
            None => match read_groups(inner, v, &batch) {
                Ok(bufs) => bufs,
                Err(e) => return Err(keeps_unreadable(inner, v, &keeps[next..], verdicts, e)),
            },
        };
        for (g, buf) in batch.iter().zip(&bufs) {
            for (e, m) in &keeps[g.0..g.1] {
                let rec = match (data, buf) {
                    (Some(d), _) => decode_at(d.as_slice(), e.offset, v.seed),
                    (None, Some(b)) => decode_at(b.as_slice(), e.offset - g.2 as u32, v.seed),
                    (None, None) => Err(record::DecodeError::Truncated),
                };
                match rec {
                    Ok(r) => copy_one(inner, m, &r, verdicts),
                    Err(err) => {
                        let _ = inner.decode_error(err);
                        verdicts.evict(m);
                        verdicts.dropped += 1;
                        unreadable += 1;
                    }
                }
            }
        }
        next = batch.last().map_or(keeps.len(), |g| g.1);
    }
    if unreadable > 0 {
        FlashStats::add(&inner.stats.records_unreadable, unreadable);
        log::warn!(
            "flash reclaim: {unreadable} records of segment {} failed their checksum: \
             dropped (the user's index entries removed)",
            v.seg
        );
    }
    Ok(())
}

/// Read the groups of `batch` from the victim in one batch; the error of a read that failed.
fn read_groups(
    inner: &Inner,
    v: &Victim,
    batch: &[Group],
) -> std::io::Result<Vec<Option<AlignedBuf>>> {
    let ops = batch
        .iter()
        .map(|g| IoOp::Read {
            dev: v.dev,
            off: v.dev_off + g.2,
            buf: AlignedBuf::zeroed((g.3 - g.2) as usize),
        })
        .collect();
    let mut out = Vec::with_capacity(batch.len());
    let mut failed = None;
    for r in run_batch(inner.exec.as_ref(), ops) {
        match r {
            Ok(b) => {
                let n = b.as_ref().map_or(0, |b| b.len() as u64);
                FlashStats::add(&inner.stats.device_bytes_read, n);
                FlashStats::add(&inner.stats.reclaim_bytes_read, n);
                out.push(b);
            }
            Err(e) => failed = Some(e),
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// The records left to keep (`rest`) cannot be read: they are lost; tell the user (those
/// already copied have moved). The victim is retired, not erased; its notes still go down.
fn keeps_unreadable(
    inner: &Arc<Inner>,
    v: &Victim,
    rest: &[(SummaryEntry, RecordMeta)],
    verdicts: &mut Verdicts<'_>,
    e: std::io::Error,
) -> Error {
    for (_, m) in rest {
        verdicts.evict(m);
    }
    let n = rest.len() as u64;
    FlashStats::add(&inner.stats.records_unreadable, n);
    FlashStats::add(&inner.stats.records_dropped, verdicts.dropped + n);
    write_notes(inner, &verdicts.notes);
    let _ = inner.flush().wait();
    Error::io(&v.name, "read", e)
}

/// Append the kept record `rec` (reported as `m`) to the reclaim stream and tell the user
/// where it went; one that cannot be appended is evicted.
fn copy_one(inner: &Arc<Inner>, m: &RecordMeta, rec: &Record, verdicts: &mut Verdicts<'_>) {
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
            FlashStats::add(&inner.stats.records_rewritten, 1);
            FlashStats::add(&inner.stats.bytes_rewritten, rec.header.padded_len() as u64);
            if !inner.handler.relocated(m, loc) {
                inner.mark_dead(loc);
            }
        }
        Err(_) => {
            verdicts.evict(m);
            verdicts.dropped += 1;
        }
    }
}

/// Zero each victim's header page so recovery never resurrects its records (one batch of
/// writes), then free it. A victim whose write fails stays sealed and its device is failed;
/// the error of the first such write is returned after the others are freed.
fn erase(inner: &Arc<Inner>, ready: &[Prepared]) -> Result<u32> {
    let zero = Arc::new(AlignedBuf::zeroed(PAGE as usize));
    let ops = ready
        .iter()
        .map(|p| IoOp::Write {
            dev: p.v.dev,
            off: p.v.dev_off,
            buf: Arc::clone(&zero),
        })
        .collect();
    let results = run_batch(inner.exec.as_ref(), ops);
    let mut state = inner.state.lock();
    let mut freed = 0;
    let mut failure = None;
    for (p, r) in ready.iter().zip(results) {
        match r {
            Ok(_) => {
                FlashStats::add(&inner.stats.device_bytes_written, PAGE);
                state.segments.release(p.v.seg);
                FlashStats::add(&inner.stats.reclaims, 1);
                freed += 1;
            }
            Err(e) => {
                FlashStats::add(&inner.stats.write_errors, 1);
                state.segments.reclaim_failed(p.v.seg, false);
                inner.device_error(
                    &mut state,
                    p.v.dev,
                    "write (reclaim, segment header)",
                    &e.to_string(),
                );
                failure.get_or_insert(Error::io(&p.v.name, "write", e));
            }
        }
    }
    inner.update_gauges(&state);
    match failure {
        Some(e) => Err(e),
        None => Ok(freed),
    }
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
            kind: kind::TOMBSTONE,
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
fn append_retrying(inner: &Arc<Inner>, w: &RecordWrite<'_>) -> Result<Location> {
    inner.append_wait(inner.cfg.reclaim_stream, w, None, Duration::from_secs(10))
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
            location: Location::new(u64::from(offset), u64::from(len)).unwrap(),
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
