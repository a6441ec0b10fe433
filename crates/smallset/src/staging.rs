//! The staging buffer (a RAM KLog): inserts and deletes wait here, grouped by set, until the
//! flusher merges a set's batch into its page with one read and one write — the more a set
//! has waiting, the fewer flash bytes per byte stored. A key has at most one staged entry
//! (the newest: a value or a delete), and it shadows the page: lookups look here first.
//!
//! Invariants: an entry leaves only when the page that includes it has been written (the
//! flusher's `done`, matched by sequence number so a newer entry staged meanwhile stays), or
//! at `clear`. Deletes are never refused for room (a delete lost would resurrect a key);
//! puts are refused past the hard limit (the item is then not kept: a miss, never a wrong
//! value). Every change to a set's entries bumps its stripe's stamp, which the cache
//! compares under its shard lock to know that what a lookup saw is still true.
//!
//! # Threads
//! Any caller; one mutex per partition (a leaf lock), held for a map operation only.
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::format::ItemMeta;

/// Partitions of the staging map (by set).
pub(crate) const PARTS: usize = 64;
/// Stamp stripes (by set).
const STRIPES: usize = 4096;
/// RAM a staged entry costs beyond its key and value: its vector slot (a [`Staged`], 104
/// bytes; a set's vector starts at one slot, so about one slot an entry at the fill's ~1.5
/// entries a staged set), its share of the partition map's slot and the allocator's rounding
/// of the key and value copies. Until 2026-11-28 (eleventh sitting) this was 96 and a set's
/// vector started at four slots: an alloc census of a full-speed fill found 73 MB of heap
/// behind 33.6 MB of `small_staged_bytes` (issue 28, docs/eviction.md "The fill's peak").
pub const ENTRY_OVERHEAD: u64 = std::mem::size_of::<Staged>() as u64 + 64;

/// A staged change of one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A new version.
    Put {
        /// Its value.
        value: Bytes,
        /// Flags, expiry, stored time, CAS.
        meta: ItemMeta,
    },
    /// Deleted: older copies on the page must go.
    Delete,
}

/// One staged entry.
#[derive(Clone, Debug)]
pub struct Staged {
    /// The key's hash (the caller's).
    pub hash: u64,
    /// The key.
    pub key: Bytes,
    /// What happened to it.
    pub change: Change,
    /// Staging order, to tell this entry from a newer one of the same key.
    pub seq: u64,
}

impl Staged {
    /// The value's length (0 for a delete).
    fn value_len(&self) -> usize {
        match &self.change {
            Change::Put { value, .. } => value.len(),
            Change::Delete => 0,
        }
    }

    /// RAM it is charged in staging.
    fn bytes(&self) -> u64 {
        (self.key.len() + self.value_len()) as u64 + ENTRY_OVERHEAD
    }

    /// Bytes it takes as an entry of a log page.
    fn log_len(&self) -> u64 {
        crate::format::entry_len(self.key.len(), self.value_len()) as u64
    }
}

/// A stamp: compare two to know whether a set's staged entries changed between them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stamp {
    epoch: u64,
    stripe: u64,
}

/// The staging buffer. See the module docs.
pub struct Staging {
    parts: Vec<Mutex<HashMap<u32, Vec<Staged>>>>,
    stripes: Vec<AtomicU64>,
    epoch: AtomicU64,
    seq: AtomicU64,
    bytes: AtomicU64,
    /// The most `bytes` has been (gauge `small_staged_peak_bytes`).
    peak: AtomicU64,
    entries: AtomicU64,
}

impl Default for Staging {
    fn default() -> Self {
        Self {
            parts: (0..PARTS).map(|_| Mutex::new(HashMap::new())).collect(),
            stripes: (0..STRIPES).map(|_| AtomicU64::new(0)).collect(),
            epoch: AtomicU64::new(0),
            seq: AtomicU64::new(1),
            bytes: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            entries: AtomicU64::new(0),
        }
    }
}

impl Staging {
    fn part(&self, set: u32) -> &Mutex<HashMap<u32, Vec<Staged>>> {
        &self.parts[set as usize % PARTS]
    }

