//! The RAM arena: fixed-size segments, allocated lazily up to the memory limit, that items are
//! appended to as records (see `record`).
//!
//! # Why
//! A log-structured arena bounds memory exactly (the limit is a number of segment bytes, there
//! is no per-item `malloc` and no fragmentation inside the allocator), makes eviction a
//! sequential walk over one segment, and is the shape the flash tier writes: an old RAM
//! segment's survivors are a ready-made flash write buffer.
//!
//! # Structure
//! - Memory comes in fixed-size *chunks* of `segment_size` bytes, allocated lazily up to
//!   `memory_limit / segment_size` and then recycled forever: the arena never returns memory to
//!   the allocator, so there is no allocator churn or fragmentation and RSS for items is
//!   exactly the chunks allocated. Chunk `i` lives in segment slot `i`.
//! - The limit can change at run time ([`Arena::set_limit`], memcached's `cache_memlimit`).
//!   Slots live in pages of [`SLOT_PAGE`] created on first use, so the slot table costs memory
//!   only for chunks that exist, up to [`MAX_LIMIT`] (or the start limit, if larger). Raising
//!   the limit lets the arena take more chunks. Lowering it stops taking new ones, and every
//!   chunk freed by eviction while more chunks are held than the limit allows is *parked*:
//!   withheld from use until the limit rises again (its memory stays allocated, see rule 3).
//! - A *normal segment* is one chunk holding records back to back. A *large segment* holds one
//!   record bigger than half a chunk, spread over as many chunks as it needs (the header and
//!   key in the first one); its id is its first chunk's, the other chunks are listed in `more`.
//!   A location is `id << seg_shift | word offset`.
//! - Two write heads, one per log (`Small`, `Main`). Writers bump a head under its mutex, write
//!   their record outside any lock, then publish it in the index under the shard lock. When a
//!   head is full it is *sealed* (its `end` fixed) and pushed on its log's FIFO queue.
//! - `AllocState` (one mutex) owns the queues, the free chunks and the budget. Only its holder
//!   allocates, recycles, evicts or compacts segments.
//!
//! # Invariants (what keeps readers safe)
//! 1. Record memory is read only (a) under the index shard lock of a slot pointing at it, or
//!    (b) by the `AllocState` holder on a sealed segment whose `pending` writers reached zero.
//! 2. A segment is recycled only by the `AllocState` holder, after every index slot pointing
//!    into it has been removed or moved, each under its shard lock. So no reader under (a)
//!    can see it reused.
//! 3. All record words are `AtomicU64` accessed relaxed, and chunk memory is never freed; even
//!    a broken rule 2 could only produce a wrong value (which the key check would most likely
//!    reject), never undefined behaviour. Ordering comes from the shard mutex (publish → read)
//!    and from `pending` (release on finish → acquire by the evictor).
//!
//! # Lock order
//! `AllocState` → index shard → head; index shard → head; never a head while holding anything
//! else to acquire, never `AllocState` while holding a shard or head.
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::ram::record::{self, Header, ValueWords};

/// Segment slots per page of the slot table.
pub const SLOT_PAGE: usize = 1024;
/// The largest memory limit an arena can be raised to at run time, unless it started larger.
/// Default: `1 TiB` (the slot table's page directory for it costs at most 400 KiB).
pub const MAX_LIMIT: usize = 1 << 40;

/// Which log a segment belongs to (S3-FIFO's two FIFOs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Log {
    /// New items (S3-FIFO "S").
    Small = 0,
    /// Promoted, reinserted and ghost-hit items (S3-FIFO "M").
    Main = 1,
}

/// A published RAM record and its header (see [`Arena::record`]).
pub struct RecordRef<'a> {
    arena: &'a Arena,
    pub seg: u32,
    pub off: usize,
    mem: &'a [AtomicU64],
    pub header: Header,
}

impl<'a> RecordRef<'a> {
    /// The value where it lies, to copy it once into its place elsewhere (a large segment's
    /// chunk list is gathered here, under no lock but its own, not in the copy).
    pub fn value_words(&self) -> ValueWords<'a> {
        if self.arena.slot(self.seg).is_large() {
            ValueWords::chunked(self.arena.chunks(self.seg), self.off, &self.header)
        } else {
            ValueWords::flat(self.mem, self.off, &self.header)
        }
    }
}

