//! Promotion: a repeat flash hit (slot frequency ≥ 1, every `recache_rate`-th) copies the
//! item back into RAM's small log with frequency 0, S3-FIFO's probation; its flash record stays
//! its home, nothing is written to flash. Under the GET's shard lock if the small log's open
//! segment has room; otherwise after the GET answers, with no lock held, reserving space the
//! way a SET does and publishing only if the key's slot is still the flash slot that was read
//! (else the space is abandoned). At most [`MAX_PROMOTING`] of those run at once. Why the small
//! log: docs/eviction.md.
//!
//! The policy (which hits promote, how many at once, what the copy's header says, the
//! counts) is here; the copy itself is RAM's ([`RamAccess::copy_up`]).
//!
//! # Threads
//! The GET's task: [`FlashTier::flash_hit`] under the key's shard lock,
//! [`FlashTier::promote_later`] after the reply with no lock held.
use std::sync::atomic::{AtomicU32, Ordering};

use flashtier_flash::Location;

use crate::flash_tier::kv_record::FlashItem;
use crate::flash_tier::tier::FlashTier;
use crate::flash_tier::{home_word, CopyAt, RamAccess, MAX_PROMOTING};
use crate::meta::Counters;
use crate::ram::index::{Entry, Pos, Shard};
use crate::ram::lower::CopyUp;
use crate::ram::record::{self, Header, F_FETCHED, F_STALE, F_WIN};

/// A promotion decided in a GET's phase 2 and finished by [`FlashTier::promote_later`]
/// without the shard lock: the packed location of the flash slot the item was read from,
/// and the item.
pub(crate) struct Promotion {
    pub(crate) loc: u64,
    pub(crate) item: FlashItem,
}

/// One running promotion (see [`FlashTier::promotion_turn`]).
pub(crate) struct PromotionTurn<'a>(&'a AtomicU32);

impl Drop for PromotionTurn<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
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

impl FlashTier {
    /// A repeat hit on a flash item: true when it should be copied back to RAM
    /// (`recache_rate`: every Nth repeat hit; 0 = never).
    fn should_recache(&self) -> bool {
        match self.tiering.recache_rate() {
            0 => false,
            1 => true,
            n => self
                .repeat_hits
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(n),
        }
    }

    fn count_promotion(&self, done: bool) {
        let c = if done {
            &self.counters.promoted
        } else {
            &self.counters.promotions_abandoned
        };
        Counters::add(c, 1);
    }

    /// A turn to run a promotion outside the shard lock, or `None` (counted as skipped) if
    /// [`MAX_PROMOTING`] are under way. The turn ends when the guard is dropped.
    fn promotion_turn(&self) -> Option<PromotionTurn<'_>> {
        let ok = self
            .promoting
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < MAX_PROMOTING).then_some(n + 1)
            })
            .is_ok();
        if !ok {
            Counters::add(&self.counters.promotions_skipped, 1);
            return None;
        }
        Some(PromotionTurn(&self.promoting))
    }

    /// A GET hit on flash item `item` in slot `pos` (shard locked): count it; on a repeat hit
    /// (frequency ≥ 1, every `recache_rate`-th) copy it back to RAM now if the small log's
    /// open segment has room, else return the promotion to finish with no lock held
    /// ([`Self::promote_later`]). A hit not promoted now raises the slot's frequency.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn flash_hit<R: RamAccess>(
        &self,
        ram: &R,
        shard: &mut Shard<'_>,
        pos: Pos,
        e: Entry,
        key: &[u8],
        item: FlashItem,
        now: u32,
    ) -> Option<Promotion> {
        Counters::add(&self.counters.hits, 1);
        let recache = e.freq > 0
            && ram.copy_fits(record::rec_words(key.len(), item.value.len()))
            && self.should_recache();
        if recache {
            let h = promoted_header(e.lower_loc(), key, &item, now);
            match ram.copy_up(CopyAt::Now(shard, pos), key, &h, &item.value) {
                CopyUp::NoRoom => {}
                done => {
                    self.count_promotion(done == CopyUp::Done);
                    return None;
                }
            }
        }
        shard.touch(pos);
        recache.then(|| Promotion {
            loc: e.lower_loc(),
            item,
        })
    }

    /// Finish a promotion [`Self::flash_hit`] could not do under the shard lock (the small
    /// log's open segment was full). No lock is held on entry: RAM reserves space the way a
    /// SET reserves it (which may seal the head and evict; an evicted RAM copy whose item is
    /// on flash only becomes a flash slot), writes the record, and locks the shard again to
    /// publish only if the key's slot is still the flash slot the item was read from — a SET,
    /// DELETE, reclaim relocation or another promotion meanwhile changed or removed it, and
    /// then the space is abandoned. At most [`MAX_PROMOTING`] run at once (more are skipped).
    pub(crate) fn promote_later<R: RamAccess>(&self, ram: &R, key: &[u8], hash: u64, p: Promotion) {
        let Some(_turn) = self.promotion_turn() else {
            return;
        };
        let h = promoted_header(p.loc, key, &p.item, ram.meta().now());
        let at = CopyAt::Later { hash, loc: p.loc };
        let done = ram.copy_up(at, key, &h, &p.item.value);
        self.count_promotion(done == CopyUp::Done);
    }
}

/// `promote_later` publishes only over the flash slot the item was read from.
#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use bytes::Bytes;

    use super::*;
    use crate::block::block_on;
    use crate::flash::{FlashConfig, IoBackend};
    use crate::{Cache, ItemWrite};

    fn open() -> Cache {
        let engine = FlashConfig {
            io_backend: IoBackend::Psync,
            ..FlashConfig::small()
        };
        let (settings, builder) = crate::config::test_flash("promote", 256 << 10, engine);
        let cfg = builder.flash(settings).build().unwrap();
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
        let core = c.core();
        let hash = core.slots.hash(key);
        let view = block_on(c.tier().view(core, key, hash, true));
        let (loc, item) = view.found.expect("key not on flash");
        (hash, Promotion { loc, item })
    }

    fn counts(c: &Cache) -> (u64, u64) {
        let t = &c.tier().counters;
        (
            t.promoted.load(Ordering::Relaxed),
            t.promotions_abandoned.load(Ordering::Relaxed),
        )
    }

    #[test]
    fn unchanged_slot_is_promoted() {
        let c = open();
        let (hash, p) = read(&c, b"k0");
        c.tier().promote_later(c.core(), b"k0", hash, p);
        assert_eq!(counts(&c), (1, 0));
        let t = &c.tier().counters;
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
        c.tier().promote_later(c.core(), b"k0", hash, p);
        assert_eq!(counts(&c), (0, 1));
        assert_eq!(c.get_now(b"k0").unwrap().unwrap().value, new);

        let (hash, p) = read(&c, b"k1");
        assert!(c.delete_now(b"k1"));
        c.tier().promote_later(c.core(), b"k1", hash, p);
        assert_eq!(counts(&c), (0, 2));
        assert!(c.get_now(b"k1").unwrap().is_none());
    }
}
