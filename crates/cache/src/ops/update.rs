//! UPDATE (read-modify-write) and SET. Phase 2 reads the current item under the shard lock,
//! calls the closure and applies its decision before unlocking, so the change is atomic per
//! key. SET is an update whose closure always puts; with `CasMode::Keep` it takes the CAS of
//! whatever is stored, live or not; without it a SET reads no item (a blind view, see
//! `flash_tier::read`: a tag-matching flash slot is read only to check it holds the key).
//! Without flash the same loop runs once: phase 1 has nothing to read and phase 2 never asks
//! for a retry (no flash slots to change, no back-pressure to await).
use std::marker::PhantomData;

use crate::engine::Core;
use crate::flash_tier::read::View;
use crate::ops::{item_at, item_of, Current, Op, Reserved, Step};
use crate::ram::arena::Space;
use crate::ram::evict::OnLater;
use crate::ram::index::Shard;
use crate::ram::lower::{LowerTier, NewVersion};
use crate::ram::record;
use crate::ram::tier::{new_header, Existing};
use crate::{Error, Item, ItemWrite, Update};

/// An UPDATE, or a SET (`set_mode`), with its closure `f` returning `R`.
pub(crate) struct UpdateOp<F, R> {
    f: F,
    /// Phase 1 reads flash items (false for a SET that needs no old CAS: a blind view).
    read: bool,
    /// A SET: `CasMode::Keep` takes the CAS of whatever is stored, live or not, like the
    /// model, and the closure, which always puts, is shown no item (the old value is not
    /// copied).
    set_mode: bool,
    /// The CAS of a dead item removed by an earlier attempt of the same request.
    dead_cas: Option<u64>,
    out: PhantomData<fn() -> R>,
}

impl<F, R> UpdateOp<F, R>
where
    F: FnMut(Option<&Item>) -> (Update, R),
{
    /// A SET whose closure always puts; `read` when it needs the old CAS.
    pub(crate) fn set(f: F, read: bool) -> Self {
        Self {
            f,
            read,
            set_mode: true,
            dead_cas: None,
            out: PhantomData,
        }
    }

    /// A read-modify-write.
    pub(crate) fn update(f: F) -> Self {
        Self {
            f,
            read: true,
            set_mode: false,
            dead_cas: None,
            out: PhantomData,
        }
    }
}

/// What phase 2 found for the key, as a write sees it.
struct Seen {
    /// The slot the write replaces.
    existing: Option<Existing>,
    /// The live item the closure is shown (never in `set_mode`).
    current: Option<Item>,
    /// The CAS of what is stored, live or dead.
    stored_cas: Option<u64>,
    /// Some version of the key may be on flash.
    had_flash: bool,
    /// The replaced version's dirty-since time, if it waits for write-back.
    old_since: Option<u64>,
}

impl Seen {
    /// `None` when phase 1 must run again.
    fn of(cur: Current<'_>, set_mode: bool, dead_cas: &mut Option<u64>) -> Option<Self> {
        let mut seen = Seen {
            existing: None,
            current: None,
            stored_cas: None,
            had_flash: false,
            old_since: None,
        };
        match cur {
            Current::Retry => return None,
            Current::Absent => {}
            Current::Gone(cas) => {
                seen.stored_cas = Some(cas);
                *dead_cas = Some(cas);
            }
            Current::Ram { pos, e, rec } => {
                let h = rec.header;
                seen.stored_cas = Some(h.cas);
                seen.had_flash = h.flash_behind();
                seen.old_since = h.dirty_since();
                if !set_mode {
                    seen.current = Some(item_at(&rec));
                }
                seen.existing = Some(Existing::Ram(pos, e));
            }
            Current::Flash { pos, e, item } => {
                seen.stored_cas = Some(item.cas);
                if !set_mode {
                    seen.current = Some(item_of(&item, e.freq));
                }
                seen.existing = Some(Existing::Lower(pos, e));
                seen.had_flash = true;
            }
            Current::Small(item) => {
                // No slot: the write publishes a new one (or removes nothing) and removes
                // the small copy (`Commit::commit`, `Core::remove_existing`).
                seen.stored_cas = Some(item.meta.cas);
                if !set_mode {
                    seen.current = Some(crate::small_tier::item_of(&item));
                }
            }
            Current::Blind(locs) => {
                if !locs.is_empty() {
                    seen.had_flash = true;
                    seen.existing = Some(Existing::Blind(locs));
                }
            }
        }
        Some(seen)
    }
}