    fn bump(&self, set: u32) {
        self.stripes[set as usize % STRIPES].fetch_add(1, Relaxed);
    }

    /// The set's stamp now.
    pub fn stamp(&self, set: u32) -> Stamp {
        Stamp {
            epoch: self.epoch.load(Relaxed),
            stripe: self.stripes[set as usize % STRIPES].load(Relaxed),
        }
    }

    /// Bytes staged (keys, values and overhead).
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Relaxed)
    }

    /// The most bytes ever staged at once.
    pub fn peak_bytes(&self) -> u64 {
        self.peak.load(Relaxed)
    }

    /// Entries staged.
    pub fn len(&self) -> u64 {
        self.entries.load(Relaxed)
    }

    /// True when nothing is staged.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stage `change` for the key, replacing its staged entry. A put is refused (false, the
    /// staged entry kept) when `limit` bytes are already staged.
    #[cfg(test)]
    pub fn stage(&self, set: u32, hash: u64, key: &[u8], change: Change, limit: u64) -> bool {
        self.stage_then(set, hash, key, change, limit, || {})
    }

    /// Stage `change` for the key (replacing its staged entry), running `first` under the set's partition lock before the entry is
    /// visible (the dirty map's mark, `dirty`). A put is refused (false, the staged entry
    /// kept, `first` not run) when `limit` bytes are already staged.
    pub fn stage_then(
        &self,
        set: u32,
        hash: u64,
        key: &[u8],
        change: Change,
        limit: u64,
        first: impl FnOnce(),
    ) -> bool {
        let put = matches!(change, Change::Put { .. });
        if put && self.bytes() >= limit {
            return false;
        }
        let new = Staged {
            hash,
            key: Bytes::copy_from_slice(key),
            change,
            seq: self.seq.fetch_add(1, Relaxed),
        };
        let add = new.bytes();
        let mut part = self.part(set).lock();
        first();
        // One slot to start: most staged sets hold one or two entries (four, Vec's first
        // growth, tripled the RAM of a full staging buffer).
        let list = part.entry(set).or_insert_with(|| Vec::with_capacity(1));
        // The new entry is counted before the one it replaces leaves (as the peak sees it).
        let now = self.bytes.fetch_add(add, Relaxed) + add;
        self.peak.fetch_max(now, Relaxed);
        match list.iter_mut().find(|s| s.hash == hash && s.key == key) {
            Some(old) => {
                let sub = old.bytes();
                *old = new;
                self.bytes.fetch_sub(sub, Relaxed);
            }
            None => {
                list.push(new);
                self.entries.fetch_add(1, Relaxed);
            }
        }
        self.bump(set);
        true
    }

    /// The key's staged change, if any.
    #[cfg(test)]
    pub fn find(&self, set: u32, hash: u64, key: &[u8]) -> Option<Change> {
        let part = self.part(set).lock();
        part.get(&set)?
            .iter()
            .find(|s| s.hash == hash && s.key == key)
            .map(|s| s.change.clone())
    }

    /// Run `f` on the set's staged entries (`None`: nothing staged) under its partition lock
    /// (the log index's chains are read and changed under it too, `logindex`).
    pub fn with_set<R>(&self, set: u32, f: impl FnOnce(Option<&[Staged]>) -> R) -> R {
        let part = self.part(set).lock();
        f(part.get(&set).map(Vec::as_slice))
    }

    /// Copies of whole sets' staged entries, about `max_bytes` of them as log entries
    /// (`format::entry_len`, so a batch fills about as many log pages whatever RAM a staged
    /// entry costs; at least one set when anything is staged), partition by partition. The
    /// entries stay staged until [`Self::done`].
    pub fn take_upto(&self, max_bytes: u64) -> Vec<(u32, Vec<Staged>)> {
        let mut out = Vec::new();
        let mut took = 0u64;
        for p in &self.parts {
            let part = p.lock();
            for (&set, list) in part.iter() {
                if took >= max_bytes && !out.is_empty() {
                    return out;
                }
                took += list.iter().map(Staged::log_len).sum::<u64>();
                out.push((set, list.clone()));
            }
        }
        out
    }

    /// Copies of the staged entries of up to `max` sets, the sets with the most staged bytes
    /// first (greedy: the biggest batches make the fewest flash bytes per byte). The entries
    /// stay staged until [`Self::done`].
    pub fn take_batch(&self, max: usize) -> Vec<(u32, Vec<Staged>)> {
        let mut sizes: Vec<(u64, u32)> = Vec::new();
        for p in &self.parts {
            let part = p.lock();
            sizes.extend(
                part.iter()
                    .map(|(&set, l)| (l.iter().map(Staged::bytes).sum(), set)),
            );
        }
        if sizes.len() > max {
            sizes.select_nth_unstable_by(max, |a, b| b.0.cmp(&a.0));
            sizes.truncate(max);
        }
        sizes
            .into_iter()
            .filter_map(|(_, set)| {
                let part = self.part(set).lock();
                part.get(&set).map(|l| (set, l.clone()))
            })
            .collect()
    }

    /// The page written for `set` included `flushed`: drop those entries that are still the
    /// staged ones (same sequence number).
    #[cfg(test)]
    pub fn done(&self, set: u32, flushed: &[Staged]) {
        self.done_then(set, flushed, || {});
    }

    /// The page written for `set` included `flushed`: drop those entries that are still the
    /// staged ones (same sequence number); run `emptied` under the set's partition lock when nothing is left
    /// staged for the set (the dirty map's clear, `dirty`).
    pub fn done_then(&self, set: u32, flushed: &[Staged], emptied: impl FnOnce()) {
        let mut part = self.part(set).lock();
        let Some(list) = part.get_mut(&set) else {
            emptied();
            return;
        };
        let before = list.len();
        let mut freed = 0;
        list.retain(|s| {
            let gone = flushed.iter().any(|f| f.seq == s.seq);
            if gone {
                freed += s.bytes();
            }
            !gone
        });
        self.bytes.fetch_sub(freed, Relaxed);
        self.entries
            .fetch_sub((before - list.len()) as u64, Relaxed);
        if list.is_empty() {
            part.remove(&set);
            emptied();
        }
    }

    /// Run `f` on every staged entry with its set, one partition locked at a time (stats).
    pub fn for_each(&self, mut f: impl FnMut(u32, &Staged)) {
        for p in &self.parts {
            for (&set, list) in p.lock().iter() {
                list.iter().for_each(|s| f(set, s));
            }
        }
    }

    /// Give back the partition maps' room beyond what they hold (the flusher, going idle):
    /// a map keeps the capacity of its largest moment, and a full-speed fill stages ~110k sets
    /// at once, so 64 maps of 128–256 KiB stayed allocated, empty, after every fill (issue 28,
    /// RSS at rest; docs/eviction.md "What the fill leaves behind"). A map under a quarter
    /// full is shrunk to twice what it holds: one reallocation per idle moment at most.
    pub fn shrink(&self) {
        for p in &self.parts {
            let mut part = p.lock();
            let len = part.len();
            if part.capacity() > 4 * len.max(8) {
                part.shrink_to(2 * len);
            }
        }
    }

    /// Slots the partition maps have room for (tests).
    #[cfg(test)]
    fn map_capacity(&self) -> usize {
        self.parts.iter().map(|p| p.lock().capacity()).sum()
    }

    /// Forget everything staged (`flush_all`); every stamp changes.
    pub fn clear(&self) {
        self.epoch.fetch_add(1, Relaxed);
        for p in &self.parts {
            let mut part = p.lock();
            for list in part.values() {
                let b: u64 = list.iter().map(Staged::bytes).sum();
                self.bytes.fetch_sub(b, Relaxed);
                self.entries.fetch_sub(list.len() as u64, Relaxed);
            }
            part.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(v: &[u8]) -> Change {
        Change::Put {
            value: Bytes::copy_from_slice(v),
            meta: ItemMeta::default(),
        }
    }

    /// The RAM a staged entry is charged beyond key and value (its vector slot and 64
    /// bytes) matches the struct the docs name.
    #[test]
    fn entry_overhead_is_a_slot_and_a_map_share() {
        assert_eq!(std::mem::size_of::<Staged>(), 104);
        assert_eq!(ENTRY_OVERHEAD, 168);
    }

    #[test]
    fn one_entry_per_key_newest_wins_and_stamps_move() {
        let s = Staging::default();
        let st = s.stamp(3);
        assert!(s.stage(3, 1, b"k", put(b"a"), u64::MAX));
        assert_ne!(s.stamp(3), st);
        assert!(s.stage(3, 1, b"k", put(b"b"), u64::MAX));
        assert_eq!(s.len(), 1);
        assert_eq!(s.find(3, 1, b"k"), Some(put(b"b")));
        assert!(
            s.stage(3, 1, b"k", Change::Delete, 0),
            "deletes are never refused"
        );
        assert_eq!(s.find(3, 1, b"k"), Some(Change::Delete));
        assert!(
            !s.stage(3, 2, b"j", put(b"c"), 0),
            "puts are refused past the limit"
        );
        s.clear();
        assert!(s.is_empty());
        assert_eq!(s.bytes(), 0);
    }

    /// The dirty map's hooks: `first` runs before an entry is visible (not for a refused
    /// put), `emptied` only when a merge left nothing staged for the set.
    #[test]
    fn the_hooks_run_only_when_a_set_starts_or_stops_having_staged_entries() {
        let s = Staging::default();
        let mut marks = 0;
        assert!(s.stage_then(1, 1, b"a", put(b"1"), u64::MAX, || marks += 1));
        assert!(!s.stage_then(1, 2, b"b", put(b"2"), 0, || marks += 10));
        assert_eq!(marks, 1);
        let batch = s.take_batch(1);
        // Staged while the batch was merged: the set keeps a change its page lacks.
        assert!(s.stage_then(1, 1, b"a", Change::Delete, u64::MAX, || {}));
        let mut emptied = false;
        s.done_then(1, &batch[0].1, || emptied = true);
        assert!(!emptied, "a newer entry is still staged");
        let batch = s.take_batch(1);
        s.done_then(1, &batch[0].1, || emptied = true);
        assert!(emptied);
        // A set with nothing staged at all (cleared by flush_all meanwhile) is empty too.
        let mut again = false;
        s.done_then(7, &[], || again = true);
        assert!(again);
    }

    /// After a burst of staged sets is flushed, `shrink` gives the maps' room back; what is
    /// still staged stays.
    #[test]
    fn shrink_returns_the_maps_room_after_a_burst() {
        let s = Staging::default();
        for set in 0..20_000u32 {
            s.stage(set, u64::from(set), b"k", put(b"v"), u64::MAX);
        }
        let burst = s.map_capacity();
        assert!(burst >= 20_000);
        for (set, list) in s.take_upto(u64::MAX) {
            if set != 7 {
                s.done(set, &list);
            }
        }
        s.shrink();
        assert!(
            s.map_capacity() < 64 * 32,
            "{} slots left",
            s.map_capacity()
        );
        assert_eq!(s.find(7, 7, b"k"), Some(put(b"v")));
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn done_keeps_what_was_staged_after_the_batch_was_taken() {
        let s = Staging::default();
        s.stage(1, 1, b"a", put(b"1"), u64::MAX);
        s.stage(1, 2, b"b", put(b"2"), u64::MAX);
        s.stage(2, 3, b"c", put(b"3"), u64::MAX);
        let batch = s.take_batch(1);
        assert_eq!(batch.len(), 1);
        assert_eq!(batch[0].0, 1, "the set with the most bytes first");
        s.stage(1, 1, b"a", Change::Delete, u64::MAX);
        s.done(1, &batch[0].1);
        assert_eq!(s.find(1, 1, b"a"), Some(Change::Delete));
        assert_eq!(s.find(1, 2, b"b"), None);
        assert_eq!(s.len(), 2);
        s.clear();
        assert!(s.is_empty());
        assert_eq!(s.bytes(), 0);
    }
}
