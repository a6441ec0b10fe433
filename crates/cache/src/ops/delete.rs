//! DELETE. `Cache::delete` never reads flash: a RAM item is removed (false if it was dead);
//! tag-matching flash slots are removed, marked dead and covered by a tombstone, answering
//! true without knowing whether that item had expired (memcached would say `NOT_FOUND`).
//! `delete_now` deletes through `update`, which reads a flash-resident item and judges it.
use crate::engine::{Cache, Core};
use crate::flash_tier::journal::take_owed;
use crate::flash_tier::read::View;
use crate::ops::{Current, Step};
use crate::ram::tier::Existing;
use crate::{Error, Update};

impl Cache {
    /// Synchronous delete; true when a live item was removed.
    pub fn delete_now(&self, key: &[u8]) -> bool {
        matches!(
            self.update_now(key, |cur| match cur {
                Some(_) => (Update::Delete, true),
                None => (Update::Keep, false),
            }),
            Ok((true, _))
        )
    }

    /// Delete without reading flash (deletes never touch flash): the slot goes, a
    /// tombstone is appended if a flash copy existed. True when an item was removed. Unlike
    /// a delete through [`KvStore::update`](crate::KvStore::update) (which shows the closure the item, so it reads a
    /// flash-resident one), an *expired* flash-resident item counts as removed (true): its
    /// expiry is on flash. A RAM item is judged exactly. Without flash, same as `delete_now`.
    pub async fn delete(&self, key: &[u8]) -> Result<bool, Error> {
        let core = &*self.core;
        let hash = core.slots.hash(key);
        let mut budget = crate::flash_tier::backpressure::Budget::default();
        loop {
            core.lower.await_room(&mut budget).await;
            let view = core.lower.view(core, key, hash, false).await;
            let stall = core.lower.may_stall(&budget);
            let _ = take_owed();
            let step = core.delete_with(key, hash, &view, stall);
            let owed = take_owed();
            match step {
                Ok(Step::Done(r)) => {
                    core.lower.settle(owed).await?;
                    return Ok(r);
                }
                Ok(Step::Retry) | Err(Error::FlashBusy) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

impl Core {
    /// Phase 2 of a delete that never reads flash (`view` blind): a RAM item is removed as
    /// usual (false if it was dead); flash slots whose tag matches are removed, marked dead
    /// and covered by a tombstone, and the answer is true without knowing whether the item
    /// had expired (memcached would answer `NOT_FOUND` for an expired one).
    pub(crate) fn delete_with(
        &self,
        key: &[u8],
        hash: u64,
        view: &View,
        stall: bool,
    ) -> Result<Step<bool>, Error> {
        let now = self.now();
        let mut shard = self.slots.lock(hash);
        let (existing, had_flash) = match self.current(&mut shard, hash, key, view, now)? {
            Current::Retry => return Ok(Step::Retry),
            Current::Ram { pos, e, rec } => (Existing::Ram(pos, e), rec.header.flash_behind()),
            Current::Blind(locs) if !locs.is_empty() => (Existing::Blind(locs), true),
            _ => return Ok(Step::Done(false)),
        };
        self.remove_existing(&mut shard, hash, key, Some(existing), had_flash, stall)?;
        Ok(Step::Done(true))
    }
}
