//! The log's RAM index (Kangaroo's partitioned KLog index): for every object in the on-flash
//! log, a few bytes that say which set it belongs to and where it is — chained per group of
//! sets, so a lookup walks only its own group's log objects and a merge takes a whole set's.
//!
//! Layout: one `u32` head per **group of [`GROUP`] sets** (the group's newest log object, 0
//! none) and one `u32` link per log entry slot (log page slot × [`PER_PAGE`] + position in the
//! page). A link packs, from the low bits: the next (older) object of the same group (index +
//! 1, 0 none; `next_bits` = the bits the slot count needs), two kind bits (a put or a delete,
//! and what it adds to the live-items estimate), the set's place in its group (`member_bits`,
//! exact: a chain's walk skips the group's other sets without a read) and as many bits of the
//! key hash's tag as are left (`tag_bits` = 30 − `next_bits` − `member_bits`, at most 16). An
//! object's place on flash is its link's index, so the index stores no offsets:
//! `4 B × sets / 4 + 4 B × log pages × 32` in all (128 B a log page), fixed at open (stat
//! `small_log_index_bytes`).
//!
//! Why groups (issue 28, RAM per object, 2026-11-28): a head per set was 4 B a set — 0.19 B an
//! object of the 20M × 100 B shape, a fifth of the ≤ 1 B budget. A group's sets are `g`,
//! `g + groups`, `g + 2·groups`, … with `groups` a multiple of the staging partitions, so they
//! share one partition lock, which every read and change of a chain holds. The price: two
//! bits of tag (the member bits), so about 4× the false tag matches per lookup through the
//! log, and a chain 4× as long to walk in RAM (a lookup compares member and tag per link; a
//! merge's `take` splices the set's links out of its group's chain). A log too large to leave
//! the member bits (≥ 2^28 slots) keeps a head per set.
//!
//! Why a narrower tag is enough: a tag only saves log page reads — a lookup reads the page of
//! every object of its set whose tag matches and compares the key, a remove stages a
//! tombstone whenever a put of the same tag is there, and the estimate is an estimate — so
//! no answer depends on its width. A lookup through a chain of L other objects of its set
//! reads L / 2^`tag_bits` extra log pages on average: 9 bits for a 1 GiB file with a 5 % log
//! (13,107 pages), 7 bits at 4 GiB / 5 %, 6 at 4 GiB / 10 %, 5 at 4 GiB / 20 % (stat
//! `small_log_tag_width`; extra reads counted in `small_log_tag_false_reads`).
//!
//! Invariants: a group's chain is read and changed only under its sets' staging partition
//! lock (`Staging::with_set`), so a lookup sees a whole chain; a set's objects leave a chain
//! all at once (`take`, after the set's page holds them: the links before them are re-pointed
//! past them) or everything at once (`clear`). A link is reused only when its log slot is
//! rewritten, which the log allows only after every set with an object in the slot was
//! merged (`klog`) and so spliced out, so no chain points at a reused link.
//!
//! # Threads
//! Any caller, under the set's partition lock; atomics only so the arena can be shared.
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

use crate::format::MAX_ENTRIES;
use crate::hugepages::Fixed;
use crate::staging::PARTS;

