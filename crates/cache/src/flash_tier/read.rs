//! Phase 1 of every operation, and its check in phase 2: which flash slots may hold the key,
//! what reading them found, and whether they are still the key's slots under the shard lock.
//! A record of another key (a tag collision) is skipped; a checksum failure or a freed
//! segment under a current slot is never served (the slot goes, the key reads as a miss); any
//! other read error fails the request. A *blind* view (a SET that needs no old CAS) reads
//! nothing and takes every tag-matching slot as the key's: another key's item is then lost
//! (about once per 2^31 keys per shard, with 41 bits of hash in shard + tag), never served.
//!
//! # Threads
//! Any caller; the shard lock is held to collect or check candidates, never across a read.
use flashtier_flash::Location;

use crate::engine::Inner;
use crate::flash_tier::kv_record::FlashItem;
use crate::flash_tier::{flash_err, is_corrupt, packed_of};
use crate::ram::index::{Entry, Pos, Shard, Tier};
use crate::ram::record::{F_STALE, F_WIN};
use crate::stats::Counters;
use crate::{Error, Item, ItemMeta};

/// What phase 1 saw and read.
#[derive(Debug, Default)]
pub(crate) struct View {
    /// Packed locations of the tag-matching flash slots, in probe order.
    pub(crate) cands: Vec<u64>,
    /// The candidate holding the key, decoded.
    pub(crate) found: Option<(u64, FlashItem)>,
    /// Candidates whose read failed.
    pub(crate) failed: Vec<(u64, flashtier_flash::Error)>,
    /// Candidates were not read: all are taken as the key's.
    pub(crate) blind: bool,
}

/// The key's flash state in phase 2.
pub(crate) enum FlashCur {
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

    pub(crate) fn mark_dead_packed(&self, loc: u64) {
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

    pub(crate) fn flash_current(
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
    pub(crate) fn drop_dead_flash(
        &self,
        shard: &mut Shard<'_>,
        hash: u64,
        pos: Pos,
        e: &Entry,
        exptime: u32,
    ) {
        shard.remove(pos);
        self.mark_dead_packed(packed_of(e));
        self.flushed_gone(exptime, hash);
        Counters::add(&self.counters.reclaimed, 1);
        if e.freq == 0 {
            Counters::add(&self.counters.expired_unfetched, 1);
        }
    }
}
