//! The read path: serve from a write buffer if the record is still in RAM, else one aligned
//! device read of the pages the location's size hint names (two reads when the hint says
//! "more than 31 pages"), verifying the checksum with the seed captured at submit time.
//!
//! Device reads go through the engine's [`ReadQueue`](crate::read_queue): past
//! `read_queue_limit` reads at the device, a read waits there (in order) instead of failing,
//! and starts on the thread that completes an earlier one. The seed is captured at lookup, so
//! a segment reused while the read waited fails the checksum (`Corrupt`), as one reused while
//! it was at the device does.
//!
//! Runs on the caller's thread (lookup, submit) and on whichever thread reaps the IO
//! (decode, complete, start the next waiting read): an event loop holding a `ReapHandle`, or
//! an executor thread. Never blocks the caller. Read buffers come from `io::pool` when the
//! read starts (a waiting read holds none) and go back when the record drops.
use std::io;
use std::sync::Arc;

use crate::completion::{pair, Completion, Promise};
use crate::error::{Error, Result};
use crate::format::record::{self, DecodeError, Record};
use crate::inner::Inner;
use crate::io::pool::PooledBuf;
use crate::io::{AlignedBuf, IoOp, IoRequest};
use crate::location::{Location, PAGE};
use crate::read_queue::{PendingRead, Target};
use crate::segments::SegState;
use crate::stats::FlashStats;

/// What a device read's completion leads to.
#[derive(Debug)]
enum Step {
    /// The record is longer than the first read: read this many bytes from `page0` (the
    /// read keeps its queue slot).
    Longer(u64),
    /// The read is over.
    Done(Result<Record>),
}

impl Inner {
    /// See [`crate::Flash::read`].
    pub(crate) fn read(self: &Arc<Self>, loc: Location) -> Completion<Record> {
        let target = match self.lookup(loc) {
            Ok(Ok(rec)) => return Completion::ready(Ok(rec)),
            Ok(Err(t)) => t,
            Err(e) => return Completion::ready(Err(e)),
        };
        let (promise, completion) = pair();
        let page0 = u64::from(target.off) / PAGE * PAGE;
        let pages = match loc.size_hint_pages() {
            0 => 1,
            n => u64::from(n),
        };
        let len = (pages * PAGE).min(self.seg_size - page0);
        let read = PendingRead {
            target,
            page0,
            len,
            promise,
        };
        let limit = self.knobs.read_queue_limit();
        if let Err(read) = self.reads.submit(read, limit, |r| self.start_read(r)) {
            read.promise.complete(Err(Error::Closed));
        }
        completion
    }

    /// Hand an admitted read to the executor (it holds a queue slot from here on).
    fn start_read(self: &Arc<Self>, r: PendingRead) {
        self.submit_read(r.target, r.page0, r.len, true, r.promise);
    }

    /// Fail every read still waiting for a slot with `Closed` (the engine is closing).
    pub(crate) fn close_reads(&self) {
        for r in self.reads.close() {
            r.promise.complete(Err(Error::Closed));
        }
    }

    /// Under the lock: the record from a RAM buffer, or where to read it.
    fn lookup(&self, loc: Location) -> Result<Result<Record, Target>> {
        let (seg, off) = self.split(loc.byte_addr());
        let state = self.state.lock();
        let Some(info) = state.segments.get(seg) else {
            return Err(Error::InvalidLocation(loc.byte_addr()));
        };
        match info.state {
            SegState::Free | SegState::Journal => {
                return Err(Error::InvalidLocation(loc.byte_addr()))
            }
            SegState::Failed => {
                FlashStats::add(&self.stats.read_errors, 1);
                return Err(Error::Corrupt("segment retired after read errors"));
            }
            SegState::Open(s) => {
                let chunk = state.writes.stream(usize::from(s));
                if let Some(slice) = chunk.and_then(|st| st.buffered(seg, off)) {
                    return Ok(Ok(self.decode_ram(slice, info.seed)?));
                }
            }
            SegState::Sealed | SegState::Reclaiming => {}
        }
        if let Some(slice) = state.writes.in_flight_at(seg, off) {
            return Ok(Ok(self.decode_ram(slice, info.seed)?));
        }
        if off >= info.data_end {
            return Err(Error::InvalidLocation(loc.byte_addr()));
        }
        Ok(Err(Target {
            dev: info.dev,
            seg_dev_off: info.dev_off,
            off,
            seed: info.seed,
        }))
    }

