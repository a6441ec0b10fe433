//! The on-flash set page: one 4 KiB page per set, little-endian, self-checking. Byte table
//! (mirrored in docs/format.md, "Small-object sets"):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `FTSS` |
//! | 4 | 2 | format version (2; version 1 pages, written before the log was kept across a kill, have no field at 32 and a 32-byte header: read as watermark 0, their log pages never replayed) |
//! | 6 | 2 | entry count (≤ [`MAX_ENTRIES`]) |
//! | 8 | 4 | set index (a page written to the wrong set is refused); a log page's sequence number |
//! | 12 | 4 | crc32c of the whole page with this field zeroed |
//! | 16 | 8 | generation: the tier's run and `flush_all` epoch; another one reads as empty |
//! | 24 | 4 | bytes of entries after the header |
//! | 28 | 4 | kind: 0 a set page, 1 a log page (`klog`); zero in builds before the log |
//! | 32 | 8 | log sequence: a set page's *watermark* (every log object of this set with a lower sequence number is merged into this page, or was dropped or lost by it); a log page's own full sequence number |
//! | 40 | … | entries, packed, no padding |
//!
//! An entry is a 24-byte header — key length `u8`, RRIP value `u8` (0 near … 3 distant),
//! value length `u16`, flags `u32`, exptime `u32`, stored time `u32`, CAS `u64` — then the
//! key and the value. A key appears at most once per page (a merge replaces it), so a page
//! never holds two versions of a key; the newer version of a key, or its delete, lives in the
//! staging buffer and shadows the page until the next merge rewrites it.
//!
//! A log page (the on-flash log in front of the sets, `klog`) is the same page with kind 1,
//! its sequence number in place of the set index (a slot rewritten since reads as stale,
//! not corrupt), entries of any sets in append order, and the RRIP byte saying what an
//! entry is: [`LOG_PUT`] or [`LOG_DELETE`] (a tombstone: no value, meta zero). A page of
//! one kind never decodes as the other.
//!
//! Why a watermark: the log is kept across a kill (`recover`), and its pages stay on flash
//! until the ring comes round again, long after their objects were merged. Replaying a
//! merged object over a page that moved on since (the key evicted, then deleted with no
//! tombstone because nothing could shadow it) would bring the key back; the watermark, written
//! in the same page write as the merge, says which log objects the page already holds.
//!
//! Set *i*'s page is page 1 + *m* + *i* of the device ([`Layout`]), the *l* log pages follow
//! the sets; page 0 is the
//! superblock (`superblock`), pages 1..=*m* the dirty map (`dirty`). A page of another generation reads as empty whatever else it holds (its
//! set index is not checked), so pages of an older layout or run are dead, not corrupt.
//!
//! Why a generation and not a per-entry sequence: an open that cannot trust the pages (no
//! clean stop, `recover`) and `flush_all` both empty the tier at once; both move the
//! generation on, so an old page (and every key on it) is dead without being rewritten.
//! Decoding reads untrusted bytes: no indexing, no unwrap.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use crate::le::{le16, le32, le64, put};
use bytes::Bytes;

/// Bytes of one set page.
pub const SET_BYTES: usize = 4096;
/// Bytes of the page header.
pub const HEADER_BYTES: usize = 40;
/// Bytes of a version 1 page's header (no log sequence).
const V1_HEADER_BYTES: usize = 32;
/// Bytes of an entry's header.
pub const ENTRY_HEADER: usize = 24;
/// Entries a page holds at most (one hit bit each in RAM: a `u32` per set).
pub const MAX_ENTRIES: usize = 32;
/// Bytes of entries a page holds.
pub const CAPACITY: usize = SET_BYTES - HEADER_BYTES;
/// `FTSS`, little-endian.
pub const MAGIC: u32 = u32::from_le_bytes(*b"FTSS");
/// The format version written.
pub const FORMAT_VERSION: u16 = 2;
/// Byte offset of the log sequence (watermark or sequence number).
const SEQ_AT: usize = 32;
/// The largest RRIP value (distant re-reference).
pub const RRIP_MAX: u8 = 3;
/// Byte offset of the crc field.
const CRC_AT: usize = 12;
/// Byte offset of the kind field.
const KIND_AT: usize = 28;
/// Kind of a set page.
pub const KIND_SET: u32 = 0;
/// Kind of a log page.
pub const KIND_LOG: u32 = 1;
/// A log entry that is a new version.
pub const LOG_PUT: u8 = 0;
/// A log entry that is a delete (tombstone).
pub const LOG_DELETE: u8 = 1;

