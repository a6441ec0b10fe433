//! The log's RAM index (Kangaroo's partitioned KLog index): for every object in the on-flash
//! log, a few bytes that say which set it belongs to and where it is — chained per set, so a
//! lookup walks only its own set's log objects and a merge takes a whole set's at once.
//!
//! Layout: one `u32` head per set (the newest log object of the set, 0 none) and one `u32`
//! link per log entry slot (log page slot × [`PER_PAGE`] + position in the page). A link
//! packs, from the low bits: the next (older) object of the same set (index + 1, 0 none;
//! `next_bits` = the bits the slot count needs), two kind bits (a put or a delete, and what
//! it adds to the live-items estimate), and as many bits of the key hash's tag as are left
//! (`tag_bits` = 30 − `next_bits`, at most 16). An object's place on flash is its link's
//! index, so the index stores no offsets: `4 B × sets + 4 B × log pages × 32` in all
//! (128 B a log page, half the 8-byte links it had before), fixed at open (stat
//! `small_log_index_bytes`).
//!
//! Why a narrower tag is enough: a tag only saves log page reads — a lookup reads the page of
//! every object of its set whose tag matches and compares the key, a remove stages a
//! tombstone whenever a put of the same tag is there, and the estimate is an estimate — so
//! no answer depends on its width. A lookup through a chain of L other objects reads
//! L / 2^`tag_bits` extra log pages on average: 11 bits for a 1 GiB file with a 5 % log
//! (13,107 pages), 9 bits at 4 GiB / 5 %, 7 bits at 4 GiB / 20 % (stat `small_log_tag_width`;
//! extra reads counted in `small_log_tag_false_reads`).
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
/// The widest tag kept by default (`SmallConfig::log_tag_bits`): 16 bits already make a
/// false match rare.
#[cfg(test)]
const MAX_TAG_BITS: u32 = 16;
/// Kinds (two bits above `next`): a put adding nothing to the estimate, a put counting +1,
/// a delete adding nothing, a delete counting −1.
const PUT: u32 = 0;
const PUT_ADDS: u32 = 1;
const DELETE: u32 = 2;
const DELETE_SUBS: u32 = 3;

/// One log object of a set, as the index knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LogRef {
    /// Log page slot.
    pub slot: u32,
    /// Position in the page.
    pub pos: u32,
    /// The key hash's tag (`LogIndex::tag_of`).
    pub tag: u32,
    /// A delete (tombstone).
    pub delete: bool,
    /// What it adds to the live-items estimate (+1, 0, −1).
    pub delta: i8,
}

/// See the module docs.
pub(crate) struct LogIndex {
    heads: Vec<AtomicU32>,
    links: Vec<AtomicU32>,
    /// Bits of a link holding `next`; the kind sits above them, the tag above that.
    next_bits: u32,
    tag_bits: u32,
    live: AtomicU64,
    deletes: AtomicU64,
    /// Sum of the objects' estimate deltas (+1 `PUT_ADDS`, −1 `DELETE_SUBS`).
    delta: std::sync::atomic::AtomicI64,
}

impl LogIndex {
    /// An empty index for `sets` sets and `pages` log pages with the default tag width.
    #[cfg(test)]
    pub(crate) fn new(sets: u32, pages: u32) -> Self {
        Self::with_tag_bits(sets, pages, MAX_TAG_BITS)
    }

    /// An empty index for `sets` sets and `pages` log pages, tags at most `max_tag` bits.
    /// The log must have fewer than 2^30 entry slots (`format::MAX_LOG_PAGES`, which
    /// `Layout` never exceeds); the tag gets what `next` and the kind leave, 0 bits (every
    /// object a candidate) at the very largest.
    pub(crate) fn with_tag_bits(sets: u32, pages: u32, max_tag: u32) -> Self {
        let slots = u64::from(pages) * u64::from(PER_PAGE);
        // `next` holds index + 1, up to `slots`.
        let next_bits = (64 - slots.leading_zeros()).clamp(1, 30);
        let tag_bits = (30 - next_bits).min(max_tag).min(32);
        Self {
            heads: (0..sets).map(|_| AtomicU32::new(0)).collect(),
            links: (0..slots).map(|_| AtomicU32::new(0)).collect(),
            next_bits,
            tag_bits,
            live: AtomicU64::new(0),
            deletes: AtomicU64::new(0),
            delta: std::sync::atomic::AtomicI64::new(0),
        }
    }

    /// The tag of a key hash: its top `tag_bits` bits (bits the set and filter choice do
    /// not use directly).
    pub(crate) fn tag_of(&self, hash: u64) -> u32 {
        if self.tag_bits == 0 {
            0
        } else {
            (hash >> (64 - self.tag_bits)) as u32
        }
    }

