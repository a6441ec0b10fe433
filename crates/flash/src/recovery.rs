//! Recovery at open: every segment with a valid header of this instance is recovered in
//! sequence order, from its checksummed summary (sealed: no record read; a named record is
//! verified again when read) or scanned up to the first record that does not verify (open at
//! the crash, or damaged tail); with `recovery_full_scan` every segment is scanned. Records
//! reach the user oldest first. The superblocks were checked before (`layout.rs`).
//!
//! Invariant: losses are counted and logged, never silent (the cases and their counters are
//! in `docs/faults.md`, "Damage found at start", and `docs/format.md`, "Recovery"); a
//! segment that cannot be read is retired (`Failed`), never reused in this run.
//!
//! Runs on the thread calling `Flash::open`, before any other engine thread exists.

use std::time::Instant;

use crate::error::Result;
use crate::format::record::{self, DecodeError};
use crate::format::segment::{
    decode_summary, Footer, SegmentHeader, SummaryEntry, FOOTER_LEN, SEGMENT_HEADER_LEN,
};
use crate::format::segment_seed;
use crate::handler::RecordMeta;
use crate::inner::Inner;
use crate::io::{run_batch, AlignedBuf, IoOp};
use crate::location::PAGE;
use crate::segments::SegState;
use crate::stats::FlashStats;

/// Segments past which per-segment loss lines are summed up in one line.
const LOG_EACH: u64 = 10;

fn all_zero(b: &[u8]) -> bool {
    b.iter().all(|&x| x == 0)
}

/// What a segment yielded.
struct Found {
    entries: Vec<SummaryEntry>,
    data_end: u32,
    sealed: bool,
}

/// A segment header found at open: `(seq, segment, stream)`.
type Header = (u64, u32, u8);

/// Rebuild the segment table and report records. Called once from `Flash::open`.
pub(crate) fn recover(
    inner: &Inner,
    formatted: bool,
    mut on_record: impl FnMut(RecordMeta),
) -> Result<()> {
    let t0 = Instant::now();
    let nsegs = inner.state.lock().segments.len();
    let mut losses = Losses::default();
    // Segments that could not be read: neither recovered nor reused this run.
    let mut retired = vec![false; nsegs];
    let mut headers = if formatted {
        Vec::new()
    } else {
        read_headers(inner, &mut losses, &mut retired)
    };
    headers.sort_unstable();
    let mut max_seq = 0;
    let mut live = vec![false; nsegs];
    // Windows of 64 segments bound the summaries held in RAM at once.
    for window in headers.chunks(64) {
        let found = read_segments(inner, window, &mut losses);
        for (&(seq, seg, stream), found) in window.iter().zip(found) {
            max_seq = max_seq.max(seq);
            let Some(found) = found else {
                retired[seg as usize] = true;
                continue;
            };
            if found.entries.is_empty() {
                continue;
            }
            live[seg as usize] = true;
            FlashStats::add(&inner.stats.recovered_segments, 1);
            inner.state.lock().segments.recovered(
                seg,
                (&inner.uuid, seq, stream),
                found.sealed,
                found.data_end,
                &found.entries,
            );
            for e in &found.entries {
                let Ok(meta) = inner.record_meta(seg, e, seq) else {
                    continue;
                };
                FlashStats::add(&inner.stats.recovered_records, 1);
                on_record(meta);
            }
        }
    }
    let mut state = inner.state.lock();
    state.segments.finish_recovery(max_seq, &live, &retired);
    losses.summary();
    inner.update_gauges(&state);
    FlashStats::set(
        &inner.stats.recovery_time_us,
        t0.elapsed().as_micros() as u64,
    );
    Ok(())
}

