//! [`SmallSets`]: the small-object tier — N set pages of 4 KiB on one device, a key hashing
//! to exactly one set, with no RAM entry per object: RAM holds each set's summary
//! (`summary`) and the staging buffer (`staging`), whose batches the flusher thread
//! (`flusher`) merges into pages. [`SmallStore`] is its whole contract with the cache.
//!
//! A lookup asks the staging buffer (exact), then the on-flash log's index (`klog`: a log
//! page read per object of the set whose tag matches, newest first), then the set's filter
//! (a "no" costs no read), then reads the one page. A remove stages a delete whenever a copy may exist (staged, or
//! the filter says maybe), so no older copy can come back. Restarts (`recover`): after a
//! clean [`SmallSets::close`] the next open serves the same items; after a kill it keeps
//! every set the dirty map (`dirty`) does not mark; after a power cut it starts empty.
//!
//! # Threads
//! Any caller inserts, removes and looks up; one flusher thread (`flashtier-small`) merges;
//! device reads and writes run on a flash-engine executor (io_uring where the device has a
//! file descriptor, else a psync pool). Locks, in order: the cache's shard lock, `merging` (a
//! merge, `clear`), then the superblock's `header` or a staging partition (never both at
//! once), the dirty map's writer last. A staged change's dirty mark is a page-cache write (or a store to a
//! mapping) under its partition lock; `clear` writes the superblock and waits for a merge.
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;

use bytes::Bytes;
use flashtier_flash::io::psync::PsyncExecutor;
use flashtier_flash::io::uring::UringExecutor;
use flashtier_flash::io::Executor;
use flashtier_flash::{Device, FileDevice, FlashStats};
use parking_lot::{Condvar, Mutex};

use crate::config::SmallConfig;
use crate::dirty::DirtyMap;
use crate::format::{self, InPage, ItemMeta, Layout, SET_BYTES};
use crate::inner::{key_hash, Inner};
use crate::klog::{KLog, LogRead};
use crate::recover::{self, HeaderState, Recovered};
use crate::staging::{Change, Staging, Stamp};
use crate::stats::Counters;
use crate::summary::Summaries;
use crate::superblock::{self, Found};
use crate::Error;

/// A small item found by a lookup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmallItem {
    /// Its value.
    pub value: Bytes,
    /// Flags, expiry, stored time, CAS.
    pub meta: ItemMeta,
}

/// What a lookup saw: pass `set` and `stamp` to [`SmallStore::still`] under the caller's
/// lock to know it is still true.
#[derive(Clone, Debug)]
pub struct Lookup {
    /// The key's set.
    pub set: u32,
    /// The set's stamp before the lookup looked.
    pub stamp: Stamp,
    /// The item, if the tier holds the key.
    pub item: Option<SmallItem>,
}

/// The small tier's contract (what the cache calls). Every method is best effort except
/// [`remove`](Self::remove), which is what keeps deleted keys from coming back.
pub trait SmallStore: Send + Sync {
    /// Keep `key` → `value` (replacing any copy). False when refused (staging full, or too
    /// large for a page): the key is then removed instead.
    fn insert(&self, key: &[u8], value: &[u8], meta: ItemMeta) -> bool;
    /// No copy of `key` may be served again (delete, overwrite elsewhere, expiry).
    fn remove(&self, key: &[u8]);
    /// Find `key`: staging, filter, then at most one page read.
    fn lookup(&self, key: &[u8]) -> impl Future<Output = Result<Lookup, Error>> + Send;
    /// The key's set and that set's stamp now (take it before looking anywhere).
    fn stamp(&self, key: &[u8]) -> (u32, Stamp);
    /// True when nothing staged for `set` changed since `stamp` (caller holds the lock
    /// every insert and remove of the key is made under).
    fn still(&self, set: u32, stamp: Stamp) -> bool;
    /// Forget everything (`flush_all`): a new generation, staging and summaries cleared.
    fn clear(&self);
    /// Counters and gauges, as `small_*` name/value pairs (docs/stats.md).
    fn stats(&self) -> Vec<(String, String)>;
}

