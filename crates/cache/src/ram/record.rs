//! The RAM record: how one item is laid out in an arena segment.
//!
//! Records are whole 8-byte words appended back to back in a segment (walked by adding each
//! record's length): CAS, exptime/flags, vlen/stored time, last access/klen/flags, the flash
//! *home* word, then key and value, each zero-padded to a word. Word table: docs/format.md,
//! "RAM layouts".
//!
//! Words 3 and 4 are the only parts of a record that change after it is published (a GET
//! sets `fetched` and `last_access`; reclaim moves the home); it is changed only under the owning index shard's lock.
//! Everything is accessed through `AtomicU64` with relaxed ordering, so even a logic error in
//! the reuse rules of `arena` could only produce a wrong value, never undefined behaviour;
//! cross-thread visibility comes from the index shard mutex (writers publish under it, readers
//! read under it) and from the segment's `pending` counter (see `arena`).
//!
//! A *filler* record (flag `FILLER`, empty key) covers space that was reserved but not used,
//! so the walk over a segment stays aligned.
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use bytes::Bytes;

/// Header words before the key.
pub const HDR_WORDS: usize = 5;
/// Bit 63 of the home word: a flash home is present.
pub const HOME_VALID: u64 = 1 << 63;
/// Bit 62 of a home word without a home: this version waits for write-back (its dirty-since
/// time, unix milliseconds, is in bits 0–47).
pub const HOME_DIRTY: u64 = 1 << 62;
/// Bit 61 of a home word without a home: an older version of the key may still be on flash
/// (a delete must append a tombstone).
pub const HOME_OLDER: u64 = 1 << 61;
/// Bit 60 of a home word without a home: the small-object tier holds a copy of this version
/// (its write-back inserted it; `small_tier::writeback`). A write that replaces or removes
/// the version removes that copy first, as for a key with no RAM slot.
pub const HOME_BELOW: u64 = 1 << 60;
/// Bit 59 of a home word without a home: this small version waits for the small tier's
/// write-back (dirty since bits 0–47, unix ms), as `HOME_DIRTY` does for the flash log.
pub const HOME_SWAIT: u64 = 1 << 59;
const SINCE_MASK: u64 = (1 << 48) - 1;

/// The home word of a small version waiting for the small tier's write-back since `since_ms`.
pub fn small_wait_word(since_ms: u64) -> u64 {
    HOME_SWAIT | (since_ms & SINCE_MASK)
}

/// The home word of a version not yet on flash, dirty since `since_ms`.
pub fn dirty_word(since_ms: u64, older: bool) -> u64 {
    HOME_DIRTY | (since_ms & SINCE_MASK) | if older { HOME_OLDER } else { 0 }
}
/// Longest key a record can hold (a large record's header and key must fit in its first
/// chunk, and the smallest chunk is 64 KiB). memcached's limit is 250.
pub const MAX_KEY: usize = 4096;

pub const F_STALE: u8 = 1;
pub const F_WIN: u8 = 2;
pub const F_FETCHED: u8 = 4;
pub const F_FILLER: u8 = 8;
/// A copy promoted from flash that has not been read in RAM yet (`flash_tier::payback`).
pub const F_PROMOTED: u8 = 16;

/// Words needed for `n` bytes.
pub fn words(n: usize) -> usize {
    n.div_ceil(8)
}

/// Total words of a record with this key and value length.
pub fn rec_words(klen: usize, vlen: usize) -> usize {
    HDR_WORDS + words(klen) + words(vlen)
}

/// A decoded header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub cas: u64,
    pub exptime: u32,
    pub flags: u32,
    pub vlen: u32,
    pub stored: u32,
    pub last_access: u32,
    pub klen: u16,
    pub rflags: u8,
    /// Flash home word: `HOME_VALID | Location::pack()`, or 0.
    pub home: u64,
}

impl Header {
    /// Total words of this record.
    pub fn words(&self) -> usize {
        rec_words(usize::from(self.klen), self.vlen as usize)
    }

