//! The segment table: every segment's [`SegInfo`] row, the free lists, and the two counters
//! a segment's life is stamped with (`seq` when it opens, reclaim's `order` when it seals).
//! Owns the lifecycle `Free → Open → Sealed → Reclaiming → Free` (or `Failed`); victim
//! choice and the order of recovered segments live here because they read only the table.
//!
//! Invariants: a segment in a free list is `Free` (recovery and reclaim put it there, `open`
//! takes it out); `seq`s are handed out increasing (after a restart, from the newest one
//! recovery found); `dead <= puts <= records` in every row.
//!
//! One part of the engine state (`state.rs`): every method runs under the engine state lock
//! and never blocks or does IO. Which devices take writes is the health part's to say; the
//! table is handed its mask (`out`).
use crate::config::ReclaimPolicy;
use crate::format::segment::SummaryEntry;
use crate::segments::{FreeLists, SegInfo, SegState};

/// Segment rows, free lists and the seq/order counters.
pub(crate) struct SegmentTable {
    segs: Vec<SegInfo>,
    free: FreeLists,
    /// The seq the next opened segment gets (seqs start at 1).
    next_seq: u64,
    /// The next [`SegInfo::order`] stamp a seal hands out.
    next_order: u64,
}

impl SegmentTable {
    /// The table over `segs` (as laid out at open), on `devices` devices, before recovery:
    /// no free segment yet.
    pub(crate) fn new(segs: Vec<SegInfo>, devices: usize) -> Self {
        Self {
            segs,
            free: FreeLists::new(devices),
            next_seq: 1,
            next_order: 1,
        }
    }

    /// Segments in the set (the journal's included).
    pub(crate) fn len(&self) -> usize {
        self.segs.len()
    }

    /// Segment `seg`'s row.
    pub(crate) fn get(&self, seg: u32) -> Option<&SegInfo> {
        self.segs.get(seg as usize)
    }

