//! The request paths over both tiers: GET and UPDATE (and SET with flash) in two phases.
//!
//! Flash reads cannot happen under a shard lock, so a request that may touch a flash item
//! runs as: **phase 1** (`Inner::view`, async) locks the key's shard, notes the flash slots
//! whose tag matches (the *candidates*; none if the key is in RAM), unlocks, and reads the
//! candidates until one holds the key; **phase 2** (`get_with`, `update_with`, sync) locks the
//! shard again and proceeds only if the candidates are exactly the same slots — otherwise
//! (reclaim moved the record, a writer replaced it, RAM evicted the key to flash meanwhile)
//! it answers `Step::Retry` and the request runs phase 1 again. So an `update` commits only if
//! the slot still points at the record its closure saw. A key in RAM is found by key compare
//! in phase 2 whatever phase 1 saw (a key has at most one slot, RAM or flash).
//!
//! A SET that does not need the old CAS (`CasMode::Keep`) does not read flash: its view is
//! *blind*, and every tag-matching flash slot is taken as the key's old version and replaced
//! (with 41 bits of hash in shard + tag, another key's slot is hit about once per 2^31 keys
//! per shard; that item is then lost, never served wrongly). Misses never read flash unless a
//! tag matches.
//!
//! # Threads
//! Any caller thread; each phase holds one shard lock and no lock is held across an await.
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use flashtier_flash::Location;

use crate::arena::{Log, Space};
use crate::cache::{Existing, Inner, Reserved};
use crate::flash_tier::{flash_err, home_word, is_corrupt, packed_of, FlashItem, STREAM};
use crate::index::{self, Entry, Pos, Shard, Tier};
use crate::kv_record::KvRecord;
use crate::record::{self, Header, F_FETCHED, F_STALE, F_WIN};
use crate::stats::Counters;
use crate::{Error, Item, ItemMeta, Update};

/// What phase 1 saw and read.
#[derive(Debug, Default)]
pub(crate) struct View {
    /// Packed locations of the tag-matching flash slots, in probe order.
    cands: Vec<u64>,
    /// The candidate holding the key, decoded.
    found: Option<(u64, FlashItem)>,
    /// Candidates whose read failed.
    failed: Vec<(u64, flashtier_flash::Error)>,
    /// Candidates were not read: all are taken as the key's.
    blind: bool,
}

/// The log promoted copies go to, with frequency 0: S3-FIFO's probation queue. A copy hit
/// again before its segment is evicted moves on to the main log; one that is not is evicted
/// cheaply (its slot turns back into the flash slot). Measured with `examples/promote_zipf`
/// (zipf 0.99 reads after a load, RAM 5% of the data): 65% of hits from RAM and 107k
/// promotions per 400k GETs, against 54% and 146k when copies went to the main log keeping
/// their flash frequency (every copy then got up to 3 second chances there).
const PROMOTE_LOG: Log = Log::Small;

/// A promotion decided in `get_with` and finished by `promote_later` without the shard
/// lock: the packed location of the flash slot the item was read from, and the item.
pub(crate) struct Promotion {
    loc: u64,
    item: FlashItem,
}

/// The header of a RAM copy of flash item `f` (at packed `loc`, its home) promoted at `now`.
fn promoted_header(loc: u64, key: &[u8], f: &FlashItem, now: u32) -> Header {
    Header {
        cas: f.cas,
        exptime: f.exptime,
        flags: f.flags,
        vlen: f.value.len() as u32,
        stored: f.stored,
        last_access: now,
        klen: key.len() as u16,
        rflags: (f.rflags & (F_STALE | F_WIN)) | F_FETCHED,
        home: home_word(Location::unpack(loc)),
    }
}

/// Phase 2's outcome.
pub(crate) enum Step<T> {
    Done(T),
    Retry,
}

/// The key's flash state in phase 2.
enum FlashCur {
    Retry,
    Absent,
    Blind(Vec<u64>),
    Found {
        pos: Pos,
        e: Entry,
        item: FlashItem,
        dead: bool,
    },
}

