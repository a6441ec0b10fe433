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
use crate::engine::{FlushWaiter, InflightWrite, Inner, RecordWrite, State, StreamId};
use crate::error::{Error, Result};
use crate::format::record::{self, padded_len, RecordHeader};
use crate::format::segment::{
    encode_tail, tail_len, Footer, SegmentHeader, SummaryEntry, SEGMENT_HEADER_LEN,
};
use crate::io::{AlignedBuf, IoOp, IoRequest};
use crate::location::{Location, PAGE};
use crate::segments::SegState;
use crate::stats::FlashStats;

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
        let st = &mut *guard;
        if st.closed {
            return Err(Error::Closed);
        }
        if s >= st.streams.len() {
            return Err(Error::Config(format!("no stream {stream}")));
        }
        let chunk = self.cfg.chunk_size as usize;
        let seg = loop {
            let Some(seg) = st.streams[s].seg else {
                self.open_segment(st, stream)?;
                continue;
            };
            let ss = &st.streams[s];
            let off = u64::from(ss.buf_off) + ss.fill as u64;
            let n = ss.summary.len();
            let fits_chunk = ss.fill + len <= chunk;
            let fits_seg = round_page(off + len as u64) <= self.seg_size - tail_len(n + 1);
            if fits_chunk && fits_seg {
                break seg;
            }
            if ss.in_flight >= self.knobs.max_chunks_in_flight() {
                FlashStats::add(&self.stats.append_rejected, 1);
                return Err(Error::Busy("write chunk"));
            }
            if fits_seg {
                self.submit_chunk(st, stream);
            } else {
                self.seal(st, stream);
            }
        };
        let seed = st.segs[seg as usize].seed;
        let ss = &mut st.streams[s];
        let off = ss.buf_off + ss.fill as u32;
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
        let Some(buf) = ss.buf.as_mut() else {
            return Err(Error::Closed);
        };
        let written = buf
            .as_mut_slice()
            .get_mut(ss.fill..)
            .and_then(|dst| record::encode(dst, &h, rec.key, rec.value, seed));
        if written != Some(len) {
            return Err(Error::RecordTooLarge { size: len, max });
        }
        ss.fill += len;
        ss.chunk_records += 1;
        ss.oldest.get_or_insert_with(Instant::now);
        ss.summary.push(SummaryEntry {
            key_id: rec.key_id,
            version: rec.version,
            offset: off,
            len: h.unpadded_len() as u32,
            exptime: rec.exptime,
            flags: rec.flags,
            kind: rec.kind,
        });
        let info = &mut st.segs[seg as usize];
        info.add_record(len as u64, rec.exptime);
        FlashStats::add(&self.stats.objects_written, 1);
        FlashStats::add(&self.stats.bytes_written, len as u64);
        FlashStats::add(&self.stats.bytes_used, len as u64);
        self.location(seg, off, h.unpadded_len())
    }

    /// `append`, waiting (blocking the thread) while the stream has too many chunk writes in
    /// flight, up to `timeout`.
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
                    let mut st = self.state.lock();
                    let busy = |st: &State| {
                        st.streams
                            .get(usize::from(stream))
                            .is_some_and(|s| s.in_flight >= self.knobs.max_chunks_in_flight())
                    };
                    while busy(&st) {
                        if self.wake.wait_until(&mut st, deadline).timed_out() {
                            return Err(Error::Busy(q));
                        }
                    }
                }
                other => return other,
            }
        }
    }

    fn take_buf(&self, st: &mut State) -> AlignedBuf {
        let chunk = self.cfg.chunk_size as usize;
        let mut b = st.pool.pop().unwrap_or_else(|| AlignedBuf::zeroed(chunk));
        b.set_len(chunk);
        b
    }

    fn open_segment(&self, st: &mut State, stream: StreamId) -> Result<()> {
        let reserve = self.cfg.reserve_segments as usize;
        let free = st.free.total(&st.failed);
        if free <= self.knobs.free_low() as usize + reserve {
            self.wake.notify_all();
        }
        if stream != self.cfg.reclaim_stream && free <= reserve {
            FlashStats::add(&self.stats.append_rejected, 1);
            return Err(if st.failed.iter().all(|f| *f) {
                Error::DeviceFailed("all devices".into())
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
        let Some(seg) = st.free.pop(&st.failed, &self.tiers, tier) else {
            FlashStats::add(&self.stats.append_rejected, 1);
            return Err(Error::NoSpace);
        };
        let seq = st.next_seq;
        st.next_seq += 1;
        let info = &mut st.segs[seg as usize];
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
        let mut buf = self.take_buf(st);
        buf.as_mut_slice()[..SEGMENT_HEADER_LEN].copy_from_slice(&header);
        let ss = &mut st.streams[usize::from(stream)];
        ss.seg = Some(seg);
        ss.buf = Some(buf);
        ss.buf_off = 0;
        ss.fill = SEGMENT_HEADER_LEN;
        ss.chunk_records = 0;
        ss.summary.clear();
        ss.oldest = None;
        self.update_gauges(st);
        Ok(())
    }

    /// Hand the stream's current chunk to the device (padded to its page end) and start a new
    /// chunk on the next page. No-op if the chunk holds no record.
    pub(crate) fn submit_chunk(self: &Arc<Self>, st: &mut State, stream: StreamId) {
        let s = usize::from(stream);
        if st.streams[s].chunk_records == 0 {
            return;
        }
        let Some(seg) = st.streams[s].seg else { return };
        let next = self.take_buf(st);
        let ss = &mut st.streams[s];
        let Some(mut buf) = ss.buf.replace(next) else {
            return;
        };
        let padded = round_page(ss.fill as u64) as usize;
        buf.as_mut_slice()[ss.fill..padded].fill(0);
        buf.set_len(padded);
        let off = ss.buf_off;
        ss.buf_off += padded as u32;
        ss.fill = 0;
        ss.chunk_records = 0;
        ss.oldest = None;
        ss.in_flight += 1;
        let info = &mut st.segs[seg as usize];
        info.data_end = off + padded as u32;
        let (dev, dev_off) = (info.dev, info.dev_off + u64::from(off));
        let buf = Arc::new(buf);
        let id = st.next_write_id;
        st.next_write_id += 1;
        st.outstanding.insert(id);
        st.inflight.push(InflightWrite {
            id,
            seg,
            off,
            buf: Arc::clone(&buf),
            stream,
        });
        self.submit_write(id, dev, dev_off, buf);
    }

    fn submit_write(self: &Arc<Self>, id: u64, dev: usize, off: u64, buf: Arc<AlignedBuf>) {
        let me = Arc::clone(self);
        let n = buf.len() as u64;
        let started = std::time::Instant::now();
        self.exec.submit(IoRequest {
            op: IoOp::Write { dev, off, buf },
            done: Box::new(move |res| {
                me.stats.latency.write.record(started.elapsed());
                me.write_done(id, dev, n, res.map(|_| ()))
            }),
        });
    }

    /// Write the last chunk and the summary + footer; the stream then has no open segment.
    pub(crate) fn seal(self: &Arc<Self>, st: &mut State, stream: StreamId) {
        self.submit_chunk(st, stream);
        let s = usize::from(stream);
        let Some(seg) = st.streams[s].seg.take() else {
            return;
        };
        let summary = std::mem::take(&mut st.streams[s].summary);
        if let Some(b) = st.streams[s].buf.take() {
            st.pool.push(b);
        }
        st.streams[s].fill = 0;
        st.streams[s].buf_off = 0;
        let info = &mut st.segs[seg as usize];
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
        let (dev, dev_off) = (info.dev, info.dev_off + self.seg_size - tail);
        let id = st.next_write_id;
        st.next_write_id += 1;
        st.outstanding.insert(id);
        self.submit_write(id, dev, dev_off, Arc::new(buf));
    }

    /// Completion of write `id` (executor thread).
    fn write_done(self: &Arc<Self>, id: u64, dev: usize, n: u64, res: io::Result<()>) {
        let ready = {
            let mut guard = self.state.lock();
            let st = &mut *guard;
            st.outstanding.remove(&id);
            if let Some(pos) = st.inflight.iter().position(|w| w.id == id) {
                let w = st.inflight.swap_remove(pos);
                if let Some(ss) = st.streams.get_mut(usize::from(w.stream)) {
                    ss.in_flight = ss.in_flight.saturating_sub(1);
                }
                if let Ok(b) = Arc::try_unwrap(w.buf) {
                    if st.pool.len() < st.streams.len() * 2 {
                        st.pool.push(b);
                    }
                }
            }
            match res {
                Ok(()) => FlashStats::add(&self.stats.device_bytes_written, n),
                Err(e) => {
                    FlashStats::add(&self.stats.write_errors, 1);
                    let msg = format!("write on {}: {e}", self.dev_name(dev));
                    let mut told = false;
                    for w in st.waiters.iter_mut().filter(|w| w.target >= id) {
                        w.error.get_or_insert_with(|| msg.clone());
                        told = true;
                    }
                    if !told {
                        // No flush is waiting for this write: the next flush reports it.
                        st.write_error.get_or_insert(msg);
                    }
                    self.fail_device(st, dev);
                }
            }
            let min_out = st.outstanding.first().copied().unwrap_or(u64::MAX);
            let (ready, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut st.waiters)
                .into_iter()
                .partition(|w| w.target < min_out);
            st.waiters = wait;
            ready
        };
        for w in ready {
            self.finish_flush(w);
        }
        self.wake.notify_all();
    }

    pub(crate) fn dev_name(&self, dev: usize) -> &str {
        self.devices.get(dev).map(|d| d.name()).unwrap_or("?")
    }

    /// Take a device out of service after a write or sync error: no more allocation on it,
    /// its open segments are abandoned (their buffered records are lost).
    pub(crate) fn fail_device(&self, st: &mut State, dev: usize) {
        if st.failed.get(dev).copied().unwrap_or(true) {
            return;
        }
        st.failed[dev] = true;
        FlashStats::add(&self.stats.devices_failed, 1);
        for seg in st.free.clear_dev(dev) {
            st.segs[seg as usize].state = SegState::Failed;
        }
        for ss in st.streams.iter_mut() {
            let Some(seg) = ss.seg else { continue };
            if st.segs[seg as usize].dev != dev {
                continue;
            }
            // Keep what reached the device readable; records of the failed chunk read back
            // as checksum failures, never as data.
            st.segs[seg as usize].state = SegState::Sealed;
            ss.seg = None;
            ss.buf = None;
            ss.summary.clear();
            ss.fill = 0;
            ss.chunk_records = 0;
            ss.oldest = None;
        }
        self.update_gauges(st);
    }

    /// All writes up to the waiter's target are done: sync every healthy device, then
    /// complete (called without the state lock).
    fn finish_flush(self: &Arc<Self>, w: FlushWaiter) {
        if let Some(e) = w.error {
            w.promise
                .complete(Err(Error::io("flash", "flush", io::Error::other(e))));
            return;
        }
        let devs: Vec<usize> = {
            let st = self.state.lock();
            (0..self.devices.len()).filter(|d| !st.failed[*d]).collect()
        };
        if devs.is_empty() {
            w.promise
                .complete(Err(Error::DeviceFailed("all devices".into())));
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
        for dev in devs {
            let me = Arc::clone(self);
            let join = Arc::clone(&join);
            self.exec.submit(IoRequest {
                op: IoOp::Sync { dev },
                done: Box::new(move |res| {
                    if let Err(e) = res {
                        FlashStats::add(&me.stats.sync_errors, 1);
                        join.error
                            .lock()
                            .get_or_insert(format!("sync on {}: {e}", me.dev_name(dev)));
                        let mut st = me.state.lock();
                        me.fail_device(&mut st, dev);
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
            let st = &mut *guard;
            if st.closed {
                return Completion::ready(Err(Error::Closed));
            }
            for s in 0..st.streams.len() {
                self.submit_chunk(st, s as StreamId);
            }
            let error = st.write_error.take();
            let w = FlushWaiter {
                target: st.next_write_id - 1,
                promise,
                error,
            };
            if st.outstanding.first().is_some_and(|&m| m <= w.target) {
                st.waiters.push(w);
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

    /// Write chunks whose oldest record is older than `age` (flusher thread).
    pub(crate) fn flush_old_chunks(self: &Arc<Self>, st: &mut State, age: std::time::Duration) {
        for s in 0..st.streams.len() {
            let old = st.streams[s].oldest.is_some_and(|t| t.elapsed() >= age);
            if old && st.streams[s].in_flight < self.knobs.max_chunks_in_flight() {
                self.submit_chunk(st, s as StreamId);
            }
        }
    }

    pub(crate) fn mark_dead(&self, loc: Location) {
        let (seg, _) = self.split(loc.byte_addr());
        let mut st = self.state.lock();
        if let Some(info) = st.segs.get_mut(seg as usize) {
            if info.dead < info.records && !matches!(info.state, SegState::Free) {
                let before = info.dead_bytes();
                info.dead += 1;
                let delta = info.dead_bytes() - before;
                FlashStats::add(&self.stats.bytes_dead, delta);
            }
        }
    }
}