    /// The packed flash location of this record's home, if any.
    pub fn home_loc(&self) -> Option<u64> {
        (self.home & HOME_VALID != 0).then_some(self.home & !HOME_VALID)
    }

    /// When this version became dirty (unix ms), if it waits for write-back.
    pub fn dirty_since(&self) -> Option<u64> {
        (self.home & (HOME_VALID | HOME_DIRTY) == HOME_DIRTY).then_some(self.home & SINCE_MASK)
    }

    /// When this small version started waiting for the small tier's write-back (unix ms).
    pub fn small_since(&self) -> Option<u64> {
        (self.home & (HOME_VALID | HOME_SWAIT) == HOME_SWAIT).then_some(self.home & SINCE_MASK)
    }

    /// True if the small-object tier holds a copy of this version.
    pub fn small_below(&self) -> bool {
        self.home & (HOME_VALID | HOME_BELOW) == HOME_BELOW
    }

    /// True if some version of the key may be on flash (a home, or an older version).
    pub fn flash_behind(&self) -> bool {
        self.home & (HOME_VALID | HOME_OLDER) != 0
    }

    fn word3(&self) -> u64 {
        u64::from(self.last_access) | (u64::from(self.klen) << 32) | (u64::from(self.rflags) << 48)
    }
}

/// Read the header at word `off`.
pub fn header(mem: &[AtomicU64], off: usize) -> Header {
    let w0 = mem[off].load(Relaxed);
    let w1 = mem[off + 1].load(Relaxed);
    let w2 = mem[off + 2].load(Relaxed);
    let w3 = mem[off + 3].load(Relaxed);
    let home = mem[off + 4].load(Relaxed);
    Header {
        home,
        cas: w0,
        exptime: w1 as u32,
        flags: (w1 >> 32) as u32,
        vlen: w2 as u32,
        stored: (w2 >> 32) as u32,
        last_access: w3 as u32,
        klen: (w3 >> 32) as u16,
        rflags: (w3 >> 48) as u8,
    }
}

fn write_bytes(mem: &[AtomicU64], off: usize, bytes: &[u8]) {
    let mut chunks = bytes.chunks_exact(8);
    let mut i = off;
    for c in &mut chunks {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        mem[i].store(u64::from_le_bytes(b), Relaxed);
        i += 1;
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut b = [0u8; 8];
        b[..rest.len()].copy_from_slice(rest);
        mem[i].store(u64::from_le_bytes(b), Relaxed);
    }
}

fn read_bytes(mem: &[AtomicU64], off: usize, len: usize, out: &mut Vec<u8>) {
    let full = len / 8;
    for w in &mem[off..off + full] {
        out.extend_from_slice(&w.load(Relaxed).to_le_bytes());
    }
    let rest = len % 8;
    if rest != 0 {
        out.extend_from_slice(&mem[off + full].load(Relaxed).to_le_bytes()[..rest]);
    }
}

/// Write a whole record at `off`. The caller owns `[off, off + rec_words)` exclusively.
pub fn write(mem: &[AtomicU64], off: usize, h: &Header, key: &[u8], value: &[u8]) {
    mem[off].store(h.cas, Relaxed);
    mem[off + 1].store(u64::from(h.exptime) | (u64::from(h.flags) << 32), Relaxed);
    mem[off + 2].store(u64::from(h.vlen) | (u64::from(h.stored) << 32), Relaxed);
    mem[off + 3].store(h.word3(), Relaxed);
    mem[off + 4].store(h.home, Relaxed);
    write_bytes(mem, off + HDR_WORDS, key);
    write_bytes(mem, off + HDR_WORDS + words(key.len()), value);
}

