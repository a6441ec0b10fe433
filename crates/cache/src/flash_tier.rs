//! The flash tier under the RAM store: write-back (or write-through), flash-resident slots, reads.
//!
//! # Policy
//! - **Write-back** (`writeback`, knob `write_back_ms`; 0 = write-through). Every stored
//!   version (SET, and every `Update::Put`: append, incr, cas, touch, ...) is kept in RAM and
//!   appended to flash when RAM evicts it or after the window, whichever is first; once
//!   appended, the RAM copy's record remembers the flash location (its *home*, `record` word
//!   4). In write-through mode the append happens at the store. When S3-FIFO evicts
//!   the RAM copy, the index slot is rewritten in place (same shard lock) to the flash tier and
//!   the home location, so the item never disappears: **no item is evicted while flash has
//!   room**. Items leave only by expiry, delete/overwrite, or flash reclaim when flash is full.
//! - **Flash record.** `key_id` = the index hash of the key (seeded with the seed stored on
//!   flash); `version` = a per-cache sequence that only grows and is ≥ the item's CAS (so the
//!   highest version is the newest write of a key, even for `CasMode::Explicit` CAS values
//!   lower than the previous one); `flags` = client flags; `exptime`; value = a 16-byte
//!   prefix (CAS u64, stored-time u32, stale/win bits u8, 3 zero bytes, little-endian) + the
//!   value. Deletes append a `TOMBSTONE` with a fresh version; `flush_all` appends a marker of
//!   kind [`KIND_FLUSH`] (flags 0 = immediate, 1 = delayed with `exptime` = the flush time).
//! - **Back-pressure and faults never fail a store.** If the write buffers are all in
//!   flight, or no segment is free while reclaim frees one, the append waits up to `append_wait_ms` (knob; holding its key's shard lock) and
//!   then, like on `NoSpace`, a value too large for a flash chunk or one smaller than the
//!   `item_size` knob (default 0), or an engine with no device taking writes (all failing
//!   or offline after write errors), stores the item in RAM only (counted in
//!   `extstore_write_skipped`); when such an item is later evicted from RAM the append is
//!   retried once, and only if that fails too is it dropped (counted as an eviction). As
//!   memcached with extstore, a SET never fails because flash has trouble.
//! - **Failed writes.** An append is a memory copy; the chunk write to the device happens
//!   later. When it fails for good the engine reports the chunk's records (`lost`, see
//!   `reclaim`): a RAM copy whose home was there loses its home (it stays in RAM and is
//!   appended again when RAM evicts it; `extstore_write_failed_in_ram`); a flash-only slot
//!   there is removed (`extstore_write_failed_lost`, logged); a lost tombstone or marker is
//!   appended again with its own version.
//! - **Reads.** A slot on flash is read (`Flash::read`, awaited), then `key_id`, kind, key and
//!   expiry are checked; a record of another key (a 41-bit tag collision) is skipped. A
//!   checksum failure or a location whose segment was freed under a still-current slot is
//!   never served: the slot is removed, `extstore_checksum_failures` counts it, and the key
//!   reads as a miss. Any other read error fails the request with `Error::Flash`.
//! - **Promotion.** The 2 frequency bits of a flash slot count hits since the item went to
//!   flash (a RAM copy that had been fetched is demoted with frequency 1). A hit on a flash
//!   slot whose frequency is already ≥ 1 — a repeat hit, every `recache_rate`-th one (knob,
//!   default 1 = all) — copies the item back into RAM's small log with frequency 0, S3-FIFO's
//!   probation (the home stays the same flash record, nothing is written to flash; a copy
//!   not hit again is evicted at no cost). If the small log's open segment has room the
//!   copy is published under the shard lock of the GET; otherwise the GET answers, and then,
//!   with no lock held, reserves space the way a SET does (which may evict; evicting a RAM
//!   copy of a flash item only turns its slot back into a flash slot), writes the copy, and
//!   publishes it only if the key's slot is still the flash slot that was read — else the
//!   space is abandoned (`extstore_promotions_abandoned`). At most [`MAX_PROMOTING`] such
//!   promotions run at once. A first hit only raises the frequency.
//! - **Metadata on flash.** `fetched` of a flash item is "frequency > 0"; `last_access` is the
//!   time it was stored (a flash record is immutable; the time of a hit that did not promote
//!   is not kept). Both are exact again once the item is back in RAM.
//!
//! # Threads
//! Any caller thread appends and reads; the engine's reclaimer calls `reclaim`'s handler.
//! Appends happen under the key's index shard lock (the engine's lock is a leaf below it).
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use bytes::Bytes;
use flashtier_flash::{kind, Flash, FlashInfo, Location, Record, RecordMeta, RecordWrite};

