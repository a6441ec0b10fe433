//! The write path: append into a stream's RAM chunk, write full chunks sequentially, seal
//! segments with their summary, the durability barrier (`flush`), and write completions.
//! Methods of the engine core ([`Inner`]); they move state between the segment table and the
//! write queue (`state.rs`) and hand the device writes to the executor.
//!
//! Runs on caller threads (append, flush), the flusher thread (early chunk writes) and IO
//! executor threads (completions), always under the engine state lock except where a
//! function says otherwise. See `inner.rs` for the invariants.
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use crate::clock::now_unix;
use crate::completion::{pair, Completion, Promise};
use crate::error::{Error, Result};
use crate::format::record::{self, padded_len, RecordHeader};
use crate::format::segment::{encode_tail, tail_len, Footer, SegmentHeader, SEGMENT_HEADER_LEN};
use crate::handler::{LostRecord, RecordWrite, StreamId, ValueFill};
use crate::health::WRITE_ATTEMPTS;
use crate::inner::Inner;
use crate::io::{AlignedBuf, IoOp, IoRequest};
use crate::location::Location;
use crate::state::State;
use crate::stats::FlashStats;
use crate::stream::{Chunk, Room};
use crate::write_queue::{FlushWaiter, InflightWrite, PendingTail, WriteQueue};

/// One device write and how to retry or report it.
struct WriteJob {
    id: u64,
    dev: usize,
    off: u64,
    buf: Arc<AlignedBuf>,
    /// 1 for the first try.
    attempt: u32,
    /// For a summary + footer write: the segment and its seq (else a chunk in flight).
    tail_of: Option<(u32, u64)>,
}

impl Inner {
    /// See [`crate::Flash::append`].
    pub(crate) fn append(
        self: &Arc<Self>,
        stream: StreamId,
        rec: &RecordWrite<'_>,
    ) -> Result<Location> {
        self.append_parts(stream, rec, None)
    }

