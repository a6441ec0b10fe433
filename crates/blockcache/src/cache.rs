//! [`BlockCache`]: the cache policy as a [`BlockBackend`] over the flash engine and a backing
//! backend. This file holds the struct, its settings and recovery report, the flush-job
//! state, the on-flash constants, and small accessors; the rest of `impl BlockCache` lives
//! in files named for what they hold:
//! - `open`: opening the engine and recovery into the index;
//! - `reclaim_handler`: `Shared` (state the reclaimer sees) and the reclaim callbacks;
//! - `block_io`: stripe locks, the versioned record append, checked cached reads, backing
//!   I/O with retries — the primitives both request paths use;
//! - `read` / `write`: the request paths (read, write, flush, write-zeroes);
//! - `backend`: the [`BlockBackend`] impl the NBD server calls;
//! - `stats`: [`BlockCache::stats_pairs`]; `writeback`, `switch`, `warm`: background work.
//!
//! Data path: see ARCHITECTURE.md "Block face".
//!
//! Threads: request tasks (tokio), the writeback task (tokio), the flash engine's reclaimer
//! (through `reclaim_handler::Handler`), and its IO threads (completing reads).
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use flashtier_backend::{BackendError, BlockBackend};
use flashtier_flash::{Flash, FlashConfig, FlashInfo};
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::error::Error;
use crate::reclaim_handler::Shared;
use crate::seq::SeqDetector;
use crate::tunables::{Mode, Tunables};

pub(crate) const STREAM_DATA: u8 = 0;
pub(crate) const STREAM_META: u8 = 2;
pub(crate) const STRIPES: u64 = 1024;
/// Largest single backing request the cache issues.
pub(crate) const BACKING_IO: u64 = 1 << 20;

/// Settings fixed at open.
#[derive(Clone, Debug)]
pub struct BlockCacheConfig {
    /// Cache block size in bytes (power of two, 512..=1 MiB). Default: `4096`.
    pub block_size: u32,
    /// Flash engine settings; `keep_limit` is forced to 1.0. Default:
    /// `FlashConfig::for_capacity` of the cache size.
    pub flash: Option<FlashConfig>,
    /// Initial tunables as `(name, value)`.
    pub tunables: Vec<(String, String)>,
}

impl Default for BlockCacheConfig {
    fn default() -> Self {
        BlockCacheConfig {
            block_size: 4096,
            flash: None,
            tunables: Vec::new(),
        }
    }
}

/// What recovery found at open.
#[derive(Clone, Debug, Default)]
pub struct RecoveryInfo {
    /// Dirty blocks recovered (to be written back).
    pub dirty_blocks: u64,
    /// Clean blocks kept from the last clean shutdown's snapshot (served at once).
    pub clean_kept: u64,
    /// Clean records found and dropped (not in a valid shutdown snapshot).
    pub clean_dropped: u64,
    /// Why the snapshot of clean blocks was not used (`None` when it was): no marker
    /// after a crash or a first start, a mismatched geometry, a torn snapshot.
    pub cold_reason: Option<String>,
    /// Persisted clean watermark found.
    pub watermark: u64,
}

/// Progress of an explicit flush.
#[derive(Clone, Debug, PartialEq)]
pub enum FlushState {
    /// No flush was requested yet.
    Idle,
    /// Writing back: `done` of `total` blocks.
    Running {
        /// Blocks written back so far.
        done: u64,
        /// Blocks to write back.
        total: u64,
        /// Backing writes and flushes that failed since the flush started (retried).
        errors: u64,
    },
    /// Finished.
    Done {
        /// Blocks written back.
        total: u64,
        /// Seconds it took.
        secs: f64,
        /// Backing writes and flushes that failed on the way (and were retried).
        errors: u64,
    },
}

#[derive(Debug)]
pub(crate) struct FlushJob {
    /// Id reported by `/status` (`flush_id`); a running job that is extended keeps it.
    pub id: u64,
    pub target: u64,
    pub total: u64,
    pub started: Instant,
    pub finished: Option<f64>,
    /// Failed backing writes and flushes while it ran.
    pub errors: u64,
}

