//! Segment header, summary entries and footer: what makes a segment self-describing.
//!
//! ```text
//! Segment layout (segment_size bytes, a multiple of 4 KiB)
//! [header 64 B][records ...][zero/stale ...][summary entries][zero pad][footer 64 B]
//!                                           ^ summary_offset (page aligned)   ^ segment end
//! ```
//! Records start right after the header and are written in page-aligned chunks. At seal time
//! the summary (one entry per record) and the footer are written as one IO into the tail
//! pages, so the footer is always the last 64 bytes of the segment and recovery finds it at a
//! fixed place. A segment with no valid footer (crash before seal) is scanned record by record.
//! Byte tables: beside each struct, mirrored in `docs/format.md`.

use super::{Cursor, Put};
use crate::location::PAGE;

/// Encoded segment header length.
pub const SEGMENT_HEADER_LEN: usize = 64;
/// Encoded summary entry length.
pub const SUMMARY_ENTRY_LEN: usize = 40;
/// Encoded footer length.
pub const FOOTER_LEN: usize = 64;

const HEADER_MAGIC: &[u8; 8] = b"FTSEGHDR";
const FOOTER_MAGIC: &[u8; 8] = b"FTSEGEND";

/// The header at the start of every written segment.
///
/// ```text
/// Segment header (SEGMENT_HEADER_LEN = 64 bytes)
/// off size field
///   0    8 magic "FTSEGHDR"
///   8    8 seq: sequence number, monotonic across the device set (never 0)
///  16   16 instance uuid (from the superblock)
///  32    4 global segment index
///  36    1 stream id
///  37    3 reserved, 0
///  40    4 created (unix seconds)
///  44   16 reserved, 0
///  60    4 crc32c of bytes 0..60 (unseeded)
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Sequence number (> 0), unique and increasing across the device set.
    pub seq: u64,
    /// Device-set instance uuid.
    pub uuid: [u8; 16],
    /// Global segment index this header was written for.
    pub segment: u32,
    /// Stream the segment belongs to.
    pub stream: u8,
    /// Unix seconds when the segment was opened.
    pub created: u32,
}

impl SegmentHeader {
    /// Encode to exactly [`SEGMENT_HEADER_LEN`] bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(SEGMENT_HEADER_LEN);
        Put(&mut v)
            .bytes(HEADER_MAGIC)
            .u64(self.seq)
            .bytes(&self.uuid)
            .u32(self.segment)
            .u8(self.stream)
            .zeros(3)
            .u32(self.created)
            .zeros(16);
        let crc = crc32c::crc32c(&v);
        Put(&mut v).u32(crc);
        v
    }

    /// Decode and verify; `None` if the bytes are not a valid header.
    pub fn decode(buf: &[u8]) -> Option<Self> {
        let body = buf.get(..SEGMENT_HEADER_LEN - 4)?;
        let mut c = Cursor::new(buf);
        if c.bytes(8)? != HEADER_MAGIC {
            return None;
        }
        let seq = c.u64()?;
        let uuid = c.array::<16>()?;
        let segment = c.u32()?;
        let stream = c.u8()?;
        c.bytes(3)?;
        let created = c.u32()?;
        c.bytes(16)?;
        let crc = c.u32()?;
        (crc == crc32c::crc32c(body) && seq != 0).then_some(Self {
            seq,
            uuid,
            segment,
            stream,
            created,
        })
    }
}

/// One summary entry: what recovery and reclaim need about a record without reading it.
///
/// ```text
/// Summary entry (SUMMARY_ENTRY_LEN = 40 bytes)
/// off size field
///   0    8 key_id
///   8    8 version
///  16    4 offset of the record from the segment start (bytes)
///  20    4 record length (bytes, unpadded)
///  24    4 exptime (unix seconds, 0 = never)
///  28    4 user flags
///  32    1 kind
///  33    7 reserved, 0
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SummaryEntry {
    /// User key id.
    pub key_id: u64,
    /// User version.
    pub version: u64,
    /// Record offset from the segment start (bytes).
    pub offset: u32,
    /// Record length (bytes, unpadded).
    pub len: u32,
    /// Absolute unix seconds, 0 = never.
    pub exptime: u32,
    /// User flags.
    pub flags: u32,
    /// Record kind.
    pub kind: u8,
}

impl SummaryEntry {
    /// Append the encoded entry ([`SUMMARY_ENTRY_LEN`] bytes) to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        Put(out)
            .u64(self.key_id)
            .u64(self.version)
            .u32(self.offset)
            .u32(self.len)
            .u32(self.exptime)
            .u32(self.flags)
            .u8(self.kind)
            .zeros(7);
    }

    fn decode(c: &mut Cursor<'_>) -> Option<Self> {
        let e = Self {
            key_id: c.u64()?,
            version: c.u64()?,
            offset: c.u32()?,
            len: c.u32()?,
            exptime: c.u32()?,
            flags: c.u32()?,
            kind: c.u8()?,
        };
        c.bytes(7)?;
        Some(e)
    }
}

/// The footer closing a sealed segment.
///
/// ```text
/// Footer (FOOTER_LEN = 64 bytes, the last 64 bytes of the segment)
/// off size field
///   0    8 magic "FTSEGEND"
///   8    8 seq (must equal the header's)
///  16    4 record count (= summary entries)
///  20    4 summary offset from the segment start (bytes, page aligned)
///  24    4 data end: offset just past the last record's page (bytes)
///  28    4 max exptime over records (0 if any record never expires)
///  32    4 crc32c of the summary entries, seeded with the segment seed
///  36   24 reserved, 0
///  60    4 crc32c of bytes 0..60, seeded with the segment seed
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footer {
    /// Must equal the header's seq.
    pub seq: u64,
    /// Number of summary entries.
    pub records: u32,
    /// Summary offset from the segment start (page aligned).
    pub summary_offset: u32,
    /// End of the record area (page aligned).
    pub data_end: u32,
    /// Largest exptime of any record, 0 if one never expires.
    pub max_exptime: u32,
    /// Checksum of the summary bytes (seeded).
    pub summary_crc: u32,
}

