//! Every record the block face writes through the flash engine (`BlockRecord`), how a
//! scanned record is classified (`RecordKind`), and the one checked read of a cached block
//! (`checked_block`). Byte tables: docs/format.md, "Block face records".
//!
//! Invariants: a block record's `key_id` is its LBA and its `version` comes from the index's
//! one counter, so a record read back is the block the index means only if kind, LBA,
//! version and length all match; anything else (relocated, evicted, rewritten) is a miss.
//! The watermark and the warm-restart records never carry an LBA a block could have; an
//! intent's LBA range is in `key_id` and `flags`, so recovery needs no read to apply it.
use bytes::Bytes;
use flashtier_flash::{kind, Record, RecordWrite};

/// Record kind of a cached block (`key_id` = LBA, value = the block).
pub const KIND_BLOCK: u8 = kind::PUT;
/// Record kind of the persisted clean watermark (`key_id` = [`WM_KEY`], version = mark).
pub const KIND_WATERMARK: u8 = 4;
/// Record kind of a snapshot chunk (warm restart).
pub const KIND_SNAPSHOT: u8 = 5;
/// Record kind of the shutdown marker (warm restart).
pub const KIND_SHUTDOWN: u8 = 6;
/// Record kind of the session record (warm restart).
pub const KIND_SESSION: u8 = 7;
/// Record kind of a backing-write intent (`key_id` = first LBA, flags = blocks).
pub const KIND_INTENT: u8 = 8;
/// Record kind of the floor table (crash-safe clean blocks).
pub const KIND_FLOOR: u8 = 9;
/// `key_id` of watermark records (no LBA reaches it).
pub const WM_KEY: u64 = u64::MAX;
/// Block record flag: the block was dirty when written.
pub const FLAG_DIRTY: u32 = 1;

/// A record of the block face, as written.
#[derive(Clone, Copy, Debug)]
pub(crate) enum BlockRecord<'a> {
    /// A cached block: `data` is `block_size` bytes.
    Block {
        lba: u64,
        version: u64,
        dirty: bool,
        data: &'a [u8],
    },
    /// The clean watermark: every version at or below it is on the backing or superseded.
    Watermark { version: u64 },
    /// Chunk `index` of the shutdown snapshot: `(lba, version)` pairs, little-endian.
    SnapshotChunk {
        index: u64,
        version: u64,
        entries: &'a [u8],
    },
    /// The shutdown marker (its fields: `warm`).
    ShutdownMarker { version: u64, marker: &'a [u8] },
    /// This run's session record.
    Session { version: u64 },
    /// Blocks `lba .. lba + blocks` are about to be written on the backing around the
    /// cache: their records older than `version` are stale.
    Intent { lba: u64, blocks: u32, version: u64 },
    /// The floor table (`fence`): per region, records older than its entry are not trusted.
    Floor { version: u64, table: &'a [u8] },
}

impl<'a> BlockRecord<'a> {
    /// The engine record to append.
    pub(crate) fn write(&self) -> RecordWrite<'a> {
        let (kind, key_id, version, flags, value): (u8, u64, u64, u32, &'a [u8]) = match *self {
            BlockRecord::Block {
                lba,
                version,
                dirty,
                data,
            } => (
                KIND_BLOCK,
                lba,
                version,
                if dirty { FLAG_DIRTY } else { 0 },
                data,
            ),
            BlockRecord::Watermark { version } => (KIND_WATERMARK, WM_KEY, version, 0, &[]),
            BlockRecord::SnapshotChunk {
                index,
                version,
                entries,
            } => (KIND_SNAPSHOT, index, version, 0, entries),
            BlockRecord::ShutdownMarker { version, marker } => {
                (KIND_SHUTDOWN, 0, version, 0, marker)
            }
            BlockRecord::Session { version } => (KIND_SESSION, 0, version, 0, &[]),
            BlockRecord::Intent {
                lba,
                blocks,
                version,
            } => (KIND_INTENT, lba, version, blocks, &[]),
            BlockRecord::Floor { version, table } => (KIND_FLOOR, 0, version, 0, table),
        };
        RecordWrite {
            kind,
            key_id,
            version,
            flags,
            exptime: 0,
            key: &[],
            value,
        }
    }
}

/// What a record found on flash is to the block face.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecordKind {
    Block,
    Watermark,
    SnapshotChunk,
    ShutdownMarker,
    Session,
    Intent,
    Floor,
    /// Not a kind the block face writes.
    Foreign,
}