/// The block cache. Share it as `Arc<BlockCache>`; it is a [`BlockBackend`].
pub struct BlockCache {
    pub(crate) shared: Arc<Shared>,
    pub(crate) flash: Arc<Flash>,
    pub(crate) backing: Arc<dyn BlockBackend>,
    pub(crate) tunables: Tunables,
    pub(crate) block_size: u64,
    pub(crate) nblocks: u64,
    pub(crate) capacity_blocks: u64,
    pub(crate) stripes: Vec<tokio::sync::Mutex<()>>,
    pub(crate) seq: Mutex<SeqDetector>,
    pub(crate) job: Mutex<Option<FlushJob>>,
    /// Ids handed to flush jobs (the last one used).
    pub(crate) flush_ids: AtomicU64,
    /// The latest switch away from writeback.
    pub(crate) switch: Mutex<Option<crate::switch::SwitchJob>>,
    /// Wakes the writeback task.
    pub(crate) wb_wake: Notify,
    /// Signalled after each writeback batch (writers waiting for space, flush waiters).
    pub(crate) progress: Notify,
    /// A writer is waiting for dirty blocks to drop.
    pub(crate) urgent: AtomicBool,
    /// The writeback rate the controller set (blocks per second; 0 = idle or flushing).
    pub(crate) wb_rate: AtomicU64,
    /// A write reached the backing since the last backing flush.
    pub(crate) backing_dirty: AtomicBool,
    pub(crate) stopping: AtomicBool,
    /// Blocks on hold after a failed backing write (`retry`). Lock order: after `index`.
    pub(crate) retries: Mutex<crate::retry::Retries>,
    pub(crate) last_error: Mutex<Option<String>>,
    /// When writeback last logged an error, and errors since (the log is rate-limited).
    pub(crate) error_log: Mutex<(Option<Instant>, u64)>,
    /// When a write last logged a stall timeout, and timeouts since (rate-limited too).
    pub(crate) stall_log: Mutex<(Option<Instant>, u64)>,
    pub(crate) recovery: RecoveryInfo,
    /// The flash engine's reclaim stream (may use reserved segments).
    pub(crate) reclaim_stream: u8,
    pub(crate) flash_info: FlashInfo,
}

pub(crate) fn flash_err(e: flashtier_flash::Error) -> BackendError {
    BackendError::Io(std::io::Error::other(e.to_string()))
}

impl BlockCache {
    /// Start the writeback task on the current tokio runtime.
    pub fn start(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(crate::writeback::run(Arc::clone(self)))
    }

    /// Make requests waiting for space or for a flush fail with `ESHUTDOWN` and stop the
    /// writeback task, so a server shutdown never hangs on a full cache. Dirty data stays
    /// on flash for the next start.
    pub fn interrupt(&self) {
        self.stopping.store(true, Ordering::Release);
        self.wb_wake.notify_one();
        self.progress.notify_waiters();
    }

    /// Stop writeback (dirty data stays on flash for the next start) and close the engine.
    pub fn stop(&self) {
        self.interrupt();
        if let Err(e) = self.flash.close() {
            log::error!("closing the cache device: {e}");
        }
    }

    /// What recovery found at open.
    pub fn recovery(&self) -> &RecoveryInfo {
        &self.recovery
    }

    /// Facts about the cache device set.
    pub fn flash_info(&self) -> &FlashInfo {
        &self.flash_info
    }

    /// The flash engine (for its stats and knobs).
    pub fn flash(&self) -> &Flash {
        &self.flash
    }

    /// Runtime settings.
    pub fn tunables(&self) -> &Tunables {
        &self.tunables
    }

    /// Change a tunable (a flash engine knob if prefixed `flash.`). Leaving writeback mode
    /// starts a mode switch (see [`BlockCache::set_mode`]).
    pub fn set_tunable(&self, name: &str, value: &str) -> Result<(), Error> {
        if let Some(k) = name.strip_prefix("flash.") {
            if k == "keep_limit" {
                return Err(Error::Config(
                    "flash.keep_limit is fixed at 1 for the block face".into(),
                ));
            }
            return Ok(self.flash.set_knob(k, value)?);
        }
        if name == "mode" {
            let m = Mode::parse(value.trim()).ok_or_else(|| {
                Error::Config(format!(
                    "mode: {value:?} is not writeback|writethrough|writearound"
                ))
            })?;
            self.set_mode(m);
            return Ok(());
        }
        self.tunables.set(name, value)?;
        self.wb_wake.notify_one();
        Ok(())
    }

    /// A tunable's value (`flash.*` names read the engine's knobs).
    pub fn get_tunable(&self, name: &str) -> Option<String> {
        if let Some(k) = name.strip_prefix("flash.") {
            return self
                .flash
                .knobs()
                .into_iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v);
        }
        self.tunables.get(name)
    }

    /// Every tunable, the engine's knobs as `flash.*`.
    pub fn list_tunables(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = self
            .tunables
            .list()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        v.extend(
            self.flash
                .knobs()
                .into_iter()
                .map(|(k, v)| (format!("flash.{k}"), v)),
        );
        v
    }

    /// Dirty blocks now.
    pub fn dirty_blocks(&self) -> u64 {
        self.shared.index.lock().dirty() as u64
    }

    /// Blocks the cache can hold (records that fit in flash beyond reclaim's reserve).
    pub fn capacity_blocks(&self) -> u64 {
        self.capacity_blocks
    }

    /// Last backing or cache error seen by writeback, if any.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().clone()
    }

    /// Dirty blocks on hold after a failed backing write (retried when their hold ends).
    pub fn held_blocks(&self) -> u64 {
        self.retries.lock().len() as u64
    }
}