/// Turn `[off, off + n)` (n ≥ [`HDR_WORDS`]) into a filler record.
pub fn write_filler(mem: &[AtomicU64], off: usize, n: usize) {
    debug_assert!(n >= HDR_WORDS);
    let h = Header {
        cas: 0,
        exptime: 0,
        flags: 0,
        vlen: ((n - HDR_WORDS) * 8) as u32,
        stored: 0,
        last_access: 0,
        klen: 0,
        rflags: F_FILLER,
        home: 0,
    };
    mem[off].store(0, Relaxed);
    mem[off + 1].store(0, Relaxed);
    mem[off + 2].store(u64::from(h.vlen), Relaxed);
    mem[off + 3].store(h.word3(), Relaxed);
    mem[off + 4].store(0, Relaxed);
}

/// Set the home word of a published record. Caller holds the owning shard lock.
pub fn set_home(mem: &[AtomicU64], off: usize, home: u64) {
    mem[off + 4].store(home, Relaxed);
}

/// Record an access: set `fetched` and `last_access`. Caller holds the owning shard lock.
/// Returns true when this is the first read of a copy promoted from flash (the flag is
/// cleared).
pub fn mark_fetched(mem: &[AtomicU64], off: usize, now: u32) -> bool {
    let mut h = header(mem, off);
    let promoted = h.rflags & F_PROMOTED != 0;
    h.rflags = (h.rflags | F_FETCHED) & !F_PROMOTED;
    h.last_access = now;
    mem[off + 3].store(h.word3(), Relaxed);
    promoted
}

/// True when the record at `off` holds exactly `key` (a filler never matches).
pub fn key_eq(mem: &[AtomicU64], off: usize, h: &Header, key: &[u8]) -> bool {
    if usize::from(h.klen) != key.len() || h.rflags & F_FILLER != 0 {
        return false;
    }
    let base = off + HDR_WORDS;
    let mut chunks = key.chunks_exact(8);
    let mut i = base;
    for c in &mut chunks {
        if mem[i].load(Relaxed).to_le_bytes() != c {
            return false;
        }
        i += 1;
    }
    let rest = chunks.remainder();
    rest.is_empty() || &mem[i].load(Relaxed).to_le_bytes()[..rest.len()] == rest
}

/// Copy the key out.
pub fn read_key(mem: &[AtomicU64], off: usize, h: &Header, out: &mut Vec<u8>) {
    out.clear();
    read_bytes(mem, off + HDR_WORDS, usize::from(h.klen), out);
}

/// Word index where the value of the record at word `off` starts (after header and key).
fn value_start(off: usize, h: &Header) -> usize {
    off + HDR_WORDS + words(usize::from(h.klen))
}

/// Word `w` of a record spanning `chunks` of `cw` words each (see [`write_chunked`]); a
/// record cut short (not written that way) reads as zeros past the last chunk.
fn chunk_word(chunks: &[&[AtomicU64]], cw: usize, w: usize) -> u64 {
    chunks
        .get(w / cw)
        .and_then(|c| c.get(w % cw))
        .map_or(0, |word| word.load(Relaxed))
}

/// Copy the value out (the only allocation on the GET path): into a zeroed buffer of the
/// value's length, one load and one 8-byte store per word ([`ValueWords::copy_to`]). Pushing
/// each word's bytes onto a `Vec` instead (no zeroing, but a capacity check and a length
/// update per word) took ~13 instructions a word — 6.7k of a 4 KiB RAM GET's 15k; the
/// memset of the zeroed buffer is a few hundred (docs/serving.md, "The value copy, counted").
pub fn read_value(mem: &[AtomicU64], off: usize, h: &Header) -> Bytes {
    let mut v = vec![0; h.vlen as usize];
    ValueWords::flat(mem, off, h).copy_to(&mut v);
    Bytes::from(v)
}

/// A published record's value where it lies in the arena, to be copied once into its place
/// elsewhere (the flash write chunk: `flash_tier::kv_record::PutValue`) instead of into a
/// buffer of its own first. Read only under the rules of [`read_value`] (the shard lock of a
/// slot pointing at the record); copying it takes no lock.
pub enum ValueWords<'a> {
    /// The value's words in a normal segment.
    Flat { words: &'a [AtomicU64], len: usize },
    /// A large segment's chunks; the value starts at word `base` of the first.
    Chunked {
        chunks: Vec<&'a [AtomicU64]>,
        base: usize,
        len: usize,
    },
}