use crate::index::{Entry, Tier, LOC_BITS, MAX_LOC};
use crate::knobs::Tiering;
use crate::record::HOME_VALID;
use crate::Error;

/// The stream every write-through append uses (the engine's reclaim stream is another).
pub const STREAM: u8 = 0;
/// The stream of versions the write-back pass appends: keys RAM kept for the whole window
/// (hot, likely overwritten again soon), so their segments die together and reclaim finds
/// them mostly dead; versions evicted from RAM go to [`STREAM`], compaction survivors to the
/// engine's reclaim stream (1).
pub const HOT_STREAM: u8 = 2;

/// The stream write-back appends go to with engine settings `cfg`: [`HOT_STREAM`] if the
/// engine has it (and it is not the reclaim stream), else [`STREAM`].
pub fn hot_stream(cfg: &flashtier_flash::FlashConfig) -> u8 {
    if cfg.streams > HOT_STREAM && cfg.reclaim_stream != HOT_STREAM {
        HOT_STREAM
    } else {
        STREAM
    }
}
/// Record kind of a `flush_all` marker.
pub const KIND_FLUSH: u8 = 3;
/// Record kind of a CAS checkpoint (appended at a clean close; its version is ≥ every CAS
/// handed out, so a restart continues above it).
pub const KIND_CAS: u8 = 4;
/// Promotions that may allocate RAM space at once (each may seal a log head and evict a
/// segment); a repeat hit beyond this is served without promoting (`promotions_skipped`).
/// It bounds how much of the RAM tier's allocation work flash hits can cause at a time.
pub const MAX_PROMOTING: u32 = 4;
/// Bytes of the value prefix (CAS, stored time, meta bits).
pub const PREFIX: usize = 16;
/// Marker flag: a delayed flush (its `exptime` is the flush time).
pub const FLUSH_DELAYED: u32 = 1;
/// Reclaim compacts unhit live items (instead of dropping them) while the device bytes
/// written stay under this many times the value bytes stored (docs/eviction.md).
pub const WRITE_BUDGET: f64 = 1.2;

