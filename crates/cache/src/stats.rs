//! Counters of the RAM tier and how they map to memcached's `stats` sections.
//!
//! Counters are relaxed atomics bumped by any thread. Mapping to memcached names:
//! - general: `curr_items` (index entries, may include expired items not yet found),
//!   `total_items`, `bytes` (record bytes the index points at: header + key + value + padding),
//!   `limit_maxbytes`, `evictions`, `reclaimed`, `expired_unfetched`, `evicted_unfetched`.
//! - `stats slabs` → segments: memcached's slab classes have no equivalent in a log-structured
//!   arena, so the section reports the arena: `segment_size`, `segments_small`,
//!   `segments_main`, `segments_free`, `segments_large`, `total_malloced` (segment bytes
//!   allocated), `index_bytes`, `ghost_bytes`.
//! - `stats items` → one pseudo class `items:1:*` with `number`, `evicted`,
//!   `evicted_unfetched`, `expired_unfetched`, `reclaimed`, `moves_to_main` (S3-FIFO
//!   promotions), `reinserted` (main-log second chances), `compacted` (records moved by the
//!   sweeper), `segments_swept`.
//! - `stats settings` → `maxbytes`, `item_size_max`, `evictions` (`on`), `eviction_policy`,
//!   `segment_size`, `index_shards`, `hash_seed`, `sweep_interval_ms`.
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The RAM tier's event counters.
#[derive(Debug, Default)]
pub struct Counters {
    pub total_items: AtomicU64,
    pub live_bytes: AtomicU64,
    pub evictions: AtomicU64,
    pub evicted_unfetched: AtomicU64,
    pub reclaimed: AtomicU64,
    pub expired_unfetched: AtomicU64,
    pub moves_to_main: AtomicU64,
    pub reinserted: AtomicU64,
    pub compacted: AtomicU64,
    pub segments_swept: AtomicU64,
}

impl Counters {
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }

    pub fn sub(c: &AtomicU64, n: u64) {
        c.fetch_sub(n, Relaxed);
    }

    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Relaxed)
    }
}
