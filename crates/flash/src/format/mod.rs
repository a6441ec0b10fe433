//! The on-flash format: little-endian structs, each with its byte table beside it and in
//! `docs/format.md`.
//!
//! A device is `[superblock page][segment 0][segment 1]...`; a segment is
//! `[segment header][records...][free][summary entries][footer]`. Every checksum is CRC-32C.
//! Record, summary and footer checksums are *seeded* with the segment seed
//! ([`segment_seed`]: CRC-32C of the instance uuid and the segment's sequence number), so bytes
//! left over from a segment's previous life, or from a previous format of the device, never
//! validate.
//!
//! This module is pure (no IO, no threads). Decoders read untrusted bytes and never panic:
//! every access goes through `Cursor`, which returns `None` past the end.
#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::host_endian_bytes
)]

pub mod journal;
pub mod record;
pub mod segment;
pub mod superblock;

/// Current format version, stored in the superblock.
pub const FORMAT_VERSION: u32 = 1;

/// The seed for checksums of records, summary and footer of the segment with sequence `seq`
/// in the device set with instance `uuid`.
pub fn segment_seed(uuid: &[u8; 16], seq: u64) -> u32 {
    let c = crc32c::crc32c(uuid);
    crc32c::crc32c_append(c, &seq.to_le_bytes())
}

/// Bounds-checked little-endian reader over untrusted bytes.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.bytes(N)?.try_into().ok()
    }

    pub(crate) fn u8(&mut self) -> Option<u8> {
        Some(self.array::<1>()?[0])
    }

    pub(crate) fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.array()?))
    }
}

/// Little-endian writer appending to a `Vec` (encoders own their buffers, so no bounds issue).
pub(crate) struct Put<'a>(pub(crate) &'a mut Vec<u8>);

impl Put<'_> {
    pub(crate) fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }
    pub(crate) fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub(crate) fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    pub(crate) fn zeros(&mut self, n: usize) -> &mut Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
}
