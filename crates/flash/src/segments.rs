//! A segment's row ([`SegInfo`]: its lifecycle state, sequence number and live/dead
//! accounting) and the per-device free lists. The table that owns them and changes a row's
//! state is `segment_table.rs`; readers elsewhere see rows only through it, read-only.
//!
//! Lives inside the engine's single state mutex (see `state.rs`); every function here runs
//! with that lock held and never blocks.
use std::collections::VecDeque;

use crate::format::record::kind;
use crate::format::segment_seed;

/// Lifecycle of a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SegState {
    /// In a free list; its on-flash contents are garbage.
    Free,
    /// The open segment of a stream (records being appended).
    Open(u8),
    /// Read-only, holding records.
    Sealed,
    /// Chosen as a reclaim victim; still readable.
    Reclaiming,
    /// Retired: reclaim could not read it. Neither read, written nor reused.
    Failed,
    /// The crash journal (`crate::journal`): never allocated, reclaimed or recovered.
    Journal,
}

/// RAM metadata of one segment.
#[derive(Clone, Debug)]
pub(crate) struct SegInfo {
    /// Device holding it.
    pub dev: usize,
    /// Byte offset of the segment on its device.
    pub dev_off: u64,
    pub state: SegState,
    /// Sequence number of the segment's current life (0 while never written).
    pub seq: u64,
    /// Checksum seed of the current life (derived from uuid and seq).
    pub seed: u32,
    /// Reclaim's age order (smaller = older), stamped when the segment is sealed. Not the
    /// seq: a stream that fills slowly opened its segment long before its last records
    /// went in, and ordering by seq would reclaim those fresh records first. RAM only;
    /// recovery derives it (`segment_table::order_recovered`).
    pub order: u64,
    /// Stream that wrote it.
    pub stream: u8,
    /// Records appended.
    pub records: u32,
    /// Value records appended (kind PUT): the only records users mark dead. Tombstones,
    /// drop notes and user-kind markers are left out of the dead estimate: counted in with
    /// the values, a segment half made of header-only records looked half as dead as it was.
    pub puts: u32,
    /// Padded bytes of those value records.
    pub put_bytes: u64,
    /// Value records reported dead by the user (<= puts).
    pub dead: u32,
    /// Sum of padded record bytes.
    pub data_bytes: u64,
    /// End of the record area written so far (page aligned once sealed).
    pub data_end: u32,
    /// Largest exptime of its records; 0 if any never expires (or none yet).
    pub max_exptime: u32,
    /// True while no record lacking an exptime was added (so `max_exptime` bounds them all).
    pub all_expire: bool,
    /// A valid summary and footer are on flash (false for recovered unsealed segments).
    pub has_summary: bool,
    /// Sealed, its summary not written yet: it waits for the segment's chunk writes and a
    /// sync covering them (`Inner::seal`). Not a reclaim victim meanwhile (records of it may
    /// still be in flight, and a scan would miss them).
    pub tail_pending: bool,
}

impl SegInfo {
    pub(crate) fn new(dev: usize, dev_off: u64) -> Self {
        Self {
            dev,
            dev_off,
            state: SegState::Free,
            seq: 0,
            seed: 0,
            order: 0,
            stream: 0,
            records: 0,
            puts: 0,
            put_bytes: 0,
            dead: 0,
            data_bytes: 0,
            data_end: 0,
            max_exptime: 0,
            all_expire: true,
            has_summary: false,
            tail_pending: false,
        }
    }

    /// Start a new life with `seq`.
    pub(crate) fn reset(&mut self, uuid: &[u8; 16], seq: u64, stream: u8) {
        self.seq = seq;
        self.order = seq;
        self.seed = segment_seed(uuid, seq);
        self.stream = stream;
        self.clear_counts();
        self.max_exptime = 0;
        self.all_expire = true;
        self.has_summary = false;
        self.tail_pending = false;
    }

    /// Zero what the segment's records added up to (a new life, or freed by reclaim).
    pub(crate) fn clear_counts(&mut self) {
        self.records = 0;
        self.puts = 0;
        self.put_bytes = 0;
        self.dead = 0;
        self.data_bytes = 0;
        self.data_end = 0;
    }

    /// Account one record of kind `kind` (see [`kind`]).
    pub(crate) fn add_record(&mut self, padded: u64, exptime: u32, kind: u8) {
        self.records += 1;
        self.data_bytes += padded;
        if kind == kind::PUT {
            self.puts += 1;
            self.put_bytes += padded;
        }
        if exptime == 0 {
            self.all_expire = false;
        }
        self.max_exptime = self.max_exptime.max(exptime);
    }

    /// Every record has expired by `now` (so the segment can go without reading values).
    pub(crate) fn all_expired(&self, now: u32) -> bool {
        self.records > 0 && self.all_expire && self.max_exptime != 0 && self.max_exptime <= now
    }

    /// Estimated dead bytes: the mean value record's padded size times the dead count
    /// (exact when the values are one size).
    pub(crate) fn dead_bytes(&self) -> u64 {
        if self.puts == 0 {
            0
        } else {
            self.put_bytes * u64::from(self.dead) / u64::from(self.puts)
        }
    }

