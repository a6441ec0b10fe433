//! The write queue: the streams' open chunks ([`StreamState`]), the chunk writes in flight
//! (readable from RAM until their completion), sealed segments' tails waiting for those
//! writes ([`PendingTail`]), write ids and the flushes waiting for them, recycled chunk
//! buffers, and the records of failed writes on their way to the user.
//!
//! Invariants: write ids start at 1 and increase; `outstanding` holds exactly the ids
//! submitted (or, for a held tail, taken at the seal) and not completed; a tail leaves
//! `tails` only once no chunk write of its segment is in flight; a flush waiter with target `t` completes only once no id
//! `<= t` is outstanding; a write error reaches the waiters covering it, or (none waiting)
//! the next flush, once. `lost_total` counts every record ever queued in `lost`.
//!
//! One part of the engine state (`state.rs`), under the engine state lock; no IO here (the
//! writer, `writer.rs`, submits and completes the writes). Lost records are taken by the
//! flusher thread, which calls the user's handler with the lock released.
use std::collections::BTreeSet;
use std::sync::Arc;

use crate::completion::Promise;
use crate::format::segment::SummaryEntry;
use crate::handler::LostRecord;
use crate::io::AlignedBuf;
use crate::stream::StreamState;

/// A chunk write in flight: its records stay readable from `buf` until it completes.
pub(crate) struct InflightWrite {
    pub id: u64,
    pub seg: u32,
    pub off: u32,
    pub buf: Arc<AlignedBuf>,
    pub stream: u8,
    /// Summary entries of the chunk's records (reported as lost if the write fails).
    pub entries: Vec<SummaryEntry>,
}

/// A sealed segment's summary and footer, waiting for the segment's chunk writes: recovery
/// and reclaim trust a summary without reading the records it names, so it may reach the
/// device only after every one of them is durable (`Inner::seal`). Its write id is taken at
/// the seal, so flushes (reclaim's before an erase among them) wait for it as before.
pub(crate) struct PendingTail {
    /// The tail write's id (outstanding from the seal until the write completes).
    pub id: u64,
    pub seg: u32,
    /// The segment life's seq.
    pub seq: u64,
    /// Where the tail goes: device and device offset.
    pub dev: usize,
    pub off: u64,
    /// The encoded summary and footer.
    pub buf: AlignedBuf,
    /// A chunk write of the segment failed for good: the summary names records that are
    /// not on the device, so it is not written (the segment is scanned instead).
    pub lost: bool,
}

/// A flush waiting for the writes submitted before it.
pub(crate) struct FlushWaiter {
    /// Every write with id <= target must complete first.
    target: u64,
    promise: Promise<()>,
    /// A write it covers failed.
    error: Option<String>,
}

impl FlushWaiter {
    /// Its promise, and the error of a write it covered (if one failed).
    pub(crate) fn into_parts(self) -> (Promise<()>, Option<String>) {
        (self.promise, self.error)
    }
}

/// Streams, writes in flight, flush waiters, pooled buffers and lost records.
pub(crate) struct WriteQueue {
    streams: Vec<StreamState>,
    inflight: Vec<InflightWrite>,
    /// Next write id (ids start at 1).
    next_write_id: u64,
    /// Ids of writes submitted but not completed.
    outstanding: BTreeSet<u64>,
    waiters: Vec<FlushWaiter>,
    /// Sealed segments' tails waiting for their chunk writes.
    tails: Vec<PendingTail>,
    /// A write failed since the last `flush()` call: that flush reports it.
    write_error: Option<String>,
    /// Recycled chunk buffers.
    pool: Vec<AlignedBuf>,
    /// Records of failed writes, waiting for the flusher to hand them to `lost`.
    lost: Vec<LostRecord>,
    /// Records ever put in `lost` (the journal's retire waits until the user has heard of
    /// all of them: `Inner::lost_handled`).
    lost_total: u64,
}

impl WriteQueue {
    /// A queue for `streams` streams, nothing open.
    pub(crate) fn new(streams: usize) -> Self {
        Self {
            streams: (0..streams).map(|_| StreamState::default()).collect(),
            inflight: Vec::new(),
            next_write_id: 1,
            outstanding: BTreeSet::new(),
            waiters: Vec::new(),
            tails: Vec::new(),
            write_error: None,
            pool: Vec::new(),
            lost: Vec::new(),
            lost_total: 0,
        }
    }

    /// Bytes of the streams' open segment summaries.
    pub(crate) fn summary_bytes(&self) -> u64 {
        self.streams.iter().map(StreamState::summary_bytes).sum()
    }

    /// Number of streams.
    pub(crate) fn streams(&self) -> usize {
        self.streams.len()
    }

