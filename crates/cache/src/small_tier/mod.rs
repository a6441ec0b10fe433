//! The small-object tier as the cache holds it (issue 28): [`Small`], off or on over a
//! `flashtier_smallset::SmallSets`, and the glue between it and the index. Items whose value
//! is at most `SmallSettings::item_max` bytes leave RAM for their key's set page instead of
//! the flash log, and keep no index slot; a key with no slot is then looked up there.
//!
//! Invariant (what keeps a deleted or overwritten key from coming back): a key with an
//! index slot (RAM or flash) has no live copy in the small tier, except a RAM version marked
//! `HOME_BELOW`, whose copy there is that same version (the write-back's, `writeback`). RAM
//! eviction inserts a key and removes its slot under the key's shard lock (`Below`, the RAM
//! tier's `LowerTier`); every write that publishes or removes a key that had no RAM slot, or
//! whose RAM version is `HOME_BELOW`, removes its small copy under the same lock (`ops`);
//! phase 2 re-checks, under that lock, the stamp phase 1 took before looking, so a lookup
//! that raced an insert or remove runs again.
//!
//! Restarts (docs/eviction.md, "Small objects"): small RAM versions reach the tier after a
//! write-back window (`writeback`); a clean close (`close`) moves the small RAM items the
//! flash log did not take to the tier and closes it cleanly, and the next open serves them
//! again, continuing the CAS counter and delayed `flush_all` the tier recorded; after a kill
//! the tier replays its log, keeps the sets that had nothing staged (its dirty map) and
//! empties the rest, so a lost staged delete or overwrite never brings an old value back. The
//! cache's CAS counter records a ceiling in the tier's superblock a block ahead
//! (`Meta::with_cas_store`), so no CAS value handed out before a kill is handed out again.
//! The dumps list the tier's items after the index's (`dump::small`).
//! A RAM version of a small item is not written to the flash log while it is in RAM (only
//! to the tier, by the write-back). Meta
//! flags of a small item: `stale`/`win` items are not sent to the tier; `fetched` reads
//! false there.
//!
//! Back-pressure (`await_room`): RAM eviction stages into the tier under the shard lock and
//! never waits there; when the flusher falls behind, staging crosses its budget and, at
//! twice it, the tier refuses — the item then goes to the flash log with a RAM index entry
//! (~11 B of RAM) instead, which under a full-speed fill was most of them. So a write first
//! awaits room in staging, holding no lock, for at most `SmallSettings::wait`
//! (`--small-wait-ms`), on a gate like the flash log's (`flash_tier::backpressure`): the
//! fill runs at the tier's pace. After the bound it goes on (an eviction the tier still
//! refuses takes today's path, counted in `small_inserts_refused`).
//!
//! # Threads
//! Any caller; the tier's own locks are leaves below the shard lock. One
//! `flashtier-appendwait` thread per tier probes staging while writers wait.
pub(crate) mod below;
mod close;
pub(crate) mod config;
pub(crate) mod writeback;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use flashtier_smallset::{
    ItemMeta as SmallMeta, Recovered, SmallItem, SmallSets, SmallStore, Stamp,
};

use crate::flash_tier::backpressure::{Budget, Gate, GateThread};

use crate::ram::arena::RecordRef;
use crate::ram::record::{F_STALE, F_WIN, HOME_DIRTY, HOME_OLDER, HOME_VALID};
use crate::{Item, ItemMeta};
pub use config::{FlagDefaults, SmallDevice, SmallSettings};

/// Sets a dump part reads (1 MiB of pages, all in flight together).
const SETS_PER_PART: u32 = 256;

/// What phase 1 saw of the small tier (see `Small::view`).
#[derive(Clone, Debug)]
pub(crate) struct SmallSeen {
    set: u32,
    stamp: Stamp,
    /// The item, if phase 1 looked and found it.
    pub(crate) item: Option<SmallItem>,
}