impl std::fmt::Debug for ValueWords<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValueWords")
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

impl<'a> ValueWords<'a> {
    /// The value of the record at word `off` of `mem` (a normal segment).
    pub fn flat(mem: &'a [AtomicU64], off: usize, h: &Header) -> Self {
        let len = h.vlen as usize;
        let base = value_start(off, h);
        let words = mem.get(base..base + words(len)).unwrap_or(&[]);
        ValueWords::Flat { words, len }
    }

    /// The value of the record starting at word `off` of the first of `chunks` (a large
    /// segment's, in order).
    pub fn chunked(chunks: Vec<&'a [AtomicU64]>, off: usize, h: &Header) -> Self {
        ValueWords::Chunked {
            chunks,
            base: value_start(off, h),
            len: h.vlen as usize,
        }
    }

    /// Value bytes.
    pub fn len(&self) -> usize {
        match self {
            ValueWords::Flat { len, .. } | ValueWords::Chunked { len, .. } => *len,
        }
    }

    /// Copy the value into `dst` (`len` bytes; every byte of `dst` is written, a record cut
    /// short reading as zeros as in [`read_value_chunked`]).
    pub fn copy_to(&self, dst: &mut [u8]) {
        match self {
            ValueWords::Flat { words, .. } => copy_flat(words, dst),
            ValueWords::Chunked { chunks, base, .. } => copy_chunked(chunks, *base, dst),
        }
    }
}

/// [`copy_words`] from one slice, as a plain indexed loop (a load and a store per word).
fn copy_flat(words: &[AtomicU64], dst: &mut [u8]) {
    let n = dst.len() / 8;
    let (whole, rest) = dst.split_at_mut(n * 8);
    for (d, w) in whole.chunks_exact_mut(8).zip(words) {
        d.copy_from_slice(&w.load(Relaxed).to_le_bytes());
    }
    if let Some(short) = whole.get_mut(words.len() * 8..) {
        short.fill(0);
    }
    if !rest.is_empty() {
        let last = words.get(n).map_or(0, |w| w.load(Relaxed)).to_le_bytes();
        rest.copy_from_slice(&last[..rest.len()]);
    }
}

/// [`copy_words`] from a record spanning `chunks` (equal-sized), from word `base` on.
fn copy_chunked(chunks: &[&[AtomicU64]], base: usize, dst: &mut [u8]) {
    let cw = chunks.first().map_or(0, |c| c.len()).max(1);
    copy_words((base..).map(|w| chunk_word(chunks, cw, w)), dst);
}

/// Write little-endian `words` over `dst`, the last one cut to fit; zeros if they run out.
fn copy_words(mut words: impl Iterator<Item = u64>, dst: &mut [u8]) {
    let mut whole = dst.chunks_exact_mut(8);
    for d in &mut whole {
        d.copy_from_slice(&words.next().unwrap_or(0).to_le_bytes());
    }
    let rest = whole.into_remainder();
    if !rest.is_empty() {
        let last = words.next().unwrap_or(0).to_le_bytes();
        rest.copy_from_slice(&last[..rest.len()]);
    }
}

/// Write a record that spans `chunks` (equal-sized; the record starts at word 0 of the first,
/// and its header and key fit in it). False if the chunks are too small.
pub fn write_chunked(chunks: &[&[AtomicU64]], h: &Header, key: &[u8], value: &[u8]) -> bool {
    let Some(first) = chunks.first() else {
        return false;
    };
    let cw = first.len();
    let base = HDR_WORDS + words(key.len());
    if base > cw || chunks.len() * cw < base + words(value.len()) {
        return false;
    }
    write(first, 0, h, key, &[]);
    for (w, c) in (base..).zip(value.chunks(8)) {
        let mut b = [0u8; 8];
        b[..c.len()].copy_from_slice(c);
        chunks[w / cw][w % cw].store(u64::from_le_bytes(b), Relaxed);
    }
    true
}

