//! The operations, one file each: `get`, `update` (SET is an update whose closure always
//! puts) and `delete`. Each runs in two phases because a flash read cannot happen under a
//! shard lock: phase 1 (`flash_tier::read`, async) notes the key's tag-matching flash slots
//! and reads them; phase 2 (sync) locks the key's shard again and commits only if those slots
//! are unchanged, else it answers [`Step::Retry`] and phase 1 runs again. So an update commits
//! only if the slot still points at the record its closure saw. A key in RAM is found by key
//! compare in phase 2 whatever phase 1 saw (a key has at most one slot, RAM or flash).
//!
//! # Threads
//! Any caller; each phase holds one shard lock (arena head locks are taken under it) and none
//! across an await. A write first awaits flash back-pressure, if any, holding nothing. A write that cannot reserve space without blocking drops the lock,
//! reserves the slow way (which may evict) and runs phase 2 again.
use crate::engine::Core;
use crate::flash_tier::kv_record::FlashItem;
use crate::flash_tier::read::View;
use crate::flash_tier::{flash_err, is_corrupt};
use crate::meta::Counters;
use crate::ram::arena::{RecordRef, Space};
use crate::ram::index::{Entry, Pos, Shard, Tier};
use crate::ram::record::{Header, F_FETCHED, F_STALE, F_WIN};
use crate::ram::tier::Existing;
use crate::{Error, Item, ItemMeta};

mod delete;
mod get;
mod update;

/// How long one request may still wait for flash back-pressure (`Core::await_room`).
#[derive(Default)]
pub(crate) struct Budget {
    until: Option<std::time::Instant>,
}

/// Phase 2's outcome.
pub(crate) enum Step<T> {
    Done(T),
    Retry,
}

/// A reservation abandoned when dropped unused.
pub(crate) struct Reserved<'a> {
    pub core: &'a Core,
    pub space: Option<Space>,
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        self.core.ram.abandon(self.space.take());
    }
}

/// The item a flash record holds, as a reader sees it: `fetched` is "slot frequency > 0" and
/// `last_access` the time it was stored (a flash record is immutable).
pub(crate) fn item_of(f: &FlashItem, freq: u8) -> Item {
    Item {
        value: f.value.clone(),
        flags: f.flags,
        exptime: f.exptime,
        cas: f.cas,
        meta: ItemMeta {
            stale: f.rflags & F_STALE != 0,
            win_token_sent: f.rflags & F_WIN != 0,
            fetched: freq > 0,
            last_access: f.stored,
        },
    }
}

fn meta_of(h: &Header) -> ItemMeta {
    ItemMeta {
        stale: h.rflags & F_STALE != 0,
        win_token_sent: h.rflags & F_WIN != 0,
        fetched: h.rflags & F_FETCHED != 0,
        last_access: h.last_access,
    }
}

/// The key's slot in phase 2, under its shard lock.
pub(crate) enum Current<'a> {
    /// The flash slots changed since phase 1: run it again.
    Retry,
    /// No slot.
    Absent,
    /// A dead (expired or flushed) item was found and removed; its CAS.
    Gone(u64),
    /// A live RAM record.
    Ram {
        pos: Pos,
        e: Entry,
        rec: RecordRef<'a>,
    },
    /// A live flash item, as phase 1 read it.
    Flash { pos: Pos, e: Entry, item: FlashItem },
    /// Flash slots taken as the key's without reading them (a blind view); may be empty.
    Blind(Vec<u64>),
}

impl Core {
    /// Before a write's phase 2 (holding no lock): if the flash engine has been refusing
    /// appends for back-pressure, await room (`flash_tier::backpressure`) within the
    /// request's budget of `append_wait_ms` (`budget`, shared by every wait of the request);
    /// the appends made under the lock never wait.
    pub(crate) async fn await_room(&self, budget: &mut Budget) {
        let Some(tier) = &self.flash_tier else { return };
        if !tier.pressured() || tier.tiering.append_wait().is_zero() {
            return;
        }
        let now = std::time::Instant::now();
        let until = *budget
            .until
            .get_or_insert_with(|| now + tier.tiering.append_wait());
        let left = until.saturating_duration_since(now);
        if !left.is_zero() {
            tier.writable_for(left).await;
        }
    }

    /// Await what a write's phase 2 owes before its reply (`flash_tier::journal`): the
    /// sync of its journal entry, or a flush of the log. Nothing without flash.
    pub(crate) async fn settle(&self, owed: crate::flash_tier::journal::Owed) -> Result<(), Error> {
        match &self.flash_tier {
            Some(tier) => tier.settle(owed).await,
            None => Ok(()),
        }
    }

