//! The tier's superblock: page 0 of its device, which says whether the set pages after it
//! may be trusted. Little-endian, self-checking. Byte table (mirrored in docs/format.md,
//! "Small-object sets"):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `FTSB` |
//! | 4 | 2 | format version (3; 2 was written before the log was kept across a kill and is read with no log to replay; 1 before the log, read as 0 log pages) |
//! | 6 | 2 | state: 1 open (in use, or stopped uncleanly), 2 clean (closed after a full merge) |
//! | 8 | 4 | crc32c of the whole page with this field zeroed |
//! | 12 | 4 | sets (pages after this one) |
//! | 16 | 8 | generation of the set pages |
//! | 24 | 8 | the cache's last CAS value at the clean stop (0 while open) |
//! | 32 | 4 | pending delayed `flush_all` time, unix seconds (0 none) |
//! | 36 | 4 | set page bytes (4096) |
//! | 40 | 4 | dirty-map pages (after this one; the sets follow them) |
//! | 44 | 16 | boot id of the machine while open (`/proc/sys/kernel/random/boot_id`) |
//! | 60 | 8 | CAS ceiling: no CAS value above it was handed out (0 unknown; zero in builds before it) |
//! | 68 | 4 | log pages (after the sets; `klog`); 0 in version 1 |
//! | 72 | 8 | log tail: no log page below this sequence number holds an object not yet merged (0 in versions 1 and 2) |
//! | 80 | 8 | log head: every log page below this sequence number was written whole; none at or above it is replayed (0 in versions 1 and 2) |
//! | 88 | … | zero |
//!
//! Why a state and a boot id: the tier stages deletes and overwrites in RAM and marks their
//! set dirty in the dirty map (`dirty`) through the page cache first. A clean close merges
//! everything, syncs, and writes `clean`: every page is trusted. An `open` superblock of the
//! same boot was killed (`kill -9`): the page cache kept the dirty map, so every set not
//! dirty is trusted. An `open` superblock of another boot (a power cut, a kernel crash) may
//! have lost dirty marks with the page cache: nothing is trusted, a fresh generation starts.
//! Why a CAS ceiling: CAS values handed to versions that lived only in RAM die with a kill, so
//! the largest CAS on the kept pages may be below one a client still holds. The cache reserves
//! CAS values in blocks and writes the block's end here before handing out a value past the
//! old one (`SmallSets::reserve_cas`); an open continues above it.
//! Why a log tail and head: the open after a kill replays the log pages in `[tail, head)`
//! (`recover`, `logscan`). The head is written after an append's pages are written and before
//! the dirty marks of its sets are cleared; the tail after a merge of the log's oldest pages
//! wrote their sets and before their slots are reused. Pages at or above the head (an append
//! the kill cut short) are never replayed; their sets are still dirty.
//! Decoding reads untrusted bytes: no indexing, no unwrap.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use crate::format::SET_BYTES;
use crate::le::{le16, le32, le64, put};

/// `FTSB`, little-endian.
pub const MAGIC: u32 = u32::from_le_bytes(*b"FTSB");
/// The superblock format version written.
pub const VERSION: u16 = 3;
/// Byte offset of the crc field.
const CRC_AT: usize = 8;
/// Bytes of the fields (the rest of the page is zero).
const FIELDS: usize = 88;
/// Bytes of the fields of versions 1 and 2.
const FIELDS_V2: usize = 72;

/// Whether the set pages may be trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// In use since its last open: an open finding this starts a fresh generation.
    Open,
    /// Closed after merging everything staged and syncing the pages: adopt them.
    Clean,
}

/// The superblock's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Open or clean.
    pub state: State,
    /// Sets after this page (a file resized since reads as changed: fresh generation).
    pub sets: u32,
    /// The set pages' generation.
    pub generation: u64,
    /// The cache's last CAS value at the clean stop (new CAS values continue above it).
    pub last_cas: u64,
    /// A delayed `flush_all` pending (or passed but still judging stored times).
    pub flush_at: Option<u32>,
    /// Dirty-map pages.
    pub map_pages: u32,
    /// The machine's boot id while the tier was open (zeros: unknown).
    pub boot_id: [u8; 16],
    /// No CAS value above this was handed out while the superblock was written (0: none
    /// recorded). New CAS values continue above it after any stop.
    pub cas_ceiling: u64,
    /// Log pages after the sets (0: no log; a changed count reads as a resized file).
    pub log_pages: u32,
    /// No log page below this sequence number holds an unmerged object (0 in versions 1
    /// and 2).
    pub log_tail: u64,
    /// Every log page below this sequence number was written whole; pages at or above it
    /// are not replayed (0 in versions 1 and 2: nothing is replayed).
    pub log_head: u64,
}

/// What page 0 holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Found {
    /// All zero: a blank device (format it).
    Blank,
    /// A valid superblock.
    Ours(Superblock),
    /// A small tier's page we cannot trust (a damaged superblock, an unknown version, or a
    /// set page of the layout before superblocks): ours, start fresh.
    OursUnknown(&'static str),
    /// Someone else's data: refuse the device.
    Foreign,
}

