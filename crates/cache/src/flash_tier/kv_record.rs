//! [`KvRecord`]: every record the key-value face writes to flash, and the one checked read.
//!
//! The flash engine stores opaque records (kind, key_id, version, flags, exptime, key, value);
//! this file alone gives them their key-value meaning (docs/format.md, "Key-value records").
//! `key_id` is the key's index hash under the seed stored on flash; `version` is handed out at
//! append (a per-cache sequence, ≥ the CAS of a PUT or checkpoint), so the highest version of a
//! key is its newest write. A PUT's value starts with a [`PREFIX`]-byte little-endian prefix:
//!
//! | bytes | field                                   |
//! |-------|-----------------------------------------|
//! | 0–7   | CAS                                     |
//! | 8–11  | stored time (unix seconds)              |
//! | 12    | record flags kept on flash (stale, win) |
//! | 13–15 | zero                                    |
use bytes::Bytes;
use flashtier_flash::{kind, Record, RecordMeta, RecordWrite};

use crate::ram::record::{Header, ValueWords, F_STALE, F_WIN};

/// Bytes of a PUT value's prefix.
pub const PREFIX: usize = 16;
/// Engine kind of a `flush_all` marker.
const KIND_FLUSH: u8 = 3;
/// Engine kind of a CAS checkpoint.
const KIND_CAS: u8 = 4;
/// Marker flag: a delayed flush (its `exptime` is the flush time).
const FLUSH_DELAYED: u32 = 1;

/// A PUT's value: bytes at hand, or a RAM record's value words, copied from the arena
/// straight into the flash write chunk (no buffer of its own: the write-back's and RAM
/// eviction's one copy, docs/serving.md "thirteenth sitting").
#[derive(Clone, Copy, Debug)]
pub enum PutValue<'a> {
    Bytes(&'a [u8]),
    Ram(&'a ValueWords<'a>),
}

impl PutValue<'_> {
    /// Value bytes.
    pub fn len(&self) -> usize {
        match self {
            PutValue::Bytes(b) => b.len(),
            PutValue::Ram(w) => w.len(),
        }
    }

    /// Copy the value into `dst` (`len` bytes).
    pub fn copy_to(&self, dst: &mut [u8]) {
        match self {
            PutValue::Bytes(b) => dst.copy_from_slice(b),
            PutValue::Ram(w) => w.copy_to(dst),
        }
    }
}

/// One item version, as appended.
#[derive(Clone, Copy, Debug)]
pub struct Put<'a> {
    pub key_id: u64,
    pub key: &'a [u8],
    pub value: PutValue<'a>,
    pub flags: u32,
    pub exptime: u32,
    pub cas: u64,
    pub stored: u32,
    /// Record flag bits `F_STALE | F_WIN` (others are not kept on flash).
    pub rflags: u8,
}

/// A record the key-value face appends.
#[derive(Clone, Copy, Debug)]
pub enum KvRecord<'a> {
    /// An item version.
    Put(Put<'a>),
    /// A delete (or an expiry that must not let an older version come back).
    Tombstone { key_id: u64, key: &'a [u8] },
    /// A `flush_all`: immediate (`at` = 0) or delayed to unix time `at`.
    Flush { at: u32 },
    /// The CAS counter at a clean close (a restart continues above it).
    CasCheckpoint { cas: u64 },
}

impl<'a> Put<'a> {
    /// The version a RAM record with header `h` holds.
    pub fn of(key_id: u64, key: &'a [u8], value: PutValue<'a>, h: &Header) -> Self {
        Put {
            key_id,
            key,
            value,
            flags: h.flags,
            exptime: h.exptime,
            cas: h.cas,
            stored: h.stored,
            rflags: h.rflags & (F_STALE | F_WIN),
        }
    }
}

impl KvRecord<'_> {
    /// The smallest version this record may carry.
    pub fn min_version(&self) -> u64 {
        match self {
            KvRecord::Put(p) => p.cas,
            KvRecord::CasCheckpoint { cas } => *cas,
            _ => 0,
        }
    }

    /// The engine record for this one at `version`. A PUT's value on flash is the
    /// [`PREFIX`] (built in `prefix`, the record's `value`) followed by the item's value,
    /// which [`Self::body`] gives: the engine copies it into its write chunk.
    pub fn encode<'b>(&'b self, version: u64, prefix: &'b mut [u8; PREFIX]) -> RecordWrite<'b> {
        let (kind, key_id, flags, exptime, key, value): (u8, u64, u32, u32, &[u8], &[u8]) =
            match self {
                KvRecord::Put(p) => {
                    prefix[..8].copy_from_slice(&p.cas.to_le_bytes());
                    prefix[8..12].copy_from_slice(&p.stored.to_le_bytes());
                    prefix[12..].copy_from_slice(&[p.rflags, 0, 0, 0]);
                    (kind::PUT, p.key_id, p.flags, p.exptime, p.key, &prefix[..])
                }
                KvRecord::Tombstone { key_id, key } => (kind::TOMBSTONE, *key_id, 0, 0, key, &[]),
                KvRecord::Flush { at } => {
                    let flags = if *at == 0 { 0 } else { FLUSH_DELAYED };
                    (KIND_FLUSH, 0, flags, *at, &[], &[])
                }
                KvRecord::CasCheckpoint { .. } => (KIND_CAS, 0, 0, 0, &[], &[]),
            };
        RecordWrite {
            kind,
            key_id,
            version,
            flags,
            exptime,
            key,
            value,
        }
    }

    /// A PUT's item value, the part of its flash value after the prefix [`Self::encode`]
    /// builds; `None` for the other kinds.
    pub fn body(&self) -> Option<PutValue<'_>> {
        match self {
            KvRecord::Put(p) => Some(p.value),
            _ => None,
        }
    }
}

