//! The seam where a RAM eviction becomes a flash slot instead of a drop. When the arena evicts
//! a live item S3-FIFO does not keep, `evict` asks [`Inner::offer`]: without flash the item is
//! dropped; with a flash home (its appended copy) the evictor rewrites the index slot in
//! place, under the same shard lock, to the flash tier and that location, so readers never see
//! the item missing and nothing is written; without a home (the append was skipped or failed,
//! or reclaim dropped the copy) the record is appended now, and dropped if that fails too.
//!
//! # Threads
//! Whichever thread evicts (a writer needing a segment, or the sweeper), holding `AllocState`
//! and the key's shard lock; the flash engine's lock is a leaf.
use flashtier_flash::Location;

use crate::engine::Inner;
use crate::flash_tier::kv_record::{KvRecord, Put};
use crate::flash_tier::STREAM;
use crate::ram::arena::RecordRef;
use crate::stats::Counters;

/// What to do with a live item the RAM tier is evicting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Demotion {
    /// Evict it: remove the index slot.
    Drop,
    /// Keep it as a flash slot at `loc`.
    Moved { loc: Location },
}

impl Inner {
    /// Decide the fate of the evicted live record `rec` of `key`.
    pub(crate) fn offer(&self, rec: &RecordRef<'_>, hash: u64, key: &[u8]) -> Demotion {
        let h = &rec.header;
        let Some(tier) = &self.flash_tier else {
            return Demotion::Drop;
        };
        let loc = match h.home_loc() {
            Some(p) => Location::unpack(p),
            None => {
                let value = rec.value();
                let put = Put::of(hash, key, &value, h);
                match tier.append(STREAM, &KvRecord::Put(put)) {
                    Some(loc) => loc,
                    None => return Demotion::Drop,
                }
            }
        };
        Counters::add(&tier.counters.demoted, 1);
        Demotion::Moved { loc }
    }
}