/// Encode `sb` as a whole page.
pub fn encode(sb: &Superblock) -> [u8; SET_BYTES] {
    let mut p = [0u8; SET_BYTES];
    let state: u16 = match sb.state {
        State::Open => 1,
        State::Clean => 2,
    };
    put(&mut p, 0, &MAGIC.to_le_bytes());
    put(&mut p, 4, &VERSION.to_le_bytes());
    put(&mut p, 6, &state.to_le_bytes());
    put(&mut p, 12, &sb.sets.to_le_bytes());
    put(&mut p, 16, &sb.generation.to_le_bytes());
    put(&mut p, 24, &sb.last_cas.to_le_bytes());
    put(&mut p, 32, &sb.flush_at.unwrap_or(0).to_le_bytes());
    put(&mut p, 36, &(SET_BYTES as u32).to_le_bytes());
    put(&mut p, 40, &sb.map_pages.to_le_bytes());
    put(&mut p, 44, &sb.boot_id);
    put(&mut p, 60, &sb.cas_ceiling.to_le_bytes());
    put(&mut p, 68, &sb.log_pages.to_le_bytes());
    put(&mut p, 72, &sb.log_tail.to_le_bytes());
    put(&mut p, 80, &sb.log_head.to_le_bytes());
    seal(&mut p);
    p
}

/// Write the page's checksum: crc32c of the page with its checksum field zeroed.
fn seal(p: &mut [u8; SET_BYTES]) {
    put(p, CRC_AT, &[0; 4]);
    let crc = crc32c::crc32c(p);
    put(p, CRC_AT, &crc.to_le_bytes());
}

