//! [`Inner`]: what the tier's handle (`sets`) and its flusher thread (`flusher`) share — the
//! device executor, the summaries, the staging buffer, the counters — and the key hash. Its
//! own module so the handle, the flusher and the stats all import it and none imports another
//! back.
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use bytes::Bytes;
use flashtier_flash::io::pool::{PooledBuf, ReadPool};
use flashtier_flash::io::uring::UringExecutor;
use flashtier_flash::io::{AlignedBuf, Executor, IoOp, IoRequest};
use flashtier_flash::Device;
use parking_lot::{Condvar, Mutex};

use crate::config::SmallConfig;
use crate::dirty::DirtyMap;
use crate::format::{Layout, SET_BYTES};
use crate::klog::KLog;
use crate::recover::{HeaderState, Recovered};
use crate::staging::Staging;
use crate::stats::Counters;
use crate::summary::{mix, Summaries};
use crate::Error;

/// Shared by the handle and the flusher thread.
pub(crate) struct Inner {
    pub(crate) dev_name: String,
    /// The device itself, for the superblock and the open-time scan (synchronous, rare);
    /// set pages are read and written through `exec`.
    pub(crate) dev: Arc<dyn Device>,
    pub(crate) exec: Arc<dyn Executor>,
    /// The same executor when it is io_uring (its lanes' reap handles, `SmallSets::reap_handle`).
    pub(crate) uring: Option<Arc<UringExecutor>>,
    /// Recycled page buffers (reads and writes take them instead of allocating and zeroing).
    pub(crate) pool: Arc<ReadPool>,
    pub(crate) sets: u32,
    /// Where the superblock, the dirty map and the sets are.
    pub(crate) layout: Layout,
    /// Which sets may have staged changes their page lacks (`dirty`).
    pub(crate) dirty: DirtyMap,
    pub(crate) generation: AtomicU64,
    pub(crate) summaries: Summaries,
    pub(crate) staging: Staging,
    /// The on-flash log in front of the sets and its RAM index (`klog`), if the layout has one.
    pub(crate) klog: Option<KLog>,
    pub(crate) cfg: SmallConfig,
    pub(crate) counters: Counters,
    /// Set when work is staged past the budget or at close; the flusher waits on it.
    pub(crate) wake: Mutex<bool>,
    pub(crate) wake_cv: Condvar,
    pub(crate) closed: AtomicBool,
    /// Held by a merge from batch taken to staging done: two merges of one set at once
    /// could write an older page last (the flusher thread and `flush_staged`); and by
    /// `clear` (`flush_all`), so no batch straddles a generation. Taken before `header` and
    /// the staging partitions.
    pub(crate) merging: Mutex<()>,
    /// Set by a clean close (`recover::close`): a change after it reopens the superblock.
    pub(crate) sealed: AtomicBool,
    /// What the superblock says, as this process wrote it; held while writing it.
    pub(crate) header: Mutex<HeaderState>,
    /// What the open found (fixed once the tier is shared).
    pub(crate) recovered: Recovered,
    /// The machine's boot id at open (written to the superblock while open).
    pub(crate) boot_id: [u8; 16],
}

/// The key's 64-bit hash (independent of the cache's index hash).
pub(crate) fn key_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(key, 0x736d_616c_6c73_6574)
}

impl Inner {
    pub(crate) fn set_of(&self, hash: u64) -> u32 {
        ((u128::from(mix(hash)) * u128::from(self.sets)) >> 64) as u32
    }

    /// Wake the flusher.
    pub(crate) fn kick(&self) {
        *self.wake.lock() = true;
        self.wake_cv.notify_one();
    }

    /// Read set `set`'s page.
    pub(crate) fn read_page(&self, set: u32) -> impl Future<Output = Result<Bytes, Error>> {
        self.read_at(self.layout.page_off(set))
    }

    /// Staged bytes from which the flusher is woken: the log's append size, or without a
    /// log the staging budget.
    pub(crate) fn kick_at(&self) -> u64 {
        match self.klog {
            Some(_) => crate::config::LOG_APPEND_BYTES.min(self.cfg.staging_bytes),
            None => self.cfg.staging_bytes,
        }
    }

    /// A buffer of `len` bytes (whole pages), contents undefined: the caller overwrites all
    /// of it (a read, or an encode that fills every byte). Single pages come from the pool;
    /// longer ones (log appends) are allocated, so the pool holds at most its 256 pages.
    pub(crate) fn page_buf(&self, len: usize) -> AlignedBuf {
        if len == SET_BYTES {
            self.pool.take(len)
        } else {
            AlignedBuf::zeroed(len)
        }
    }

    /// A read buffer as `Bytes` that return it to the pool when dropped.
    pub(crate) fn bytes_of(&self, buf: AlignedBuf) -> Bytes {
        PooledBuf::into_bytes(buf, self.pool.clone())
    }

    /// Give written single-page buffers back to the pool (those the executor no longer
    /// holds).
    pub(crate) fn recycle(&self, bufs: Vec<Arc<AlignedBuf>>) {
        for b in bufs {
            if let Ok(b) = Arc::try_unwrap(b) {
                if b.len() == SET_BYTES {
                    self.pool.give(b);
                }
            }
        }
    }