/// The small tier, or none.
pub(crate) enum Small {
    /// Off (`small_item_max` 0, the default): every method does nothing.
    Off,
    /// On: values of at most `item_max` bytes go to `sets`; `wb` writes RAM versions there
    /// after a window (`writeback`).
    On {
        sets: SmallSets,
        item_max: usize,
        /// Writers await room in staging here (`await_room`), at most `wait`.
        room: Room,
        wb: writeback::SmallWriteBack,
    },
}

/// The tier's back-pressure gate and its probing thread (see the module docs).
pub(crate) struct Room {
    gate: Arc<Gate>,
    wait: Duration,
    _thread: Option<GateThread>,
}

impl Small {
    /// Open the tier `settings` describe (off without settings or with `item_max` 0).
    pub(crate) fn open(
        settings: Option<&SmallSettings>,
    ) -> Result<Self, flashtier_smallset::Error> {
        let Some(s) = settings.filter(|s| s.item_max > 0) else {
            return Ok(Small::Off);
        };
        let cfg = flashtier_smallset::SmallConfig {
            staging_bytes: s.staging_bytes,
            log_fraction: s.log_fraction,
            merge_min: s.merge_min,
            merge_pages: s.merge_pages,
            hugepages: s.hugepages,
            io_lanes: s.io_lanes,
            release_memory: s.release_memory,
            ..Default::default()
        };
        let sets = match &s.device {
            SmallDevice::File { path, size } => SmallSets::open(path, *size, cfg)?,
            SmallDevice::Device(d) => SmallSets::with_device(d.clone(), cfg)?,
        };
        let gate = Arc::new(Gate::default());
        let thread = if s.wait.is_zero() {
            None
        } else {
            let probe = sets.room();
            Some(GateThread::spawn(gate.clone(), move || probe.has_room())?)
        };
        Ok(Small::On {
            sets,
            item_max: s.item_max,
            room: Room {
                gate,
                wait: s.wait,
                _thread: thread,
            },
            wb: writeback::SmallWriteBack::new(s.release_memory),
        })
    }

    /// Before a write's phase 2 (holding no lock): if the tier's staging is at its budget
    /// (the flusher is behind), await room within the request's `budget` of
    /// `SmallSettings::wait`, so the eviction the write may cause is taken by the tier and
    /// not pushed to the flash log. Ready at once when off, not crowded, or the budget is
    /// spent (counted: `small_insert_waits`, `small_insert_wait_us`,
    /// `small_insert_wait_timeouts`).
    pub(crate) async fn await_room(&self, budget: &mut Budget) {
        let Small::On { sets, room, .. } = self else {
            return;
        };
        if room.wait.is_zero() || !sets.crowded() {
            return;
        }
        room.gate.pressure();
        let left = budget.left(room.wait);
        if !left.is_zero() {
            room.gate.writable(left).await;
        }
    }

    /// A handle for serving loop `lane` to reap its own small-tier page reads
    /// (`SmallSets::reap_handle`); `None` when the tier is off or has no io_uring.
    pub(crate) fn reap_handle(&self, lane: usize) -> Option<flashtier_flash::ReapHandle> {
        match self {
            Small::Off => None,
            Small::On { sets, .. } => sets.reap_handle(lane),
        }
    }

    /// True when the tier is on.
    pub(crate) fn is_on(&self) -> bool {
        matches!(self, Small::On { .. })
    }

    /// Offer an evicted RAM record: true when the tier took it (the slot then goes). Only a
    /// record with no flash home, no older version on flash and no meta flags qualifies. A
    /// version the write-back already put in the tier (`HOME_BELOW`) is not written again:
    /// the slot just goes.
    pub(crate) fn take(&self, rec: &RecordRef<'_>, key: &[u8]) -> bool {
        let Small::On { sets, .. } = self else {
            return false;
        };
        self.qualifies(rec)
            && (rec.header.small_below() || sets.insert(key, &rec.value(), meta_of(rec)))
    }

