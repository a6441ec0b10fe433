//! One record: header + key + value, padded to 16 bytes (byte table beside [`RecordHeader`],
//! mirrored in `docs/format.md`).
//!
//! Invariants: a record never crosses a write-chunk end; a zero `kind` byte where a header is
//! expected means the rest of the 4 KiB page is padding (a partial chunk flushed early).

use bytes::Bytes;

use super::Cursor;
use crate::handler::ValueFill;

/// Size of the encoded record header.
pub const RECORD_HEADER_LEN: usize = 40;
/// Record alignment.
pub const RECORD_ALIGN: usize = 16;

/// Record kinds the engine names; any other non-zero byte is a user kind.
pub mod kind {
    /// Not a record: the rest of the page is padding.
    pub const PADDING: u8 = 0;
    /// A value for `key_id`.
    pub const PUT: u8 = 1;
    /// `key_id` was deleted (no value).
    pub const TOMBSTONE: u8 = 2;
}

/// The fixed fields of a record, as stored.
///
/// ```text
/// Record header (RECORD_HEADER_LEN = 40 bytes, little-endian)
/// off  size  field
///   0     4  crc32c, seeded with the segment seed, over bytes 4..40 + key + value
///   4     1  kind (0 = padding: skip to the next 4 KiB page; 1 = put; 2 = tombstone; 3.. user)
///   5     1  reserved, 0
///   6     2  key_len (bytes)
///   8     4  value_len (bytes)
///  12     4  user flags (opaque to the engine)
///  16     4  exptime (absolute unix seconds, 0 = never)
///  20     4  stored time (unix seconds when appended)
///  24     8  version (user's CAS / write sequence)
///  32     8  key_id (user's key hash or LBA)
///  40     k  key
/// 40+k    v  value
///  ...       zero padding to a multiple of 16 bytes
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RecordHeader {
    /// Record kind, never 0 for a real record (see [`kind`]).
    pub kind: u8,
    /// Key length in bytes.
    pub key_len: u16,
    /// Value length in bytes.
    pub value_len: u32,
    /// User flags (memcached client flags), opaque.
    pub flags: u32,
    /// Absolute unix seconds; 0 = never expires.
    pub exptime: u32,
    /// Unix seconds when the record was appended.
    pub time: u32,
    /// User version (CAS unique, write sequence), opaque.
    pub version: u64,
    /// User key id (key hash, LBA), opaque.
    pub key_id: u64,
}

impl RecordHeader {
    /// Encoded length of the record, padding included.
    pub fn padded_len(&self) -> usize {
        padded_len(usize::from(self.key_len), self.value_len as usize)
    }

    /// Encoded length of the record without padding (what the checksum covers, plus 4).
    pub fn unpadded_len(&self) -> usize {
        RECORD_HEADER_LEN + usize::from(self.key_len) + self.value_len as usize
    }
}

/// Encoded length, padding included, of a record with these key and value lengths.
pub fn padded_len(key_len: usize, value_len: usize) -> usize {
    (RECORD_HEADER_LEN + key_len + value_len).div_ceil(RECORD_ALIGN) * RECORD_ALIGN
}

/// A record read back from flash (or from a write buffer). Key and value share one buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The stored header fields.
    pub header: RecordHeader,
    /// The key bytes (may be empty).
    pub key: Bytes,
    /// The value bytes.
    pub value: Bytes,
}

/// Why bytes did not decode as a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// A zero kind byte: padding up to the next page.
    Padding,
    /// The buffer ends before the record does.
    Truncated,
    /// Checksum mismatch (torn, corrupt, or stale from an older segment life).
    Checksum,
}

/// Encode a record into `dst` (which must be at least `padded_len` long; the padding bytes
/// are zeroed). Returns the padded length, or `None` if `dst` is too short, `kind` is 0 or the
/// key is longer than `u16::MAX`.
pub fn encode(
    dst: &mut [u8],
    h: &RecordHeader,
    key: &[u8],
    value: &[u8],
    seed: u32,
) -> Option<usize> {
    encode_parts(dst, h, key, (value, None), seed)
}

