//! The device superblock: the first 4 KiB page of every device, naming the set, the face
//! that formatted it and the hash seed. Segment `i` of a device starts at byte
//! `4096 + i * segment_size`. Bytes 73 (the role) and 74 (the journal) were reserved before
//! they were used, so older devices read as role 0, which every face accepts, and as having
//! no journal. Byte table beside [`Superblock`],
//! mirrored in `docs/format.md`.

use super::{Cursor, Put, FORMAT_VERSION};

/// Encoded superblock length.
pub const SUPERBLOCK_LEN: usize = 128;
/// Bytes reserved for the superblock at the start of every device.
pub const SUPERBLOCK_AREA: u64 = 4096;

/// The superblock magic at byte 0 of every flashtier device.
pub const MAGIC: &[u8; 8] = b"FLTIERSB";

/// Which face of flashtier formatted a device. A face refuses a device formatted by the
/// other (a kv flash file is not a block cache and vice versa), unless told to reformat.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Role {
    /// No face named (engine users, tests, devices from builds before the role byte).
    /// Accepted by every face; opened by it, it keeps role 0.
    #[default]
    Any,
    /// The key-value face's flash tier (`flashtier kv --flash`).
    Kv,
    /// The block face's cache device (`flashtier block --cache`).
    Block,
}

impl Role {
    /// The byte stored at offset 73.
    pub fn to_byte(self) -> u8 {
        match self {
            Role::Any => 0,
            Role::Kv => 1,
            Role::Block => 2,
        }
    }

    /// The role of a stored byte; `None` for a value this build does not know.
    pub fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(Role::Any),
            1 => Some(Role::Kv),
            2 => Some(Role::Block),
            _ => None,
        }
    }

    /// What a device of this role is, for messages ("a flashtier kv flash device").
    pub fn describe(self) -> &'static str {
        match self {
            Role::Any => "a flashtier device",
            Role::Kv => "a flashtier kv flash device",
            Role::Block => "a flashtier block cache device",
        }
    }
}

/// Decoded superblock.
///
/// ```text
/// Superblock (SUPERBLOCK_LEN = 128 bytes at offset 0; the rest of the first page is zero)
/// off size field
///   0    8 magic "FLTIERSB"
///   8    4 format version (FORMAT_VERSION = 1)
///  12    4 device index in the set (0-based)
///  16    4 device count in the set
///  20    4 segment size (bytes, multiple of 4096)
///  24    8 device size used by the format (bytes)
///  32    4 segments on this device
///  36    4 global index of this device's first segment
///  40   16 instance uuid (random at format time; shared by the set)
///  56    8 hash seed for the user (random at format time)
///  64    8 created (unix seconds)
///  72    1 tier of this device
///  73    1 role: which face formatted it (0 = unspecified, 1 = kv flash, 2 = block cache)
///  74    1 journal: 1 if global segment 0 (device 0's first) is the crash journal, else 0
///  75   49 reserved, 0
/// 124    4 crc32c of bytes 0..124
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Format version found on the device.
    pub version: u32,
    /// Index of this device in the set.
    pub device_index: u32,
    /// Devices in the set.
    pub device_count: u32,
    /// Segment size in bytes.
    pub segment_size: u32,
    /// Bytes of the device the format uses.
    pub device_size: u64,
    /// Segments on this device.
    pub segments: u32,
    /// Global index of this device's first segment.
    pub first_segment: u32,
    /// Instance uuid shared by every device of the set.
    pub uuid: [u8; 16],
    /// Hash seed the user may use for key ids (stable across restarts).
    pub hash_seed: u64,
    /// Unix seconds at format time.
    pub created: u64,
    /// Device tier.
    pub tier: u8,
    /// [`Role`] byte of the face that formatted it (0 = unspecified).
    pub role: u8,
    /// 1 if the set's global segment 0 is the crash journal (`crate::journal`), else 0.
    /// Zero on devices formatted before the journal existed.
    pub journal: u8,
}

/// Why a superblock did not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SuperblockError {
    /// No magic: a blank or foreign device.
    NotFormatted,
    /// Magic present but the checksum fails.
    Corrupt,
    /// A format version this build does not read.
    Version(u32),
}

impl Superblock {
    /// Segments of this superblock's size that `len` device bytes hold: a device opened at
    /// another length than it was formatted for matches only if this equals `segments`.
    pub fn segments_for(&self, len: u64) -> u64 {
        len.saturating_sub(SUPERBLOCK_AREA) / u64::from(self.segment_size.max(1))
    }

    /// Encode to [`SUPERBLOCK_LEN`] bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(SUPERBLOCK_LEN);
        Put(&mut v)
            .bytes(MAGIC)
            .u32(self.version)
            .u32(self.device_index)
            .u32(self.device_count)
            .u32(self.segment_size)
            .u64(self.device_size)
            .u32(self.segments)
            .u32(self.first_segment)
            .bytes(&self.uuid)
            .u64(self.hash_seed)
            .u64(self.created)
            .u8(self.tier)
            .u8(self.role)
            .u8(self.journal)
            .zeros(49);
        let crc = crc32c::crc32c(&v);
        Put(&mut v).u32(crc);
        v
    }

    /// Decode and verify.
    pub fn decode(buf: &[u8]) -> Result<Self, SuperblockError> {
        let mut c = Cursor::new(buf);
        if c.bytes(8) != Some(MAGIC.as_slice()) {
            return Err(SuperblockError::NotFormatted);
        }
        let bad = SuperblockError::Corrupt;
        let body = buf.get(..SUPERBLOCK_LEN - 4).ok_or(bad)?;
        let sb = Self {
            version: c.u32().ok_or(bad)?,
            device_index: c.u32().ok_or(bad)?,
            device_count: c.u32().ok_or(bad)?,
            segment_size: c.u32().ok_or(bad)?,
            device_size: c.u64().ok_or(bad)?,
            segments: c.u32().ok_or(bad)?,
            first_segment: c.u32().ok_or(bad)?,
            uuid: c.array().ok_or(bad)?,
            hash_seed: c.u64().ok_or(bad)?,
            created: c.u64().ok_or(bad)?,
            tier: c.u8().ok_or(bad)?,
            role: c.u8().ok_or(bad)?,
            journal: c.u8().ok_or(bad)?,
        };
        c.bytes(49).ok_or(bad)?;
        if c.u32().ok_or(bad)? != crc32c::crc32c(body) {
            return Err(bad);
        }
        if sb.version != FORMAT_VERSION {
            return Err(SuperblockError::Version(sb.version));
        }
        Ok(sb)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_byte_checked() {
        let sb = Superblock {
            version: FORMAT_VERSION,
            device_index: 1,
            device_count: 2,
            segment_size: 1 << 20,
            device_size: 64 << 20,
            segments: 63,
            first_segment: 63,
            uuid: [3; 16],
            hash_seed: 99,
            created: 1,
            tier: 0,
            role: 2,
            journal: 1,
        };
        let b = sb.encode();
        assert_eq!(b.len(), SUPERBLOCK_LEN);
        assert_eq!(Superblock::decode(&b), Ok(sb));
        assert_eq!(
            Superblock::decode(&[0u8; 4096]),
            Err(SuperblockError::NotFormatted)
        );
        for i in 8..b.len() {
            let mut c = b.clone();
            c[i] ^= 1;
            assert_eq!(
                Superblock::decode(&c),
                Err(SuperblockError::Corrupt),
                "byte {i}"
            );
        }
    }
}