/// Set pages one dirty-map page covers (one byte a set, `dirty`).
pub const SETS_PER_MAP_PAGE: u64 = SET_BYTES as u64;

/// Where things are on a device of `pages` 4 KiB pages: page 0 the superblock, then the
/// dirty map (one byte a set), then the set pages, then the log pages (`klog`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Set pages.
    pub sets: u32,
    /// Dirty-map pages (from page 1).
    pub map_pages: u32,
    /// Log pages (after the sets; 0: no on-flash log).
    pub log_pages: u32,
}

/// Fewest log pages a log may have (below this the log is off).
pub const MIN_LOG_PAGES: u64 = 4;
/// Most log pages a log may have (a 128 GiB log): the RAM index's 4-byte links address
/// fewer than 2^30 entry slots (`logindex`); a larger fraction of a huge file is cut to it.
pub const MAX_LOG_PAGES: u64 = (1 << 30) / MAX_ENTRIES as u64 - 1;

impl Layout {
    /// The layout of a device of `pages` pages with no log (`None`: too small for one set,
    /// or more than 2^32 sets).
    pub fn of(pages: u64) -> Option<Self> {
        Self::with_log(pages, 0.0)
    }

    /// The layout of a device of `pages` pages whose log takes `log_fraction` of the pages
    /// after the superblock (rounded down; fewer than [`MIN_LOG_PAGES`] means no log).
    pub fn with_log(pages: u64, log_fraction: f64) -> Option<Self> {
        let rest = pages.checked_sub(1)?;
        let mut log = ((rest as f64 * log_fraction.clamp(0.0, 0.9)) as u64).min(MAX_LOG_PAGES);
        if log < MIN_LOG_PAGES {
            log = 0;
        }
        let rest = rest - log;
        let map_pages = rest.div_ceil(SETS_PER_MAP_PAGE + 1);
        let sets = u32::try_from(rest - map_pages).ok()?;
        (sets > 0).then_some(Self {
            sets,
            map_pages: u32::try_from(map_pages).ok()?,
            log_pages: u32::try_from(log).ok()?,
        })
    }

    /// Byte offset of the dirty map.
    pub fn map_off(&self) -> u64 {
        SET_BYTES as u64
    }

    /// Byte offset of set `set`'s page.
    pub fn page_off(&self, set: u32) -> u64 {
        (1 + u64::from(self.map_pages) + u64::from(set)) * SET_BYTES as u64
    }

    /// Byte offset of log slot `slot` (`slot < log_pages`).
    pub fn log_off(&self, slot: u32) -> u64 {
        (1 + u64::from(self.map_pages) + u64::from(self.sets) + u64::from(slot)) * SET_BYTES as u64
    }
}

/// What the cache keeps with a small item besides key and value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ItemMeta {
    /// The client's flags.
    pub flags: u32,
    /// Unix expiry time, 0 = never.
    pub exptime: u32,
    /// Unix time it was stored (judged against `flush_all`).
    pub stored: u32,
    /// Its CAS value.
    pub cas: u64,
}

/// One entry of a page, decoded (key and value are slices of the page's buffer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The key.
    pub key: Bytes,
    /// The value.
    pub value: Bytes,
    /// Flags, expiry, stored time, CAS.
    pub meta: ItemMeta,
    /// RRIP value: 0 (re-referenced soon) … [`RRIP_MAX`] (evicted first).
    pub rrip: u8,
}

