//! The core as the RAM tier's [`LowerTier`]: the tier below RAM is two tiers when the small
//! tier is on. An evicted record the small tier takes leaves the index ([`Taken::Below`]);
//! everything else goes to `Lower` (the flash log, or nothing) exactly as without it. A new
//! version the small tier will keep gets no flash-log home (no write-through, no flash
//! write-back mark), so small items cost the log nothing while they are in RAM; it waits for
//! the small tier's own write-back instead (`writeback`), unless an older version is on
//! flash (then the tier never takes it: that version would shadow its copy after a restart).
//!
//! # Threads
//! As `LowerTier`: the caller holds the key's shard lock (and `AllocState` when evicting).
use crate::engine::Core;
use crate::ram::arena::RecordRef;
use crate::ram::lower::{LowerTier, NewVersion, Taken};
use crate::ram::record::HOME_OLDER;

impl LowerTier for Core {
    fn takes_evictions(&self) -> bool {
        self.small.is_on() || self.lower.takes_evictions()
    }

    fn take_evicted(&self, rec: &RecordRef<'_>, hash: u64, key: &[u8]) -> Taken {
        if self.small.take(rec, key) {
            return Taken::Below;
        }
        self.lower.take_evicted(rec, hash, key)
    }

    fn deferred(&self) {
        self.lower.deferred();
    }

    fn forget(&self, loc: u64) {
        self.lower.forget(loc);
    }

    fn cover(&self, hash: u64, key: &[u8]) {
        self.lower.cover(hash, key);
    }

    fn cover_or_stall(&self, hash: u64, key: &[u8], stall: bool) -> Option<bool> {
        self.lower.cover_or_stall(hash, key, stall)
    }

    fn flush(&self, at: u32) {
        self.lower.flush(at);
    }

    fn home_for(&self, v: &NewVersion<'_>) -> u64 {
        if self.small.keeps(v.value.len()) {
            if v.older_below {
                return HOME_OLDER;
            }
            return self.small.wait_word(&self.cfg.clock, v.hash, v.small_since);
        }
        self.lower.home_for(v)
    }
}
