//! Block cache counters (FlashCache's set and more), relaxed atomics updated by the data
//! path and the writeback task. Block counters count cache blocks, not requests.
use std::sync::atomic::{AtomicU64, Ordering};

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
    /// Dirty blocks written back (all causes).
    cleanings,
    /// Dirty blocks written back because they reached their flush period.
    fallow_cleanings,
    /// Dirty blocks written back by the age-driven (flush period) rate.
    period_cleanings,
    /// Dirty blocks written back because the dirty high water was crossed.
    threshold_cleanings,
    /// Dirty blocks written back by an explicit flush (ctl flush, detach, mode change).
    flush_cleanings,
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
    /// Cache device read errors (served from the backing when the block was clean).
    ssd_read_errors,
    /// Times a writer waited because dirty blocks reached dirty_max_pct or flash was full.
    write_stalls,
    /// Clean watermarks persisted.
    watermark_writes,
    /// Dirty blocks the flash engine could not keep (must stay 0).
    dirty_lost,
    /// Switches away from writeback started.
    mode_switches,
}

/// Add `n` to a counter.
pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}
