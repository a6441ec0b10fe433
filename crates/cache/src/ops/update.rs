//! UPDATE (read-modify-write) and SET. Phase 2 reads the current item under the shard lock,
//! calls the closure and applies its decision before unlocking, so the change is atomic per
//! key. SET is an update whose closure always puts; with `CasMode::Keep` it takes the CAS of
//! whatever is stored, live or not, and reads no flash (a blind view, see `flash_tier::read`).
//! Without flash the same loop runs once: phase 1 has nothing to read and phase 2 never asks
//! for a retry (no flash slots to change, no back-pressure to await).
use crate::block::block_on;
use crate::engine::{Cache, Core};
use crate::flash_tier::backpressure::Budget;
use crate::flash_tier::journal::take_owed;
use crate::flash_tier::read::View;
use crate::ops::{item_of, Current, Reserved, Step};
use crate::ram::lower::LowerTier;
use crate::ram::lower::NewVersion;
use crate::ram::record;
use crate::ram::tier::{new_header, Existing};
use crate::{CasMode, Error, Item, ItemWrite, Update};

impl Cache {
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

    pub(crate) async fn set_two_phase(&self, key: &[u8], w: ItemWrite) -> Result<u64, Error> {
        let core = &*self.core;
        core.check_size(key, &w.value)?;
        let hash = core.slots.hash(key);
        let read = w.cas == CasMode::Keep;
        let mut f = |_: Option<&Item>| (Update::Put(w.clone()), ());
        let (_, cas) = self.two_phase(key, hash, read, true, &mut f).await?;
        cas.ok_or(Error::Internal("a put returned no CAS"))
    }

    pub(crate) async fn update_two_phase<R, F>(
        &self,
        key: &[u8],
        mut f: F,
    ) -> Result<(R, Option<u64>), Error>
    where
        F: FnMut(Option<&Item>) -> (Update, R),
    {
        let core = &*self.core;
        let hash = core.slots.hash(key);
        self.two_phase(key, hash, true, false, &mut f).await
    }

