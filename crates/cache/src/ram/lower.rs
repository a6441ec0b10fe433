//! [`LowerTier`]: everything the RAM tier hands to the tier below it — an evicted live item,
//! a lower-tier copy that stopped being any key's, a key whose older versions below must stay
//! gone, a `flush_all`, and where a new version's lower copy lives (its home word). The flash
//! tier implements it (`flash_tier::demote`); without flash, [`NoLower`] does nothing (the
//! core's `Lower::None` answers with it), so the RAM tier and the removal paths never ask
//! whether flash is configured. The other way, [`CopyUp`] is how RAM answers a copy of a
//! lower item into RAM (a promotion, `RamTier::copy_up_now`/`copy_up_later`). This is RAM's
//! whole seam with the tier below, as foyer's `Pipe` is its memory cache's.
//!
//! # Threads
//! Called by whichever thread writes, evicts or removes, holding the key's shard lock (and
//! `AllocState` when evicting); an implementation's own locks are leaves below them.
use crate::ram::arena::RecordRef;
use crate::ram::index::Entry;
use crate::ram::record::Header;

/// A version about to be published in RAM (see [`LowerTier::home_for`]).
pub(crate) struct NewVersion<'a> {
    pub hash: u64,
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub header: &'a Header,
    /// Some version of the key may be in the lower tier.
    pub older_below: bool,
    /// The replaced version's dirty-since time, if it waited for write-back.
    pub dirty_since: Option<u64>,
    /// The replaced version's wait for the small tier's write-back, if it waited
    /// (`small_tier::writeback`).
    pub small_since: Option<u64>,
}

/// What the tier below does with an item RAM evicts.
pub(crate) enum Taken {
    /// Kept there: the index slot to rewrite in place.
    Slot(Entry),
    /// Not now (the tier is under back-pressure and never waits under a lock): keep the item
    /// in RAM if it can be copied, else drop it.
    Later,
    /// Not kept: drop it.
    Drop,
    /// Kept below without an index slot (the small-object tier): remove the slot; not an
    /// eviction.
    Below,
}

/// How a copy of an item from the tier below into RAM went (`RamTier::copy_up_now`,
/// `RamTier::copy_up_later`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CopyUp {
    /// Published in RAM over the lower slot.
    Done,
    /// No room in the small log's open segment (only at once, under the lock): nothing done.
    NoRoom,
    /// Given up: space could not be had or written, or the lower slot changed meanwhile.
    Abandoned,
}

/// The tier under RAM. Every method is best effort: it never fails a request.
pub(crate) trait LowerTier: Sync {
    /// True when evicted items go somewhere (then eviction never counts as losing data, and
    /// memcached's `-M` does not stop it).
    fn takes_evictions(&self) -> bool;
    /// RAM evicts the live record `rec` of `key`: the index slot it keeps in this tier, a
    /// request to keep it in RAM for now, or a drop. Never waits.
    fn take_evicted(&self, rec: &RecordRef<'_>, hash: u64, key: &[u8]) -> Taken;
    /// RAM kept an item this tier asked for [`Taken::Later`] (counted).
    fn deferred(&self);
    /// The copy at packed location `loc` is no longer any key's.
    fn forget(&self, loc: u64);
    /// Every older version of the key below must stay gone (delete, or death before write).
    fn cover(&self, hash: u64, key: &[u8]);
    /// A dead item with a copy here was removed: if it died by `flush_all` rather than by
    /// expiry (`exptime` not passed at `now`), [`Self::cover`] it, or a restart could bring
    /// it back (a later delayed `flush_all` re-arms the flush time; recovery cannot see
    /// store times).
    fn cover_if_flushed(&self, hash: u64, exptime: u32, now: u32) {
        let expired = exptime != 0 && exptime <= now;
        if !expired {
            self.cover(hash, &[]);
        }
    }
    /// [`Self::cover`], except that with `stall`, when this tier cannot take the cover now
    /// (back-pressure), nothing is done and `None` is returned: the caller changes nothing,
    /// awaits room holding no lock and tries again. Otherwise `Some(covered)`: true when the
    /// older versions below are covered for good (the cover was taken, or journaled to be
    /// taken later), false when a restart could still find one.
    fn cover_or_stall(&self, hash: u64, key: &[u8], stall: bool) -> Option<bool>;
    /// A `flush_all`: immediate (`at` = 0) or delayed to unix time `at`.
    fn flush(&self, at: u32);
    /// The home word of version `v` (its lower copy, a write-back mark, or none).
    fn home_for(&self, v: &NewVersion<'_>) -> u64;
}

/// No tier below RAM: evicted items are dropped, nothing is recorded.
pub(crate) struct NoLower;

impl LowerTier for NoLower {
    fn takes_evictions(&self) -> bool {
        false
    }
    fn take_evicted(&self, _: &RecordRef<'_>, _: u64, _: &[u8]) -> Taken {
        Taken::Drop
    }
    fn deferred(&self) {}
    fn forget(&self, _: u64) {}
    fn cover(&self, _: u64, _: &[u8]) {}
    fn cover_or_stall(&self, _: u64, _: &[u8], _: bool) -> Option<bool> {
        Some(true)
    }
    fn flush(&self, _: u32) {}
    fn home_for(&self, _: &NewVersion<'_>) -> u64 {
        0
    }
}
