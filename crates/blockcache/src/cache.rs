//! [`BlockCache`]: the block cache policy as a
//! [`BlockBackend`](flashtier_backend::BlockBackend) over the flash engine and a
//! backing backend — a thin composition of components that own their state: `BlockIo`
//! (blocks on flash and on the backing, owning `Blocks`, the index), `Durability`
//! (watermark, fence, warm-restart records; shared with reclaim), `Writeback` (dirty blocks
//! to the backing, flush jobs), `ModeSwitch` and `Admission`. This file is the public API
//! (tunables, flush, mode switch, stats, shutdown); `open.rs` and `request.rs` hold the
//! rest of `impl BlockCache`.
//!
//! Invariant: once `stopping` is set, nothing waits for space or for writeback again.
//! Lock order across components: stripes, then the switch mutex, then the flush-job mutex,
//! then the index mutex, then the writeback holds or `last_error`.
//! Threads: request tasks, the writeback task, admin requests, and the flash engine's
//! reclaimer (through `reclaim::Handler`) and IO threads.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flashtier_flash::{Flash, FlashConfig, FlashInfo};

use crate::admission::Admission;
use crate::block_io::BlockIo;
use crate::durability::Durability;
use crate::error::Error;
use crate::flush::FlushState;
use crate::log_limit::LogLimiter;
use crate::stats::add;
use crate::switch::{ModeSwitch, SwitchPhase, SwitchStatus};
use crate::tunables::{Mode, Tunables};
use crate::warm::{ShutdownReport, SHUTDOWN_WAIT};
use crate::writeback::{persist_watermark, Host, Writeback};