/// The small tier's handle; dropping it stops the flusher.
pub struct SmallSets {
    pub(crate) inner: Arc<Inner>,
    flusher: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for SmallSets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmallSets")
            .field("device", &self.inner.dev_name)
            .field("sets", &self.inner.sets)
            .finish_non_exhaustive()
    }
}

impl SmallSets {
    /// Open (creating or growing) the file at `path` as a tier of `size` bytes (page 0 the
    /// superblock, then the dirty map, then the sets). A file whose first page is neither
    /// zero nor the tier's is refused (it holds someone's data), before anything is written
    /// to it. After a clean stop ([`Self::close`]) of a file of the same size its items are
    /// served again; after a kill on this boot, those of every set with nothing staged;
    /// otherwise the tier starts empty (`recover`, [`Self::recovered`]).
    pub fn open(path: &Path, size: u64, cfg: SmallConfig) -> Result<Self, Error> {
        if let Ok(mut f) = std::fs::File::open(path) {
            let mut first = Vec::with_capacity(SET_BYTES);
            std::io::Read::read_to_end(
                &mut std::io::Read::take(&mut f, SET_BYTES as u64),
                &mut first,
            )?;
            if superblock::decode(&first) == Found::Foreign {
                return Err(Error::Device(format!(
                    "{} holds data that is not a small-object tier; refusing to overwrite it",
                    path.display()
                )));
            }
        }
        let dev = FileDevice::open(path, size, true, true)
            .map_err(|e| Error::Device(format!("{}: {e}", path.display())))?;
        dev.prepare()?;
        Self::with_device(Arc::new(dev), cfg)
    }