impl RecordRef<'_> {
    /// True when the record holds exactly `key`.
    pub fn key_eq(&self, key: &[u8]) -> bool {
        record::key_eq(self.mem, self.off, &self.header, key)
    }

    /// Copy the key into `out`.
    pub fn read_key(&self, out: &mut Vec<u8>) {
        record::read_key(self.mem, self.off, &self.header, out);
    }

    /// Copy the value out.
    pub fn value(&self) -> Bytes {
        self.arena.read_value(self.seg, self.off, &self.header)
    }

    /// Set the flash home word.
    pub fn set_home(&self, home: u64) {
        record::set_home(self.mem, self.off, home);
    }

    /// Record an access (`fetched`, `last_access`); true on the first read of a copy
    /// promoted from flash.
    pub fn mark_fetched(&self, now: u32) -> bool {
        record::mark_fetched(self.mem, self.off, now)
    }
}

/// Per-segment bookkeeping.
#[derive(Debug)]
pub struct SegSlot {
    /// This slot's chunk; allocated once, never freed.
    mem: OnceLock<Box<[AtomicU64]>>,
    /// For a large segment, its further chunks in record order. Changed under `AllocState`
    /// while no slot points at the segment.
    more: Mutex<Vec<u32>>,
    /// Words of records in the segment; final once sealed.
    pub end: AtomicU32,
    /// Words of records the index points at (published and not yet replaced or removed).
    pub live: AtomicU64,
    /// Writers that reserved space here and have not yet finished publishing.
    pub pending: AtomicU32,
    /// Smallest non-zero exptime published here (`u32::MAX` if none); a hint for the sweeper.
    pub min_exp: AtomicU32,
    /// Largest exptime published here, `u32::MAX` if some item never expires.
    pub max_exp: AtomicU32,
    /// Latest stored time of a record published here (for `flush_all`).
    pub max_stored: AtomicU32,
    /// Words of memory the segment holds (chunks × chunk words).
    pub words: AtomicU32,
    /// 1 for a large single-record segment.
    pub large: AtomicU32,
    /// 0 when on no queue, else 1 + the `Log` it is queued on. Changed under `AllocState`.
    queued: AtomicU32,
}

impl SegSlot {
    fn new() -> Self {
        Self {
            mem: OnceLock::new(),
            more: Mutex::new(Vec::new()),
            end: AtomicU32::new(0),
            live: AtomicU64::new(0),
            pending: AtomicU32::new(0),
            min_exp: AtomicU32::new(u32::MAX),
            max_exp: AtomicU32::new(0),
            max_stored: AtomicU32::new(0),
            words: AtomicU32::new(0),
            large: AtomicU32::new(0),
            queued: AtomicU32::new(0),
        }
    }

    fn reset(&self) {
        self.end.store(0, Ordering::Relaxed);
        self.live.store(0, Ordering::Relaxed);
        self.min_exp.store(u32::MAX, Ordering::Relaxed);
        self.max_exp.store(0, Ordering::Relaxed);
        self.max_stored.store(0, Ordering::Relaxed);
    }

    /// Note a record published here.
    pub fn note_publish(&self, words: usize, exptime: u32, stored: u32) {
        self.live.fetch_add(words as u64, Ordering::Relaxed);
        if exptime == 0 {
            self.max_exp.store(u32::MAX, Ordering::Relaxed);
        } else {
            self.max_exp.fetch_max(exptime, Ordering::Relaxed);
            self.min_exp.fetch_min(exptime, Ordering::Relaxed);
        }
        self.max_stored.fetch_max(stored, Ordering::Relaxed);
    }

    /// True for a large single-record segment.
    pub fn is_large(&self) -> bool {
        self.large.load(Ordering::Relaxed) != 0
    }
}

/// Space reserved for one record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Space {
    pub seg: u32,
    pub off: usize,
    pub words: usize,
    /// The space is a whole large segment, not yet on any queue.
    pub large: bool,
    /// The log the space belongs to.
    pub log: Log,
}

#[derive(Debug, Default)]
struct Head {
    seg: Option<u32>,
    off: usize,
}

/// Queues, free lists and budget; see the module docs. Guarded by `Arena::state`.
#[derive(Debug)]
pub struct AllocState {
    /// Allocated chunks not in use, within the limit.
    free: Vec<u32>,
    /// Allocated chunks not in use and withheld because the limit was lowered below what was
    /// held; reused (before allocating new ones) once the limit allows.
    parked: Vec<u32>,
    /// Chunks allocated so far (ids `0..allocated`).
    allocated: usize,
    /// Chunks the memory limit allows; see [`Arena::set_limit`].
    max_chunks: usize,
    pub queues: [VecDeque<u32>; 2],
    pub queue_bytes: [u64; 2],
}

