//! GET. Phase 2 finds the key's RAM record under the shard lock (copy the value, mark it
//! fetched, bump the slot's frequency) or checks that the flash item phase 1 read is still
//! the key's; a repeat flash hit is copied back to RAM (`flash_tier::promote`), at once or,
//! when the small log's open segment has no room, after phase 2 with no lock held
//! ([`Op::after`]). An expired or flushed item found on the way is removed. Without flash,
//! phase 1 has nothing to read and returns at once.
use crate::engine::Core;
use crate::flash_tier::promote::Promotion;
use crate::flash_tier::read::View;
use crate::ops::{item_at, item_of, Current, Op, Step};
use crate::ram::arena::RecordRef;
use crate::ram::evict::OnLater;
use crate::ram::index::{Pos, Shard};
use crate::{Error, Item};

/// A GET: the promotion phase 2 left for after it, if any.
#[derive(Default)]
pub(crate) struct Get {
    later: Option<Promotion>,
}

/// A GET of a key with a RAM record, without phase 1 (`Core::current_ram`), shard locked:
/// `None` when the key has no RAM record (or an error the two-phase GET reports too).
/// `Some(None)`: the record was dead and is gone (a miss, as the two-phase GET counts it).
pub(crate) fn ram_now(
    core: &Core,
    shard: &mut Shard<'_>,
    hash: u64,
    key: &[u8],
) -> Option<Result<Option<Item>, Error>> {
    let now = core.now();
    Some(match core.current_ram(shard, hash, key, now)? {
        Ok(Current::Ram { pos, rec, .. }) => Ok(Some(ram_hit(shard, pos, &rec, now))),
        Ok(_) => {
            core.meta.ledger.missed(hash);
            Ok(None)
        }
        Err(e) => Err(e),
    })
}

/// A RAM hit: copy the item, mark it fetched, bump the slot's frequency.
fn ram_hit(shard: &mut Shard<'_>, pos: Pos, rec: &RecordRef<'_>, now: u32) -> Item {
    let item = item_at(rec);
    rec.mark_fetched(now);
    shard.touch(pos);
    item
}

impl Op for Get {
    type Out = Option<Item>;
    const WRITE: bool = false;

    fn reads(&self) -> bool {
        true
    }

    fn phase2(
        &mut self,
        core: &Core,
        key: &[u8],
        hash: u64,
        view: &View,
        _on_later: OnLater,
    ) -> Result<Step<Option<Item>>, Error> {
        let now = core.now();
        let mut shard = core.slots.lock(hash);
        match core.current(&mut shard, hash, key, view, now)? {
            Current::Retry => Ok(Step::Retry),
            Current::Absent | Current::Gone(_) | Current::Blind(_) => {
                core.meta.ledger.missed(hash);
                Ok(Step::Done(None))
            }
            Current::Ram { pos, rec, .. } => {
                Ok(Step::Done(Some(ram_hit(&mut shard, pos, &rec, now))))
            }
            Current::Small(item) => Ok(Step::Done(Some(crate::small_tier::item_of(&item)))),
            Current::Flash { pos, e, item } => {
                let it = item_of(&item, e.freq);
                self.later = core
                    .lower
                    .flash_hit(core, &mut shard, pos, e, key, item, now);
                Ok(Step::Done(Some(it)))
            }
        }
    }

    fn after(&mut self, core: &Core, key: &[u8], hash: u64) {
        if let Some(p) = self.later.take() {
            core.lower.promote_later(core, key, hash, p);
        }
    }
}