/// What a record's metadata (all recovery and reclaim see) says it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvKind {
    Put,
    Tombstone,
    /// A `flush_all` marker; `delayed` with the flush time in `exptime`.
    Flush {
        delayed: bool,
    },
    CasCheckpoint,
    /// Not a kind this face writes (left alone by recovery, dropped by reclaim).
    Unknown,
}

impl KvKind {
    pub fn of(m: &RecordMeta) -> Self {
        match m.kind {
            kind::PUT => KvKind::Put,
            kind::TOMBSTONE => KvKind::Tombstone,
            KIND_FLUSH => KvKind::Flush {
                delayed: m.flags & FLUSH_DELAYED != 0,
            },
            KIND_CAS => KvKind::CasCheckpoint,
            _ => KvKind::Unknown,
        }
    }
}

/// An item version read back from flash: the one checked read of a PUT record.
#[derive(Clone, Debug)]
pub struct FlashItem {
    pub key: Bytes,
    pub cas: u64,
    pub stored: u32,
    /// Record flag bits `F_STALE | F_WIN` as stored.
    pub rflags: u8,
    pub flags: u32,
    pub exptime: u32,
    pub value: Bytes,
}

impl FlashItem {
    /// The item `rec` holds, or `None` if it is not a PUT or its prefix is short.
    pub fn decode(rec: &Record) -> Option<Self> {
        let h = &rec.header;
        if h.kind != kind::PUT {
            return None;
        }
        let p = rec.value.get(..PREFIX)?;
        let cas = u64::from_le_bytes(p.get(0..8)?.try_into().ok()?);
        let stored = u32::from_le_bytes(p.get(8..12)?.try_into().ok()?);
        Some(FlashItem {
            key: rec.key.clone(),
            cas,
            stored,
            rflags: *p.get(12)?,
            flags: h.flags,
            exptime: h.exptime,
            value: rec.value.slice(PREFIX..),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_put_prefix() {
        let put = KvRecord::Put(Put {
            key_id: 7,
            key: b"k",
            value: PutValue::Bytes(b"value"),
            flags: 9,
            exptime: 100,
            cas: 42,
            stored: 50,
            rflags: 3,
        });
        let mut buf = [0; PREFIX];
        let w = put.encode(43, &mut buf);
        assert_eq!(
            (w.kind, w.key_id, w.version, w.flags),
            (kind::PUT, 7, 43, 9)
        );
        assert_eq!(w.value.len(), PREFIX);
        assert_eq!(&w.value[..8], &42u64.to_le_bytes());
        let body = put.body().unwrap();
        let mut v = [0; 5];
        body.copy_to(&mut v);
        assert_eq!(&v, b"value");
        assert_eq!(put.min_version(), 42);
        let delayed = KvRecord::Flush { at: 77 };
        let w = delayed.encode(1, &mut buf);
        assert_eq!(
            (w.kind, w.flags, w.exptime),
            (KIND_FLUSH, FLUSH_DELAYED, 77)
        );
        let w = KvRecord::CasCheckpoint { cas: 5 }.encode(5, &mut buf);
        assert_eq!(w.kind, KIND_CAS);
    }
}