/// Read every segment's header page (the journal's left out): the headers of this
/// instance's segments, in segment order. A header that cannot be read retires its segment.
fn read_headers(inner: &Inner, losses: &mut Losses, retired: &mut [bool]) -> Vec<Header> {
    let exec = inner.exec.as_ref();
    let mut headers = Vec::new();
    let (places, journal_seg): (Vec<(usize, u64)>, bool) = {
        let state = inner.state.lock();
        let places = state.segments.iter().map(|s| (s.dev, s.dev_off)).collect();
        let journal = state.segments.get(0).map(|s| s.state) == Some(SegState::Journal);
        (places, journal)
    };
    for (batch_start, batch) in places.chunks(64).enumerate().map(|(i, b)| (i * 64, b)) {
        let ops = batch
            .iter()
            .map(|&(dev, off)| IoOp::Read {
                dev,
                off,
                buf: AlignedBuf::zeroed(PAGE as usize),
            })
            .collect();
        for (i, r) in run_batch(exec, ops).into_iter().enumerate() {
            let seg = (batch_start + i) as u32;
            if seg == 0 && journal_seg {
                continue;
            }
            let dev = inner.dev_name(batch[i].0);
            let buf = match r {
                Ok(Some(b)) => b,
                Ok(None) => continue,
                Err(e) => {
                    losses.unreadable(inner, seg, dev, &format!("header read failed: {e}"));
                    retired[seg as usize] = true;
                    continue;
                }
            };
            FlashStats::add(&inner.stats.device_bytes_read, PAGE);
            match SegmentHeader::decode(buf.as_slice()) {
                Some(h) if h.uuid == inner.uuid && h.segment == seg => {
                    headers.push((h.seq, seg, h.stream));
                }
                // Another device set's header (before a reformat): free.
                Some(_) => {}
                None if all_zero(&buf.as_slice()[..SEGMENT_HEADER_LEN]) => {}
                None => losses.unreadable(
                    inner,
                    seg,
                    dev,
                    "header page is neither a segment header nor zero (overwritten?)",
                ),
            }
        }
    }
    headers
}

/// Losses found by recovery: counted in the engine stats, logged one line per segment up
/// to [`LOG_EACH`], then summed up in one line at the end.
#[derive(Default)]
struct Losses {
    logged: u64,
    unlogged: u64,
}

impl Losses {
    fn log(&mut self, line: String) {
        if self.logged < LOG_EACH {
            self.logged += 1;
            log::warn!("{line}");
        } else {
            self.unlogged += 1;
        }
    }

    /// A segment whose header could not be read or is damaged: whatever it held is lost.
    fn unreadable(&mut self, inner: &Inner, seg: u32, dev: &str, why: &str) {
        FlashStats::add(&inner.stats.recovery_unreadable_headers, 1);
        self.log(format!(
            "flash recovery: segment {seg} on {dev}: {why}; the records it held (if any) are \
             lost"
        ));
    }

    /// A segment recovered only in part (or not at all): corrupt summary, torn or damaged
    /// records, or a read that failed.
    fn damaged(&mut self, inner: &Inner, seg: u32, dev: &str, why: &str) {
        FlashStats::add(&inner.stats.recovery_damaged_segments, 1);
        self.log(format!("flash recovery: segment {seg} on {dev}: {why}"));
    }

    fn summary(&self) {
        if self.unlogged > 0 {
            log::warn!(
                "flash recovery: {} more damaged or unreadable segments (see \
                 flash_recovery_damaged_segments, flash_recovery_unreadable_headers)",
                self.unlogged
            );
        }
    }
}

/// Read the records of every segment in `headers` (seq order): from their summaries if
/// sealed (and full scan is off), else by scanning. IO is issued in batches so the device
/// sees many reads in flight: footers, then summaries, then segments to scan. `None` for a
/// segment that could not be read at all (logged, counted; the caller retires it).
fn read_segments(inner: &Inner, headers: &[Header], losses: &mut Losses) -> Vec<Option<Found>> {
    let mut window = Window::new(inner, headers);
    if !inner.cfg.recovery_full_scan {
        let footers = window.read_footers();
        window.read_summaries(&footers);
    }
    window.scan_rest(losses);
    window.into_found()
}

