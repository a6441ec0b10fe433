//! The crash journal's bytes: the run record (page 0 of the journal segment) and the 32-byte
//! entries of the ring that follows it. Why a journal exists, and its rules, are in
//! `crate::journal`; the byte tables below are mirrored in `docs/format.md`, "Crash journal".
//!
//! An entry is a copy of a header-only record's metadata (kind, key id, version, flags,
//! exptime): a fact about versions that stays true forever ("every version of key K below V
//! is gone", "every item below version V is flushed"), so an entry left over from an earlier
//! lap of the ring is harmless. Entries are checksummed with the *journal seed* of the
//! current epoch ([`journal_seed`]): bumping the epoch (at every open, once what the old
//! entries said is safe in the log) retires every old entry at once without erasing it.
//! Every entry lies inside one 512-byte sector, so a torn page write tears no entry that was
//! already there.

use super::{Cursor, Put};

/// Bytes of one ring entry.
pub const ENTRY_LEN: usize = 32;
/// Encoded run record length.
pub const RUN_RECORD_LEN: usize = 64;
/// Run record magic.
pub const RUN_MAGIC: &[u8; 8] = b"FTJOURNL";

/// The checksum seed of entries written in `epoch` of the set with instance `uuid`.
pub fn journal_seed(uuid: &[u8; 16], epoch: u64) -> u32 {
    let c = crc32c::crc32c(b"FTJOURNL");
    let c = crc32c::crc32c_append(c, uuid);
    crc32c::crc32c_append(c, &epoch.to_le_bytes())
}

/// One journal entry: the metadata of a header-only record.
///
/// ```text
/// Entry (ENTRY_LEN = 32 bytes; entry i of the ring at journal offset 4096 + 32 i)
/// off size field
///   0    1 kind (the record kind; never 0)
///   1    3 zero
///   4    4 flags
///   8    8 key id
///  16    8 version
///  24    4 exptime
///  28    4 crc32c of bytes 0..28, seeded with journal_seed(uuid, epoch)
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Record kind (non-zero).
    pub kind: u8,
    /// Record flags.
    pub flags: u32,
    /// User key id.
    pub key_id: u64,
    /// User version.
    pub version: u64,
    /// Record exptime.
    pub exptime: u32,
}

impl Entry {
    /// The entry's bytes under `seed`.
    pub fn encode(&self, seed: u32) -> [u8; ENTRY_LEN] {
        let mut v = Vec::with_capacity(ENTRY_LEN);
        Put(&mut v)
            .u8(self.kind)
            .zeros(3)
            .u32(self.flags)
            .u64(self.key_id)
            .u64(self.version)
            .u32(self.exptime);
        let crc = crc32c::crc32c_append(seed, &v);
        Put(&mut v).u32(crc);
        let mut out = [0u8; ENTRY_LEN];
        for (o, b) in out.iter_mut().zip(v) {
            *o = b;
        }
        out
    }

    /// The entry in `b` if it verifies under `seed` (a zero, torn, foreign or older-epoch
    /// entry does not).
    pub fn decode(b: &[u8], seed: u32) -> Option<Self> {
        let body = b.get(..ENTRY_LEN - 4)?;
        let mut c = Cursor::new(b);
        let kind = c.u8()?;
        if kind == 0 || c.bytes(3)? != [0, 0, 0] {
            return None;
        }
        let e = Entry {
            kind,
            flags: c.u32()?,
            key_id: c.u64()?,
            version: c.u64()?,
            exptime: c.u32()?,
        };
        (c.u32()? == crc32c::crc32c_append(seed, body)).then_some(e)
    }
}

/// How the run that wrote a journal ended, as its run record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    /// Serving (or it crashed while serving).
    Running,
    /// Closed cleanly: everything it acknowledged is in the log.
    Clean,
    /// It lost journal entries (the ring could not keep them): the next open starts empty.
    Untrusted,
}

impl RunState {
    fn to_byte(self) -> u8 {
        match self {
            RunState::Running => 1,
            RunState::Clean => 2,
            RunState::Untrusted => 3,
        }
    }

    fn from_byte(b: u8) -> Option<Self> {
        match b {
            1 => Some(RunState::Running),
            2 => Some(RunState::Clean),
            3 => Some(RunState::Untrusted),
            _ => None,
        }
    }
}