/// Counters of the flash tier (relaxed atomics, any thread).
#[derive(Debug, Default)]
pub struct TierCounters {
    /// Items appended by write-through (or at RAM eviction after a skipped write-through).
    pub objects_written: AtomicU64,
    /// Value bytes appended.
    pub bytes_written: AtomicU64,
    /// Flash records read for a request (GET/UPDATE), including tag collisions.
    pub objects_read: AtomicU64,
    /// Value bytes read.
    pub bytes_read: AtomicU64,
    /// GET hits served from flash.
    pub hits: AtomicU64,
    /// Flash reads that found another key (tag collisions).
    pub collisions: AtomicU64,
    /// Items copied back to RAM on a repeat hit.
    pub promoted: AtomicU64,
    /// Promotions given up after space was taken: the slot changed meanwhile (a SET,
    /// DELETE, relocation or another promotion won), or no RAM space could be had.
    pub promotions_abandoned: AtomicU64,
    /// Promotions not attempted because `MAX_PROMOTING` were already under way.
    pub promotions_skipped: AtomicU64,
    /// RAM evictions that became flash slots (the item stayed).
    pub demoted: AtomicU64,
    /// Items lost because reclaim dropped their flash record (flash full).
    pub evicted: AtomicU64,
    /// Records reclaim rewrote and whose slot or home followed.
    pub relocated: AtomicU64,
    /// Write-throughs skipped by back-pressure, by a value too large for a flash chunk or
    /// smaller than the `item_size` knob (the item was kept in RAM only).
    pub write_skipped: AtomicU64,
    /// Requests failed by a flash fault.
    pub errors: AtomicU64,
    /// Reads that failed their checksum or hit a freed segment under a current slot.
    pub checksum_failures: AtomicU64,
    /// Tombstones appended.
    pub tombstones: AtomicU64,
    /// Tombstones or flush markers that could not be appended.
    pub marker_failures: AtomicU64,
    /// Items whose flash write failed while their RAM copy was live: the copy stays, without
    /// a flash home, and is appended again when RAM evicts it.
    pub write_failed_in_ram: AtomicU64,
    /// Items whose flash write failed after RAM had let them go (flash-only slots): lost.
    pub write_failed_lost: AtomicU64,
    /// Tombstones and markers whose write failed and that were appended again.
    pub markers_rewritten: AtomicU64,
    /// Items rebuilt into the index at open.
    pub recovered: AtomicU64,
    /// Dirty versions appended by the write-back pass (window elapsed, or close).
    pub written_back: AtomicU64,
    /// Value bytes of every version stored (SET and updates), written to flash or not: the
    /// denominator of write amplification.
    pub bytes_stored: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// The flash engine plus what the cache keeps about it.
pub struct FlashTier {
    pub flash: Flash,
    pub info: FlashInfo,
    /// Last version handed out; the next is larger (see the module docs).
    version: AtomicU64,
    /// Version of the newest immediate flush marker (reclaim keeps it).
    pub last_marker: AtomicU64,
    /// Version of the newest delayed flush marker (reclaim keeps it).
    pub last_delayed: AtomicU64,
    /// Runtime tiering settings (`knobs`): append wait, size threshold, reclaim rules.
    pub tiering: Tiering,
    /// The engine's reserved segments (part of the "has room" floor).
    reserve: u32,
    /// Repeat flash hits seen, for `recache_rate` (promote every Nth repeat hit).
    repeat_hits: AtomicU64,
    /// Promotions running outside the shard lock (`hybrid::promote_later`); at most
    /// `MAX_PROMOTING`.
    promoting: AtomicU32,
    /// Set by the first `Cache::close`.
    pub closed: std::sync::atomic::AtomicBool,
    pub counters: TierCounters,
    /// Versions waiting for write-back (`writeback`).
    pub(crate) dirty: crate::writeback::DirtyQueue,
    /// Where the write-back pass appends (see [`hot_stream`]).
    pub hot_stream: u8,
    /// When an unreadable item was last logged, and how many since (the log is limited to
    /// one line per [`LOSS_LOG_EVERY`]).
    loss_log: parking_lot::Mutex<(Option<std::time::Instant>, u64)>,
}

/// Shortest time between two log lines about items dropped as unreadable.
pub const LOSS_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

impl std::fmt::Debug for FlashTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlashTier")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// One running promotion (see [`FlashTier::promotion_turn`]).
pub struct PromotionTurn<'a>(&'a AtomicU32);

impl Drop for PromotionTurn<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The fields of a flash item the RAM side needs.
#[derive(Clone, Debug)]
pub struct FlashItem {
    pub cas: u64,
    pub stored: u32,
    /// Record flag bits `F_STALE | F_WIN` as stored.
    pub rflags: u8,
    pub flags: u32,
    pub exptime: u32,
    pub value: Bytes,
}

/// The index entry of a flash location.
pub fn entry_of(loc: Location, freq: u8) -> Entry {
    let packed = loc.pack();
    Entry {
        tier: Tier::Flash,
        freq,
        size_hint: (packed >> LOC_BITS) as u8,
        loc: packed & MAX_LOC,
    }
}

/// The packed flash location a flash index entry names.
pub fn packed_of(e: &Entry) -> u64 {
    e.loc | (u64::from(e.size_hint) << LOC_BITS)
}

/// The home word for a RAM record whose flash copy is at `loc`.
pub fn home_word(loc: Location) -> u64 {
    HOME_VALID | loc.pack()
}

/// Map an engine error to the cache's.
pub fn flash_err(e: &flashtier_flash::Error) -> Error {
    Error::Flash(e.to_string())
}

/// True for a read error that means "this record is not there any more" (never served).
pub fn is_corrupt(e: &flashtier_flash::Error) -> bool {
    matches!(
        e,
        flashtier_flash::Error::Corrupt(_) | flashtier_flash::Error::InvalidLocation(_)
    )
}

impl FlashTier {
    pub fn new(
        flash: Flash,
        info: FlashInfo,
        max_version: u64,
        tiering: Tiering,
        reserve: u32,
    ) -> Self {
        Self {
            tiering,
            reserve,
            repeat_hits: AtomicU64::new(0),
            promoting: AtomicU32::new(0),
            closed: std::sync::atomic::AtomicBool::new(false),
            loss_log: parking_lot::Mutex::new((None, 0)),
            flash,
            info,
            version: AtomicU64::new(max_version),
            last_marker: AtomicU64::new(0),
            last_delayed: AtomicU64::new(0),
            counters: TierCounters::default(),
            dirty: Default::default(),
            hot_stream: STREAM,
        }
    }