    /// True when the tier would keep this record: on, no flash home, no older version on
    /// flash (it would shadow the tier's copy after a restart), no meta flags, small enough.
    /// A wait for the tier's write-back or a copy there already (`writeback`) qualifies.
    pub(crate) fn qualifies(&self, rec: &RecordRef<'_>) -> bool {
        let Small::On { item_max, .. } = self else {
            return false;
        };
        let h = &rec.header;
        h.home & (HOME_VALID | HOME_DIRTY | HOME_OLDER) == 0
            && h.rflags & (F_STALE | F_WIN) == 0
            && h.vlen as usize <= *item_max
    }

    /// The home word of a new small version the tier will keep (`LowerTier::home_for`): a
    /// wait for the write-back, continuing `old`'s (the replaced version's) if it waited.
    pub(crate) fn wait_word(&self, clock: &crate::Clock, hash: u64, old: Option<u64>) -> u64 {
        match self {
            Small::Off => 0,
            Small::On { wb, .. } => wb.wait_word(clock, hash, old),
        }
    }

    /// True when a new version of `len` value bytes skips the flash log (it goes to the tier
    /// when RAM evicts it).
    pub(crate) fn keeps(&self, len: usize) -> bool {
        matches!(self, Small::On { item_max, .. } if len <= *item_max)
    }

    /// No copy of `key` may be served again (shard lock held).
    pub(crate) fn remove(&self, key: &[u8]) {
        if let Small::On { sets, .. } = self {
            sets.remove(key);
        }
    }

    /// Phase 1: the key's stamp, then — unless `in_ram` says the key has a RAM slot — its
    /// lookup. `None` when the tier is off. A failed read is a miss (counted by the tier).
    pub(crate) async fn view(
        &self,
        key: &[u8],
        in_ram: impl FnOnce() -> bool,
    ) -> Option<SmallSeen> {
        let Small::On { sets, .. } = self else {
            return None;
        };
        let (set, stamp) = sets.stamp(key);
        let mut seen = SmallSeen {
            set,
            stamp,
            item: None,
        };
        if !in_ram() {
            if let Ok(l) = sets.lookup(key).await {
                seen.item = l.item;
            }
        }
        Some(seen)
    }

    /// Phase 2 (shard lock held): true when what phase 1 saw is still true.
    pub(crate) fn still(&self, seen: &SmallSeen) -> bool {
        match self {
            Small::Off => true,
            Small::On { sets, .. } => sets.still(seen.set, seen.stamp),
        }
    }

    /// What the open found (a clean restart's CAS counter and delayed `flush_all`), or
    /// `None` when the tier is off.
    pub(crate) fn recovered(&self) -> Option<Recovered> {
        match self {
            Small::Off => None,
            Small::On { sets, .. } => Some(sets.recovered()),
        }
    }

    /// The tier's CAS ceiling recorder for the cache's counter (`Meta::with_cas_store`), or
    /// `None` when the tier is off.
    pub(crate) fn cas_store(&self) -> Option<Box<dyn crate::meta::CasStore>> {
        match self {
            Small::Off => None,
            Small::On { sets, .. } => Some(Box::new(sets.cas_reserver())),
        }
    }

    /// A delayed `flush_all` to `at`: the tier records it, so a restart that keeps its pages
    /// judges them by it (`SmallSets::flush_later`).
    pub(crate) fn flush_later(&self, at: u32) {
        if let Small::On { sets, .. } = self {
            sets.flush_later(at);
        }
    }

    /// `flush_all` now.
    pub(crate) fn clear(&self) {
        if let Small::On { sets, .. } = self {
            sets.clear();
        }
    }

    /// Parts the dumps walk the tier in ([`SETS_PER_PART`] sets each; 0 when off).
    pub(crate) fn dump_parts(&self) -> usize {
        match self {
            Small::Off => 0,
            Small::On { sets, .. } => sets.sets().div_ceil(SETS_PER_PART) as usize,
        }
    }

    /// The live entries of dump part `part` (staging shadows pages; expiry and `flush_all`
    /// are the caller's to judge), each page read once.
    pub(crate) async fn dump_part(&self, part: usize) -> Vec<flashtier_smallset::Listed> {
        let Small::On { sets, .. } = self else {
            return Vec::new();
        };
        let Ok(part) = u32::try_from(part) else {
            return Vec::new();
        };
        let first = part.saturating_mul(SETS_PER_PART);
        sets.list_sets(first, SETS_PER_PART).await
    }

