//! How the store answers memcached's `stats` sections from its components' counters (`meta`,
//! the RAM tier's segments, the flash engine's): general, `settings`, `slabs` and `items`
//! (memcached's shape, which memcached-tool and memcached_exporter read, with one class per
//! tier: 1 = RAM segments, 2 = flash segments) and `extstore` (`flash_tier::stats`). Every
//! name and what it counts: docs/stats.md.

use crate::config::EvictionPolicy;
use crate::meta::Counters;
use crate::StoreStats;

impl crate::engine::Core {
    pub(crate) fn stats(&self) -> StoreStats {
        let c = &self.meta.counters;
        StoreStats {
            curr_items: self.slots.len(),
            total_items: Counters::get(&c.total_items),
            bytes: Counters::get(&c.live_bytes),
            limit_maxbytes: self.ram.limit(),
            evictions: Counters::get(&c.evictions),
            reclaimed: Counters::get(&c.reclaimed),
            expired_unfetched: Counters::get(&c.expired_unfetched),
            evicted_unfetched: Counters::get(&c.evicted_unfetched),
        }
    }

    pub(crate) fn stats_section(&self, section: &str) -> Option<Vec<(String, String)>> {
        let kv = |k: &str, v: String| (k.to_string(), v);
        match section {
            "settings" => Some(vec![
                kv("maxbytes", self.cfg.memory_limit.to_string()),
                kv("item_size_max", self.cfg.max_item_size.to_string()),
                kv(
                    "evictions",
                    if self.cfg.evict_to_free { "on" } else { "off" }.into(),
                ),
                kv(
                    "eviction_policy",
                    match self.cfg.eviction {
                        EvictionPolicy::S3Fifo => "s3fifo".into(),
                        EvictionPolicy::Fifo => "fifo".into(),
                    },
                ),
                kv("segment_size", self.cfg.segment_size.to_string()),
                kv("index_shards", self.cfg.index_shards.to_string()),
                // The index's: with flash, the seed stored on flash replaces the configured one.
                kv("hash_seed", self.slots.seed().to_string()),
                kv(
                    "sweep_interval_ms",
                    self.cfg
                        .sweep_interval
                        .map_or(0, |d| d.as_millis())
                        .to_string(),
                ),
            ]),
            "slabs" => Some(self.slabs_stats()),
            "items" => Some(self.items_stats()),
            "small" => self
                .small
                .stats(self.cfg.clock.now_ms(), self.small_window_ms()),
            "extstore" => self
                .lower
                .flash()
                .map(|t| crate::flash_tier::stats::extstore(t, &self.slots, &self.meta.ledger)),
            _ => None,
        }
    }

    /// Index entries of `tier` (walks every shard).
    fn count_tier(&self, tier: crate::ram::index::Tier) -> u64 {
        (0..self.slots.shard_count())
            .map(|i| self.slots.lock_nth(i).count_tier(tier) as u64)
            .sum()
    }

