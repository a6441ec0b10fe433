//! The small tier's counters and how they read as `small_*` stats (docs/stats.md, "Small
//! objects"). Counters only grow; `items`, `sets_used` and the staging and RAM figures are
//! gauges.
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counters of the small tier.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub inserts: AtomicU64,
    pub inserts_refused: AtomicU64,
    pub deletes: AtomicU64,
    pub hits: AtomicU64,
    pub staging_hits: AtomicU64,
    pub misses: AtomicU64,
    pub filter_negatives: AtomicU64,
    pub false_positives: AtomicU64,
    pub page_reads: AtomicU64,
    pub page_writes: AtomicU64,
    pub bytes_written: AtomicU64,
    pub bytes_stored: AtomicU64,
    pub evictions: AtomicU64,
    pub corrupt_pages: AtomicU64,
    pub io_errors: AtomicU64,
    pub log_hits: AtomicU64,
    pub log_page_reads: AtomicU64,
    /// Log page reads whose entry was another key with the same tag (`logindex`).
    pub log_tag_false_reads: AtomicU64,
    pub log_pages_written: AtomicU64,
    pub log_bytes_written: AtomicU64,
    pub log_merges: AtomicU64,
    pub log_sets_merged: AtomicU64,
    pub log_objects_merged: AtomicU64,
    pub log_dropped: AtomicU64,
    pub log_lost_sets: AtomicU64,
    /// Superblock writes recording the log's tail and head (`recover::record_log`).
    pub log_records: AtomicU64,
    /// Gauge: entries on pages (approximate across a `flush_all` racing a merge).
    pub items: AtomicU64,
    /// Gauge: pages holding at least one entry.
    pub sets_used: AtomicU64,
    /// Gauge: RAM a log merge holds now (decoded log pages, the set pages of the chunk being
    /// rewritten; an estimate from buffer and entry sizes), 0 between merges.
    pub merge_bytes: AtomicU64,
    /// Gauge: the most `merge_bytes` has been since start.
    pub merge_peak_bytes: AtomicU64,
    /// Gauge: the most decoded log pages a merge has held at once (≤ `merge_pages`, unless
    /// one set alone has objects on more pages).
    pub merge_peak_pages: AtomicU64,
}

impl Counters {
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }

    /// A merge holds `bytes` in `pages` decoded log pages (plus set pages) now.
    pub fn merge_holds(&self, bytes: u64, pages: u64) {
        self.merge_bytes.store(bytes, Relaxed);
        self.merge_peak_bytes.fetch_max(bytes, Relaxed);
        self.merge_peak_pages.fetch_max(pages, Relaxed);
    }
}
