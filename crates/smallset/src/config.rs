//! [`SmallConfig`]: the small tier's settings (a leaf, so the tier's parts can read them
//! without importing the handle).

/// Settings of the small tier.
#[derive(Clone, Debug)]
pub struct SmallConfig {
    /// The staging buffer's budget in bytes. Without a log the flusher merges into sets
    /// while more is staged; with one it is the page-building buffer in front of the log
    /// (appended from [`LOG_APPEND_BYTES`] on). Inserts are refused past twice this.
    /// Default: `16 MiB`.
    pub staging_bytes: u64,
    /// Sets merged per flusher batch (their reads, then their writes, in flight at once).
    /// Default: 512.
    pub batch_sets: usize,
    /// Fraction of the device (after the superblock) for the on-flash log in front of the
    /// sets (`klog`, Kangaroo's KLog); 0 (or too few pages for [`crate::format::MIN_LOG_PAGES`])
    /// turns it off: staged batches then go straight to set pages. At most 0.9. A changed
    /// value changes the layout: the next open starts the file empty. Default: `0.10` (with
    /// 4-byte index links it costs the RAM 5 % did with 8-byte ones, for fewer page
    /// rewrites per object: docs/benchmarks.md, "Small objects (issue 28)").
    pub log_fraction: f64,
    /// Kangaroo's admission threshold: a log merge rewrites a set only when it brings at
    /// least this many new objects (or any delete, or a key the set may hold); fewer are
    /// dropped (a miss later, never a wrong value; stat `small_log_dropped`). 1 rewrites
    /// every set. Default: 1.
    pub merge_min: usize,
    /// Serving threads that read the tier from their own io_uring ring (a thread-per-core
    /// server's workers, each on the lane it chose with `flashtier_flash::use_ring_lane`,
    /// reaping it with [`crate::SmallSets::reap_handle`]): the tier opens one ring per lane
    /// plus one for its flusher thread, so a GET's page read is submitted and completed on
    /// the thread that serves it and never waits behind the flusher's writes. Default: 1.
    pub io_lanes: usize,
    /// The widest tag a log index link keeps of a key's hash (`logindex`: a link is 4 bytes,
    /// and a large log leaves fewer bits than this). A narrower tag makes lookups read more
    /// log pages and removes stage more tombstones; it never changes an answer (tests set it
    /// to 0–2 bits so tags collide all the time). Default: 16.
    pub log_tag_bits: u32,
    /// Called on the flusher thread when it goes idle after appending or merging (issue 28,
    /// RSS at rest): a merge decodes up to thousands of log pages and frees them, and an
    /// allocator that keeps a thread's freed pages until that thread allocates again (mimalloc)
    /// would hold them while the flusher sleeps. The server passes its allocator's collect.
    /// Default: none.
    pub release_memory: Option<fn()>,
    /// Decoded log pages a log merge holds at most (issue 28, the fill's memory peak): its
    /// segment's and those of the rest of the log its sets have objects on. The segment is at
    /// most a quarter of this; the sets are merged in chunks whose pages fit beside it, and the
    /// other pages are dropped between chunks (read again when a later chunk needs one:
    /// `small_log_page_reads`). A decoded page costs its 4 KiB buffer plus its entries
    /// (`small_merge_bytes`, `small_merge_peak_bytes`), so a merge's working set is about
    /// `merge_pages` × 7–11 KiB whatever the log's size. Default: 2048.
    pub merge_pages: usize,
    /// Put the fixed arrays a GET walks — the set summaries and the log index's heads and
    /// links — in mappings advised `MADV_HUGEPAGE` over their 2 MiB-aligned part (`hugepages`:
    /// fewer TLB misses per lookup; RSS grows by less than the arrays' own size). Stat
    /// `small_hugepage_bytes`. Default: false.
    pub hugepages: bool,
}

/// Staged bytes from which the flusher appends to the log (a few pages' worth).
pub const LOG_APPEND_BYTES: u64 = 256 << 10;

impl Default for SmallConfig {
    fn default() -> Self {
        Self {
            staging_bytes: 16 << 20,
            batch_sets: 512,
            log_fraction: 0.10,
            merge_min: 1,
            io_lanes: 1,
            log_tag_bits: 16,
            release_memory: None,
            merge_pages: 2048,
            hugepages: false,
        }
    }
}
