//! Phase 1 of every operation: note the key's tag-matching flash slots (the *candidates*)
//! under its shard lock, unlock, and read them until one holds the key. A record of another
//! key (a tag collision) is skipped; failed reads are kept for phase 2's re-check
//! ([`FlashTier::recheck`]), which drops a slot whose record is gone for good (checksum, freed
//! segment) and fails the request on any other error. A key found in RAM reads nothing.
//!
//! A *blind* view (a SET that needs no old CAS, a delete) needs no item, only the slots to
//! take as the key's. How it gets them depends on how many bits of the key's hash the index
//! compares (`Index::hash_bits`: 10 shard bits, a 24-bit tag and the check bits the
//! locations leave free; issue 26's 7-slot buckets):
//! - at least [`UNCHECKED_HASH_BITS`] (41, the 6-slot index's shard + 31-bit tag; any
//!   device set under 64 GiB with a RAM limit under 16 GiB): every candidate is taken
//!   unread. Another key's item is then lost about once per 2^(bits − 10) keys per shard —
//!   no more often than before issue 26 — never served.
//! - fewer (a larger flash, or `index_loc_bits` set): every candidate is read and only those
//!   whose record holds the key (header hash and key compared) are taken, or whose read
//!   failed (at worst another key's item is lost, never served). Unread, such a narrower
//!   match would lose other keys' items up to 128 times as often (a 300k-key fill lost 4 with
//!   a 23-bit tag and no check bits). A key not on flash usually has no candidate and reads
//!   nothing; an overwrite or delete of a key on flash pays one read
//!   (`extstore_write_check_reads`).
//!
//! # Threads
//! Any caller; the shard lock is held only to collect the candidates, never across a read.
use flashtier_flash::{Location, Record};

use crate::flash_tier::kv_record::FlashItem;
use crate::flash_tier::tier::FlashTier;
use crate::flash_tier::{flash_err, is_corrupt, RamAccess};
use crate::meta::Counters;
use crate::ram::index::{Entry, Pos, Shard, Tier};
use crate::Error;

/// A blind view takes tag-matching flash slots unread when the index compares at least this
/// many bits of the hash (see the module docs).
pub(crate) const UNCHECKED_HASH_BITS: u32 = 41;

/// Flash reads in flight at once in [`FlashTier::read_batch`].
const READ_BATCH: usize = 64;

/// What phase 1 saw and read.
#[derive(Debug, Default)]
pub(crate) struct View {
    /// Packed locations of the tag-matching flash slots, in probe order.
    pub(crate) cands: Vec<u64>,
    /// The candidate holding the key, decoded.
    pub(crate) found: Option<(u64, FlashItem)>,
    /// Candidates whose read failed.
    pub(crate) failed: Vec<(u64, flashtier_flash::Error)>,
    /// A blind view: no item wanted; `taken` are the candidates to take as the key's (all of
    /// them, or, with a narrow index, those whose record holds the key or could not be read).
    pub(crate) blind: bool,
    /// In a blind view, the candidates to take.
    pub(crate) taken: Vec<u64>,
    /// What phase 1 saw of the small-object tier (`small_tier`), when it is on.
    pub(crate) small: Option<crate::small_tier::SmallSeen>,
    /// The shard's generation (`Shard::generation`) at which phase 1 found the key without
    /// a RAM slot, if it looked: phase 2 finding it unchanged skips its own RAM probe
    /// (`Core::current`).
    pub(crate) not_in_ram: Option<u64>,
}

/// The key's flash slot in phase 2, as [`FlashTier::recheck`] finds it (shard locked).
pub(crate) enum Recheck {
    /// The flash slots changed since phase 1: run it again.
    Retry,
    /// No flash slot holds the key.
    Absent,
    /// Flash slots a blind view takes as the key's (checked, see the module docs); may be
    /// empty.
    Blind(Vec<u64>),
    /// The flash slot phase 1 read the item from, unchanged.
    Found { pos: Pos, e: Entry, item: FlashItem },
}

impl FlashTier {
    /// Whether phase 1 of a read would go to the device now (the key not in RAM, a flash
    /// slot with its tag): a hint only, the index may change before the read runs. The
    /// cache asks `flash_slot` under its own probe; this whole check is for the tier's tests.
    #[cfg(test)]
    pub(crate) fn read_may_wait<R: RamAccess>(&self, ram: &R, key: &[u8], hash: u64) -> bool {
        let shard = ram.slots().lock(hash);
        ram.find_key(&shard, hash, key).is_none() && Self::flash_slot(&shard, hash)
    }