/// The arena. See the module docs.
#[derive(Debug)]
pub struct Arena {
    pub seg_words: usize,
    seg_shift: u32,
    /// Chunks the memory limit allows (mirror of `AllocState::max_chunks` for lock-free reads).
    max_chunks: AtomicU64,
    /// Pages of [`SLOT_PAGE`] slots, created when their first chunk is allocated (under
    /// `AllocState`) and never removed. Slot `i` is `pages[i / SLOT_PAGE][i % SLOT_PAGE]`.
    pages: Box<[OnceLock<Box<[SegSlot]>>]>,
    pub state: Mutex<AllocState>,
    heads: [Mutex<Head>; 2],
    mem_used: AtomicU64,
}

impl Arena {
    /// An arena of `limit` bytes in chunks of `seg_size` bytes (validated by the config).
    /// One slot more than the limit allows exists for a single item larger than the limit.
    pub fn new(limit: usize, seg_size: usize) -> Self {
        let max_chunks = limit / seg_size;
        let capacity = limit.max(MAX_LIMIT) / seg_size + 1;
        let pages: Vec<OnceLock<Box<[SegSlot]>>> = (0..capacity.div_ceil(SLOT_PAGE))
            .map(|_| OnceLock::new())
            .collect();
        Self {
            seg_words: seg_size / 8,
            seg_shift: (seg_size / 8).trailing_zeros(),
            max_chunks: AtomicU64::new(max_chunks as u64),
            pages: pages.into_boxed_slice(),
            state: Mutex::new(AllocState {
                free: Vec::new(),
                parked: Vec::new(),
                allocated: 0,
                max_chunks,
                queues: [VecDeque::new(), VecDeque::new()],
                queue_bytes: [0, 0],
            }),
            heads: [Mutex::new(Head::default()), Mutex::new(Head::default())],
            mem_used: AtomicU64::new(0),
        }
    }

    /// Records above this many words go to a large segment of their own.
    pub fn large_threshold(&self) -> usize {
        self.seg_words / 2
    }

    /// The memory limit in bytes (whole chunks).
    pub fn limit(&self) -> u64 {
        self.max_chunks.load(Ordering::Relaxed) * (self.seg_words * 8) as u64
    }

    /// The largest limit [`Arena::set_limit`] accepts, in bytes.
    pub fn max_limit(&self) -> u64 {
        ((self.capacity() - 1) * self.seg_words * 8) as u64
    }

    /// Slots the table can hold.
    fn capacity(&self) -> usize {
        self.pages.len() * SLOT_PAGE
    }

    /// Change the memory limit to `bytes` (rounded down to whole chunks). Raising it lets the
    /// arena take more chunks; lowering it parks free chunks beyond the new limit at once and
    /// every chunk freed later while the arena holds more than the limit (eviction does that
    /// as writers need space). `false` (and no change) above [`Arena::max_limit`] or below
    /// two chunks.
    pub fn set_limit(&self, bytes: u64) -> bool {
        let chunks = bytes / (self.seg_words * 8) as u64;
        if bytes > self.max_limit() || chunks < 2 {
            return false;
        }
        let mut alloc = self.state.lock();
        alloc.max_chunks = chunks as usize;
        self.max_chunks.store(chunks, Ordering::Relaxed);
        while Self::surplus(&alloc) > 0 {
            let Some(id) = alloc.free.pop() else { break };
            alloc.parked.push(id);
        }
        self.note_held(&alloc);
        true
    }

    /// Chunks held (in use or free) beyond the limit.
    fn surplus(alloc: &AllocState) -> usize {
        (alloc.allocated - alloc.parked.len()).saturating_sub(alloc.max_chunks)
    }

    /// Return an unused chunk: to the free list, or parked while there is a surplus.
    fn give_back(&self, alloc: &mut AllocState, id: u32) {
        if Self::surplus(alloc) > 0 {
            alloc.parked.push(id);
            self.note_held(alloc);
        } else {
            alloc.free.push(id);
        }
    }

