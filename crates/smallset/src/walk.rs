//! Listing the tier's live entries for the cache's dump commands (`lru_crawler metadump`,
//! `stats cachedump`): a range of sets at a time, each set's page read once. What a set
//! lists is what a lookup of each of its keys would answer: a staged entry shadows the
//! page's entry of its key (a staged delete hides it, a staged put replaces it), and a page
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
use crate::sets::{SmallItem, SmallSets};
use crate::staging::Change;
use crate::stats::Counters;

/// One live entry of the tier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// Its key.
    pub key: Bytes,
    /// Its value and meta.
    pub item: SmallItem,
    /// True when it is the staged version (in RAM, not yet on its page).
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
        // Staged copies first, then the reads (submitted now, all in flight together).
        let sets: Vec<_> = (first.min(end)..end)
            .map(|set| (set, i.staging.entries_of(set), i.read_page(set)))
            .collect();
        async move {
            let mut out = Vec::new();
            for (set, staged, read) in sets {
                let page = match read.await {
                    Ok(p) => p,
                    Err(e) => {
                        Counters::add(&i.counters.io_errors, 1);
                        log::debug!("small tier: listing set {set}: {e}");
                        Bytes::new()
                    }
                };
                let entries = match format::decode(&page, set, generation) {
                    Page::Valid(es) => es,
                    Page::Empty | Page::Corrupt(_) => Vec::new(),
                };
                for e in entries {
                    let hash = key_hash(&e.key);
                    if staged.iter().any(|s| s.hash == hash && s.key == e.key) {
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
                for s in staged {
                    if let Change::Put { value, meta } = s.change {
                        out.push(Listed {
                            key: s.key,
                            item: SmallItem { value, meta },
                            staged: true,
                        });
                    }
                }
            }
            out
        }
    }
}
