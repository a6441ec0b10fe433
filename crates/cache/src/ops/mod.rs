//! The operations: `get`, `update` (SET is an update whose closure always puts) and
//! `delete`, each a phase 2 ([`Op`]) that [`Core::run`], the one two-phase driver, runs. Two
//! phases because a flash read cannot happen under a shard lock: phase 1 (`Lower::view`,
//! async) notes the key's tag-matching flash slots and reads them; phase 2 (sync) locks the
//! key's shard again and commits only if those slots are unchanged, else it answers
//! [`Step::Retry`] and phase 1 runs again. So an update commits only if the slot still points
//! at the record its closure saw. A key in RAM is found by key compare in phase 2 whatever
//! phase 1 saw (a key has at most one slot, RAM or flash). A write also awaits flash room
//! before phase 1 and settles what its phase 2 owes the crash journal before it returns
//! (`flash_tier::journal`: taken right before and right after phase 2, no await between).
//! `Cache`'s entry points (`get_now`, `set_now`, ...) are here; `current` is phase 2's view
//! of the key's slot, `remove_existing` the removal every write path shares.
//!
//! # Threads
//! Any caller; each phase holds one shard lock (arena head locks are taken under it) and none
//! across an await. A write first awaits flash back-pressure, if any, holding nothing. A
//! write that cannot reserve space without blocking drops the lock, reserves the slow way
//! (which may evict) and runs phase 2 again.
use crate::block::block_on;
use crate::engine::{Cache, Core};
use crate::flash_tier::backpressure::{Budget, Patience};
use crate::flash_tier::journal::take_owed;
use crate::flash_tier::kv_record::FlashItem;
use crate::flash_tier::read::{Recheck, View};
use crate::ledger::Cause;
use crate::ram::arena::{RecordRef, Space};
use crate::ram::evict::OnLater;
use crate::ram::index::{Entry, Pos, Shard};
use crate::ram::lower::LowerTier;
use crate::ram::record::{Header, F_FETCHED, F_STALE, F_WIN};
use crate::ram::tier::Existing;
use crate::{CasMode, Error, GetNow, Item, ItemMeta, ItemWrite, Update};
use flashtier_smallset::SmallItem;

mod delete;
mod get;
mod update;

/// Phase 2's outcome.
pub(crate) enum Step<T> {
    Done(T),
    Retry,
}

/// One operation as [`Core::run`] drives it: its phase 2, and what follows a commit.
pub(crate) trait Op {
    type Out;
    /// A write: awaits flash room before phase 1, may stall an eviction flash cannot take
    /// (`Error::FlashBusy`, then it runs again; `on_later` of phase 2 says when), and settles
    /// what phase 2 owes the crash journal before returning. A read does none of that.
    const WRITE: bool;
    /// Phase 1 reads the key's flash items (false: a blind view, see `flash_tier::read`).
    fn reads(&self) -> bool;
    /// Phase 1 looks the key up in the small-object tier (a delete does, to answer).
    fn reads_small(&self) -> bool {
        self.reads()
    }
    /// Phase 2, under the key's shard lock: commit, or ask for phase 1 again.
    fn phase2(
        &mut self,
        core: &Core,
        key: &[u8],
        hash: u64,
        view: &View,
        on_later: OnLater,
    ) -> Result<Step<Self::Out>, Error>;
    /// After the commit, holding no lock (a GET's deferred promotion).
    fn after(&mut self, core: &Core, key: &[u8], hash: u64) {
        let _ = (core, key, hash);
    }
}

impl Cache {
    /// Synchronous GET (blocks the thread on a flash read).
    pub fn get_now(&self, key: &[u8]) -> Result<Option<Item>, Error> {
        block_on(self.get_two_phase(key))
    }

    /// Synchronous SET.
    pub fn set_now(&self, key: &[u8], w: ItemWrite) -> Result<u64, Error> {
        block_on(self.set_two_phase(key, w))
    }

    /// Synchronous read-modify-write (see [`KvStore::update`](crate::KvStore::update)).
    pub fn update_now<R, F>(&self, key: &[u8], f: F) -> Result<(R, Option<u64>), Error>
    where
        F: FnMut(Option<&Item>) -> (Update, R),
    {
        block_on(self.update_two_phase(key, f))
    }

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
    /// a delete through [`KvStore::update`](crate::KvStore::update) (which shows the closure
    /// the item, so it reads a flash-resident one), an *expired* flash-resident item counts
    /// as removed (true): its expiry is on flash. A RAM item is judged exactly. Without
    /// flash, same as `delete_now`.
    pub async fn delete(&self, key: &[u8]) -> Result<bool, Error> {
        let core = &*self.core;
        let hash = core.slots.hash(key);
        core.run(key, hash, delete::Delete).await
    }

