//! [`BlockCache`]: the cache policy as a [`BlockBackend`] over the flash engine and a backing
//! backend.
//!
//! Data path (see ARCHITECTURE.md "Block face"):
//! - read: index lookup; hits are read from flash (checked: kind, key_id = LBA, version);
//!   misses are read from the backing under the blocks' stripe locks and admitted as clean
//!   records when the admission rules allow.
//! - write (writeback): under the stripe locks, each block (partial blocks read-modify-write)
//!   is appended as a dirty record with a fresh version; FUA = append + `flash.flush()`.
//! - write (writethrough/writearound, sequential bypass): cached copies are dropped from the
//!   index, the backing is written, then the new content is cached as clean records
//!   (writethrough also admits full blocks). A request that touches a dirty block always
//!   takes the writeback path, so the cache never holds a clean entry whose bytes the
//!   backing lacks.
//!
//! Versions are taken and the index updated under the index mutex, in the same critical
//! section as the flash append, so the *clean watermark* (every version at or below it is on
//! the backing or superseded) is exact. The watermark is persisted as a record; recovery
//! treats dirty-flagged records at or below it as clean (kept only if a valid shutdown
//! snapshot lists them, see [`crate::warm`]). The reclaim handler keeps every
//! record newer than the persisted watermark, so a newer version can never be evicted while
//! an older dirty copy could still come back at restart.
//!
//! Threads: request tasks (tokio), the writeback task (tokio), the flash engine's reclaimer
//! (through [`Handler`]), and its IO threads (completing reads).
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use flashtier_flash::{
    kind, Decision, Device, DeviceSpec, Flash, FlashConfig, FlashInfo, Location, ReclaimHandler,
    RecordMeta, RecordWrite,
};
use flashtier_nbd::{
    check_range, BackendError, BackendFuture, BlockBackend, BlockSizes, ZeroFlags,
};
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::error::Error;
use crate::index::{Entry, Index, PutOutcome};
use crate::seq::SeqDetector;
use crate::stats::{add, BlockStats};
use crate::tunables::{Mode, Tunables};
use crate::warm::{KIND_SESSION, KIND_SHUTDOWN, KIND_SNAPSHOT};

/// Record kind of the persisted clean watermark (`key_id` = [`WM_KEY`], version = mark).
pub const KIND_WATERMARK: u8 = 4;
/// `key_id` of watermark records (no LBA reaches it).
pub const WM_KEY: u64 = u64::MAX;
/// Record flag: the block was dirty when written.
pub const FLAG_DIRTY: u32 = 1;
const STREAM_DATA: u8 = 0;
pub(crate) const STREAM_META: u8 = 2;
const STRIPES: u64 = 1024;
/// Largest single backing request the cache issues.
const BACKING_IO: u64 = 1 << 20;

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

/// State shared with the reclaim handler.
pub(crate) struct Shared {
    pub index: Mutex<Index>,
    pub wm_persisted: AtomicU64,
    pub stats: BlockStats,
    /// Version of this run's session record (kept by reclaim; 0 = none yet).
    pub session_version: AtomicU64,
    /// Version of the shutdown snapshot being written (kept by reclaim; 0 = none).
    pub snapshot_version: AtomicU64,
}

impl Shared {
    /// Whether a warm-restart record (session, snapshot chunk, shutdown marker) belongs to
    /// this run and must survive reclaim.
    fn keeps_meta(&self, rec: &RecordMeta) -> Option<bool> {
        let v = match rec.kind {
            KIND_SESSION => self.session_version.load(Ordering::Acquire),
            KIND_SNAPSHOT | KIND_SHUTDOWN => self.snapshot_version.load(Ordering::Acquire),
            _ => return None,
        };
        Some(v != 0 && rec.version == v)
    }
}

/// The flash engine's reclaim callbacks: keep dirty blocks and anything newer than the
/// persisted watermark, drop (evict) other clean blocks.
pub(crate) struct Handler(pub Arc<Shared>);