/// One window of [`recover`]: its segments, where they are and what they yielded so far.
struct Window<'a> {
    inner: &'a Inner,
    headers: &'a [Header],
    /// Each segment's checksum seed (from its seq).
    seeds: Vec<u32>,
    /// Each segment's device and device offset.
    places: Vec<(usize, u64)>,
    found: Vec<Option<Found>>,
    /// The segment could not be read at all.
    unreadable: Vec<bool>,
}

impl<'a> Window<'a> {
    fn new(inner: &'a Inner, headers: &'a [Header]) -> Self {
        let seeds = headers
            .iter()
            .map(|h| segment_seed(&inner.uuid, h.0))
            .collect();
        let places = {
            let state = inner.state.lock();
            headers
                .iter()
                .map(|h| {
                    state
                        .segments
                        .get(h.1)
                        .map_or((0, 0), |s| (s.dev, s.dev_off))
                })
                .collect()
        };
        Self {
            inner,
            headers,
            seeds,
            places,
            found: headers.iter().map(|_| None).collect(),
            unreadable: vec![false; headers.len()],
        }
    }

    /// For each index `i` of `batch`, read the `(offset, length)` that `at(i)` names within
    /// segment `headers[i]`, all in one batch; results in `batch` order.
    fn read(
        &self,
        batch: &[usize],
        at: &dyn Fn(usize) -> (u64, u64),
    ) -> Vec<std::io::Result<Option<AlignedBuf>>> {
        let ops = batch
            .iter()
            .map(|&i| {
                let (dev, off) = self.places[i];
                let (rel, len) = at(i);
                IoOp::Read {
                    dev,
                    off: off + rel,
                    buf: AlignedBuf::zeroed(len as usize),
                }
            })
            .collect();
        run_batch(self.inner.exec.as_ref(), ops)
    }

    /// The name of the device holding segment `i`.
    fn dev_name(&self, i: usize) -> String {
        self.inner.dev_name(self.places[i].0).to_string()
    }

    /// Each segment's footer, if it reads and verifies (else it will be scanned).
    fn read_footers(&self) -> Vec<Option<Footer>> {
        let seg_size = self.inner.seg_size;
        let mut footers: Vec<Option<Footer>> = vec![None; self.headers.len()];
        let idx: Vec<usize> = (0..self.headers.len()).collect();
        for batch in idx.chunks(64) {
            let footers_read = self.read(batch, &|_| (seg_size - PAGE, PAGE));
            for (&i, r) in batch.iter().zip(footers_read) {
                // A footer that cannot be read: scan the segment instead.
                let Ok(Some(buf)) = r else { continue };
                FlashStats::add(&self.inner.stats.device_bytes_read, PAGE);
                let fbuf = &buf.as_slice()[PAGE as usize - FOOTER_LEN..];
                footers[i] = Footer::decode(fbuf, self.seeds[i]).filter(|f| {
                    f.seq == self.headers[i].0
                        && u64::from(f.summary_offset).is_multiple_of(PAGE)
                        && u64::from(f.summary_offset) < seg_size
                        && f.data_end <= f.summary_offset
                });
            }
        }
        footers
    }

    /// The entries of every segment with a footer, from its summary when that reads and
    /// verifies (else it will be scanned).
    fn read_summaries(&mut self, footers: &[Option<Footer>]) {
        let seg_size = self.inner.seg_size;
        let sealed: Vec<usize> = (0..self.headers.len())
            .filter(|&i| footers[i].is_some())
            .collect();
        for batch in sealed.chunks(32) {
            // Every index in `sealed` has a footer.
            let summary_at = |i: usize| {
                let so = footers[i].map_or(0, |f| u64::from(f.summary_offset));
                (so, seg_size - so)
            };
            for (&i, r) in batch.iter().zip(self.read(batch, &summary_at)) {
                // A summary that cannot be read: scan the segment instead.
                let (Ok(Some(buf)), Some(f)) = (r, footers[i]) else {
                    continue;
                };
                FlashStats::add(&self.inner.stats.device_bytes_read, buf.len() as u64);
                match decode_summary(buf.as_slice(), &f, self.seeds[i]) {
                    Some(entries) => {
                        self.found[i] = Some(Found {
                            entries,
                            data_end: f.data_end,
                            sealed: true,
                        })
                    }
                    None => {
                        // Not a loss yet: the scan below finds what verifies.
                        FlashStats::add(&self.inner.stats.checksum_failures, 1);
                        log::warn!(
                            "flash recovery: segment {} on {}: summary corrupt; scanning its \
                             records instead",
                            self.headers[i].1,
                            self.dev_name(i)
                        );
                    }
                }
            }
        }
    }