    /// Every value record (at least one) is marked dead: freeing the segment drops nothing
    /// the user still indexes but its tombstones and markers (it decides about those).
    pub(crate) fn values_all_dead(&self) -> bool {
        self.puts > 0 && self.dead >= self.puts
    }

    /// At least a quarter of the value records (at least one) are marked dead: freeing the
    /// segment copies at most three records per record it frees (`free_ahead`).
    pub(crate) fn worth_freeing_ahead(&self) -> bool {
        self.puts > 0 && u64::from(self.dead) * 4 >= u64::from(self.puts)
    }

    /// The share of value records marked dead (0 with none).
    pub(crate) fn dead_share(&self) -> f64 {
        f64::from(self.dead) / f64::from(self.puts.max(1))
    }

    /// Count `n` more value records dead (never more than there are); false if every one
    /// was dead already.
    pub(crate) fn add_dead(&mut self, n: u32) -> bool {
        if self.dead >= self.puts {
            return false;
        }
        self.dead = (self.dead + n).min(self.puts);
        true
    }
}

/// Free lists per device plus round-robin allocation.
pub(crate) struct FreeLists {
    per_dev: Vec<VecDeque<u32>>,
    next_dev: usize,
}

impl FreeLists {
    pub(crate) fn new(devices: usize) -> Self {
        Self {
            per_dev: vec![VecDeque::new(); devices],
            next_dev: 0,
        }
    }

    pub(crate) fn push(&mut self, dev: usize, seg: u32) {
        if let Some(l) = self.per_dev.get_mut(dev) {
            l.push_back(seg);
        }
    }

    /// Free segments on devices not `out` of allocation.
    pub(crate) fn total(&self, out: &[bool]) -> usize {
        self.per_dev
            .iter()
            .enumerate()
            .filter(|(d, _)| !out.get(*d).copied().unwrap_or(true))
            .map(|(_, l)| l.len())
            .sum()
    }

    /// The next free segment of `dev`, left in place (a probe target).
    pub(crate) fn peek(&self, dev: usize) -> Option<u32> {
        self.per_dev.get(dev).and_then(|l| l.front().copied())
    }

    /// Take a free segment round-robin over devices not `out` (of allocation), preferring
    /// `tier` if given.
    pub(crate) fn pop(&mut self, out: &[bool], tiers: &[u8], tier: Option<u8>) -> Option<u32> {
        let n = self.per_dev.len();
        for pass in 0..2 {
            for i in 0..n {
                let d = (self.next_dev + i) % n;
                if out.get(d).copied().unwrap_or(true) {
                    continue;
                }
                let dev_tier = tiers.get(d).copied().unwrap_or(0);
                if pass == 0 && tier.is_some_and(|t| t != dev_tier) {
                    continue;
                }
                if let Some(s) = self.per_dev.get_mut(d).and_then(VecDeque::pop_front) {
                    self.next_dev = (d + 1) % n;
                    return Some(s);
                }
            }
            if tier.is_none() {
                break;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_tiers_and_failed_devices() {
        let mut f = FreeLists::new(3);
        for seg in 0..9u32 {
            f.push((seg / 3) as usize, seg);
        }
        let ok = [false, false, false];
        let tiers = [0u8, 1, 0];
        // Round-robin across devices.
        assert_eq!(f.pop(&ok, &tiers, None), Some(0));
        assert_eq!(f.pop(&ok, &tiers, None), Some(3));
        assert_eq!(f.pop(&ok, &tiers, None), Some(6));
        // Tier preference: only device 1 has tier 1.
        assert_eq!(f.pop(&ok, &tiers, Some(1)), Some(4));
        assert_eq!(f.pop(&ok, &tiers, Some(1)), Some(5));
        // Tier exhausted: fall back to any device.
        assert!(f.pop(&ok, &tiers, Some(1)).is_some());
        // Failed devices are skipped and not counted.
        let failed = [true, false, true];
        assert_eq!(f.total(&failed), 0);
        assert_eq!(f.pop(&failed, &tiers, None), None);
        assert_eq!(f.total(&ok), 3);
    }

    #[test]
    fn expiry_and_dead_accounting() {
        let mut s = SegInfo::new(0, 4096);
        s.reset(&[1; 16], 5, 0);
        s.add_record(100, 50, kind::PUT);
        s.add_record(100, 60, kind::PUT);
        assert!(s.all_expired(60) && !s.all_expired(59));
        s.add_record(100, 0, kind::PUT);
        assert!(
            !s.all_expired(u32::MAX),
            "a never-expiring record keeps the segment"
        );
        s.dead = 1;
        assert_eq!(s.dead_bytes(), 100);
        // Header-only records (tombstones, notes) do not water the estimate down.
        s.add_record(48, 0, kind::TOMBSTONE);
        s.add_record(48, 0, kind::TOMBSTONE);
        s.add_record(48, 0, kind::TOMBSTONE);
        assert_eq!((s.records, s.puts), (6, 3));
        assert!(s.add_dead(1) && s.add_dead(1));
        assert_eq!(s.dead_bytes(), 300, "all three values are dead");
        assert!(!s.add_dead(1), "no value record is left alive");
    }
}
