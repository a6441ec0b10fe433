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
use crate::flash_tier::read::{Recheck, View};
use crate::ledger::Cause;
use crate::ram::arena::{RecordRef, Space};
use crate::ram::index::{Entry, Pos, Shard};
use crate::ram::lower::LowerTier;
use crate::ram::record::{Header, F_FETCHED, F_STALE, F_WIN};
use crate::ram::tier::Existing;
use crate::{Error, Item, ItemMeta};

mod delete;
mod get;
mod update;

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
        if let Some((pos, e)) = self.ram.find_key(shard, hash, key) {
            let rec = self
                .ram
                .record(e.loc)
                .ok_or(Error::Internal("indexed segment lost"))?;
            if self
                .meta
                .dead_at(rec.header.exptime, rec.header.stored, now)
            {
                self.ram.reclaim(&self.env(), shard, pos, &rec.header, hash);
                return Ok(Current::Gone(rec.header.cas));
            }
            return Ok(Current::Ram { pos, e, rec });
        }
        match self.lower.recheck(shard, hash, view)? {
            Recheck::Retry => Ok(Current::Retry),
            Recheck::Absent => Ok(Current::Absent),
            Recheck::Blind(cands) => Ok(Current::Blind(cands)),
            Recheck::Found { pos, e, item } => {
                if self.meta.dead_at(item.exptime, item.stored, now) {
                    self.drop_dead_flash(shard, hash, pos, &e, item.exptime);
                    return Ok(Current::Gone(item.cas));
                }
                Ok(Current::Flash { pos, e, item })
            }
        }
    }

    /// Remove a dead (expired or flushed) flash item's slot.
    fn drop_dead_flash(&self, shard: &mut Shard<'_>, hash: u64, pos: Pos, e: &Entry, exptime: u32) {
        shard.remove(pos);
        self.lower.forget(e.lower_loc());
        self.lower.cover_if_flushed(hash, exptime, self.now());
        self.meta.departed(hash, Cause::Expired, e.freq > 0);
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
        if had_flash && self.lower.cover_or_stall(hash, key, stall).is_none() {
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
                self.lower.forget(e.lower_loc());
            }
            Some(Existing::Blind(locs)) => {
                for loc in locs {
                    if shard.remove_lower(hash, loc) {
                        self.lower.forget(loc);
                    }
                }
            }
            None => {}
        }
        Ok(())
    }
}