    /// A tier over `dev` (whole 4 KiB pages: superblock, dirty map, sets), e.g. a
    /// `MemoryDevice` in tests. Refuses a device whose page 0 is foreign; keeps what the
    /// restart rule allows (`recover`); marks the device in use (durably) before returning.
    pub fn with_device(dev: Arc<dyn Device>, cfg: SmallConfig) -> Result<Self, Error> {
        if !(0.0..=0.9).contains(&cfg.log_fraction) || cfg.merge_min == 0 {
            return Err(Error::Config(
                "log_fraction must be in 0..=0.9 and merge_min ≥ 1".into(),
            ));
        }
        let Some(layout) = Layout::with_log(dev.len() / SET_BYTES as u64, cfg.log_fraction) else {
            return Err(Error::Device(format!(
                "{} is smaller than a superblock, a dirty map and one set, or holds more than \
                 2^32 sets",
                dev.name()
            )));
        };
        let sets = layout.sets;
        if cfg.batch_sets == 0 || cfg.staging_bytes < 64 << 10 {
            return Err(Error::Config(
                "batch_sets must be ≥ 1 and staging_bytes ≥ 64 KiB".into(),
            ));
        }
        let opening = recover::open_device(&*dev, &layout)?;
        let stats = Arc::new(FlashStats::default());
        // One ring per serving lane and one more, the flusher's own (`flusher_lane`).
        let lanes = cfg.io_lanes.max(1);
        let psync = |stats| Arc::new(PsyncExecutor::new(vec![dev.clone()], 4, stats));
        let (exec, uring): (Arc<dyn Executor>, _) = match dev.raw_fd() {
            Some(_) => match UringExecutor::new(vec![dev.clone()], 256, lanes + 1, stats.clone()) {
                Ok(u) => {
                    let u = Arc::new(u);
                    (u.clone(), Some(u))
                }
                Err(e) => {
                    log::warn!("small tier: io_uring unavailable ({e}), using psync");
                    (psync(stats), None)
                }
            },
            None => (psync(stats), None),
        };
        let mut inner = Inner {
            dev_name: dev.name().to_string(),
            dev,
            exec,
            uring,
            pool: Arc::new(flashtier_flash::io::pool::ReadPool::default()),
            sets,
            generation: AtomicU64::new(opening.generation),
            layout,
            dirty: DirtyMap::new(sets, layout.map_off()),
            boot_id: opening.boot_id,
            summaries: Summaries::with_hugepages(sets, cfg.hugepages),
            staging: Staging::default(),
            klog: (layout.log_pages > 0)
                .then(|| KLog::new(sets, layout.log_pages, cfg.log_tag_bits, cfg.hugepages)),
            cfg,
            counters: Counters::default(),
            wake: Mutex::new(false),
            wake_cv: Condvar::new(),
            closed: AtomicBool::new(false),
            merging: Mutex::new(()),
            sealed: AtomicBool::new(false),
            header: Mutex::new(HeaderState::default()),
            recovered: Recovered::default(),
        };
        let started = (|| {
            if let Some(sb) = &opening.adopted {
                inner.recovered = recover::adopt(&inner, sb)?;
                let r = &inner.recovered;
                log::info!(
                    "small tier {}: {} restart, {} items kept, {} sets emptied",
                    inner.dev_name,
                    if r.clean { "clean" } else { "unclean" },
                    r.items,
                    r.dirty_sets
                );
            }
            inner.recovered.last_cas = inner.recovered.last_cas.max(opening.cas_floor);
            let flush_at = inner.recovered.flush_at;
            let floor = inner.recovered.last_cas;
            recover::begin(&inner, opening.adopted.is_none(), flush_at, floor)?;
            // Dirty marks become stores to a mapping where the device can map (a file).
            let map_len = u64::from(layout.map_pages) * SET_BYTES as u64;
            if let Err(e) = inner.dev.journal_attach(layout.map_off(), map_len) {
                log::debug!("small tier: dirty map not mapped ({e})");
            }
            Ok::<(), Error>(())
        })();
        if let Err(e) = started {
            inner.exec.shutdown();
            return Err(e);
        }
        let inner = Arc::new(inner);
        let t = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("flashtier-small".into())
                .spawn(move || {
                    // Its own ring: merges never queue behind (or delay) a worker's GETs.
                    flashtier_flash::use_ring_lane(flusher_lane(&inner.cfg));
                    crate::flusher::run(&inner);
                })?
        };
        Ok(Self {
            inner,
            flusher: Mutex::new(Some(t)),
        })
    }

    /// A clean stop: merge everything staged into the pages, sync them, and mark the
    /// superblock clean with `last_cas` (the cache's CAS counter) and `flush_at` (its
    /// delayed `flush_all`, if any), so the next open serves these items again. Call it once
    /// nothing else changes the tier; a change after it (or a `flush_all`) marks the
    /// superblock open again. On an error the superblock stays open: the next open treats
    /// the stop as a kill. Idempotent. The flusher thread stops when the handle is dropped.
    pub fn close(&self, last_cas: u64, flush_at: Option<u32>) -> Result<(), Error> {
        recover::close(&self.inner, last_cas, flush_at)
    }

    /// Record, durably for a kill, that CAS values up to `ceiling` may be handed out (the
    /// superblock's CAS ceiling); the next open continues above it ([`Recovered::last_cas`]),
    /// so no CAS value handed out before a crash is handed out again. Call it before handing
    /// out a value past the last ceiling recorded; reserve in blocks, it writes a page.
    pub fn reserve_cas(&self, ceiling: u64) -> Result<(), Error> {
        recover::reserve_cas(&self.inner, ceiling)
    }

    /// A handle that reserves CAS values ([`Self::reserve_cas`]) and may outlive this one
    /// (the cache's CAS counter holds it).
    pub fn cas_reserver(&self) -> CasReserver {
        CasReserver {
            inner: self.inner.clone(),
        }
    }

    /// True once [`Self::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.inner.sealed.load(Relaxed)
    }

    /// A delayed `flush_all` to unix time `at` (items stored until then die then): recorded
    /// in the superblock before it returns, so a restart that keeps pages judges them by it
    /// ([`Recovered::flush_at`]).
    pub fn flush_later(&self, at: u32) {
        recover::flush_later(&self.inner, at);
    }

    /// What this open found: whether the pages of a clean stop were adopted, how many
    /// items, and the CAS counter and delayed `flush_all` the cache must continue from.
    pub fn recovered(&self) -> Recovered {
        self.inner.recovered
    }

    /// Merge everything staged, and everything in the on-flash log, into the set pages now
    /// and wait (tests, tools).
    pub fn flush_staged(&self) {
        crate::flusher::drain(&self.inner);
    }

    /// Append everything staged to the on-flash log now (merging the log's oldest segments
    /// into the sets as it needs room) and wait; without a log, merge everything staged
    /// (tests, tools).
    pub fn flush_to_log(&self) {
        match &self.inner.klog {
            Some(log) => {
                let _one_at_a_time = self.inner.merging.lock();
                for _ in 0..1_000_000 {
                    if self.inner.staging.is_empty() || !crate::klog::append(&self.inner, log) {
                        break;
                    }
                }
            }
            None => self.flush_staged(),
        }
    }

    /// A handle for serving event loop `lane` (the threads that called
    /// `flashtier_flash::use_ring_lane(lane)`) to reap the completions of the page reads
    /// they submit, on their own thread: a GET then costs no thread hop. `None` without
    /// io_uring. While no handle is attached a ring's own thread reaps it.
    pub fn reap_handle(&self, lane: usize) -> Option<flashtier_flash::ReapHandle> {
        let lanes = self.inner.cfg.io_lanes.max(1);
        self.inner
            .uring
            .as_ref()
            .and_then(|u| u.reap_handle(lane % lanes))
    }

    /// Log pages (0: no on-flash log).
    pub fn log_pages(&self) -> u32 {
        self.inner.layout.log_pages
    }

    /// Number of sets.
    pub fn sets(&self) -> u32 {
        self.inner.sets
    }

    /// Keys a lookup would find: exact when nothing is staged, else an estimate (stat
    /// `small_live_items_estimate`, docs/stats.md).
    pub fn live_items_estimate(&self) -> u64 {
        self.inner.live_items_estimate()
    }

    /// True when the staging buffer is at its budget (`SmallConfig::staging_bytes`): the
    /// flusher is behind, and past twice the budget inserts are refused. A writer that will
    /// evict into the tier should wait for [`Room::has_room`] first, holding no lock.
    pub fn crowded(&self) -> bool {
        self.inner.staging.bytes() >= self.inner.cfg.staging_bytes
    }

    /// True when nothing is staged (the flusher has taken everything into the log or the
    /// pages): an inserting thread that went idle may then hand its allocator's free pages
    /// back, as the staged copies it allocated have been freed.
    pub fn nothing_staged(&self) -> bool {
        self.inner.staging.is_empty()
    }

    /// A handle that answers whether the staging buffer has room again (a waiter's probe);
    /// it may outlive this one.
    pub fn room(&self) -> Room {
        Room {
            inner: self.inner.clone(),
        }
    }
}