    /// Publish the bytes of chunks held against the limit.
    fn note_held(&self, alloc: &AllocState) {
        self.mem_used.store(
            (Self::held(alloc) * self.seg_words * 8) as u64,
            Ordering::Relaxed,
        );
    }

    /// A chunk from outside the budget: a parked one, else a newly allocated one. The
    /// caller checked that the limit has room for it.
    fn fresh(&self, alloc: &mut AllocState) -> Option<u32> {
        if let Some(id) = alloc.parked.pop() {
            self.note_held(alloc);
            return Some(id);
        }
        (alloc.allocated < self.capacity()).then(|| self.allocate(alloc))
    }

    /// Chunks counted against the limit (allocated and not parked).
    fn held(alloc: &AllocState) -> usize {
        alloc.allocated - alloc.parked.len()
    }

    /// Bytes of chunk memory held against the limit (allocated and not parked; parked
    /// chunks keep their memory, see the module docs).
    pub fn mem_used(&self) -> u64 {
        self.mem_used.load(Ordering::Relaxed)
    }

    /// Location of word `off` of segment `seg`.
    pub fn loc(&self, seg: u32, off: usize) -> u64 {
        (u64::from(seg) << self.seg_shift) | off as u64
    }

    /// Segment and word offset of a location.
    pub fn split(&self, loc: u64) -> (u32, usize) {
        (
            (loc >> self.seg_shift) as u32,
            (loc & ((1 << self.seg_shift) - 1)) as usize,
        )
    }

    /// The bookkeeping of segment `seg`, if its page exists.
    fn try_slot(&self, seg: u32) -> Option<&SegSlot> {
        let i = seg as usize;
        self.pages.get(i / SLOT_PAGE)?.get()?.get(i % SLOT_PAGE)
    }

    /// The bookkeeping of segment `seg`, an allocated chunk (a caller bug otherwise).
    pub fn slot(&self, seg: u32) -> &SegSlot {
        match self.try_slot(seg) {
            Some(s) => s,
            None => panic!("segment {seg} was never allocated"),
        }
    }

    /// The (first) chunk of segment `seg`; `None` if never allocated (never the case for a
    /// location the index holds). Headers and keys always lie in the first chunk.
    pub fn mem(&self, seg: u32) -> Option<&[AtomicU64]> {
        self.try_slot(seg)?.mem.get().map(|b| &b[..])
    }

    fn chunks(&self, seg: u32) -> Vec<&[AtomicU64]> {
        let mut v: Vec<&[AtomicU64]> = self.mem(seg).into_iter().collect();
        for &c in self.slot(seg).more.lock().iter() {
            v.extend(self.mem(c));
        }
        v
    }

