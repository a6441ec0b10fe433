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

impl crate::cache::Inner {
    /// `stats extstore`: memcached extstore-like names where they fit, the engine's `flash_*`
    /// pairs, and the RAM the index spends per item. `None` without flash.
    pub(crate) fn extstore_stats(&self) -> Option<Vec<(String, String)>> {
        let ft = self.ft.as_ref()?;
        let t = &ft.counters;
        let fs = ft.flash.stats();
        let g = Counters::get;
        let f = flashtier_flash::FlashStats::get;
        let items = self.index.len();
        let index_bytes = self.index.memory_bytes();
        let per_item = if items == 0 {
            0.0
        } else {
            index_bytes as f64 / items as f64
        };
        let mut v: Vec<(String, String)> = vec![
            ("extstore_objects_written", g(&t.objects_written)),
            ("extstore_bytes_written", g(&t.bytes_written)),
            ("extstore_objects_read", g(&t.objects_read)),
            ("extstore_bytes_read", g(&t.bytes_read)),
            ("extstore_hits", g(&t.hits)),
            ("extstore_tag_collisions", g(&t.collisions)),
            ("extstore_objects_promoted", g(&t.promoted)),
            ("extstore_promotions_abandoned", g(&t.promotions_abandoned)),
            ("extstore_promotions_skipped", g(&t.promotions_skipped)),
            ("extstore_objects_demoted", g(&t.demoted)),
            ("extstore_objects_evicted", g(&t.evicted)),
            ("extstore_objects_relocated", g(&t.relocated)),
            ("extstore_objects_recovered", g(&t.recovered)),
            ("extstore_write_skipped", g(&t.write_skipped)),
            ("extstore_errors", g(&t.errors)),
            ("extstore_checksum_failures", g(&t.checksum_failures)),
            ("extstore_tombstones", g(&t.tombstones)),
            ("extstore_marker_failures", g(&t.marker_failures)),
            ("extstore_write_failed_in_ram", g(&t.write_failed_in_ram)),
            ("extstore_write_failed_lost", g(&t.write_failed_lost)),
            ("extstore_markers_rewritten", g(&t.markers_rewritten)),
            ("extstore_bytes_used", f(&fs.bytes_used)),
            ("extstore_bytes_fragmented", f(&fs.bytes_dead)),
            (
                "extstore_segments_used",
                f(&fs.segments_total).saturating_sub(f(&fs.segments_free)),
            ),
            ("extstore_segments_free", f(&fs.segments_free)),
            ("extstore_compactions", f(&fs.reclaims)),
            ("extstore_io_queue", f(&fs.io_queue_depth)),
            ("extstore_flash_checksum_failures", f(&fs.checksum_failures)),
            ("extstore_index_items", items),
            ("extstore_index_bytes", index_bytes),
        ]
        .into_iter()
        .map(|(k, n)| (k.to_string(), n.to_string()))
        .collect();
        v.push(("ram_bytes_per_flash_item".into(), format!("{per_item:.2}")));
        v.push(("extstore_backend".into(), ft.info.backend.to_string()));
        v.push(("extstore_capacity".into(), ft.info.capacity.to_string()));
        v.push((
            "extstore_segment_size".into(),
            ft.info.segment_size.to_string(),
        ));
        for (k, n) in fs.pairs() {
            v.push((k.to_string(), n.to_string()));
        }
        for (k, val) in self.knobs() {
            v.push((format!("extstore_knob_{k}"), val));
        }
        Some(v)
    }
}
