//! [`Blocks`]: the cached blocks — the [`Index`] behind its one mutex, and the budget at which
//! reclaim may age read counts. Owned by `BlockIo` and shared with the reclaim handler.
//!
//! Invariant: every change to the index happens under the mutex, with the flash append it
//! describes when there is one (`Index::stamp`), so versions and the clean watermark are exact.
//! Fields are private; simple questions have methods here, and a caller that must do several
//! steps in one critical section (append, reclaim decisions, writeback picks) passes a closure
//! to [`Blocks::locked`].
//!
//! Lock order: the index mutex is taken after stripes, the switch and flush-job mutexes, and
//! before the writeback holds and `last_error`. Threads: request tasks, the writeback task,
//! admin requests and the engine's reclaimer.
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::index::{Entry, Index};

/// The fill line is `capacity / FILL_SLACK` blocks below the capacity.
const FILL_SLACK: u64 = 32;

/// The index of cached blocks and the reclaim aging budget.
#[derive(Debug)]
pub(crate) struct Blocks {
    index: Mutex<Index>,
    /// How many read counts reclaim may still lower: one per block the cache appended (at
    /// most `capacity_blocks` saved up), so counts age with the cache's own writes, not with
    /// how often reclaim passes (which rises with the share of records it must keep).
    age_budget: AtomicU64,
    /// Below this many cached blocks reclaim moves clean blocks instead of dropping them
    /// (see [`Blocks::fill_line`]); 0 until open sets the capacity.
    fill_line: AtomicU64,
    /// Fill moves reclaim may still make: `reclaim_fill_moves` per block the cache appended
    /// (at most `capacity_blocks` saved up), so moves cost at most that many flash writes
    /// per client write.
    fill_budget: AtomicU64,
    /// Appends left that grant no fill moves: a writer waited for a free segment, so
    /// reclaim's optional copies yield to it (see [`Blocks::writer_waited`]).
    fill_hold: AtomicU64,
    /// During a fill hold, fill moves are still granted below this many cached blocks
    /// (`reclaim_fill_floor_pct` of the capacity, set at the wait).
    fill_floor: AtomicU64,
    /// Appends left in which reclaim's last drop of a clean block counts as recent: the
    /// flash is full in effect (of cached and dead records) though the cache may be below
    /// its fill line, so the door is shut (see [`Blocks::door_shut`]).
    drop_window: AtomicU64,
    /// Read misses the door still lets through after a working-set shift: the new hot set
    /// has no history yet.
    door_open: AtomicU64,
    /// Woken when reclaim frees flash segments: writers waiting for space retry then.
    space: Notify,
}

impl Default for Blocks {
    fn default() -> Self {
        Blocks {
            index: Mutex::new(Index::new(0)),
            age_budget: AtomicU64::new(0),
            fill_line: AtomicU64::new(0),
            fill_budget: AtomicU64::new(0),
            fill_hold: AtomicU64::new(0),
            fill_floor: AtomicU64::new(0),
            drop_window: AtomicU64::new(0),
            door_open: AtomicU64::new(0),
            space: Notify::new(),
        }
    }
}

impl Blocks {
    /// Run `f` on the index under its mutex.
    pub(crate) fn locked<R>(&self, f: impl FnOnce(&mut Index) -> R) -> R {
        f(&mut self.index.lock())
    }

    /// Dirty blocks now.
    pub(crate) fn dirty(&self) -> u64 {
        self.index.lock().dirty() as u64
    }

    /// Look `lba` up, counting the access.
    pub(crate) fn lookup(&self, lba: u64) -> Option<Entry> {
        self.index.lock().lookup(lba)
    }