    /// Whether a flash slot has the key's tag (shard locked, the key known not to be in
    /// RAM): phase 1 of a read would go to the device.
    pub(crate) fn flash_slot(shard: &Shard<'_>, hash: u64) -> bool {
        shard.find(hash, |e| e.tier == Tier::Flash).is_some()
    }

    /// Phase 1: see the module docs. `read` false gives a blind view.
    pub(crate) async fn view<R: RamAccess>(
        &self,
        ram: &R,
        key: &[u8],
        hash: u64,
        read: bool,
    ) -> View {
        let cands = {
            let shard = ram.slots().lock(hash);
            if ram.find_key(&shard, hash, key).is_some() {
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
            if ram.slots().hash_bits() >= UNCHECKED_HASH_BITS {
                v.taken = v.cands.clone();
                return v;
            }
            for loc in v.cands.clone() {
                Counters::add(&self.counters.write_check_reads, 1);
                match self.flash.read(Location::unpack(loc)).await {
                    Ok(rec) if rec.header.key_id == hash && rec.key == key => v.taken.push(loc),
                    Ok(_) => Counters::add(&self.counters.collisions, 1),
                    Err(_) => v.taken.push(loc),
                }
            }
            return v;
        }
        for loc in v.cands.clone() {
            match self.flash.read(Location::unpack(loc)).await {
                Ok(rec) => {
                    if let Some(item) = self.decode(&rec, hash, key) {
                        v.found = Some((loc, item));
                        break;
                    }
                }
                Err(e) => v.failed.push((loc, e)),
            }
        }
        v
    }

    /// Phase 2's re-check of `view` (shard of `hash` locked, the key not in RAM): the flash
    /// slot it read, if the tag-matching flash slots are still exactly those phase 1 saw. A
    /// failed candidate read is dropped from the index if the record is gone for good
    /// (checksum, freed segment), else it fails the request unless another candidate held
    /// the key.
    pub(crate) fn recheck(
        &self,
        shard: &mut Shard<'_>,
        hash: u64,
        view: &View,
    ) -> Result<Recheck, Error> {
        let cands = shard.lower_locs(hash);
        if cands != view.cands {
            return Ok(Recheck::Retry);
        }
        if view.blind {
            return Ok(Recheck::Blind(view.taken.clone()));
        }
        for (loc, err) in &view.failed {
            if is_corrupt(err) {
                if shard.remove_lower(hash, *loc) {
                    self.unreadable_item(err);
                }
            } else if view.found.is_none() {
                Counters::add(&self.counters.errors, 1);
                return Err(flash_err(err));
            }
        }
        let Some((loc, item)) = &view.found else {
            return Ok(Recheck::Absent);
        };
        let Some((pos, e)) = shard.find(hash, |e| e.tier == Tier::Flash && e.lower_loc() == *loc)
        else {
            return Ok(Recheck::Retry);
        };
        Ok(Recheck::Found {
            pos,
            e,
            item: item.clone(),
        })
    }

    /// Read the records at packed `locs` (each with a value passed through to `each`), at
    /// most [`READ_BATCH`] in flight at once (within the engine's read queue bound); a
    /// record that cannot be read is skipped. For the dump commands.
    pub(crate) async fn read_batch(&self, locs: &[(u64, u8)], mut each: impl FnMut(&Record, u8)) {
        let mut reads = Vec::with_capacity(READ_BATCH);
        for chunk in locs.chunks(READ_BATCH) {
            reads.clear();
            for &(packed, freq) in chunk {
                reads.push((self.flash.read(Location::unpack(packed)), freq));
            }
            for (read, freq) in reads.drain(..) {
                if let Ok(rec) = read.await {
                    each(&rec, freq);
                }
            }
        }
    }

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

#[cfg(test)]
mod tests {
    use crate::flash_tier::testing::{open, put_flash};

    #[test]
    fn a_read_may_wait_only_for_a_key_on_flash_and_not_in_ram() {
        let (tier, ram) = open("read-may-wait", |_| {});
        let h = |k: &[u8]| ram.slots.hash(k);
        assert!(!tier.read_may_wait(&ram, b"absent", h(b"absent")));
        put_flash(&tier, &ram, b"f", &[7u8; 100], 0);
        assert!(tier.read_may_wait(&ram, b"f", h(b"f")), "only on flash");
        ram.put_ram(h(b"r"), b"r", b"v", 0);
        assert!(!tier.read_may_wait(&ram, b"r", h(b"r")), "in RAM");
        ram.put_ram(h(b"f"), b"f", b"newer", 0);
        assert!(
            !tier.read_may_wait(&ram, b"f", h(b"f")),
            "a RAM version wins"
        );
    }
}