    /// Scan every segment not recovered from its summary, up to the first record that does
    /// not verify; count and log what is lost.
    fn scan_rest(&mut self, losses: &mut Losses) {
        let inner = self.inner;
        let seg_size = inner.seg_size;
        let to_scan: Vec<usize> = (0..self.headers.len())
            .filter(|&i| self.found[i].is_none())
            .collect();
        for batch in to_scan.chunks(4) {
            for (&i, r) in batch.iter().zip(self.read(batch, &|_| (0, seg_size))) {
                let seg = self.headers[i].1;
                let buf = match r {
                    Ok(Some(b)) => b,
                    Ok(None) => continue,
                    Err(e) => {
                        FlashStats::add(&inner.stats.read_errors, 1);
                        losses.damaged(
                            inner,
                            seg,
                            &self.dev_name(i),
                            &format!("cannot be read ({e}): retired, the records it held are lost"),
                        );
                        self.unreadable[i] = true;
                        continue;
                    }
                };
                FlashStats::add(&inner.stats.device_bytes_read, seg_size);
                let (entries, data_end, damaged) = scan(buf.as_slice(), self.seeds[i]);
                if damaged {
                    FlashStats::add(&inner.stats.checksum_failures, 1);
                    losses.damaged(
                        inner,
                        seg,
                        &self.dev_name(i),
                        &format!(
                            "a record does not verify after {} good ones (torn or damaged); \
                             the records past it are lost",
                            entries.len()
                        ),
                    );
                }
                self.found[i] = Some(Found {
                    entries,
                    data_end,
                    sealed: false,
                });
            }
        }
    }

    /// What each segment yielded; `None` for one that could not be read.
    fn into_found(self) -> Vec<Option<Found>> {
        self.found
            .into_iter()
            .zip(self.unreadable)
            .map(|(f, bad)| {
                (!bad).then(|| {
                    f.unwrap_or(Found {
                        entries: Vec::new(),
                        data_end: 0,
                        sealed: false,
                    })
                })
            })
            .collect()
    }
}

/// Parse records from the start of a segment image until the first that does not verify.
/// Returns the entries, the page-aligned end of the last record, and whether the scan ended
/// inside a page (a torn or corrupt record rather than the end of what was written).
pub(crate) fn scan(seg: &[u8], seed: u32) -> (Vec<SummaryEntry>, u32, bool) {
    let mut entries = Vec::new();
    let mut off = SEGMENT_HEADER_LEN;
    let mut end = 0usize;
    let page = PAGE as usize;
    let damaged = loop {
        let Some(rest) = seg.get(off..) else {
            break false;
        };
        if rest.is_empty() {
            break false;
        }
        match record::decode(rest, seed) {
            Ok(h) => {
                entries.push(SummaryEntry {
                    key_id: h.key_id,
                    version: h.version,
                    offset: off as u32,
                    len: h.unpadded_len() as u32,
                    exptime: h.exptime,
                    flags: h.flags,
                    kind: h.kind,
                });
                off += h.padded_len();
                end = off;
            }
            Err(DecodeError::Padding) if !off.is_multiple_of(page) => {
                off = off.div_ceil(page) * page
            }
            Err(DecodeError::Padding) => break false,
            Err(_) => break !off.is_multiple_of(page),
        }
    };
    (entries, (end.div_ceil(page) * page) as u32, damaged)
}

#[cfg(test)]
#[path = "recovery_tests.rs"]
mod tests;