    fn decode_ram(&self, slice: &[u8], seed: u32) -> Result<Record> {
        let rec = record::decode_record(slice, seed).map_err(|e| self.decode_error(e))?;
        FlashStats::add(&self.stats.buffer_reads, 1);
        self.count_read(&rec);
        Ok(rec)
    }

    fn count_read(&self, rec: &Record) {
        FlashStats::add(&self.stats.objects_read, 1);
        FlashStats::add(&self.stats.bytes_read, rec.header.padded_len() as u64);
    }

    pub(crate) fn decode_error(&self, e: DecodeError) -> Error {
        match e {
            DecodeError::Checksum => {
                FlashStats::add(&self.stats.checksum_failures, 1);
                Error::Corrupt("record checksum mismatch (torn, corrupt or stale)")
            }
            DecodeError::Padding => Error::Corrupt("no record at location"),
            DecodeError::Truncated => {
                FlashStats::add(&self.stats.checksum_failures, 1);
                Error::Corrupt("record length runs past its segment")
            }
        }
    }

    fn submit_read(
        self: &Arc<Self>,
        t: Target,
        page0: u64,
        len: u64,
        first: bool,
        promise: Promise<Record>,
    ) {
        let me = Arc::clone(self);
        let buf = self.read_pool.take(len as usize);
        let dev = t.dev;
        let started = std::time::Instant::now();
        self.exec.submit(IoRequest {
            op: IoOp::Read {
                dev,
                off: t.seg_dev_off + page0,
                buf,
            },
            done: Box::new(move |res| {
                me.stats.latency.read.record(started.elapsed());
                me.read_done(t, page0, first, res, promise)
            }),
        });
    }

    fn read_done(
        self: &Arc<Self>,
        t: Target,
        page0: u64,
        first: bool,
        res: io::Result<Option<AlignedBuf>>,
        promise: Promise<Record>,
    ) {
        match self.decode_read(&t, page0, first, res) {
            Step::Longer(want) => self.submit_read(t, page0, want, false, promise),
            Step::Done(out) => {
                // The slot goes to the next waiting read before this one's waiter wakes: the
                // device is refilled first.
                let limit = self.knobs.read_queue_limit();
                self.reads.finish(limit, |r| self.start_read(r));
                promise.complete(out);
            }
        }
    }

