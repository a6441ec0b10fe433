//! Engine counters: one struct of atomics, updated by every engine thread with relaxed
//! ordering (they are statistics, not synchronisation), exported as `flash_*` name/value pairs
//! for `stats` and Prometheus.
use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! stats {
    (
        $( $(#[doc = $doc:literal])* $name:ident ),* $(,)?
        ; aliases: $( $(#[doc = $adoc:literal])* $alias:ident = $target:ident ),* $(,)?
    ) => {
        /// Flash engine statistics. Counters only grow; gauges are marked as such.
        #[derive(Debug, Default)]
        pub struct FlashStats {
            $( $(#[doc = $doc])* pub $name: AtomicU64, )*
            /// Device read and write latency (submit to completion, queueing included).
            pub latency: IoLatency,
        }

        impl FlashStats {
            /// Every counter as `("flash_<name>", value)`, in declaration order, then each old
            /// name with its counter's value (so dashboards built on old names keep working).
            pub fn pairs(&self) -> Vec<(&'static str, u64)> {
                vec![
                    $( (concat!("flash_", stringify!($name)), self.$name.load(Ordering::Relaxed)), )*
                    $( (concat!("flash_", stringify!($alias)), self.$target.load(Ordering::Relaxed)), )*
                ]
            }

            /// Every counter's name (as [`Self::pairs`] gives it) and its doc text; a text
            /// starting `Gauge` marks a level rather than a running total.
            pub fn describe() -> Vec<(&'static str, &'static str)> {
                vec![
                    $( (concat!("flash_", stringify!($name)), concat!($($doc),*).trim_ascii()), )*
                    $( (concat!("flash_", stringify!($alias)), concat!($($adoc),*).trim_ascii()), )*
                ]
            }
        }
    };
}

stats! {
    /// Records appended (all streams, reclaim rewrites included).
    objects_written,
    /// Record bytes appended (padded record sizes).
    bytes_written,
    /// Records read successfully (from flash or from a write buffer).
    objects_read,
    /// Record bytes read successfully.
    bytes_read,
    /// Reads served from a RAM write buffer instead of the device.
    buffer_reads,
    /// Gauge: record bytes in segments that are not free.
    bytes_used,
    /// Gauge (estimate): bytes of records marked dead (fragmentation), from `mark_dead`: per
    /// segment, its dead value records times the mean size of its value records.
    bytes_dead,
    /// Gauge (estimate): `bytes_dead` in the oldest quarter of sealed segments by seq (four
    /// bands of equal seq span from the oldest sealed segment to the newest seq).
    bytes_dead_age1,
    /// Gauge (estimate): `bytes_dead` in the second oldest quarter of sealed segments by seq.
    bytes_dead_age2,
    /// Gauge (estimate): `bytes_dead` in the second newest quarter of sealed segments by seq.
    bytes_dead_age3,
    /// Gauge (estimate): `bytes_dead` in the newest quarter of sealed segments by seq.
    bytes_dead_age4,
    /// Gauge: segments in the device set.
    segments_total,
    /// Gauge: free segments.
    segments_free,
    /// Segments reclaimed (freed for reuse).
    reclaims,
    /// Segments dropped because every record had expired (no value reads).
    reclaims_expired,
    /// Records rewritten by reclaim into the reclaim stream.
    records_rewritten,
    /// Bytes rewritten by reclaim.
    bytes_rewritten,
    /// Records dropped by reclaim (user decision, expiry, keep limit).
    records_dropped,
    /// Drop notes appended by reclaim: a record the user still indexed was dropped, and a
    /// TOMBSTONE with its key id and version keeps an older copy of the key (in another
    /// segment) from coming back at recovery.
    drop_notes,
    /// Drop notes that could not be appended (the record was dropped anyway; logged).
    drop_notes_failed,
    /// Records or summaries that failed their checksum (reads, recovery, reclaim).
    checksum_failures,
    /// Gauge: IO requests queued or in flight in the executor.
    io_queue_depth,
    /// Reads that had to wait for a device read slot (`read_queue_limit` reads were in flight,
    /// or others were already waiting); they start, in arrival order, as earlier reads finish.
    reads_waited,
    /// Gauge: reads waiting for a device read slot now.
    reads_waiting,
    /// Gauge: record reads at the device now (at most `read_queue_limit`).
    reads_in_flight,
    /// Appends refused because no segment was free (or the write buffers were full).
    append_rejected,
    /// Failed device writes (every try; a chunk is tried up to 3 times).
    write_errors,
    /// Writes tried again after an error.
    write_retries,
    /// Chunk writes that failed every try (their records are lost from flash).
    chunks_lost,
    /// Records in chunks whose write failed (handed to the user's `lost`).
    records_lost,
    /// Failed device reads.
    read_errors,
    /// Failed device syncs.
    sync_errors,
    /// Device syncs run before a sealed segment's summary write, so the summary never
    /// reaches the device before the records it names (one per seal at most).
    seal_syncs,
    /// Gauge: devices out of allocation (failing or offline).
    devices_failed,
    /// Gauge: devices failing (write or sync errors, being probed).
    devices_failing,
    /// Gauge: devices offline (kept failing; probed at the longest backoff).
    devices_offline,
    /// Devices that went from healthy to failing (or straight to offline).
    device_failures,
    /// Devices that went from failing to offline.
    device_offlines,
    /// Devices back in allocation after a successful probe.
    device_recoveries,
    /// Probes of failing or offline devices.
    device_probes,
    /// Probes that failed.
    device_probe_failures,
    /// Durability flushes completed.
    flushes,
    /// Records reported to the user by recovery.
    recovered_records,
    /// Segments recovered (sealed with a summary, or scanned).
    recovered_segments,
    /// Segments recovered in part or not at all: torn or damaged records (the records past
    /// the damage are lost), or a segment that could not be read (retired for the run).
    recovery_damaged_segments,
    /// Segment header pages that were neither a valid header nor zero (overwritten), or
    /// could not be read, at recovery: whatever those segments held is lost.
    recovery_unreadable_headers,
    /// Devices formatted over something that was neither blank nor a valid superblock of
    /// this set (the cache started empty).
    superblocks_lost,
    /// Records reclaim could not read (checksum) and dropped; the user's index entries are
    /// removed through `evicted`.
    records_unreadable,
    /// Segments retired by reclaim because they could not be read (never reused this run).
    segments_retired,
    /// Gauge: microseconds the last recovery took.
    recovery_time_us,
    /// Bytes written to devices (records, padding, headers, summaries): write amplification
    /// is this over `bytes_written`.
    device_bytes_written,
    /// Bytes read from devices.
    device_bytes_read,
    /// Bytes reclaim read from devices (summaries, scans and the records it rewrote).
    reclaim_bytes_read,
    /// Gauge: bytes of the engine's working buffers now (write chunks open, in flight or
    /// pooled, and reclaim's read window): its flash working memory.
    work_bytes,
    /// Gauge: the highest `work_bytes` since start.
    work_peak_bytes,
    /// Gauge: bytes of the open segments' summaries in RAM (one entry per record appended to
    /// a segment still open, kept per stream for the next segment after a seal).
    open_segment_table_bytes,
    /// Crash-journal entries committed (header-only records made to survive a crash before
    /// the log's next flush).
    journal_entries,
    /// Journal entries whose record the log refused at first (appended again later).
    journal_uncovered,
    /// Group syncs of the journal (`journal_mode=sync`).
    journal_syncs,
    /// Flushes that retired journal entries (their records durable in the log).
    journal_retires,
    /// Gauge: journal entries not yet retired.
    journal_pending,
    /// Commits that found the journal ring full and waited for a retiring flush.
    journal_full_waits,
    /// Times the ring stayed full past the wait and its oldest entries were given up (the
    /// next start is then empty).
    journal_entries_given_up,
    /// Microseconds reclaim spent on victims (summary reads, verdicts, copies, the flush
    /// before the erases, the erases): with `reclaims`, the time it takes to free a segment.
    reclaim_us,
    /// Of `reclaim_us`, microseconds waiting for the durability flush before the erase
    /// (the chunk writes in flight, then the device sync).
    reclaim_flush_us,
    /// Batches of victims reclaim freed under one flush (at most `RECLAIM_BATCH`, 8, each):
    /// `reclaims` ÷ this is the mean batch.
    reclaim_batches,
    /// Victims reclaim took ahead of need (beyond `free_high_watermark`) because their value
    /// records were all dead: freed at no cost in items (a part of `reclaims`).
    reclaims_ahead,
    /// Appends refused because no segment was free beyond the reserve (`NoSpace`; a part of
    /// `append_rejected`, the rest are write buffers in flight).
    append_no_space,
    /// Gauge: the bound on `work_bytes` from the configuration: the chunk buffer limit
    /// (`max_chunk_buffers`) plus reclaim's read window (one chunk), times `chunk_size`.
    work_limit_bytes,
    ; aliases:
    /// Old name of `reads_waited`, same value: reads over `read_queue_limit` were once refused
    /// (and counted here); they now wait.
    read_queue_full = reads_waited,
}

/// Device IO latency histograms of one engine.
#[derive(Debug, Default)]
pub struct IoLatency {
    /// Device reads (record fetches), submit to completion.
    pub read: flashtier_metrics::Histogram,
    /// Device writes (chunks, segment tails), submit to completion.
    pub write: flashtier_metrics::Histogram,
}

impl FlashStats {
    pub(crate) fn add(c: &AtomicU64, v: u64) {
        c.fetch_add(v, Ordering::Relaxed);
    }
    pub(crate) fn set(c: &AtomicU64, v: u64) {
        c.store(v, Ordering::Relaxed);
    }
    /// Read one counter.
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}