    /// The two-phase loop every write shares: wait for flash room holding nothing, read the
    /// key's view (`read`: flash items too), decide and commit under the shard lock, and
    /// start again when phase 2 finds the slot changed or flash busy.
    async fn two_phase<R, F>(
        &self,
        key: &[u8],
        hash: u64,
        read: bool,
        set_mode: bool,
        f: &mut F,
    ) -> Result<(R, Option<u64>), Error>
    where
        F: FnMut(Option<&Item>) -> (Update, R),
    {
        let core = &*self.core;
        let mut dead_cas = None;
        let mut budget = Budget::default();
        loop {
            core.lower.await_room(&mut budget).await;
            let view = core.lower.view(core, key, hash, read).await;
            let stall = core.lower.may_stall(&budget);
            let _ = take_owed();
            let step = core.update_with(key, hash, f, &view, set_mode, &mut dead_cas, stall);
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
    /// Phase 2 of an UPDATE (and of a SET when `set_mode`: `CasMode::Keep` then takes the
    /// CAS of whatever is stored, live or not, like the model, and the closure, which always
    /// puts, is shown no item, so the old value is not copied; `dead_cas` keeps the
    /// CAS of a dead item removed by an earlier attempt of the same request). With `stall`,
    /// space that could only be had by evicting an item flash cannot take now is not taken:
    /// `Error::FlashBusy`, nothing changed (the caller awaits room and runs again).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn update_with<R, F>(
        &self,
        key: &[u8],
        hash: u64,
        f: &mut F,
        view: &View,
        set_mode: bool,
        dead_cas: &mut Option<u64>,
        stall: bool,
    ) -> Result<Step<(R, Option<u64>)>, Error>
    where
        F: FnMut(Option<&Item>) -> (Update, R),
    {
        let mut log = None;
        // Space reserved on a slow-path retry. Held in a guard so that a panicking closure
        // cannot leave a segment's `pending` count raised (eviction would wait on it forever).
        let mut reserved = Reserved {
            core: self,
            space: None,
        };
        loop {
            let now = self.now();
            let mut shard = self.slots.lock(hash);
            let mut existing = None;
            let mut current = None;
            let mut stored_cas = None;
            let mut had_flash = false;
            let mut old_since = None;
            match self.current(&mut shard, hash, key, view, now)? {
                Current::Retry => return Ok(Step::Retry),
                Current::Absent => {}
                Current::Gone(cas) => {
                    stored_cas = Some(cas);
                    *dead_cas = Some(cas);
                }
                Current::Ram { pos, e, rec } => {
                    let h = rec.header;
                    stored_cas = Some(h.cas);
                    had_flash = h.flash_behind();
                    old_since = h.dirty_since();
                    if !set_mode {
                        current = Some(self.item_at(&rec));
                    }
                    existing = Some(Existing::Ram(pos, e));
                }
                Current::Flash { pos, e, item } => {
                    stored_cas = Some(item.cas);
                    if !set_mode {
                        current = Some(item_of(&item, e.freq));
                    }
                    existing = Some(Existing::Lower(pos, e));
                    had_flash = true;
                }
                Current::Blind(locs) => {
                    if !locs.is_empty() {
                        had_flash = true;
                        existing = Some(Existing::Blind(locs));
                    }
                }
            }
            let (decision, r) = f(current.as_ref());
            let base_cas = if set_mode {
                stored_cas.or(*dead_cas)
            } else {
                current.as_ref().map(|i| i.cas)
            };
            let w = match decision {
                Update::Keep => {
                    drop(shard);
                    self.ram.abandon(reserved.space.take());
                    return Ok(Step::Done((r, None)));
                }
                Update::Delete => {
                    self.remove_existing(&mut shard, hash, key, existing, had_flash, stall)?;
                    drop(shard);
                    self.ram.abandon(reserved.space.take());
                    return Ok(Step::Done((r, None)));
                }
                Update::Put(w) => w,
            };
            if let Err(err) = self.check_size(key, &w.value) {
                drop(shard);
                self.ram.abandon(reserved.space.take());
                return Err(err);
            }
            if w.exptime != 0 && w.exptime <= now {
                let cas = self.meta.cas_for(w.cas, base_cas);
                self.remove_existing(&mut shard, hash, key, existing, had_flash, stall)?;
                drop(shard);
                self.ram.abandon(reserved.space.take());
                return Ok(Step::Done((r, Some(cas))));
            }
            let words = record::rec_words(key.len(), w.value.len());
            let lg = *log.get_or_insert_with(|| self.ram.target_log(hash));
            let space = match reserved.space.take() {
                Some(s) if s.words == words => Some(s),
                Some(s) => {
                    drop(shard);
                    self.ram.abandon(Some(s));
                    continue;
                }
                None if words > self.ram.large_threshold() => None,
                None => self.ram.try_bump(lg, words),
            };
            let Some(space) = space else {
                drop(shard);
                reserved.space = Some(self.ram.reserve(&self.env(), lg, words, stall)?);
                continue;
            };
            // The version replaced may be on flash: cover it (a tombstone, journaled) before
            // the new one is published, so a crash before the new version reaches flash
            // leaves a miss, never the old value. Covered, the new version has nothing older
            // below it.
            let older_below = had_flash
                && match self.lower.cover_or_stall(hash, key, stall) {
                    None => {
                        drop(shard);
                        self.ram.abandon(Some(space));
                        return Err(Error::FlashBusy);
                    }
                    Some(covered) => !covered,
                };
            let cas = self.meta.cas_for(w.cas, base_cas);
            let mut h = new_header(&w, key.len(), now, cas);
            h.home = self.lower.home_for(&NewVersion {
                hash,
                key,
                value: &w.value,
                header: &h,
                older_below,
                dirty_since: old_since,
            });
            if !self.ram.write_record(&space, &h, key, &w.value) {
                drop(shard);
                self.ram.abandon(Some(space));
                return Err(Error::Internal("reserved space cannot hold the record"));
            }
            self.ram
                .publish(&self.env(), &mut shard, hash, existing, &space, &h);
            drop(shard);
            self.ram.finish(space);
            return Ok(Step::Done((r, Some(cas))));
        }
    }
}

/// Without flash, SET runs the same loop: `Keep` takes the CAS of the item replaced, live or
/// dead, and a dead one is reclaimed (counted) before the put.
#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use crate::{Cache, CacheConfig, CasMode, Clock, ItemWrite, KvStore};

    fn ram_cache(clock: &Clock) -> Cache {
        let cfg = CacheConfig::builder()
            .memory_limit(8 << 20)
            .segment_size(64 << 10)
            .sweep_interval(None)
            .clock(clock.clone())
            .build()
            .unwrap();
        Cache::new(cfg).unwrap()
    }

    #[test]
    fn ram_only_set_over_live_and_dead_items() {
        let clock = Clock::system();
        let c = ram_cache(&clock);
        let now = clock.now();
        let first = c
            .set_now(b"k", ItemWrite::new(Bytes::from_static(b"a"), 0, now + 5))
            .unwrap();
        assert!(c.get_now(b"k").unwrap().is_some());
        let mut keep = ItemWrite::new(Bytes::from_static(b"b"), 0, 0);
        keep.cas = CasMode::Keep;
        assert_eq!(
            c.set_now(b"k", keep.clone()).unwrap(),
            first,
            "Keep over a live item"
        );
        assert_eq!(&c.get_now(b"k").unwrap().unwrap().value[..], b"b");
        let dying = c
            .set_now(b"d", ItemWrite::new(Bytes::from_static(b"x"), 0, now + 5))
            .unwrap();
        clock.advance(10);
        assert_eq!(c.stats().reclaimed, 0);
        assert_eq!(
            c.set_now(b"d", keep).unwrap(),
            dying,
            "Keep over a dead item"
        );
        assert_eq!(c.stats().reclaimed, 1, "the dead item is reclaimed first");
        assert_eq!(&c.get_now(b"d").unwrap().unwrap().value[..], b"b");
        assert_eq!(c.stats().curr_items, 2);
    }
}
