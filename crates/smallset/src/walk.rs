//! Listing the tier's live entries for the cache's dump commands (`lru_crawler metadump`,
//! `stats cachedump`): a range of sets at a time, each set's page read once. What a set
//! lists is what a lookup of each of its keys would answer: a staged entry shadows the log's
//! and the page's entry of its key, a log entry (`klog`) the page's (a staged delete hides it, a staged put replaces it), and a page
//! of another generation (before a `flush_all`) lists nothing. Expiry and a delayed
//! `flush_all` are the cache's to judge (`ItemMeta`).
//!
//! A listing is a snapshot, not a transaction: each set's staged entries are copied
//! *before* its page is read, so a key listed was live at some moment of the walk (a delete
//! merged meanwhile is still in the copy; a put merged meanwhile is on the page read).
//!
//! # Threads
//! The caller's task; a staging partition lock per set for the copy, never across IO. Page
//! reads go through the tier's executor, all of a range in flight together.
use bytes::Bytes;

use crate::format::{self, Page};
use crate::inner::key_hash;
use crate::klog::LogRead;
use crate::sets::{SmallItem, SmallSets};
use crate::staging::{Change, Staged};

/// What a set's log chain read back as, for a listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum LogState {
    /// Every object read: apply them over the page.
    Usable,
    /// Merged meanwhile: the page holds them.
    Stale,
    /// A page was lost: list nothing of the page or the log.
    Lost,
}
use crate::stats::Counters;

/// One live entry of the tier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// Its key.
    pub key: Bytes,
    /// Its value and meta.
    pub item: SmallItem,
    /// True when it is the staged version (in RAM, not yet in the log or on its page).
    pub staged: bool,
}

