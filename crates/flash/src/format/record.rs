//! One record: header + key + value, padded to 16 bytes (byte table beside [`RecordHeader`],
//! mirrored in `docs/format.md`).
//!
//! Invariants: a record never crosses a write-chunk end; a zero `kind` byte where a header is
//! expected means the rest of the 4 KiB page is padding (a partial chunk flushed early).

use bytes::Bytes;

use super::Cursor;

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
    if h.kind == kind::PADDING
        || key.len() != usize::from(h.key_len)
        || value.len() != h.value_len as usize
    {
        return None;
    }
    let total = h.padded_len();
    let dst = dst.get_mut(..total)?;
    let (hdr, rest) = dst.split_at_mut_checked(RECORD_HEADER_LEN)?;
    let (k, rest) = rest.split_at_mut_checked(key.len())?;
    let (v, pad) = rest.split_at_mut_checked(value.len())?;
    let mut fixed = Vec::with_capacity(RECORD_HEADER_LEN);
    super::Put(&mut fixed)
        .u32(0)
        .u8(h.kind)
        .u8(0)
        .u16(h.key_len)
        .u32(h.value_len)
        .u32(h.flags)
        .u32(h.exptime)
        .u32(h.time)
        .u64(h.version)
        .u64(h.key_id);
    hdr.copy_from_slice(&fixed);
    k.copy_from_slice(key);
    v.copy_from_slice(value);
    pad.fill(0);
    let mut crc = crc32c::crc32c_append(seed, hdr.get(4..)?);
    crc = crc32c::crc32c_append(crc, k);
    crc = crc32c::crc32c_append(crc, v);
    hdr.get_mut(..4)?.copy_from_slice(&crc.to_le_bytes());
    Some(total)
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

    #[test]
    fn zero_page_is_padding_and_short_is_truncated() {
        assert_eq!(decode(&[0u8; 64], 1), Err(DecodeError::Padding));
        assert_eq!(decode(&[1u8; 10], 1), Err(DecodeError::Truncated));
    }
}
