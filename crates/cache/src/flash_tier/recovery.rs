//! Warm restart: rebuild the index from the records the flash engine recovers at open.
//!
//! The engine calls `on_record` once per record found on flash, oldest segment first, with
//! metadata only (no key or value). Duplicates are resolved by `version`, never by arrival
//! order (a reclaim copy of an old version can land in a newer segment than a later
//! overwrite): per `key_id` the highest version wins, ties going to the later record.
//! A winning `TOMBSTONE` means deleted; a `flush_all` marker drops every item with a lower
//! version (immediate) or is re-armed as the pending flush time (delayed, when it is the newer
//! marker; items are then judged by the stored time in their value prefix on read). Expired
//! items are skipped. The result is inserted as flash slots with frequency 0.
//!
//! The crash journal's entries of the last run (`flash_tier::journal`) are folded in the same
//! way ([`Recovered::on_journal`]): each is a tombstone or flush marker whose record the log
//! may not hold. One the log does not hold and that still decides something (the newest of
//! its key, the newest marker) is *replayed*: appended to the log again, with its own version,
//! and flushed before the journal starts a new epoch ([`replay`]). If the journal is
//! untrusted (a power cut under `journal_mode=write`), nothing recovered is served: the
//! flash tier starts empty behind a durable `flush_all` marker.
//!
//! [`open`] opens the engine (formatting a blank device or recovering what is on it), folds
//! records and journal entries, rebuilds the index under the seed stored on flash and builds
//! the [`FlashTier`]; [`replay`] runs once the cache is built and its reclaim handler answers
//! (the replay's appends may need reclaim to free a segment: a crash under a write load that
//! outran reclaim leaves the flash at its reserve), before the cache serves.
//!
//! Runs on the thread calling `Cache::new`, before the cache is shared.
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use flashtier_flash::journal::{record_of, Entry};
use flashtier_flash::{Flash, Location, ReclaimHandler, RecordMeta};

use crate::config::{CacheConfig, FlashDevices, FlashSettings};
use crate::flash_tier::kv_record::{KvKind, KvRecord};
use crate::flash_tier::tier::FlashTier;
use crate::flash_tier::{entry_of, hot_stream, STREAM};
use crate::knobs::Tiering;
use crate::meta::Counters;
use crate::ram::index::Index;

#[derive(Clone, Copy, Debug)]
struct Best {
    version: u64,
    kind: KvKind,
    exptime: u32,
    /// Where the record is; `None` for a journal entry (no record in the log).
    loc: Option<Location>,
    /// Known from the journal only so far.
    journaled: Option<Entry>,
}

/// What recovery collected so far.
#[derive(Debug, Default)]
pub struct Recovered {
    best: HashMap<u64, Best>,
    /// Newest immediate flush marker version.
    flush_version: u64,
    /// Newest delayed flush marker (version, time).
    delayed: Option<(u64, u32)>,
    /// The newest markers as journal entries, when the log did not hold them.
    flush_journaled: Option<Entry>,
    delayed_journaled: Option<Entry>,
    /// PUT records superseded by a newer version (dead on flash).
    superseded: Vec<Location>,
    max_version: u64,
}

/// The rebuilt state.
#[derive(Debug, Default)]
pub struct Rebuilt {
    /// (key_id, location) of every live item.
    pub items: Vec<(u64, Location)>,
    /// Records on flash no index entry points at (to `mark_dead`).
    pub dead: Vec<Location>,
    /// Largest version seen (CAS and versions continue above it).
    pub max_version: u64,
    /// Pending delayed flush time, if the newest marker was a delayed one.
    pub flush_at: Option<u32>,
    /// Version of the newest immediate flush marker.
    pub last_marker: u64,
    /// Version of the newest delayed flush marker.
    pub last_delayed: u64,
    /// Journal entries whose record the log did not hold and that still decide something:
    /// appended again before serving ([`replay`]).
    pub replay: Vec<Entry>,
}

impl Recovered {
    /// The engine's `on_record` callback.
    pub fn on_record(&mut self, m: RecordMeta) {
        self.fold(&m, Some(m.location), None);
    }

    /// One entry of the crash journal (after every record: the order does not matter).
    pub fn on_journal(&mut self, e: &Entry) {
        let m = RecordMeta {
            location: Location::default(),
            key_id: e.key_id,
            version: e.version,
            kind: e.kind,
            exptime: e.exptime,
            flags: e.flags,
            len: 0,
            seq: 0,
        };
        self.fold(&m, None, Some(*e));
    }

