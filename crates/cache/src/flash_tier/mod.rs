//! The flash tier under the RAM tier. [`FlashTier`](tier::FlashTier) (`tier`) owns the flash
//! engine and what the cache keeps about it (versions, the newest flush markers, tiering
//! knobs, counters, the write-back queue, the back-pressure gate); its methods live in `tier`
//! (appends, room, versions), `read` (phase 1 and its re-check in phase 2) and `promote`.
//! The rest are components over it: `demote` (the RAM tier's `LowerTier`), `reclaim` (the
//! engine's `ReclaimHandler` and the [`Reclaim`](reclaim::Reclaim) policy), `writeback`
//! ([`WriteBack`](writeback::WriteBack)), `recovery` (open, rebuild, replay), `journal`,
//! `backpressure`, `dirty`, `kv_record` (the record codec) and `stats`.
//!
//! Every stored version is kept in RAM dirty and appended when RAM evicts it or after the
//! write-back window; an evicted RAM copy becomes a flash slot at its home, so no item is
//! evicted while flash has room. An append never fails a store: back-pressure, a value flash
//! will not take or a failing device leave the item in RAM only. The full policy (reads,
//! promotion, failed writes, reclaim) is in docs/eviction.md, "The flash tier's rules".
//!
//! The tier reaches RAM only through [`RamAccess`], which the core implements (and a fake in
//! the unit tests): this folder imports neither the core nor the RAM tier's type.
//!
//! # Threads
//! Any caller appends and reads; the write-back thread appends; the engine's reclaimer calls
//! `reclaim`'s handler. Appends happen under the key's shard lock (the engine's lock is a leaf
//! below it) and never wait there: back-pressure is awaited before any lock (`backpressure`).
pub(crate) mod backpressure;
pub(crate) mod demote;
pub(crate) mod dirty;
pub(crate) mod journal;
pub(crate) mod kv_record;
pub(crate) mod payback;
pub(crate) mod promote;
pub(crate) mod read;
pub(crate) mod reclaim;
pub(crate) mod recovery;
pub(crate) mod stats;
#[cfg(test)]
pub(crate) mod testing;
pub(crate) mod tier;
pub(crate) mod value_mean;
pub(crate) mod writeback;

use flashtier_flash::Location;

use crate::meta::Meta;
use crate::ram::arena::RecordRef;
use crate::ram::index::{Entry, Index, Pos, Shard, Tier, LOC_BITS, MAX_LOC};
use crate::ram::lower::CopyUp;
use crate::ram::record::{Header, HOME_VALID};
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
/// Promotions that may allocate RAM space at once (each may seal a log head and evict a
/// segment); a repeat hit beyond this is served without promoting (`promotions_skipped`).
/// It bounds how much of the RAM tier's allocation work flash hits can cause at a time.
pub const MAX_PROMOTING: u32 = 4;
/// The default of the `write_budget` knob: reclaim compacts unhit live items (instead of
/// dropping them) while the device bytes written stay under this many times the value bytes
/// stored (docs/eviction.md).
pub const WRITE_BUDGET: f64 = 1.28;
/// Past the write budget reclaim still keeps an unhit item whose record is at most
/// 1/`SMALL_KEEP_DIVISOR` of the recent mean value size appended: a GET hits one item whatever
/// its size, so a small item is worth more per byte of flash, and such records add about a
/// quarter of the bytes appended at most (docs/eviction.md, "Small items outlive the budget").
pub const SMALL_KEEP_DIVISOR: u64 = 4;

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

/// Where a copy of a flash item goes into RAM (see [`RamAccess::copy_up`]).
pub(crate) enum CopyAt<'s, 'a> {
    /// Now, over the flash slot at `pos`, its shard locked: only if the small log's open
    /// segment has room (nothing is allocated or evicted under the lock).
    Now(&'s mut Shard<'a>, Pos),
    /// Later, holding no lock: reserve (may evict), write, lock the shard of `hash` and
    /// publish only if the key's slot is still the flash slot at packed `loc`.
    Later { hash: u64, loc: u64 },
}

/// What the flash tier reaches of RAM and of the state the core shares: six methods, which
/// the core implements (and the unit tests fake). The flash tier never names the core or the
/// RAM tier's type.
pub(crate) trait RamAccess {
    /// The one index of both tiers (a flash slot and a RAM slot look alike; the tier bit
    /// tells them apart).
    fn slots(&self) -> &Index;
    /// The cache's metadata: liveness (expiry, `flush_all`), the ledger, the counters.
    fn meta(&self) -> &Meta;
    /// The RAM record at `loc` (header, key, value; its home word can be rewritten). Caller
    /// holds the shard lock of a slot pointing at it.
    fn record(&self, loc: u64) -> Option<RecordRef<'_>>;
    /// The key's RAM slot, found by key compare (shard locked).
    fn find_key(&self, shard: &Shard<'_>, hash: u64, key: &[u8]) -> Option<(Pos, Entry)>;
    /// True when RAM would copy a record of `words` words up (a record that needs a large
    /// segment of its own is not copied).
    fn copy_fits(&self, words: usize) -> bool;
    /// Copy a flash item into RAM (a promotion): `h` is the copy's header (its home word the
    /// flash copy), `value` its value. The slot becomes a RAM slot with frequency 0.
    fn copy_up(&self, at: CopyAt<'_, '_>, key: &[u8], h: &Header, value: &[u8]) -> CopyUp;
}
