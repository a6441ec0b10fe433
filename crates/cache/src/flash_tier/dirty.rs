//! [`DirtyQueue`]: the versions waiting for write-back, oldest first, as `(dirty since ms, key
//! hash)`. The first version to turn a key dirty queues it (`demote`'s `home_for`); the
//! write-back pass (`writeback`) pops what is due and appends every RAM version of that hash
//! still dirty since then; an entry whose append met back-pressure goes back to the front.
//! An entry may name a version already written or gone (then the pass finds nothing).
//!
//! # Threads
//! Any writer pushes, the write-back thread (or `Cache::close`) pops; one mutex, a leaf.
use std::collections::VecDeque;

use parking_lot::Mutex;

use crate::clock::Clock;

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
                Some(hash)
            }
            _ => None,
        }
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