    /// See [`crate::Flash::append_with`]: `rec`'s value followed by `fill`'s bytes.
    pub(crate) fn append_parts(
        self: &Arc<Self>,
        stream: StreamId,
        rec: &RecordWrite<'_>,
        fill: Option<ValueFill<'_>>,
    ) -> Result<Location> {
        let value_len = rec.value.len() + fill.map_or(0, |f| f.len);
        let len = padded_len(rec.key.len(), value_len);
        let max = self.cfg.max_record_len();
        if len > max || rec.key.len() > usize::from(u16::MAX) || value_len > u32::MAX as usize {
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
        if state.closed() {
            return Err(Error::Closed);
        }
        if s >= state.writes.streams() {
            return Err(Error::Config(format!("no stream {stream}")));
        }
        let seg = self.room_for(state, stream, len)?;
        let h = RecordHeader {
            kind: rec.kind,
            key_len: rec.key.len() as u16,
            value_len: value_len as u32,
            flags: rec.flags,
            exptime: rec.exptime,
            time: now_unix(),
            version: rec.version,
            key_id: rec.key_id,
        };
        let seed = state.segments.get(seg).map_or(0, |i| i.seed);
        let Some(stream_state) = state.writes.stream_mut(s).filter(|st| st.has_buf()) else {
            return Err(Error::Closed);
        };
        let Some(off) = stream_state.push(&h, (rec.key, rec.value, fill), len, seed) else {
            return Err(Error::RecordTooLarge { size: len, max });
        };
        FlashStats::set(
            &self.stats.open_segment_table_bytes,
            state.writes.summary_bytes(),
        );
        state
            .segments
            .add_record(seg, len as u64, rec.exptime, rec.kind);
        FlashStats::add(&self.stats.objects_written, 1);
        FlashStats::add(&self.stats.bytes_written, len as u64);
        FlashStats::add(&self.stats.bytes_used, len as u64);
        self.location(seg, off, h.unpadded_len())
    }

    /// Make room for a `len`-byte record in `stream`'s current chunk (opening a segment,
    /// handing the chunk to the device or sealing the segment as needed) and see that a chunk
    /// buffer is in place. Returns the open segment; `Busy` or `NoSpace` if the room cannot
    /// be made now.
    fn room_for(self: &Arc<Self>, state: &mut State, stream: StreamId, len: usize) -> Result<u32> {
        let s = usize::from(stream);
        let chunk = self.cfg.chunk_size as usize;
        let busy = |me: &Self| {
            FlashStats::add(&me.stats.append_rejected, 1);
            Err(Error::Busy("write chunk"))
        };
        let seg = loop {
            let Some(st) = state.writes.stream(s) else {
                return Err(Error::Config(format!("no stream {stream}")));
            };
            let Some(seg) = st.seg() else {
                if self.chunk_bufs_full(&state.writes) {
                    return busy(self);
                }
                self.open_segment(state, stream)?;
                continue;
            };
            let room = st.room(len, chunk, self.seg_size);
            if room.chunk && room.segment {
                break seg;
            }
            if st.in_flight() >= self.knobs.max_chunks_in_flight()
                || self.chunk_bufs_full(&state.writes)
            {
                return busy(self);
            }
            if room.segment {
                self.submit_chunk(state, stream);
            } else {
                self.seal(state, stream);
            }
        };
        if state.writes.stream(s).is_some_and(|st| !st.has_buf()) {
            // The chunk buffer was not replaced when the last one was submitted (all
            // `chunk_buffer_limit` in use): take one now, or wait.
            if self.chunk_bufs_full(&state.writes) {
                return busy(self);
            }
            let b = self.take_buf(&mut state.writes);
            if let Some(st) = state.writes.stream_mut(s) {
                st.give_buf(b);
            }
        }
        Ok(seg)
    }

    /// Whether an append of a `len`-byte record to `stream` would be taken now rather than
    /// refused by back-pressure (`Busy`, `NoSpace`). Refusals of another kind (closed, every
    /// device out) answer true: waiting would not help.
    pub(crate) fn can_append(&self, stream: StreamId, len: usize) -> bool {
        let state = self.state.lock();
        if state.closed() || state.health.all_out() {
            return true;
        }
        let Some(st) = state.writes.stream(usize::from(stream)) else {
            return true;
        };
        // A new chunk needs a buffer: none while `chunk_buffer_limit` are in use.
        let bufs_full = self.chunk_bufs_full(&state.writes);
        let busy = st.in_flight() >= self.knobs.max_chunks_in_flight() || bufs_full;
        let free_ok = stream == self.cfg.reclaim_stream
            || state.free_total() > self.cfg.reserve_segments as usize;
        if st.seg().is_none() {
            return free_ok && !bufs_full;
        }
        let room = st.room(len, self.cfg.chunk_size as usize, self.seg_size);
        match room {
            Room {
                chunk: true,
                segment: true,
            } => st.has_buf() || !bufs_full,
            Room {
                chunk: false,
                segment: true,
            } => !busy,
            Room { segment: false, .. } => !busy && free_ok,
        }
    }

    /// `append`, waiting (blocking the thread) while the stream has too many chunk writes in
    /// flight, or while no segment is free and the reclaimer is freeing one, up to `timeout`.
    pub(crate) fn append_wait(
        self: &Arc<Self>,
        stream: StreamId,
        rec: &RecordWrite<'_>,
        fill: Option<ValueFill<'_>>,
        timeout: std::time::Duration,
    ) -> Result<Location> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.append_parts(stream, rec, fill) {
                Err(Error::Busy(q)) => {
                    let mut state = self.state.lock();
                    let busy = |state: &State| {
                        self.chunk_bufs_full(&state.writes)
                            || state
                                .writes
                                .stream(usize::from(stream))
                                .is_some_and(|s| s.in_flight() >= self.knobs.max_chunks_in_flight())
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

    /// A chunk buffer: a pooled one, else a new one (counted in `work_bytes`).
    fn take_buf(&self, writes: &mut WriteQueue) -> AlignedBuf {
        let chunk = self.cfg.chunk_size as usize;
        let mut b = writes.pooled().unwrap_or_else(|| {
            self.chunk_bufs.fetch_add(1, Ordering::Relaxed);
            self.note_work();
            AlignedBuf::zeroed(chunk)
        });
        b.set_len(chunk);
        b
    }

    /// Open a free segment for `stream`: its header goes first into a new chunk.
    fn open_segment(&self, state: &mut State, stream: StreamId) -> Result<()> {
        let reserve = self.cfg.reserve_segments as usize;
        let free = state.free_total();
        // The reclaimer runs below the low watermark, and below the high one plus
        // `DEAD_AHEAD` (or `free_ahead`) while segments of dead (or partly dead) values can be
        // freed (`reclaimer::wanted`).
        let ahead =
            self.knobs.free_high() + crate::reclaimer::DEAD_AHEAD.max(self.knobs.free_ahead());
        if free <= ahead as usize + reserve {
            self.wake.notify_all();
        }
        let refused = |state: &State| {
            FlashStats::add(&self.stats.append_rejected, 1);
            Err(if state.health.all_out() {
                Error::DeviceFailed(format!("all {} devices", state.health.len()))
            } else {
                FlashStats::add(&self.stats.append_no_space, 1);
                Error::NoSpace
            })
        };
        if stream != self.cfg.reclaim_stream && free <= reserve {
            return refused(state);
        }
        let tier = self
            .cfg
            .stream_tiers
            .get(usize::from(stream))
            .copied()
            .flatten();
        let alloc = (state.health.out_mask(), &self.tiers[..], tier);
        let Some((seg, seq)) = state.segments.open(alloc, &self.uuid, stream) else {
            return refused(state);
        };
        let header = SegmentHeader {
            seq,
            uuid: self.uuid,
            segment: seg,
            stream,
            created: now_unix(),
        }
        .encode();
        let mut buf = self.take_buf(&mut state.writes);
        buf.as_mut_slice()[..SEGMENT_HEADER_LEN].copy_from_slice(&header);
        if let Some(st) = state.writes.stream_mut(usize::from(stream)) {
            st.start(seg, buf, SEGMENT_HEADER_LEN);
        }
        self.update_gauges(state);
        Ok(())
    }

    /// Hand the stream's current chunk to the device (padded to its page end) and start a new
    /// chunk on the next page. No-op if the chunk holds no record.
    pub(crate) fn submit_chunk(self: &Arc<Self>, state: &mut State, stream: StreamId) {
        let s = usize::from(stream);
        if state
            .writes
            .stream(s)
            .and_then(|st| st.pending_chunk())
            .is_none()
        {
            return;
        }
        // The next chunk's buffer, unless `chunk_buffer_limit` are in use (a flush submits
        // whatever the limit): then the next append takes one once a write completes.
        let next = (!self.chunk_bufs_full(&state.writes)).then(|| self.take_buf(&mut state.writes));
        let Some(Chunk {
            seg,
            off,
            buf,
            entries,
        }) = state
            .writes
            .stream_mut(s)
            .and_then(|st| st.take_chunk(next))
        else {
            return;
        };
        state.segments.set_data_end(seg, off + buf.len() as u32);
        let Some((dev, dev_off)) = state
            .segments
            .get(seg)
            .map(|i| (i.dev, i.dev_off + u64::from(off)))
        else {
            return;
        };
        let buf = Arc::new(buf);
        let id = state.writes.begin_write();
        state.writes.track(InflightWrite {
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

    /// Write the last chunk; the stream then has no open segment. The summary + footer go
    /// down only after every chunk write of the segment has completed and a device sync
    /// covers them ([`Self::tail_start`]): recovery and reclaim trust a summary without
    /// reading the records it names, so a summary that reached the device before them would,
    /// after a crash, name bytes that are not there (or an older life's). Its write id is
    /// taken now, so flushes wait for it as before.
    pub(crate) fn seal(self: &Arc<Self>, state: &mut State, stream: StreamId) {
        self.submit_chunk(state, stream);
        let Some((seg, summary, buf)) = state
            .writes
            .stream_mut(usize::from(stream))
            .and_then(|st| st.close())
        else {
            return;
        };
        if let Some(b) = buf {
            state.writes.pool(b);
        }
        let Some(info) = state.segments.seal(seg) else {
            return;
        };
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
        let (dev, off, seq) = (info.dev, info.dev_off + self.seg_size - tail, info.seq);
        if let Some(st) = state.writes.stream_mut(usize::from(stream)) {
            st.recycle_summary(summary);
        }
        FlashStats::set(
            &self.stats.open_segment_table_bytes,
            state.writes.summary_bytes(),
        );
        let mut buf = AlignedBuf::zeroed(bytes.len());
        buf.as_mut_slice().copy_from_slice(&bytes);
        let id = state.writes.begin_write();
        state.writes.hold_tail(PendingTail {
            id,
            seg,
            seq,
            dev,
            off,
            buf,
            lost: false,
        });
        // Nothing of the segment in flight (its last chunk held no record): start it now.
        if let Some(start) = state
            .writes
            .tail_ready(seg)
            .and_then(|t| self.tail_start(state, t))
        {
            self.tail_launch(start);
        }
    }

    /// The tail `t`, whose segment has no chunk write in flight any more: its write, and
    /// the device generation a sync must cover first if the device has completed writes no
    /// sync covers yet (some of them the segment's). `None` if a chunk of the segment was
    /// lost: then the summary is given up (the segment is scanned at recovery and by
    /// reclaim) and its write id completed. Under the state lock.
    fn tail_start(&self, state: &mut State, t: PendingTail) -> Option<TailStart> {
        if t.lost {
            state.segments.summary_lost(t.seg, t.seq);
            state.writes.complete(t.id);
            return None;
        }
        let sync_gen = state
            .health
            .unsynced()
            .into_iter()
            .find(|&(d, _)| d == t.dev)
            .map(|(_, gen)| gen);
        let job = WriteJob {
            id: t.id,
            dev: t.dev,
            off: t.off,
            buf: Arc::new(t.buf),
            attempt: 1,
            tail_of: Some((t.seg, t.seq)),
        };
        Some(TailStart { job, sync_gen })
    }

    /// Submit a started tail: its sync first if it needs one, then (from the sync's
    /// completion) its write. Called without the state lock, except from `seal`, whose
    /// callers hold it while the engine is open (the executor completes nothing inline then).
    fn tail_launch(self: &Arc<Self>, start: TailStart) {
        let TailStart { job, sync_gen } = start;
        let Some(gen) = sync_gen else {
            self.submit_write(job);
            return;
        };
        let me = Arc::clone(self);
        let dev = job.dev;
        self.exec.submit(IoRequest {
            op: IoOp::Sync { dev },
            done: Box::new(move |res| me.tail_synced(job, gen, res.map(|_| ()))),
        });
    }

    /// The sync before a tail write completed (executor thread): write the tail, or (the sync
    /// failed) give the summary up — the segment is scanned at recovery and by reclaim —
    /// and complete its write id so the flushes waiting for it go on.
    fn tail_synced(self: &Arc<Self>, job: WriteJob, gen: u64, res: io::Result<()>) {
        FlashStats::add(&self.stats.seal_syncs, 1);
        let ready = {
            let mut guard = self.state.lock();
            let state = &mut *guard;
            if res.is_err() {
                if let Some((seg, seq)) = job.tail_of {
                    state.segments.summary_lost(seg, seq);
                }
                state.writes.complete(job.id);
            }
            self.note_sync(state, (job.dev, gen), &res);
            res.is_err().then(|| state.writes.ready_flushes())
        };
        let Some(ready) = ready else {
            self.submit_write(job);
            return;
        };
        for w in ready {
            self.finish_flush(w);
        }
        self.wake.notify_all();
    }

    /// A sync of `dev` covering its writes up to `gen` completed, under the state lock: the
    /// writes are synced, or (it failed) the error is counted and the device made failing.
    /// Shared by a flush's syncs and a sealed segment's sync before its tail.
    fn note_sync(
        self: &Arc<Self>,
        state: &mut State,
        (dev, gen): (usize, u64),
        res: &io::Result<()>,
    ) {
        match res {
            Ok(()) => state.health.synced(dev, gen),
            Err(e) => {
                FlashStats::add(&self.stats.sync_errors, 1);
                self.device_error(state, dev, "sync", &e.to_string());
            }
        }
    }

    /// Completion of a write (executor thread). A failed write is tried again at once, up
    /// to [`WRITE_ATTEMPTS`] times; the last failure loses the chunk's records (queued for
    /// the handler's `lost`), tells the pending flushes, and makes the device failing.
    fn write_done(self: &Arc<Self>, job: WriteJob, res: io::Result<()>) {
        if let Err(e) = &res {
            FlashStats::add(&self.stats.write_errors, 1);
            if job.attempt < WRITE_ATTEMPTS && !self.state.lock().closed() {
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
        let (tail, ready) = {
            let mut guard = self.state.lock();
            let state = &mut *guard;
            let w = state.writes.complete(id);
            match res {
                Ok(()) => {
                    FlashStats::add(&self.stats.device_bytes_written, written);
                    // Records need a sync before a flush may call them durable; a summary
                    // does not (recovery scans a segment whose summary is missing), so it
                    // rides on the device's next sync.
                    if w.is_some() {
                        state.health.note_write(dev);
                    } else if let Some((seg, seq)) = tail_of {
                        state.segments.summary_written(seg, seq);
                    }
                }
                Err(e) => {
                    let msg = format!("write at {off} on {}: {e}", self.dev_name(dev));
                    if let Some(w) = &w {
                        state.writes.write_failed(id, &msg);
                        self.lose_chunk(state, w, &msg);
                    } else if let Some((seg, seq)) = tail_of {
                        // The records are on the device; only the summary is missing, so
                        // recovery and reclaim scan the segment instead. Nothing is lost:
                        // no flush fails for it.
                        state.segments.summary_lost(seg, seq);
                    }
                    self.device_error(state, dev, "write", &e.to_string());
                }
            }
            // The last chunk write of a sealed segment completed: its tail may start.
            let tail = w
                .as_ref()
                .and_then(|w| state.writes.tail_ready(w.seg))
                .and_then(|t| self.tail_start(state, t));
            if let Some(w) = w {
                // A buffer not pooled is freed (or soon, by the reader still holding it).
                let recycled = Arc::try_unwrap(w.buf).map(|b| state.writes.recycle(b));
                if !matches!(recycled, Ok(Ok(()))) {
                    self.chunk_bufs.fetch_sub(1, Ordering::Relaxed);
                    self.note_work();
                }
            }
            (tail, state.writes.ready_flushes())
        };
        if let Some(t) = tail {
            self.tail_launch(t);
        }
        for w in ready {
            self.finish_flush(w);
        }
        self.wake.notify_all();
    }

    /// The chunk `w` could not be written: its records are lost. Queue them (with their
    /// content) for the handler, drop them from the open segment's summary so a seal does not
    /// list them, and count them dead.
    fn lose_chunk(&self, state: &mut State, w: &InflightWrite, why: &str) {
        let Some(info) = state.segments.get(w.seg) else {
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
        if let Some(st) = state.writes.stream_mut(usize::from(w.stream)) {
            st.forget(w.seg, w.off, end);
        }
        state.writes.tail_lost(w.seg);
        let n = lost.len() as u32;
        state.segments.lose_records(w.seg, n);
        FlashStats::add(&self.stats.chunks_lost, 1);
        FlashStats::add(&self.stats.records_lost, u64::from(n));
        log::warn!(
            "flash: {n} records lost: chunk {why} (failed {WRITE_ATTEMPTS} times); the user \
             is told which"
        );
        state.writes.lose(lost);
    }

    /// All writes up to the waiter's target are done: sync every device with completed
    /// writes not yet synced, then complete (called without the state lock).
    fn finish_flush(self: &Arc<Self>, w: FlushWaiter) {
        let (promise, error) = w.into_parts();
        if let Some(e) = error {
            promise.complete(Err(Error::io("flash", "flush", io::Error::other(e))));
            return;
        }
        let devs = self.state.lock().health.unsynced();
        if devs.is_empty() {
            FlashStats::add(&self.stats.flushes, 1);
            promise.complete(Ok(()));
            return;
        }
        let join = Arc::new(SyncJoin {
            left: AtomicUsize::new(devs.len()),
            error: Mutex::new(None),
            promise: Mutex::new(Some(promise)),
        });
        for (dev, gen) in devs {
            let me = Arc::clone(self);
            let join = Arc::clone(&join);
            self.exec.submit(IoRequest {
                op: IoOp::Sync { dev },
                done: Box::new(move |res| me.sync_done(&join, (dev, gen), res.map(|_| ()))),
            });
        }
    }

    /// A flush's sync of `dev` (covering writes up to `gen`) completed (executor thread);
    /// the last of the flush's syncs completes it.
    fn sync_done(self: &Arc<Self>, join: &SyncJoin, (dev, gen): (usize, u64), res: io::Result<()>) {
        {
            let mut guard = self.state.lock();
            let state = &mut *guard;
            if let Err(e) = &res {
                let msg = format!("sync on {}: {e}", self.dev_name(dev));
                join.error.lock().get_or_insert(msg);
            }
            self.note_sync(state, (dev, gen), &res);
        }
        if join.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            let out = match join.error.lock().take() {
                Some(e) => Err(Error::io("flash", "flush", io::Error::other(e))),
                None => {
                    FlashStats::add(&self.stats.flushes, 1);
                    Ok(())
                }
            };
            if let Some(p) = join.promise.lock().take() {
                p.complete(out);
            }
        }
    }

    /// See [`crate::Flash::flush`].
    pub(crate) fn flush(self: &Arc<Self>) -> Completion<()> {
        let (promise, completion) = pair();
        let waiter = {
            let mut guard = self.state.lock();
            let state = &mut *guard;
            if state.closed() {
                return Completion::ready(Err(Error::Closed));
            }
            for s in 0..state.writes.streams() {
                self.submit_chunk(state, s as StreamId);
            }
            state.writes.flush_waiter(promise)
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
        if state.closed() {
            return;
        }
        for s in 0..state.writes.streams() {
            self.submit_chunk(state, s as StreamId);
        }
    }

    /// Write chunks whose oldest record is older than `age` (flusher thread).
    pub(crate) fn flush_old_chunks(self: &Arc<Self>, state: &mut State, age: std::time::Duration) {
        for s in 0..state.writes.streams() {
            let due = state.writes.stream(s).is_some_and(|st| {
                st.oldest().is_some_and(|t| t.elapsed() >= age)
                    && st.in_flight() < self.knobs.max_chunks_in_flight()
            });
            if due && !self.chunk_bufs_full(&state.writes) {
                self.submit_chunk(state, s as StreamId);
            }
        }
    }

    /// See [`crate::Flash::mark_dead`].
    pub(crate) fn mark_dead(&self, loc: Location) {
        let (seg, _) = self.split(loc.byte_addr());
        if let Some(delta) = self.state.lock().segments.mark_dead(seg) {
            FlashStats::add(&self.stats.bytes_dead, delta);
        }
    }
}

/// A sealed segment's tail ready to go: its write, and the device generation a sync must
/// cover before it (`None`: every completed write of the device is synced already).
struct TailStart {
    job: WriteJob,
    sync_gen: Option<u64>,
}

/// The syncs of one flush: the last to complete completes the flush's promise.
struct SyncJoin {
    left: AtomicUsize,
    error: Mutex<Option<String>>,
    promise: Mutex<Option<Promise<()>>>,
}

#[cfg(test)]
#[path = "writer_tests.rs"]
mod tests;
