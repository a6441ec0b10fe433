//! Phase 1 of every operation: note the key's tag-matching flash slots (the *candidates*)
//! under its shard lock, unlock, and read them until one holds the key. A record of another
//! key (a tag collision) is skipped; failed reads are kept for phase 2 (`ops::current`), which
//! drops a slot whose record is gone for good (checksum, freed segment) and fails the request
//! on any other error. A key found in RAM reads nothing. A *blind* view (a SET that needs no
//! old CAS, a delete) reads nothing and takes every candidate as the key's: another key's item
//! is then lost (about once per 2^31 keys per shard, with 41 bits of hash in shard + tag),
//! never served.
//!
//! # Threads
//! Any caller; the shard lock is held only to collect the candidates, never across a read.
use flashtier_flash::{Location, Record};

use crate::engine::Core;
use crate::flash_tier::kv_record::FlashItem;
use crate::flash_tier::FlashTier;
use crate::meta::Counters;

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

impl Core {
    /// Phase 1: see the module docs. `read` false gives a blind view.
    pub(crate) async fn view(&self, key: &[u8], hash: u64, read: bool) -> View {
        let Some(tier) = &self.flash_tier else {
            return View::default();
        };
        let cands = {
            let shard = self.slots.lock(hash);
            if self.find_key(&shard, hash, key).is_some() {
                return View::default();
            }
            shard.lower_locs(hash)
        };
        let mut v = View {
            cands,
            ..View::default()
        };
        if !read {
            v.blind = true;
            return v;
        }
        for loc in v.cands.clone() {
            match tier.flash.read(Location::unpack(loc)).await {
                Ok(rec) => {
                    if let Some(item) = tier.decode(&rec, hash, key) {
                        v.found = Some((loc, item));
                        break;
                    }
                }
                Err(e) => v.failed.push((loc, e)),
            }
        }
        v
    }
}

impl FlashTier {
    /// The item a record read for `key` (hash `key_id`) holds: `None` if it is another
    /// key's (a tag collision, counted).
    fn decode(&self, rec: &Record, key_id: u64, key: &[u8]) -> Option<FlashItem> {
        Counters::add(&self.counters.objects_read, 1);
        let item = FlashItem::decode(rec).filter(|i| rec.header.key_id == key_id && i.key == key);
        match &item {
            Some(i) => Counters::add(&self.counters.bytes_read, i.value.len() as u64),
            None => Counters::add(&self.counters.collisions, 1),
        }
        item
    }
}
