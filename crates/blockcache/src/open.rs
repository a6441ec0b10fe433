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
//! the engine's IO threads during its recovery scan; its reclaimer, started inside
//! `Flash::open`, waits at the `open_gate` until the index is rebuilt.
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use flashtier_backend::BlockBackend;
use flashtier_flash::{
    Device, DeviceSpec, Flash, FlashConfig, FlashInfo, Location, ReclaimHandler, RecordMeta,
};

use crate::block_io::BlockIo;
use crate::blocks::Blocks;
use crate::cache::{BlockCache, BlockCacheConfig, RecoveryInfo};
use crate::durability::Durability;
use crate::error::Error;
use crate::fence::Fence;
use crate::fence_found::{verdict, Verdict};
use crate::geometry;
use crate::index::{Index, IndexShape, LocCode};
use crate::open_gate::OpenGate;
use crate::reclaim::Handler;
use crate::record::{RecordKind, FLAG_DIRTY};
use crate::stats::BlockStats;
use crate::tunables::Tunables;
use flashtier_flash::format::record::RECORD_HEADER_LEN;

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
        let (bs, fc, tunables) = settings(cap, backing.size(), &cfg)?;
        let reclaim_stream = fc.reclaim_stream;
        // Segments the cache cannot fill with blocks: reclaim's reserve and free target plus
        // one open segment per stream.
        let kept_free = geometry::kept_free(&fc);
        let chunk = fc.chunk_size;
        let segment = fc.segment_size;
        let nblocks = backing.size() / bs;
        let stats = Arc::new(BlockStats::default());
        let blocks = Arc::new(Blocks::default());
        let fence = Fence::new(nblocks, bs, fc.segment_size, cap, 0);
        let durable = Arc::new(Durability::new(fence, reclaim_stream, Arc::clone(&stats)));
        let mut scan = Scan::default();
        // The engine's reclaimer starts inside `open`, before the index is rebuilt below: its
        // callbacks wait at the gate until then (see `open_gate`), whatever way open ends.
        let gate = Arc::new(OpenGate::default());
        let rebuilding = gate.guard();
        let handler: Arc<dyn ReclaimHandler> = Arc::new(Handler {
            blocks: Arc::clone(&blocks),
            durable: Arc::clone(&durable),
            gate: Arc::clone(&gate),
        });
        let (flash, info) = open(fc, handler, &mut |m| scan.offer(m, nblocks, &durable.fence))?;
        for (k, v) in flash_tunables(&cfg) {
            flash.set_knob(&k, &v)?;
        }
        let flash = Arc::new(flash);
        durable.set_flash(&flash);
        // A set formatted with other sizes keeps them, with the engine's chunk for them.
        let chunk = if info.segment_size == segment {
            chunk
        } else {
            FlashConfig::chunk_for(info.segment_size)
        };
        let (shape, capacity_blocks) = index_shape(
            u64::from(info.segments),
            info.segment_size,
            info.capacity,
            chunk,
            bs,
            kept_free,
            nblocks,
        );
        let rec = scan.recover(&flash, &blocks, &durable.fence, bs, nblocks, shape);
        durable.set_wm_persisted(rec.watermark);
        // The index and the persisted watermark are back: reclaim may decide now.
        drop(rebuilding);
        // Consume the snapshot before anything can reach the backing: a durable session
        // record newer than the marker makes it invalid for every later recovery.
        crate::warm::write_session(&flash, &durable.warm, durable.log(), &blocks)?;
        // The floor table this run starts from, durable before any backing write.
        durable
            .fence
            .persist_blocking(durable.log(), &blocks, &flash)
            .map_err(Error::Config)?;
        let cache = Arc::new(BlockCache {
            io: BlockIo::new(blocks, stats, flash, backing, bs, capacity_blocks),
            durable,
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

/// The index's shape and the blocks the cache holds (`capacity_blocks`) on `segments`
/// segments of `segment_size` bytes (`capacity` bytes in all) written in chunks of `chunk`
/// bytes, for a backing of `nblocks` blocks of `bs` bytes. The table is sized for
/// `capacity_blocks` (it grows only if recovery finds more), the sketch for every block
/// record the device can hold.
fn index_shape(
    segments: u64,
    segment_size: u64,
    capacity: u64,
    chunk: u64,
    bs: u64,
    kept_free: u64,
    nblocks: u64,
) -> (IndexShape, u64) {
    let record = flashtier_flash::format::record::padded_len(0, bs as usize) as u64;
    let per_segment = geometry::records_per_segment(segment_size, chunk, record);
    let capacity_blocks = geometry::capacity_blocks(segments, per_segment, kept_free).max(16);
    let shape = IndexShape {
        blocks: capacity_blocks,
        sketch_blocks: capacity / record + 1,
        lba_limit: nblocks,
        loc: LocCode::for_records(
            (segments * segment_size).max(capacity),
            (RECORD_HEADER_LEN as u64) + bs,
        ),
    };
    (shape, capacity_blocks)
}

/// The index shape and `capacity_blocks` that opening a freshly formatted cache device of
/// `cap` bytes in front of a backing of `size` bytes with `cfg` would give, computed
/// without a device (the `index_ram` example measures RAM at sizes no test allocates).
pub fn planned_index_shape(
    cap: u64,
    size: u64,
    cfg: &BlockCacheConfig,
) -> Result<(IndexShape, u64), Error> {
    let (bs, fc, _) = settings(cap, size, cfg)?;
    let segments =
        cap.saturating_sub(flashtier_flash::format::superblock::SUPERBLOCK_AREA) / fc.segment_size;
    Ok(index_shape(
        segments,
        fc.segment_size,
        segments * fc.segment_size,
        fc.chunk_size,
        bs,
        geometry::kept_free(&fc),
        size / bs,
    ))
}

/// Check the settings against the backing's `size`: the block size, the initial tunables and
/// the flash engine's configuration for a cache of `cap` bytes.
fn settings(
    cap: u64,
    size: u64,
    cfg: &BlockCacheConfig,
) -> Result<(u64, FlashConfig, Tunables), Error> {
    let bs = u64::from(cfg.block_size);
    if !bs.is_power_of_two() || !(512..=(1 << 20)).contains(&bs) {
        return Err(Error::Config(format!(
            "block_size {bs} must be a power of two within 512..=1MiB"
        )));
    }
    if !size.is_multiple_of(bs) || size == 0 {
        return Err(Error::Config(format!(
            "backing size {size} is not a non-zero multiple of the block size {bs}"
        )));
    }
    let tunables = Tunables::default();
    for (k, v) in cfg
        .tunables
        .iter()
        .filter(|(k, _)| !k.starts_with("flash."))
    {
        tunables.set(k, v)?;
    }
    let mut fc = cfg
        .flash
        .clone()
        .unwrap_or_else(|| FlashConfig::for_capacity(cap));
    fc.keep_limit = 1.0;
    // Victims by dead bytes, not age: a segment of overwritten versions is freed at little
    // copy cost, and the reclaim stream's segments of moved read blocks (nothing dead) wait
    // for the engine's age bound (docs/block-cache.md "Reclaim", victim choice). The engine's
    // own default (fifo) cannot be told from a choice in a `FlashConfig`, so the face reads
    // fifo there as greedy; `flash.reclaim_policy` in `tunables` (applied once the engine
    // is open, see `flash_tunables`) or at run time chooses fifo.
    if fc.reclaim_policy == flashtier_flash::ReclaimPolicy::Fifo {
        fc.reclaim_policy = flashtier_flash::ReclaimPolicy::Greedy;
    }
    let engine = flash_tunables(cfg);
    for (k, _) in &engine {
        crate::cache::refuse_fixed_knob(k)?;
    }
    flashtier_flash::knobs::validate_knobs(&fc, &engine)?;
    if fc.adopt_geometry {
        // Sizes that are a default, not a choice: the ones that waste least of the device
        // for records of this block size (see `geometry`).
        let record = flashtier_flash::format::record::padded_len(0, bs as usize) as u64;
        if let Some((segment, chunk)) = geometry::choose(cap, record, geometry::kept_free(&fc)) {
            fc.segment_size = segment;
            fc.chunk_size = chunk;
        }
    }
    // Reclaim frees segments at least a quarter dead ahead of writers, up to 1/64 of the
    // segments beyond the high watermark, so a write burst finds free segments instead of
    // waiting for a pass (docs/block-cache.md "Reclaim"). Not kept free: capacity is
    // unchanged. 0 in a `FlashConfig` reads as this default; `flash.free_ahead` in
    // `tunables` or at run time sets another (0 = off).
    if fc.free_ahead == 0 {
        fc.free_ahead = u32::try_from(cap / fc.segment_size.max(1) / 64)
            .unwrap_or(u32::MAX)
            .max(2);
    }
    // A kv flash file is not a block cache: the engine refuses it (and foreign data).
    fc.role = flashtier_flash::Role::Block;
    let max_val = fc.max_value_len(0) as u64;
    if bs > max_val {
        return Err(Error::Config(format!(
            "block_size {bs} exceeds the largest flash record value {max_val}"
        )));
    }
    Ok((bs, fc, tunables))
}

/// The `flash.*` entries of the config's tunables, as engine knob names: checked in
/// `settings`, applied to the engine right after it opens (as `BlockCache::set_tunable`
/// would).
fn flash_tunables(cfg: &BlockCacheConfig) -> Vec<(String, String)> {
    cfg.tunables
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("flash.")?.to_string(), v.clone())))
        .collect()
}

