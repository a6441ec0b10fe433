//! Promotion: a repeat flash hit (slot frequency ≥ 1, every `recache_rate`-th, sampled at the
//! rate promotion's measured payback sets: [`super::payback`]) copies the
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
use crate::ram::record::{self, Header, F_FETCHED, F_PROMOTED, F_STALE, F_WIN};

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
        rflags: (f.rflags & (F_STALE | F_WIN)) | F_FETCHED | F_PROMOTED,
        home: home_word(Location::unpack(loc)),
    }
}

impl FlashTier {
    /// A repeat hit on a flash item: true when it should be copied back to RAM
    /// (`recache_rate`: every Nth repeat hit, 0 = never; with `recache_adaptive`, every
    /// Nth times the period promotion's measured payback sets, see `payback`).
    fn should_recache(&self) -> bool {
        let period = match self.tiering.recache_rate() {
            0 => return false,
            n if self.tiering.recache_adaptive() => n.saturating_mul(self.payback.period()),
            n => n,
        };
        period == 1
            || self
                .repeat_hits
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(period)
    }

    fn count_promotion(&self, done: bool) {
        let c = if done {
            self.payback.promoted();
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

/// Promotion's policy on a flash tier alone, over a fake RAM that records the copies asked.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::flash_tier::testing::{open, put_flash, read_item, FakeRam};

    const VALUE: [u8; 3000] = [4; 3000];

    /// A GET hit on `key` in phase 2, as `ops::get` makes it: the flash slot is locked.
    fn hit(tier: &FlashTier, ram: &FakeRam, key: &[u8]) -> Option<Promotion> {
        let (loc, item) = read_item(tier, ram, key);
        let hash = ram.slots.hash(key);
        let mut shard = ram.slots.lock(hash);
        let (pos, e) = shard.find(hash, |e| e.lower_loc() == loc).unwrap();
        tier.flash_hit(ram, &mut shard, pos, e, key, item, ram.meta.now())
    }

    fn freq(ram: &FakeRam, key: &[u8]) -> u8 {
        ram.slot(ram.slots.hash(key)).unwrap().freq
    }

    fn count(c: &std::sync::atomic::AtomicU64) -> u64 {
        Counters::get(c)
    }

    #[test]
    fn a_first_hit_raises_the_frequency_a_repeat_hit_copies_the_item_up() {
        let (tier, ram) = open("promote-repeat", |_| {});
        let (loc, _) = put_flash(&tier, &ram, b"k", &VALUE, 0);
        assert!(hit(&tier, &ram, b"k").is_none());
        assert!(ram.copies.lock().is_empty(), "a first hit copies nothing");
        assert_eq!(freq(&ram, b"k"), 1);
        assert!(hit(&tier, &ram, b"k").is_none());
        let copies = ram.copies.lock().clone();
        assert_eq!(copies.len(), 1);
        let c = &copies[0];
        assert!(c.later.is_none(), "copied under the lock");
        assert_eq!((&c.key[..], &c.value[..]), (&b"k"[..], &VALUE[..]));
        assert_eq!(
            c.header.home,
            home_word(loc),
            "the flash record stays its home"
        );
        assert_ne!(c.header.rflags & F_FETCHED, 0);
        assert_eq!((c.header.cas, c.header.stored), (1, 1));
        assert_eq!(count(&tier.counters.hits), 2);
        assert_eq!(count(&tier.counters.promoted), 1);
    }

    #[test]
    fn no_room_under_the_lock_defers_the_copy_until_after_the_reply() {
        let (tier, ram) = open("promote-later", |_| {});
        let (loc, _) = put_flash(&tier, &ram, b"k", &VALUE, 1);
        *ram.answer.lock() = CopyUp::NoRoom;
        let p = hit(&tier, &ram, b"k").expect("deferred");
        assert_eq!(p.loc, loc.pack());
        assert_eq!(freq(&ram, b"k"), 2, "a hit not promoted now still counts");
        *ram.answer.lock() = CopyUp::Done;
        let hash = ram.slots.hash(b"k");
        tier.promote_later(&ram, b"k", hash, p);
        let copies = ram.copies.lock().clone();
        assert_eq!(copies.len(), 2);
        assert_eq!(copies[1].later, Some((hash, loc.pack())));
        assert_eq!(count(&tier.counters.promoted), 1);
        assert_eq!(count(&tier.counters.promotions_abandoned), 0);
    }

    #[test]
    fn copies_given_up_or_too_large_are_not_promoted() {
        let (tier, ram) = open("promote-abandon", |_| {});
        put_flash(&tier, &ram, b"k", &VALUE, 1);
        *ram.answer.lock() = CopyUp::Abandoned;
        assert!(hit(&tier, &ram, b"k").is_none());
        assert_eq!(count(&tier.counters.promotions_abandoned), 1);
        ram.fits.store(false, std::sync::atomic::Ordering::Relaxed);
        assert!(hit(&tier, &ram, b"k").is_none());
        assert_eq!(
            ram.copies.lock().len(),
            1,
            "a record too large for RAM is not copied"
        );
        assert_eq!(freq(&ram, b"k"), 2);
        assert_eq!(count(&tier.counters.promoted), 0);
    }

    #[test]
    fn recache_rate_samples_repeat_hits() {
        let (tier, ram) = open("promote-rate", |s| s.recache_rate = 3);
        put_flash(&tier, &ram, b"k", &VALUE, 1);
        for _ in 0..6 {
            hit(&tier, &ram, b"k");
        }
        assert_eq!(ram.copies.lock().len(), 2, "every third repeat hit");
        let (tier, ram) = open("promote-never", |s| s.recache_rate = 0);
        put_flash(&tier, &ram, b"k", &VALUE, 1);
        for _ in 0..3 {
            hit(&tier, &ram, b"k");
        }
        assert!(ram.copies.lock().is_empty(), "0 = never");
    }

    #[test]
    fn promotions_no_copy_of_which_is_read_are_sampled_less_and_read_ones_bring_it_back() {
        use crate::flash_tier::payback::WINDOW;
        let (tier, ram) = open("promote-payback", |_| {});
        put_flash(&tier, &ram, b"k", &VALUE, 1);
        // Every repeat hit promotes (the fake RAM keeps the flash slot), none is read in RAM.
        for _ in 0..WINDOW {
            hit(&tier, &ram, b"k");
        }
        assert_eq!(count(&tier.counters.promoted), u64::from(WINDOW));
        assert_eq!(
            tier.payback.period(),
            2,
            "a window unread: one candidate in two"
        );
        let before = count(&tier.counters.promoted);
        for _ in 0..100 {
            hit(&tier, &ram, b"k");
        }
        assert_eq!(count(&tier.counters.promoted), before + 50, "one in two");
        for _ in 100..2 * WINDOW {
            hit(&tier, &ram, b"k");
        }
        assert_eq!(tier.payback.period(), 4);
        // A window in which a quarter of the copies are read doubles the rate back.
        let before = count(&tier.counters.promoted);
        let mut hits = 0;
        while count(&tier.counters.promoted) < before + u64::from(WINDOW) {
            hit(&tier, &ram, b"k");
            hits += 1;
            if hits % 16 == 0 {
                tier.payback.read();
            }
        }
        assert_eq!(tier.payback.period(), 2);
        // Off: every candidate again, whatever was measured.
        crate::knobs::set(&tier.tiering, &tier.flash, "recache_adaptive", "0").unwrap();
        let before = count(&tier.counters.promoted);
        for _ in 0..10 {
            hit(&tier, &ram, b"k");
        }
        assert_eq!(count(&tier.counters.promoted), before + 10);
    }

    #[test]
    fn at_most_max_promoting_run_outside_the_lock() {
        let (tier, ram) = open("promote-turns", |_| {});
        let (loc, _) = put_flash(&tier, &ram, b"k", &VALUE, 1);
        let turns: Vec<_> = (0..MAX_PROMOTING)
            .map(|_| tier.promotion_turn().unwrap())
            .collect();
        let (_, item) = read_item(&tier, &ram, b"k");
        let p = Promotion {
            loc: loc.pack(),
            item,
        };
        tier.promote_later(&ram, b"k", ram.slots.hash(b"k"), p);
        assert!(ram.copies.lock().is_empty());
        assert_eq!(count(&tier.counters.promotions_skipped), 1);
        drop(turns);
        assert!(
            tier.promotion_turn().is_some(),
            "turns end with their guards"
        );
    }
}