impl ReclaimHandler for Handler {
    fn decide(&self, rec: &RecordMeta) -> Decision {
        if let Some(keep) = self.0.keeps_meta(rec) {
            return if keep { Decision::Keep } else { Decision::Drop };
        }
        let mut ix = self.0.index.lock();
        let loc = rec.location.pack();
        if rec.kind == KIND_WATERMARK {
            return if ix.wm_loc == Some(loc) {
                Decision::Keep
            } else {
                Decision::Drop
            };
        }
        match ix.map.get(rec.key_id) {
            Some(e) if e.loc == loc => {
                if e.dirty
                    || rec.version > self.0.wm_persisted.load(Ordering::Acquire)
                    || ix.writing.contains(&rec.key_id)
                {
                    Decision::Keep
                } else {
                    ix.remove_at(rec.key_id, loc);
                    add(&self.0.stats.replacements, 1);
                    Decision::Drop
                }
            }
            _ => Decision::Drop,
        }
    }

    fn relocated(&self, rec: &RecordMeta, new: Location) -> bool {
        if let Some(keep) = self.0.keeps_meta(rec) {
            // Found by the recovery scan, not through the index: the copy stays live.
            return keep;
        }
        let mut ix = self.0.index.lock();
        let old = rec.location.pack();
        if rec.kind == KIND_WATERMARK {
            if ix.wm_loc == Some(old) {
                ix.wm_loc = Some(new.pack());
                return true;
            }
            return false;
        }
        match ix.map.get(rec.key_id) {
            Some(e) if e.loc == old => ix.map.set_loc(rec.key_id, new.pack()),
            _ => false,
        }
    }

    fn evicted(&self, rec: &RecordMeta) {
        if rec.kind != kind::PUT {
            return;
        }
        let mut ix = self.0.index.lock();
        if let Some(e) = ix.remove_at(rec.key_id, rec.location.pack()) {
            if e.dirty {
                add(&self.0.stats.dirty_lost, 1);
                eprintln!(
                    "flashtier block: cache device lost dirty block {} (version {})",
                    rec.key_id, rec.version
                );
            }
        }
    }
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
    },
    /// Finished.
    Done {
        /// Blocks written back.
        total: u64,
        /// Seconds it took.
        secs: f64,
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
    stripes: Vec<tokio::sync::Mutex<()>>,
    seq: Mutex<SeqDetector>,
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
    /// A write reached the backing since the last backing flush.
    backing_dirty: AtomicBool,
    pub(crate) stopping: AtomicBool,
    /// Consecutive failed writeback batches (backoff exponent).
    pub(crate) backoff: AtomicU64,
    pub(crate) last_error: Mutex<Option<String>>,
    pub(crate) recovery: RecoveryInfo,
    /// The flash engine's reclaim stream (may use reserved segments).
    pub(crate) reclaim_stream: u8,
    pub(crate) flash_info: FlashInfo,
}

fn flash_err(e: flashtier_flash::Error) -> BackendError {
    BackendError::Io(std::io::Error::other(e.to_string()))
}

impl BlockCache {
    /// Open a cache on `PATH:SIZE` flash specs over `backing` (recovering dirty blocks).
    /// Call [`BlockCache::start`] from inside a tokio runtime afterwards.
    pub fn open_specs(
        specs: &[DeviceSpec],
        backing: Arc<dyn BlockBackend>,
        cfg: BlockCacheConfig,
    ) -> Result<Arc<Self>, Error> {
        let cap: u64 = specs.iter().map(|s| s.size).sum();
        Self::open_with(cap, backing, cfg, |fc, h, on| {
            Flash::open_specs(specs, fc, h, on)
        })
    }

    /// Open a cache on the given flash devices (tests use `MemoryDevice`).
    pub fn open_devices(
        devices: Vec<Arc<dyn Device>>,
        backing: Arc<dyn BlockBackend>,
        cfg: BlockCacheConfig,
    ) -> Result<Arc<Self>, Error> {
        let cap: u64 = devices.iter().map(|d| d.len()).sum();
        Self::open_with(cap, backing, cfg, move |fc, h, on| {
            Flash::open(devices, fc, h, on)
        })
    }