/// What the recovery scan found: the newest record per LBA, the newest watermark, the
/// warm-restart and fence records, and the records already known dead.
#[derive(Default)]
struct Scan {
    newest: HashMap<u64, RecordMeta>,
    dead: Vec<Location>,
    wm: Option<RecordMeta>,
    max_version: u64,
    found: crate::warm::Found,
    fences: crate::fence_found::Found,
}

impl Scan {
    /// One record found on flash (of a backing of `nblocks` blocks).
    fn offer(&mut self, m: RecordMeta, nblocks: u64, fence: &Fence) {
        self.max_version = self.max_version.max(m.version);
        if self.found.offer(&m) || self.fences.offer(&m) {
            return;
        }
        let record_kind = RecordKind::of(m.kind, m.key_id);
        if record_kind == RecordKind::Watermark {
            match &self.wm {
                Some(w) if w.version >= m.version => self.dead.push(m.location),
                _ => {
                    if let Some(w) = self.wm.replace(m) {
                        self.dead.push(w.location);
                    }
                }
            }
            return;
        }
        if record_kind != RecordKind::Block || m.key_id >= nblocks {
            self.dead.push(m.location);
            return;
        }
        fence.saw(m.key_id);
        match self.newest.get(&m.key_id) {
            Some(o) if o.version > m.version => self.dead.push(m.location),
            _ => {
                if let Some(o) = self.newest.insert(m.key_id, m) {
                    self.dead.push(o.location);
                }
            }
        }
    }