/// [`encode`] of a value given in two parts: `head`, then the bytes `fill` writes in place
/// (see [`ValueFill`]). Each value byte is written once, and the checksum is one pass over
/// the record as it lies in `dst` (header, key, value). Nothing is allocated.
pub fn encode_parts(
    dst: &mut [u8],
    h: &RecordHeader,
    key: &[u8],
    (head, fill): (&[u8], Option<ValueFill<'_>>),
    seed: u32,
) -> Option<usize> {
    let value_len = head.len() + fill.map_or(0, |f| f.len);
    if h.kind == kind::PADDING
        || key.len() != usize::from(h.key_len)
        || value_len != h.value_len as usize
    {
        return None;
    }
    let total = h.padded_len();
    let dst = dst.get_mut(..total)?;
    let (hdr, rest) = dst.split_at_mut_checked(RECORD_HEADER_LEN)?;
    let (k, rest) = rest.split_at_mut_checked(key.len())?;
    let (v, pad) = rest.split_at_mut_checked(value_len)?;
    hdr.copy_from_slice(&header_bytes(h));
    k.copy_from_slice(key);
    let (v_head, v_tail) = v.split_at_mut_checked(head.len())?;
    v_head.copy_from_slice(head);
    if let Some(f) = fill {
        (f.fill)(v_tail);
    }
    pad.fill(0);
    let covered = dst.get(4..RECORD_HEADER_LEN + key.len() + value_len)?;
    let crc = crc32c::crc32c_append(seed, covered);
    dst.get_mut(..4)?.copy_from_slice(&crc.to_le_bytes());
    Some(total)
}

/// The header's bytes as stored, checksum field zero (the table beside [`RecordHeader`]).
fn header_bytes(h: &RecordHeader) -> [u8; RECORD_HEADER_LEN] {
    let mut b = [0u8; RECORD_HEADER_LEN];
    b[4] = h.kind;
    b[6..8].copy_from_slice(&h.key_len.to_le_bytes());
    b[8..12].copy_from_slice(&h.value_len.to_le_bytes());
    b[12..16].copy_from_slice(&h.flags.to_le_bytes());
    b[16..20].copy_from_slice(&h.exptime.to_le_bytes());
    b[20..24].copy_from_slice(&h.time.to_le_bytes());
    b[24..32].copy_from_slice(&h.version.to_le_bytes());
    b[32..40].copy_from_slice(&h.key_id.to_le_bytes());
    b
}

/// Decode the header of the record at the start of `buf` and verify its checksum over the
/// whole record. Returns the header; key is at `RECORD_HEADER_LEN..+key_len`, value after it.
pub fn decode(buf: &[u8], seed: u32) -> Result<RecordHeader, DecodeError> {
    let mut c = Cursor::new(buf);
    let crc = c.u32().ok_or(DecodeError::Truncated)?;
    let kind_byte = c.u8().ok_or(DecodeError::Truncated)?;
    if kind_byte == kind::PADDING {
        return Err(DecodeError::Padding);
    }
    let t = DecodeError::Truncated;
    let _reserved = c.u8().ok_or(t)?;
    let h = RecordHeader {
        kind: kind_byte,
        key_len: c.u16().ok_or(t)?,
        value_len: c.u32().ok_or(t)?,
        flags: c.u32().ok_or(t)?,
        exptime: c.u32().ok_or(t)?,
        time: c.u32().ok_or(t)?,
        version: c.u64().ok_or(t)?,
        key_id: c.u64().ok_or(t)?,
    };
    // Lengths come from untrusted bytes: a huge value_len on a corrupt header must not read
    // past the buffer (get() returns None) — report it as a checksum failure when the buffer
    // is as long as the caller could provide, else as truncated.
    let covered = buf.get(4..h.unpadded_len()).ok_or(DecodeError::Truncated)?;
    if crc32c::crc32c_append(seed, covered) != crc {
        return Err(DecodeError::Checksum);
    }
    Ok(h)
}

/// The unpadded length a record header at the start of `buf` claims, without verifying the
/// checksum (to size a second read). `None` if `buf` is shorter than a header or padding.
pub fn peek_len(buf: &[u8]) -> Option<usize> {
    let mut c = Cursor::new(buf);
    c.u32()?;
    if c.u8()? == kind::PADDING {
        return None;
    }
    c.u8()?;
    let key_len = usize::from(c.u16()?);
    let value_len = c.u32()? as usize;
    Some(RECORD_HEADER_LEN + key_len + value_len)
}

/// Decode and copy out a full [`Record`] from `buf` (see [`decode`]).
pub fn decode_record(buf: &[u8], seed: u32) -> Result<Record, DecodeError> {
    let h = decode(buf, seed)?;
    let k_end = RECORD_HEADER_LEN + usize::from(h.key_len);
    let key = buf
        .get(RECORD_HEADER_LEN..k_end)
        .ok_or(DecodeError::Truncated)?;
    let value = buf
        .get(k_end..h.unpadded_len())
        .ok_or(DecodeError::Truncated)?;
    Ok(Record {
        header: h,
        key: Bytes::copy_from_slice(key),
        value: Bytes::copy_from_slice(value),
    })
}

/// Like [`decode_record`] but slices key and value out of an owned buffer without copying.
/// `start` is where the record begins in `owned`.
pub fn decode_record_owned(owned: Bytes, start: usize, seed: u32) -> Result<Record, DecodeError> {
    let buf = owned.get(start..).ok_or(DecodeError::Truncated)?;
    let h = decode(buf, seed)?;
    let k0 = start + RECORD_HEADER_LEN;
    let k1 = k0 + usize::from(h.key_len);
    let v1 = start + h.unpadded_len();
    Ok(Record {
        header: h,
        key: owned.slice(k0..k1),
        value: owned.slice(k1..v1),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hdr(key: &[u8], value: &[u8]) -> RecordHeader {
        RecordHeader {
            kind: kind::PUT,
            key_len: key.len() as u16,
            value_len: value.len() as u32,
            flags: 7,
            exptime: 1234,
            time: 99,
            version: 42,
            key_id: 0xdead_beef,
        }
    }

    proptest! {
        #[test]
        fn round_trip(key in proptest::collection::vec(any::<u8>(), 0..64),
                      value in proptest::collection::vec(any::<u8>(), 0..600),
                      seed in any::<u32>()) {
            let h = hdr(&key, &value);
            let mut buf = vec![0xAAu8; h.padded_len() + 16];
            let n = encode(&mut buf, &h, &key, &value, seed).unwrap();
            prop_assert_eq!(n % RECORD_ALIGN, 0);
            let r = decode_record(&buf, seed).unwrap();
            prop_assert_eq!(r.header, h);
            prop_assert_eq!(&r.key[..], &key[..]);
            prop_assert_eq!(&r.value[..], &value[..]);
            let owned = decode_record_owned(Bytes::from(buf.clone()), 0, seed).unwrap();
            prop_assert_eq!(owned, r);
            // Another segment life (different seed) never validates.
            prop_assert!(decode(&buf, seed ^ 1).is_err());
        }

        #[test]
        fn any_single_byte_corruption_is_detected(
            key in proptest::collection::vec(any::<u8>(), 1..32),
            value in proptest::collection::vec(any::<u8>(), 0..300),
            pos in any::<prop::sample::Index>(),
            flip in 1u8..=255) {
            let h = hdr(&key, &value);
            let mut buf = vec![0u8; h.padded_len()];
            encode(&mut buf, &h, &key, &value, 5).unwrap();
            let covered = h.unpadded_len();
            let i = pos.index(covered);
            buf[i] ^= flip;
            prop_assert!(decode_record(&buf, 5).is_err());
        }
    }

    proptest! {
        #[test]
        fn a_value_in_parts_encodes_as_the_whole(
            key in proptest::collection::vec(any::<u8>(), 0..64),
            value in proptest::collection::vec(any::<u8>(), 0..600),
            cut in any::<prop::sample::Index>(),
            seed in any::<u32>()) {
            let h = hdr(&key, &value);
            let mut whole = vec![0xAAu8; h.padded_len()];
            encode(&mut whole, &h, &key, &value, seed).unwrap();
            let (head, tail) = value.split_at(cut.index(value.len() + 1));
            let copy = |d: &mut [u8]| d.copy_from_slice(tail);
            let fill = ValueFill { len: tail.len(), fill: &copy };
            // A reused chunk buffer: stale bytes everywhere the record goes.
            let mut parts = vec![0x55u8; h.padded_len()];
            let n = encode_parts(&mut parts, &h, &key, (head, Some(fill)), seed).unwrap();
            prop_assert_eq!(n, h.padded_len());
            prop_assert_eq!(&parts, &whole);
            // Parts that do not add up to the header's length are refused.
            let short = ValueFill { len: tail.len() + 1, fill: &|_: &mut [u8]| {} };
            prop_assert!(encode_parts(&mut parts, &h, &key, (head, Some(short)), seed).is_none());
        }
    }

    #[test]
    fn the_header_bytes_are_the_documented_table() {
        let h = hdr(b"key", b"value");
        let b = header_bytes(&h);
        let mut c = Cursor::new(&b);
        assert_eq!(c.u32(), Some(0));
        assert_eq!(
            (c.u8(), c.u8(), c.u16()),
            (Some(kind::PUT), Some(0), Some(3))
        );
        assert_eq!(
            (c.u32(), c.u32(), c.u32(), c.u32()),
            (Some(5), Some(7), Some(1234), Some(99))
        );
        assert_eq!((c.u64(), c.u64()), (Some(42), Some(0xdead_beef)));
    }

    #[test]
    fn zero_page_is_padding_and_short_is_truncated() {
        assert_eq!(decode(&[0u8; 64], 1), Err(DecodeError::Padding));
        assert_eq!(decode(&[1u8; 10], 1), Err(DecodeError::Truncated));
    }
}