    /// See [`crate::KvStore::read_may_wait`].
    pub(crate) fn read_may_wait(&self, key: &[u8]) -> bool {
        let core = &*self.core;
        let hash = core.slots.hash(key);
        let shard = core.slots.lock(hash);
        core.ram.find_key(&shard, hash, key).is_none() && beyond_ram_may_wait(core, &shard, hash)
    }

    /// See [`crate::KvStore::get_if_ready`]: a key with a RAM record is answered under one
    /// shard lock and one index probe (what a GET's phase 2 does for it; phase 1 reads
    /// nothing for a key in RAM); any other key gets `read_may_wait`'s hint, decided under
    /// the same lock from the same probe.
    pub(crate) fn get_if_ready(&self, key: &[u8]) -> GetNow {
        let core = &*self.core;
        let hash = core.slots.hash(key);
        let mut shard = core.slots.lock(hash);
        match get::ram_now(core, &mut shard, hash, key) {
            Some(Ok(done)) => GetNow::Done(done),
            // A RAM record that could not be read: the GET runs (at once) and reports it.
            Some(Err(_)) => GetNow::Run,
            None if beyond_ram_may_wait(core, &shard, hash) => GetNow::MayWait,
            None => GetNow::Run,
        }
    }

    pub(crate) async fn get_two_phase(&self, key: &[u8]) -> Result<Option<Item>, Error> {
        let core = &*self.core;
        let hash = core.slots.hash(key);
        core.run(key, hash, get::Get::default()).await
    }

    pub(crate) async fn set_two_phase(&self, key: &[u8], w: ItemWrite) -> Result<u64, Error> {
        let core = &*self.core;
        core.check_size(key, &w.value)?;
        let hash = core.slots.hash(key);
        let read = w.cas == CasMode::Keep;
        let f = |_: Option<&Item>| (Update::Put(w.clone()), ());
        let (_, cas) = core.run(key, hash, update::UpdateOp::set(f, read)).await?;
        cas.ok_or(Error::Internal("a put returned no CAS"))
    }

