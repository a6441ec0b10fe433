//! The store interface the protocol layer is written against.
//!
//! All operations are `async` because an item may live on flash: a RAM hit completes on the
//! first poll, a flash read completes when the device answers. A connection may hold several
//! of these futures at once (pipelined or multi-key gets) and await them together, which turns
//! a multi-get into one batch of flash reads.
use std::future::Future;

use flashtier_flash::Flash;

use crate::clock::Clock;
use crate::engine::Cache;
pub use crate::item::ItemInfo;
use crate::{Error, Item, ItemWrite, Update};

/// Counters a store exposes through `stats` (general section). Other sections come from the
/// store's own `stats_section`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Items currently stored (expired items not yet reclaimed may be included).
    pub curr_items: u64,
    /// Items stored since start.
    pub total_items: u64,
    /// Bytes used by stored items (keys, values and per-item headers).
    pub bytes: u64,
    /// The configured RAM limit in bytes (`limit_maxbytes`).
    pub limit_maxbytes: u64,
    /// Items removed to make room for new ones.
    pub evictions: u64,
    /// Items removed by the background expiry sweep or found expired on access.
    pub reclaimed: u64,
    /// Items removed because they expired (subset of `reclaimed`).
    pub expired_unfetched: u64,
    /// Items evicted without ever having been fetched.
    pub evicted_unfetched: u64,
}

/// What [`KvStore::get_if_ready`] did: answered a `get` at once, or said how it would run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GetNow {
    /// Answered now, exactly as [`KvStore::get`] would have (the access is recorded): the
    /// key's RAM record (`None`: it was dead and is gone).
    Done(Option<Item>),
    /// Not answered; a `get` of the key would complete on its first poll.
    Run,
    /// Not answered; a `get` of the key may wait for a device.
    MayWait,
}

/// A key-value store with memcached's item model.
pub trait KvStore: Send + Sync + 'static {
    /// Whether a `get` of `key` may wait for a device (a flash read) rather than complete on
    /// its first poll. A hint for the protocol layer, which runs reads that may wait in a
    /// connection's read window (overlapped with later requests) and the others in place,
    /// without the window's allocations: a wrong `false` only loses overlap (the read is
    /// awaited in place, still correct), a wrong `true` only costs the window. Default: true.
    fn read_may_wait(&self, key: &[u8]) -> bool {
        let _ = key;
        true
    }

    /// A `get` of `key` answered now when that needs no device and no waiting (a RAM hit),
    /// else [`read_may_wait`](Self::read_may_wait)'s hint: one index probe for a RAM hit
    /// where `read_may_wait` then `get` take two. Default: never answers.
    fn get_if_ready(&self, key: &[u8]) -> GetNow {
        if self.read_may_wait(key) {
            GetNow::MayWait
        } else {
            GetNow::Run
        }
    }

    /// Fetch a live item and record the access (sets `fetched`, `last_access`). The returned
    /// meta is the state *before* this access. Expired items are never returned.
    fn get(&self, key: &[u8]) -> impl Future<Output = Result<Option<Item>, Error>> + Send;

    /// Store unconditionally. Returns the CAS value of the new version.
    fn set(&self, key: &[u8], item: ItemWrite) -> impl Future<Output = Result<u64, Error>> + Send;

    /// Read-modify-write: `f` sees the current live item (or `None`) and decides. The store
    /// applies the decision atomically with respect to other operations on the same key;
    /// if another writer got in between, `f` may be called again with the newer item.
    /// Returns what `f` returned on the call that was applied, plus the CAS of the written
    /// version when the decision was `Put`.
    fn update<R, F>(
        &self,
        key: &[u8],
        f: F,
    ) -> impl Future<Output = Result<(R, Option<u64>), Error>> + Send
    where
        R: Send,
        F: FnMut(Option<&Item>) -> (Update, R) + Send;

    /// Invalidate every item stored at or before unix time `at` once that time arrives
    /// (memcached `flush_all [delay]`). `at <= now` flushes immediately.
    fn flush_all(&self, at: u32);

    /// The largest value (bytes) a single item may carry.
    fn max_item_size(&self) -> usize;

    /// The store's clock (the protocol converts exptimes with it).
    fn clock(&self) -> &crate::Clock;

    /// General counters for `stats`.
    fn stats(&self) -> StoreStats;

    /// Extra `stats <section>` lines (`items`, `slabs`, `settings`, `extstore`, ...) as
    /// (name, value) pairs; `None` when the store has no such section.
    fn stats_section(&self, section: &str) -> Option<Vec<(String, String)>>;

    /// Settings that can change while the store runs (memcached's `extstore <knob>
    /// <value>`, the admin endpoint), as (name, current value) text pairs in a stable order.
    /// Default: none.
    fn knobs(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// How many parts [`dump_part`](Self::dump_part) walks the items in. Default: 0 (the
    /// store cannot list its items).
    fn dump_parts(&self) -> usize {
        0
    }

    /// The live items of part `part` (`0..dump_parts()`), expired and flushed ones left out,
    /// in no particular order. For the dump commands: a flash-only item costs one flash
    /// read. Default: none.
    fn dump_part(&self, part: usize) -> impl Future<Output = Vec<ItemInfo>> + Send {
        let _ = part;
        std::future::ready(Vec::new())
    }

    /// Change one runtime knob. The value is text as a client sent it. An unknown name or a
    /// bad value is [`Error::Knob`] (a client error) and changes nothing. Default: every
    /// name is unknown.
    fn set_knob(&self, name: &str, value: &str) -> Result<(), Error> {
        let _ = value;
        Err(Error::Knob(format!(
            "unknown knob {name}: this store has no runtime knobs"
        )))
    }

    /// The flash engine's counters and IO latency histograms, when the store has a flash
    /// tier (for metrics exporters). Default: none.
    fn flash_stats(&self) -> Option<&flashtier_flash::FlashStats> {
        None
    }

    /// A handle for a serving event loop to reap the completions of the flash IO its
    /// threads submit on lane `lane` (`flashtier_flash::use_ring_lane`,
    /// `flashtier_flash::ReapHandle`). Default: none (no flash, or psync).
    fn flash_reaper(&self, lane: usize) -> Option<flashtier_flash::ReapHandle> {
        let _ = lane;
        None
    }

    /// The same for the small-object tier's page reads (its own rings, one per lane:
    /// `crate::small_tier`). Default: none (no small tier, or psync).
    fn small_reaper(&self, lane: usize) -> Option<flashtier_flash::ReapHandle> {
        let _ = lane;
        None
    }
}

