//! A stream's open segment as the writer fills it: the current chunk buffer (records encoded
//! in RAM), where it starts in the segment, the summary entries of the segment so far and
//! the stream's chunk writes in flight.
//!
//! Invariants: `buf` is `Some` only while `seg` is (it may be `None` with an open segment
//! when every chunk buffer was in use at a chunk's submit: the next append takes one);
//! `buf_off` is page aligned and `buf[..fill]` holds exactly the records after the last
//! chunk handed to the device; a chunk handed over is padded to its page end, so the next
//! chunk starts on a fresh page and no page is written twice in one segment life.
//!
//! Part of the write queue (`write_queue.rs`), under the engine state lock; no IO here.
use std::time::Instant;

use crate::format::record::{self, RecordHeader};
use crate::format::segment::{tail_len, SummaryEntry};
use crate::handler::ValueFill;
use crate::io::AlignedBuf;
use crate::location::PAGE;

/// `x` rounded up to a whole page.
pub(crate) fn round_page(x: u64) -> u64 {
    x.div_ceil(PAGE) * PAGE
}

/// The most summary entries a stream keeps for its next segment (256 KiB of them).
const SUMMARY_KEEP: usize = (256 << 10) / std::mem::size_of::<SummaryEntry>();

/// One stream's open segment and chunk buffer.
#[derive(Default)]
pub(crate) struct StreamState {
    /// Open segment, if any.
    seg: Option<u32>,
    /// Current chunk buffer (capacity `chunk_size`).
    buf: Option<AlignedBuf>,
    /// Segment offset of `buf[0]` (page aligned).
    buf_off: u32,
    /// Bytes of `buf` in use.
    fill: usize,
    /// Records in `buf`.
    chunk_records: u32,
    /// Summary entries of the open segment.
    summary: Vec<SummaryEntry>,
    /// Chunk writes of this stream not yet completed.
    in_flight: usize,
    /// When the first record went into `buf`.
    oldest: Option<Instant>,
}

/// A chunk handed from a stream to the device.
pub(crate) struct Chunk {
    pub seg: u32,
    /// Segment offset of its first byte (page aligned).
    pub off: u32,
    /// The records, padded with zeros to the page end.
    pub buf: AlignedBuf,
    /// Summary entries of its records.
    pub entries: Vec<SummaryEntry>,
}

/// What [`StreamState::room`] finds for a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Room {
    /// It fits in the current chunk buffer.
    pub chunk: bool,
    /// It fits in the open segment (with its summary entry).
    pub segment: bool,
}

impl StreamState {
    /// Bytes the open segment's summary holds (its capacity).
    pub(crate) fn summary_bytes(&self) -> u64 {
        (self.summary.capacity() * std::mem::size_of::<SummaryEntry>()) as u64
    }

    /// Take back a sealed segment's summary (from [`Self::close`]) as the next segment's,
    /// emptied, so each segment does not regrow it by doubling through the allocator's size
    /// classes; one larger than [`SUMMARY_KEEP`] entries (a segment of small records) is
    /// freed instead.
    pub(crate) fn recycle_summary(&mut self, mut summary: Vec<SummaryEntry>) {
        if self.summary.capacity() == 0 && summary.capacity() <= SUMMARY_KEEP {
            summary.clear();
            self.summary = summary;
        }
    }

    /// The open segment.
    pub(crate) fn seg(&self) -> Option<u32> {
        self.seg
    }

    /// Chunk writes in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// A chunk buffer is in place.
    pub(crate) fn has_buf(&self) -> bool {
        self.buf.is_some()
    }

    /// When the oldest record of the current chunk went in (`None`: the chunk is empty).
    pub(crate) fn oldest(&self) -> Option<Instant> {
        self.oldest
    }

    /// Where a record of `len` padded bytes would fit, with `chunk`-byte chunks in a
    /// `seg_size`-byte segment.
    pub(crate) fn room(&self, len: usize, chunk: usize, seg_size: u64) -> Room {
        let off = u64::from(self.buf_off) + self.fill as u64;
        Room {
            chunk: self.fill + len <= chunk,
            segment: round_page(off + len as u64) <= seg_size - tail_len(self.summary.len() + 1),
        }
    }

    /// Open `seg` with `buf` as the first chunk, its first `header` bytes the segment header.
    pub(crate) fn start(&mut self, seg: u32, buf: AlignedBuf, header: usize) {
        self.seg = Some(seg);
        self.buf = Some(buf);
        self.buf_off = 0;
        self.fill = header;
        self.chunk_records = 0;
        self.summary.clear();
        self.oldest = None;
    }

    /// Put `buf` in place as the chunk buffer (there was none).
    pub(crate) fn give_buf(&mut self, buf: AlignedBuf) {
        self.buf = Some(buf);
    }