    /// True while flash has room: more free segments than the engine's reserve plus
    /// `drop_under`. Reclaim then keeps every referenced record, hit or not (unless
    /// `drop_unread`).
    pub fn has_room(&self) -> bool {
        let floor = self.reserve.saturating_add(self.tiering.drop_under());
        self.flash.free_segments() > floor
    }

    /// True while compaction may keep unhit items: device writes within [`WRITE_BUDGET`]
    /// of the value bytes stored.
    pub fn compaction_budget(&self) -> bool {
        let written = flashtier_flash::FlashStats::get(&self.flash.stats().device_bytes_written);
        let stored = self.counters.bytes_stored.load(Ordering::Relaxed);
        (written as f64) <= WRITE_BUDGET * stored as f64
    }

    /// A repeat hit on a flash item: true when it should be copied back to RAM
    /// (`recache_rate`: every Nth repeat hit; 0 = never).
    pub fn should_recache(&self) -> bool {
        match self.tiering.recache_rate() {
            0 => false,
            1 => true,
            n => self
                .repeat_hits
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(n),
        }
    }

    /// An item's flash record failed its checksum (or its segment was freed or retired)
    /// under a current slot: the slot was removed. Count it; log it, at most one line per
    /// [`LOSS_LOG_EVERY`] with the count since the last line.
    pub fn unreadable_item(&self, err: &flashtier_flash::Error) {
        add(&self.counters.checksum_failures, 1);
        let mut l = self.loss_log.lock();
        l.1 += 1;
        if l.0.is_none_or(|t| t.elapsed() >= LOSS_LOG_EVERY) {
            log::warn!(
                "flash: {} items dropped as unreadable ({err}); counted in \
                 extstore_checksum_failures",
                l.1
            );
            *l = (Some(std::time::Instant::now()), 0);
        }
    }

