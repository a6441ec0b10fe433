//! GET. Phase 2 finds the key's RAM record under the shard lock (copy the value, mark it
//! fetched, bump the slot's frequency) or checks that the flash item phase 1 read is still
//! the key's; a repeat flash hit is copied back to RAM (`flash_tier::promote`). An expired or
//! flushed item found on the way is removed. `get_now` drives the same future on the calling
//! thread; without flash, phase 1 has nothing to read and returns at once.
use crate::block::block_on;
use crate::engine::{Cache, Core};
use crate::flash_tier::promote::Promotion;
use crate::flash_tier::read::View;
use crate::ops::{item_of, Current, Step};
use crate::{Error, Item};

impl Cache {
    /// Synchronous GET (blocks the thread on a flash read).
    pub fn get_now(&self, key: &[u8]) -> Result<Option<Item>, Error> {
        block_on(self.get_two_phase(key))
    }

    pub(crate) async fn get_two_phase(&self, key: &[u8]) -> Result<Option<Item>, Error> {
        let core = &*self.core;
        let hash = core.slots.hash(key);
        let mut later = None;
        loop {
            let view = core.lower.view(core, key, hash, true).await;
            if let Step::Done(r) = core.get_with(key, hash, &view, &mut later)? {
                if let Some(p) = later {
                    core.lower.promote_later(core, key, hash, p);
                }
                return Ok(r);
            }
        }
    }
}

impl Core {
    /// Phase 2 of a GET. A repeat hit on a flash item that should be promoted but finds no
    /// room in the small log's open segment is left in `later` for `promote_later`, to be
    /// run once this returns (no lock held).
    pub(crate) fn get_with(
        &self,
        key: &[u8],
        hash: u64,
        view: &View,
        later: &mut Option<Promotion>,
    ) -> Result<Step<Option<Item>>, Error> {
        let now = self.now();
        let mut shard = self.slots.lock(hash);
        match self.current(&mut shard, hash, key, view, now)? {
            Current::Retry => Ok(Step::Retry),
            Current::Absent | Current::Gone(_) | Current::Blind(_) => {
                self.meta.ledger.missed(hash);
                Ok(Step::Done(None))
            }
            Current::Ram { pos, rec, .. } => {
                let item = self.item_at(&rec);
                rec.mark_fetched(now);
                shard.touch(pos);
                Ok(Step::Done(Some(item)))
            }
            Current::Flash { pos, e, item } => {
                let it = item_of(&item, e.freq);
                *later = self
                    .lower
                    .flash_hit(self, &mut shard, pos, e, key, item, now);
                Ok(Step::Done(Some(it)))
            }
        }
    }
}
