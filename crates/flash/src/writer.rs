//! The write path: append into a stream's RAM chunk, write full chunks sequentially, seal
//! segments with their summary, the durability barrier (`flush`), and write completions.
//!
//! Runs on caller threads (append, flush), the flusher thread (early chunk writes) and IO
//! executor threads (completions), always under the engine state lock except where a
//! function says otherwise. See `engine.rs` for the invariants.
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use crate::completion::{pair, Completion, Promise};
use crate::engine::{FlushWaiter, InflightWrite, Inner, LostRecord, RecordWrite, State, StreamId};
use crate::error::{Error, Result};
use crate::format::record::{self, padded_len, RecordHeader};
use crate::format::segment::{
    encode_tail, tail_len, Footer, SegmentHeader, SummaryEntry, SEGMENT_HEADER_LEN,
};
use crate::health::WRITE_ATTEMPTS;
use crate::io::{AlignedBuf, IoOp, IoRequest};
use crate::location::{Location, PAGE};
use crate::segments::SegState;
use crate::stats::FlashStats;

/// One device write and how to retry or report it.
struct WriteJob {
    id: u64,
    dev: usize,
    off: u64,
    buf: Arc<AlignedBuf>,
    /// 1 for the first try.
    attempt: u32,
    /// For a summary + footer write: the segment and its seq (else a chunk in `inflight`).
    tail_of: Option<(u32, u64)>,
}

fn round_page(x: u64) -> u64 {
    x.div_ceil(PAGE) * PAGE
}

impl Inner {
    pub(crate) fn append(
        self: &Arc<Self>,
        stream: StreamId,
        rec: &RecordWrite<'_>,
    ) -> Result<Location> {
        let len = padded_len(rec.key.len(), rec.value.len());
        let max = self.cfg.max_record_len();
        if len > max || rec.key.len() > usize::from(u16::MAX) || rec.value.len() > u32::MAX as usize
        {
            return Err(Error::RecordTooLarge { size: len, max });
        }
        if rec.kind == record::kind::PADDING {
            return Err(Error::Config(
                "record kind 0 is reserved for padding".into(),
            ));
        }
        let s = usize::from(stream);
        let mut guard = self.state.lock();
        let state = &mut *guard;
        if state.closed {
            return Err(Error::Closed);
        }
        if s >= state.streams.len() {
            return Err(Error::Config(format!("no stream {stream}")));
        }
        let chunk = self.cfg.chunk_size as usize;
        let seg = loop {
            let Some(seg) = state.streams[s].seg else {
                if self.chunk_bufs_full(state) {
                    FlashStats::add(&self.stats.append_rejected, 1);
                    return Err(Error::Busy("write chunk"));
                }
                self.open_segment(state, stream)?;
                continue;
            };
            let stream_state = &state.streams[s];
            let off = u64::from(stream_state.buf_off) + stream_state.fill as u64;
            let n = stream_state.summary.len();
            let fits_chunk = stream_state.fill + len <= chunk;
            let fits_seg = round_page(off + len as u64) <= self.seg_size - tail_len(n + 1);
            if fits_chunk && fits_seg {
                break seg;
            }
            if stream_state.in_flight >= self.knobs.max_chunks_in_flight()
                || self.chunk_bufs_full(state)
            {
                FlashStats::add(&self.stats.append_rejected, 1);
                return Err(Error::Busy("write chunk"));
            }
            if fits_seg {
                self.submit_chunk(state, stream);
            } else {
                self.seal(state, stream);
            }
        };
        if state.streams[s].buf.is_none() {
            // The chunk buffer was not replaced when the last one was submitted (all
            // `chunk_buffer_limit` in use): take one now, or wait.
            if self.chunk_bufs_full(state) {
                FlashStats::add(&self.stats.append_rejected, 1);
                return Err(Error::Busy("write chunk"));
            }
            let b = self.take_buf(state);
            state.streams[s].buf = Some(b);
        }
        let seed = state.segs[seg as usize].seed;
        let stream_state = &mut state.streams[s];
        let off = stream_state.buf_off + stream_state.fill as u32;
        let h = RecordHeader {
            kind: rec.kind,
            key_len: rec.key.len() as u16,
            value_len: rec.value.len() as u32,
            flags: rec.flags,
            exptime: rec.exptime,
            time: crate::engine::now_unix(),
            version: rec.version,
            key_id: rec.key_id,
        };
        let Some(buf) = stream_state.buf.as_mut() else {
            return Err(Error::Closed);
        };
        let written = buf
            .as_mut_slice()
            .get_mut(stream_state.fill..)
            .and_then(|dst| record::encode(dst, &h, rec.key, rec.value, seed));
        if written != Some(len) {
            return Err(Error::RecordTooLarge { size: len, max });
        }
        stream_state.fill += len;
        stream_state.chunk_records += 1;
        stream_state.oldest.get_or_insert_with(Instant::now);
        stream_state.summary.push(SummaryEntry {
            key_id: rec.key_id,
            version: rec.version,
            offset: off,
            len: h.unpadded_len() as u32,
            exptime: rec.exptime,
            flags: rec.flags,
            kind: rec.kind,
        });
        let info = &mut state.segs[seg as usize];
        info.add_record(len as u64, rec.exptime);
        FlashStats::add(&self.stats.objects_written, 1);
        FlashStats::add(&self.stats.bytes_written, len as u64);
        FlashStats::add(&self.stats.bytes_used, len as u64);
        self.location(seg, off, h.unpadded_len())
    }