    /// A turn to run a promotion outside the shard lock, or `None` (counted as skipped) if
    /// `MAX_PROMOTING` are under way. The turn ends when the guard is dropped.
    pub fn promotion_turn(&self) -> Option<PromotionTurn<'_>> {
        let ok = self
            .promoting
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < MAX_PROMOTING).then_some(n + 1)
            })
            .is_ok();
        if !ok {
            add(&self.counters.promotions_skipped, 1);
            return None;
        }
        Some(PromotionTurn(&self.promoting))
    }

    /// A fresh version, larger than every earlier one and ≥ `at_least`.
    pub fn next_version(&self, at_least: u64) -> u64 {
        let prev = self
            .version
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_add(1).max(at_least))
            })
            .unwrap_or(0);
        prev.saturating_add(1).max(at_least)
    }

    fn append(&self, w: &RecordWrite<'_>) -> Result<Location, flashtier_flash::Error> {
        self.append_to(STREAM, w)
    }

    fn append_to(
        &self,
        stream: u8,
        w: &RecordWrite<'_>,
    ) -> Result<Location, flashtier_flash::Error> {
        let wait = self.tiering.append_wait();
        match self.flash.append(stream, w) {
            Err(flashtier_flash::Error::Busy(_) | flashtier_flash::Error::NoSpace)
                if !wait.is_zero() =>
            {
                self.flash.append_blocking(stream, w, wait)
            }
            r => r,
        }
    }

    /// Append one item version. `None`: back-pressure, a value smaller than the `item_size`
    /// knob or too large for a chunk, or no device taking writes; the caller keeps it in
    /// RAM only (an append never fails a store).
    #[allow(clippy::too_many_arguments)]
    pub fn append_put(
        &self,
        key_id: u64,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: u32,
        cas: u64,
        stored: u32,
        rflags: u8,
    ) -> Option<Location> {
        self.append_put_to(
            STREAM, key_id, key, value, flags, exptime, cas, stored, rflags,
        )
    }

    /// [`Self::append_put`] into `stream` ([`HOT_STREAM`] for versions written back while
    /// RAM still holds them).
    #[allow(clippy::too_many_arguments)]
    pub fn append_put_to(
        &self,
        stream: u8,
        key_id: u64,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: u32,
        cas: u64,
        stored: u32,
        rflags: u8,
    ) -> Option<Location> {
        if (value.len() as u64) < self.tiering.item_size() {
            add(&self.counters.write_skipped, 1);
            return None;
        }
        let mut buf = Vec::with_capacity(PREFIX + value.len());
        buf.extend_from_slice(&cas.to_le_bytes());
        buf.extend_from_slice(&stored.to_le_bytes());
        buf.extend_from_slice(&[rflags, 0, 0, 0]);
        buf.extend_from_slice(value);
        let w = RecordWrite {
            kind: kind::PUT,
            key_id,
            version: self.next_version(cas),
            flags,
            exptime,
            key,
            value: &buf,
        };
        match self.append_to(stream, &w) {
            Ok(loc) => {
                add(&self.counters.objects_written, 1);
                add(&self.counters.bytes_written, value.len() as u64);
                Some(loc)
            }
            Err(_) => {
                add(&self.counters.write_skipped, 1);
                None
            }
        }
    }

    /// Append a tombstone for `key` (best effort: a failure is counted, not reported; see
    /// the crate docs on what a lost tombstone can bring back after a restart).
    pub fn append_tombstone(&self, key_id: u64, key: &[u8]) {
        let w = RecordWrite {
            kind: kind::TOMBSTONE,
            key_id,
            version: self.next_version(0),
            flags: 0,
            exptime: 0,
            key,
            value: &[],
        };
        match self.append(&w) {
            Ok(_) => add(&self.counters.tombstones, 1),
            Err(_) => add(&self.counters.marker_failures, 1),
        }
    }

    /// Append a `flush_all` marker: immediate (`at` = 0) or delayed to `at`.
    pub fn append_flush(&self, at: u32) {
        let version = self.next_version(0);
        let w = RecordWrite {
            kind: KIND_FLUSH,
            key_id: 0,
            version,
            flags: if at == 0 { 0 } else { FLUSH_DELAYED },
            exptime: at,
            key: &[],
            value: &[],
        };
        match self.append(&w) {
            Ok(_) if at == 0 => self.last_marker.store(version, Ordering::Relaxed),
            Ok(_) => self.last_delayed.store(version, Ordering::Relaxed),
            Err(_) => add(&self.counters.marker_failures, 1),
        }
    }

    /// Append a CAS checkpoint (clean close) and wait for it to be durable with the rest.
    pub fn append_cas_checkpoint(&self, cas: u64) {
        let w = RecordWrite {
            kind: KIND_CAS,
            key_id: 0,
            version: self.next_version(cas),
            flags: 0,
            exptime: 0,
            key: &[],
            value: &[],
        };
        if self.append(&w).is_err() {
            add(&self.counters.marker_failures, 1);
        }
    }

    /// Append a tombstone, marker or checkpoint again after its write failed, with its own
    /// kind, version and fields (`rec`, the lost content, gives the key). False if the
    /// engine refused it.
    pub fn append_again(&self, m: &RecordMeta, rec: Option<&Record>) -> bool {
        let (key, value) = rec.map_or((&[][..], &[][..]), |r| (&r.key[..], &r.value[..]));
        let w = RecordWrite {
            kind: m.kind,
            key_id: m.key_id,
            version: m.version,
            flags: m.flags,
            exptime: m.exptime,
            key,
            value,
        };
        self.append(&w).is_ok()
    }

    /// True for a marker record reclaim must keep (the newest flush markers).
    pub fn is_current_marker(&self, kind: u8, version: u64) -> bool {
        kind == KIND_FLUSH
            && (version == self.last_marker.load(Ordering::Relaxed)
                || version == self.last_delayed.load(Ordering::Relaxed))
    }

    /// Decode a record read for `key` (hash `key_id`): `None` if it is another key's.
    pub fn decode(&self, rec: &Record, key_id: u64, key: &[u8]) -> Option<FlashItem> {
        add(&self.counters.objects_read, 1);
        let h = &rec.header;
        if h.kind != kind::PUT || h.key_id != key_id || rec.key[..] != *key {
            add(&self.counters.collisions, 1);
            return None;
        }
        let p = rec.value.get(..PREFIX)?;
        let cas = u64::from_le_bytes(p[0..8].try_into().ok()?);
        let stored = u32::from_le_bytes(p[8..12].try_into().ok()?);
        let value = rec.value.slice(PREFIX..);
        add(&self.counters.bytes_read, value.len() as u64);
        Some(FlashItem {
            cas,
            stored,
            rflags: p[12],
            flags: h.flags,
            exptime: h.exptime,
            value,
        })
    }
}