/// Settings fixed at open.
#[derive(Clone, Debug)]
pub struct BlockCacheConfig {
    /// Cache block size in bytes (power of two, 512..=1 MiB). Default: `4096`.
    pub block_size: u32,
    /// Flash engine settings; `keep_limit` is forced to 1.0 and a `reclaim_policy` of
    /// fifo (the engine's default) is read as greedy (choose fifo with the
    /// `flash.reclaim_policy` tunable). Default:
    /// `FlashConfig::for_capacity` of the cache size.
    pub flash: Option<FlashConfig>,
    /// Initial tunables as `(name, value)`; `flash.*` names are engine knobs, applied as the
    /// engine opens (before any request).
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

/// Engine knobs the block face fixes (`keep_limit`: every live block is kept) refused by
/// name, at open and at run time alike.
pub(crate) fn refuse_fixed_knob(knob: &str) -> Result<(), Error> {
    if knob == "keep_limit" {
        return Err(Error::Config(
            "flash.keep_limit is fixed at 1 for the block face".into(),
        ));
    }
    Ok(())
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
    /// The watermark, fence and warm-restart records (shared with reclaim).
    pub(crate) durable: Arc<Durability>,
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

impl Host for BlockCache {
    fn writeback(&self) -> &Writeback {
        &self.writeback
    }

    fn io(&self) -> &BlockIo {
        &self.io
    }

    fn durability(&self) -> &Durability {
        &self.durable
    }

    fn tunables(&self) -> &Tunables {
        &self.tunables
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }
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
            refuse_fixed_knob(k)?;
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

    /// The index entry of block `lba` (where its record is, whether it is dirty), without
    /// counting an access: for diagnostics (a crash test prints it beside the records the
    /// device holds for that block).
    pub fn index_entry(&self, lba: u64) -> Option<crate::index::Entry> {
        self.io.blocks.locked(|index| index.get(lba))
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

    // Flushes (`flush`).

    /// Start writing back every block dirty now; returns at once with the flush's id. A
    /// running flush is extended to cover the new blocks (and keeps its id).
    pub fn start_flush(&self) -> u64 {
        let id = self.writeback.flushes.start(&self.io.blocks);
        self.writeback.wake();
        id
    }

    /// Id of the latest explicit flush (0 = none yet).
    pub fn flush_id(&self) -> u64 {
        self.writeback.flushes.id()
    }

    /// Progress of the latest explicit flush.
    pub fn flush_state(&self) -> FlushState {
        self.writeback.flushes.state(&self.io.blocks)
    }

    /// Write back every block dirty now and wait until they are on the backing (and the
    /// backing flushed). Fails only if the cache is stopping.
    pub async fn flush_wait(&self) -> Result<(), crate::Error> {
        self.start_flush();
        loop {
            if let FlushState::Done { .. } = self.flush_state() {
                return Ok(());
            }
            if self.stopping.load(Ordering::Acquire) {
                return Err(crate::Error::Config("cache stopped during flush".into()));
            }
            self.writeback
                .wait_progress(Duration::from_millis(100))
                .await;
        }
    }

    // Mode switches (`switch`).

    /// Change the mode. Leaving writeback starts a switch (returned); changing between
    /// writethrough and writearound during a switch retargets it.
    pub fn set_mode(&self, mode: Mode) -> Option<SwitchStatus> {
        let started = self.switch.change(
            &self.tunables,
            mode,
            || self.dirty_blocks(),
            || self.start_flush(),
        );
        if started {
            add(&self.io.stats.mode_switches, 1);
        }
        self.writeback.wake();
        self.mode_switch()
    }

    /// The latest switch away from writeback, if any.
    pub fn mode_switch(&self) -> Option<SwitchStatus> {
        self.switch.status(self.dirty_blocks())
    }

    /// Wait until the latest switch is done (no dirty block left). Fails if it is
    /// cancelled, if there is none, or if the cache stops.
    pub async fn mode_switch_wait(&self) -> Result<SwitchStatus, Error> {
        loop {
            match self.mode_switch() {
                None => return Err(Error::Config("no mode switch started".into())),
                Some(s) if s.phase == SwitchPhase::Done => return Ok(s),
                Some(s) if s.phase == SwitchPhase::Cancelled => {
                    return Err(Error::Config(format!(
                        "mode switch {} cancelled: mode is writeback again",
                        s.id
                    )))
                }
                Some(_) => {}
            }
            if self.stopping.load(Ordering::Acquire) {
                return Err(Error::Config("cache stopped during the mode switch".into()));
            }
            self.writeback.wake();
            self.writeback
                .wait_progress(Duration::from_millis(100))
                .await;
        }
    }

    // Statistics (`stats`).

    /// Every statistic as `(name, value)`: the cache's counters and gauges, then the flash
    /// engine's (`flash_*`).
    pub fn stats_pairs(&self) -> Vec<(String, String)> {
        let s = &self.io.stats;
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
        let (dirty, cached, wm, index_bytes, sketch_bytes) = self.io.blocks.summary();
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
        v.push(("sketch_bytes".into(), sketch_bytes.to_string()));
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
            self.durable.wm_persisted().to_string(),
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

    // Shutdown (`warm`).

    /// Clean shutdown: stop writeback and waiting requests, wait for requests in flight,
    /// save the snapshot of clean blocks (so the next open is warm), close the engine.
    /// Await the writeback task's handle after [`BlockCache::interrupt`] and before this
    /// for the fewest dirty blocks left; correctness does not depend on it.
    pub async fn shutdown(self: &Arc<Self>) -> ShutdownReport {
        self.interrupt();
        let mut report = ShutdownReport::default();
        // Every stripe: a request between its backing write and its cache update holds
        // one, and no new request passes them until the engine is closed.
        let guards = tokio::time::timeout(SHUTDOWN_WAIT, self.io.lock_all_stripes()).await;
        match &guards {
            Ok(_) => {
                persist_watermark(&self.io, &self.durable).await;
                match self.durable.warm.save_snapshot(&self.io).await {
                    Ok(n) => report.clean_saved = n,
                    Err(e) => report.skipped = Some(e),
                }
            }
            Err(_) => report.skipped = Some("requests still in flight".into()),
        }
        report.dirty_left = self.dirty_blocks();
        let c = Arc::clone(self);
        match tokio::task::spawn_blocking(move || c.io.flash.close()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => log::error!("closing the cache device: {e}"),
            Err(e) => log::error!("closing the cache device: {e}"),
        }
        drop(guards);
        report
    }
}