/// Whether the staging buffer has room again ([`SmallSets::crowded`]'s other side).
#[derive(Clone)]
pub struct Room {
    inner: Arc<Inner>,
}

impl Room {
    /// True when staging is below its budget (or the tier is closing: nobody should wait
    /// for a flusher that stopped).
    pub fn has_room(&self) -> bool {
        self.inner.staging.bytes() < self.inner.cfg.staging_bytes || self.inner.closed.load(Relaxed)
    }
}

impl std::fmt::Debug for Room {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Room")
            .field("device", &self.inner.dev_name)
            .finish_non_exhaustive()
    }
}

/// Reserves CAS values in the tier's superblock ([`SmallSets::reserve_cas`]).
#[derive(Clone)]
pub struct CasReserver {
    inner: Arc<Inner>,
}

impl CasReserver {
    /// See [`SmallSets::reserve_cas`].
    pub fn reserve(&self, ceiling: u64) -> Result<(), Error> {
        recover::reserve_cas(&self.inner, ceiling)
    }
}

impl std::fmt::Debug for CasReserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CasReserver")
            .field("device", &self.inner.dev_name)
            .finish_non_exhaustive()
    }
}

impl Drop for SmallSets {
    fn drop(&mut self) {
        self.inner.closed.store(true, Relaxed);
        self.inner.kick();
        if let Some(t) = self.flusher.lock().take() {
            let _ = t.join();
        }
        self.inner.exec.shutdown();
    }
}

