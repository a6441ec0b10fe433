//! What `--verify` allows a GET to find once keys are deleted (`--delete-ratio`): a hit on a
//! key is a resurrection if a DELETE of it was answered before the GET was sent and no SET of
//! it could have taken effect after that DELETE.
//!
//! Requests on different connections overlap, so "after" is judged on one logical clock (an
//! atomic counter shared by every worker thread), stamped before a request is written and
//! after its reply is parsed. A SET counts as possibly after a DELETE when its reply was parsed
//! after the DELETE was stamped as sent, or when it is still unanswered. Stamps err on the
//! permissive side (a request is written after its send stamp, a reply read before its reply
//! stamp), so the check can miss a resurrection but never reports one that a linearizable
//! server could have given. Requests of every phase count, warm-up and load included: the
//! server saw them all.
//!
//! Built only when verifying with deletes: 24 bytes per key (24 MB per million keys). Touched
//! by every worker thread through atomics; nothing is locked.

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};

/// Per-key history of DELETEs and SETs on the shared logical clock.
pub struct KeyHistory {
    /// The logical clock; 0 is never a stamp.
    clock: AtomicU64,
    keys: Box<[KeyState]>,
}

#[derive(Default)]
struct KeyState {
    /// Largest send stamp of a DELETE of the key whose `DELETED`/`NOT_FOUND` reply was
    /// parsed; 0 if none.
    deleted: AtomicU64,
    /// Largest reply stamp of a SET of the key; 0 if none. Written before `set_pending` is
    /// decremented, so a reader that sees the decrement sees the stamp.
    set_done: AtomicU64,
    /// SETs of the key sent whose replies have not been parsed (never decremented for a
    /// connection lost with SETs in flight: they stay possible, which only permits more).
    set_pending: AtomicU32,
}

impl fmt::Debug for KeyHistory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyHistory")
            .field("keys", &self.keys.len())
            .field("clock", &self.clock.load(SeqCst))
            .finish()
    }
}

impl KeyHistory {
    /// An empty history for key indices `0..keys`.
    pub fn new(keys: u64) -> Self {
        Self {
            clock: AtomicU64::new(0),
            keys: (0..keys).map(|_| KeyState::default()).collect(),
        }
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, SeqCst) + 1
    }

    fn key(&self, key: u64) -> Option<&KeyState> {
        self.keys.get(usize::try_from(key).ok()?)
    }

    /// A SET of `key` is about to be written.
    pub fn set_sent(&self, key: u64) {
        if let Some(k) = self.key(key) {
            k.set_pending.fetch_add(1, SeqCst);
        }
    }

    /// The reply to a SET of `key` was parsed (whatever it said: a refused or failed SET
    /// may still have taken effect, and counting it only permits more).
    pub fn set_answered(&self, key: u64) {
        if let Some(k) = self.key(key) {
            k.set_done.fetch_max(self.tick(), SeqCst);
            // Saturating: a SET sent before the history existed cannot make it wrap.
            let _ = k
                .set_pending
                .fetch_update(SeqCst, SeqCst, |n| Some(n.saturating_sub(1)));
        }
    }

    /// A DELETE is about to be written; the stamp goes with it to [`Self::delete_answered`].
    pub fn delete_sent(&self) -> u64 {
        self.tick()
    }

    /// A DELETE of `key` stamped `sent` was answered `DELETED` or `NOT_FOUND`: from now on
    /// the key is absent unless a SET comes after `sent`.
    pub fn delete_answered(&self, key: u64, sent: u64) {
        if let Some(k) = self.key(key) {
            k.deleted.fetch_max(sent, SeqCst);
        }
    }

    /// A GET of `key` is about to be written; the guard goes with it to [`Self::hit_allowed`].
    pub fn get_sent(&self, key: u64) -> u64 {
        self.key(key).map_or(0, |k| k.deleted.load(SeqCst))
    }

    /// Whether a GET of `key` sent with `guard` may hit, now that its reply is parsed.
    pub fn hit_allowed(&self, key: u64, guard: u64) -> bool {
        if guard == 0 {
            return true;
        }
        let Some(k) = self.key(key) else {
            return true;
        };
        // Pending first: a SET answered between the two loads stored `set_done` before its
        // decrement, so it is seen by one load or the other.
        k.set_pending.load(SeqCst) > 0 || k.set_done.load(SeqCst) > guard
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deleted_key_may_hit_only_after_a_later_set() {
        let h = KeyHistory::new(4);
        // Never deleted: any hit is fine.
        let g = h.get_sent(1);
        assert!(h.hit_allowed(1, g));

        // SET answered, then DELETE answered, then GET: a hit is a resurrection.
        h.set_sent(1);
        h.set_answered(1);
        let d = h.delete_sent();
        h.delete_answered(1, d);
        let g = h.get_sent(1);
        assert!(!h.hit_allowed(1, g));
        // Other keys are unaffected.
        assert!(h.hit_allowed(2, h.get_sent(2)));

        // A SET sent after the DELETE and answered before the GET's reply allows the hit.
        h.set_sent(1);
        h.set_answered(1);
        assert!(h.hit_allowed(1, g));
    }

    #[test]
    fn overlapping_requests_are_given_the_benefit_of_the_doubt() {
        let h = KeyHistory::new(2);
        // A SET still in flight when the GET's reply arrives may have come after the DELETE.
        h.set_sent(0);
        let d = h.delete_sent();
        h.delete_answered(0, d);
        let g = h.get_sent(0);
        assert!(h.hit_allowed(0, g));
        // A SET sent before the DELETE but answered after it was sent may have been applied
        // after it.
        h.set_answered(0);
        assert!(h.hit_allowed(0, g));
        // A GET sent before the DELETE was answered carries no guard: it may have been
        // served first.
        let h = KeyHistory::new(2);
        let g = h.get_sent(0);
        let d = h.delete_sent();
        h.delete_answered(0, d);
        assert!(h.hit_allowed(0, g));
        // The latest answered DELETE is the one that counts.
        let d1 = h.delete_sent();
        h.set_sent(0);
        h.set_answered(0);
        let d2 = h.delete_sent();
        h.delete_answered(0, d2);
        h.delete_answered(0, d1);
        assert!(!h.hit_allowed(0, h.get_sent(0)));
        // Out-of-range keys are never judged.
        assert!(h.hit_allowed(9, 5));
        h.set_answered(9);
    }
}