    fn fold(&mut self, m: &RecordMeta, loc: Option<Location>, journaled: Option<Entry>) {
        self.max_version = self.max_version.max(m.version);
        let kind = KvKind::of(m);
        match kind {
            KvKind::Flush { delayed: true } if self.delayed.is_none_or(|(v, _)| m.version >= v) => {
                // The log's copy of the same marker wins over the journal's.
                let same = self.delayed.is_some_and(|(v, _)| v == m.version);
                if !(same && journaled.is_some()) {
                    self.delayed_journaled = journaled;
                }
                self.delayed = Some((m.version, m.exptime));
            }
            KvKind::Flush { delayed: true } => {}
            KvKind::Flush { delayed: false } => {
                if m.version > self.flush_version {
                    self.flush_journaled = journaled;
                } else if m.version == self.flush_version && journaled.is_none() {
                    self.flush_journaled = None;
                }
                self.flush_version = self.flush_version.max(m.version)
            }
            KvKind::Put | KvKind::Tombstone => {
                let new = Best {
                    version: m.version,
                    kind,
                    exptime: m.exptime,
                    loc,
                    journaled,
                };
                match self.best.get_mut(&m.key_id) {
                    // Older; or a drop note of the very version already found (the version
                    // itself, being on flash, is never stale); or the journal's copy of a
                    // tombstone the log holds.
                    Some(b)
                        if b.version > m.version
                            || (b.version == m.version
                                && b.kind == KvKind::Put
                                && kind == KvKind::Tombstone)
                            || (b.version == m.version && journaled.is_some()) =>
                    {
                        if kind == KvKind::Put {
                            self.superseded.extend(loc);
                        }
                    }
                    Some(b) => {
                        if b.kind == KvKind::Put {
                            self.superseded.extend(b.loc);
                        }
                        *b = new;
                    }
                    None => {
                        self.best.insert(m.key_id, new);
                    }
                }
            }
            _ => {}
        }
    }

    /// Resolve tombstones, flush markers and expiry at time `now`.
    pub fn finish(self, now: u32) -> Rebuilt {
        let mut out = Rebuilt {
            dead: self.superseded,
            max_version: self.max_version,
            last_marker: self.flush_version,
            ..Rebuilt::default()
        };
        if let Some((v, at)) = self.delayed {
            out.last_delayed = v;
            if v > self.flush_version {
                out.flush_at = Some(at);
            }
        }
        out.replay.extend(self.flush_journaled);
        out.replay.extend(self.delayed_journaled);
        for (key_id, b) in self.best {
            if b.kind != KvKind::Put {
                // A journaled tombstone still hides older versions only while it is newer
                // than the newest immediate flush (which hides them anyway).
                if b.version > self.flush_version {
                    out.replay.extend(b.journaled);
                }
                continue;
            }
            let Some(loc) = b.loc else { continue };
            let expired = b.exptime != 0 && b.exptime <= now;
            if expired || b.version < self.flush_version {
                out.dead.push(loc);
                continue;
            }
            out.items.push((key_id, loc));
        }
        out
    }
}

impl Rebuilt {
    /// Serve nothing recovered (the journal is untrusted): every record is dead, and a
    /// `flush_all` marker above them all, appended by [`replay`], keeps them from coming
    /// back at a later restart.
    pub fn go_cold(&mut self) {
        self.dead.extend(self.items.drain(..).map(|(_, loc)| loc));
        self.replay.clear();
        self.flush_at = None;
        self.max_version += 1;
        self.last_marker = self.max_version;
        self.replay.push(flashtier_flash::journal::entry_of(
            &KvRecord::Flush { at: 0 }.encode(self.max_version, &mut Default::default()),
        ));
    }
}

/// The flash tier opened and recovered, and the index rebuilt from it.
pub(crate) struct Opened {
    pub tier: FlashTier,
    pub slots: Index,
    /// CAS values continue above this (the largest version recovered).
    pub last_cas: u64,
    /// A delayed `flush_all` still pending.
    pub flush_at: Option<u32>,
    /// Journal entries the log lacks: [`replay`] them before serving.
    pub replay: Vec<Entry>,
}

