//! [`BlockCache`]: the block cache policy as a
//! [`BlockBackend`](flashtier_backend::BlockBackend) over the flash engine and a
//! backing backend — a thin composition of components that own their state: `BlockIo`
//! (blocks on flash and on the backing), `Writeback` (dirty blocks to the backing, flush
//! jobs), `ModeSwitch`, `Admission`, and `Warm` (inside the state shared with reclaim).
//! The request paths (`read`, `write`, `space`) and shutdown (`warm`) coordinate them.
//!
//! Invariant: once `stopping` is set, nothing waits for space or for writeback again.
//! Lock order across components: stripes, then the switch mutex, then the flush-job mutex,
//! then the index mutex, then the writeback holds or `last_error`.
//! Threads: request tasks, the writeback task, admin requests, and the flash engine's
//! reclaimer (through `reclaim::Handler`) and IO threads.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use flashtier_backend::BackendError;
use flashtier_flash::{Flash, FlashConfig, FlashInfo};

use crate::admission::Admission;
use crate::block_io::BlockIo;
use crate::error::Error;
use crate::log_limit::LogLimiter;
use crate::switch::ModeSwitch;
use crate::tunables::{Mode, Tunables};
use crate::writeback::Writeback;

/// Flash stream of block records.
pub(crate) const STREAM_DATA: u8 = 0;
/// Flash stream of the watermark and warm-restart records.
pub(crate) const STREAM_META: u8 = 2;
/// Stripe locks (by LBA modulo this).
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
    /// Clean blocks kept (served at once): listed in the last clean shutdown's snapshot,
    /// or proven current after a crash by the intents and the floor table.
    pub clean_kept: u64,
    /// Clean records dropped because nothing proves them current (no floor table and not
    /// in a valid shutdown snapshot).
    pub clean_dropped: u64,
    /// Why the snapshot of clean blocks was not used (`None` when it was): no marker
    /// after a crash or a first start, a mismatched geometry, a torn snapshot.
    pub cold_reason: Option<String>,
    /// Persisted clean watermark found.
    pub watermark: u64,
    /// Newest block records dropped because an intent or their region's floor says the
    /// backing may hold newer data (dirty ones included: written back, then overwritten).
    pub stale_dropped: u64,
    /// Backing-write intents found.
    pub intents: u64,
    /// Why clean blocks could not be proven current after a crash (`None`: a floor table
    /// was found): first start, a cache written before intents existed, another geometry.
    pub floor_reason: Option<String>,
}

/// The block cache. Share it as `Arc<BlockCache>`; it is a
/// [`BlockBackend`](flashtier_backend::BlockBackend).
pub struct BlockCache {
    pub(crate) io: BlockIo,
    pub(crate) writeback: Writeback,
    pub(crate) switch: ModeSwitch,
    pub(crate) admission: Admission,
    pub(crate) tunables: Tunables,
    pub(crate) stopping: AtomicBool,
    /// Write stalls that timed out, rate-limited in the log.
    pub(crate) stall_log: LogLimiter,
    pub(crate) recovery: RecoveryInfo,
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
        self.writeback.interrupt();
    }

    /// Stop writeback (dirty data stays on flash for the next start) and close the engine.
    pub fn stop(&self) {
        self.interrupt();
        if let Err(e) = self.io.flash.close() {
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
        &self.io.flash
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
            return Ok(self.io.flash.set_knob(k, value)?);
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
        self.writeback.wake();
        Ok(())
    }

    /// A tunable's value (`flash.*` names read the engine's knobs).
    pub fn get_tunable(&self, name: &str) -> Option<String> {
        if let Some(k) = name.strip_prefix("flash.") {
            return self
                .io
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
            self.io
                .flash
                .knobs()
                .into_iter()
                .map(|(k, v)| (format!("flash.{k}"), v)),
        );
        v
    }

    /// Dirty blocks now.
    pub fn dirty_blocks(&self) -> u64 {
        self.io.dirty_blocks()
    }

    /// Blocks the cache can hold (records that fit in flash beyond reclaim's reserve).
    pub fn capacity_blocks(&self) -> u64 {
        self.io.capacity_blocks
    }

    /// Last backing or cache error seen by writeback, if any.
    pub fn last_error(&self) -> Option<String> {
        self.io.last_error()
    }

    /// Dirty blocks on hold after a failed backing write (retried when their hold ends).
    pub fn held_blocks(&self) -> u64 {
        self.writeback.held_blocks()
    }
}