    /// The published record at index location `loc`, its header read: the one way the
    /// store reads a RAM record. `None` only for a segment never allocated. Caller holds the
    /// shard lock of a slot pointing at `loc` (invariant 1).
    pub fn record(&self, loc: u64) -> Option<RecordRef<'_>> {
        let (seg, off) = self.split(loc);
        self.record_at(seg, off)
    }

    /// The record at word `off` of `seg`, for a walk over a sealed, quiet segment by the
    /// `AllocState` holder (invariant 1b).
    pub fn record_at(&self, seg: u32, off: usize) -> Option<RecordRef<'_>> {
        let mem = self.mem(seg)?;
        Some(RecordRef {
            arena: self,
            seg,
            off,
            mem,
            header: record::header(mem, off),
        })
    }

    /// Copy out the value of the record at `off` of `seg` (which may span chunks).
    pub fn read_value(&self, seg: u32, off: usize, h: &Header) -> Bytes {
        if self.slot(seg).is_large() {
            record::read_value_chunked(&self.chunks(seg), off, h)
        } else {
            self.mem(seg)
                .map(|m| record::read_value(m, off, h))
                .unwrap_or_default()
        }
    }

    /// Write a whole record into reserved `space`.
    pub fn write_record(&self, space: &Space, h: &Header, key: &[u8], value: &[u8]) -> bool {
        if space.large {
            let chunks = self.chunks(space.seg);
            record::write_chunked(&chunks, h, key, value)
        } else if let Some(m) = self.mem(space.seg) {
            record::write(m, space.off, h, key, value);
            true
        } else {
            false
        }
    }

    /// Reserve `words` in `log`'s head without blocking on anything but the head mutex.
    /// `None` when there is no head or it is too full.
    pub fn try_bump(&self, log: Log, words: usize) -> Option<Space> {
        let mut h = self.heads[log as usize].lock();
        let seg = h.seg?;
        if h.off + words > self.seg_words {
            return None;
        }
        let off = h.off;
        h.off += words;
        self.slot(seg).pending.fetch_add(1, Ordering::Relaxed);
        Some(Space {
            seg,
            off,
            words,
            large: false,
            log,
        })
    }

    /// Finish a reservation: the record is published (or turned into a filler).
    pub fn finish(&self, space: Space) {
        self.slot(space.seg).pending.fetch_sub(1, Ordering::Release);
    }

    /// Wait until nobody is still writing into `seg`. Called by the `AllocState` holder on a
    /// sealed segment it took off a queue; writers never wait for `AllocState` while pending.
    pub fn wait_quiet(&self, seg: u32) {
        let p = &self.slot(seg).pending;
        while p.load(Ordering::Acquire) != 0 {
            std::thread::yield_now();
        }
    }

    /// The head segment of `log` and its fill, if any.
    pub fn head(&self, log: Log) -> Option<(u32, usize)> {
        let h = self.heads[log as usize].lock();
        h.seg.map(|s| (s, h.off))
    }

    /// Seal `log`'s head if it is still `seen` (or any head when `seen` is `None`) and push
    /// it on its queue. Returns whether a head was sealed.
    pub fn seal_head(&self, alloc: &mut AllocState, log: Log, seen: Option<u32>) -> bool {
        let mut h = self.heads[log as usize].lock();
        let Some(seg) = h.seg else { return false };
        if seen.is_some_and(|s| s != seg) {
            return false;
        }
        h.seg = None;
        let end = std::mem::take(&mut h.off);
        drop(h);
        let slot = self.slot(seg);
        slot.end.store(end as u32, Ordering::Relaxed);
        if end == 0 {
            self.give_back(alloc, seg);
        } else {
            self.push_queue(alloc, log, seg);
        }
        true
    }

    fn push_queue(&self, alloc: &mut AllocState, log: Log, seg: u32) {
        alloc.queues[log as usize].push_back(seg);
        alloc.queue_bytes[log as usize] += self.seg_bytes(seg);
        self.slot(seg)
            .queued
            .store(log as u32 + 1, Ordering::Relaxed);
    }

    /// Put `seg`, just taken off `log`'s queue by [`Self::pop_queue`], back at its front.
    pub fn requeue_front(&self, alloc: &mut AllocState, log: Log, seg: u32) {
        alloc.queues[log as usize].push_front(seg);
        alloc.queue_bytes[log as usize] += self.seg_bytes(seg);
        self.slot(seg)
            .queued
            .store(log as u32 + 1, Ordering::Relaxed);
    }

    /// Take the oldest segment off `log`'s queue.
    pub fn pop_queue(&self, alloc: &mut AllocState, log: Log) -> Option<u32> {
        let seg = alloc.queues[log as usize].pop_front()?;
        alloc.queue_bytes[log as usize] -= self.seg_bytes(seg);
        self.slot(seg).queued.store(0, Ordering::Relaxed);
        Some(seg)
    }

    /// The log `seg` is queued on, if any.
    pub fn queued_on(&self, seg: u32) -> Option<Log> {
        match self.slot(seg).queued.load(Ordering::Relaxed) {
            1 => Some(Log::Small),
            2 => Some(Log::Main),
            _ => None,
        }
    }

    /// Take `seg` off the middle of its queue (O(queue length)); false if it is not queued.
    pub fn unqueue(&self, alloc: &mut AllocState, seg: u32) -> bool {
        let Some(log) = self.queued_on(seg) else {
            return false;
        };
        let q = &mut alloc.queues[log as usize];
        let Some(pos) = q.iter().position(|&s| s == seg) else {
            return false;
        };
        q.remove(pos);
        alloc.queue_bytes[log as usize] -= self.seg_bytes(seg);
        self.slot(seg).queued.store(0, Ordering::Relaxed);
        true
    }

    /// Make `seg` (an empty normal segment) the head of `log`; the head must be empty.
    /// Returns `seg` back when another thread already installed a head.
    pub fn install_head(&self, log: Log, seg: u32) -> Result<(), u32> {
        let mut h = self.heads[log as usize].lock();
        if h.seg.is_some() {
            return Err(seg);
        }
        h.seg = Some(seg);
        h.off = 0;
        Ok(())
    }

    /// Take an empty chunk as a normal segment: from the free list if it has more than
    /// `reserve` entries, else a new chunk if the limit has room for it plus `reserve` more.
    pub fn take_normal(&self, alloc: &mut AllocState, reserve: usize) -> Option<u32> {
        if alloc.free.len() > reserve {
            let id = alloc.free.pop()?;
            self.prepare(id, 1, false);
            return Some(id);
        }
        if Self::held(alloc) + 1 + reserve <= alloc.max_chunks {
            let id = self.fresh(alloc)?;
            self.prepare(id, 1, false);
            return Some(id);
        }
        None
    }

    /// Give an empty normal segment back for reuse (or park it, see the module docs).
    pub fn release_normal(&self, alloc: &mut AllocState, seg: u32) {
        self.slot(seg).reset();
        self.give_back(alloc, seg);
    }

    /// Chunks a large record of `words` needs.
    pub fn chunks_for(&self, words: usize) -> usize {
        words.div_ceil(self.seg_words)
    }

    /// Chunks that can be had without evicting; `spare` counts the one chunk beyond the limit
    /// that only an item larger than the whole limit may use.
    pub fn available(&self, alloc: &AllocState, spare: bool) -> usize {
        let room = (alloc.max_chunks + usize::from(spare)).saturating_sub(Self::held(alloc));
        alloc.free.len() + room.min(alloc.parked.len() + (self.capacity() - alloc.allocated))
    }

    /// Chunks the limit allows.
    pub fn max_chunks(&self) -> usize {
        self.max_chunks.load(Ordering::Relaxed) as usize
    }

    /// Take a large segment of `words` for one record; the caller checked `available`.
    /// `None` if the chunks are not there after all.
    pub fn take_large(&self, alloc: &mut AllocState, words: usize, log: Log) -> Option<Space> {
        let k = self.chunks_for(words);
        let spare = k > alloc.max_chunks;
        if self.available(alloc, spare) < k {
            return None;
        }
        let mut ids = Vec::with_capacity(k);
        for _ in 0..k {
            match alloc.free.pop() {
                Some(id) => ids.push(id),
                None => ids.extend(self.fresh(alloc)),
            }
        }
        let first = *ids.first()?;
        self.prepare(first, k, true);
        let slot = self.slot(first);
        *slot.more.lock() = ids[1..].to_vec();
        slot.end.store(words as u32, Ordering::Relaxed);
        slot.pending.fetch_add(1, Ordering::Relaxed);
        Some(Space {
            seg: first,
            off: 0,
            words,
            large: true,
            log,
        })
    }

    /// Put a published large segment on its log's queue.
    pub fn enqueue_large(&self, alloc: &mut AllocState, seg: u32, log: Log) {
        self.push_queue(alloc, log, seg);
    }

    /// Bytes a queued segment counts for.
    pub fn seg_bytes(&self, seg: u32) -> u64 {
        u64::from(self.slot(seg).words.load(Ordering::Relaxed)) * 8
    }

    /// Return a large segment's chunks to the free list.
    pub fn free_large(&self, alloc: &mut AllocState, seg: u32) {
        let slot = self.slot(seg);
        let more = std::mem::take(&mut *slot.more.lock());
        slot.reset();
        slot.large.store(0, Ordering::Relaxed);
        self.give_back(alloc, seg);
        for c in more {
            self.give_back(alloc, c);
        }
    }

    /// Free chunks.
    pub fn free_count(&self, alloc: &AllocState) -> usize {
        alloc.free.len()
    }

    fn prepare(&self, id: u32, chunks: usize, large: bool) {
        let slot = self.slot(id);
        slot.reset();
        slot.words
            .store((chunks * self.seg_words) as u32, Ordering::Relaxed);
        slot.large.store(u32::from(large), Ordering::Relaxed);
    }

    fn allocate(&self, alloc: &mut AllocState) -> u32 {
        let id = alloc.allocated;
        alloc.allocated += 1;
        let page = self.pages[id / SLOT_PAGE]
            .get_or_init(|| (0..SLOT_PAGE).map(|_| SegSlot::new()).collect());
        page[id % SLOT_PAGE]
            .mem
            .get_or_init(|| (0..self.seg_words).map(|_| AtomicU64::new(0)).collect());
        self.note_held(alloc);
        id as u32
    }
}

#[cfg(test)]
#[path = "arena_tests.rs"]
mod tests;