    /// Read the 4 KiB page at byte `off`.
    pub(crate) fn read_at(&self, off: u64) -> impl Future<Output = Result<Bytes, Error>> {
        let (promise, done) = flashtier_flash::completion::pair();
        self.exec.submit(IoRequest {
            op: IoOp::Read {
                dev: 0,
                off,
                buf: self.page_buf(SET_BYTES),
            },
            done: Box::new(move |r| promise.complete(Ok(r))),
        });
        let pool = self.pool.clone();
        async move {
            match done.await {
                Ok(Ok(Some(buf))) => Ok(PooledBuf::into_bytes(buf, pool)),
                Ok(Ok(None)) => Err(Error::Io(std::io::Error::other("read returned no buffer"))),
                Ok(Err(e)) => Err(Error::Io(e)),
                Err(_) => Err(Error::Closed),
            }
        }
    }

    /// Keys a lookup would find (expired ones not yet dropped included): exact when nothing
    /// is staged, else an estimate. Entries on pages (exact, kept by merges), plus each
    /// staged put whose key the set's filter says is not on the page, minus each staged
    /// delete whose key the filter says may be there. Without a page read a staged change
    /// cannot tell a filter false positive from a key on the page: each such put is counted
    /// as replacing one (0) and each such delete as removing one (-1), so the error is at
    /// most the staged entries whose filter answer was a false positive.
    pub(crate) fn live_items_estimate(&self) -> u64 {
        let mut delta: i64 = 0;
        self.staging.for_each(|set, s| {
            let maybe = self.summaries.may_hold(set, s.hash);
            match (&s.change, maybe) {
                (crate::staging::Change::Put { .. }, false) => delta += 1,
                (crate::staging::Change::Delete, true) => delta -= 1,
                _ => {}
            }
        });
        // The log's objects, judged by the filter when they were appended.
        if let Some(l) = &self.klog {
            delta += l.index.estimate_delta();
        }
        self.counters
            .items
            .load(Relaxed)
            .saturating_add_signed(delta)
    }

    /// Bytes of the summaries and the log index advised `MADV_HUGEPAGE` (`hugepages`).
    fn hugepage_bytes(&self) -> u64 {
        self.summaries.hugepage_bytes() + self.klog.as_ref().map_or(0, |l| l.index.hugepage_bytes())
    }

    /// Every stat as a name/value pair, in a stable order.
    pub(crate) fn stat_pairs(&self) -> Vec<(String, String)> {
        let i = self;
        let c = &i.counters;
        let g = |a: &AtomicU64| a.load(Relaxed);
        let staged = i.staging.len();
        let summary = i.summaries.ram_bytes();
        let (log_pages, log_used, log_items, log_index, log_tag_bits) = match &i.klog {
            Some(l) => (
                u64::from(l.pages),
                l.used(),
                l.index.live(),
                l.index.ram_bytes(),
                l.index.tag_bits(),
            ),
            None => (0, 0, 0, 0, 0),
        };
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
            (
                "small_items",
                (g(&c.items) + staged + log_items).to_string(),
            ),
            (
                "small_live_items_estimate",
                self.live_items_estimate().to_string(),
            ),
            ("small_staged_items", staged.to_string()),
            ("small_staged_bytes", i.staging.bytes().to_string()),
            (
                "small_staged_peak_bytes",
                i.staging.peak_bytes().to_string(),
            ),
            ("small_merge_bytes", g(&c.merge_bytes).to_string()),
            ("small_merge_peak_bytes", g(&c.merge_peak_bytes).to_string()),
            ("small_merge_peak_pages", g(&c.merge_peak_pages).to_string()),
            ("small_merge_page_limit", i.cfg.merge_pages.to_string()),
            ("small_set_filter_bytes", summary.to_string()),
            (
                "small_ram_bytes",
                (summary + i.staging.bytes() + log_index).to_string(),
            ),
            ("small_log_pages", log_pages.to_string()),
            ("small_log_pages_used", log_used.to_string()),
            ("small_log_items", log_items.to_string()),
            ("small_log_index_bytes", log_index.to_string()),
            ("small_hugepage_bytes", self.hugepage_bytes().to_string()),
            ("small_log_hits", g(&c.log_hits).to_string()),
            ("small_log_page_reads", g(&c.log_page_reads).to_string()),
            (
                "small_log_tag_false_reads",
                g(&c.log_tag_false_reads).to_string(),
            ),
            ("small_log_tag_width", log_tag_bits.to_string()),
            (
                "small_log_pages_written",
                g(&c.log_pages_written).to_string(),
            ),
            (
                "small_log_bytes_written",
                g(&c.log_bytes_written).to_string(),
            ),
            ("small_log_merges", g(&c.log_merges).to_string()),
            ("small_log_sets_merged", g(&c.log_sets_merged).to_string()),
            (
                "small_log_objects_merged",
                g(&c.log_objects_merged).to_string(),
            ),
            ("small_log_dropped", g(&c.log_dropped).to_string()),
            ("small_log_lost_sets", g(&c.log_lost_sets).to_string()),
            ("small_log_records", g(&c.log_records).to_string()),
            ("small_inserts", g(&c.inserts).to_string()),
            ("small_inserts_refused", g(&c.inserts_refused).to_string()),
            ("small_deletes_staged", g(&c.deletes).to_string()),
            (
                "small_hits",
                (g(&c.hits) + g(&c.staging_hits) + g(&c.log_hits)).to_string(),
            ),
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
            (
                "small_restart_clean",
                u8::from(i.recovered.clean).to_string(),
            ),
            ("small_recovered_items", i.recovered.items.to_string()),
            (
                "small_recovered_dirty_sets",
                i.recovered.dirty_sets.to_string(),
            ),
            (
                "small_recovered_log_items",
                i.recovered.log_items.to_string(),
            ),
            (
                "small_recovered_log_pages",
                i.recovered.log_pages.to_string(),
            ),
            (
                "small_recovered_log_lost_pages",
                i.recovered.log_lost_pages.to_string(),
            ),
        ];
        list.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }
}