/// The real store: RAM-only or over a flash tier (`Cache`'s two-phase paths).
impl KvStore for Cache {
    fn flash_stats(&self) -> Option<&flashtier_flash::FlashStats> {
        self.flash().map(Flash::stats)
    }

    fn flash_reaper(&self, lane: usize) -> Option<flashtier_flash::ReapHandle> {
        self.flash().and_then(|f| f.reap_handle(lane))
    }

    fn small_reaper(&self, lane: usize) -> Option<flashtier_flash::ReapHandle> {
        self.core.small.reap_handle(lane)
    }

    async fn get(&self, key: &[u8]) -> Result<Option<Item>, Error> {
        self.get_two_phase(key).await
    }

    fn read_may_wait(&self, key: &[u8]) -> bool {
        Cache::read_may_wait(self, key)
    }

    fn get_if_ready(&self, key: &[u8]) -> GetNow {
        Cache::get_if_ready(self, key)
    }

    async fn set(&self, key: &[u8], item: ItemWrite) -> Result<u64, Error> {
        self.set_two_phase(key, item).await
    }

    async fn update<R, F>(&self, key: &[u8], f: F) -> Result<(R, Option<u64>), Error>
    where
        R: Send,
        F: FnMut(Option<&Item>) -> (Update, R) + Send,
    {
        self.update_two_phase(key, f).await
    }

    fn flush_all(&self, at: u32) {
        self.core.flush_all(at)
    }

    fn max_item_size(&self) -> usize {
        self.core.cfg.max_item_size
    }

    fn clock(&self) -> &Clock {
        &self.core.cfg.clock
    }

    fn stats(&self) -> StoreStats {
        self.core.stats()
    }

    fn stats_section(&self, section: &str) -> Option<Vec<(String, String)>> {
        self.core.stats_section(section)
    }

    fn knobs(&self) -> Vec<(String, String)> {
        self.core.lower.knobs()
    }

    fn set_knob(&self, name: &str, value: &str) -> Result<(), Error> {
        self.core.lower.set_knob(name, value)
    }

    /// The index shards, then the small tier's ranges of sets (`dump`).
    fn dump_parts(&self) -> usize {
        self.core.slots.shard_count() + self.core.small.dump_parts()
    }

    async fn dump_part(&self, part: usize) -> Vec<ItemInfo> {
        let shards = self.core.slots.shard_count();
        match part.checked_sub(shards) {
            None => crate::dump::shard(&self.core, part).await,
            Some(small) => crate::dump::small(&self.core, small).await,
        }
    }
}