/// Bytes an entry takes on a page.
pub fn entry_len(key_len: usize, value_len: usize) -> usize {
    ENTRY_HEADER + key_len + value_len
}

/// True when an item with these lengths can live in a set page at all.
pub fn fits(key_len: usize, value_len: usize) -> bool {
    key_len <= u8::MAX as usize
        && value_len <= u16::MAX as usize
        && entry_len(key_len, value_len) <= CAPACITY
}

/// What a page read back holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Page {
    /// Never written in this generation (all zero, or another generation's page): empty.
    Empty,
    /// A page of this set and generation.
    Valid(Vec<Entry>),
    /// Damaged (checksum, magic, version, set index, lengths): read as empty, counted.
    Corrupt(&'static str),
}

/// Encode `entries` as set `set`'s page of generation `generation` into `page`
/// ([`SET_BYTES`] long), with log watermark `mark` (every log object of the set below it is
/// on this page or gone; 0 without a log). Fails (writing nothing useful) if they do not fit.
pub fn encode(
    page: &mut [u8],
    set: u32,
    generation: u64,
    mark: u64,
    entries: &[Entry],
) -> Result<(), &'static str> {
    encode_kind(page, KIND_SET, set, mark, generation, entries)
}

/// Encode `entries` (RRIP byte [`LOG_PUT`] or [`LOG_DELETE`]) as the log page of sequence
/// number `seq` of generation `generation`.
pub fn encode_log(
    page: &mut [u8],
    seq: u64,
    generation: u64,
    entries: &[Entry],
) -> Result<(), &'static str> {
    encode_kind(page, KIND_LOG, seq as u32, seq, generation, entries)
}

fn encode_kind(
    page: &mut [u8],
    kind: u32,
    set: u32,
    seq: u64,
    generation: u64,
    entries: &[Entry],
) -> Result<(), &'static str> {
    if page.len() != SET_BYTES {
        return Err("page buffer is not SET_BYTES long");
    }
    if entries.len() > MAX_ENTRIES {
        return Err("too many entries for one page");
    }
    page.fill(0);
    let mut at = HEADER_BYTES;
    for e in entries {
        if !fits(e.key.len(), e.value.len()) {
            return Err("entry too large");
        }
        let end = at + entry_len(e.key.len(), e.value.len());
        let dst = page.get_mut(at..end).ok_or("entries exceed the page")?;
        let (head, body) = dst.split_at_mut(ENTRY_HEADER);
        put(head, 0, &[e.key.len() as u8, e.rrip.min(RRIP_MAX)]);
        put(head, 2, &(e.value.len() as u16).to_le_bytes());
        put(head, 4, &e.meta.flags.to_le_bytes());
        put(head, 8, &e.meta.exptime.to_le_bytes());
        put(head, 12, &e.meta.stored.to_le_bytes());
        put(head, 16, &e.meta.cas.to_le_bytes());
        let (k, v) = body.split_at_mut(e.key.len());
        k.copy_from_slice(&e.key);
        v.copy_from_slice(&e.value);
        at = end;
    }
    put(page, 0, &MAGIC.to_le_bytes());
    put(page, 4, &FORMAT_VERSION.to_le_bytes());
    put(page, 6, &(entries.len() as u16).to_le_bytes());
    put(page, 8, &set.to_le_bytes());
    put(page, 16, &generation.to_le_bytes());
    put(page, 24, &((at - HEADER_BYTES) as u32).to_le_bytes());
    put(page, KIND_AT, &kind.to_le_bytes());
    put(page, SEQ_AT, &seq.to_le_bytes());
    let crc = crc32c::crc32c(page);
    put(page, CRC_AT, &crc.to_le_bytes());
    Ok(())
}