/// Decode page 0 of a device.
pub fn decode(page: &[u8]) -> Found {
    if page.iter().all(|&b| b == 0) {
        return Found::Blank;
    }
    let magic = le32(page, 0);
    if magic == Some(crate::format::MAGIC) {
        return Found::OursUnknown("a set page where the superblock belongs (older layout)");
    }
    if magic != Some(MAGIC) {
        return Found::Foreign;
    }
    if page.len() != SET_BYTES {
        return Found::OursUnknown("short superblock");
    }
    let mut copy = [0u8; SET_BYTES];
    copy.copy_from_slice(page);
    put(&mut copy, CRC_AT, &[0; 4]);
    if le32(page, CRC_AT) != Some(crc32c::crc32c(&copy)) {
        return Found::OursUnknown("superblock checksum mismatch");
    }
    let version = le16(page, 4);
    let fields = match version {
        Some(VERSION) => FIELDS,
        Some(1 | 2) => FIELDS_V2,
        _ => return Found::OursUnknown("unknown superblock version"),
    };
    if le32(page, 36) != Some(SET_BYTES as u32) || page.iter().skip(fields).any(|&b| b != 0) {
        return Found::OursUnknown("unknown superblock layout");
    }
    let state = match le16(page, 6) {
        Some(1) => State::Open,
        Some(2) => State::Clean,
        _ => return Found::OursUnknown("unknown superblock state"),
    };
    let (Some(sets), Some(generation), Some(last_cas), Some(flush_at), Some(map_pages)) = (
        le32(page, 12),
        le64(page, 16),
        le64(page, 24),
        le32(page, 32),
        le32(page, 40),
    ) else {
        return Found::OursUnknown("short superblock");
    };
    let Some(boot_id) = page.get(44..60).and_then(|b| <[u8; 16]>::try_from(b).ok()) else {
        return Found::OursUnknown("short superblock");
    };
    let (Some(cas_ceiling), Some(log_pages), Some(log_tail), Some(log_head)) = (
        le64(page, 60),
        le32(page, 68),
        le64(page, 72),
        le64(page, 80),
    ) else {
        return Found::OursUnknown("short superblock");
    };
    if log_tail > log_head || log_head - log_tail > u64::from(log_pages) {
        return Found::OursUnknown("log tail and head out of range");
    }
    if version == Some(1) && log_pages != 0 {
        return Found::OursUnknown("unknown superblock layout");
    }
    Found::Ours(Superblock {
        state,
        sets,
        generation,
        last_cas,
        flush_at: (flush_at != 0).then_some(flush_at),
        map_pages,
        boot_id,
        cas_ceiling,
        log_pages,
        log_tail,
        log_head,
    })
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn sb() -> impl Strategy<Value = Superblock> {
        (
            any::<bool>(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            proptest::option::of(1u32..),
            any::<u32>(),
            any::<[u8; 16]>(),
            (any::<u64>(), any::<u32>(), any::<u64>(), any::<u32>()),
        )
            .prop_map(
                |(
                    clean,
                    sets,
                    generation,
                    last_cas,
                    flush_at,
                    map_pages,
                    boot_id,
                    (cas_ceiling, log_pages, log_tail, used),
                )| {
                    let log_tail = log_tail >> 1;
                    Superblock {
                        state: if clean { State::Clean } else { State::Open },
                        sets,
                        generation,
                        last_cas,
                        flush_at,
                        map_pages,
                        boot_id,
                        cas_ceiling,
                        log_pages,
                        log_tail,
                        log_head: log_tail + u64::from(used.min(log_pages)),
                    }
                },
            )
    }

    #[test]
    fn blank_foreign_and_old_layout_pages_are_told_apart() {
        assert_eq!(decode(&[0; SET_BYTES]), Found::Blank);
        let mut foreign = [0u8; SET_BYTES];
        foreign[..8].copy_from_slice(b"\x7fELF\x02\x01\x01\0");
        assert_eq!(decode(&foreign), Found::Foreign);
        let mut set_page = vec![0u8; SET_BYTES];
        crate::format::encode(&mut set_page, 0, 3, 0, &[]).unwrap();
        assert!(matches!(decode(&set_page), Found::OursUnknown(_)));
    }

    #[test]
    fn byte_table_offsets() {
        let p = encode(&Superblock {
            state: State::Clean,
            sets: 0x0102_0304,
            generation: 0x1112_1314_1516_1718,
            last_cas: 0x2122_2324_2526_2728,
            flush_at: Some(0x3132_3334),
            map_pages: 0x4142_4344,
            boot_id: [0x55; 16],
            cas_ceiling: 0x6162_6364_6566_6768,
            log_pages: 0x7172_7374,
            log_tail: 0x0182_8384_8586_8788,
            log_head: 0x0182_8384_8586_8799,
        });
        assert_eq!(&p[0..4], b"FTSB");
        assert_eq!(&p[4..8], &[3, 0, 2, 0]);
        assert_eq!(&p[12..16], &[4, 3, 2, 1]);
        assert_eq!(p[16], 0x18);
        assert_eq!(p[24], 0x28);
        assert_eq!(&p[32..36], &[0x34, 0x33, 0x32, 0x31]);
        assert_eq!(&p[36..40], &4096u32.to_le_bytes());
        assert_eq!(&p[40..44], &[0x44, 0x43, 0x42, 0x41]);
        assert_eq!(&p[44..60], &[0x55; 16]);
        assert_eq!(p[60], 0x68);
        assert_eq!(p[67], 0x61);
        assert_eq!(&p[68..72], &[0x74, 0x73, 0x72, 0x71]);
        assert_eq!(p[72], 0x88);
        assert_eq!(p[80], 0x99);
        assert_eq!(p[87], 0x01);
        assert!(p[88..].iter().all(|&b| b == 0));
    }

    /// A version 1 superblock (before the log) reads as one with no log pages.
    #[test]
    fn version_one_reads_as_no_log() {
        let s = Superblock {
            state: State::Clean,
            sets: 9,
            generation: 5,
            last_cas: 7,
            flush_at: None,
            map_pages: 1,
            boot_id: [1; 16],
            cas_ceiling: 8,
            log_pages: 0,
            log_tail: 0,
            log_head: 0,
        };
        let mut p = encode(&s);
        p[4] = 1;
        seal(&mut p);
        assert_eq!(decode(&p), Found::Ours(s));
    }

    /// A version 2 superblock (log pages, but the log not kept across a kill) reads with an
    /// empty log record: its log pages are never replayed (its kill emptied their sets).
    #[test]
    fn version_two_reads_with_no_log_to_replay() {
        let s = Superblock {
            state: State::Open,
            sets: 9,
            generation: 5,
            last_cas: 0,
            flush_at: None,
            map_pages: 1,
            boot_id: [1; 16],
            cas_ceiling: 8,
            log_pages: 12,
            log_tail: 0,
            log_head: 0,
        };
        let mut p = encode(&s);
        p[4] = 2;
        seal(&mut p);
        assert_eq!(decode(&p), Found::Ours(s));
        // A version 2 page with bytes past its fields is not ours to guess at.
        p[80] = 1;
        seal(&mut p);
        assert!(matches!(decode(&p), Found::OursUnknown(_)));
    }

    proptest! {
        /// What is encoded decodes to the same fields.
        #[test]
        fn roundtrip(s in sb()) {
            prop_assert_eq!(decode(&encode(&s)), Found::Ours(s));
        }

        /// Any flipped byte is never read as a valid superblock (so never as clean): it is
        /// refused or read as ours-but-unknown, which starts a fresh generation.
        #[test]
        fn any_flipped_byte_is_not_trusted(s in sb(), at in 0..SET_BYTES, x in 1u8..) {
            let mut p = encode(&s);
            p[at] ^= x;
            prop_assert!(!matches!(decode(&p), Found::Ours(_) | Found::Blank));
        }

        /// Arbitrary bytes never panic the decoder.
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..SET_BYTES + 8)) {
            let _ = decode(&bytes);
        }
    }
}
