//! [`Lower`]: the tier under RAM as the core holds it — none, or the flash tier. Whether
//! flash is configured is answered here, by one `match` per call, and nowhere else on the
//! request paths: the RAM tier sees it as a [`LowerTier`] (without flash, `NoLower`'s do-
//! nothing answers), the operations call the methods below (phase 1 reads nothing without
//! flash; a write has no room to await and nothing to settle). Static dispatch: the enum
//! holds the tier inline, so the GET path has no `dyn` call and no allocation for it.
//!
//! # Threads
//! Any caller; the locks are the flash tier's (see `flash_tier`).
use flashtier_flash::Record;

use crate::flash_tier::backpressure::Patience;
use crate::flash_tier::journal::Owed;
use crate::flash_tier::kv_record::{FlashItem, KvRecord};
use crate::flash_tier::promote::Promotion;
use crate::flash_tier::read::{Recheck, View};
use crate::flash_tier::tier::FlashTier;
use crate::flash_tier::writeback::WriteBack;
use crate::flash_tier::{RamAccess, STREAM};
use crate::ram::arena::RecordRef;
use crate::ram::evict::OnLater;
use crate::ram::index::{Entry, Pos, Shard};
use crate::ram::lower::{LowerTier, NewVersion, NoLower, Taken};
use crate::Error;

/// The tier under RAM (see the module docs).
// One per cache, inside the core's `Arc`: the tier is held inline on purpose (a `Box` would
// add a pointer chase to every flash call and save nothing).
#[allow(clippy::large_enum_variant)]
pub(crate) enum Lower {
    /// RAM only: evictions drop, removals record nothing.
    None,
    /// The flash tier.
    Flash(FlashTier),
}

impl LowerTier for Lower {
    fn takes_evictions(&self) -> bool {
        match self {
            Lower::None => NoLower.takes_evictions(),
            Lower::Flash(t) => t.takes_evictions(),
        }
    }

    fn take_evicted(&self, rec: &RecordRef<'_>, hash: u64, key: &[u8]) -> Taken {
        match self {
            Lower::None => NoLower.take_evicted(rec, hash, key),
            Lower::Flash(t) => t.take_evicted(rec, hash, key),
        }
    }

    fn deferred(&self) {
        match self {
            Lower::None => NoLower.deferred(),
            Lower::Flash(t) => t.deferred(),
        }
    }

    fn forget(&self, loc: u64) {
        match self {
            Lower::None => NoLower.forget(loc),
            Lower::Flash(t) => t.forget(loc),
        }
    }

    fn cover(&self, hash: u64, key: &[u8]) {
        match self {
            Lower::None => NoLower.cover(hash, key),
            Lower::Flash(t) => t.cover(hash, key),
        }
    }

    fn cover_or_stall(&self, hash: u64, key: &[u8], stall: bool) -> Option<bool> {
        match self {
            Lower::None => NoLower.cover_or_stall(hash, key, stall),
            Lower::Flash(t) => t.cover_or_stall(hash, key, stall),
        }
    }

    fn flush(&self, at: u32) {
        match self {
            Lower::None => NoLower.flush(at),
            Lower::Flash(t) => t.flush(at),
        }
    }

    fn home_for(&self, v: &NewVersion<'_>) -> u64 {
        match self {
            Lower::None => NoLower.home_for(v),
            Lower::Flash(t) => t.home_for(v),
        }
    }
}

impl Lower {
    /// The flash tier, if configured (its engine, stats, threads).
    pub(crate) fn flash(&self) -> Option<&FlashTier> {
        match self {
            Lower::None => None,
            Lower::Flash(t) => Some(t),
        }
    }

    /// Whether a flash slot has the key's tag, for a key the caller found not in RAM under
    /// the shard lock it holds (`Cache::read_may_wait`, `get_if_ready`).
    pub(crate) fn flash_slot(&self, shard: &Shard<'_>, hash: u64) -> bool {
        match self {
            Lower::None => false,
            Lower::Flash(_) => FlashTier::flash_slot(shard, hash),
        }
    }

    /// Phase 1 of an operation on `key` (`flash_tier::read`): without flash, nothing to read.
    pub(crate) async fn view<R: RamAccess>(
        &self,
        ram: &R,
        key: &[u8],
        hash: u64,
        read: bool,
    ) -> View {
        match self {
            Lower::None => View::default(),
            Lower::Flash(t) => t.view(ram, key, hash, read).await,
        }
    }