/// Decode a page read from set `set`'s slot, for generation `generation`.
pub fn decode(page: &Bytes, set: u32, generation: u64) -> Page {
    decode_kind(page, KIND_SET, set, generation)
}

/// The log watermark of a set page that decoded as [`Page::Valid`] (0 for a version 1 page,
/// which was written before the log was kept across a kill).
pub fn mark_of(page: &Bytes) -> u64 {
    match le16(page, 4) {
        Some(FORMAT_VERSION) => le64(page, SEQ_AT).unwrap_or(0),
        _ => 0,
    }
}

/// Decode a log page read for sequence number `seq`, generation `generation`: a page of
/// another sequence number (the slot was rewritten since, or holds an earlier lap's page) or
/// generation, or a version 1 log page (never replayed), reads as [`Page::Empty`].
pub fn decode_log(page: &Bytes, seq: u64, generation: u64) -> Page {
    match decode_kind(page, KIND_LOG, seq as u32, generation) {
        Page::Valid(es) if le64(page, SEQ_AT) == Some(seq) => Page::Valid(es),
        Page::Valid(_) => Page::Empty,
        other => other,
    }
}

/// The full sequence number and generation a log page says it has, when its checksum holds
/// and it is a log page of this format (the open-time scan, `logscan`); `None` otherwise.
pub fn log_header(page: &Bytes) -> Option<(u64, u64)> {
    if page.len() != SET_BYTES
        || le32(page, 0) != Some(MAGIC)
        || le16(page, 4) != Some(FORMAT_VERSION)
        || le32(page, KIND_AT) != Some(KIND_LOG)
    {
        return None;
    }
    let mut copy = [0u8; SET_BYTES];
    copy.copy_from_slice(page);
    put(&mut copy, CRC_AT, &[0; 4]);
    if le32(page, CRC_AT) != Some(crc32c::crc32c(&copy)) {
        return None;
    }
    Some((le64(page, SEQ_AT)?, le64(page, 16)?))
}

fn decode_kind(page: &Bytes, kind: u32, set: u32, generation: u64) -> Page {
    let (count, used, header) = match check_kind(page, kind, set, generation) {
        Checked::Entries {
            count,
            used,
            header,
        } => (count, used, header),
        Checked::Empty => return Page::Empty,
        Checked::Corrupt(why) => return Page::Corrupt(why),
    };
    let mut out = Vec::with_capacity(count);
    let mut at = header;
    for _ in 0..count {
        match entry_at(page, at) {
            Some((e, next)) => {
                out.push(e);
                at = next;
            }
            None => return Page::Corrupt("entry runs past the page"),
        }
    }
    if at != header + used {
        return Page::Corrupt("entry bytes disagree with the header");
    }
    Page::Valid(out)
}