    /// Rebuild `blocks` (an index of `shape`) from what was found: dirty blocks above
    /// the watermark, clean blocks proven current by the snapshot or the fence; mark every
    /// other record dead.
    fn recover(
        self,
        flash: &Flash,
        blocks: &Blocks,
        fence: &Fence,
        bs: u64,
        nblocks: u64,
        shape: IndexShape,
    ) -> RecoveryInfo {
        let Scan {
            newest,
            mut dead,
            wm,
            max_version,
            found,
            fences,
        } = self;
        let watermark = wm.map(|w| w.version).unwrap_or(0);
        let mut rec = RecoveryInfo {
            watermark,
            ..Default::default()
        };
        // Clean blocks come back only from a valid shutdown snapshot (see `warm`).
        let snapshot = match found.load(flash, max_version, bs, nblocks) {
            Ok(s) => s,
            Err(why) => {
                rec.cold_reason = Some(why);
                Default::default()
            }
        };
        // Clean blocks after a crash: kept above their floor and every intent (see `fence`).
        let floors = match fences.load(flash, fence) {
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
        // Rebuilt under the index mutex: reclaim waits until every block is back.
        blocks.locked(|index| {
            let shape = IndexShape {
                blocks: shape.blocks.max(newest.len() as u64),
                ..shape
            };
            *index = Index::for_device(max_version, shape);
            index.set_wm_loc(wm.map(|w| w.location.pack()));
            for (lba, m) in newest {
                let v = verdict(
                    m.version,
                    m.flags & FLAG_DIRTY != 0,
                    watermark,
                    intent_of.get(&lba).copied().unwrap_or(0),
                    floors.then(|| fence.floor(lba)),
                    snapshot.get(&lba) == Some(&m.location.pack()),
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
        });
        rec
    }
}