/// Open the flash tier `settings` describe and rebuild the index `cfg` sets (shards,
/// location bits for its RAM and these devices) from it (see the module docs); the engine's
/// reclaimer asks `handler`, which answers once the cache is built. The caller runs
/// [`replay`] on `Opened::replay` once `handler` answers.
pub(crate) fn open(
    settings: &FlashSettings,
    cfg: &CacheConfig,
    handler: Arc<dyn ReclaimHandler>,
) -> Result<Opened, flashtier_flash::Error> {
    let clock = &cfg.clock;
    let mut rec = Recovered::default();
    let engine = settings.engine_config();
    let reserve = engine.reserve_segments;
    let hot = hot_stream(&engine);
    let tiering = Tiering::new(settings, engine.free_high_watermark);
    let (flash, info) = match &settings.devices {
        FlashDevices::Specs(specs) => {
            Flash::open_specs(specs, engine, handler, |m| rec.on_record(m))
        }
        FlashDevices::Devices(devs) => {
            Flash::open(devs.clone(), engine, handler, |m| rec.on_record(m))
        }
    }?;
    let journal = info.journal.clone().unwrap_or_default();
    for e in &journal.entries {
        rec.on_journal(e);
    }
    let mut rebuilt = rec.finish(clock.now());
    let cold = info.journal.is_some() && !journal.trusted;
    if cold {
        log::warn!(
            "flash tier: starting empty: {} (the flash tier holds {} items that could \
             be stale)",
            journal.why,
            rebuilt.items.len()
        );
        rebuilt.go_cold();
    }
    // Flash locations are 16-byte units of the devices' global address space.
    let flash_bound = u64::from(info.segments) * info.segment_size / 16;
    let slots = cfg.index(info.hash_seed, flash_bound.max(cfg.ram_loc_bound()));
    for &(key_id, loc) in &rebuilt.items {
        slots.lock(key_id).insert(key_id, entry_of(loc, 0));
    }
    for &loc in &rebuilt.dead {
        flash.mark_dead(loc);
    }
    let mut tier = FlashTier::new(
        flash,
        info,
        rebuilt.max_version,
        tiering,
        reserve,
        clock.clone(),
    );
    tier.hot_stream = hot;
    tier.last_marker
        .store(rebuilt.last_marker, Ordering::Relaxed);
    tier.last_delayed
        .store(rebuilt.last_delayed, Ordering::Relaxed);
    Counters::add(&tier.counters.recovered, rebuilt.items.len() as u64);
    Counters::add(&tier.counters.journal_cold_starts, u64::from(cold));
    Ok(Opened {
        tier,
        slots,
        last_cas: rebuilt.max_version,
        flush_at: rebuilt.flush_at,
        replay: rebuilt.replay,
    })
}