    /// True while a write may stop an eviction flash cannot take now and await room
    /// ([`Error::FlashBusy`]): flash waits are on and the request's budget is not spent.
    pub(crate) fn may_stall(&self, budget: &Budget) -> bool {
        self.flash_tier
            .as_ref()
            .is_some_and(|t| !t.tiering.append_wait().is_zero())
            && budget.until.is_none_or(|d| std::time::Instant::now() < d)
    }

    /// Check a write's sizes: the value within `max_item_size`, the key within the record
    /// format's limit.
    pub(crate) fn check_size(&self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        if value.len() > self.cfg.max_item_size {
            return Err(Error::TooLarge {
                size: value.len(),
                max: self.cfg.max_item_size,
            });
        }
        if key.len() > crate::ram::record::MAX_KEY {
            return Err(Error::TooLarge {
                size: key.len(),
                max: crate::ram::record::MAX_KEY,
            });
        }
        Ok(())
    }

    /// The item a RAM record holds.
    pub(crate) fn item_at(&self, rec: &RecordRef<'_>) -> Item {
        let h = &rec.header;
        Item {
            value: rec.value(),
            flags: h.flags,
            exptime: h.exptime,
            cas: h.cas,
            meta: meta_of(h),
        }
    }

    /// The key's slot now (shard locked): its RAM record by key compare, else the flash slot
    /// phase 1 read, if the tag-matching flash slots are still exactly those phase 1 saw. A
    /// failed candidate read is dropped from the index if the record is gone for good
    /// (checksum, freed segment), else it fails the request unless another candidate held
    /// the key.
    pub(crate) fn current(
        &self,
        shard: &mut Shard<'_>,
        hash: u64,
        key: &[u8],
        view: &View,
        now: u32,
    ) -> Result<Current<'_>, Error> {
        if let Some((pos, e)) = self.find_key(shard, hash, key) {
            let rec = self
                .ram
                .record(e.loc)
                .ok_or(Error::Internal("indexed segment lost"))?;
            if self.dead(&rec.header, now) {
                self.ram.reclaim(&self.env(), shard, pos, &rec.header, hash);
                return Ok(Current::Gone(rec.header.cas));
            }
            return Ok(Current::Ram { pos, e, rec });
        }
        let Some(tier) = &self.flash_tier else {
            return Ok(Current::Absent);
        };
        let cands = shard.lower_locs(hash);
        if cands != view.cands {
            return Ok(Current::Retry);
        }
        if view.blind {
            return Ok(Current::Blind(cands));
        }
        for (loc, err) in &view.failed {
            if is_corrupt(err) {
                if shard.remove_lower(hash, *loc) {
                    tier.unreadable_item(err);
                }
            } else if view.found.is_none() {
                Counters::add(&tier.counters.errors, 1);
                return Err(flash_err(err));
            }
        }
        let Some((loc, item)) = &view.found else {
            return Ok(Current::Absent);
        };
        let Some((pos, e)) = shard.find(hash, |e| e.tier == Tier::Flash && e.lower_loc() == *loc)
        else {
            return Ok(Current::Retry);
        };
        if self.meta.dead_at(item.exptime, item.stored, now) {
            self.drop_dead_flash(shard, hash, pos, &e, item.exptime);
            return Ok(Current::Gone(item.cas));
        }
        Ok(Current::Flash {
            pos,
            e,
            item: item.clone(),
        })
    }

    /// Remove the key's current slot (delete, or a write that is already expired); append a
    /// tombstone first if a flash copy existed. With `stall`, a tombstone flash cannot take
    /// now (back-pressure) changes nothing: `Error::FlashBusy` (the caller awaits room).
    pub(crate) fn remove_existing(
        &self,
        shard: &mut Shard<'_>,
        hash: u64,
        key: &[u8],
        existing: Option<Existing>,
        had_flash: bool,
        stall: bool,
    ) -> Result<(), Error> {
        // The tombstone's version is fresh, above every version of the key: appending it
        // before the slot goes (same shard lock) changes nothing a reader or a restart sees.
        if had_flash && self.lower().cover_or_stall(hash, key, stall).is_none() {
            return Err(Error::FlashBusy);
        }
        match existing {
            Some(Existing::Ram(pos, e)) => {
                if let Some(r) = self.ram.record(e.loc) {
                    self.ram.unlink(&self.env(), shard, pos, &r.header);
                }
            }
            Some(Existing::Lower(pos, e)) => {
                shard.remove(pos);
                self.lower().forget(e.lower_loc());
            }
            Some(Existing::Blind(locs)) => {
                for loc in locs {
                    if shard.remove_lower(hash, loc) {
                        self.lower().forget(loc);
                    }
                }
            }
            None => {}
        }
        Ok(())
    }
}