    /// The `small` stats section (with the settings), or `None` when off. `now_ms` and
    /// `window_ms` date the write-back's lag.
    pub(crate) fn stats(&self, now_ms: u64, window_ms: u64) -> Option<Vec<(String, String)>> {
        let Small::On {
            sets,
            item_max,
            room,
            wb,
        } = self
        else {
            return None;
        };
        let g = &room.gate;
        let mut v = vec![
            ("small_item_max".to_string(), item_max.to_string()),
            (
                "small_wait_ms".to_string(),
                room.wait.as_millis().to_string(),
            ),
            (
                "small_insert_waits".to_string(),
                g.waits.load(Relaxed).to_string(),
            ),
            (
                "small_insert_wait_us".to_string(),
                g.wait_us.load(Relaxed).to_string(),
            ),
            (
                "small_insert_wait_timeouts".to_string(),
                g.wait_timeouts.load(Relaxed).to_string(),
            ),
        ];
        v.extend(sets.stats());
        v.extend(wb.stats(now_ms, window_ms));
        Some(v)
    }
}

impl crate::meta::CasStore for flashtier_smallset::CasReserver {
    fn reserve(&self, ceiling: u64) -> Result<(), String> {
        flashtier_smallset::CasReserver::reserve(self, ceiling).map_err(|e| e.to_string())
    }
}

/// What the tier keeps of a record besides key and value.
pub(crate) fn meta_of(rec: &RecordRef<'_>) -> SmallMeta {
    let h = &rec.header;
    SmallMeta {
        flags: h.flags,
        exptime: h.exptime,
        stored: h.stored,
        cas: h.cas,
    }
}

/// The item a small-tier copy holds, as a reader sees it.
pub(crate) fn item_of(s: &SmallItem) -> Item {
    Item {
        value: s.value.clone(),
        flags: s.meta.flags,
        exptime: s.meta.exptime,
        cas: s.meta.cas,
        meta: ItemMeta {
            stale: false,
            win_token_sent: false,
            fetched: false,
            last_access: s.meta.stored,
        },
    }
}

impl crate::Cache {
    /// Merge everything the small-object tier has staged into its set pages now and wait
    /// (tests and tools; the tier's flusher does this on its own past its staging budget).
    /// Does nothing when the tier is off.
    pub fn small_flush_staged(&self) {
        if let Small::On { sets, .. } = &self.core.small {
            sets.flush_staged();
        }
    }
}