    /// Look every block of `first..=last` up, counting the accesses; `sequential`: the read
    /// continues a sequential stream (not shown to the shift detector). Also returns whether
    /// the working set moved (`Index::saw_read`): then every count was cleared and reclaim
    /// may lower counts for a lap's worth of records at once.
    pub(crate) fn lookup_all(
        &self,
        first: u64,
        last: u64,
        sequential: bool,
    ) -> (Vec<(u64, Option<Entry>)>, bool) {
        let mut index = self.index.lock();
        let mut shifted = false;
        let found = (first..=last)
            .map(|l| {
                let e = index.lookup(l);
                if !sequential {
                    shifted |= index.saw_read(e.is_none());
                }
                (l, e)
            })
            .collect();
        if shifted {
            let lap = self.fill_line.load(Ordering::Relaxed);
            self.age_budget.store(lap, Ordering::Relaxed);
            self.door_open.store(lap, Ordering::Relaxed);
        }
        (found, shifted)
    }

    /// Whether `lba` is cached (not an access).
    pub(crate) fn contains(&self, lba: u64) -> bool {
        self.index.lock().contains(lba)
    }

    /// Which blocks of `first..=last` are cached (not an access).
    pub(crate) fn cached(&self, first: u64, last: u64) -> Vec<bool> {
        let index = self.index.lock();
        (first..=last).map(|l| index.contains(l)).collect()
    }

    /// Whether any block of `first..=last` is dirty.
    pub(crate) fn any_dirty(&self, first: u64, last: u64) -> bool {
        let index = self.index.lock();
        (first..=last).any(|l| index.get(l).is_some_and(|e| e.dirty))
    }

    /// Drop the cached copies of `lbas`, calling `dead` with each dropped record's location
    /// under the mutex. Callers hold the blocks' stripe locks and saw none of them dirty.
    pub(crate) fn uncache(&self, lbas: impl Iterator<Item = u64>, mut dead: impl FnMut(u64)) {
        let mut index = self.index.lock();
        for lba in lbas {
            if let Some(e) = index.get(lba) {
                index.remove_at(lba, e.loc);
                dead(e.loc);
            }
        }
    }