/// What a set page read back says of one key ([`find`]).
#[derive(Debug, PartialEq, Eq)]
pub enum InPage {
    /// The page is valid and holds the key: its slot (for the hit bit) and its entry.
    Hit(usize, Entry),
    /// The page is valid (or empty) and does not hold the key.
    Missing,
    /// Damaged, as [`Page::Corrupt`]: read as empty, counted.
    Corrupt(&'static str),
}

/// Look `key` up in a page read from set `set`'s slot for generation `generation`: the same
/// checks as [`decode`] (checksum, header, every entry's bounds and the entry bytes the
/// header counts), but only the matching entry is built — a GET needs one entry of the up
/// to [`MAX_ENTRIES`] a page holds, so it allocates no list and takes no reference to the
/// page for the others. `find(p, s, g, k)` answers as `decode(p, s, g)` followed by a search
/// for `k` (the unit tests check this on random pages).
pub fn find(page: &Bytes, set: u32, generation: u64, key: &[u8]) -> InPage {
    let (count, used, header) = match check_kind(page, KIND_SET, set, generation) {
        Checked::Entries {
            count,
            used,
            header,
        } => (count, used, header),
        Checked::Empty => return InPage::Missing,
        Checked::Corrupt(why) => return InPage::Corrupt(why),
    };
    let mut hit = None;
    let mut at = header;
    for slot in 0..count {
        let Some((key_len, value_len)) = entry_lens(page, at) else {
            return InPage::Corrupt("entry runs past the page");
        };
        let k = at + ENTRY_HEADER;
        // A key appears at most once a page: the first match is the only one.
        if hit.is_none() && key_len == key.len() && page.get(k..k + key_len) == Some(key) {
            hit = Some((slot, at));
        }
        at = k + key_len + value_len;
    }
    if at != header + used {
        return InPage::Corrupt("entry bytes disagree with the header");
    }
    match hit.and_then(|(slot, at)| Some((slot, entry_at(page, at)?.0))) {
        Some((slot, e)) => InPage::Hit(slot, e),
        None => InPage::Missing,
    }
}

/// What the header and checksum of a page say (before its entries are walked).
enum Checked {
    /// Valid for this kind, set (or sequence) and generation: entry count, entry bytes and
    /// where the entries start (the header of the page's format version).
    Entries {
        count: usize,
        used: usize,
        header: usize,
    },
    Empty,
    Corrupt(&'static str),
}

fn check_kind(page: &[u8], kind: u32, set: u32, generation: u64) -> Checked {
    if page.len() != SET_BYTES {
        return Checked::Corrupt("short page");
    }
    if le32(page, 0) != Some(MAGIC) {
        // A never-written page is all zero (its first bytes are, so this scan is only paid
        // by pages without the magic).
        if page.iter().all(|&b| b == 0) {
            return Checked::Empty;
        }
        return Checked::Corrupt("bad magic");
    }
    // The checksum covers the page with its own field zeroed: fed in three parts, no copy.
    let (Some(head), Some(tail)) = (page.get(..CRC_AT), page.get(CRC_AT + 4..)) else {
        return Checked::Corrupt("short page");
    };
    let crc = crc32c::crc32c_append(crc32c::crc32c_append(crc32c::crc32c(head), &[0; 4]), tail);
    if le32(page, CRC_AT) != Some(crc) {
        return Checked::Corrupt("checksum mismatch");
    }
    let (header, capacity) = match le16(page, 4) {
        Some(FORMAT_VERSION) => (HEADER_BYTES, CAPACITY),
        // Written before the log was kept: no log sequence. Its log pages are never
        // replayed (their sets were emptied by the kill that left them).
        Some(1) if kind == KIND_LOG => return Checked::Empty,
        Some(1) => (V1_HEADER_BYTES, SET_BYTES - V1_HEADER_BYTES),
        _ => return Checked::Corrupt("unknown format version"),
    };
    if le64(page, 16) != Some(generation) {
        return Checked::Empty;
    }
    if le32(page, KIND_AT) != Some(kind) {
        return Checked::Corrupt("page of another kind (set or log)");
    }
    if le32(page, 8) != Some(set) {
        if kind == KIND_LOG {
            return Checked::Empty;
        }
        return Checked::Corrupt("page of another set");
    }
    let count = le16(page, 6).unwrap_or(0) as usize;
    let used = le32(page, 24).unwrap_or(0) as usize;
    if count > MAX_ENTRIES || used > capacity {
        return Checked::Corrupt("count or length out of range");
    }
    Checked::Entries {
        count,
        used,
        header,
    }
}

/// Key and value lengths of the entry at byte `at`, `None` when it runs past the page or its
/// RRIP byte is out of range (the checks [`entry_at`] makes).
fn entry_lens(page: &[u8], at: usize) -> Option<(usize, usize)> {
    let key_len = *page.get(at)? as usize;
    let rrip = *page.get(at + 1)?;
    let value_len = le16(page, at + 2)? as usize;
    let end = at + ENTRY_HEADER + key_len + value_len;
    (end <= page.len() && rrip <= RRIP_MAX).then_some((key_len, value_len))
}

/// The entry at byte `at` and the offset after it.
fn entry_at(page: &Bytes, at: usize) -> Option<(Entry, usize)> {
    let key_len = *page.get(at)? as usize;
    let rrip = *page.get(at + 1)?;
    let value_len = le16(page, at + 2)? as usize;
    let meta = ItemMeta {
        flags: le32(page, at + 4)?,
        exptime: le32(page, at + 8)?,
        stored: le32(page, at + 12)?,
        cas: le64(page, at + 16)?,
    };
    let k = at + ENTRY_HEADER;
    let v = k + key_len;
    let end = v + value_len;
    if end > page.len() || rrip > RRIP_MAX {
        return None;
    }
    let e = Entry {
        key: page.slice(k..v),
        value: page.slice(v..end),
        meta,
        rrip,
    };
    Some((e, end))
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn entry(key: &[u8], value: &[u8], cas: u64, rrip: u8) -> Entry {
        Entry {
            key: Bytes::copy_from_slice(key),
            value: Bytes::copy_from_slice(value),
            meta: ItemMeta {
                flags: 7,
                exptime: 0,
                stored: 100,
                cas,
            },
            rrip,
        }
    }

    fn page_of(set: u32, gen: u64, es: &[Entry]) -> Bytes {
        let mut p = vec![0u8; SET_BYTES];
        encode(&mut p, set, gen, 0, es).unwrap();
        Bytes::from(p)
    }

    #[test]
    fn layouts_fit_their_device() {
        assert_eq!(Layout::of(1), None);
        assert_eq!(Layout::of(2), None);
        assert_eq!(Layout::of(3).unwrap().sets, 1);
        for pages in [3u64, 100, 4097, 4098, 4099, 8195, 8196, 1 << 18, 1 << 20] {
            let l = Layout::of(pages).unwrap();
            let need = u64::from(l.sets).div_ceil(SETS_PER_MAP_PAGE);
            assert!(u64::from(l.map_pages) >= need, "{pages}: {l:?}");
            assert_eq!(1 + u64::from(l.map_pages) + u64::from(l.sets), pages);
            assert_eq!(
                l.page_off(l.sets - 1) + SET_BYTES as u64,
                pages * SET_BYTES as u64
            );
        }
    }

    #[test]
    fn zero_page_is_empty_and_other_generations_are_empty() {
        assert_eq!(decode(&Bytes::from(vec![0; SET_BYTES]), 3, 9), Page::Empty);
        let p = page_of(3, 8, &[entry(b"k", b"v", 1, 2)]);
        assert_eq!(decode(&p, 3, 9), Page::Empty);
        assert!(matches!(decode(&p, 4, 8), Page::Corrupt(_)));
    }

    #[test]
    fn too_many_or_too_large_entries_are_refused() {
        let mut p = vec![0u8; SET_BYTES];
        let many: Vec<_> = (0..=MAX_ENTRIES)
            .map(|i| entry(&[i as u8], b"", 1, 0))
            .collect();
        assert!(encode(&mut p, 0, 1, 0, &many).is_err());
        let big = entry(b"k", &vec![1; CAPACITY], 1, 0);
        assert!(encode(&mut p, 0, 1, 0, &[big]).is_err());
        let two = [entry(b"a", &[0; 2000], 1, 0), entry(b"b", &[0; 2100], 1, 0)];
        assert!(encode(&mut p, 0, 1, 0, &two).is_err());
    }

    /// A version 1 page (32-byte header, no log sequence), as builds before the log was
    /// kept across a kill wrote it: a set page reads with watermark 0, a log page as empty.
    fn v1_page(kind: u32, set: u32, gen: u64, es: &[Entry]) -> Bytes {
        let mut p = vec![0u8; SET_BYTES];
        let mut at = 32;
        for e in es {
            p[at] = e.key.len() as u8;
            p[at + 1] = e.rrip;
            p[at + 2..at + 4].copy_from_slice(&(e.value.len() as u16).to_le_bytes());
            p[at + 4..at + 8].copy_from_slice(&e.meta.flags.to_le_bytes());
            p[at + 8..at + 12].copy_from_slice(&e.meta.exptime.to_le_bytes());
            p[at + 12..at + 16].copy_from_slice(&e.meta.stored.to_le_bytes());
            p[at + 16..at + 24].copy_from_slice(&e.meta.cas.to_le_bytes());
            p[at + 24..at + 24 + e.key.len()].copy_from_slice(&e.key);
            let v = at + 24 + e.key.len();
            p[v..v + e.value.len()].copy_from_slice(&e.value);
            at = v + e.value.len();
        }
        p[0..4].copy_from_slice(b"FTSS");
        p[4..6].copy_from_slice(&1u16.to_le_bytes());
        p[6..8].copy_from_slice(&(es.len() as u16).to_le_bytes());
        p[8..12].copy_from_slice(&set.to_le_bytes());
        p[16..24].copy_from_slice(&gen.to_le_bytes());
        p[24..28].copy_from_slice(&((at - 32) as u32).to_le_bytes());
        p[28..32].copy_from_slice(&kind.to_le_bytes());
        let crc = crc32c::crc32c(&p);
        p[12..16].copy_from_slice(&crc.to_le_bytes());
        Bytes::from(p)
    }

    #[test]
    fn version_one_pages_are_read_not_misread() {
        let es = [entry(b"k", b"v", 1, 2), entry(b"key2", &[7; 300], 9, 3)];
        let set = v1_page(KIND_SET, 4, 8, &es);
        assert_eq!(decode(&set, 4, 8), Page::Valid(es.to_vec()));
        assert_eq!(mark_of(&set), 0, "no watermark: every log object is newer");
        let log = v1_page(KIND_LOG, 3, 8, &es);
        assert_eq!(decode_log(&log, 3, 8), Page::Empty, "never replayed");
        assert_eq!(log_header(&log), None);
    }

    /// A log page carries its full sequence number: a page of an earlier lap whose low 32
    /// bits agree reads as empty, not as this lap's; a set page carries its watermark.
    #[test]
    fn log_sequence_and_watermark() {
        let es = [
            entry(b"k", b"v", 1, LOG_PUT),
            entry(b"d", b"", 0, LOG_DELETE),
        ];
        let mut p = vec![0u8; SET_BYTES];
        let seq = (5u64 << 32) | 17;
        encode_log(&mut p, seq, 9, &es).unwrap();
        let p = Bytes::from(p);
        assert_eq!(decode_log(&p, seq, 9), Page::Valid(es.to_vec()));
        assert_eq!(
            decode_log(&p, 17, 9),
            Page::Empty,
            "an earlier lap's number"
        );
        assert_eq!(decode_log(&p, seq, 11), Page::Empty, "another generation");
        assert_eq!(log_header(&p), Some((seq, 9)));
        assert!(
            matches!(decode(&p, 17, 9), Page::Corrupt(_)),
            "never a set page"
        );
        let mut s = vec![0u8; SET_BYTES];
        encode(&mut s, 3, 9, 1234, &es[..1]).unwrap();
        let s = Bytes::from(s);
        assert_eq!(mark_of(&s), 1234);
        assert_eq!(&s[32..40], &1234u64.to_le_bytes());
        assert_eq!(log_header(&s), None);
        let mut torn = p.to_vec();
        torn[36..].fill(0x77);
        assert_eq!(
            log_header(&Bytes::from(torn)),
            None,
            "a torn page is refused"
        );
    }

    fn entries() -> impl Strategy<Value = Vec<Entry>> {
        let one = (
            proptest::collection::vec(any::<u8>(), 1..40),
            proptest::collection::vec(any::<u8>(), 0..300),
            any::<u64>(),
            0..=RRIP_MAX,
            any::<u32>(),
        )
            .prop_map(|(k, v, cas, rrip, flags)| {
                let mut e = entry(&k, &v, cas, rrip);
                e.meta.flags = flags;
                e
            });
        proptest::collection::vec(one, 0..MAX_ENTRIES).prop_map(|mut es| {
            let mut used = 0;
            es.retain(|e| {
                used += entry_len(e.key.len(), e.value.len());
                used <= CAPACITY
            });
            es
        })
    }

    proptest! {
        /// What is encoded decodes to the same entries, in order.
        #[test]
        fn roundtrip(es in entries(), set in any::<u32>(), gen in 1u64..) {
            let p = page_of(set, gen, &es);
            prop_assert_eq!(decode(&p, set, gen), Page::Valid(es));
        }

        /// Any single flipped byte is caught (checksum), never decoded as other entries.
        #[test]
        fn any_flipped_byte_is_corrupt(es in entries(), at in 0..SET_BYTES, x in 1u8..) {
            let mut p = page_of(5, 6, &es).to_vec();
            p[at] ^= x;
            let got = decode(&Bytes::from(p), 5, 6);
            prop_assert!(matches!(got, Page::Corrupt(_)), "{:?}", got);
        }

        /// Arbitrary bytes never panic the decoder.
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), SET_BYTES)) {
            let b = Bytes::from(bytes);
            let _ = decode(&b, 0, 1);
            let _ = find(&b, 0, 1, b"k");
        }