    /// Encode a record (`h`, `key`, its value as `value` then what `fill` writes; `len`
    /// padded bytes) into the chunk with the segment's checksum `seed`. Returns its segment
    /// offset; `None` (nothing changed) if no buffer is in place or it does not fit.
    pub(crate) fn push(
        &mut self,
        h: &RecordHeader,
        (key, value, fill): (&[u8], &[u8], Option<ValueFill<'_>>),
        len: usize,
        seed: u32,
    ) -> Option<u32> {
        let off = self.buf_off + self.fill as u32;
        let buf = self.buf.as_mut()?;
        let written = buf
            .as_mut_slice()
            .get_mut(self.fill..)
            .and_then(|dst| record::encode_parts(dst, h, key, (value, fill), seed));
        if written != Some(len) {
            return None;
        }
        self.fill += len;
        self.chunk_records += 1;
        self.oldest.get_or_insert_with(Instant::now);
        self.summary.push(SummaryEntry {
            key_id: h.key_id,
            version: h.version,
            offset: off,
            len: h.unpadded_len() as u32,
            exptime: h.exptime,
            flags: h.flags,
            kind: h.kind,
        });
        Some(off)
    }

    /// The open segment, if its current chunk holds a record to hand to the device.
    pub(crate) fn pending_chunk(&self) -> Option<u32> {
        self.seg.filter(|_| self.chunk_records > 0)
    }

    /// Hand over the current chunk (padded to its page end; a write in flight from now on)
    /// and start the next one on the next page with `next` as its buffer.
    pub(crate) fn take_chunk(&mut self, next: Option<AlignedBuf>) -> Option<Chunk> {
        let seg = self.pending_chunk()?;
        let mut buf = std::mem::replace(&mut self.buf, next)?;
        let padded = round_page(self.fill as u64) as usize;
        buf.as_mut_slice()[self.fill..padded].fill(0);
        buf.set_len(padded);
        let first = self
            .summary
            .len()
            .saturating_sub(self.chunk_records as usize);
        let entries = self
            .summary
            .get(first..)
            .map(<[_]>::to_vec)
            .unwrap_or_default();
        let off = self.buf_off;
        self.buf_off += padded as u32;
        self.fill = 0;
        self.chunk_records = 0;
        self.oldest = None;
        self.in_flight += 1;
        Some(Chunk {
            seg,
            off,
            buf,
            entries,
        })
    }

    /// A chunk write of this stream completed (or failed for good).
    pub(crate) fn chunk_done(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// Close the open segment (its last chunk already taken): the segment, its summary and
    /// the chunk buffer to recycle.
    pub(crate) fn close(&mut self) -> Option<(u32, Vec<SummaryEntry>, Option<AlignedBuf>)> {
        let seg = self.seg.take()?;
        let summary = std::mem::take(&mut self.summary);
        let buf = self.buf.take();
        self.fill = 0;
        self.buf_off = 0;
        Some((seg, summary, buf))
    }

    /// The records of `seg` at offsets `off..end` were lost: leave them out of its summary.
    pub(crate) fn forget(&mut self, seg: u32, off: u32, end: u32) {
        if self.seg == Some(seg) {
            self.summary.retain(|e| e.offset < off || e.offset >= end);
        }
    }

    /// The chunk bytes from segment offset `off` of `seg` to the chunk's end, if the
    /// current chunk holds that offset.
    pub(crate) fn buffered(&self, seg: u32, off: u32) -> Option<&[u8]> {
        let buf = self.buf.as_ref().filter(|_| self.seg == Some(seg))?;
        let rel = off.checked_sub(self.buf_off)? as usize;
        buf.as_slice().get(rel..self.fill).filter(|b| !b.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(key_id: u64, value_len: u32) -> RecordHeader {
        RecordHeader {
            kind: 1,
            key_len: 1,
            value_len,
            key_id,
            ..Default::default()
        }
    }

    #[test]
    fn a_chunk_is_padded_to_its_page_and_the_next_starts_on_a_fresh_one() {
        let mut st = StreamState::default();
        assert_eq!(st.pending_chunk(), None);
        st.start(3, AlignedBuf::zeroed(16384), 64);
        assert_eq!(
            st.pending_chunk(),
            None,
            "a header alone is no chunk to write"
        );
        let h = header(9, 100);
        let len = h.padded_len();
        assert_eq!(st.push(&h, (b"k", &[7; 100], None), len, 5), Some(64));
        assert_eq!(st.pending_chunk(), Some(3));
        assert!(st.oldest().is_some());
        assert_eq!(st.buffered(3, 64).map(<[u8]>::len), Some(len));
        assert_eq!(st.buffered(3, 64 + len as u32), None);
        assert_eq!(st.buffered(4, 64), None, "another segment");
        let c = st.take_chunk(Some(AlignedBuf::zeroed(16384))).unwrap();
        assert_eq!((c.seg, c.off, c.buf.len()), (3, 0, 4096));
        assert_eq!(c.entries.len(), 1);
        assert!(c.buf.as_slice()[64 + len..].iter().all(|&b| b == 0));
        assert_eq!((st.in_flight(), st.oldest()), (1, None));
        assert_eq!(st.push(&h, (b"k", &[7; 100], None), len, 5), Some(4096));
        // The second record's chunk is lost: it leaves the summary.
        st.forget(3, 4096, 8192);
        st.chunk_done();
        assert_eq!(st.in_flight(), 0);
        let (seg, summary, buf) = st.close().unwrap();
        assert_eq!((seg, summary.len(), buf.is_some()), (3, 1, true));
        assert_eq!((st.seg(), st.has_buf()), (None, false));
    }

    #[test]
    fn room_leaves_space_for_the_summary_tail() {
        let mut st = StreamState::default();
        st.start(0, AlignedBuf::zeroed(4096), 64);
        // One page of records, then the tail of a one-record summary.
        let seg_size = PAGE + tail_len(1);
        let fits = 4096 - 64;
        assert_eq!(
            st.room(fits, 4096, seg_size),
            Room {
                chunk: true,
                segment: true
            }
        );
        assert_eq!(
            st.room(fits + 16, 4096, seg_size),
            Room {
                chunk: false,
                segment: false
            }
        );
        assert!(st.room(fits + 16, 8192, seg_size + PAGE).segment);
    }
}