    pub(crate) async fn update_two_phase<R, F>(
        &self,
        key: &[u8],
        f: F,
    ) -> Result<(R, Option<u64>), Error>
    where
        F: FnMut(Option<&Item>) -> (Update, R),
    {
        let core = &*self.core;
        let hash = core.slots.hash(key);
        core.run(key, hash, update::UpdateOp::update(f)).await
    }
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

/// The item a RAM record holds.
pub(crate) fn item_at(rec: &RecordRef<'_>) -> Item {
    let h = &rec.header;
    Item {
        value: rec.value(),
        flags: h.flags,
        exptime: h.exptime,
        cas: h.cas,
        meta: meta_of(h),
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
    /// A live small-tier copy, as phase 1 read it (no index slot).
    Small(SmallItem),
    /// Flash slots a blind view takes as the key's (checked by a read, see
    /// `flash_tier::read`); may be empty.
    Blind(Vec<u64>),
}

impl Core {
    /// The one two-phase driver every operation runs on (see the module docs and [`Op`]).
    pub(crate) async fn run<O: Op>(
        &self,
        key: &[u8],
        hash: u64,
        mut op: O,
    ) -> Result<O::Out, Error> {
        let mut patience = Patience::default();
        let mut small_budget = Budget::default();
        loop {
            if O::WRITE {
                self.lower.await_room(&mut patience).await;
                self.small.await_room(&mut small_budget).await;
            }
            let view = self.phase1(key, hash, op.reads(), op.reads_small()).await;
            let step = if O::WRITE {
                let on_later = self.lower.on_later(&patience);
                let _ = take_owed();
                let step = op.phase2(self, key, hash, &view, on_later);
                let owed = take_owed();
                match step {
                    Ok(Step::Done(_)) => self.lower.settle(owed).await?,
                    Err(Error::FlashBusy) => self.lower.busy(&mut patience, on_later),
                    _ => {}
                }
                step
            } else {
                op.phase2(self, key, hash, &view, OnLater::KeepOrDrop)
            };
            match step {
                Ok(Step::Done(r)) => {
                    op.after(self, key, hash);
                    return Ok(r);
                }
                Ok(Step::Retry) | Err(Error::FlashBusy) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Phase 1 of an operation on `key`: the flash tier's view (reading its items when
    /// `reads`), then, when `reads_small` and flash did not hold the key, the small tier's
    /// (its lookup skipped for a key with a RAM slot). A key found without a RAM slot
    /// leaves the shard's generation in `View::not_in_ram`, so phase 2 need not probe the
    /// index again when nothing changed (the probe after a device read is a cold one).
    pub(crate) async fn phase1(&self, key: &[u8], hash: u64, reads: bool, small: bool) -> View {
        let mut view = self.lower.view(self, key, hash, reads).await;
        if small && view.found.is_none() {
            let mut not_in_ram = None;
            let in_ram = || {
                let shard = self.slots.lock(hash);
                let found = self.ram.find_key(&shard, hash, key).is_some();
                if !found {
                    not_in_ram = Some(shard.generation());
                }
                found
            };
            view.small = self.small.view(key, in_ram).await;
            view.not_in_ram = not_in_ram;
        }
        view
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

    /// The key's slot now (shard locked): its RAM record by key compare, else the flash slot
    /// phase 1 read, if the tag-matching flash slots are still exactly those phase 1 saw. A
    /// failed candidate read is dropped from the index if the record is gone for good
    /// (checksum, freed segment), else it fails the request unless another candidate held
    /// the key. The RAM probe is skipped when phase 1 found the key without a RAM slot at
    /// the shard's current generation (no slot changed since, so none is the key's now).
    pub(crate) fn current(
        &self,
        shard: &mut Shard<'_>,
        hash: u64,
        key: &[u8],
        view: &View,
        now: u32,
    ) -> Result<Current<'_>, Error> {
        if view.not_in_ram != Some(shard.generation()) {
            if let Some(cur) = self.current_ram(shard, hash, key, now) {
                return cur;
            }
        }
        match self.lower.recheck(shard, hash, view)? {
            Recheck::Retry => Ok(Current::Retry),
            Recheck::Absent => self.current_small(key, view, now),
            Recheck::Blind(cands) if cands.is_empty() && view.small.is_some() => {
                self.current_small(key, view, now)
            }
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

    /// The key's RAM record now (shard locked), `None` when it has none: a RAM record
    /// decides alone (`current` looks no further), so a read needs no phase 1 for it.
    pub(crate) fn current_ram(
        &self,
        shard: &mut Shard<'_>,
        hash: u64,
        key: &[u8],
        now: u32,
    ) -> Option<Result<Current<'_>, Error>> {
        let (pos, e) = self.ram.find_key(shard, hash, key)?;
        let Some(rec) = self.ram.record(e.loc) else {
            return Some(Err(Error::Internal("indexed segment lost")));
        };
        if self
            .meta
            .dead_at(rec.header.exptime, rec.header.stored, now)
        {
            self.ram.reclaim(&self.env(), shard, pos, &rec.header, hash);
            return Some(Ok(Current::Gone(rec.header.cas)));
        }
        Some(Ok(Current::Ram { pos, e, rec }))
    }

    /// The key's small-tier copy now (shard locked, no slot): what phase 1 saw, if the tier
    /// did not change for its set since; a dead copy is removed.
    fn current_small(&self, key: &[u8], view: &View, now: u32) -> Result<Current<'_>, Error> {
        let Some(seen) = &view.small else {
            return Ok(Current::Absent);
        };
        if !self.small.still(seen) {
            return Ok(Current::Retry);
        }
        match &seen.item {
            None => Ok(Current::Absent),
            Some(s) if self.meta.dead_at(s.meta.exptime, s.meta.stored, now) => {
                self.small.remove(key);
                Ok(Current::Gone(s.meta.cas))
            }
            Some(s) => Ok(Current::Small(s.clone())),
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
        let copy_below = match &existing {
            Some(Existing::Ram(_, e)) => self
                .ram
                .record(e.loc)
                .is_some_and(|r| r.header.small_below()),
            _ => true,
        };
        if copy_below {
            // The key has no RAM slot (a small-tier copy may exist), or its RAM version has
            // a copy there (`small_tier::writeback`): remove it.
            self.small.remove(key);
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

/// For a key found not in RAM under `shard`: may its read wait for a device? With the small
/// tier the lookup may read a page; else a flash slot with the key's tag means a device read.
/// One answer for `read_may_wait` and `get_if_ready`.
fn beyond_ram_may_wait(core: &Core, shard: &Shard<'_>, hash: u64) -> bool {
    core.small.is_on() || core.lower.flash_slot(shard, hash)
}