    /// Stream `s`.
    pub(crate) fn stream(&self, s: usize) -> Option<&StreamState> {
        self.streams.get(s)
    }

    /// Stream `s`, to change.
    pub(crate) fn stream_mut(&mut self, s: usize) -> Option<&mut StreamState> {
        self.streams.get_mut(s)
    }

    /// No recycled chunk buffer is at hand.
    pub(crate) fn pool_empty(&self) -> bool {
        self.pool.is_empty()
    }

    /// A recycled chunk buffer.
    pub(crate) fn pooled(&mut self) -> Option<AlignedBuf> {
        self.pool.pop()
    }

    /// Keep `buf` for reuse.
    pub(crate) fn pool(&mut self, buf: AlignedBuf) {
        self.pool.push(buf);
    }

    /// Keep `buf` for reuse unless two per stream are pooled already (then it is handed
    /// back, to be freed).
    pub(crate) fn recycle(&mut self, buf: AlignedBuf) -> Result<(), AlignedBuf> {
        if self.pool.len() < self.streams.len() * 2 {
            self.pool.push(buf);
            Ok(())
        } else {
            Err(buf)
        }
    }

    /// The id of a write about to be submitted (outstanding until [`Self::complete`]).
    pub(crate) fn begin_write(&mut self) -> u64 {
        let id = self.next_write_id;
        self.next_write_id += 1;
        self.outstanding.insert(id);
        id
    }

    /// A chunk write is in flight: readable from RAM until it completes.
    pub(crate) fn track(&mut self, w: InflightWrite) {
        self.inflight.push(w);
    }

    /// Write `id` completed (well or not): no longer outstanding; its chunk, if it was one,
    /// leaves the in-flight list and its stream's count.
    pub(crate) fn complete(&mut self, id: u64) -> Option<InflightWrite> {
        self.outstanding.remove(&id);
        let pos = self.inflight.iter().position(|w| w.id == id)?;
        let w = self.inflight.swap_remove(pos);
        if let Some(s) = self.streams.get_mut(usize::from(w.stream)) {
            s.chunk_done();
        }
        Some(w)
    }

    /// Write `id` failed for good with `msg`: the flushes waiting for it report it, or the
    /// next flush does if none waits.
    pub(crate) fn write_failed(&mut self, id: u64, msg: &str) {
        let mut told = false;
        for w in self.waiters.iter_mut().filter(|w| w.target >= id) {
            w.error.get_or_insert_with(|| msg.to_string());
            told = true;
        }
        if !told {
            // No flush is waiting for this write: the next flush reports it.
            self.write_error.get_or_insert_with(|| msg.to_string());
        }
    }

    /// The flush waiters whose writes have all completed, taken out.
    pub(crate) fn ready_flushes(&mut self) -> Vec<FlushWaiter> {
        let min_out = self.outstanding.first().copied().unwrap_or(u64::MAX);
        let (ready, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiters)
            .into_iter()
            .partition(|w| w.target < min_out);
        self.waiters = wait;
        ready
    }

    /// A flush covering every write submitted so far (and the error of a write that failed
    /// since the last flush): queued while one is outstanding, else handed back to finish.
    pub(crate) fn flush_waiter(&mut self, promise: Promise<()>) -> Option<FlushWaiter> {
        let w = FlushWaiter {
            target: self.next_write_id - 1,
            promise,
            error: self.write_error.take(),
        };
        if self.outstanding.first().is_some_and(|&m| m <= w.target) {
            self.waiters.push(w);
            None
        } else {
            Some(w)
        }
    }

    /// Hold a sealed segment's tail until no chunk write of its segment is in flight
    /// ([`Self::tail_ready`]).
    pub(crate) fn hold_tail(&mut self, t: PendingTail) {
        self.tails.push(t);
    }

    /// The tail of `seg`, taken out, once no chunk write of `seg` is in flight.
    pub(crate) fn tail_ready(&mut self, seg: u32) -> Option<PendingTail> {
        if self.inflight.iter().any(|w| w.seg == seg) {
            return None;
        }
        let pos = self.tails.iter().position(|t| t.seg == seg)?;
        Some(self.tails.swap_remove(pos))
    }

    /// A chunk write of `seg` failed for good: its held tail (if sealed) is not written.
    pub(crate) fn tail_lost(&mut self, seg: u32) {
        for t in self.tails.iter_mut().filter(|t| t.seg == seg) {
            t.lost = true;
        }
    }

    /// The bytes from segment offset `off` of `seg` to the end of the chunk in flight that
    /// holds it.
    pub(crate) fn in_flight_at(&self, seg: u32, off: u32) -> Option<&[u8]> {
        self.inflight.iter().filter(|w| w.seg == seg).find_map(|w| {
            let rel = off.checked_sub(w.off)? as usize;
            w.buf.as_slice().get(rel..).filter(|b| !b.is_empty())
        })
    }

