//! The log's RAM index (Kangaroo's partitioned KLog index): for every object in the on-flash
//! log, a few bytes that say which set it belongs to and where it is — chained per set, so a
//! lookup walks only its own set's log objects and a merge takes a whole set's at once.
//!
//! Layout: one `u32` head per set (the newest log object of the set, 0 none) and one `u64`
//! link per log entry slot (log page slot × [`PER_PAGE`] + position in the page): the next
//! (older) object of the same set, a 16-bit tag of the key's hash, and whether it is a
//! delete. An object's place on flash is its link's index, so the index stores no offsets:
//! `4 B × sets + 8 B × log pages × 32` in all, fixed at open (stat `small_log_index_bytes`).
//!
//! Invariants: a set's chain is read and changed only under that set's staging partition
//! lock (`Staging::with_set`), so a lookup sees a whole chain; chains are only ever cut
//! whole (`take`, after the set's page holds them) or all at once (`clear`). A link is
//! reused only when its log slot is rewritten, which the log allows only after every set
//! with an object in the slot was merged (`klog`), so no chain points at a reused link.
//!
//! # Threads
//! Any caller, under the set's partition lock; atomics only so the arena can be shared.
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

use crate::format::MAX_ENTRIES;

/// Entry slots per log page.
pub(crate) const PER_PAGE: u32 = MAX_ENTRIES as u32;
const DELETE_BIT: u64 = 1 << 48;
/// The object counts +1 in the live-items estimate (a put whose key the set's filter said
/// was not on the page when it was appended).
const ADDS_BIT: u64 = 1 << 49;
/// The object counts −1 (a delete whose key the filter said may be on the page).
const SUBS_BIT: u64 = 1 << 50;

/// One log object of a set, as the index knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LogRef {
    /// Log page slot.
    pub slot: u32,
    /// Position in the page.
    pub pos: u32,
    /// The key hash's tag.
    pub tag: u16,
    /// A delete (tombstone).
    pub delete: bool,
    /// What it adds to the live-items estimate (+1, 0, −1).
    pub delta: i8,
}

/// The tag of a key hash (bits the set and filter choice do not use directly).
pub(crate) fn tag_of(hash: u64) -> u16 {
    (hash >> 48) as u16
}

/// See the module docs.
pub(crate) struct LogIndex {
    heads: Vec<AtomicU32>,
    links: Vec<AtomicU64>,
    live: AtomicU64,
    deletes: AtomicU64,
    /// Sum of the objects' estimate deltas (`ADDS_BIT` +1, `SUBS_BIT` −1).
    delta: std::sync::atomic::AtomicI64,
}

impl LogIndex {
    /// An empty index for `sets` sets and `pages` log pages.
    pub(crate) fn new(sets: u32, pages: u32) -> Self {
        Self {
            heads: (0..sets).map(|_| AtomicU32::new(0)).collect(),
            links: (0..u64::from(pages) * u64::from(PER_PAGE))
                .map(|_| AtomicU64::new(0))
                .collect(),
            live: AtomicU64::new(0),
            deletes: AtomicU64::new(0),
            delta: std::sync::atomic::AtomicI64::new(0),
        }
    }

    /// Record the object at `slot`/`pos` as `set`'s newest (caller holds the set's lock).
    /// `delta` is what it adds to the live-items estimate (+1, 0 or −1).
    pub(crate) fn push(&self, set: u32, slot: u32, pos: u32, tag: u16, delete: bool, delta: i8) {
        let (Some(head), Some(idx)) = (
            self.heads.get(set as usize),
            slot.checked_mul(PER_PAGE)
                .and_then(|x| x.checked_add(pos))
                .filter(|_| pos < PER_PAGE),
        ) else {
            return;
        };
        let Some(link) = self.links.get(idx as usize) else {
            return;
        };
        let next = u64::from(head.load(Relaxed));
        let d = if delete { DELETE_BIT } else { 0 };
        let e = match delta {
            1.. => ADDS_BIT,
            0 => 0,
            _ => SUBS_BIT,
        };
        link.store(next | (u64::from(tag) << 32) | d | e, Relaxed);
        self.delta.fetch_add(i64::from(delta.signum()), Relaxed);
        head.store(idx + 1, Relaxed);
        self.live.fetch_add(1, Relaxed);
        if delete {
            self.deletes.fetch_add(1, Relaxed);
        }
    }

