//! DELETE that needs no item (`Cache::delete`): a RAM item is removed (false if it was
//! dead); tag-matching flash slots whose record holds the key (one read each, see
//! `flash_tier::read` on blind views) are removed, marked dead and covered by a tombstone,
//! answering true without knowing whether that item had expired (memcached would say
//! `NOT_FOUND`). `delete_now` deletes through `update` instead, which reads a flash-resident
//! item and judges it.
use crate::engine::Core;
use crate::flash_tier::read::View;
use crate::ops::{Current, Op, Step};
use crate::ram::evict::OnLater;
use crate::ram::tier::Existing;
use crate::Error;

/// A delete that needs no item (a blind view: flash is read only to check tag-matching slots).
pub(crate) struct Delete;

impl Op for Delete {
    type Out = bool;
    const WRITE: bool = true;

    fn reads(&self) -> bool {
        false
    }

    fn reads_small(&self) -> bool {
        true
    }

    /// A RAM item is removed as usual (false if it was dead); flash slots whose tag matches
    /// are removed, marked dead and covered by a tombstone, and the answer is true without
    /// knowing whether the item had expired.
    fn phase2(
        &mut self,
        core: &Core,
        key: &[u8],
        hash: u64,
        view: &View,
        on_later: OnLater,
    ) -> Result<Step<bool>, Error> {
        let stall = on_later == OnLater::Stall;
        let now = core.now();
        let mut shard = core.slots.lock(hash);
        let (existing, had_flash) = match core.current(&mut shard, hash, key, view, now)? {
            Current::Retry => return Ok(Step::Retry),
            Current::Ram { pos, e, rec } => (Existing::Ram(pos, e), rec.header.flash_behind()),
            Current::Blind(locs) if !locs.is_empty() => (Existing::Blind(locs), true),
            Current::Small(_) => {
                core.remove_existing(&mut shard, hash, key, None, false, stall)?;
                return Ok(Step::Done(true));
            }
            _ => return Ok(Step::Done(false)),
        };
        core.remove_existing(&mut shard, hash, key, Some(existing), had_flash, stall)?;
        Ok(Step::Done(true))
    }
}