    /// `stats slabs` in memcached's shape (see the module docs).
    pub(crate) fn slabs_stats(&self) -> Vec<(String, String)> {
        let seg = self.cfg.segment_size as u64;
        let counts = self.ram.segment_counts();
        let (small, main, free, large) = (counts.small, counts.main, counts.free, counts.large);
        let malloced = self.ram.mem_used();
        let pages = malloced / seg;
        let limit_pages = self.ram.limit() / seg;
        let mut v: Vec<(String, String)> = Vec::new();
        let mut add = |k: &str, n: u64| v.push((k.to_string(), n.to_string()));
        add("1:chunk_size", seg);
        add("1:chunks_per_page", 1);
        add("1:total_pages", pages);
        add("1:total_chunks", pages);
        add("1:used_chunks", pages.saturating_sub(free));
        add("1:free_chunks", free);
        add("1:free_chunks_end", limit_pages.saturating_sub(pages));
        add(
            "1:mem_requested",
            Counters::get(&self.meta.counters.live_bytes),
        );
        let mut active = 1;
        if let Some(tier) = self.lower.flash() {
            let engine_stats = tier.engine().stats();
            let f = flashtier_flash::FlashStats::get;
            let total = f(&engine_stats.segments_total);
            let free = f(&engine_stats.segments_free);
            add("2:chunk_size", tier.info().segment_size);
            add("2:chunks_per_page", 1);
            add("2:total_pages", total);
            add("2:total_chunks", total);
            add("2:used_chunks", total.saturating_sub(free));
            add("2:free_chunks", free);
            add("2:free_chunks_end", 0);
            add("2:mem_requested", f(&engine_stats.bytes_used));
            active = 2;
        }
        add("active_slabs", active);
        add("total_malloced", malloced);
        add("segment_size", seg);
        add("segments_small", small);
        add("segments_main", main);
        add("segments_free", free);
        add("segments_large", large);
        let index = self.slots.memory_bytes();
        let ghost = self.ram.ghost_bytes() as u64;
        let ledger = self.meta.ledger.memory_bytes() as u64;
        add("index_bytes", index);
        add("ghost_bytes", ghost);
        add("ledger_bytes", ledger);
        // Everything the cache can name (flash write chunks and reclaim reads included): the
        // part of RSS that is items' and their metadata's (docs/eviction.md, "RAM per flash
        // item", says where the rest goes).
        let flash_work = self.lower.flash().map_or(0, |t| {
            flashtier_flash::FlashStats::get(&t.engine().stats().work_bytes)
        });
        let summaries = self.lower.flash().map_or(0, |t| {
            flashtier_flash::FlashStats::get(&t.engine().stats().open_segment_table_bytes)
        });
        let queue = self
            .lower
            .flash()
            .map_or(0, |t| t.write_back_queue_bytes() as u64);
        add("write_back_queue_bytes", queue);
        add(
            "ram_known_bytes",
            malloced + index + ghost + ledger + flash_work + summaries + queue,
        );
        v
    }

    /// `stats items` in memcached's shape (see the module docs).
    pub(crate) fn items_stats(&self) -> Vec<(String, String)> {
        use crate::ram::index::Tier;
        let c = &self.meta.counters;
        let g = Counters::get;
        let now = self.now();
        let oldest = self.ram.oldest_stored();
        let age = oldest.map_or(0, |t| u64::from(now.saturating_sub(t)));
        // Items dropped (not moved) are counted in the class whose policy drops them.
        let flash = self.lower.flash();
        let lossy = if flash.is_some() { 2 } else { 1 };
        let mut v: Vec<(String, String)> = Vec::new();
        let mut add = |class: u32, k: &str, n: u64| {
            v.push((format!("items:{class}:{k}"), n.to_string()));
        };
        add(1, "number", self.count_tier(Tier::Ram));
        add(1, "age", age);
        add(1, "mem_requested", g(&c.live_bytes));
        let drops = |class: u32| if class == lossy { 1 } else { 0 };
        for class in 1..=lossy {
            if class == 2 {
                add(2, "number", self.count_tier(Tier::Flash));
                if let Some(tier) = flash {
                    add(
                        2,
                        "mem_requested",
                        flashtier_flash::FlashStats::get(&tier.engine().stats().bytes_used),
                    );
                }
            }
            let d = drops(class);
            add(class, "evicted", d * g(&c.evictions));
            add(class, "evicted_unfetched", d * g(&c.evicted_unfetched));
            add(class, "expired_unfetched", d * g(&c.expired_unfetched));
            add(class, "reclaimed", d * g(&c.reclaimed));
        }
        add(1, "moves_to_main", g(&c.moves_to_main));
        add(1, "reinserted", g(&c.reinserted));
        add(1, "compacted", g(&c.compacted));
        add(1, "segments_swept", g(&c.segments_swept));
        add(1, "rewritten_in_place", g(&c.rewritten_in_place));
        add(1, "segments_reclaimed", g(&c.segments_reclaimed));
        add(1, "evicted_forced", g(&c.evicted_forced));
        v
    }
}