/// The flusher thread's ring lane: the one after the serving lanes (whose rings their event
/// loops reap), so its page writes and merge reads are reaped by the ring's own thread.
fn flusher_lane(cfg: &SmallConfig) -> usize {
    cfg.io_lanes.max(1)
}

impl SmallStore for SmallSets {
    fn insert(&self, key: &[u8], value: &[u8], meta: ItemMeta) -> bool {
        let i = &self.inner;
        if !format::fits(key.len(), value.len()) {
            Counters::add(&i.counters.inserts_refused, 1);
            self.remove(key);
            return false;
        }
        let hash = key_hash(key);
        let set = i.set_of(hash);
        let change = Change::Put {
            value: Bytes::copy_from_slice(value),
            meta,
        };
        let limit = i.cfg.staging_bytes.saturating_mul(2);
        let mark = || i.dirty.mark(&*i.dev, set);
        if !i.staging.stage_then(set, hash, key, change, limit, mark) {
            // Refused: no older copy may stay visible in its place.
            Counters::add(&i.counters.inserts_refused, 1);
            self.remove(key);
            i.kick();
            return false;
        }
        recover::check_map(i);
        recover::after_change(i);
        Counters::add(&i.counters.inserts, 1);
        Counters::add(&i.counters.bytes_stored, value.len() as u64);
        if i.staging.bytes() > i.kick_at() {
            i.kick();
        }
        true
    }

    fn remove(&self, key: &[u8]) {
        let i = &self.inner;
        let hash = key_hash(key);
        let set = i.set_of(hash);
        // Staged and the log first, then the filter: an entry leaves staging only after the
        // log indexes it, and the log only after its page is written and the filter holds
        // it, so one of the three always sees a copy.
        let (staged, in_log) = i.staging.with_set(set, |list| {
            let st = list
                .and_then(|l| l.iter().find(|s| s.hash == hash && s.key == key))
                .map(|s| s.change.clone());
            let in_log = i.klog.as_ref().is_some_and(|l| {
                let tag = l.index.tag_of(hash);
                l.index.refs(set).any(|r| r.tag == tag && !r.delete)
            });
            (st, in_log)
        });
        if staged.is_some() || in_log || i.summaries.may_hold(set, hash) {
            if staged != Some(Change::Delete) {
                let mark = || i.dirty.mark(&*i.dev, set);
                i.staging
                    .stage_then(set, hash, key, Change::Delete, u64::MAX, mark);
                recover::check_map(i);
                recover::after_change(i);
                Counters::add(&i.counters.deletes, 1);
            }
            if i.staging.bytes() > i.kick_at() {
                i.kick();
            }
        }
    }