/// Copy out the value of a record spanning `chunks` (see [`write_chunked`]).
pub fn read_value_chunked(chunks: &[&[AtomicU64]], off: usize, h: &Header) -> Bytes {
    if chunks.is_empty() {
        return Bytes::new();
    }
    let mut v = vec![0; h.vlen as usize];
    copy_chunked(chunks, value_start(off, h), &mut v);
    Bytes::from(v)
}

/// Copy a whole record (`n` words) between segments.
pub fn copy(src: &[AtomicU64], src_off: usize, dst: &[AtomicU64], dst_off: usize, n: usize) {
    for (d, s) in dst[dst_off..dst_off + n]
        .iter()
        .zip(&src[src_off..src_off + n])
    {
        d.store(s.load(Relaxed), Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem(n: usize) -> Vec<AtomicU64> {
        (0..n).map(|_| AtomicU64::new(0)).collect()
    }

    #[test]
    fn values_of_every_length_read_back_exactly() {
        let m = mem(700);
        for vlen in [0usize, 1, 7, 8, 9, 4095, 4096, 4097] {
            let value: Vec<u8> = (0..vlen).map(|i| (i * 7 + 1) as u8).collect();
            let h = Header {
                cas: 1,
                exptime: 0,
                flags: 0,
                vlen: vlen as u32,
                stored: 0,
                last_access: 0,
                klen: 3,
                rflags: 0,
                home: 0,
            };
            // Padding of the last word left dirty: it must not leak into the value.
            for w in &m {
                w.store(u64::MAX, Relaxed);
            }
            write(&m, 1, &h, b"key", &value);
            let got = read_value(&m, 1, &header(&m, 1));
            assert_eq!(&got[..], &value[..], "vlen {vlen}");
            assert_eq!(got.len(), vlen);
        }
    }

    #[test]
    fn roundtrip() {
        let m = mem(64);
        let h = Header {
            cas: 9,
            exptime: 100,
            flags: 0xdead_beef,
            vlen: 13,
            stored: 50,
            last_access: 51,
            klen: 5,
            rflags: F_STALE,
            home: 0,
        };
        write(&m, 3, &h, b"hello", b"0123456789abc");
        let r = header(&m, 3);
        assert_eq!(r, h);
        assert_eq!(r.words(), 5 + 1 + 2);
        assert!(key_eq(&m, 3, &r, b"hello"));
        assert!(!key_eq(&m, 3, &r, b"hellp"));
        assert!(!key_eq(&m, 3, &r, b"hell"));
        assert_eq!(&read_value(&m, 3, &r)[..], b"0123456789abc");
        let mut k = Vec::new();
        read_key(&m, 3, &r, &mut k);
        assert_eq!(k, b"hello");
        mark_fetched(&m, 3, 77);
        let r2 = header(&m, 3);
        assert_eq!(r2.last_access, 77);
        assert_eq!(r2.rflags, F_STALE | F_FETCHED);
        write_filler(&m, 20, 9);
        assert_eq!(header(&m, 20).words(), 9);
        // A record spread over three 8-word chunks.
        let (a, b, c) = (mem(8), mem(8), mem(8));
        let chunks: Vec<&[AtomicU64]> = vec![&a, &b, &c];
        let value: Vec<u8> = (0..200u8).collect();
        let h2 = Header {
            vlen: 200,
            klen: 3,
            ..h
        };
        assert!(!write_chunked(&chunks, &h2, b"abc", &value));
        let value: Vec<u8> = (0..150u8).collect();
        let h3 = Header {
            vlen: 150,
            klen: 3,
            ..h
        };
        let (d, e, f, g) = (mem(8), mem(8), mem(8), mem(8));
        let chunks: Vec<&[AtomicU64]> = vec![&a, &b, &c, &d, &e, &f, &g];
        assert!(write_chunked(&chunks, &h3, b"abc", &value));
        assert!(key_eq(&a, 0, &header(&a, 0), b"abc"));
        assert_eq!(&read_value_chunked(&chunks, 0, &h3)[..], &value[..]);
    }
}