impl<F, R> Op for UpdateOp<F, R>
where
    F: FnMut(Option<&Item>) -> (Update, R),
{
    type Out = (R, Option<u64>);
    const WRITE: bool = true;

    fn reads(&self) -> bool {
        self.read
    }

    /// Phase 2 of an UPDATE or SET. Space that could only be had by evicting an item flash
    /// cannot take now is taken per `on_later`: with [`OnLater::Stall`] (or `Keep`, where the
    /// item would be dropped) it is not: `Error::FlashBusy`, nothing changed (the driver
    /// awaits room and runs again). A tombstone flash cannot take now stalls only with
    /// `Stall`.
    fn phase2(
        &mut self,
        core: &Core,
        key: &[u8],
        hash: u64,
        view: &View,
        on_later: OnLater,
    ) -> Result<Step<(R, Option<u64>)>, Error> {
        let stall = on_later == OnLater::Stall;
        let mut log = None;
        // Space reserved on a slow-path retry. Held in a guard so that a panicking closure
        // cannot leave a segment's `pending` count raised (eviction would wait on it forever).
        let mut reserved = Reserved { core, space: None };
        loop {
            let now = core.now();
            let mut shard = core.slots.lock(hash);
            let cur = core.current(&mut shard, hash, key, view, now)?;
            let Some(seen) = Seen::of(cur, self.set_mode, &mut self.dead_cas) else {
                return Ok(Step::Retry);
            };
            let (decision, r) = (self.f)(seen.current.as_ref());
            let base_cas = if self.set_mode {
                seen.stored_cas.or(self.dead_cas)
            } else {
                seen.current.as_ref().map(|i| i.cas)
            };
            let w = match decision {
                Update::Keep => {
                    drop(shard);
                    core.ram.abandon(reserved.space.take());
                    return Ok(Step::Done((r, None)));
                }
                Update::Delete => {
                    let (existing, had_flash) = (seen.existing, seen.had_flash);
                    core.remove_existing(&mut shard, hash, key, existing, had_flash, stall)?;
                    drop(shard);
                    core.ram.abandon(reserved.space.take());
                    return Ok(Step::Done((r, None)));
                }
                Update::Put(w) => w,
            };
            if let Err(err) = core.check_size(key, &w.value) {
                drop(shard);
                core.ram.abandon(reserved.space.take());
                return Err(err);
            }
            if w.exptime != 0 && w.exptime <= now {
                let cas = core.meta.cas_for(w.cas, base_cas);
                let (existing, had_flash) = (seen.existing, seen.had_flash);
                core.remove_existing(&mut shard, hash, key, existing, had_flash, stall)?;
                drop(shard);
                core.ram.abandon(reserved.space.take());
                return Ok(Step::Done((r, Some(cas))));
            }
            let words = record::rec_words(key.len(), w.value.len());
            let put = Commit {
                key,
                hash,
                w: &w,
                base_cas,
                now,
            };
            if let Some(Existing::Ram(_, e)) = &seen.existing {
                if core.ram.fits_in_place(e.loc, words) {
                    // A space reserved by an earlier attempt is given back when `reserved`
                    // drops, after the shard lock.
                    let cas = put.commit(core, shard, seen, Target::InPlace, stall)?;
                    return Ok(Step::Done((r, Some(cas))));
                }
            }
            let lg = *log.get_or_insert_with(|| core.ram.target_log(hash));
            let space = match reserved.space.take() {
                Some(s) if s.words == words => Some(s),
                Some(s) => {
                    drop(shard);
                    core.ram.abandon(Some(s));
                    continue;
                }
                None if words > core.ram.large_threshold() => None,
                None => core.ram.try_bump(lg, words),
            };
            let Some(space) = space else {
                drop(shard);
                reserved.space = Some(core.ram.reserve(&core.env(), lg, words, on_later)?);
                continue;
            };
            let cas = put.commit(core, shard, seen, Target::Space(space), stall)?;
            return Ok(Step::Done((r, Some(cas))));
        }
    }
}

/// Where a new version is written.
enum Target {
    /// Space reserved in a log head; published over the old version.
    Space(Space),
    /// Over the old RAM record, which has the same size (`RamTier::rewrite`).
    InPlace,
}