    /// Reclaim dropped a clean block (not read since its count ran out, no fill move left):
    /// for the next fill line's worth of appends the door may shut.
    pub(crate) fn dropped_clean(&self) {
        self.drop_window
            .store(self.fill_line.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// Whether the door refuses a read miss of a block the sketch never saw before, with
    /// `cached` blocks cached (below the fill line) of `capacity`: the cache holds at least
    /// `pct` % of its capacity and reclaim dropped a clean block lately, so an admission of
    /// a block read once costs a block that was cached (a log's appends evict in the order
    /// reclaim meets them, not the newcomer first: it is TinyLFU's doorkeeper, or S3-FIFO's
    /// small queue, before the flash). After a working-set shift the door stays open for a
    /// fill line's worth of such misses.
    pub(crate) fn door_shut(&self, cached: u64, capacity: u64, pct: u64) -> bool {
        if pct == 0
            || cached * 100 < capacity * pct
            || self.drop_window.load(Ordering::Relaxed) == 0
        {
            return false;
        }
        self.door_open
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| t.checked_sub(1))
            .is_err()
    }

    /// Reclaim freed flash segments: wake every writer waiting in [`Blocks::space_wait`].
    pub(crate) fn space_freed(&self) {
        self.space.notify_waiters();
    }

    /// Wait until reclaim frees a flash segment, at most `max` (a free that comes between
    /// the caller's failed append and this call is seen at the timeout).
    pub(crate) async fn space_wait(&self, max: std::time::Duration) {
        let _ = tokio::time::timeout(max, self.space.notified()).await;
    }

    /// Take a fresh version.
    pub(crate) fn take_version(&self) -> u64 {
        self.index.lock().take_version()
    }

    /// The next version to be handed out (not taken).
    pub(crate) fn next_version(&self) -> u64 {
        self.index.lock().next_version()
    }

    /// Dirty blocks at or below version `v`.
    pub(crate) fn dirty_at_or_below(&self, v: u64) -> u64 {
        self.index.lock().dirty_at_or_below(v) as u64
    }

    /// Every clean block as (LBA, packed location), and a fresh version taken in the same
    /// critical section (a shutdown snapshot).
    pub(crate) fn clean_snapshot(&self) -> (Vec<(u64, u64)>, u64) {
        let mut index = self.index.lock();
        let e = index.clean_locations().collect();
        (e, index.take_version())
    }

    /// (dirty blocks, cached blocks, clean watermark, index RAM bytes, sketch RAM bytes) at
    /// one instant.
    pub(crate) fn summary(&self) -> (u64, u64, u64, usize, usize) {
        let index = self.index.lock();
        (
            index.dirty() as u64,
            index.len() as u64,
            index.clean_watermark(),
            index.ram_bytes(),
            index.sketch_bytes(),
        )
    }

    /// The cache holds at most `capacity` blocks: set the fill line 1/32 below it (97 %).
    pub(crate) fn set_capacity(&self, capacity: u64) {
        self.fill_line
            .store(capacity - capacity / FILL_SLACK, Ordering::Relaxed);
    }

    /// Below this many cached blocks a clean block reclaim finds is moved, not dropped: a
    /// full cache stays full under writes, and the capacity cap (CLOCK eviction at
    /// `capacity_blocks`) still keeps dead space on flash for reclaim to free.
    pub(crate) fn fill_line(&self) -> u64 {
        self.fill_line.load(Ordering::Relaxed)
    }

    /// One block appended by the cache, which now holds `cached` blocks: reclaim may lower
    /// one more read count (at most `cap` saved up) and make `moves` more fill moves (at
    /// most `cap` saved up) — unless a fill hold lasts and the cache is at or above the
    /// fill floor; the append then uses one of the hold's appends up instead. Returns
    /// whether fill moves the cache had room for were withheld.
    pub(crate) fn aged_one(&self, cap: u64, moves: u64, cached: u64) -> bool {
        let _ = self
            .drop_window
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| t.checked_sub(1));
        let _ = self
            .age_budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                (t < cap).then_some(t + 1)
            });
        let held = self
            .fill_hold
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| h.checked_sub(1))
            .is_ok();
        if held && cached >= self.fill_floor.load(Ordering::Relaxed) {
            return moves > 0 && cached < self.fill_line();
        }
        let _ = self
            .fill_budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                (t < cap).then_some((t + moves).min(cap))
            });
        false
    }

    /// A writer found no free flash segment. Fill moves are optional copies into the very
    /// segments it waits for, so for the next fill slack of appends (`capacity / FILL_SLACK`
    /// blocks, renewed by every wait) reclaim makes none while the cache holds at least
    /// `floor_pct` % of `capacity` blocks, and a hold that starts gives the budget saved up
    /// so far up (no burst of moves when it ends). Under sustained writes the cache settles
    /// between that floor and its fill line, where reclaim frees more per victim, instead
    /// of copying clean blocks nobody read while writes queue. Returns whether a hold
    /// started.
    pub(crate) fn writer_waited(&self, capacity: u64, floor_pct: u64) -> bool {
        let floor = capacity * floor_pct / 100;
        if floor >= self.fill_line() {
            // Fill moves stop at the fill line anyway: nothing to yield.
            return false;
        }
        let hold = (capacity / FILL_SLACK).max(1);
        self.fill_floor.store(floor, Ordering::Relaxed);
        let started = self.fill_hold.fetch_max(hold, Ordering::Relaxed) == 0;
        if started {
            self.fill_budget.store(0, Ordering::Relaxed);
        }
        started
    }

    /// Spend one fill move, if the cache is below its fill line and the budget allows.
    pub(crate) fn take_fill(&self, cached: u64) -> bool {
        cached < self.fill_line()
            && self
                .fill_budget
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| t.checked_sub(1))
                .is_ok()
    }

    /// Spend one lowering of a read count, if any is left.
    pub(crate) fn take_age(&self) -> bool {
        self.age_budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| t.checked_sub(1))
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn age_budget_is_one_per_append_up_to_the_cap() {
        let b = Blocks::default();
        for _ in 0..10 {
            b.aged_one(4, 0, 0);
        }
        assert!((0..4).all(|_| b.take_age()));
        assert!(!b.take_age());
    }

    #[test]
    fn the_door_shuts_above_its_share_while_reclaim_drops() {
        let b = Blocks::default();
        b.set_capacity(64); // fill line 62
        assert!(
            !b.door_shut(60, 64, 80),
            "no drop yet: a cache still filling"
        );
        b.dropped_clean();
        assert!(!b.door_shut(51, 64, 80), "below 80 % of capacity");
        assert!(b.door_shut(52, 64, 80));
        assert!(!b.door_shut(60, 64, 0), "0 turns it off");
        // The drop counts as recent for a fill line's worth of appends.
        for _ in 0..61 {
            b.aged_one(64, 0, 60);
        }
        assert!(b.door_shut(60, 64, 80));
        b.aged_one(64, 0, 60);
        assert!(!b.door_shut(60, 64, 80), "no drop for 62 appends");
        // After a working-set shift it lets a fill line's worth of misses through.
        b.dropped_clean();
        b.door_open.store(2, Ordering::Relaxed);
        assert!(!b.door_shut(60, 64, 80) && !b.door_shut(60, 64, 80));
        assert!(b.door_shut(60, 64, 80));
    }

    #[test]
    fn a_writer_waiting_holds_fill_moves_for_the_fill_slack() {
        let b = Blocks::default();
        b.set_capacity(64); // fill line 62; a hold is 2 appends; floor 50 % = 32 blocks
        for _ in 0..3 {
            assert!(!b.aged_one(64, 1, 40));
        }
        assert!(b.writer_waited(64, 50), "the first wait starts a hold");
        assert!(!b.writer_waited(64, 50), "a second one only renews it");
        assert!(!b.take_fill(40), "the saved budget was given up");
        assert!(
            b.aged_one(64, 1, 40) && b.aged_one(64, 1, 40),
            "two appends withheld"
        );
        assert!(!b.take_fill(40));
        assert!(!b.aged_one(64, 1, 40), "the hold is over");
        assert!(b.take_fill(40));
        assert!(!b.take_fill(40));
    }

    #[test]
    fn below_the_floor_a_hold_withholds_nothing() {
        let b = Blocks::default();
        b.set_capacity(64);
        assert!(b.writer_waited(64, 50));
        assert!(!b.aged_one(64, 1, 31), "below the floor: granted");
        assert!(b.aged_one(64, 1, 32), "at the floor: withheld");
        assert!(b.take_fill(31));
        assert!(!b.take_fill(31));
    }

    #[test]
    fn a_floor_at_the_fill_line_never_holds() {
        let b = Blocks::default();
        b.set_capacity(64); // fill line 62
        assert!(!b.writer_waited(64, 97));
        assert!(!b.aged_one(64, 1, 40));
        assert!(b.take_fill(40));
    }

    #[tokio::test]
    async fn a_freed_segment_wakes_a_waiting_writer() {
        let b = std::sync::Arc::new(Blocks::default());
        let waiter = {
            let b = std::sync::Arc::clone(&b);
            tokio::spawn(async move {
                let t = std::time::Instant::now();
                b.space_wait(std::time::Duration::from_secs(30)).await;
                t.elapsed()
            })
        };
        // Until the waiter has registered a wake is not seen: repeat it.
        while !waiter.is_finished() {
            b.space_freed();
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        let waited = waiter.await.expect("waiter");
        assert!(waited < std::time::Duration::from_secs(10), "{waited:?}");
    }

    #[test]
    fn uncache_drops_cached_blocks_and_reports_their_records() {
        let b = Blocks::default();
        b.locked(|ix| {
            for lba in [1u64, 3] {
                let v = ix.take_version();
                ix.put(lba, 100 + lba, v, false);
            }
        });
        let mut dead = Vec::new();
        b.uncache(1..=3, |l| dead.push(l));
        assert_eq!(dead, [101, 103]);
        assert_eq!(b.cached(1, 3), [false, false, false]);
    }
}