/// The item a flash record holds, as a reader sees it (see `flash_tier` on `fetched` and
/// `last_access`).
fn item_of(f: &FlashItem, freq: u8) -> Item {
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

impl Inner {
    /// Packed locations of the flash slots whose tag matches `hash`.
    pub(crate) fn flash_cands(&self, shard: &Shard<'_>, hash: u64) -> Vec<u64> {
        let mut v = Vec::new();
        shard.find(hash, |e| {
            if e.tier == Tier::Flash {
                v.push(packed_of(&e));
            }
            false
        });
        v
    }

    /// Remove the flash slot at packed `loc` for `hash`; true if there was one.
    pub(crate) fn remove_flash_loc(&self, shard: &mut Shard<'_>, hash: u64, loc: u64) -> bool {
        match shard.find(hash, |e| e.tier == Tier::Flash && packed_of(&e) == loc) {
            Some((pos, _)) => {
                shard.remove(pos);
                true
            }
            None => false,
        }
    }

    fn mark_dead_packed(&self, loc: u64) {
        if let Some(ft) = &self.ft {
            ft.flash.mark_dead(Location::unpack(loc));
        }
    }

    /// Phase 1: see the module docs. `read` false gives a blind view.
    pub(crate) async fn view(&self, key: &[u8], hash: u64, read: bool) -> View {
        let cands = {
            let shard = self.index.lock(hash);
            if self.find_key(&shard, hash, key).is_some() {
                return View::default();
            }
            self.flash_cands(&shard, hash)
        };
        let mut v = View {
            cands,
            ..View::default()
        };
        let Some(ft) = &self.ft else { return v };
        if !read {
            v.blind = true;
            return v;
        }
        for loc in v.cands.clone() {
            match ft.flash.read(Location::unpack(loc)).await {
                Ok(rec) => {
                    if let Some(item) = ft.decode(&rec, hash, key) {
                        v.found = Some((loc, item));
                        break;
                    }
                }
                Err(e) => v.failed.push((loc, e)),
            }
        }
        v
    }

    fn flash_current(
        &self,
        shard: &mut Shard<'_>,
        hash: u64,
        view: &View,
        now: u32,
    ) -> Result<FlashCur, Error> {
        let cands = self.flash_cands(shard, hash);
        if cands != view.cands {
            return Ok(FlashCur::Retry);
        }
        if view.blind {
            return Ok(FlashCur::Blind(cands));
        }
        let Some(ft) = &self.ft else {
            return Ok(FlashCur::Absent);
        };
        for (loc, err) in &view.failed {
            if is_corrupt(err) {
                if self.remove_flash_loc(shard, hash, *loc) {
                    ft.unreadable_item(err);
                }
            } else if view.found.is_none() {
                Counters::add(&ft.counters.errors, 1);
                return Err(flash_err(err));
            }
        }
        let Some((loc, item)) = &view.found else {
            return Ok(FlashCur::Absent);
        };
        let Some((pos, e)) = shard.find(hash, |e| e.tier == Tier::Flash && packed_of(&e) == *loc)
        else {
            return Ok(FlashCur::Retry);
        };
        let dead = self.dead_at(item.exptime, item.stored, now);
        Ok(FlashCur::Found {
            pos,
            e,
            item: item.clone(),
            dead,
        })
    }

    /// Remove a dead (expired or flushed) flash item's slot.
    fn drop_dead_flash(&self, shard: &mut Shard<'_>, hash: u64, pos: Pos, e: &Entry, exptime: u32) {
        shard.remove(pos);
        self.mark_dead_packed(packed_of(e));
        self.flushed_gone(exptime, hash);
        Counters::add(&self.counters.reclaimed, 1);
        if e.freq == 0 {
            Counters::add(&self.counters.expired_unfetched, 1);
        }
    }

    /// Copy a flash item back into RAM (repeat hit) if the small log's open segment has room;
    /// the shard lock is held, so nothing is allocated or evicted here. False if there was
    /// no room (the caller may then `promote_later`).
    fn promote_in_place(
        &self,
        shard: &mut Shard<'_>,
        pos: Pos,
        e: Entry,
        key: &[u8],
        f: &FlashItem,
        now: u32,
    ) -> bool {
        let words = record::rec_words(key.len(), f.value.len());
        let Some(space) = self.arena.try_bump(PROMOTE_LOG, words) else {
            return false;
        };
        let h = promoted_header(packed_of(&e), key, f, now);
        if !self.arena.write_record(&space, &h, key, &f.value) {
            self.abandon_space(space);
            self.count_promotion(false);
            return true;
        }
        self.publish_promoted(shard, pos, &space, &h);
        self.finish(space);
        true
    }

    /// Point the flash slot at `pos` at the promoted record written in `space`, with
    /// frequency 0 (see `PROMOTE_LOG`). Shard lock held; the caller then `finish`es the space.
    fn publish_promoted(&self, shard: &mut Shard<'_>, pos: Pos, space: &Space, h: &Header) {
        shard.set(
            pos,
            Entry {
                tier: Tier::Ram,
                freq: 0,
                size_hint: index::size_hint(space.words * 8),
                loc: self.arena.loc(space.seg, space.off),
            },
        );
        self.arena
            .slot(space.seg)
            .note_publish(space.words, h.exptime, h.stored);
        Counters::add(&self.counters.live_bytes, (space.words * 8) as u64);
        self.count_promotion(true);
    }

    fn count_promotion(&self, done: bool) {
        if let Some(ft) = &self.ft {
            let c = if done {
                &ft.counters.promoted
            } else {
                &ft.counters.promotions_abandoned
            };
            Counters::add(c, 1);
        }
    }

    /// Finish a promotion `get_with` could not do under the shard lock (the small log's open
    /// segment was full). No lock is held on entry: space is reserved the way a SET reserves
    /// it (which may seal the head and evict; an evicted RAM copy whose item is on flash only
    /// becomes a flash slot), the record is written, and the shard is locked again to publish
    /// only if the key's slot is still the flash slot the item was read from — a SET,
    /// DELETE, reclaim relocation or another promotion meanwhile changed or removed it, and
    /// then the space is abandoned. At most `MAX_PROMOTING` run at once (more are skipped).
    pub(crate) fn promote_later(&self, key: &[u8], hash: u64, p: Promotion) {
        let Some(ft) = &self.ft else { return };
        let Some(_turn) = ft.promotion_turn() else {
            return;
        };
        let words = record::rec_words(key.len(), p.item.value.len());
        let Ok(space) = self.reserve(PROMOTE_LOG, words) else {
            self.count_promotion(false);
            return;
        };
        let h = promoted_header(p.loc, key, &p.item, self.now());
        if !self.arena.write_record(&space, &h, key, &p.item.value) {
            self.abandon_space(space);
            self.count_promotion(false);
            return;
        }
        let mut shard = self.index.lock(hash);
        let Some((pos, _)) = shard.find(hash, |e| e.tier == Tier::Flash && packed_of(&e) == p.loc)
        else {
            drop(shard);
            self.abandon_space(space);
            self.count_promotion(false);
            return;
        };
        self.publish_promoted(&mut shard, pos, &space, &h);
        drop(shard);
        self.finish(space);
    }

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
        let mut shard = self.index.lock(hash);
        if let Some((pos, e)) = self.find_key(&shard, hash, key) {
            return self.get_ram(&mut shard, hash, pos, e, now).map(Step::Done);
        }
        match self.flash_current(&mut shard, hash, view, now)? {
            FlashCur::Retry => Ok(Step::Retry),
            FlashCur::Absent | FlashCur::Blind(_) => Ok(Step::Done(None)),
            FlashCur::Found { pos, e, item, dead } => {
                if dead {
                    self.drop_dead_flash(&mut shard, hash, pos, &e, item.exptime);
                    return Ok(Step::Done(None));
                }
                let it = item_of(&item, e.freq);
                if let Some(ft) = &self.ft {
                    Counters::add(&ft.counters.hits, 1);
                }
                let recache = e.freq > 0
                    && record::rec_words(key.len(), item.value.len())
                        <= self.arena.large_threshold()
                    && self.ft.as_ref().is_some_and(|ft| ft.should_recache());
                if !recache || !self.promote_in_place(&mut shard, pos, e, key, &item, now) {
                    shard.touch(pos);
                    if recache {
                        *later = Some(Promotion {
                            loc: packed_of(&e),
                            item,
                        });
                    }
                }
                Ok(Step::Done(Some(it)))
            }
        }
    }

    /// Remove the key's current slot (delete, or a write that is already expired); append a
    /// tombstone if a flash copy existed.
    fn remove_existing(
        &self,
        shard: &mut Shard<'_>,
        hash: u64,
        key: &[u8],
        existing: Option<Existing>,
        had_flash: bool,
    ) {
        match existing {
            Some(Existing::Ram(pos, e)) => {
                if let Some(r) = self.arena.record(e.loc) {
                    self.unlink(shard, pos, &r.header);
                }
            }
            Some(Existing::Flash(pos, e)) => {
                shard.remove(pos);
                self.mark_dead_packed(packed_of(&e));
            }
            Some(Existing::Blind(locs)) => {
                for loc in locs {
                    if self.remove_flash_loc(shard, hash, loc) {
                        self.mark_dead_packed(loc);
                    }
                }
            }
            None => {}
        }
        if had_flash {
            if let Some(ft) = &self.ft {
                ft.append(STREAM, &KvRecord::Tombstone { key_id: hash, key });
            }
        }
    }

    /// Phase 2 of an UPDATE (and of a SET when `set_mode`: `CasMode::Keep` then takes the
    /// CAS of whatever is stored, live or not, as the RAM-only SET does; `dead_cas` keeps the
    /// CAS of a dead item removed by an earlier attempt of the same request).
    pub(crate) fn update_with<R, F>(
        &self,
        key: &[u8],
        hash: u64,
        f: &mut F,
        view: &View,
        set_mode: bool,
        dead_cas: &mut Option<u64>,
    ) -> Result<Step<(R, Option<u64>)>, Error>
    where
        F: FnMut(Option<&Item>) -> (Update, R),
    {
        let mut log = None;
        // Space reserved on a slow-path retry. Held in a guard so that a panicking closure
        // cannot leave a segment's `pending` count raised (eviction would wait on it forever).
        let mut reserved = Reserved {
            inner: self,
            space: None,
        };
        loop {
            let now = self.now();
            let mut shard = self.index.lock(hash);
            let mut existing = None;
            let mut current = None;
            let mut stored_cas = None;
            let mut had_flash = false;
            let mut old_since = None;
            if let Some((pos, e)) = self.find_key(&shard, hash, key) {
                let rec = self
                    .arena
                    .record(e.loc)
                    .ok_or(Error::Internal("indexed segment lost"))?;
                let h = rec.header;
                stored_cas = Some(h.cas);
                if self.dead(&h, now) {
                    self.reclaim(&mut shard, pos, &h, hash);
                    *dead_cas = Some(h.cas);
                } else {
                    had_flash = h.flash_behind();
                    old_since = h.dirty_since();
                    current = Some(self.item_at(&rec));
                    existing = Some(Existing::Ram(pos, e));
                }
            } else if self.ft.is_some() {
                match self.flash_current(&mut shard, hash, view, now)? {
                    FlashCur::Retry => return Ok(Step::Retry),
                    FlashCur::Absent => {}
                    FlashCur::Blind(locs) => {
                        if !locs.is_empty() {
                            had_flash = true;
                            existing = Some(Existing::Blind(locs));
                        }
                    }
                    FlashCur::Found { pos, e, item, dead } => {
                        stored_cas = Some(item.cas);
                        if dead {
                            self.drop_dead_flash(&mut shard, hash, pos, &e, item.exptime);
                            *dead_cas = Some(item.cas);
                        } else {
                            current = Some(item_of(&item, e.freq));
                            existing = Some(Existing::Flash(pos, e));
                            had_flash = true;
                        }
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
                    self.abandon(reserved.space.take());
                    return Ok(Step::Done((r, None)));
                }
                Update::Delete => {
                    self.remove_existing(&mut shard, hash, key, existing, had_flash);
                    drop(shard);
                    self.abandon(reserved.space.take());
                    return Ok(Step::Done((r, None)));
                }
                Update::Put(w) => w,
            };
            if let Err(err) = self.check_size(key, &w.value) {
                drop(shard);
                self.abandon(reserved.space.take());
                return Err(err);
            }
            if w.exptime != 0 && w.exptime <= now {
                let cas = self.cas_for(w.cas, base_cas);
                self.remove_existing(&mut shard, hash, key, existing, had_flash);
                drop(shard);
                self.abandon(reserved.space.take());
                return Ok(Step::Done((r, Some(cas))));
            }
            let words = record::rec_words(key.len(), w.value.len());
            let lg = *log.get_or_insert_with(|| self.target_log(hash));
            let space = match reserved.space.take() {
                Some(s) if s.words == words => Some(s),
                Some(s) => {
                    drop(shard);
                    self.abandon(Some(s));
                    continue;
                }
                None if words > self.arena.large_threshold() => None,
                None => self.arena.try_bump(lg, words),
            };
            let Some(space) = space else {
                drop(shard);
                reserved.space = Some(self.reserve(lg, words)?);
                continue;
            };
            let cas = self.cas_for(w.cas, base_cas);
            let mut h = Self::new_header(&w, key.len(), now, cas);
            h.home = self.store_home(hash, key, &w.value, &h, had_flash, old_since);
            if !self.arena.write_record(&space, &h, key, &w.value) {
                drop(shard);
                self.abandon(Some(space));
                return Err(Error::Internal("reserved space cannot hold the record"));
            }
            self.publish(&mut shard, hash, existing, &space, &h);
            drop(shard);
            self.finish(space);
            return Ok(Step::Done((r, Some(cas))));
        }
    }

    /// Phase 2 of a delete that never reads flash (`view` blind): a RAM item is removed as
    /// usual (false if it was dead); flash slots whose tag matches are removed, marked dead
    /// and covered by a tombstone, and the answer is true without knowing whether the item
    /// had expired (memcached would answer `NOT_FOUND` for an expired one).
    pub(crate) fn delete_with(
        &self,
        key: &[u8],
        hash: u64,
        view: &View,
    ) -> Result<Step<bool>, Error> {
        let now = self.now();
        let mut shard = self.index.lock(hash);
        if let Some((pos, e)) = self.find_key(&shard, hash, key) {
            let h = self
                .arena
                .record(e.loc)
                .ok_or(Error::Internal("indexed segment lost"))?
                .header;
            if self.dead(&h, now) {
                self.reclaim(&mut shard, pos, &h, hash);
                return Ok(Step::Done(false));
            }
            let had_flash = h.flash_behind();
            self.remove_existing(
                &mut shard,
                hash,
                key,
                Some(Existing::Ram(pos, e)),
                had_flash,
            );
            return Ok(Step::Done(true));
        }
        match self.flash_current(&mut shard, hash, view, now)? {
            FlashCur::Retry => Ok(Step::Retry),
            FlashCur::Blind(locs) if !locs.is_empty() => {
                self.remove_existing(&mut shard, hash, key, Some(Existing::Blind(locs)), true);
                Ok(Step::Done(true))
            }
            _ => Ok(Step::Done(false)),
        }
    }

    fn abandon_space(&self, space: Space) {
        self.abandon(Some(space));
    }
}

/// Drive a future to completion on this thread (the `*_now` methods with flash).
pub(crate) fn block_on<F: Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

/// `promote_later` publishes only over the flash slot the item was read from.
#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use bytes::Bytes;

    use super::*;
    use crate::flash::{Device, FlashConfig, IoBackend, MemoryDevice};
    use crate::{Cache, CacheConfig, FlashSettings, ItemWrite};

    fn open() -> Cache {
        let d: Arc<dyn Device> = Arc::new(MemoryDevice::new("promote", 16 << 20));
        let mut fs = FlashSettings::devices(vec![d]);
        fs.engine = Some(FlashConfig {
            io_backend: IoBackend::Psync,
            ..FlashConfig::small()
        });
        let cfg = CacheConfig::builder()
            .memory_limit(256 << 10)
            .segment_size(64 << 10)
            .max_item_size(64 << 10)
            .sweep_interval(None)
            .flash(fs)
            .build()
            .unwrap();
        let c = Cache::new(cfg).unwrap();
        for i in 0..400u32 {
            let v = Bytes::from(vec![i as u8; 2000]);
            c.set_now(format!("k{i}").as_bytes(), ItemWrite::new(v, 0, 0))
                .unwrap();
        }
        c
    }

    /// Phase 1 of a GET of `key` (on flash): the slot read and the item.
    fn read(c: &Cache, key: &[u8]) -> (u64, Promotion) {
        let inner = c.inner();
        let hash = inner.index.hash(key);
        let view = block_on(inner.view(key, hash, true));
        let (loc, item) = view.found.expect("key not on flash");
        (hash, Promotion { loc, item })
    }

    fn counts(c: &Cache) -> (u64, u64) {
        let t = &c.inner().ft.as_ref().unwrap().counters;
        (
            t.promoted.load(Ordering::Relaxed),
            t.promotions_abandoned.load(Ordering::Relaxed),
        )
    }

    #[test]
    fn unchanged_slot_is_promoted() {
        let c = open();
        let (hash, p) = read(&c, b"k0");
        c.inner().promote_later(b"k0", hash, p);
        assert_eq!(counts(&c), (1, 0));
        let t = &c.inner().ft.as_ref().unwrap().counters;
        let reads = t.objects_read.load(Ordering::Relaxed);
        let it = c.get_now(b"k0").unwrap().unwrap();
        assert_eq!(it.value, Bytes::from(vec![0u8; 2000]));
        assert_eq!(
            t.objects_read.load(Ordering::Relaxed),
            reads,
            "read flash again"
        );
    }

    #[test]
    fn set_or_delete_in_between_wins() {
        let c = open();
        let (hash, p) = read(&c, b"k0");
        let new = Bytes::from_static(b"new");
        c.set_now(b"k0", ItemWrite::new(new.clone(), 0, 0)).unwrap();
        c.inner().promote_later(b"k0", hash, p);
        assert_eq!(counts(&c), (0, 1));
        assert_eq!(c.get_now(b"k0").unwrap().unwrap().value, new);

        let (hash, p) = read(&c, b"k1");
        assert!(c.delete_now(b"k1"));
        c.inner().promote_later(b"k1", hash, p);
        assert_eq!(counts(&c), (0, 2));
        assert!(c.get_now(b"k1").unwrap().is_none());
    }
}