impl Footer {
    /// Encode to exactly [`FOOTER_LEN`] bytes with the segment seed.
    pub fn encode(&self, seed: u32) -> Vec<u8> {
        let mut v = Vec::with_capacity(FOOTER_LEN);
        Put(&mut v)
            .bytes(FOOTER_MAGIC)
            .u64(self.seq)
            .u32(self.records)
            .u32(self.summary_offset)
            .u32(self.data_end)
            .u32(self.max_exptime)
            .u32(self.summary_crc)
            .zeros(24);
        let crc = crc32c::crc32c_append(seed, &v);
        Put(&mut v).u32(crc);
        v
    }

    /// Decode and verify against `seed`; `None` if invalid (including a stale footer).
    pub fn decode(buf: &[u8], seed: u32) -> Option<Self> {
        let body = buf.get(..FOOTER_LEN - 4)?;
        let mut c = Cursor::new(buf);
        if c.bytes(8)? != FOOTER_MAGIC {
            return None;
        }
        let f = Self {
            seq: c.u64()?,
            records: c.u32()?,
            summary_offset: c.u32()?,
            data_end: c.u32()?,
            max_exptime: c.u32()?,
            summary_crc: c.u32()?,
        };
        c.bytes(24)?;
        let crc = c.u32()?;
        (crc == crc32c::crc32c_append(seed, body)).then_some(f)
    }
}

/// Bytes the tail (summary + footer) of a segment with `records` records occupies, rounded
/// up to whole pages.
pub fn tail_len(records: usize) -> u64 {
    ((records * SUMMARY_ENTRY_LEN + FOOTER_LEN) as u64).div_ceil(PAGE) * PAGE
}

/// Encode the tail of a sealed segment: summary entries, zero padding, footer at the very end.
/// The returned buffer is `tail_len(entries.len())` bytes and is written at
/// `segment_size - tail_len`.
pub fn encode_tail(entries: &[SummaryEntry], mut footer: Footer, seed: u32) -> Vec<u8> {
    let len = tail_len(entries.len()) as usize;
    let mut out = Vec::with_capacity(len);
    for e in entries {
        e.encode_into(&mut out);
    }
    footer.records = entries.len() as u32;
    footer.summary_crc = crc32c::crc32c_append(seed, &out);
    out.resize(len - FOOTER_LEN, 0);
    out.extend_from_slice(&footer.encode(seed));
    out
}

/// Decode the summary whose bytes start at `buf` (as located by `footer`), verifying its
/// checksum. `None` if it does not verify.
pub fn decode_summary(buf: &[u8], footer: &Footer, seed: u32) -> Option<Vec<SummaryEntry>> {
    let n = footer.records as usize;
    let bytes = buf.get(..n.checked_mul(SUMMARY_ENTRY_LEN)?)?;
    if crc32c::crc32c_append(seed, bytes) != footer.summary_crc {
        return None;
    }
    let mut c = Cursor::new(bytes);
    (0..n).map(|_| SummaryEntry::decode(&mut c)).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(i: u32) -> SummaryEntry {
        SummaryEntry {
            key_id: u64::from(i) * 31,
            version: 9,
            offset: 64 + i * 48,
            len: 48,
            exptime: i,
            flags: 3,
            kind: 1,
        }
    }

    #[test]
    fn header_round_trip_and_corruption() {
        let h = SegmentHeader {
            seq: 5,
            uuid: [7; 16],
            segment: 3,
            stream: 2,
            created: 100,
        };
        let b = h.encode();
        assert_eq!(b.len(), SEGMENT_HEADER_LEN);
        assert_eq!(SegmentHeader::decode(&b), Some(h));
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x10;
            assert_eq!(SegmentHeader::decode(&c), None, "byte {i}");
        }
    }

    proptest! {
        #[test]
        fn tail_round_trip_and_any_byte_flip(n in 0u32..150, pos in any::<prop::sample::Index>(),
                                             flip in 1u8..=255) {
            let entries: Vec<_> = (0..n).map(entry).collect();
            let f = Footer { seq: 77, records: 0, summary_offset: 0, data_end: 4096,
                             max_exptime: 9, summary_crc: 0 };
            let tail = encode_tail(&entries, f, 0x1234);
            prop_assert_eq!(tail.len() as u64, tail_len(entries.len()));
            let fbuf = &tail[tail.len() - FOOTER_LEN..];
            let got = Footer::decode(fbuf, 0x1234).unwrap();
            prop_assert_eq!(got.records, n);
            prop_assert!(Footer::decode(fbuf, 0x1235).is_none());
            prop_assert_eq!(decode_summary(&tail, &got, 0x1234).unwrap(), entries);
            // Flip one byte in the summary or footer: never accepted.
            let covered: Vec<usize> = (0..n as usize * SUMMARY_ENTRY_LEN)
                .chain(tail.len() - FOOTER_LEN..tail.len()).collect();
            let i = covered[pos.index(covered.len())];
            let mut bad = tail.clone();
            bad[i] ^= flip;
            let fb = &bad[bad.len() - FOOTER_LEN..];
            let ok = Footer::decode(fb, 0x1234)
                .and_then(|f| decode_summary(&bad, &f, 0x1234));
            prop_assert!(ok.is_none());
        }
    }
}