    fn lookup(&self, key: &[u8]) -> impl Future<Output = Result<Lookup, Error>> + Send {
        let i = self.inner.clone();
        let hash = key_hash(key);
        let set = i.set_of(hash);
        let stamp = i.staging.stamp(set);
        async move {
            let mut out = Lookup {
                set,
                stamp,
                item: None,
            };
            let tag = i.klog.as_ref().map_or(0, |l| l.index.tag_of(hash));
            let (staged, logged) = i.staging.with_set(set, |list| {
                let st = list
                    .and_then(|l| l.iter().find(|s| s.hash == hash && s.key == key))
                    .map(|s| s.change.clone());
                let logged = match (&st, &i.klog) {
                    (None, Some(l)) => l.locate_tagged(set, tag),
                    _ => Vec::new(),
                };
                (st, logged)
            });
            // The log, newest first: the first entry of the key decides (only its tag's
            // objects can be the key).
            for at in &logged {
                match crate::klog::read_entry(&i, at).await {
                    LogRead::Entry(e) if e.key == key => {
                        if let Change::Put { value, meta } = crate::klog::change_of(&e) {
                            Counters::add(&i.counters.log_hits, 1);
                            out.item = Some(SmallItem { value, meta });
                        } else {
                            Counters::add(&i.counters.misses, 1);
                        }
                        return Ok(out);
                    }
                    // Another key with the same tag: a read the tag did not save.
                    LogRead::Entry(_) => Counters::add(&i.counters.log_tag_false_reads, 1),
                    // Merged since the chain was copied: the set page holds it all.
                    LogRead::Stale => break,
                    // A lost entry may have been a delete: a miss, never an older version.
                    LogRead::Lost => {
                        Counters::add(&i.counters.misses, 1);
                        return Ok(out);
                    }
                }
            }
            match staged {
                Some(Change::Put { value, meta }) => {
                    Counters::add(&i.counters.staging_hits, 1);
                    out.item = Some(SmallItem { value, meta });
                    return Ok(out);
                }
                Some(Change::Delete) => {
                    Counters::add(&i.counters.misses, 1);
                    return Ok(out);
                }
                None => {}
            }
            if !i.summaries.may_hold(set, hash) {
                Counters::add(&i.counters.filter_negatives, 1);
                Counters::add(&i.counters.misses, 1);
                return Ok(out);
            }
            let generation = i.generation.load(Relaxed);
            Counters::add(&i.counters.page_reads, 1);
            let page = match i.read_page(set).await {
                Ok(p) => p,
                Err(e) => {
                    Counters::add(&i.counters.io_errors, 1);
                    return Err(e);
                }
            };
            // Only the key's entry is built (`format::find`: the page's checks all stay).
            match format::find(&page, set, generation, key) {
                InPage::Hit(slot, e) => {
                    i.summaries.hit(set, slot as u8);
                    Counters::add(&i.counters.hits, 1);
                    out.item = Some(SmallItem {
                        value: e.value,
                        meta: e.meta,
                    });
                }
                InPage::Missing => {
                    Counters::add(&i.counters.false_positives, 1);
                    Counters::add(&i.counters.misses, 1);
                }
                InPage::Corrupt(why) => {
                    Counters::add(&i.counters.corrupt_pages, 1);
                    log::debug!("small tier: set {set} read back corrupt ({why})");
                    Counters::add(&i.counters.false_positives, 1);
                    Counters::add(&i.counters.misses, 1);
                }
            }
            Ok(out)
        }
    }

    fn stamp(&self, key: &[u8]) -> (u32, Stamp) {
        let set = self.inner.set_of(key_hash(key));
        (set, self.inner.staging.stamp(set))
    }

    fn still(&self, set: u32, stamp: Stamp) -> bool {
        self.inner.staging.stamp(set) == stamp
    }

    fn clear(&self) {
        let i = &self.inner;
        // No merge in flight: one that took its batch before the new generation and read the
        // generation after would write flushed entries into the new one.
        let _no_merge = i.merging.lock();
        // The new generation is on the device before any staged delete is dropped.
        recover::next_generation(i);
        i.staging.clear();
        if let Some(l) = &i.klog {
            l.clear();
        }
        i.summaries.clear();
        // Stale dirty marks would empty sets at the next kill; only once the new generation
        // is on the device (else the old pages must stay guarded).
        let recorded = !i.header.lock().distrusted;
        if recorded {
            i.dirty.clear_unstaged(&*i.dev, &i.staging);
            recover::check_map(i);
        }
        i.counters.items.store(0, Relaxed);
        i.counters.sets_used.store(0, Relaxed);
    }

    fn stats(&self) -> Vec<(String, String)> {
        self.inner.stat_pairs()
    }
}