    /// Every row, in segment order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &SegInfo> {
        self.segs.iter()
    }

    /// Free segments on devices not `out` of allocation.
    pub(crate) fn free_total(&self, out: &[bool]) -> usize {
        self.free.total(out)
    }

    /// The newest seq handed out so far (0 before any).
    pub(crate) fn newest_seq(&self) -> u64 {
        self.next_seq.saturating_sub(1)
    }

    /// The oldest seq among segments holding records, leaving out seq `except`.
    pub(crate) fn oldest_seq_except(&self, except: u64) -> Option<u64> {
        self.segs
            .iter()
            .filter(|s| {
                matches!(
                    s.state,
                    SegState::Open(_) | SegState::Sealed | SegState::Reclaiming
                ) && s.seq != except
            })
            .map(|s| s.seq)
            .min()
    }

    /// Padded record bytes in segments holding records.
    pub(crate) fn bytes_used(&self) -> u64 {
        self.segs
            .iter()
            .filter(|s| !matches!(s.state, SegState::Free | SegState::Failed))
            .map(|s| s.data_bytes)
            .sum()
    }

    /// Estimated dead bytes of sealed segments (and those being reclaimed).
    pub(crate) fn bytes_dead(&self) -> u64 {
        self.segs
            .iter()
            .filter(|s| matches!(s.state, SegState::Sealed | SegState::Reclaiming))
            .map(SegInfo::dead_bytes)
            .sum()
    }

    /// [`Self::bytes_dead`] split by age: four bands of equal seq span, from the oldest
    /// sealed (or reclaiming) segment's seq to the newest seq handed out, oldest band first.
    /// Tells whether the dead bytes wait in old segments reclaim has not reached or in young
    /// ones (docs/eviction.md, "Where the dead records sit").
    pub(crate) fn dead_by_age(&self) -> [u64; 4] {
        let sealed = || {
            self.segs
                .iter()
                .filter(|s| matches!(s.state, SegState::Sealed | SegState::Reclaiming))
        };
        let mut out = [0u64; 4];
        let Some(lo) = sealed().map(|s| s.seq).min() else {
            return out;
        };
        let span = self.newest_seq().max(lo) - lo + 1;
        for s in sealed() {
            let band = ((s.seq - lo) * 4 / span).min(3) as usize;
            out[band] += s.dead_bytes();
        }
        out
    }

    /// Device offset of the next free segment of `dev` (a probe may overwrite its header).
    pub(crate) fn probe_target(&self, dev: usize) -> Option<u64> {
        self.free
            .peek(dev)
            .and_then(|seg| self.get(seg))
            .filter(|s| s.state == SegState::Free)
            .map(|s| s.dev_off)
    }

    /// Take a free segment (round-robin over devices not `out`, preferring `tier`) and open
    /// it for `stream` with the next seq. Returns the segment and its seq.
    pub(crate) fn open(
        &mut self,
        (out, tiers, tier): (&[bool], &[u8], Option<u8>),
        uuid: &[u8; 16],
        stream: u8,
    ) -> Option<(u32, u64)> {
        let seg = self.free.pop(out, tiers, tier)?;
        let seq = self.next_seq;
        self.next_seq += 1;
        let info = self.segs.get_mut(seg as usize)?;
        info.reset(uuid, seq, stream);
        info.state = SegState::Open(stream);
        Some((seg, seq))
    }

    /// Account one appended record of `padded` bytes and kind `kind` in `seg`.
    pub(crate) fn add_record(&mut self, seg: u32, padded: u64, exptime: u32, kind: u8) {
        if let Some(info) = self.segs.get_mut(seg as usize) {
            info.add_record(padded, exptime, kind);
        }
    }

    /// The record area of `seg` now reaches `end` (a chunk was handed to the device).
    pub(crate) fn set_data_end(&mut self, seg: u32, end: u32) {
        if let Some(info) = self.segs.get_mut(seg as usize) {
            info.data_end = end;
        }
    }

    /// Seal `seg`: stamp its reclaim order; it is read-only from now on and its summary will
    /// be written once its records are durable (`tail_pending` until then). Returns its row.
    pub(crate) fn seal(&mut self, seg: u32) -> Option<&SegInfo> {
        let order = self.next_order;
        self.next_order += 1;
        let info = self.segs.get_mut(seg as usize)?;
        info.order = order;
        info.state = SegState::Sealed;
        info.has_summary = false;
        info.tail_pending = true;
        Some(info)
    }

    /// The summary of `seg`'s life `seq` is on the device: reclaim reads it.
    pub(crate) fn summary_written(&mut self, seg: u32, seq: u64) {
        if let Some(info) = self.segs.get_mut(seg as usize) {
            if info.seq == seq {
                info.has_summary = true;
                info.tail_pending = false;
            }
        }
    }

    /// The summary of `seg`'s life `seq` was not written (its write or the sync before it
    /// failed): reclaim scans it instead.
    pub(crate) fn summary_lost(&mut self, seg: u32, seq: u64) {
        if let Some(info) = self.segs.get_mut(seg as usize) {
            if info.seq == seq {
                info.has_summary = false;
                info.tail_pending = false;
            }
        }
    }

    /// `n` records of `seg` were lost (their write failed): count them dead (as values: an
    /// estimate when markers were among them).
    pub(crate) fn lose_records(&mut self, seg: u32, n: u32) {
        if let Some(info) = self.segs.get_mut(seg as usize) {
            info.add_dead(n);
        }
    }

    /// The user no longer needs one record of `seg`: returns the growth of its dead-byte
    /// estimate (`None`: nothing counted — free segment, or every record dead already).
    pub(crate) fn mark_dead(&mut self, seg: u32) -> Option<u64> {
        let info = self.segs.get_mut(seg as usize)?;
        if matches!(info.state, SegState::Free) {
            return None;
        }
        let before = info.dead_bytes();
        info.add_dead(1).then(|| info.dead_bytes() - before)
    }

    /// Choose a reclaim victim among sealed segments on devices not `out` and mark it
    /// `Reclaiming`: first the oldest whose records have all expired by `now`, then the
    /// oldest that outlived two turns of the whole flash, else by `policy`.
    pub(crate) fn pick_victim(
        &mut self,
        out: &[bool],
        policy: ReclaimPolicy,
        now: u32,
    ) -> Option<u32> {
        let candidates = self.takeable(out);
        let expired = candidates
            .clone()
            .filter(|(_, s)| s.all_expired(now))
            .min_by_key(|(_, s)| s.order);
        // Age bound: a segment that has outlived two turns of the whole flash goes next
        // whatever its score, so every segment is reclaimed in bounded time (tombstones and
        // drop notes are kept until every segment older than them is gone; cost-benefit
        // alone would never pick a segment that stays fully live).
        let newest = self.segs.iter().map(|s| s.order).max().unwrap_or(0);
        let age_bound = 2 * self.segs.len() as u64;
        let aged = candidates
            .clone()
            .filter(|(_, s)| newest.saturating_sub(s.order) >= age_bound)
            .min_by_key(|(_, s)| s.order);
        let pick = expired.or(aged).or_else(|| match policy {
            ReclaimPolicy::Fifo => candidates.min_by_key(|(_, s)| s.order),
            ReclaimPolicy::Greedy => candidates.min_by(|(_, a), (_, b)| {
                let ra = a.dead_bytes() as f64 / a.data_bytes.max(1) as f64;
                let rb = b.dead_bytes() as f64 / b.data_bytes.max(1) as f64;
                rb.total_cmp(&ra).then(a.order.cmp(&b.order))
            }),
            ReclaimPolicy::CostBenefit => {
                let score = |s: &SegInfo| {
                    let u = 1.0 - s.dead_bytes() as f64 / s.data_bytes.max(1) as f64;
                    (1.0 - u) * (newest.saturating_sub(s.order) + 1) as f64 / (1.0 + u)
                };
                candidates.max_by(|(_, a), (_, b)| {
                    score(a).total_cmp(&score(b)).then(b.order.cmp(&a.order))
                })
            }
        });
        let seg = pick.map(|(i, _)| i as u32);
        self.mark_reclaiming(seg)
    }

    /// The oldest sealed segment on a device not `out` whose value records are all dead
    /// ([`SegInfo::values_all_dead`]), marked `Reclaiming`: reclaim frees such segments
    /// ahead of need and in batches, since freeing one early costs no live item.
    pub(crate) fn pick_dead_victim(&mut self, out: &[bool]) -> Option<u32> {
        self.mark_reclaiming(self.dead_victim(out))
    }

    /// True when [`Self::pick_dead_victim`] would find a segment.
    pub(crate) fn has_dead_victim(&self, out: &[bool]) -> bool {
        self.dead_victim(out).is_some()
    }

    /// The sealed segment on a device not `out` with the largest share of its value
    /// records dead, if at least a quarter are ([`crate::config::FlashConfig::free_ahead`]),
    /// marked `Reclaiming`.
    pub(crate) fn pick_cheap_victim(&mut self, out: &[bool]) -> Option<u32> {
        self.mark_reclaiming(self.cheap_victim(out))
    }

    /// True when [`Self::pick_cheap_victim`] would find a segment.
    pub(crate) fn has_cheap_victim(&self, out: &[bool]) -> bool {
        self.cheap_victim(out).is_some()
    }

    fn mark_reclaiming(&mut self, seg: Option<u32>) -> Option<u32> {
        let seg = seg?;
        self.segs[seg as usize].state = SegState::Reclaiming;
        Some(seg)
    }

    /// Sealed segments whose summary is written, on devices not `out`: what reclaim may
    /// take now.
    fn takeable<'a>(
        &'a self,
        out: &'a [bool],
    ) -> impl Iterator<Item = (usize, &'a SegInfo)> + Clone + 'a {
        self.segs.iter().enumerate().filter(move |(_, s)| {
            s.state == SegState::Sealed
                && !s.tail_pending
                && !out.get(s.dev).copied().unwrap_or(true)
        })
    }

    fn cheap_victim(&self, out: &[bool]) -> Option<u32> {
        self.takeable(out)
            .filter(|(_, s)| s.worth_freeing_ahead())
            .max_by(|(_, a), (_, b)| {
                a.dead_share()
                    .total_cmp(&b.dead_share())
                    .then(b.order.cmp(&a.order))
            })
            .map(|(i, _)| i as u32)
    }

    fn dead_victim(&self, out: &[bool]) -> Option<u32> {
        self.takeable(out)
            .filter(|(_, s)| s.values_all_dead())
            .min_by_key(|(_, s)| s.order)
            .map(|(i, _)| i as u32)
    }

    /// Reclaim of `seg` failed: back to sealed, or retired (`Failed`: never read, written,
    /// reused or picked again) when it could not be read.
    pub(crate) fn reclaim_failed(&mut self, seg: u32, unreadable: bool) {
        if let Some(info) = self.segs.get_mut(seg as usize) {
            if info.state == SegState::Reclaiming {
                info.state = if unreadable {
                    SegState::Failed
                } else {
                    SegState::Sealed
                };
            }
        }
    }

    /// Reclaim emptied `seg` (its header page is zero on flash): free again. A failing
    /// device keeps its free segments listed; allocation skips them until it is back.
    pub(crate) fn release(&mut self, seg: u32) {
        let Some(info) = self.segs.get_mut(seg as usize) else {
            return;
        };
        info.state = SegState::Free;
        info.clear_counts();
        self.free.push(info.dev, seg);
    }

    /// Recovery found `entries` in `seg`, life `seq` of `stream`, its records ending at
    /// `data_end`; `sealed`: read from a valid summary.
    pub(crate) fn recovered(
        &mut self,
        seg: u32,
        (uuid, seq, stream): (&[u8; 16], u64, u8),
        sealed: bool,
        data_end: u32,
        entries: &[SummaryEntry],
    ) {
        let Some(info) = self.segs.get_mut(seg as usize) else {
            return;
        };
        info.reset(uuid, seq, stream);
        info.state = SegState::Sealed;
        info.has_summary = sealed;
        info.data_end = data_end;
        for e in entries {
            info.add_record(u64::from(e.len).div_ceil(16) * 16, e.exptime, e.kind);
        }
    }

    /// Recovery is over: seqs continue after `max_seq`, recovered segments get their reclaim
    /// order, `retired` ones are `Failed` and every other one not `live` is free.
    pub(crate) fn finish_recovery(&mut self, max_seq: u64, live: &[bool], retired: &[bool]) {
        self.next_seq = max_seq + 1;
        self.next_order = order_recovered(&mut self.segs, max_seq);
        for (i, s) in self.segs.iter_mut().enumerate() {
            if s.state == SegState::Journal {
                continue;
            }
            if retired.get(i).copied().unwrap_or(false) {
                s.state = SegState::Failed;
            } else if !live.get(i).copied().unwrap_or(false) {
                self.free.push(s.dev, i as u32);
            }
        }
    }
}