    /// Queue records of a failed write for the user's `lost`.
    pub(crate) fn lose(&mut self, lost: Vec<LostRecord>) {
        self.lost_total += lost.len() as u64;
        self.lost.extend(lost);
    }

    /// Lost records are waiting for the user.
    pub(crate) fn has_lost(&self) -> bool {
        !self.lost.is_empty()
    }

    /// The lost records waiting for the user, taken out.
    pub(crate) fn take_lost(&mut self) -> Vec<LostRecord> {
        std::mem::take(&mut self.lost)
    }

    /// Records ever queued as lost.
    pub(crate) fn lost_total(&self) -> u64 {
        self.lost_total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::completion::pair;
    use crate::handler::RecordMeta;
    use crate::location::Location;

    fn waiter_error(w: FlushWaiter) -> Option<String> {
        w.into_parts().1
    }

    #[test]
    fn a_flush_waits_only_for_the_writes_before_it() {
        let mut q = WriteQueue::new(2);
        // Nothing outstanding: the flush is handed back at once.
        assert!(q.flush_waiter(pair().0).is_some());
        let a = q.begin_write();
        let b = q.begin_write();
        assert!(q.flush_waiter(pair().0).is_none());
        let later = q.begin_write();
        assert!(q.complete(b).is_none(), "not a tracked chunk");
        assert!(q.ready_flushes().is_empty(), "a is still outstanding");
        q.complete(a);
        let ready = q.ready_flushes();
        assert_eq!(ready.len(), 1, "a write after the flush does not hold it");
        assert!(ready.into_iter().all(|w| waiter_error(w).is_none()));
        q.complete(later);
        assert!(q.ready_flushes().is_empty());
    }

    #[test]
    fn a_write_error_reaches_the_flushes_covering_it_or_else_the_next_once() {
        let mut q = WriteQueue::new(1);
        let a = q.begin_write();
        q.write_failed(a, "boom");
        q.complete(a);
        let w = q.flush_waiter(pair().0).unwrap();
        assert_eq!(waiter_error(w).as_deref(), Some("boom"));
        assert_eq!(waiter_error(q.flush_waiter(pair().0).unwrap()), None);
        let b = q.begin_write();
        assert!(q.flush_waiter(pair().0).is_none());
        q.write_failed(b, "again");
        q.complete(b);
        let ready = q.ready_flushes();
        let errors: Vec<_> = ready.into_iter().map(waiter_error).collect();
        assert_eq!(errors, [Some("again".to_string())]);
        assert_eq!(waiter_error(q.flush_waiter(pair().0).unwrap()), None);
    }

    #[test]
    fn a_chunk_in_flight_stays_readable_until_it_completes() {
        let mut q = WriteQueue::new(1);
        let id = q.begin_write();
        let mut buf = AlignedBuf::zeroed(4096);
        buf.as_mut_slice()[100] = 9;
        q.track(InflightWrite {
            id,
            seg: 2,
            off: 8192,
            buf: Arc::new(buf),
            stream: 0,
            entries: Vec::new(),
        });
        assert_eq!(q.in_flight_at(2, 8192 + 100).map(|b| b[0]), Some(9));
        assert_eq!(q.in_flight_at(2, 8192 + 4096), None);
        assert_eq!(q.in_flight_at(1, 8192), None);
        let w = q.complete(id).unwrap();
        assert_eq!(q.in_flight_at(2, 8192), None);
        // Two buffers per stream are kept for reuse; more are handed back.
        let b = Arc::try_unwrap(w.buf).ok().unwrap();
        assert!(q.pool_empty());
        assert!(q.recycle(b).is_ok());
        assert!(q.recycle(AlignedBuf::zeroed(4096)).is_ok());
        assert!(q.recycle(AlignedBuf::zeroed(4096)).is_err());
        assert!(q.pooled().is_some() && !q.pool_empty());
    }

    #[test]
    fn lost_records_wait_for_the_flusher_and_are_counted_for_good() {
        let mut q = WriteQueue::new(1);
        let meta = RecordMeta {
            location: Location::new(64, 100).unwrap(),
            key_id: 1,
            version: 1,
            kind: 1,
            exptime: 0,
            flags: 0,
            len: 100,
            seq: 1,
        };
        q.lose(vec![LostRecord { meta, record: None }; 3]);
        assert!(q.has_lost());
        assert_eq!(q.take_lost().len(), 3);
        assert!(!q.has_lost());
        assert_eq!(q.lost_total(), 3);
    }
}