    /// Phase 2's re-check of what phase 1 read (shard locked, the key not in RAM); without
    /// flash there is no flash slot.
    pub(crate) fn recheck(
        &self,
        shard: &mut Shard<'_>,
        hash: u64,
        view: &View,
    ) -> Result<Recheck, Error> {
        match self {
            Lower::None => Ok(Recheck::Absent),
            Lower::Flash(t) => t.recheck(shard, hash, view),
        }
    }

    /// A GET hit on flash item `item` in slot `pos` (shard locked; `flash_tier::promote`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn flash_hit<R: RamAccess>(
        &self,
        ram: &R,
        shard: &mut Shard<'_>,
        pos: Pos,
        e: Entry,
        key: &[u8],
        item: FlashItem,
        now: u32,
    ) -> Option<Promotion> {
        match self {
            Lower::None => {
                shard.touch(pos);
                None
            }
            Lower::Flash(t) => t.flash_hit(ram, shard, pos, e, key, item, now),
        }
    }

    /// Finish a promotion the GET could not do under its lock (no lock held).
    pub(crate) fn promote_later<R: RamAccess>(&self, ram: &R, key: &[u8], hash: u64, p: Promotion) {
        if let Lower::Flash(t) = self {
            t.promote_later(ram, key, hash, p);
        }
    }

    /// A copy promoted from flash was read in RAM for the first time (`payback`).
    pub(crate) fn promoted_copy_read(&self) {
        if let Lower::Flash(t) = self {
            t.payback.read();
        }
    }

    /// Before a write's phase 2: await flash room within the request's budgets (`p`).
    pub(crate) async fn await_room(&self, p: &mut Patience) {
        if let Lower::Flash(t) = self {
            t.await_room(p).await;
        }
    }

    /// What a write's evictions do with an item flash cannot take now (see
    /// `FlashTier::on_later`); without flash nothing is ever refused so: keep or drop.
    pub(crate) fn on_later(&self, p: &Patience) -> OnLater {
        match self {
            Lower::None => OnLater::KeepOrDrop,
            Lower::Flash(t) => t.on_later(p),
        }
    }

    /// A write's phase 2 ended in `Error::FlashBusy` (see `FlashTier::busy`).
    pub(crate) fn busy(&self, p: &mut Patience, on_later: OnLater) {
        if let Lower::Flash(t) = self {
            t.busy(p, on_later);
        }
    }

    /// Await what a write's phase 2 owes before its reply (`flash_tier::journal`); nothing
    /// without flash.
    pub(crate) async fn settle(&self, owed: Owed) -> Result<(), Error> {
        match self {
            Lower::None => Ok(()),
            Lower::Flash(t) => t.settle(owed).await,
        }
    }

    /// Every runtime knob with its value; none without flash.
    pub(crate) fn knobs(&self) -> Vec<(String, String)> {
        match self {
            Lower::None => Vec::new(),
            Lower::Flash(t) => crate::knobs::list(t.tiering(), t.engine()),
        }
    }

    /// Change one runtime knob (`knobs`); without flash there are none.
    pub(crate) fn set_knob(&self, name: &str, value: &str) -> Result<(), Error> {
        match self {
            Lower::None => Err(Error::Knob(
                "no flash tier configured: there are no knobs to change".into(),
            )),
            Lower::Flash(t) => crate::knobs::set(t.tiering(), t.engine(), name, value),
        }
    }

    /// Read the flash records at packed `locs` for a dump (`FlashTier::read_batch`).
    pub(crate) async fn read_batch(&self, locs: &[(u64, u8)], each: impl FnMut(&Record, u8)) {
        if let Lower::Flash(t) = self {
            t.read_batch(locs, each).await;
        }
    }

    /// A clean shutdown (idempotent): write back every dirty version and every RAM version
    /// without a flash copy, record the CAS counter, flush flash and stop its threads.
    pub(crate) fn close<R: RamAccess>(&self, ram: &R) -> Result<(), Error> {
        match self {
            Lower::None => Ok(()),
            Lower::Flash(t) if !t.begin_close() => Ok(()),
            Lower::Flash(t) => {
                WriteBack::new(t, ram).all_at_close();
                let cas = ram.meta().last_cas();
                t.append(STREAM, &KvRecord::CasCheckpoint { cas });
                t.engine().close().map_err(|e| Error::Flash(e.to_string()))
            }
        }
    }
}