/// A new version about to be written in reserved space or in place (phase 2, shard locked).
struct Commit<'a> {
    key: &'a [u8],
    hash: u64,
    w: &'a ItemWrite,
    base_cas: Option<u64>,
    now: u32,
}

impl Commit<'_> {
    /// Cover the replaced version below, pick the CAS and home word, write the record into
    /// `target` and publish it over `seen.existing`; returns the new CAS. With `stall`, a
    /// cover flash cannot take now changes nothing: `Error::FlashBusy`.
    fn commit(
        &self,
        core: &Core,
        mut shard: Shard<'_>,
        seen: Seen,
        target: Target,
        stall: bool,
    ) -> Result<u64, Error> {
        let (key, hash, w) = (self.key, self.hash, self.w);
        // The version replaced may be on flash: cover it (a tombstone, journaled) before
        // the new one is published, so a crash before the new version reaches flash
        // leaves a miss, never the old value. Covered, the new version has nothing older
        // below it.
        let older_below = seen.had_flash
            && match core.lower.cover_or_stall(hash, key, stall) {
                None => {
                    drop(shard);
                    if let Target::Space(s) = target {
                        core.ram.abandon(Some(s));
                    }
                    return Err(Error::FlashBusy);
                }
                Some(covered) => !covered,
            };
        // The replaced RAM version's small-tier state: a copy there (`HOME_BELOW`), or a
        // wait for the small tier's write-back to continue (`small_tier::writeback`).
        let old_small = match &seen.existing {
            Some(Existing::Ram(_, e)) => core
                .ram
                .record(e.loc)
                .map(|r| (r.header.small_below(), r.header.small_since())),
            _ => None,
        };
        if old_small.is_none_or(|(below, _)| below) {
            // The key has no RAM slot, or its RAM version has a small-tier copy: remove it.
            core.small.remove(key);
        }
        let cas = core.meta.cas_for(w.cas, self.base_cas);
        let mut h = new_header(w, key.len(), self.now, cas);
        h.home = core.home_for(&NewVersion {
            hash,
            key,
            value: &w.value,
            header: &h,
            older_below,
            dirty_since: seen.old_since,
            small_since: old_small.and_then(|(_, since)| since),
        });
        let env = core.env();
        let space = match target {
            Target::Space(space) => space,
            Target::InPlace => {
                let Some(Existing::Ram(pos, e)) = seen.existing else {
                    return Err(Error::Internal("an in-place write without a RAM record"));
                };
                if !core
                    .ram
                    .rewrite(&env, &mut shard, pos, e, &h, key, &w.value)
                {
                    return Err(Error::Internal("the record no longer fits in place"));
                }
                return Ok(cas);
            }
        };
        if !core.ram.write_record(&space, &h, key, &w.value) {
            drop(shard);
            core.ram.abandon(Some(space));
            return Err(Error::Internal("reserved space cannot hold the record"));
        }
        core.ram
            .publish(&env, &mut shard, hash, seen.existing, &space, &h);
        drop(shard);
        core.ram.finish(space);
        Ok(cas)
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

    #[test]
    fn ram_only_overwrites_cost_no_capacity() {
        // 8 MiB of 64 KiB segments; 4 KiB values filling about 85 % of it, then keys picked
        // at random overwritten, five per key on average (in key order, whole segments
        // would die in turn and nothing live would be evicted): memcached keeps them all, so
        // must we.
        let clock = Clock::system();
        let c = ram_cache(&clock);
        let n = (8 << 20) * 85 / 100 / 4200;
        let key = |i: usize| format!("key:{i}").into_bytes();
        let mut last = vec![0u8; n];
        for i in 0..n {
            c.set_now(&key(i), ItemWrite::new(Bytes::from(vec![0; 4096]), 0, 0))
                .unwrap();
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..5 * n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = (x % n as u64) as usize;
            last[i] = (round % 250) as u8 + 1;
            let v = Bytes::from(vec![last[i]; 4096]);
            c.set_now(&key(i), ItemWrite::new(v, 0, 0)).unwrap();
        }
        let st = c.stats();
        assert_eq!(st.evictions, 0);
        assert_eq!(st.curr_items, n as u64);
        assert_eq!(st.total_items, 6 * n as u64);
        assert!((0..n).all(|i| c.get_now(&key(i)).unwrap().unwrap().value[..] == [last[i]; 4096]));
    }
}