    /// Whether an append of a `len`-byte record to `stream` would be taken now rather than
    /// refused by back-pressure (`Busy`, `NoSpace`). Refusals of another kind (closed, every
    /// device out) answer true: waiting would not help.
    pub(crate) fn can_append(&self, stream: StreamId, len: usize) -> bool {
        let state = self.state.lock();
        if state.closed || state.out.iter().all(|o| *o) {
            return true;
        }
        let Some(st) = state.streams.get(usize::from(stream)) else {
            return true;
        };
        // A new chunk needs a buffer: none while `chunk_buffer_limit` are in use.
        let bufs_full = self.chunk_bufs_full(&state);
        let busy = st.in_flight >= self.knobs.max_chunks_in_flight() || bufs_full;
        let free_ok = stream == self.cfg.reclaim_stream
            || state.free.total(&state.out) > self.cfg.reserve_segments as usize;
        if st.seg.is_none() {
            return free_ok && !bufs_full;
        }
        let off = u64::from(st.buf_off) + st.fill as u64;
        let fits_chunk = st.fill + len <= self.cfg.chunk_size as usize;
        let fits_seg =
            round_page(off + len as u64) <= self.seg_size - tail_len(st.summary.len() + 1);
        match (fits_chunk, fits_seg) {
            (true, true) => st.buf.is_some() || !bufs_full,
            (false, true) => !busy,
            (_, false) => !busy && free_ok,
        }
    }

