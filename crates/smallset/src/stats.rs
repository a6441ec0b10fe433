//! The small tier's counters and how they read as `small_*` stats (docs/stats.md, "Small
//! objects"). Counters only grow; `items`, `sets_used` and the staging and RAM figures are
//! gauges.
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::sets::Inner;

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
    /// Gauge: entries on pages (approximate across a `flush_all` racing a merge).
    pub items: AtomicU64,
    /// Gauge: pages holding at least one entry.
    pub sets_used: AtomicU64,
}

impl Counters {
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }
}

/// Every stat as a name/value pair, in a stable order.
pub(crate) fn pairs(i: &Inner) -> Vec<(String, String)> {
    let c = &i.counters;
    let g = |a: &AtomicU64| a.load(Relaxed);
    let staged = i.staging.len();
    let summary = i.summaries.ram_bytes();
    let stored = g(&c.bytes_stored);
    let written = g(&c.bytes_written);
    let wa = if stored == 0 {
        0.0
    } else {
        written as f64 / stored as f64
    };
    let list: Vec<(&str, String)> = vec![
        ("small_sets", i.sets.to_string()),
        ("small_sets_used", g(&c.sets_used).to_string()),
        ("small_items", (g(&c.items) + staged).to_string()),
        ("small_staged_items", staged.to_string()),
        ("small_staged_bytes", i.staging.bytes().to_string()),
        ("small_summary_bytes", summary.to_string()),
        ("small_ram_bytes", (summary + i.staging.bytes()).to_string()),
        ("small_inserts", g(&c.inserts).to_string()),
        ("small_inserts_refused", g(&c.inserts_refused).to_string()),
        ("small_deletes_staged", g(&c.deletes).to_string()),
        ("small_hits", (g(&c.hits) + g(&c.staging_hits)).to_string()),
        ("small_staging_hits", g(&c.staging_hits).to_string()),
        ("small_misses", g(&c.misses).to_string()),
        ("small_filter_negatives", g(&c.filter_negatives).to_string()),
        ("small_false_positives", g(&c.false_positives).to_string()),
        ("small_page_reads", g(&c.page_reads).to_string()),
        ("small_page_writes", g(&c.page_writes).to_string()),
        ("small_bytes_written", written.to_string()),
        ("small_bytes_stored", stored.to_string()),
        ("small_write_amplification", format!("{wa:.2}")),
        ("small_evictions", g(&c.evictions).to_string()),
        ("small_corrupt_pages", g(&c.corrupt_pages).to_string()),
        ("small_io_errors", g(&c.io_errors).to_string()),
    ];
    list.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}