    /// The set's log objects, newest first (caller holds the set's lock). An iterator, not a
    /// list: a GET's lookup and the merge's checks stop at the first match and allocate
    /// nothing. At most `links.len()` steps, so a damaged chain cannot loop.
    pub(crate) fn refs(&self, set: u32) -> impl Iterator<Item = LogRef> + '_ {
        let mut at = self.heads.get(set as usize).map_or(0, |h| h.load(Relaxed));
        let mut steps = 0;
        std::iter::from_fn(move || {
            if at == 0 || steps >= self.links.len() {
                return None;
            }
            steps += 1;
            let idx = at - 1;
            let l = self.links.get(idx as usize)?.load(Relaxed);
            at = l as u32;
            Some(LogRef {
                slot: idx / PER_PAGE,
                pos: idx % PER_PAGE,
                tag: (l >> 32) as u16,
                delete: l & DELETE_BIT != 0,
                delta: if l & ADDS_BIT != 0 {
                    1
                } else if l & SUBS_BIT != 0 {
                    -1
                } else {
                    0
                },
            })
        })
    }

    /// True when the set has nothing in the log (caller holds the set's lock).
    #[cfg(test)]
    pub(crate) fn is_empty(&self, set: u32) -> bool {
        self.heads
            .get(set as usize)
            .is_none_or(|h| h.load(Relaxed) == 0)
    }

    /// Forget the set's log objects (its page now holds them; caller holds its lock).
    pub(crate) fn take(&self, set: u32) {
        let (mut n, mut dels, mut delta) = (0u64, 0u64, 0i64);
        for r in self.refs(set) {
            n += 1;
            dels += u64::from(r.delete);
            delta += i64::from(r.delta);
        }
        if let Some(h) = self.heads.get(set as usize) {
            h.store(0, Relaxed);
        }
        self.live.fetch_sub(n, Relaxed);
        self.deletes.fetch_sub(dels, Relaxed);
        self.delta.fetch_sub(delta, Relaxed);
    }

    /// Forget everything (`flush_all`, under `merging`, every partition quiet for the log).
    pub(crate) fn clear(&self) {
        for h in &self.heads {
            h.store(0, Relaxed);
        }
        self.live.store(0, Relaxed);
        self.deletes.store(0, Relaxed);
        self.delta.store(0, Relaxed);
    }

    /// What the log's objects add to the live-items estimate: +1 a put of a key that was
    /// not live, −1 a delete of one that was — judged when appended by the key's newest
    /// log object of the same tag, else the set's filter (as for staged entries,
    /// `Inner::live_items_estimate`); off by tag collisions and filter false positives.
    pub(crate) fn estimate_delta(&self) -> i64 {
        self.delta.load(Relaxed)
    }

    /// Objects in the log the index refers to (puts and deletes).
    pub(crate) fn live(&self) -> u64 {
        self.live.load(Relaxed)
    }

    /// Deletes among them.
    #[cfg(test)]
    pub(crate) fn deletes(&self) -> u64 {
        self.deletes.load(Relaxed)
    }

    /// RAM the index takes.
    pub(crate) fn ram_bytes(&self) -> u64 {
        (self.heads.len() * 4 + self.links.len() * 8) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_are_per_set_newest_first_and_taken_whole() {
        let x = LogIndex::new(4, 2);
        assert_eq!(x.ram_bytes(), 4 * 4 + 2 * 32 * 8);
        x.push(1, 0, 0, 7, false, 1);
        x.push(2, 0, 1, 8, false, 0);
        x.push(1, 1, 5, 9, true, -1);
        assert_eq!(
            x.refs(1).collect::<Vec<_>>(),
            vec![
                LogRef {
                    slot: 1,
                    pos: 5,
                    tag: 9,
                    delete: true,
                    delta: -1,
                },
                LogRef {
                    slot: 0,
                    pos: 0,
                    tag: 7,
                    delete: false,
                    delta: 1,
                },
            ]
        );
        assert_eq!(x.refs(2).collect::<Vec<_>>().len(), 1);
        assert!(x.is_empty(0) && !x.is_empty(1));
        assert_eq!((x.live(), x.deletes(), x.estimate_delta()), (3, 1, 0));
        x.take(1);
        assert!(x.is_empty(1));
        assert_eq!((x.live(), x.deletes(), x.estimate_delta()), (1, 0, 0));
        assert_eq!(x.refs(2).collect::<Vec<_>>()[0].slot, 0);
        // A reused link (slot 0 rewritten after set 1 was taken) starts a fresh chain.
        x.push(3, 0, 0, 1, false, 1);
        assert_eq!(x.refs(3).collect::<Vec<_>>().len(), 1);
        x.clear();
        assert!(x.refs(2).collect::<Vec<_>>().is_empty() && x.live() == 0);
        // Out of range is ignored, never a panic.
        x.push(99, 0, 0, 1, false, 0);
        x.push(0, 9, 0, 1, false, 0);
        assert!(x.refs(99).collect::<Vec<_>>().is_empty() && x.is_empty(0));
    }

    #[test]
    fn tags_use_the_top_bits() {
        assert_eq!(tag_of(0xabcd_0000_0000_0000), 0xabcd);
    }
}