/// Entry slots per log page.
pub(crate) const PER_PAGE: u32 = MAX_ENTRIES as u32;
/// Sets sharing a chain head (a power of two).
pub(crate) const GROUP: u32 = 4;
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
    heads: Fixed<AtomicU32>,
    links: Fixed<AtomicU32>,
    /// Bits of a link holding `next`; the kind sits above them, the member above that, the
    /// tag on top.
    next_bits: u32,
    member_bits: u32,
    tag_bits: u32,
    /// Heads (groups); a set's group is `set % groups`, its member `set / groups`.
    groups: u32,
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

    /// [`Self::shaped`] on the heap.
    #[cfg(test)]
    pub(crate) fn with_tag_bits(sets: u32, pages: u32, max_tag: u32) -> Self {
        Self::shaped(sets, pages, max_tag, false)
    }

    /// An empty index for `sets` sets and `pages` log pages, tags at most `max_tag` bits.
    /// The log must have fewer than 2^30 entry slots (`format::MAX_LOG_PAGES`, which
    /// `Layout` never exceeds); the member bits and the tag get what `next` and the kind
    /// leave (a head per set and a 0-bit tag — every object a candidate — at the very
    /// largest). With `huge`, the heads and links are in huge-page mappings where worth it
    /// (`hugepages`).
    pub(crate) fn shaped(sets: u32, pages: u32, max_tag: u32, huge: bool) -> Self {
        let slots = u64::from(pages) * u64::from(PER_PAGE);
        let (next_bits, member_bits, tag_bits, groups) = shape(sets, slots, max_tag);
        Self {
            heads: Fixed::new(groups.min(sets) as usize, huge),
            links: Fixed::new(slots as usize, huge),
            next_bits,
            member_bits,
            tag_bits,
            groups,
            live: AtomicU64::new(0),
            deletes: AtomicU64::new(0),
            delta: std::sync::atomic::AtomicI64::new(0),
        }
    }

    /// The set's head (its group's) and its member number in the group.
    fn head_of(&self, set: u32) -> Option<(&AtomicU32, u32)> {
        let member = set / self.groups;
        (member >> self.member_bits == 0)
            .then(|| self.heads.get((set % self.groups) as usize))
            .flatten()
            .map(|h| (h, member))
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
        let (Some((head, member)), Some(idx)) = (
            self.head_of(set),
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
        let member_at = self.next_bits + 2;
        let tag_at = member_at + self.member_bits;
        let t = if self.tag_bits == 0 { 0 } else { tag << tag_at };
        link.store(
            next | (kind << self.next_bits) | (member << member_at) | t,
            Relaxed,
        );
        self.delta.fetch_add(d, Relaxed);
        head.store(idx + 1, Relaxed);
        self.live.fetch_add(1, Relaxed);
        if delete {
            self.deletes.fetch_add(1, Relaxed);
        }
    }

    /// The set's log objects, newest first (caller holds the set's lock). An iterator, not a
    /// list: a GET's lookup and the merge's checks stop at the first match and allocate
    /// nothing. It walks the group's chain, skipping the other members' links; at most
    /// `links.len()` steps, so a damaged chain cannot loop.
    pub(crate) fn refs(&self, set: u32) -> impl Iterator<Item = LogRef> + '_ {
        let (mut at, member) = self
            .head_of(set)
            .map_or((0, 0), |(h, m)| (h.load(Relaxed), m));
        let mut steps = 0;
        let mask = self.next_mask();
        std::iter::from_fn(move || loop {
            if at == 0 || steps >= self.links.len() {
                return None;
            }
            steps += 1;
            let idx = at - 1;
            let l = self.links.get(idx as usize)?.load(Relaxed);
            at = l & mask;
            if self.member_of(l) != member {
                continue;
            }
            let (delete, delta) = self.kind_of(l);
            let tag = if self.tag_bits == 0 {
                0
            } else {
                l >> (self.next_bits + 2 + self.member_bits)
            };
            return Some(LogRef {
                slot: idx / PER_PAGE,
                pos: idx % PER_PAGE,
                tag,
                delete,
                delta,
            });
        })
    }

    /// Whether a link records a delete, and what its object adds to the live-items estimate.
    fn kind_of(&self, link: u32) -> (bool, i8) {
        let kind = (link >> self.next_bits) & 3;
        let delta = match kind {
            PUT_ADDS => 1,
            DELETE_SUBS => -1,
            _ => 0,
        };
        (kind >= DELETE, delta)
    }

    /// The member number a link records.
    fn member_of(&self, link: u32) -> u32 {
        (link >> (self.next_bits + 2)) & ((1u32 << self.member_bits) - 1)
    }

    /// True when the set has nothing in the log (caller holds the set's lock).
    #[cfg(test)]
    pub(crate) fn is_empty(&self, set: u32) -> bool {
        self.refs(set).next().is_none()
    }

    /// Forget the set's log objects (its page now holds them; caller holds its lock): the
    /// group's other links are re-pointed past them, in order. At most `links.len()` steps.
    pub(crate) fn take(&self, set: u32) {
        let Some((head, member)) = self.head_of(set) else {
            return;
        };
        let (mut n, mut dels, mut delta) = (0u64, 0u64, 0i64);
        let mask = self.next_mask();
        // The last kept link (None: the head) and where the walk is.
        let mut last: Option<&AtomicU32> = None;
        let mut at = head.load(Relaxed);
        let mut steps = 0;
        while at != 0 && steps < self.links.len() {
            steps += 1;
            let Some(link) = self.links.get((at - 1) as usize) else {
                break;
            };
            let l = link.load(Relaxed);
            if self.member_of(l) == member {
                let (delete, d) = self.kind_of(l);
                n += 1;
                dels += u64::from(delete);
                delta += i64::from(d);
            } else {
                // Kept: the previous kept link (or the head) points here.
                match last {
                    None => head.store(at, Relaxed),
                    Some(p) => p.store((p.load(Relaxed) & !mask) | at, Relaxed),
                }
                last = Some(link);
            }
            at = l & mask;
        }
        match last {
            None => head.store(0, Relaxed),
            Some(p) => p.store(p.load(Relaxed) & !mask, Relaxed),
        }
        self.live.fetch_sub(n, Relaxed);
        self.deletes.fetch_sub(dels, Relaxed);
        self.delta.fetch_sub(delta, Relaxed);
    }

    /// Forget everything (`flush_all`, under `merging`, every partition quiet for the log).
    pub(crate) fn clear(&self) {
        for h in self.heads.iter() {
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

    /// Bytes of the heads and links advised `MADV_HUGEPAGE` (`small_hugepage_bytes`).
    pub(crate) fn hugepage_bytes(&self) -> u64 {
        self.heads.advised_bytes() + self.links.advised_bytes()
    }

    /// RAM the index takes.
    pub(crate) fn ram_bytes(&self) -> u64 {
        (self.heads.len() * 4 + self.links.len() * 4) as u64
    }
}

/// Bits of a link for `next`, the member and the tag, and the group count, for `sets` sets and
/// `slots` log entry slots (see `LogIndex::with_tag_bits`).
fn shape(sets: u32, slots: u64, max_tag: u32) -> (u32, u32, u32, u32) {
    // `next` holds index + 1, up to `slots`.
    let next_bits = (64 - slots.leading_zeros()).clamp(1, 30);
    let group = if next_bits + GROUP.trailing_zeros() <= 30 {
        GROUP
    } else {
        1
    };
    // A multiple of the staging partitions, so a group's sets share one lock.
    let parts = PARTS as u32;
    let groups = sets.div_ceil(group).div_ceil(parts).max(1) * parts;
    let members = sets.div_ceil(groups).max(1);
    let member_bits = 32 - (members - 1).leading_zeros();
    let tag_bits = (30 - next_bits - member_bits).min(max_tag).min(32);
    (next_bits, member_bits, tag_bits, groups)
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

    /// Sets sharing a head: every operation against a model (per set, newest first), with
    /// sets of several groups interleaved in one chain, random takes splicing members out,
    /// reused links (a slot taken and pushed again) and clears. Narrow tags (0–2 bits) as in
    /// the tier's property tests; member numbers are exact whatever the tag width.
    /// A model's log object: slot, position, tag, delete, delta.
    type Obj = (u32, u32, u32, bool, i8);

    #[test]
    fn grouped_chains_match_a_model_per_set() {
        use std::collections::HashMap;
        for (sets, pages, max_tag) in [(1000u32, 40u32, 2u32), (600, 8, 0), (300, 3, 1), (5, 2, 16)]
        {
            let x = LogIndex::with_tag_bits(sets, pages, max_tag);
            assert!(x.member_bits <= GROUP.trailing_zeros());
            assert!(x.heads.len() as u32 <= sets.div_ceil(GROUP).div_ceil(64) * 64);
            // The model: per set, (slot, pos, tag, delete, delta) newest first; free slots.
            let mut model: HashMap<u32, Vec<Obj>> = HashMap::new();
            let mut free: Vec<u32> = (0..pages * PER_PAGE).rev().collect();
            let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(sets);
            let mut next = || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            // Few sets of the same groups, so chains mix members.
            let pick = |r: u64| ((r % 8) as u32 * x.groups + (r >> 8) as u32 % 3) % sets;
            for step in 0..20_000 {
                let r = next();
                match r % 10 {
                    0..=6 => {
                        let Some(idx) = free.pop() else { continue };
                        let set = pick(next());
                        let (tag, del) = ((r >> 8) as u32, r & (1 << 20) != 0);
                        let delta = if del {
                            -((r >> 21) as i8 & 1)
                        } else {
                            (r >> 21) as i8 & 1
                        };
                        x.push(set, idx / PER_PAGE, idx % PER_PAGE, tag, del, delta);
                        let tag = tag & ((1u64 << x.tag_bits) - 1) as u32;
                        model
                            .entry(set)
                            .or_default()
                            .insert(0, (idx / PER_PAGE, idx % PER_PAGE, tag, del, delta));
                    }
                    7 | 8 => {
                        let set = pick(next());
                        x.take(set);
                        for (slot, pos, ..) in model.remove(&set).unwrap_or_default() {
                            free.push(slot * PER_PAGE + pos);
                        }
                    }
                    _ if step % 997 == 0 => {
                        x.clear();
                        model.clear();
                        free = (0..pages * PER_PAGE).rev().collect();
                    }
                    _ => {}
                }
                if step % 50 == 0 || r % 10 >= 7 {
                    let mut total = (0u64, 0u64, 0i64);
                    for set in 0..sets {
                        let got: Vec<_> = x
                            .refs(set)
                            .map(|r| (r.slot, r.pos, r.tag, r.delete, r.delta))
                            .collect();
                        let want = model.get(&set).cloned().unwrap_or_default();
                        assert_eq!(got, want, "set {set} at step {step} ({sets} sets)");
                        total.0 += want.len() as u64;
                        total.1 += want.iter().filter(|o| o.3).count() as u64;
                        total.2 += want.iter().map(|o| i64::from(o.4)).sum::<i64>();
                    }
                    assert_eq!((x.live(), x.deletes(), x.estimate_delta()), total);
                }
            }
        }
    }

    #[test]
    fn a_group_is_four_sets_of_one_staging_partition() {
        // 1 GiB at 5 %: 249,036 sets, 13,107 log pages.
        let x = LogIndex::with_tag_bits(249_036, 13_107, 16);
        assert_eq!((x.next_bits, x.member_bits, x.tag_bits()), (19, 2, 9));
        assert_eq!(x.groups % 64, 0);
        assert_eq!(x.ram_bytes(), x.groups as u64 * 4 + 13_107 * 32 * 4);
        assert!(x.ram_bytes() < 249_036 + 13_107 * 128 + 64 * 4);
        for set in [0u32, 1, 63, 64, 249_035] {
            let (g, m) = (set % x.groups, set / x.groups);
            assert!(m < GROUP && g % 64 == set % 64, "set {set}");
        }
        // A log too large for the member bits keeps a head per set.
        let slots = |pages: u64| pages * u64::from(PER_PAGE);
        assert_eq!(shape(1_000_000, slots(1 << 24), 16).0, 30);
        assert_eq!(shape(1_000_000, slots(1 << 24), 16).1, 0);
        assert_eq!(shape(1_000_000, slots(1 << 24), 16).2, 0);
        // The largest that keeps groups: 2^28 − 1 slots, 28 next bits, no tag left.
        assert_eq!(shape(1_000_000, (1 << 28) - 1, 16), (28, 2, 0, 250_048));
    }
}
