//! The flash tier as the RAM tier's [`LowerTier`]. An evicted live item becomes a flash slot
//! at its flash home (rewritten in place by the evictor, under the same shard lock, so readers
//! never see the item missing, and nothing is written); one without a home (its append was
//! skipped or failed, or reclaim dropped the copy) is appended now without waiting: refused
//! for back-pressure it stays in RAM (the evictor copies it), refused otherwise it is dropped. A new version's home is a write-back mark (dirty since when, older version on flash or
//! not) or, in write-through mode, the location it was appended at (a write-through refused
//! for back-pressure gets a write-back mark instead: the write-back pass appends it).
//!
//! # Threads
//! Whichever thread writes or evicts, holding the key's shard lock (and `AllocState` when
//! evicting); the flash engine's lock is a leaf.
use flashtier_flash::Location;

use crate::flash_tier::kv_record::{KvRecord, Put, PutValue};
use crate::flash_tier::tier::{FlashTier, Refused};
use crate::flash_tier::{entry_of, home_word, STREAM};
use crate::meta::Counters;
use crate::ram::arena::RecordRef;
use crate::ram::lower::{LowerTier, NewVersion, Taken};
use crate::ram::record::{dirty_word, F_FETCHED, HOME_OLDER};

/// The frequency a demoted record's flash slot starts with: 1 if it was fetched in RAM.
fn demoted_freq(rflags: u8) -> u8 {
    u8::from(rflags & F_FETCHED != 0)
}

impl LowerTier for FlashTier {
    fn takes_evictions(&self) -> bool {
        true
    }

    fn take_evicted(&self, rec: &RecordRef<'_>, hash: u64, key: &[u8]) -> Taken {
        let h = &rec.header;
        let loc = match h.home_loc() {
            Some(p) => Location::unpack(p),
            None => {
                let value = rec.value_words();
                let put = KvRecord::Put(Put::of(hash, key, PutValue::Ram(&value), h));
                // A cold item (never fetched) is not worth a wait while the write buffers
                // are in flight: it is evicted, as memcached's extstore drops what its
                // write buffers cannot take. With no free segment (reclaim behind) it waits
                // as before: reclaim then drops cold items that are older instead
                // (docs/eviction.md, "Refill over a full flash").
                let cold = h.rflags & F_FETCHED == 0 && self.tiering.evict_when_busy();
                let res = if cold {
                    self.try_append_cold(STREAM, &put)
                } else {
                    self.try_append(STREAM, &put).map_err(|p| {
                        if p {
                            Refused::NoSpace
                        } else {
                            Refused::Other
                        }
                    })
                };
                match res {
                    Ok(loc) => loc,
                    Err(Refused::Busy) if cold => {
                        Counters::add(&self.counters.evictions_flash_busy, 1);
                        return Taken::Drop;
                    }
                    Err(Refused::Busy | Refused::NoSpace) => return Taken::Later,
                    Err(Refused::Other) => return Taken::Drop,
                }
            }
        };
        Counters::add(&self.counters.demoted, 1);
        Taken::Slot(entry_of(loc, demoted_freq(h.rflags)))
    }

    fn deferred(&self) {
        Counters::add(&self.counters.evictions_deferred, 1);
    }

    fn forget(&self, loc: u64) {
        self.flash.mark_dead(Location::unpack(loc));
    }

    fn cover(&self, hash: u64, key: &[u8]) {
        self.append(STREAM, &KvRecord::Tombstone { key_id: hash, key });
    }

    fn cover_or_stall(&self, hash: u64, key: &[u8], stall: bool) -> Option<bool> {
        let rec = KvRecord::Tombstone { key_id: hash, key };
        if self.journaled() {
            // The crash journal takes the tombstone in the same call and appends it to the
            // log again if flash refuses it now (`flash_journal_uncovered`): the write need
            // not wait for flash (docs/eviction.md, "Refill over a full flash").
            let _ = self.append_journaled(STREAM, &rec);
            return Some(true);
        }
        match self.append_or_stall(STREAM, &rec, stall) {
            Ok(_) => Some(true),
            Err(true) if stall => None,
            Err(_) => Some(self.journaled()),
        }
    }

    fn flush(&self, at: u32) {
        // `flush_all` holds no lock here; its marker keeps deleted items from coming back
        // after a restart, so it may wait out back-pressure like before.
        self.append_unlocked(STREAM, &KvRecord::Flush { at });
    }

    fn home_for(&self, v: &NewVersion<'_>) -> u64 {
        Counters::add(&self.counters.bytes_stored, v.value.len() as u64);
        let no_home = if v.older_below { HOME_OLDER } else { 0 };
        let size = v.value.len() as u64;
        if self.tiering.write_back_ms() > 0 && size >= self.tiering.item_size() {
            let since = v
                .dirty_since
                .unwrap_or_else(|| self.dirty.push_now(&self.clock, v.hash));
            return dirty_word(since, v.older_below);
        }
        let put = Put::of(v.hash, v.key, PutValue::Bytes(v.value), v.header);
        match self.try_append(STREAM, &KvRecord::Put(put)) {
            Ok(loc) => home_word(loc),
            // Refused for back-pressure: dirty, so the write-back pass appends it once the
            // engine has room (an acknowledged item does not wait in RAM for its eviction).
            Err(true) => dirty_word(self.dirty.push_now(&self.clock, v.hash), v.older_below),
            Err(false) => no_home,
        }
    }
}