    /// `append`, waiting (blocking the thread) while the stream has too many chunk writes in
    /// flight, or while no segment is free and the reclaimer is freeing one, up to `timeout`.
    pub(crate) fn append_wait(
        self: &Arc<Self>,
        stream: StreamId,
        rec: &RecordWrite<'_>,
        timeout: std::time::Duration,
    ) -> Result<Location> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.append(stream, rec) {
                Err(Error::Busy(q)) => {
                    let mut state = self.state.lock();
                    let busy = |state: &State| {
                        self.chunk_bufs_full(state)
                            || state
                                .streams
                                .get(usize::from(stream))
                                .is_some_and(|s| s.in_flight >= self.knobs.max_chunks_in_flight())
                    };
                    while busy(&state) {
                        if self.wake.wait_until(&mut state, deadline).timed_out() {
                            return Err(Error::Busy(q));
                        }
                    }
                }
                Err(Error::NoSpace) if Instant::now() < deadline => {
                    self.wake.notify_all();
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                other => return other,
            }
        }
    }

    fn take_buf(&self, state: &mut State) -> AlignedBuf {
        let chunk = self.cfg.chunk_size as usize;
        let mut b = state.pool.pop().unwrap_or_else(|| {
            self.chunk_bufs.fetch_add(1, Ordering::Relaxed);
            self.note_work();
            AlignedBuf::zeroed(chunk)
        });
        b.set_len(chunk);
        b
    }

    fn open_segment(&self, state: &mut State, stream: StreamId) -> Result<()> {
        let reserve = self.cfg.reserve_segments as usize;
        let free = state.free.total(&state.out);
        if free <= self.knobs.free_low() as usize + reserve {
            self.wake.notify_all();
        }
        if stream != self.cfg.reclaim_stream && free <= reserve {
            FlashStats::add(&self.stats.append_rejected, 1);
            return Err(if state.out.iter().all(|o| *o) {
                Error::DeviceFailed(format!("all {} devices", state.out.len()))
            } else {
                Error::NoSpace
            });
        }
        let tier = self
            .cfg
            .stream_tiers
            .get(usize::from(stream))
            .copied()
            .flatten();
        let Some(seg) = state.free.pop(&state.out, &self.tiers, tier) else {
            FlashStats::add(&self.stats.append_rejected, 1);
            return Err(if state.out.iter().all(|o| *o) {
                Error::DeviceFailed(format!("all {} devices", state.out.len()))
            } else {
                Error::NoSpace
            });
        };
        let seq = state.next_seq;
        state.next_seq += 1;
        let info = &mut state.segs[seg as usize];
        info.reset(&self.uuid, seq, stream);
        info.state = SegState::Open(stream);
        let header = SegmentHeader {
            seq,
            uuid: self.uuid,
            segment: seg,
            stream,
            created: crate::engine::now_unix(),
        }
        .encode();
        let mut buf = self.take_buf(state);
        buf.as_mut_slice()[..SEGMENT_HEADER_LEN].copy_from_slice(&header);
        let stream_state = &mut state.streams[usize::from(stream)];
        stream_state.seg = Some(seg);
        stream_state.buf = Some(buf);
        stream_state.buf_off = 0;
        stream_state.fill = SEGMENT_HEADER_LEN;
        stream_state.chunk_records = 0;
        stream_state.summary.clear();
        stream_state.oldest = None;
        self.update_gauges(state);
        Ok(())
    }

    /// Hand the stream's current chunk to the device (padded to its page end) and start a new
    /// chunk on the next page. No-op if the chunk holds no record.
    pub(crate) fn submit_chunk(self: &Arc<Self>, state: &mut State, stream: StreamId) {
        let s = usize::from(stream);
        if state.streams[s].chunk_records == 0 {
            return;
        }
        let Some(seg) = state.streams[s].seg else {
            return;
        };
        // The next chunk's buffer, unless `chunk_buffer_limit` are in use (a flush submits
        // whatever the limit): then the next append takes one once a write completes.
        let next = (!self.chunk_bufs_full(state)).then(|| self.take_buf(state));
        let stream_state = &mut state.streams[s];
        let Some(mut buf) = std::mem::replace(&mut stream_state.buf, next) else {
            return;
        };
        let padded = round_page(stream_state.fill as u64) as usize;
        buf.as_mut_slice()[stream_state.fill..padded].fill(0);
        buf.set_len(padded);
        let first = stream_state
            .summary
            .len()
            .saturating_sub(stream_state.chunk_records as usize);
        let entries = stream_state
            .summary
            .get(first..)
            .map(<[_]>::to_vec)
            .unwrap_or_default();
        let off = stream_state.buf_off;
        stream_state.buf_off += padded as u32;
        stream_state.fill = 0;
        stream_state.chunk_records = 0;
        stream_state.oldest = None;
        stream_state.in_flight += 1;
        let info = &mut state.segs[seg as usize];
        info.data_end = off + padded as u32;
        let (dev, dev_off) = (info.dev, info.dev_off + u64::from(off));
        let buf = Arc::new(buf);
        let id = state.next_write_id;
        state.next_write_id += 1;
        state.outstanding.insert(id);
        state.inflight.push(InflightWrite {
            id,
            seg,
            off,
            buf: Arc::clone(&buf),
            stream,
            entries,
        });
        self.submit_write(WriteJob {
            id,
            dev,
            off: dev_off,
            buf,
            attempt: 1,
            tail_of: None,
        });
    }

    fn submit_write(self: &Arc<Self>, job: WriteJob) {
        let me = Arc::clone(self);
        let op = IoOp::Write {
            dev: job.dev,
            off: job.off,
            buf: Arc::clone(&job.buf),
        };
        let started = std::time::Instant::now();
        self.exec.submit(IoRequest {
            op,
            done: Box::new(move |res| {
                me.stats.latency.write.record(started.elapsed());
                me.write_done(job, res.map(|_| ()))
            }),
        });
    }

    /// Write the last chunk and the summary + footer; the stream then has no open segment.
    pub(crate) fn seal(self: &Arc<Self>, state: &mut State, stream: StreamId) {
        self.submit_chunk(state, stream);
        let s = usize::from(stream);
        let Some(seg) = state.streams[s].seg.take() else {
            return;
        };
        let summary = std::mem::take(&mut state.streams[s].summary);
        if let Some(b) = state.streams[s].buf.take() {
            state.pool.push(b);
        }
        state.streams[s].fill = 0;
        state.streams[s].buf_off = 0;
        let order = state.next_order;
        state.next_order += 1;
        let info = &mut state.segs[seg as usize];
        info.order = order;
        let tail = tail_len(summary.len());
        let footer = Footer {
            seq: info.seq,
            records: summary.len() as u32,
            summary_offset: (self.seg_size - tail) as u32,
            data_end: info.data_end,
            max_exptime: if info.all_expire { info.max_exptime } else { 0 },
            summary_crc: 0,
        };
        let bytes = encode_tail(&summary, footer, info.seed);
        let mut buf = AlignedBuf::zeroed(bytes.len());
        buf.as_mut_slice().copy_from_slice(&bytes);
        info.state = SegState::Sealed;
        info.has_summary = true;
        let (dev, dev_off, seq) = (info.dev, info.dev_off + self.seg_size - tail, info.seq);
        let id = state.next_write_id;
        state.next_write_id += 1;
        state.outstanding.insert(id);
        self.submit_write(WriteJob {
            id,
            dev,
            off: dev_off,
            buf: Arc::new(buf),
            attempt: 1,
            tail_of: Some((seg, seq)),
        });
    }

    /// Completion of a write (executor thread). A failed write is tried again at once, up
    /// to [`WRITE_ATTEMPTS`] times; the last failure loses the chunk's records (queued for
    /// the handler's `lost`), tells the pending flushes, and makes the device failing.
    fn write_done(self: &Arc<Self>, job: WriteJob, res: io::Result<()>) {
        if let Err(e) = &res {
            FlashStats::add(&self.stats.write_errors, 1);
            if job.attempt < WRITE_ATTEMPTS && !self.state.lock().closed {
                FlashStats::add(&self.stats.write_retries, 1);
                log::debug!(
                    "flash write on {} failed (try {} of {WRITE_ATTEMPTS}): {e}; retrying",
                    self.dev_name(job.dev),
                    job.attempt
                );
                self.submit_write(WriteJob {
                    attempt: job.attempt + 1,
                    ..job
                });
                return;
            }
        }
        let WriteJob {
            id,
            dev,
            off,
            buf,
            tail_of,
            ..
        } = job;
        let written = buf.len() as u64;
        drop(buf);
        let ready = {
            let mut guard = self.state.lock();
            let state = &mut *guard;
            state.outstanding.remove(&id);
            let w = state
                .inflight
                .iter()
                .position(|w| w.id == id)
                .map(|pos| state.inflight.swap_remove(pos));
            if let Some(w) = &w {
                if let Some(stream_state) = state.streams.get_mut(usize::from(w.stream)) {
                    stream_state.in_flight = stream_state.in_flight.saturating_sub(1);
                }
            }
            match res {
                Ok(()) => {
                    FlashStats::add(&self.stats.device_bytes_written, written);
                    // Records need a sync before a flush may call them durable; a summary
                    // does not (recovery scans a segment whose summary is missing), so it
                    // rides on the device's next sync.
                    if w.is_some() {
                        if let Some(h) = state.health.get_mut(dev) {
                            h.write_gen += 1;
                        }
                    }
                }
                Err(e) => {
                    let msg = format!("write at {off} on {}: {e}", self.dev_name(dev));
                    if let Some(w) = &w {
                        let mut told = false;
                        for w in state.waiters.iter_mut().filter(|w| w.target >= id) {
                            w.error.get_or_insert_with(|| msg.clone());
                            told = true;
                        }
                        if !told {
                            // No flush is waiting for this write: the next flush reports it.
                            state.write_error.get_or_insert(msg.clone());
                        }
                        self.lose_chunk(state, w, &msg);
                    } else if let Some((seg, seq)) = tail_of {
                        // The records are on the device; only the summary is missing, so
                        // recovery and reclaim scan the segment instead. Nothing is lost:
                        // no flush fails for it.
                        if let Some(info) = state.segs.get_mut(seg as usize) {
                            if info.seq == seq {
                                info.has_summary = false;
                            }
                        }
                    }
                    self.device_error(state, dev, "write", &e.to_string());
                }
            }
            if let Some(w) = w {
                // A buffer not pooled is freed (or soon, by the reader still holding it).
                match Arc::try_unwrap(w.buf) {
                    Ok(b) if state.pool.len() < state.streams.len() * 2 => state.pool.push(b),
                    _ => {
                        self.chunk_bufs.fetch_sub(1, Ordering::Relaxed);
                        self.note_work();
                    }
                }
            }
            let min_out = state.outstanding.first().copied().unwrap_or(u64::MAX);
            let (ready, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut state.waiters)
                .into_iter()
                .partition(|w| w.target < min_out);
            state.waiters = wait;
            ready
        };
        for w in ready {
            self.finish_flush(w);
        }
        self.wake.notify_all();
    }

    /// The chunk `w` could not be written: its records are lost. Queue them (with their
    /// content) for the handler, drop them from the open segment's summary so a seal does not
    /// list them, and count them dead.
    fn lose_chunk(&self, state: &mut State, w: &InflightWrite, why: &str) {
        let Some(info) = state.segs.get(w.seg as usize) else {
            return;
        };
        let (seq, seed) = (info.seq, info.seed);
        let end = w.off + w.buf.len() as u32;
        let mut lost = Vec::with_capacity(w.entries.len());
        for e in &w.entries {
            let Ok(meta) = self.record_meta(w.seg, e, seq) else {
                continue;
            };
            let record = e
                .offset
                .checked_sub(w.off)
                .and_then(|rel| w.buf.as_slice().get(rel as usize..))
                .and_then(|b| record::decode_record(b, seed).ok());
            lost.push(LostRecord { meta, record });
        }
        if let Some(stream_state) = state.streams.get_mut(usize::from(w.stream)) {
            if stream_state.seg == Some(w.seg) {
                stream_state
                    .summary
                    .retain(|e| e.offset < w.off || e.offset >= end);
            }
        }
        let n = lost.len() as u32;
        if let Some(info) = state.segs.get_mut(w.seg as usize) {
            info.dead = (info.dead + n).min(info.records);
        }
        FlashStats::add(&self.stats.chunks_lost, 1);
        FlashStats::add(&self.stats.records_lost, u64::from(n));
        log::warn!(
            "flash: {n} records lost: chunk {why} (failed {WRITE_ATTEMPTS} times); the user \
             is told which"
        );
        state.lost_total += lost.len() as u64;
        state.lost.extend(lost);
    }

    pub(crate) fn dev_name(&self, dev: usize) -> &str {
        self.devices.get(dev).map(|d| d.name()).unwrap_or("?")
    }

    /// All writes up to the waiter's target are done: sync every device with completed
    /// writes not yet synced, then complete (called without the state lock).
    fn finish_flush(self: &Arc<Self>, w: FlushWaiter) {
        if let Some(e) = w.error {
            w.promise
                .complete(Err(Error::io("flash", "flush", io::Error::other(e))));
            return;
        }
        let devs: Vec<(usize, u64)> = {
            let state = self.state.lock();
            state
                .health
                .iter()
                .enumerate()
                .filter(|(_, h)| h.write_gen > h.synced_gen)
                .map(|(d, h)| (d, h.write_gen))
                .collect()
        };
        if devs.is_empty() {
            FlashStats::add(&self.stats.flushes, 1);
            w.promise.complete(Ok(()));
            return;
        }
        struct Join {
            left: AtomicUsize,
            error: Mutex<Option<String>>,
            promise: Mutex<Option<Promise<()>>>,
        }
        let join = Arc::new(Join {
            left: AtomicUsize::new(devs.len()),
            error: Mutex::new(None),
            promise: Mutex::new(Some(w.promise)),
        });
        for (dev, gen) in devs {
            let me = Arc::clone(self);
            let join = Arc::clone(&join);
            self.exec.submit(IoRequest {
                op: IoOp::Sync { dev },
                done: Box::new(move |res| {
                    {
                        let mut guard = me.state.lock();
                        let state = &mut *guard;
                        match &res {
                            Ok(_) => {
                                if let Some(h) = state.health.get_mut(dev) {
                                    h.synced_gen = h.synced_gen.max(gen);
                                }
                            }
                            Err(e) => {
                                FlashStats::add(&me.stats.sync_errors, 1);
                                let msg = format!("sync on {}: {e}", me.dev_name(dev));
                                join.error.lock().get_or_insert(msg);
                                me.device_error(state, dev, "sync", &e.to_string());
                            }
                        }
                    }
                    if join.left.fetch_sub(1, Ordering::AcqRel) == 1 {
                        let out = match join.error.lock().take() {
                            Some(e) => Err(Error::io("flash", "flush", io::Error::other(e))),
                            None => {
                                FlashStats::add(&me.stats.flushes, 1);
                                Ok(())
                            }
                        };
                        if let Some(p) = join.promise.lock().take() {
                            p.complete(out);
                        }
                    }
                }),
            });
        }
    }

    pub(crate) fn flush(self: &Arc<Self>) -> Completion<()> {
        let (promise, completion) = pair();
        let waiter = {
            let mut guard = self.state.lock();
            let state = &mut *guard;
            if state.closed {
                return Completion::ready(Err(Error::Closed));
            }
            for s in 0..state.streams.len() {
                self.submit_chunk(state, s as StreamId);
            }
            let error = state.write_error.take();
            let w = FlushWaiter {
                target: state.next_write_id - 1,
                promise,
                error,
            };
            if state.outstanding.first().is_some_and(|&m| m <= w.target) {
                state.waiters.push(w);
                None
            } else {
                Some(w)
            }
        };
        if let Some(w) = waiter {
            self.finish_flush(w);
        }
        completion
    }

    /// Hand every stream's partly filled chunk to the device now (no wait, no sync).
    pub(crate) fn write_buffers(self: &Arc<Self>) {
        let mut guard = self.state.lock();
        let state = &mut *guard;
        if state.closed {
            return;
        }
        for s in 0..state.streams.len() {
            self.submit_chunk(state, s as StreamId);
        }
    }

    /// Write chunks whose oldest record is older than `age` (flusher thread).
    pub(crate) fn flush_old_chunks(self: &Arc<Self>, state: &mut State, age: std::time::Duration) {
        for s in 0..state.streams.len() {
            let old = state.streams[s].oldest.is_some_and(|t| t.elapsed() >= age);
            if old
                && state.streams[s].in_flight < self.knobs.max_chunks_in_flight()
                && !self.chunk_bufs_full(state)
            {
                self.submit_chunk(state, s as StreamId);
            }
        }
    }

    pub(crate) fn mark_dead(&self, loc: Location) {
        let (seg, _) = self.split(loc.byte_addr());
        let mut state = self.state.lock();
        if let Some(info) = state.segs.get_mut(seg as usize) {
            if info.dead < info.records && !matches!(info.state, SegState::Free) {
                let before = info.dead_bytes();
                info.dead += 1;
                let delta = info.dead_bytes() - before;
                FlashStats::add(&self.stats.bytes_dead, delta);
            }
        }
    }
}