/// Reclaim's age order for recovered segments (see `SegInfo::order`; seal times are not on
/// flash): each stream's newest segment — the one it was filling at shutdown, holding its
/// latest records however long ago it was opened — ranks above every other, in seq order;
/// the rest keep their seq. Returns the next stamp to hand out.
fn order_recovered(segs: &mut [SegInfo], max_seq: u64) -> u64 {
    let mut tails: Vec<(u64, usize)> = Vec::new();
    for (i, s) in segs.iter().enumerate() {
        if s.state != SegState::Sealed {
            continue;
        }
        match tails.iter_mut().find(|t| segs[t.1].stream == s.stream) {
            Some(t) if t.0 < s.seq => *t = (s.seq, i),
            Some(_) => {}
            None => tails.push((s.seq, i)),
        }
    }
    tails.sort_unstable();
    let mut next = max_seq + 1;
    for (_, i) in tails {
        segs[i].order = next;
        next += 1;
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: [u8; 16] = [7; 16];

    /// `n` free segments on one device.
    fn table(n: u32) -> SegmentTable {
        let segs = (0..n)
            .map(|i| SegInfo::new(0, u64::from(i) << 20))
            .collect();
        let mut t = SegmentTable::new(segs, 1);
        t.finish_recovery(0, &[], &[]);
        t
    }

    /// A segment of `records` records, sealed and its summary written.
    fn fill_and_seal(t: &mut SegmentTable, records: u32) -> u32 {
        let (seg, seq) = t.open((&[false], &[0], None), &UUID, 0).unwrap();
        for _ in 0..records {
            t.add_record(seg, 100, 0, crate::format::record::kind::PUT);
        }
        t.seal(seg).unwrap();
        t.summary_written(seg, seq);
        seg
    }

    #[test]
    fn a_segment_is_no_victim_until_its_summary_is_written_or_given_up() {
        let mut t = table(4);
        let (seg, seq) = t.open((&[false], &[0], None), &UUID, 0).unwrap();
        t.add_record(seg, 100, 0, crate::format::record::kind::PUT);
        t.seal(seg).unwrap();
        t.mark_dead(seg);
        let info = t.get(seg).unwrap();
        assert!(info.tail_pending && !info.has_summary);
        assert_eq!(t.pick_victim(&[false], ReclaimPolicy::Fifo, 0), None);
        assert!(!t.has_dead_victim(&[false]));
        // Another life's news changes nothing.
        t.summary_written(seg, seq + 1);
        assert_eq!(t.pick_victim(&[false], ReclaimPolicy::Greedy, 0), None);
        t.summary_lost(seg, seq);
        let info = t.get(seg).unwrap();
        assert!(!info.tail_pending && !info.has_summary);
        assert_eq!(t.pick_dead_victim(&[false]), Some(seg));
        let (seg, seq) = t.open((&[false], &[0], None), &UUID, 0).unwrap();
        t.seal(seg).unwrap();
        t.summary_written(seg, seq);
        assert!(t.get(seg).unwrap().has_summary);
        assert_eq!(t.pick_victim(&[false], ReclaimPolicy::Fifo, 0), Some(seg));
    }

    #[test]
    fn a_dead_victim_has_every_value_dead_and_goes_oldest_first() {
        let mut t = table(6);
        let a = fill_and_seal(&mut t, 2);
        let b = fill_and_seal(&mut t, 2);
        let c = fill_and_seal(&mut t, 2);
        // Only tombstones: nothing for users to mark dead, so never a dead victim.
        let (tomb, _) = t.open((&[false], &[0], None), &UUID, 0).unwrap();
        t.add_record(tomb, 64, 0, crate::format::record::kind::TOMBSTONE);
        t.seal(tomb).unwrap();
        t.summary_written(tomb, t.get(tomb).unwrap().seq);
        assert!(!t.has_dead_victim(&[false]));
        t.mark_dead(a);
        assert!(!t.has_dead_victim(&[false]), "half of a is live");
        for seg in [c, c, b, b] {
            t.mark_dead(seg);
        }
        assert!(t.has_dead_victim(&[false]));
        assert!(!t.has_dead_victim(&[true]), "its device is out");
        assert_eq!(t.pick_dead_victim(&[false]), Some(b), "older than c");
        assert_eq!(t.get(b).unwrap().state, SegState::Reclaiming);
        assert_eq!(t.pick_dead_victim(&[false]), Some(c));
        assert_eq!(
            t.pick_dead_victim(&[false]),
            None,
            "a is half live, tomb has no values"
        );
    }

    #[test]
    fn dead_bytes_split_by_age_oldest_band_first() {
        let mut t = table(8);
        assert_eq!(t.dead_by_age(), [0; 4]);
        // Seqs 1..=8, sealed, 100-byte records: seq 1 and 2 in the oldest band, 7 and 8 in
        // the newest.
        let segs: Vec<u32> = (0..8).map(|_| fill_and_seal(&mut t, 4)).collect();
        t.mark_dead(segs[0]);
        t.mark_dead(segs[7]);
        t.mark_dead(segs[7]);
        t.mark_dead(segs[4]);
        assert_eq!(t.dead_by_age(), [100, 0, 100, 200]);
        assert_eq!(t.dead_by_age().iter().sum::<u64>(), t.bytes_dead());
    }

    #[test]
    fn lifecycle_free_open_sealed_reclaimed_free() {
        let mut t = table(3);
        assert_eq!(t.free_total(&[false]), 3);
        let (seg, seq) = t.open((&[false], &[0], None), &UUID, 1).unwrap();
        assert_eq!((seq, t.newest_seq()), (1, 1));
        assert_eq!(t.get(seg).unwrap().state, SegState::Open(1));
        assert_eq!(t.free_total(&[false]), 2);
        t.add_record(seg, 4096, 0, crate::format::record::kind::PUT);
        assert_eq!(t.bytes_used(), 4096);
        assert_eq!(t.seal(seg).unwrap().order, 1);
        t.summary_written(seg, seq);
        assert_eq!(t.mark_dead(seg), Some(4096));
        assert_eq!(t.mark_dead(seg), None, "every record is dead already");
        assert_eq!(t.bytes_dead(), 4096);
        assert_eq!(t.oldest_seq_except(0), Some(1));
        assert_eq!(t.oldest_seq_except(1), None);
        assert_eq!(t.pick_victim(&[false], ReclaimPolicy::Fifo, 0), Some(seg));
        assert_eq!(t.pick_victim(&[false], ReclaimPolicy::Fifo, 0), None);
        t.release(seg);
        assert_eq!(t.free_total(&[false]), 3);
        assert_eq!(t.bytes_used(), 0);
        assert_eq!(
            t.probe_target(0),
            Some(1 << 20),
            "the next free segment's header"
        );
    }

    #[test]
    fn victims_by_policy_and_failed_reclaims() {
        let mut t = table(4);
        let old = fill_and_seal(&mut t, 4);
        let dead = fill_and_seal(&mut t, 4);
        for _ in 0..3 {
            t.mark_dead(dead);
        }
        assert_eq!(
            t.pick_victim(&[false], ReclaimPolicy::Greedy, 0),
            Some(dead)
        );
        t.reclaim_failed(dead, false);
        assert_eq!(t.get(dead).unwrap().state, SegState::Sealed);
        assert_eq!(t.pick_victim(&[false], ReclaimPolicy::Fifo, 0), Some(old));
        t.reclaim_failed(old, true);
        assert_eq!(t.get(old).unwrap().state, SegState::Failed);
        // A device out of allocation offers no victim.
        assert_eq!(t.pick_victim(&[true], ReclaimPolicy::Fifo, 0), None);
    }

    #[test]
    fn recovery_orders_stream_tails_last_and_frees_the_rest() {
        let segs = (0..5u32)
            .map(|i| SegInfo::new(0, u64::from(i) << 20))
            .collect();
        let mut t = SegmentTable::new(segs, 1);
        // Stream 0 wrote seqs 3 and 9, stream 1 seq 5; segment 4 could not be read.
        t.recovered(0, (&UUID, 9, 0), true, 4096, &[]);
        t.recovered(1, (&UUID, 3, 0), true, 4096, &[]);
        t.recovered(2, (&UUID, 5, 1), false, 4096, &[]);
        t.finish_recovery(
            9,
            &[true, true, true, false, false],
            &[false, false, false, false, true],
        );
        assert_eq!(t.newest_seq(), 9);
        let order: Vec<u64> = t.iter().map(|s| s.order).collect();
        assert_eq!(order[..3], [11, 3, 10]);
        assert_eq!(t.get(4).unwrap().state, SegState::Failed);
        assert_eq!(t.free_total(&[false]), 1);
        assert!(!t.get(2).unwrap().has_summary);
    }
}