/// Before serving, once the engine's reclaim handler answers (its appends may wait for
/// reclaim to free a segment): append every entry of `entries` to the log again (same
/// version), flush, and start the journal's new epoch. Counts what it replayed.
pub(crate) fn replay(tier: &FlashTier, entries: &[Entry]) -> Result<(), flashtier_flash::Error> {
    let Some(journal) = tier.flash.journal() else {
        return Ok(());
    };
    let wait = tier
        .tiering
        .append_wait()
        .max(std::time::Duration::from_secs(5));
    for e in entries {
        tier.flash.append_blocking(STREAM, &record_of(e), wait)?;
    }
    tier.flash.flush().wait()?;
    journal.begin()?;
    Counters::add(&tier.counters.journal_replayed, entries.len() as u64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flash_tier::kv_record::KvRecord;
    use flashtier_flash::kind;

    /// The engine kind of an immediate `flush_all` marker.
    fn flush_kind() -> u8 {
        KvRecord::Flush { at: 0 }
            .encode(0, &mut Default::default())
            .kind
    }

    fn meta(key_id: u64, version: u64, kind: u8, addr: u64) -> RecordMeta {
        RecordMeta {
            location: Location::new(addr * 16, 64).unwrap(),
            key_id,
            version,
            kind,
            exptime: 0,
            flags: 0,
            len: 64,
            seq: 0,
        }
    }

    #[test]
    fn highest_version_wins_and_tombstones_and_markers_apply() {
        let mut r = Recovered::default();
        r.on_record(meta(1, 5, kind::PUT, 1));
        r.on_record(meta(1, 3, kind::PUT, 2)); // an old reclaim copy arriving later
        r.on_record(meta(2, 4, kind::PUT, 3));
        r.on_record(meta(2, 6, kind::TOMBSTONE, 4));
        r.on_record(meta(3, 7, kind::PUT, 5));
        r.on_record(meta(0, 8, flush_kind(), 6));
        r.on_record(meta(4, 9, kind::PUT, 7));
        let out = r.finish(100);
        let mut ids: Vec<u64> = out.items.iter().map(|(k, _)| *k).collect();
        ids.sort_unstable();
        assert_eq!(ids, vec![4]);
        assert_eq!(out.max_version, 9);
        assert_eq!(out.last_marker, 8);
        let r2 = {
            let mut r = Recovered::default();
            r.on_record(meta(1, 5, kind::PUT, 1));
            r.on_record(meta(1, 3, kind::PUT, 2));
            r.finish(100)
        };
        assert_eq!(r2.items, vec![(1, Location::new(16, 64).unwrap())]);
        assert_eq!(r2.dead, vec![Location::new(32, 64).unwrap()]);
    }

    fn jentry(key_id: u64, version: u64, kind: u8) -> Entry {
        Entry {
            kind,
            flags: 0,
            key_id,
            version,
            exptime: 0,
        }
    }

    #[test]
    fn journal_entries_hide_older_versions_and_only_the_missing_ones_replay() {
        let mut r = Recovered::default();
        // Key 1: v3 on flash, overwritten (tombstone v5 only in the journal): a miss, and
        // the tombstone is appended again.
        r.on_record(meta(1, 3, kind::PUT, 1));
        // Key 2: deleted, the tombstone reached the log too: nothing to replay.
        r.on_record(meta(2, 4, kind::PUT, 2));
        r.on_record(meta(2, 6, kind::TOMBSTONE, 3));
        // Key 3: overwritten, then the new version reached flash: served, no replay.
        r.on_record(meta(3, 7, kind::PUT, 4));
        r.on_record(meta(3, 9, kind::PUT, 5));
        for e in [
            jentry(1, 5, kind::TOMBSTONE),
            jentry(2, 6, kind::TOMBSTONE),
            jentry(3, 8, kind::TOMBSTONE),
        ] {
            r.on_journal(&e);
        }
        let out = r.finish(100);
        let ids: Vec<u64> = out.items.iter().map(|(k, _)| *k).collect();
        assert_eq!(ids, vec![3]);
        assert_eq!(out.replay, vec![jentry(1, 5, kind::TOMBSTONE)]);
        assert_eq!(out.max_version, 9);
    }

    #[test]
    fn a_journaled_flush_drops_what_it_covers_and_replays() {
        let mut r = Recovered::default();
        r.on_record(meta(1, 3, kind::PUT, 1));
        r.on_record(meta(2, 9, kind::PUT, 2));
        let marker = jentry(0, 5, flush_kind());
        r.on_journal(&marker);
        let out = r.finish(100);
        let ids: Vec<u64> = out.items.iter().map(|(k, _)| *k).collect();
        assert_eq!(ids, vec![2]);
        assert_eq!(out.replay, vec![marker]);
        assert_eq!(out.last_marker, 5);
        // The same marker found in the log: nothing to replay.
        let mut r = Recovered::default();
        r.on_record(meta(0, 5, flush_kind(), 3));
        r.on_journal(&marker);
        assert!(r.finish(100).replay.is_empty());
    }

    #[test]
    fn going_cold_serves_nothing_and_flushes_above_everything() {
        let mut r = Recovered::default();
        r.on_record(meta(1, 3, kind::PUT, 1));
        r.on_record(meta(2, 4, kind::PUT, 2));
        let mut out = r.finish(100);
        out.go_cold();
        assert!(out.items.is_empty());
        assert_eq!(out.dead.len(), 2);
        assert_eq!(out.max_version, 5);
        assert_eq!(out.replay, vec![jentry(0, 5, flush_kind())]);
        assert_eq!(out.last_marker, 5);
    }

    #[test]
    fn a_drop_note_hides_older_versions_but_not_its_own() {
        let mut r = Recovered::default();
        // Key 1: v3 left in an old segment, v5 evicted (its note survives): a miss.
        r.on_record(meta(1, 3, kind::PUT, 1));
        r.on_record(meta(1, 5, kind::TOMBSTONE, 2));
        // Key 2: the note of v7 arrives before and after a surviving copy of v7: served.
        r.on_record(meta(2, 7, kind::TOMBSTONE, 3));
        r.on_record(meta(2, 7, kind::PUT, 4));
        r.on_record(meta(3, 8, kind::PUT, 5));
        r.on_record(meta(3, 8, kind::TOMBSTONE, 6));
        let out = r.finish(100);
        let mut ids: Vec<u64> = out.items.iter().map(|(k, _)| *k).collect();
        ids.sort_unstable();
        assert_eq!(ids, vec![2, 3]);
    }
}
