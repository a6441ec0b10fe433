//! Promotion: a repeat flash hit (slot frequency ≥ 1, every `recache_rate`-th) copies the
//! item back into RAM's small log with frequency 0, S3-FIFO's probation; its flash record stays
//! its home, nothing is written to flash. Under the GET's shard lock if the small log's open
//! segment has room; otherwise after the GET answers, with no lock held, reserving space the
//! way a SET does and publishing only if the key's slot is still the flash slot that was read
//! (else the space is abandoned). At most `MAX_PROMOTING` of those run at once. Why the small
//! log: docs/eviction.md.
use flashtier_flash::Location;

use crate::engine::Core;
use crate::flash_tier::kv_record::FlashItem;
use crate::flash_tier::{home_word, FlashTier};
use crate::meta::Counters;
use crate::ram::index::{Entry, Pos, Shard};
use crate::ram::record::{self, Header, F_FETCHED, F_STALE, F_WIN};
use crate::ram::tier::CopyUp;

/// A promotion decided in `get_with` and finished by `promote_later` without the shard
/// lock: the packed location of the flash slot the item was read from, and the item.
pub(crate) struct Promotion {
    pub(crate) loc: u64,
    pub(crate) item: FlashItem,
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
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
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
}

impl Core {
    /// A GET hit on flash item `item` in slot `pos` (shard locked): count it; on a repeat hit
    /// (frequency ≥ 1, every `recache_rate`-th) copy it back to RAM now if the small log's
    /// open segment has room, else return the promotion to finish with no lock held
    /// (`promote_later`). A hit not promoted now raises the slot's frequency.
    pub(crate) fn flash_hit(
        &self,
        shard: &mut Shard<'_>,
        pos: Pos,
        e: Entry,
        key: &[u8],
        item: FlashItem,
        now: u32,
    ) -> Option<Promotion> {
        let Some(tier) = &self.flash_tier else {
            shard.touch(pos);
            return None;
        };
        Counters::add(&tier.counters.hits, 1);
        let recache = e.freq > 0
            && record::rec_words(key.len(), item.value.len()) <= self.ram.large_threshold()
            && tier.should_recache();
        if recache {
            let h = promoted_header(e.lower_loc(), key, &item, now);
            match self
                .ram
                .copy_up_now(&self.env(), shard, pos, key, &h, &item.value)
            {
                CopyUp::NoRoom => {}
                done => {
                    tier.count_promotion(done == CopyUp::Done);
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

    /// Finish a promotion `get_with` could not do under the shard lock (the small log's open
    /// segment was full). No lock is held on entry: space is reserved the way a SET reserves
    /// it (which may seal the head and evict; an evicted RAM copy whose item is on flash only
    /// becomes a flash slot), the record is written, and the shard is locked again to publish
    /// only if the key's slot is still the flash slot the item was read from — a SET,
    /// DELETE, reclaim relocation or another promotion meanwhile changed or removed it, and
    /// then the space is abandoned. At most `MAX_PROMOTING` run at once (more are skipped).
    pub(crate) fn promote_later(&self, key: &[u8], hash: u64, p: Promotion) {
        let Some(tier) = &self.flash_tier else { return };
        let Some(_turn) = tier.promotion_turn() else {
            return;
        };
        let h = promoted_header(p.loc, key, &p.item, self.now());
        let done = self
            .ram
            .copy_up_later(&self.env(), hash, p.loc, key, &h, &p.item.value);
        tier.count_promotion(done == CopyUp::Done);
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
        let view = block_on(core.view(key, hash, true));
        let (loc, item) = view.found.expect("key not on flash");
        (hash, Promotion { loc, item })
    }

    fn counts(c: &Cache) -> (u64, u64) {
        let t = &c.core().flash_tier.as_ref().unwrap().counters;
        (
            t.promoted.load(Ordering::Relaxed),
            t.promotions_abandoned.load(Ordering::Relaxed),
        )
    }

    #[test]
    fn unchanged_slot_is_promoted() {
        let c = open();
        let (hash, p) = read(&c, b"k0");
        c.core().promote_later(b"k0", hash, p);
        assert_eq!(counts(&c), (1, 0));
        let t = &c.core().flash_tier.as_ref().unwrap().counters;
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
        c.core().promote_later(b"k0", hash, p);
        assert_eq!(counts(&c), (0, 1));
        assert_eq!(c.get_now(b"k0").unwrap().unwrap().value, new);

        let (hash, p) = read(&c, b"k1");
        assert!(c.delete_now(b"k1"));
        c.core().promote_later(b"k1", hash, p);
        assert_eq!(counts(&c), (0, 2));
        assert!(c.get_now(b"k1").unwrap().is_none());
    }
}
