//! Block cache counters (FlashCache's set and more), relaxed atomics updated by the data
//! path and the writeback task. Block counters count cache blocks, not requests. Also
//! [`BlockCache::stats_pairs`], the flat `(name, value)` list the server's stats file and
//! `/stats` report (these counters, gauges read from the index and the mode switch, then
//! the flash engine's).
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
    /// Clean blocks reclaim moved instead of dropping, not read since the last pass, because
    /// the cache held fewer blocks than its fill line (97 % of `capacity_blocks`).
    moved_fill_blocks,
    /// Fill moves not granted because a writer had waited for a free flash segment within
    /// the last fill slack of appends (reclaim's optional copies yield to writers).
    fill_moves_withheld,
    /// Clean blocks admitted that the sketch saw accessed before lately: they count as read
    /// once, so the next CLOCK or reclaim pass keeps them.
    history_hits,
    /// Read misses not admitted by the frequency filter: at the fill line, the block was
    /// accessed no more often lately than the clean block it would replace (or, in a
    /// sequential stream, not accessed before lately).
    admit_refusals,
    /// Read misses of those not admitted by the door: below the fill line, from
    /// `admit_door_pct` of `capacity_blocks` up, while reclaim drops clean blocks, the sketch
    /// had not seen the block accessed before this miss (also counted in `admit_refusals`).
    door_refusals,
    /// Times the working set moved (a window of `capacity_blocks / 4` random reads missed
    /// far more than usual): the sketch and every read count were cleared.
    working_set_shifts,
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
    /// Blocks a request that never waits for space (a read miss's admission, a
    /// write-through's copy) left uncached because flash was full (NoSpace) or its stream's
    /// chunk writes were all in flight (Busy).
    uncached_flash_full,
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
    /// READ requests served wholly from the cache device.
    read_hit_requests,
    /// READ requests that read at least one block from the backing.
    read_miss_requests,
    /// READ requests that read some blocks from the cache device and some from the backing
    /// (also counted in read_miss_requests): a request hits only if all its blocks do.
    read_partial_requests,
    /// Microseconds READ requests served wholly from the cache took, summed.
    read_hit_us,
    /// Microseconds READ requests that went to the backing took, summed.
    read_miss_us,
    /// Microseconds WRITE requests took (waits for space included), summed.
    write_us,
    /// Microseconds writes waited for dirty or flash space, summed (part of write_us).
    write_wait_us,
    /// Of write_wait_us: microseconds writers waited at dirty_max_pct (writeback behind).
    write_wait_dirty_us,
    /// Of write_wait_us: microseconds writers slept because flash was full (NoSpace: no free
    /// segment, space comes from writeback and reclaim).
    write_wait_nospace_us,
    /// Of write_wait_us: microseconds writers slept because the stream's chunk writes were
    /// all in flight (Busy).
    write_wait_busy_us,
    /// Microseconds FLUSH requests (and FUA writes' flushes) took, summed.
    flush_us,
    /// Microseconds of flush_us spent in the cache device's flush (write buffers, fdatasync).
    flush_cache_us,
    /// Cache device flushes FLUSH requests and FUA writes ran: fewer than flushes + fua_writes
    /// when a FLUSH found every earlier write covered by another's flush (group commit) or
    /// no write since the last one.
    flush_cache_syncs,
    /// FLUSH requests forwarded to the backing (a client write reached it since its last
    /// flush: write-through, write-around, sequential bypass).
    backing_flushes,
    /// Microseconds of flush_us spent in the backing's flush.
    flush_backing_us,
}

/// Microseconds since `t`, for the `*_us` counters.
pub(crate) fn us_since(t: std::time::Instant) -> u64 {
    u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// Add `n` to a counter.
pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}
