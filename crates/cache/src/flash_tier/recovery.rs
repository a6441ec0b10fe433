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
//! Runs on the thread calling `Cache::new`, before the cache is shared.
use std::collections::HashMap;

use flashtier_flash::{Location, RecordMeta};

use crate::flash_tier::kv_record::KvKind;

#[derive(Clone, Copy, Debug)]
struct Best {
    version: u64,
    kind: KvKind,
    exptime: u32,
    loc: Location,
}

/// What recovery collected so far.
#[derive(Debug, Default)]
pub struct Recovered {
    best: HashMap<u64, Best>,
    /// Newest immediate flush marker version.
    flush_version: u64,
    /// Newest delayed flush marker (version, time).
    delayed: Option<(u64, u32)>,
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
}

impl Recovered {
    /// The engine's `on_record` callback.
    pub fn on_record(&mut self, m: RecordMeta) {
        self.max_version = self.max_version.max(m.version);
        let kind = KvKind::of(&m);
        match kind {
            KvKind::Flush { delayed: true } if self.delayed.is_none_or(|(v, _)| m.version >= v) => {
                self.delayed = Some((m.version, m.exptime));
            }
            KvKind::Flush { delayed: true } => {}
            KvKind::Flush { delayed: false } => {
                self.flush_version = self.flush_version.max(m.version)
            }
            KvKind::Put | KvKind::Tombstone => {
                let new = Best {
                    version: m.version,
                    kind,
                    exptime: m.exptime,
                    loc: m.location,
                };
                match self.best.get_mut(&m.key_id) {
                    // Older; or a drop note of the very version already found (the version
                    // itself, being on flash, is never stale).
                    Some(b)
                        if b.version > m.version
                            || (b.version == m.version
                                && b.kind == KvKind::Put
                                && kind == KvKind::Tombstone) =>
                    {
                        if kind == KvKind::Put {
                            self.superseded.push(m.location);
                        }
                    }
                    Some(b) => {
                        if b.kind == KvKind::Put {
                            self.superseded.push(b.loc);
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
        for (key_id, b) in self.best {
            if b.kind != KvKind::Put {
                continue;
            }
            let expired = b.exptime != 0 && b.exptime <= now;
            if expired || b.version < self.flush_version {
                out.dead.push(b.loc);
                continue;
            }
            out.items.push((key_id, b.loc));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flash_tier::kv_record::KvRecord;
    use flashtier_flash::kind;

    /// The engine kind of an immediate `flush_all` marker.
    fn flush_kind() -> u8 {
        KvRecord::Flush { at: 0 }.encode(0, &mut Vec::new()).kind
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