    /// The record a completed device read holds, or how much more to read.
    fn decode_read(
        &self,
        t: &Target,
        page0: u64,
        first: bool,
        res: io::Result<Option<AlignedBuf>>,
    ) -> Step {
        let buf = match res {
            Ok(Some(b)) => b,
            Ok(None) => return Step::Done(Err(Error::Corrupt("read returned no buffer"))),
            Err(e) => {
                FlashStats::add(&self.stats.read_errors, 1);
                return Step::Done(Err(Error::io(self.dev_name(t.dev), "read", e)));
            }
        };
        FlashStats::add(&self.stats.device_bytes_read, buf.len() as u64);
        let start = (u64::from(t.off) - page0) as usize;
        if first {
            if let Some(need) = record::peek_len(buf.as_slice().get(start..).unwrap_or(&[])) {
                let want = ((start + need) as u64).div_ceil(PAGE) * PAGE;
                let have = buf.len() as u64;
                if want > have && page0 + want <= self.seg_size {
                    self.read_pool.give(buf);
                    return Step::Longer(want);
                }
            }
        }
        let out = record::decode_record_owned(
            PooledBuf::into_bytes(buf, Arc::clone(&self.read_pool)),
            start,
            t.seed,
        )
        .map_err(|e| self.decode_error(e));
        if let Ok(r) = &out {
            self.count_read(r);
        }
        Step::Done(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_core::{core, put, small, stat};

    #[test]
    fn a_record_is_read_from_its_chunk_then_from_the_device() {
        let c = core(1, small());
        let inner = &c.inner;
        let loc = inner.append(0, &put(b"key", 7, b"value")).unwrap();
        let rec = inner.read(loc).wait().unwrap();
        assert_eq!((&rec.key[..], &rec.value[..]), (&b"key"[..], &b"value"[..]));
        assert_eq!(stat(inner, "buffer_reads"), 1);
        assert_eq!(stat(inner, "device_bytes_read"), 0);
        inner.flush().wait().unwrap();
        let rec = inner.read(loc).wait().unwrap();
        assert_eq!(rec.header.key_id, 7);
        assert_eq!(stat(inner, "buffer_reads"), 1, "this time from the device");
        assert_eq!(stat(inner, "device_bytes_read"), PAGE);
        assert_eq!(stat(inner, "objects_read"), 2);
    }

    #[test]
    fn a_location_where_nothing_was_written_is_invalid() {
        let c = core(1, small());
        let inner = &c.inner;
        let free = Location::new(5 * inner.seg_size + 64, 100).unwrap();
        assert!(matches!(
            inner.read(free).wait(),
            Err(Error::InvalidLocation(_))
        ));
        let loc = inner.append(0, &put(b"key", 1, b"v")).unwrap();
        inner.flush().wait().unwrap();
        // Past the end of what the open segment wrote.
        let past = Location::new(loc.byte_addr() + 2 * PAGE, 100).unwrap();
        assert!(matches!(
            inner.read(past).wait(),
            Err(Error::InvalidLocation(_))
        ));
    }

    #[test]
    fn a_damaged_record_is_an_error_never_data() {
        let c = core(1, small());
        let inner = &c.inner;
        let loc = inner.append(0, &put(b"key", 1, &[3u8; 500])).unwrap();
        inner.flush().wait().unwrap();
        let (seg, off) = inner.split(loc.byte_addr());
        let dev_off = inner.state.lock().segments.get(seg).unwrap().dev_off;
        c.mem[0].poke(dev_off + u64::from(off) + 200, &[0xff; 8]);
        assert!(matches!(inner.read(loc).wait(), Err(Error::Corrupt(_))));
        assert_eq!(stat(inner, "checksum_failures"), 1);
    }

    #[test]
    fn a_record_longer_than_its_size_hint_is_read_again_whole() {
        let c = core(1, small());
        let inner = &c.inner;
        let value = vec![9u8; 20_000];
        let loc = inner.append(0, &put(b"key", 1, &value)).unwrap();
        inner.flush().wait().unwrap();
        // A location whose hint says one page: the first read finds the record's length.
        let short = Location::new(loc.byte_addr(), 100).unwrap();
        assert_eq!(short.size_hint_pages(), 1);
        let rec = inner.read(short).wait().unwrap();
        assert_eq!(rec.value.len(), value.len());
        assert!(rec.value.iter().all(|&b| b == 9));
        assert_eq!(stat(inner, "device_bytes_read"), PAGE + 5 * PAGE);
    }

    #[test]
    fn a_failed_device_read_is_an_io_error() {
        let c = core(1, small());
        let inner = &c.inner;
        let loc = inner.append(0, &put(b"key", 1, b"v")).unwrap();
        inner.flush().wait().unwrap();
        c.faults[0]
            .read_eio
            .store(true, std::sync::atomic::Ordering::SeqCst);
        assert!(matches!(inner.read(loc).wait(), Err(Error::Io { .. })));
        assert_eq!(stat(inner, "read_errors"), 1);
    }
}