    fn open_with(
        cap: u64,
        backing: Arc<dyn BlockBackend>,
        cfg: BlockCacheConfig,
        open: impl FnOnce(
            FlashConfig,
            Arc<dyn ReclaimHandler>,
            &mut dyn FnMut(RecordMeta),
        ) -> flashtier_flash::Result<(Flash, FlashInfo)>,
    ) -> Result<Arc<Self>, Error> {
        let bs = u64::from(cfg.block_size);
        if !bs.is_power_of_two() || !(512..=(1 << 20)).contains(&bs) {
            return Err(Error::Config(format!(
                "block_size {bs} must be a power of two within 512..=1MiB"
            )));
        }
        let size = backing.size();
        if !size.is_multiple_of(bs) || size == 0 {
            return Err(Error::Config(format!(
                "backing size {size} is not a non-zero multiple of the block size {bs}"
            )));
        }
        let tunables = Tunables::default();
        for (k, v) in &cfg.tunables {
            tunables.set(k, v)?;
        }
        let mut fc = cfg
            .flash
            .clone()
            .unwrap_or_else(|| FlashConfig::for_capacity(cap));
        fc.keep_limit = 1.0;
        let reclaim_stream = fc.reclaim_stream;
        // Space the cache cannot fill with blocks: reclaim's reserve and free target plus
        // one open segment per stream.
        let reserve =
            u64::from(fc.reserve_segments + fc.free_high_watermark) + u64::from(fc.streams);
        let max_val = fc.max_value_len(0) as u64;
        if bs > max_val {
            return Err(Error::Config(format!(
                "block_size {bs} exceeds the largest flash record value {max_val}"
            )));
        }
        let shared = Arc::new(Shared {
            index: Mutex::new(Index::new(0)),
            wm_persisted: AtomicU64::new(0),
            stats: BlockStats::default(),
            session_version: AtomicU64::new(0),
            snapshot_version: AtomicU64::new(0),
        });
        let nblocks = size / bs;
        // Recovery: newest version per LBA, newest watermark.
        let mut newest: std::collections::HashMap<u64, RecordMeta> = Default::default();
        let mut dead: Vec<Location> = Vec::new();
        let mut wm: Option<RecordMeta> = None;
        let mut max_version = 0u64;
        let mut found = crate::warm::Found::default();
        let mut on = |m: RecordMeta| {
            max_version = max_version.max(m.version);
            if found.offer(&m) {
                return;
            }
            if m.kind == KIND_WATERMARK && m.key_id == WM_KEY {
                match &wm {
                    Some(w) if w.version >= m.version => dead.push(m.location),
                    _ => {
                        if let Some(w) = wm.replace(m) {
                            dead.push(w.location);
                        }
                    }
                }
                return;
            }
            if m.kind != kind::PUT || m.key_id >= nblocks {
                dead.push(m.location);
                return;
            }
            match newest.get(&m.key_id) {
                Some(o) if o.version > m.version => dead.push(m.location),
                _ => {
                    if let Some(o) = newest.insert(m.key_id, m) {
                        dead.push(o.location);
                    }
                }
            }
        };
        let handler: Arc<dyn ReclaimHandler> = Arc::new(Handler(Arc::clone(&shared)));
        let (flash, info) = open(fc, handler, &mut on)?;
        let flash = Arc::new(flash);
        let watermark = wm.map(|w| w.version).unwrap_or(0);
        let mut rec = RecoveryInfo {
            watermark,
            ..Default::default()
        };
        // Clean blocks come back only from a valid shutdown snapshot (see `warm`).
        let snapshot = match found.load(&flash, max_version, bs, nblocks) {
            Ok(s) => s,
            Err(why) => {
                rec.cold_reason = Some(why);
                Default::default()
            }
        };
        let record = flashtier_flash::format::record::padded_len(0, bs as usize) as u64;
        {
            let mut ix = shared.index.lock();
            // Sized for every block record the device can hold: the table never grows.
            *ix = Index::with_capacity(max_version, info.capacity / record + 1);
            ix.wm_loc = wm.map(|w| w.location.pack());
            for (lba, m) in newest {
                if m.flags & FLAG_DIRTY != 0 && m.version > watermark {
                    ix.put(lba, m.location.pack(), m.version, true);
                    rec.dirty_blocks += 1;
                } else if snapshot.get(&lba) == Some(&m.version) {
                    ix.put(lba, m.location.pack(), m.version, false);
                    rec.clean_kept += 1;
                } else {
                    dead.push(m.location);
                    rec.clean_dropped += 1;
                }
            }
            dead.extend(found.locations());
            for l in dead {
                flash.mark_dead(l);
            }
        }
        shared.wm_persisted.store(watermark, Ordering::Release);
        // Consume the snapshot before anything can reach the backing: a durable session
        // record newer than the marker makes it invalid for every later recovery.
        crate::warm::write_session(&flash, &shared, reclaim_stream)?;
        let usable = info.capacity.saturating_sub(reserve * info.segment_size);
        let capacity_blocks = (usable / record).max(16);
        let cache = Arc::new(BlockCache {
            shared,
            flash,
            backing,
            tunables,
            block_size: bs,
            nblocks,
            capacity_blocks,
            stripes: (0..STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
            seq: Mutex::new(SeqDetector::default()),
            job: Mutex::new(None),
            flush_ids: AtomicU64::new(0),
            switch: Mutex::new(None),
            wb_wake: Notify::new(),
            progress: Notify::new(),
            urgent: AtomicBool::new(false),
            backing_dirty: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            backoff: AtomicU64::new(0),
            last_error: Mutex::new(None),
            recovery: rec,
            reclaim_stream,
            flash_info: info,
        });
        if cache.recovery.dirty_blocks > 0 {
            cache.start_flush();
        }
        Ok(cache)
    }

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
            eprintln!("flashtier block: closing the cache device: {e}");
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

    /// Every statistic as `(name, value)`: the cache's counters and gauges, then the flash
    /// engine's (`flash_*`).
    pub fn stats_pairs(&self) -> Vec<(String, String)> {
        let s = &self.shared.stats;
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
        let (dirty, cached, wm, index_bytes) = {
            let ix = self.shared.index.lock();
            (
                ix.dirty() as u64,
                ix.map.len() as u64,
                ix.clean_watermark(),
                ix.ram_bytes(),
            )
        };
        v.push((
            "read_hit_percent".into(),
            pct(load(&s.read_hits), load(&s.reads)),
        ));
        v.push((
            "write_hit_percent".into(),
            pct(load(&s.write_hits), load(&s.writes)),
        ));
        v.push(("dirty_blocks".into(), dirty.to_string()));
        v.push(("cached_blocks".into(), cached.to_string()));
        v.push(("index_bytes".into(), index_bytes.to_string()));
        v.push(("capacity_blocks".into(), self.capacity_blocks.to_string()));
        v.push(("dirty_percent".into(), pct(dirty, self.capacity_blocks)));
        v.push(("block_size".into(), self.block_size.to_string()));
        v.push(("clean_watermark".into(), wm.to_string()));
        v.push((
            "clean_watermark_persisted".into(),
            self.shared.wm_persisted.load(Ordering::Relaxed).to_string(),
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
        v.extend(
            self.flash
                .stats()
                .pairs()
                .into_iter()
                .map(|(k, n)| (k.to_string(), n.to_string())),
        );
        v
    }

    /// Every stripe lock (a clean shutdown).
    pub(crate) async fn lock_all_stripes(&self) -> Vec<tokio::sync::MutexGuard<'_, ()>> {
        self.lock_stripes(0, STRIPES - 1).await
    }

    async fn lock_stripes(&self, first: u64, last: u64) -> Vec<tokio::sync::MutexGuard<'_, ()>> {
        let mut ids: Vec<u64> = if last - first + 1 >= STRIPES {
            (0..STRIPES).collect()
        } else {
            (first..=last).map(|l| l % STRIPES).collect()
        };
        ids.sort_unstable();
        ids.dedup();
        let mut guards = Vec::with_capacity(ids.len());
        for i in ids {
            guards.push(self.stripes[i as usize].lock().await);
        }
        guards
    }

    /// Append a block record; `wait` retries while flash is full (writes), otherwise a full
    /// flash returns `Ok(None)` (admissions).
    async fn append(
        &self,
        lba: u64,
        data: &[u8],
        dirty: bool,
        wait: bool,
    ) -> Result<Option<PutOutcome>, BackendError> {
        let mut stalled = false;
        loop {
            let res = {
                let mut ix = self.shared.index.lock();
                let v = ix.next_version;
                let r = self.flash.append(
                    STREAM_DATA,
                    &RecordWrite {
                        kind: kind::PUT,
                        key_id: lba,
                        version: v,
                        flags: if dirty { FLAG_DIRTY } else { 0 },
                        exptime: 0,
                        key: &[],
                        value: data,
                    },
                );
                match r {
                    Ok(loc) => {
                        ix.next_version += 1;
                        let out = ix.put(lba, loc.pack(), v, dirty);
                        if let Some(d) = out.dead {
                            self.flash.mark_dead(Location::unpack(d));
                        }
                        Ok(out)
                    }
                    Err(e) => Err(e),
                }
            };
            match res {
                Ok(out) => {
                    add(&self.shared.stats.ssd_writes, 1);
                    return Ok(Some(out));
                }
                Err(e @ (flashtier_flash::Error::Busy(_) | flashtier_flash::Error::NoSpace)) => {
                    if !wait {
                        return Ok(None);
                    }
                    if self.stopping.load(Ordering::Acquire) {
                        return Err(BackendError::Shutdown);
                    }
                    // Busy: the stream's chunk writes are all in flight, which only time
                    // cures. NoSpace: flash is full, and space comes from writeback.
                    if matches!(e, flashtier_flash::Error::NoSpace) {
                        if !stalled {
                            stalled = true;
                            add(&self.shared.stats.write_stalls, 1);
                        }
                        self.urgent.store(true, Ordering::Release);
                        self.wb_wake.notify_one();
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                Err(e) => return Err(flash_err(e)),
            }
        }
    }

    /// Read a cached block. `Ok(None)`: the entry moved or vanished (look again); a clean
    /// block that cannot be read is reported as `Ok(None)` after removing it.
    async fn read_cached(&self, lba: u64, e: Entry) -> Result<Option<Bytes>, BackendError> {
        let res = self.flash.read(Location::unpack(e.loc)).await;
        match res {
            Ok(r)
                if r.header.kind == kind::PUT
                    && r.header.key_id == lba
                    && r.header.version == e.version
                    && r.value.len() as u64 == self.block_size =>
            {
                add(&self.shared.stats.ssd_reads, 1);
                Ok(Some(r.value))
            }
            other => {
                let mut ix = self.shared.index.lock();
                match ix.map.get(lba) {
                    Some(now) if now.loc == e.loc && now.version == e.version => {
                        add(&self.shared.stats.ssd_read_errors, 1);
                        if now.dirty {
                            let why = match other {
                                Err(err) => err.to_string(),
                                Ok(_) => "record mismatch".into(),
                            };
                            return Err(BackendError::Io(std::io::Error::other(format!(
                                "dirty block {lba} unreadable on the cache device: {why}"
                            ))));
                        }
                        ix.remove_at(lba, e.loc);
                        self.flash.mark_dead(Location::unpack(e.loc));
                        Ok(None)
                    }
                    _ => Ok(None),
                }
            }
        }
    }

    /// The current content of one block (cache, else backing). Caller holds its stripe lock.
    async fn current_block(&self, lba: u64) -> Result<Bytes, BackendError> {
        for _ in 0..16 {
            let e = self.shared.index.lock().lookup(lba);
            match e {
                Some(e) => {
                    if let Some(b) = self.read_cached(lba, e).await? {
                        return Ok(b);
                    }
                }
                None => {
                    return self
                        .backing_read(lba * self.block_size, self.block_size)
                        .await
                }
            }
        }
        Err(BackendError::Io(std::io::Error::other("block kept moving")))
    }

    async fn backing_read(&self, off: u64, len: u64) -> Result<Bytes, BackendError> {
        let mut out = BytesMut::with_capacity(len as usize);
        let mut pos = off;
        while pos < off + len {
            let n = (off + len - pos).min(BACKING_IO);
            let mut tries = 0;
            let b = loop {
                add(&self.shared.stats.disk_reads, 1);
                match self.backing.read(pos, n as u32).await {
                    Ok(b) => break b,
                    Err(e) if tries < 3 && !matches!(e, BackendError::OutOfRange { .. }) => {
                        tries += 1;
                        add(&self.shared.stats.backing_errors, 1);
                        *self.last_error.lock() = Some(format!("backing read: {e}"));
                        tokio::time::sleep(Duration::from_millis(50 << tries)).await;
                    }
                    Err(e) => return Err(e),
                }
            };
            out.extend_from_slice(&b);
            pos += n;
        }
        Ok(out.freeze())
    }

    async fn backing_write(&self, off: u64, data: Bytes, fua: bool) -> Result<(), BackendError> {
        let mut pos = 0u64;
        let len = data.len() as u64;
        while pos < len {
            let n = (len - pos).min(BACKING_IO);
            let piece = data.slice(pos as usize..(pos + n) as usize);
            let mut tries = 0;
            loop {
                add(&self.shared.stats.disk_writes, 1);
                match self.backing.write(off + pos, piece.clone(), fua).await {
                    Ok(()) => break,
                    Err(e) if tries < 3 && !matches!(e, BackendError::OutOfRange { .. }) => {
                        tries += 1;
                        add(&self.shared.stats.backing_errors, 1);
                        *self.last_error.lock() = Some(format!("backing write: {e}"));
                        tokio::time::sleep(Duration::from_millis(50 << tries)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
            pos += n;
        }
        self.backing_dirty.store(true, Ordering::Release);
        Ok(())
    }

    fn copy_into(&self, out: &mut [u8], off: u64, lba: u64, blk: &[u8]) {
        let bs = self.block_size;
        let b0 = lba * bs;
        let start = b0.max(off);
        let end = (b0 + bs).min(off + out.len() as u64);
        if start < end {
            let dst = &mut out[(start - off) as usize..(end - off) as usize];
            dst.copy_from_slice(&blk[(start - b0) as usize..(end - b0) as usize]);
        }
    }

    fn seq_run(&self, off: u64, len: u64) -> bool {
        let thr = self.tunables.seq_threshold();
        let run = self.seq.lock().observe(off, len);
        thr != 0 && run >= thr
    }

    async fn do_read(&self, off: u64, len: u32) -> Result<Bytes, BackendError> {
        check_range(off, u64::from(len), self.nblocks * self.block_size)?;
        let len = u64::from(len);
        if len == 0 {
            return Ok(Bytes::new());
        }
        let s = &self.shared.stats;
        add(&s.read_requests, 1);
        let bs = self.block_size;
        let (first, last) = (off / bs, (off + len - 1) / bs);
        add(&s.reads, last - first + 1);
        let seq = self.seq_run(off, len);
        let admit = !seq && self.tunables.admits(off, len, false);
        let mut out = vec![0u8; len as usize];
        let entries: Vec<(u64, Option<Entry>)> = {
            let mut ix = self.shared.index.lock();
            (first..=last).map(|l| (l, ix.lookup(l))).collect()
        };
        let mut pending = Vec::new();
        let mut misses = Vec::new();
        for (lba, e) in entries {
            match e {
                Some(e) => pending.push((lba, e, self.flash.read(Location::unpack(e.loc)))),
                None => misses.push(lba),
            }
        }
        for (lba, e, c) in pending {
            match c.await {
                Ok(r)
                    if r.header.kind == kind::PUT
                        && r.header.key_id == lba
                        && r.header.version == e.version
                        && r.value.len() as u64 == bs =>
                {
                    add(&s.ssd_reads, 1);
                    add(&s.read_hits, 1);
                    self.copy_into(&mut out, off, lba, &r.value);
                }
                _ => misses.push(lba),
            }
        }
        misses.sort_unstable();
        let mut i = 0;
        while i < misses.len() {
            let mut j = i;
            while j + 1 < misses.len() && misses[j + 1] == misses[j] + 1 && j + 1 - i < 256 {
                j += 1;
            }
            self.fill_run(misses[i], misses[j], &mut out, off, admit, seq)
                .await?;
            i = j + 1;
        }
        Ok(Bytes::from(out))
    }

    async fn fill_run(
        &self,
        a: u64,
        b: u64,
        out: &mut [u8],
        off: u64,
        admit: bool,
        seq: bool,
    ) -> Result<(), BackendError> {
        let s = &self.shared.stats;
        let bs = self.block_size;
        let _g = self.lock_stripes(a, b).await;
        let cached: Vec<bool> = {
            let ix = self.shared.index.lock();
            (a..=b).map(|l| ix.map.contains_key(l)).collect()
        };
        let data = if cached.iter().all(|c| *c) {
            Bytes::new()
        } else {
            self.backing_read(a * bs, (b - a + 1) * bs).await?
        };
        for (k, lba) in (a..=b).enumerate() {
            if cached[k] {
                let blk = self.current_block(lba).await?;
                self.copy_into(out, off, lba, &blk);
                continue;
            }
            let blk = data.slice(k * bs as usize..(k + 1) * bs as usize);
            self.copy_into(out, off, lba, &blk);
            if admit && self.append(lba, &blk, false, false).await?.is_some() {
                add(&s.read_admits, 1);
            } else {
                add(&s.uncached_reads, 1);
                if seq {
                    add(&s.uncached_sequential_reads, 1);
                }
            }
        }
        Ok(())
    }

    async fn throttle(&self) {
        let mut stalled = false;
        loop {
            let (_, _, max_pct) = self.tunables.dirty_pcts();
            let max = (self.capacity_blocks * max_pct / 100).max(1);
            if self.dirty_blocks() < max || self.stopping.load(Ordering::Acquire) {
                return;
            }
            if !stalled {
                stalled = true;
                add(&self.shared.stats.write_stalls, 1);
            }
            self.urgent.store(true, Ordering::Release);
            self.wb_wake.notify_one();
            let _ = tokio::time::timeout(Duration::from_millis(20), self.progress.notified()).await;
        }
    }

    /// New content of block `lba` after writing `data` at `off`.
    async fn block_image(&self, lba: u64, off: u64, data: &Bytes) -> Result<Bytes, BackendError> {
        let bs = self.block_size;
        let b0 = lba * bs;
        let end = off + data.len() as u64;
        if off <= b0 && end >= b0 + bs {
            let s = (b0 - off) as usize;
            return Ok(data.slice(s..s + bs as usize));
        }
        add(&self.shared.stats.partial_writes, 1);
        let base = self.current_block(lba).await?;
        let mut m = BytesMut::from(&base[..]);
        let start = b0.max(off);
        let stop = (b0 + bs).min(end);
        m[(start - b0) as usize..(stop - b0) as usize]
            .copy_from_slice(&data[(start - off) as usize..(stop - off) as usize]);
        Ok(m.freeze())
    }

    async fn do_write(&self, off: u64, data: Bytes, fua: bool) -> Result<(), BackendError> {
        let len = data.len() as u64;
        check_range(off, len, self.nblocks * self.block_size)?;
        let s = &self.shared.stats;
        add(&s.write_requests, 1);
        if fua {
            add(&s.fua_writes, 1);
        }
        if len == 0 {
            return if fua { self.do_flush().await } else { Ok(()) };
        }
        let bs = self.block_size;
        let (first, last) = (off / bs, (off + len - 1) / bs);
        add(&s.writes, last - first + 1);
        let mode = self.tunables.mode();
        let seq = self.seq_run(off, len);
        let admit = self.tunables.admits(off, len, true);
        let want_wb = mode == Mode::WriteBack && admit && !seq;
        if want_wb {
            self.throttle().await;
        }
        let _g = self.lock_stripes(first, last).await;
        let any_dirty = {
            let ix = self.shared.index.lock();
            (first..=last).any(|l| ix.map.get(l).is_some_and(|e| e.dirty))
        };
        if want_wb || any_dirty {
            for lba in first..=last {
                let blk = self.block_image(lba, off, &data).await?;
                if let Some(o) = self.append(lba, &blk, true, true).await? {
                    if o.hit {
                        add(&s.write_hits, 1);
                    }
                    if o.was_dirty {
                        add(&s.dirty_write_hits, 1);
                    }
                }
            }
            if fua {
                self.flash.flush().await.map_err(flash_err)?;
            }
            return Ok(());
        }
        // Through or around: drop the cached copies, write the backing, then cache the new
        // content. A request cancelled or failing between the steps leaves the block
        // uncached, never a clean copy the backing no longer holds.
        let mut images = Vec::new();
        for lba in first..=last {
            let cached = self.shared.index.lock().map.contains_key(lba);
            let b0 = lba * bs;
            let full = off <= b0 && off + len >= b0 + bs;
            if cached || (mode == Mode::WriteThrough && admit && !seq && full) {
                images.push((lba, cached, self.block_image(lba, off, &data).await?));
            } else {
                add(&s.uncached_writes, 1);
                if seq {
                    add(&s.uncached_sequential_writes, 1);
                }
            }
        }
        {
            let mut ix = self.shared.index.lock();
            for (lba, cached, _) in &images {
                if !*cached {
                    continue;
                }
                // Clean: the request holds the stripe locks and saw no dirty block.
                if let Some(e) = ix.map.get(*lba) {
                    ix.remove_at(*lba, e.loc);
                    self.flash.mark_dead(Location::unpack(e.loc));
                }
            }
        }
        self.backing_write(off, data, fua).await?;
        for (lba, cached, blk) in images {
            if cached {
                add(&s.write_hits, 1);
            }
            // Flash full: the block stays uncached.
            let _ = self.append(lba, &blk, false, false).await?;
        }
        Ok(())
    }

    async fn do_flush(&self) -> Result<(), BackendError> {
        add(&self.shared.stats.flushes, 1);
        self.flash.flush().await.map_err(flash_err)?;
        if self.backing_dirty.swap(false, Ordering::AcqRel) {
            if let Err(e) = self.backing.flush().await {
                self.backing_dirty.store(true, Ordering::Release);
                return Err(e);
            }
        }
        Ok(())
    }

    async fn do_zeroes(&self, off: u64, len: u32, fua: bool) -> Result<(), BackendError> {
        check_range(off, u64::from(len), self.nblocks * self.block_size)?;
        let mut pos = 0u64;
        let len = u64::from(len);
        while pos < len {
            let n = (len - pos).min(BACKING_IO);
            self.do_write(off + pos, Bytes::from(vec![0u8; n as usize]), false)
                .await?;
            pos += n;
        }
        if fua {
            self.do_flush().await?;
        }
        Ok(())
    }
}

impl BlockBackend for BlockCache {
    fn size(&self) -> u64 {
        self.nblocks * self.block_size
    }

    fn block_sizes(&self) -> BlockSizes {
        BlockSizes {
            min: 1,
            preferred: self.block_size as u32,
            max_payload: 32 << 20,
        }
    }

    fn can_multi_conn(&self) -> bool {
        // One flash engine and one backing for every connection: a FLUSH covers all.
        true
    }

    fn read(&self, offset: u64, len: u32) -> BackendFuture<'_, Bytes> {
        Box::pin(self.do_read(offset, len))
    }

    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BackendFuture<'_, ()> {
        Box::pin(self.do_write(offset, data, fua))
    }

    fn flush(&self) -> BackendFuture<'_, ()> {
        Box::pin(self.do_flush())
    }

    fn trim(&self, offset: u64, len: u32) -> BackendFuture<'_, ()> {
        // A hint: contents after TRIM are unspecified, so keeping them is correct.
        Box::pin(async move { check_range(offset, u64::from(len), self.size()) })
    }

    fn write_zeroes(&self, offset: u64, len: u32, flags: ZeroFlags) -> BackendFuture<'_, ()> {
        Box::pin(self.do_zeroes(offset, len, flags.fua))
    }
}
