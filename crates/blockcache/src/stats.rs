//! Block cache counters (FlashCache's set and more), relaxed atomics updated by the data
//! path and the writeback task. Block counters count cache blocks, not requests. Also
//! [`BlockCache::stats_pairs`], the flat `(name, value)` list the server's stats file and
//! `/stats` report (these counters, gauges read from the index and the mode switch, then
//! the flash engine's).
use std::sync::atomic::{AtomicU64, Ordering};

use crate::cache::BlockCache;

macro_rules! counters {
    ($( $(#[doc = $doc:literal])* $name:ident ),* $(,)?) => {
        /// Counters; all only grow.
        #[derive(Debug, Default)]
        pub struct BlockStats {
            $( $(#[doc = $doc])* pub $name: AtomicU64, )*
        }

        impl BlockStats {
            /// Every counter as `(name, value)`, in declaration order.
            pub fn pairs(&self) -> Vec<(&'static str, u64)> {
                vec![ $( (stringify!($name), self.$name.load(Ordering::Relaxed)), )* ]
            }

            /// Every counter's name and doc text, in declaration order.
            pub fn describe() -> Vec<(&'static str, &'static str)> {
                vec![ $( (stringify!($name), concat!($($doc),*).trim_ascii()), )* ]
            }
        }
    };
}

counters! {
    /// READ requests.
    read_requests,
    /// WRITE and WRITE_ZEROES requests.
    write_requests,
    /// Blocks read by clients.
    reads,
    /// Blocks written by clients.
    writes,
    /// Blocks read that were found in the cache.
    read_hits,
    /// Blocks written that were already cached.
    write_hits,
    /// Blocks written that were cached and dirty.
    dirty_write_hits,
    /// Clean blocks evicted to make room (reclaim dropped them).
    replacements,
    /// Clean blocks evicted from the index to keep `cached_blocks` at `capacity_blocks`
    /// (CLOCK: blocks read since the hand last passed get a second chance).
    capacity_evictions,
    /// Clean blocks reclaim moved (copied) instead of dropping, because they were read
    /// since the last pass.
    moved_clean_blocks,
    /// Dirty (or not yet durably clean) blocks reclaim moved.
    moved_dirty_blocks,
    /// Dirty blocks written back (all causes).
    cleanings,
    /// Dirty blocks written back because they reached 3/4 of their flush period (outside
    /// threshold draining and flushes).
    fallow_cleanings,
    /// Dirty blocks written back by the age-driven (flush period) rate.
    period_cleanings,
    /// Dirty blocks written back while draining from the dirty high-water mark down to the
    /// low one (or for a writer waiting at dirty_max_pct).
    threshold_cleanings,
    /// Dirty blocks written back by an explicit flush (ctl flush, detach, mode change).
    flush_cleanings,
    /// Backing writes issued by writeback (each a run of adjacent dirty blocks).
    writeback_writes,
    /// Bytes written to the backing by writeback.
    writeback_bytes,
    /// Writeback backing writes that merged two or more adjacent blocks.
    coalesced_writes,
    /// Backing read requests.
    disk_reads,
    /// Backing write requests (client write-through/around and writeback runs).
    disk_writes,
    /// Blocks read from the cache device.
    ssd_reads,
    /// Blocks written to the cache device.
    ssd_writes,
    /// Blocks read from the backing and not admitted.
    uncached_reads,
    /// Blocks written to the backing without being cached.
    uncached_writes,
    /// Uncached reads because of the sequential bypass.
    uncached_sequential_reads,
    /// Uncached writes because of the sequential bypass.
    uncached_sequential_writes,
    /// Blocks admitted on a read miss.
    read_admits,
    /// Partial-block writes done read-modify-write.
    partial_writes,
    /// NBD FLUSH requests.
    flushes,
    /// Writes with FUA.
    fua_writes,
    /// Backing errors seen (each retried).
    backing_errors,
    /// Writeback runs (and backing flushes after them) that failed; their blocks stay dirty
    /// and are retried after a per-range hold.
    writeback_write_errors,
    /// Writes that failed with EIO after waiting `write_stall_max_ms` for dirty or flash
    /// space that writeback could not free.
    write_stall_timeouts,
    /// Cache device read errors (served from the backing when the block was clean).
    ssd_read_errors,
    /// Times a writer waited because dirty blocks reached dirty_max_pct or flash was full.
    write_stalls,
    /// Clean watermarks persisted.
    watermark_writes,
    /// Dirty blocks the flash engine could not keep (must stay 0).
    dirty_lost,
    /// Backing-write intents appended (one per write that reached the backing around the
    /// cache: writethrough, writearound, sequential bypass).
    intents_written,
    /// Flash syncs that made intents durable (group commit: one covers every intent
    /// appended before it started).
    intent_syncs,
    /// Writes around the cache that needed no intent: none of their blocks ever had a
    /// record on the cache device.
    intents_skipped,
    /// Drop intents appended: reclaim dropped the newest record of a block, so its older
    /// records on flash are stale after a crash.
    drop_intents,
    /// Floor tables written (a floor was raised: every 65,536 intents, or a drop intent
    /// could not be appended).
    floor_writes,
    /// Switches away from writeback started.
    mode_switches,
    /// Requests not admitted because they were part of a sequential stream.
    bypass_sequential_requests,
    /// Requests not admitted because admission is off for their direction (admit_reads, admit_writes).
    bypass_direction_requests,
    /// Requests not admitted because they were larger than admit_max_kb.
    bypass_size_requests,
    /// Requests not admitted because they fell outside admit_offset_min..admit_offset_max.
    bypass_offset_requests,
}

/// Add `n` to a counter.
pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl BlockCache {
    /// Every statistic as `(name, value)`: the cache's counters and gauges, then the flash
    /// engine's (`flash_*`).
    pub fn stats_pairs(&self) -> Vec<(String, String)> {
        let s = &self.io.shared.stats;
        let mut v: Vec<(String, String)> = s
            .pairs()
            .into_iter()
            .map(|(k, n)| (k.to_string(), n.to_string()))
            .collect();
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let pct = |a: u64, b: u64| {
            if b == 0 {
                "0.00".to_string()
            } else {
                format!("{:.2}", a as f64 * 100.0 / b as f64)
            }
        };
        let (dirty, cached, wm, index_bytes) = {
            let index = self.io.shared.index.lock();
            (
                index.dirty() as u64,
                index.map.len() as u64,
                index.clean_watermark(),
                index.ram_bytes(),
            )
        };
        v.push((
            "read_hit_percent".into(),
            pct(load(&s.read_hits), load(&s.reads)),
        ));
        v.push((
            "write_hit_percent".into(),
            pct(load(&s.write_hits), load(&s.writes)),
        ));
        v.push(("dirty_blocks".into(), dirty.to_string()));
        v.push((
            "writeback_held_blocks".into(),
            self.held_blocks().to_string(),
        ));
        v.push(("cached_blocks".into(), cached.to_string()));
        v.push(("index_bytes".into(), index_bytes.to_string()));
        v.push((
            "capacity_blocks".into(),
            self.io.capacity_blocks.to_string(),
        ));
        v.push(("dirty_percent".into(), pct(dirty, self.io.capacity_blocks)));
        v.push(("block_size".into(), self.io.block_size.to_string()));
        v.push(("writeback_rate".into(), self.writeback.rate().to_string()));
        // The cache file: bytes of the blocks' current records, of dead (overwritten or
        // evicted, not yet reclaimed) records, and the live share of its capacity.
        let record =
            flashtier_flash::format::record::padded_len(0, self.io.block_size as usize) as u64;
        let live = cached * record;
        let dead = self
            .io
            .flash
            .stats()
            .pairs()
            .into_iter()
            .find(|(k, _)| *k == "flash_bytes_dead")
            .map_or(0, |(_, n)| n);
        v.push(("live_bytes".into(), live.to_string()));
        v.push(("dead_bytes".into(), dead.to_string()));
        let capacity = self.flash_info.capacity.max(1);
        v.push((
            "live_ratio".into(),
            format!("{:.4}", live as f64 / capacity as f64),
        ));
        v.push(("clean_watermark".into(), wm.to_string()));
        v.push((
            "clean_watermark_persisted".into(),
            self.io
                .shared
                .wm_persisted
                .load(Ordering::Relaxed)
                .to_string(),
        ));
        v.push((
            "recovered_dirty_blocks".into(),
            self.recovery.dirty_blocks.to_string(),
        ));
        v.push(("mode".into(), self.tunables.mode().name().to_string()));
        let sw = self.mode_switch();
        let running = sw
            .as_ref()
            .is_some_and(|s| s.phase == crate::switch::SwitchPhase::Running);
        v.push((
            "mode_switch_in_progress".into(),
            u64::from(running).to_string(),
        ));
        v.push((
            "mode_switch_dirty_left".into(),
            if running { dirty } else { 0 }.to_string(),
        ));
        v.push((
            "recovered_clean_blocks".into(),
            self.recovery.clean_kept.to_string(),
        ));
        v.push((
            "recovered_stale_blocks".into(),
            self.recovery.stale_dropped.to_string(),
        ));
        v.extend(
            self.io
                .flash
                .stats()
                .pairs()
                .into_iter()
                .map(|(k, n)| (k.to_string(), n.to_string())),
        );
        v
    }
}