/// The small tier under a RAM-only cache (no flash log): evicted small items are kept and
/// served, larger ones dropped as without it, and every kind of write removes the copy.
#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use flashtier_flash::MemoryDevice;

    use super::{SmallDevice, SmallSettings};
    use crate::{Cache, CacheConfig, ItemWrite, KvStore, Update};

    fn cache() -> Cache {
        cache_on(Arc::new(MemoryDevice::new("small", 8 << 20)))
    }

    /// A RAM-only cache of 256 KiB (64 KiB segments) with a small tier on `dev` (items up to
    /// 200 bytes); shared with `ops::get`'s tests.
    pub(crate) fn cache_on(dev: Arc<MemoryDevice>) -> Cache {
        let cfg = CacheConfig::builder()
            .memory_limit(256 << 10)
            .segment_size(64 << 10)
            .max_item_size(64 << 10)
            .sweep_interval(None)
            .small(SmallSettings::new(SmallDevice::Device(dev), 200))
            .build()
            .unwrap();
        Cache::new(cfg).unwrap()
    }

    fn key(i: u32) -> Vec<u8> {
        format!("k{i}").into_bytes()
    }

    fn fill(c: &Cache, n: u32, len: usize) {
        for i in 0..n {
            let v = Bytes::from(vec![(i % 251) as u8; len]);
            c.set_now(&key(i), ItemWrite::new(v, i, 0)).unwrap();
        }
    }

    #[test]
    fn evicted_small_items_are_served_and_large_ones_dropped() {
        let c = cache();
        fill(&c, 4000, 150);
        c.small_flush_staged();
        assert!(c.stats().curr_items < 4000);
        for i in 0..4000 {
            let it = c.get_now(&key(i)).unwrap().expect("kept by the small tier");
            assert_eq!(it.value.len(), 150);
            assert_eq!(it.flags, i);
        }
        assert_eq!(c.stats().evictions, 0, "taking an item is not an eviction");
        let big = cache();
        fill(&big, 400, 1000);
        assert!(
            big.stats().evictions > 0,
            "values over item_max are evicted as before"
        );
    }

    #[test]
    fn writes_to_a_small_item_replace_and_remove_its_copy() {
        let c = cache();
        fill(&c, 4000, 150);
        c.small_flush_staged();
        // An update sees the small copy and publishes the new version in RAM.
        let (seen, _) = c
            .update_now(&key(1), |cur| {
                let v = cur.map(|i| i.value.len());
                (
                    Update::Put(ItemWrite::new(Bytes::from_static(b"new"), 9, 0)),
                    v,
                )
            })
            .unwrap();
        assert_eq!(seen, Some(150));
        assert_eq!(&c.get_now(&key(1)).unwrap().unwrap().value[..], b"new");
        // Deletes, blind or not, remove it for good.
        assert!(c.delete_now(&key(2)));
        assert!(crate::block::block_on(c.delete(&key(3))).unwrap());
        assert!(!crate::block::block_on(c.delete(&key(3))).unwrap());
        for _ in 0..2 {
            c.small_flush_staged();
            assert_eq!(c.get_now(&key(2)).unwrap(), None);
            assert_eq!(c.get_now(&key(3)).unwrap(), None);
            // Push the new version of key 1 out of RAM too: the tier then holds it, not the old.
            for i in 10_000..12_000 {
                let v = Bytes::from(vec![1; 150]);
                c.set_now(&key(i), ItemWrite::new(v, 0, 0)).unwrap();
            }
        }
        assert_eq!(&c.get_now(&key(1)).unwrap().unwrap().value[..], b"new");
        c.core.flush_all(0);
        c.small_flush_staged();
        assert_eq!(
            c.get_now(&key(4)).unwrap(),
            None,
            "flush_all empties the tier"
        );
    }

    fn cache_waiting(wait: std::time::Duration) -> Cache {
        let dev = Arc::new(MemoryDevice::new("small", 8 << 20));
        let mut small = SmallSettings::new(SmallDevice::Device(dev), 200);
        // Room above the budget for one RAM segment's evictions (64 KiB of records).
        small.staging_bytes = 256 << 10;
        small.wait = wait;
        let cfg = CacheConfig::builder()
            .memory_limit(256 << 10)
            .segment_size(64 << 10)
            .max_item_size(64 << 10)
            .sweep_interval(None)
            .small(small)
            .build()
            .unwrap();
        Cache::new(cfg).unwrap()
    }

    /// Back-pressure: a writer that finds staging at its budget waits (holding no lock) for
    /// the flusher, so no eviction is refused by the tier — one writer overshoots the
    /// budget by at most one RAM segment's evictions, never reaching the refusal limit at
    /// twice it — and every value is served; with the wait off nothing waits.
    #[test]
    fn writes_wait_for_staging_room_instead_of_the_tier_refusing() {
        let c = cache_waiting(std::time::Duration::from_secs(30));
        fill(&c, 20_000, 150);
        assert_eq!(small_stat(&c, "small_inserts_refused"), 0);
        assert_eq!(small_stat(&c, "small_insert_wait_timeouts"), 0);
        assert_eq!(small_stat(&c, "small_wait_ms"), 30_000);
        for i in (0..20_000).step_by(97) {
            if let Some(it) = c.get_now(&key(i)).unwrap() {
                assert_eq!((it.flags, it.value[0]), (i, (i % 251) as u8), "key {i}");
            }
        }
        assert_eq!(c.stats().evictions, 0, "the tier took every eviction");
        let off = cache_waiting(std::time::Duration::ZERO);
        fill(&off, 20_000, 150);
        assert_eq!(small_stat(&off, "small_insert_waits"), 0);
        assert_eq!(small_stat(&off, "small_wait_ms"), 0);
    }

    /// The version each key must have: (flags, value byte), or `None` when deleted.
    fn churn(c: &Cache) -> Vec<Option<(u32, u8)>> {
        fill(c, 4000, 150);
        c.small_flush_staged();
        let mut want: Vec<Option<(u32, u8)>> =
            (0..4000).map(|i| Some((i, (i % 251) as u8))).collect();
        for i in (0..4000u32).step_by(7) {
            assert!(c.delete_now(&key(i)));
            want[i as usize] = None;
        }
        for i in (3..4000u32).step_by(11) {
            let v = Bytes::from(vec![7; 120]);
            c.set_now(&key(i), ItemWrite::new(v, 100_000 + i, 0))
                .unwrap();
            want[i as usize] = Some((100_000 + i, 7));
        }
        want
    }

    #[test]
    fn a_clean_close_keeps_every_small_item_and_delete_across_a_restart() {
        let dev = Arc::new(MemoryDevice::new("small", 8 << 20));
        let c = cache_on(dev.clone());
        let want = churn(&c);
        let cas = c.last_cas();
        c.close().unwrap();
        drop(c);
        let c = cache_on(dev);
        let stats: std::collections::HashMap<_, _> =
            c.stats_section("small").unwrap().into_iter().collect();
        assert_eq!(stats["small_restart_clean"], "1");
        assert!(
            c.last_cas() >= cas,
            "CAS values continue above the last run's"
        );
        for (i, w) in want.iter().enumerate() {
            let got = c.get_now(&key(i as u32)).unwrap();
            let got = got.map(|it| (it.flags, it.value[0], it.value.len()));
            let w = w.map(|(f, b)| (f, b, if f >= 100_000 { 120 } else { 150 }));
            assert_eq!(got, w, "key {i} after a clean restart");
        }
        let fresh = c
            .set_now(b"new", ItemWrite::new(Bytes::from_static(b"x"), 0, 0))
            .unwrap();
        assert!(fresh > cas);
    }

    #[test]
    fn a_crash_never_brings_back_a_deleted_or_replaced_small_item() {
        let dev = Arc::new(MemoryDevice::new("small", 8 << 20));
        let c = cache_on(dev.clone());
        let want = churn(&c);
        c.small_flush_staged();
        // What a kill -9 now would leave on the device.
        let image = dev.image();
        drop(c);
        let c = cache_on(Arc::new(MemoryDevice::from_image("crashed", image)));
        for (i, w) in want.iter().enumerate() {
            if let Some(it) = c.get_now(&key(i as u32)).unwrap() {
                assert_eq!(
                    Some((it.flags, it.value[0])),
                    *w,
                    "key {i}: a deleted or replaced value after a crash"
                );
            }
        }
    }

    /// CAS values handed to versions that lived only in RAM die with a kill; the tier's
    /// recorded CAS ceiling keeps a restart from handing any of them out again.
    #[test]
    fn a_crash_never_hands_out_a_cas_value_again() {
        let dev = Arc::new(MemoryDevice::new("small", 8 << 20));
        let c = cache_on(dev.clone());
        // A few items on pages, then newer versions only in RAM (with the largest CAS).
        fill(&c, 4000, 150);
        c.small_flush_staged();
        let mut handed = Vec::new();
        for i in 0..50u32 {
            let v = Bytes::from(vec![3; 50]);
            handed.push(c.set_now(&key(i), ItemWrite::new(v, 0, 0)).unwrap());
        }
        let top = *handed.iter().max().unwrap();
        assert_eq!(top, c.last_cas());
        // What a kill -9 now would leave on the device.
        let image = dev.image();
        drop(c);
        for round in 0..2 {
            let c = cache_on(Arc::new(MemoryDevice::from_image("crashed", image.clone())));
            assert!(
                c.last_cas() >= top,
                "round {round}: CAS restarts below {top}"
            );
            for i in 0..20u32 {
                let v = Bytes::from(vec![4; 50]);
                let cas = c.set_now(&key(i), ItemWrite::new(v, 0, 0)).unwrap();
                assert!(cas > top, "CAS {cas} handed out before the crash too");
            }
        }
        // Also when the kill lands on a fresh start (nothing kept): the ceiling is read from
        // any superblock of ours.
        let mut blank_pages = image.clone();
        let c = cache_on(Arc::new(MemoryDevice::from_image("crashed", image)));
        let cas = c
            .set_now(b"x", ItemWrite::new(Bytes::from_static(b"x"), 0, 0))
            .unwrap();
        assert!(cas > top);
        drop(c);
        blank_pages.truncate(4096);
        blank_pages.resize(8 << 20, 0);
        let c = cache_on(Arc::new(MemoryDevice::from_image("crashed", blank_pages)));
        assert!(
            c.last_cas() >= top,
            "only the superblock survived: still above"
        );
    }

    /// What a kill -9 leaves of a cache on `dev`, opened again.
    fn reopen_crashed(dev: &Arc<MemoryDevice>) -> Cache {
        cache_on(Arc::new(MemoryDevice::from_image("crashed", dev.image())))
    }

    fn put(c: &Cache, i: u32, byte: u8, len: usize) {
        let v = Bytes::from(vec![byte; len]);
        c.set_now(&key(i), ItemWrite::new(v, u32::from(byte), 0))
            .unwrap();
    }

    /// Small items RAM still holds reach the tier after the write-back window, so a kill
    /// keeps them (before: only evicted ones were on flash, every RAM item was lost).
    #[test]
    fn write_back_keeps_small_ram_items_across_a_kill() {
        let dev = Arc::new(MemoryDevice::new("small", 8 << 20));
        let c = cache_on(dev.clone());
        for i in 0..300 {
            put(&c, i, 5, 100);
        }
        assert_eq!(c.stats().curr_items, 300, "all still in RAM");
        // Without the write-back, a kill keeps none of them.
        c.small_flush_staged();
        let lost = reopen_crashed(&dev);
        assert!((0..300).all(|i| lost.get_now(&key(i)).unwrap().is_none()));
        drop(lost);
        assert_eq!(c.small_write_back_now(), 300);
        assert_eq!(small_stat(&c, "small_written_back"), 300);
        c.small_flush_staged();
        let again = reopen_crashed(&dev);
        for i in 0..300 {
            let it = again.get_now(&key(i)).unwrap().expect("written back");
            assert_eq!((it.flags, &it.value[..]), (5, &[5u8; 100][..]));
        }
        // The copies are the RAM versions', listed once, and served from RAM meanwhile.
        let seen = dumped(&c);
        assert!((0..300).all(|i| seen.get(&key(i)) == Some(&1)));
        assert_eq!(c.small_write_back_now(), 0, "nothing waits twice");
    }

    /// A version the write-back copied that is then overwritten, deleted, touched or grown
    /// never comes back after a kill, whether the kill lands before or after the tier merged
    /// the removal of its copy; untouched keys are served.
    #[test]
    fn writes_after_write_back_never_uncover_the_copy() {
        for merge_before_kill in [false, true] {
            let dev = Arc::new(MemoryDevice::new("small", 8 << 20));
            let c = cache_on(dev.clone());
            for i in 0..400 {
                put(&c, i, 1, 100);
            }
            c.small_write_back_now();
            c.small_flush_staged();
            for i in (0..400u32).step_by(4) {
                put(&c, i, 2, 100); // same size: in place
            }
            for i in (1..400u32).step_by(4) {
                put(&c, i, 3, 40); // another size
            }
            for i in (2..400u32).step_by(4) {
                assert!(c.delete_now(&key(i)));
            }
            if merge_before_kill {
                c.small_flush_staged();
            }
            let k = reopen_crashed(&dev);
            for i in 0..400u32 {
                let got = k.get_now(&key(i)).unwrap().map(|it| it.flags);
                match i % 4 {
                    // A set with a removal still staged is emptied by the kill (the loss
                    // rule): an untouched key in it may be a miss, never another value.
                    3 if !merge_before_kill => {
                        assert!(got.is_none_or(|f| f == 1), "key {i}: untouched, {got:?}")
                    }
                    3 => assert_eq!(got, Some(1), "key {i}: untouched, written back"),
                    _ => assert_eq!(got, None, "key {i}: an old version after a kill"),
                }
            }
            drop(k);
            // The new versions are written back in turn and kept.
            c.small_write_back_now();
            c.small_flush_staged();
            let k = reopen_crashed(&dev);
            for i in 0..400u32 {
                let got = k.get_now(&key(i)).unwrap().map(|it| it.flags);
                let want = [Some(2), Some(3), None, Some(1)][(i % 4) as usize];
                assert_eq!(got, want, "key {i} after the second write-back");
            }
        }
    }

    /// RAM evicting a version the write-back put in the tier writes nothing again, and the
    /// key is served from the tier.
    #[test]
    fn evicting_a_written_back_version_costs_no_second_insert() {
        let c = cache();
        for i in 0..200 {
            put(&c, i, 9, 150);
        }
        c.small_write_back_now();
        let inserts = small_stat(&c, "small_inserts");
        // Fill RAM with others until the first 200 are evicted (they are written back; the
        // new ones are evicted unwritten and inserted at eviction).
        for i in 1000..4000 {
            put(&c, i, 7, 150);
        }
        assert!((0..200).all(|i| c.core.slots.len() > 0 && {
            let hash = c.core.slots.hash(&key(i));
            let shard = c.core.slots.lock(hash);
            c.core.ram.find_key(&shard, hash, &key(i)).is_none()
        }));
        let evicted_new = 3000 - c.stats().curr_items;
        assert_eq!(
            small_stat(&c, "small_inserts") - inserts,
            evicted_new,
            "only the unwritten ones were inserted at eviction"
        );
        c.small_flush_staged();
        for i in 0..200 {
            assert_eq!(c.get_now(&key(i)).unwrap().unwrap().flags, 9);
        }
    }

    /// Every live key of the cache, counted in the dumps (all parts).
    fn dumped(c: &Cache) -> std::collections::HashMap<Vec<u8>, usize> {
        let mut seen = std::collections::HashMap::new();
        for p in 0..c.dump_parts() {
            for info in crate::block::block_on(c.dump_part(p)) {
                *seen.entry(info.key.to_vec()).or_insert(0) += 1;
            }
        }
        seen
    }

    fn small_stat(c: &Cache, name: &str) -> u64 {
        let s = c.stats_section("small").unwrap();
        s.into_iter()
            .find(|(k, _)| k == name)
            .unwrap()
            .1
            .parse()
            .unwrap()
    }

    /// The dumps list every live small item exactly once and no deleted, replaced, expired
    /// or flushed one, staged state winning over pages; once merged, `curr_items` plus the
    /// tier's count is the number of live keys exactly.
    #[test]
    fn dumps_list_small_items_and_the_tier_counts_them() {
        let c = cache();
        let want = churn(&c);
        let live: Vec<Vec<u8>> = want
            .iter()
            .enumerate()
            .filter(|(_, w)| w.is_some())
            .map(|(i, _)| key(i as u32))
            .collect();
        for merged in [false, true] {
            if merged {
                c.small_flush_staged();
            }
            let seen = dumped(&c);
            for k in &live {
                assert_eq!(seen.get(k), Some(&1), "merged {merged}: {k:?} listed once");
            }
            assert_eq!(
                seen.len(),
                live.len(),
                "merged {merged}: nothing deleted listed"
            );
            assert!(small_stat(&c, "small_items") > 0, "the tier holds items");
        }
        let est = small_stat(&c, "small_live_items_estimate");
        assert_eq!(c.stats().curr_items + est, live.len() as u64);
        // flush_all: nothing of the tier is listed any more.
        c.core.flush_all(0);
        assert!(dumped(&c).is_empty());
        assert_eq!(small_stat(&c, "small_live_items_estimate"), 0);
    }
}
