//! [`DirtyQueue`]: the versions waiting for write-back, oldest first, as `(dirty since ms, key
//! hash)`. The first version to turn a key dirty queues it (`demote`'s `home_for`); the
//! write-back pass (`writeback`) pops what is due and appends every RAM version of that hash
//! still dirty since then; an entry whose append met back-pressure goes back to the front.
//! An entry may name a version already written or gone (then the pass finds nothing).
//!
//! The queue gives back its memory after a burst: a `VecDeque` keeps its peak capacity (16
//! bytes per version dirty at once, ~1–2 MiB after a fill at ~24k SETs/s with the 2 s window),
//! which showed up as RAM per flash item (docs/eviction.md, "RAM per flash item"). A pop that
//! leaves it under a quarter full halves its capacity, down to [`MIN_CAPACITY`] entries.
//!
//! # Threads
//! Any writer pushes, the write-back thread (or `Cache::close`) pops; one mutex, a leaf.
use std::collections::VecDeque;

use parking_lot::Mutex;

use crate::clock::Clock;

/// Capacity (entries) the queue keeps however empty it gets: 64 KiB.
pub(crate) const MIN_CAPACITY: usize = 4096;

/// Versions waiting for write-back, oldest first: `(dirty since ms, key hash)`.
#[derive(Debug, Default)]
pub(crate) struct DirtyQueue(Mutex<VecDeque<(u64, u64)>>);

impl DirtyQueue {
    /// Queue `hash` as dirty from now (the clock's unix ms); returns now.
    pub(crate) fn push_now(&self, clock: &Clock, hash: u64) -> u64 {
        let now = clock.now_ms();
        self.push(now, hash);
        now
    }

    pub(crate) fn push(&self, since: u64, hash: u64) {
        self.0.lock().push_back((since, hash));
    }

    /// Put an entry back at the front (its append met back-pressure: retried first).
    pub(crate) fn push_front(&self, since: u64, hash: u64) {
        self.0.lock().push_front((since, hash));
    }

    pub(crate) fn pop_due(&self, cutoff: u64) -> Option<u64> {
        let mut q = self.0.lock();
        match q.front() {
            Some(&(since, hash)) if since <= cutoff => {
                q.pop_front();
                if q.capacity() > MIN_CAPACITY && q.len() < q.capacity() / 4 {
                    let keep = (q.capacity() / 2).max(MIN_CAPACITY);
                    q.shrink_to(keep);
                }
                Some(hash)
            }
            _ => None,
        }
    }

    /// Bytes the queue's buffer holds (its capacity, not its length).
    pub(crate) fn memory_bytes(&self) -> usize {
        self.0.lock().capacity() * std::mem::size_of::<(u64, u64)>()
    }

    /// Entries queued (some may name versions already written or gone).
    pub(crate) fn len(&self) -> usize {
        self.0.lock().len()
    }

    /// How long the oldest queued entry has been dirty beyond `window_ms`, at `now_ms`: 0
    /// while write-back keeps up (the entry may name a version already written or gone, so
    /// this bounds the true lag from above).
    pub(crate) fn lag_ms(&self, now_ms: u64, window_ms: u64) -> u64 {
        self.0
            .lock()
            .front()
            .map_or(0, |&(since, _)| now_ms.saturating_sub(since + window_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_gives_back_its_memory_after_a_burst() {
        let q = DirtyQueue::default();
        let burst = 100_000u64;
        for i in 0..burst {
            q.push(i, i);
        }
        let peak = q.memory_bytes();
        assert!(peak >= burst as usize * 16, "{peak}");
        // Drained in order, oldest first, nothing lost.
        for i in 0..burst {
            assert_eq!(q.pop_due(u64::MAX), Some(i));
            // Never below what it holds.
            assert!(q.memory_bytes() >= q.len() * 16);
        }
        assert_eq!(q.pop_due(u64::MAX), None);
        let after = q.memory_bytes();
        assert!(after <= MIN_CAPACITY * 16 * 2, "{after} of {peak}");
        // A half-drained queue keeps what it needs, in order.
        for i in 0..50_000u64 {
            q.push(i, i);
        }
        for i in 0..40_000u64 {
            assert_eq!(q.pop_due(u64::MAX), Some(i));
        }
        q.push_front(7, 7);
        assert_eq!(q.pop_due(u64::MAX), Some(7));
        for i in 40_000..50_000u64 {
            assert_eq!(q.pop_due(u64::MAX), Some(i));
        }
        assert_eq!(q.len(), 0);
    }
}