impl RecordKind {
    /// Classify a record header's kind (and `key_id`, which tells a watermark).
    pub(crate) fn of(kind: u8, key_id: u64) -> Self {
        match kind {
            KIND_BLOCK => RecordKind::Block,
            KIND_WATERMARK if key_id == WM_KEY => RecordKind::Watermark,
            KIND_SNAPSHOT => RecordKind::SnapshotChunk,
            KIND_SHUTDOWN => RecordKind::ShutdownMarker,
            KIND_SESSION => RecordKind::Session,
            KIND_INTENT => RecordKind::Intent,
            KIND_FLOOR => RecordKind::Floor,
            _ => RecordKind::Foreign,
        }
    }
}

/// The value of `rec` if it is block `lba` (at `version` when the index knows it: a dirty
/// block) and `block_size` bytes long: the only way the block face trusts a record it read.
/// A clean block's version is not in the index. Without it the check still cannot return
/// a value older than the indexed one: once the location is reused, it can hold a record of
/// this LBA only as a copy of a live one (reclaim keeps only indexed records; older ones
/// are dead and never copied), i.e. the indexed record or a newer write racing this read.
pub(crate) fn checked_block(
    rec: &Record,
    lba: u64,
    version: Option<u64>,
    block_size: u64,
) -> Option<Bytes> {
    let h = &rec.header;
    let matches = h.kind == KIND_BLOCK
        && h.key_id == lba
        && version.is_none_or(|v| h.version == v)
        && rec.value.len() as u64 == block_size;
    matches.then(|| rec.value.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashtier_flash::format::record::RecordHeader;

    fn read_back(w: &RecordWrite<'_>) -> Record {
        Record {
            header: RecordHeader {
                kind: w.kind,
                key_id: w.key_id,
                version: w.version,
                flags: w.flags,
                value_len: w.value.len() as u32,
                ..Default::default()
            },
            key: Bytes::new(),
            value: Bytes::copy_from_slice(w.value),
        }
    }

    #[test]
    fn a_block_reads_back_only_as_itself() {
        let data = [7u8; 512];
        let w = BlockRecord::Block {
            lba: 9,
            version: 3,
            dirty: true,
            data: &data,
        }
        .write();
        assert_eq!((w.kind, w.key_id, w.flags), (KIND_BLOCK, 9, FLAG_DIRTY));
        let r = read_back(&w);
        assert_eq!(
            checked_block(&r, 9, Some(3), 512).as_deref(),
            Some(&data[..])
        );
        // A clean block: no version to compare, the rest still checked.
        assert_eq!(checked_block(&r, 9, None, 512).as_deref(), Some(&data[..]));
        assert!(
            checked_block(&r, 8, None, 512).is_none(),
            "another LBA, clean"
        );
        assert!(checked_block(&r, 8, Some(3), 512).is_none(), "another LBA");
        assert!(
            checked_block(&r, 9, Some(4), 512).is_none(),
            "another version"
        );
        assert!(
            checked_block(&r, 9, Some(3), 4096).is_none(),
            "another length"
        );
        let wm = read_back(&BlockRecord::Watermark { version: 3 }.write());
        assert!(checked_block(&wm, WM_KEY, None, 0).is_none(), "not a block");
    }

    #[test]
    fn every_kind_classifies_as_written() {
        let cases = [
            (BlockRecord::Watermark { version: 1 }, RecordKind::Watermark),
            (
                BlockRecord::SnapshotChunk {
                    index: 2,
                    version: 1,
                    entries: &[],
                },
                RecordKind::SnapshotChunk,
            ),
            (
                BlockRecord::ShutdownMarker {
                    version: 1,
                    marker: &[],
                },
                RecordKind::ShutdownMarker,
            ),
            (BlockRecord::Session { version: 1 }, RecordKind::Session),
            (
                BlockRecord::Intent {
                    lba: 3,
                    blocks: 2,
                    version: 1,
                },
                RecordKind::Intent,
            ),
            (
                BlockRecord::Floor {
                    version: 1,
                    table: &[],
                },
                RecordKind::Floor,
            ),
        ];
        for (rec, want) in cases {
            let w = rec.write();
            assert_eq!(RecordKind::of(w.kind, w.key_id), want);
        }
        assert_eq!(RecordKind::of(KIND_WATERMARK, 5), RecordKind::Foreign);
        assert_eq!(RecordKind::of(kind::TOMBSTONE, 5), RecordKind::Foreign);
    }
}