/// The run record: which epoch the ring's entries are written in, on which boot of the
/// machine, how the run ended, and whether its entries were synced before being
/// acknowledged.
///
/// ```text
/// Run record (RUN_RECORD_LEN = 64 bytes at journal offset 0; the rest of page 0 is zero)
/// off size field
///   0    8 magic "FTJOURNL"
///   8   16 instance uuid
///  24    8 epoch (entries are seeded with journal_seed(uuid, epoch))
///  32   16 boot id of the machine while the run served (/proc/sys/kernel/random/boot_id)
///  48    1 state: 1 running, 2 clean, 3 untrusted
///  49    1 synced: 1 if every entry was synced before its acknowledgement, else 0
///  50   10 zero
///  60    4 crc32c of bytes 0..60
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunRecord {
    /// Instance uuid of the device set.
    pub uuid: [u8; 16],
    /// Epoch of the ring's current entries.
    pub epoch: u64,
    /// Boot id while the run served.
    pub boot_id: [u8; 16],
    /// How the run ended.
    pub state: RunState,
    /// Entries were synced before being acknowledged (they survive a power cut).
    pub synced: bool,
}

impl RunRecord {
    /// Encode to [`RUN_RECORD_LEN`] bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(RUN_RECORD_LEN);
        Put(&mut v)
            .bytes(RUN_MAGIC)
            .bytes(&self.uuid)
            .u64(self.epoch)
            .bytes(&self.boot_id)
            .u8(self.state.to_byte())
            .u8(u8::from(self.synced))
            .zeros(10);
        let crc = crc32c::crc32c(&v);
        Put(&mut v).u32(crc);
        v
    }

    /// Decode and verify; `None` for zeros, damage or an unknown state.
    pub fn decode(b: &[u8]) -> Option<Self> {
        let body = b.get(..RUN_RECORD_LEN - 4)?;
        let mut c = Cursor::new(b);
        if c.bytes(8)? != RUN_MAGIC.as_slice() {
            return None;
        }
        let r = RunRecord {
            uuid: c.array()?,
            epoch: c.u64()?,
            boot_id: c.array()?,
            state: RunState::from_byte(c.u8()?)?,
            synced: match c.u8()? {
                0 => false,
                1 => true,
                _ => return None,
            },
        };
        c.bytes(10)?;
        (c.u32()? == crc32c::crc32c(body)).then_some(r)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            kind: 2,
            flags: 7,
            key_id: 0x0102_0304_0506_0708,
            version: 99,
            exptime: 5,
        }
    }

    #[test]
    fn entry_round_trip_and_every_byte_checked() {
        let seed = journal_seed(&[1; 16], 3);
        let b = entry().encode(seed);
        assert_eq!(Entry::decode(&b, seed), Some(entry()));
        for i in 0..ENTRY_LEN {
            let mut bad = b;
            bad[i] ^= 0x10;
            assert_eq!(Entry::decode(&bad, seed), None, "byte {i} flipped");
        }
        assert_eq!(Entry::decode(&[0; ENTRY_LEN], seed), None, "zeros");
        assert_eq!(Entry::decode(&b[..20], seed), None, "short");
        let other_epoch = journal_seed(&[1; 16], 4);
        assert_eq!(Entry::decode(&b, other_epoch), None, "another epoch");
        let other_set = journal_seed(&[2; 16], 3);
        assert_eq!(Entry::decode(&b, other_set), None, "another device set");
    }

    #[test]
    fn run_record_round_trip_and_every_byte_checked() {
        let r = RunRecord {
            uuid: [9; 16],
            epoch: 12,
            boot_id: [4; 16],
            state: RunState::Clean,
            synced: true,
        };
        let b = r.encode();
        assert_eq!(b.len(), RUN_RECORD_LEN);
        assert_eq!(RunRecord::decode(&b), Some(r));
        for i in 0..RUN_RECORD_LEN {
            let mut bad = b.clone();
            bad[i] ^= 0x01;
            assert_eq!(RunRecord::decode(&bad), None, "byte {i} flipped");
        }
        assert_eq!(RunRecord::decode(&[0; RUN_RECORD_LEN]), None);
    }
}