impl SmallSets {
    /// The live entries of sets `first..first + count` (clipped to the tier), in set order.
    /// A set whose page cannot be read lists its staged puts only (counted in
    /// `small_io_errors`); a corrupt page lists nothing of its own.
    pub fn list_sets(
        &self,
        first: u32,
        count: u32,
    ) -> impl std::future::Future<Output = Vec<Listed>> + Send {
        let i = self.inner.clone();
        let end = first.saturating_add(count).min(i.sets);
        let generation = i.generation.load(std::sync::atomic::Ordering::Relaxed);
        // Staged copies and log chains first (one lock a set), then the log reads (all in
        // flight together), then, once those are back, the page reads: a log page found
        // stale was merged before its set page is read, so that page holds it.
        let sets: Vec<_> = (first.min(end)..end)
            .map(|set| {
                let (staged, located) = i.staging.with_set(set, |l| {
                    let located = i.klog.as_ref().map(|k| k.locate(set));
                    (
                        l.map(<[_]>::to_vec).unwrap_or_default(),
                        located.unwrap_or_default(),
                    )
                });
                let reads: Vec<_> = located
                    .into_iter()
                    .rev()
                    .map(|at| (at, i.read_at(i.layout.log_off(at.slot))))
                    .collect();
                (set, staged, reads)
            })
            .collect();
        async move {
            let mut logged = Vec::with_capacity(sets.len());
            for (set, staged, reads) in sets {
                let mut changes: Vec<Staged> = Vec::new();
                let mut state = LogState::Usable;
                for (at, read) in reads {
                    let r = match read.await {
                        Ok(page) => crate::klog::pick(&i, &page, &at),
                        Err(_) => LogRead::Lost,
                    };
                    match r {
                        LogRead::Entry(e) => {
                            if at.r.delete != (e.rrip == format::LOG_DELETE) {
                                continue;
                            }
                            let s = Staged {
                                hash: key_hash(&e.key),
                                key: e.key.clone(),
                                change: crate::klog::change_of(&e),
                                seq: 0,
                            };
                            match changes.iter_mut().find(|c| c.key == s.key) {
                                Some(old) => *old = s,
                                None => changes.push(s),
                            }
                        }
                        LogRead::Stale => state = state.max(LogState::Stale),
                        LogRead::Lost => state = LogState::Lost,
                    }
                }
                logged.push((set, staged, changes, state));
            }
            let sets: Vec<_> = logged
                .into_iter()
                .map(|(set, staged, changes, state)| {
                    let read = i.read_page(set);
                    (set, staged, changes, state, read)
                })
                .collect();
            let mut out = Vec::new();
            for (set, staged, changes, state, read) in sets {
                let page = match read.await {
                    Ok(p) => p,
                    Err(e) => {
                        Counters::add(&i.counters.io_errors, 1);
                        log::debug!("small tier: listing set {set}: {e}");
                        Bytes::new()
                    }
                };
                // Stale: the page holds the log's objects; lost: list nothing of the page
                // or the log (a lost delete must not uncover an older version).
                let (page, changes) = match state {
                    LogState::Usable => (page, changes),
                    LogState::Stale => (page, Vec::new()),
                    LogState::Lost => (Bytes::new(), Vec::new()),
                };
                let mut shadow = changes;
                for s in &staged {
                    match shadow.iter_mut().find(|c| c.key == s.key) {
                        Some(old) => *old = s.clone(),
                        None => shadow.push(s.clone()),
                    }
                }
                let entries = match format::decode(&page, set, generation) {
                    Page::Valid(es) => es,
                    Page::Empty | Page::Corrupt(_) => Vec::new(),
                };
                for e in entries {
                    let hash = key_hash(&e.key);
                    if shadow.iter().any(|s| s.hash == hash && s.key == e.key) {
                        continue;
                    }
                    out.push(Listed {
                        key: e.key,
                        item: SmallItem {
                            value: e.value,
                            meta: e.meta,
                        },
                        staged: false,
                    });
                }
                for s in shadow {
                    let in_ram = staged.iter().any(|t| t.key == s.key);
                    if let Change::Put { value, meta } = s.change {
                        out.push(Listed {
                            key: s.key,
                            item: SmallItem { value, meta },
                            staged: in_ram,
                        });
                    }
                }
            }
            out
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use flashtier_flash::MemoryDevice;

    use crate::{block_on, ItemMeta, SmallConfig, SmallSets, SmallStore};

    fn meta(cas: u64) -> ItemMeta {
        ItemMeta {
            flags: 0,
            exptime: 0,
            stored: 1,
            cas,
        }
    }

    /// Every set's listing: key → (cas, staged), each key at most once.
    fn listed(t: &SmallSets) -> HashMap<Vec<u8>, (u64, bool)> {
        let mut out = HashMap::new();
        for first in (0..t.sets()).step_by(7) {
            for l in block_on(t.list_sets(first, 7)) {
                let old = out.insert(l.key.to_vec(), (l.item.meta.cas, l.staged));
                assert!(old.is_none(), "{:?} listed twice", l.key);
            }
        }
        out
    }

    #[test]
    fn a_listing_is_what_lookups_would_answer_and_the_count_follows() {
        let dev = Arc::new(MemoryDevice::new("small", 40 * 4096));
        let t = SmallSets::with_device(dev, SmallConfig::default()).unwrap();
        assert_eq!(t.log_pages(), 0);
        listing_follows(&t, false);
    }

    /// The same with the changes in the on-flash log (appended, not merged) at the first
    /// listing: tombstones hide page entries, logged versions replace them.
    #[test]
    fn with_a_log_a_listing_is_what_lookups_would_answer() {
        let dev = Arc::new(MemoryDevice::new("small", 60 * 4096));
        let cfg = SmallConfig {
            log_fraction: 0.2,
            ..SmallConfig::default()
        };
        let t = SmallSets::with_device(dev, cfg).unwrap();
        assert!(t.log_pages() >= 4);
        listing_follows(&t, true);
    }

    fn listing_follows(t: &SmallSets, through_log: bool) {
        let key = |i: u64| format!("key{i}").into_bytes();
        for i in 0..300 {
            assert!(t.insert(&key(i), &[7; 40], meta(i + 1)));
        }
        t.flush_staged();
        assert_eq!(t.live_items_estimate(), 300, "exact once merged");
        // Staged over the pages: deletes, newer versions, new keys.
        for i in (0..300).step_by(3) {
            t.remove(&key(i));
        }
        for i in (1..300).step_by(3) {
            t.insert(&key(i), &[8; 20], meta(1000 + i));
        }
        for i in 300..320 {
            t.insert(&key(i), &[9; 20], meta(2000 + i));
        }
        if through_log {
            t.flush_to_log();
            let in_log = t
                .stats()
                .into_iter()
                .find(|(k, _)| k == "small_log_items")
                .map(|(_, v)| v.parse::<u64>().unwrap());
            assert_eq!(in_log, Some(100 + 100 + 20));
        }
        let mut want: HashMap<Vec<u8>, u64> = HashMap::new();
        for i in 0..320 {
            let cas = match (i % 3, i >= 300) {
                (_, true) => 2000 + i,
                (0, false) => continue,
                (1, false) => 1000 + i,
                _ => i + 1,
            };
            want.insert(key(i), cas);
        }
        for merged in [false, true] {
            let got = listed(t);
            assert_eq!(got.len(), want.len(), "merged {merged}");
            for (k, cas) in &want {
                let (got_cas, staged) = got[k];
                assert_eq!(got_cas, *cas, "merged {merged}: newest version of {k:?}");
                assert!(!(merged && staged));
                assert!(!(through_log && staged), "logged entries are not staged");
            }
            let est = t.live_items_estimate();
            // A filter false positive can move the estimate while changes are staged.
            assert!(est.abs_diff(want.len() as u64) <= 20, "estimate {est}");
            t.flush_staged();
        }
        assert_eq!(t.live_items_estimate(), want.len() as u64);
        t.clear();
        assert!(listed(t).is_empty());
        assert_eq!(t.live_items_estimate(), 0);
        // Out of range: nothing, no panic.
        assert!(block_on(t.list_sets(t.sets(), 5)).is_empty());
        assert!(block_on(t.list_sets(u32::MAX, u32::MAX)).is_empty());
    }
}
