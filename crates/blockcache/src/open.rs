//! Opening a [`BlockCache`]: the flash engine is opened with the reclaim handler, every
//! record found is offered to recovery, and the index is rebuilt from it.
//!
//! Recovery rules: the newest version per LBA wins; the newest watermark record gives the
//! clean watermark W. A newest record that is dirty-flagged with version > W is dirty (back
//! in the index, written back by a flush started at open). Dirty-flagged records at or
//! below W, and clean records, are kept only if a valid shutdown snapshot lists their exact
//! (LBA, version) (see [`crate::warm`]); everything else is dropped and marked dead.
//!
//! Threads: the caller's (open is synchronous, before any request or writeback task runs);
//! the engine's IO threads during its recovery scan.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use flashtier_backend::BlockBackend;
use flashtier_flash::{
    Device, DeviceSpec, Flash, FlashConfig, FlashInfo, Location, ReclaimHandler, RecordMeta,
};
use parking_lot::Mutex;

use crate::block_io::BlockIo;
use crate::cache::{BlockCache, BlockCacheConfig, RecoveryInfo};
use crate::error::Error;
use crate::fence::Fence;
use crate::fence_found::{verdict, Verdict};
use crate::index::Index;
use crate::reclaim::{Handler, Shared};
use crate::record::{RecordKind, FLAG_DIRTY};
use crate::stats::BlockStats;
use crate::tunables::Tunables;

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

    // Longer than clippy.toml's 120 lines; left as is by issue 29 (cache crate only).
    #[allow(clippy::too_many_lines)]
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
        // A kv flash file is not a block cache: the engine refuses it (and foreign data).
        fc.role = flashtier_flash::Role::Block;
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
        let nblocks = size / bs;
        let shared = Arc::new(Shared {
            index: Mutex::new(Index::new(0)),
            wm_persisted: AtomicU64::new(0),
            stats: BlockStats::default(),
            warm: Default::default(),
            fence: Fence::new(nblocks, bs, fc.segment_size, cap, 0),
            flash: std::sync::OnceLock::new(),
            reclaim_stream,
            wm_lost: AtomicBool::new(false),
            age_budget: AtomicU64::new(0),
        });
        // Recovery: newest version per LBA, newest watermark.
        let mut newest: std::collections::HashMap<u64, RecordMeta> = Default::default();
        let mut dead: Vec<Location> = Vec::new();
        let mut wm: Option<RecordMeta> = None;
        let mut max_version = 0u64;
        let mut found = crate::warm::Found::default();
        let mut fences = crate::fence_found::Found::default();
        let mut on = |m: RecordMeta| {
            max_version = max_version.max(m.version);
            if found.offer(&m) || fences.offer(&m) {
                return;
            }
            let record_kind = RecordKind::of(m.kind, m.key_id);
            if record_kind == RecordKind::Watermark {
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
            if record_kind != RecordKind::Block || m.key_id >= nblocks {
                dead.push(m.location);
                return;
            }
            shared.fence.saw(m.key_id);
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
        let _ = shared.flash.set(Arc::downgrade(&flash));
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
        // Clean blocks after a crash: kept above their floor and every intent (see `fence`).
        let fence = &shared.fence;
        let floors = match fences.load(&flash, fence) {
            Ok((v, floors)) => {
                fence.raise_all(&floors);
                fence.set_durable(v, floors);
                true
            }
            Err(why) => {
                rec.floor_reason = Some(why);
                false
            }
        };
        rec.intents = fences.intents() as u64;
        let intent_of = fences.fences(&newest);
        let record = flashtier_flash::format::record::padded_len(0, bs as usize) as u64;
        {
            let mut index = shared.index.lock();
            // Sized for every block record the device can hold: the table never grows.
            *index = Index::with_capacity(max_version, info.capacity / record + 1);
            index.wm_loc = wm.map(|w| w.location.pack());
            for (lba, m) in newest {
                let v = verdict(
                    m.version,
                    m.flags & FLAG_DIRTY != 0,
                    watermark,
                    intent_of.get(&lba).copied().unwrap_or(0),
                    floors.then(|| fence.floor(lba)),
                    snapshot.get(&lba) == Some(&m.version),
                );
                match v {
                    Verdict::Dirty => {
                        index.put(lba, m.location.pack(), m.version, true);
                        rec.dirty_blocks += 1;
                    }
                    Verdict::Clean => {
                        index.put(lba, m.location.pack(), m.version, false);
                        rec.clean_kept += 1;
                    }
                    Verdict::Stale => {
                        dead.push(m.location);
                        rec.stale_dropped += 1;
                    }
                    Verdict::Dropped => {
                        dead.push(m.location);
                        rec.clean_dropped += 1;
                    }
                }
            }
            if !floors {
                // Nothing older than now is provable: every floor at a fresh version.
                let now = index.take_version();
                fence.raise_all(&vec![now; fence.regions()]);
            }
            dead.extend(found.locations());
            dead.extend_from_slice(fences.dead());
            for l in dead {
                flash.mark_dead(l);
            }
        }
        shared.wm_persisted.store(watermark, Ordering::Release);
        // Consume the snapshot before anything can reach the backing: a durable session
        // record newer than the marker makes it invalid for every later recovery.
        crate::warm::write_session(&flash, &shared, reclaim_stream)?;
        // The floor table this run starts from, durable before any backing write.
        shared
            .fence
            .persist_blocking(&shared, &flash)
            .map_err(Error::Config)?;
        let usable = info.capacity.saturating_sub(reserve * info.segment_size);
        let capacity_blocks = (usable / record).max(16);
        let cache = Arc::new(BlockCache {
            io: BlockIo::new(shared, flash, backing, bs, capacity_blocks),
            writeback: Default::default(),
            switch: Default::default(),
            admission: Default::default(),
            tunables,
            stopping: AtomicBool::new(false),
            stall_log: Default::default(),
            recovery: rec,
            flash_info: info,
        });
        if cache.recovery.dirty_blocks > 0 {
            cache.start_flush();
        }
        Ok(cache)
    }
}
