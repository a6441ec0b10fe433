//! The seam between the RAM tier and the flash tier.
//!
//! When the RAM arena evicts a live item that S3-FIFO does not keep in RAM, `evict` asks
//! [`Inner::offer`](crate::engine) what to do:
//! - no flash configured: [`Demotion::Drop`], the item is evicted (the RAM tier's behaviour);
//! - the record has a flash home (its write-through copy, record word 4): [`Demotion::Moved`]
//!   with that location, and the evictor rewrites the index slot in place, under the same
//!   shard lock, to the flash tier bit and the location — readers never see the item missing,
//!   and no flash write happens;
//! - no home (the write-through was skipped by back-pressure or a device fault, its chunk
//!   write failed, or reclaim dropped the flash copy while the RAM copy was hot): the record
//!   is appended now; if that fails too, `Drop`.
//!
//! # Threads
//! Runs on whichever thread evicts (a writer needing a segment, or the sweeper), holding the
//! arena's `AllocState` lock and the key's shard lock; the flash engine's lock is a leaf.
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
        let Some(ft) = &self.ft else {
            return Demotion::Drop;
        };
        let loc = match h.home_loc() {
            Some(p) => Location::unpack(p),
            None => {
                let value = rec.value();
                let put = Put::of(hash, key, &value, h);
                match ft.append(STREAM, &KvRecord::Put(put)) {
                    Some(loc) => loc,
                    None => return Demotion::Drop,
                }
            }
        };
        Counters::add(&ft.counters.demoted, 1);
        Demotion::Moved { loc }
    }
}