        /// `find` answers as a full decode then a search would, for every key of the page,
        /// a key it lacks, another generation and another set.
        #[test]
        fn find_agrees_with_decode(es in entries(), other in proptest::collection::vec(any::<u8>(), 1..40)) {
            let p = page_of(9, 4, &es);
            for k in es.iter().map(|e| e.key.to_vec()).chain([other]) {
                prop_assert_eq!(find(&p, 9, 4, &k), by_decode(&p, 9, 4, &k));
                prop_assert_eq!(find(&p, 9, 5, &k), InPage::Missing);
                prop_assert!(matches!(find(&p, 8, 4, &k), InPage::Corrupt(_)));
            }
        }

        /// A flipped byte makes `find` report the page corrupt, never a hit.
        #[test]
        fn find_sees_any_flipped_byte(es in entries(), at in 0..SET_BYTES, x in 1u8..) {
            prop_assume!(!es.is_empty());
            let mut p = page_of(5, 6, &es).to_vec();
            p[at] ^= x;
            let got = find(&Bytes::from(p), 5, 6, &es[0].key);
            prop_assert!(matches!(got, InPage::Corrupt(_)), "{:?}", got);
        }

        /// A header whose count or length disagrees with its entries (checksum recomputed,
        /// so only the walk can tell) is corrupt for `find` exactly when it is for `decode`.
        #[test]
        fn find_walks_every_entry(es in entries(), at in prop::sample::select(vec![6usize, 7, 24, 25]), x in 1u8..) {
            prop_assume!(!es.is_empty());
            let mut p = page_of(5, 6, &es).to_vec();
            p[at] ^= x;
            p[CRC_AT..CRC_AT + 4].fill(0);
            let crc = crc32c::crc32c(&p);
            p[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
            let p = Bytes::from(p);
            for e in &es {
                prop_assert_eq!(find(&p, 5, 6, &e.key), by_decode(&p, 5, 6, &e.key));
            }
        }
    }

    /// What `find` must answer, from `decode` and a search of its entries.
    fn by_decode(p: &Bytes, set: u32, gen: u64, key: &[u8]) -> InPage {
        match decode(p, set, gen) {
            Page::Valid(es) => match es.into_iter().enumerate().find(|(_, e)| e.key == key) {
                Some((slot, e)) => InPage::Hit(slot, e),
                None => InPage::Missing,
            },
            Page::Empty => InPage::Missing,
            Page::Corrupt(why) => InPage::Corrupt(why),
        }
    }
}