    /// Bits of the key hash a link keeps as its tag.
    pub(crate) fn tag_bits(&self) -> u32 {
        self.tag_bits
    }

    fn next_mask(&self) -> u32 {
        ((1u64 << self.next_bits) - 1) as u32
    }

    /// Record the object at `slot`/`pos` as `set`'s newest (caller holds the set's lock).
    /// `tag` is `Self::tag_of` its key's hash; `delta` is what it adds to the live-items
    /// estimate (+1, 0 or −1; a put never −1, a delete never +1).
    pub(crate) fn push(&self, set: u32, slot: u32, pos: u32, tag: u32, delete: bool, delta: i8) {
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
        let next = head.load(Relaxed) & self.next_mask();
        let (kind, d) = match (delete, delta.signum()) {
            (false, 1) => (PUT_ADDS, 1),
            (false, _) => (PUT, 0),
            (true, -1) => (DELETE_SUBS, -1),
            (true, _) => (DELETE, 0),
        };
        let tag = tag & (((1u64 << self.tag_bits) - 1) as u32);
        let tag_at = self.next_bits + 2;
        let t = if self.tag_bits == 0 { 0 } else { tag << tag_at };
        link.store(next | (kind << self.next_bits) | t, Relaxed);
        self.delta.fetch_add(d, Relaxed);
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
        let mask = self.next_mask();
        std::iter::from_fn(move || {
            if at == 0 || steps >= self.links.len() {
                return None;
            }
            steps += 1;
            let idx = at - 1;
            let l = self.links.get(idx as usize)?.load(Relaxed);
            at = l & mask;
            let kind = (l >> self.next_bits) & 3;
            let tag = if self.tag_bits == 0 {
                0
            } else {
                l >> (self.next_bits + 2)
            };
            Some(LogRef {
                slot: idx / PER_PAGE,
                pos: idx % PER_PAGE,
                tag,
                delete: kind >= DELETE,
                delta: match kind {
                    PUT_ADDS => 1,
                    DELETE_SUBS => -1,
                    _ => 0,
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
        (self.heads.len() * 4 + self.links.len() * 4) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_are_per_set_newest_first_and_taken_whole() {
        let x = LogIndex::new(4, 2);
        assert_eq!(x.ram_bytes(), 4 * 4 + 2 * 32 * 4);
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

    /// Every field of a link survives packing at the edges: the last slot of a log whose
    /// slot count needs every `next` bit, every kind, the widest tag and no tag at all.
    #[test]
    fn links_pack_next_kind_and_tag_at_the_edges() {
        for (pages, max_tag) in [(1u32 << 15, 16), (1 << 15, 0), (3, 16), (3, 1)] {
            let x = LogIndex::with_tag_bits(2, pages, max_tag);
            let last = pages - 1;
            let hash = u64::MAX - 0x1234;
            let tag = x.tag_of(hash);
            assert!(u64::from(tag) < 1u64 << x.tag_bits());
            let kinds = [(false, 1i8), (false, 0), (true, 0), (true, -1)];
            for (j, (del, d)) in kinds.iter().enumerate() {
                x.push(
                    1,
                    last - (j as u32 % pages),
                    PER_PAGE - 1 - j as u32,
                    tag,
                    *del,
                    *d,
                );
            }
            let got: Vec<LogRef> = x.refs(1).collect();
            assert_eq!(got.len(), 4, "pages {pages}");
            for (r, (j, (del, d))) in got.iter().rev().zip(kinds.iter().enumerate()) {
                assert_eq!(
                    (r.slot, r.pos, r.tag, r.delete, r.delta),
                    (
                        last - (j as u32 % pages),
                        PER_PAGE - 1 - j as u32,
                        tag,
                        *del,
                        *d
                    ),
                    "pages {pages}, max tag {max_tag}"
                );
            }
            assert_eq!((x.live(), x.deletes(), x.estimate_delta()), (4, 2, 0));
            assert!(x.refs(0).next().is_none(), "set 0 untouched");
        }
    }

    #[test]
    fn tags_use_the_top_bits_left_by_next() {
        // 2 pages = 64 slots: next needs 7 bits, so the tag keeps its 16-bit maximum.
        let x = LogIndex::new(4, 2);
        assert_eq!(x.tag_bits(), 16);
        assert_eq!(x.tag_of(0xabcd_0000_0000_0000), 0xabcd);
        // 13,107 pages (1 GiB, 5 %): 419,424 slots need 19 bits: 11 tag bits.
        let y = LogIndex::new(1, 13_107);
        assert_eq!((y.next_bits, y.tag_bits()), (19, 11));
        assert_eq!(y.tag_of(0xabcd_0000_0000_0000), 0xabcd >> 5);
    }
}
