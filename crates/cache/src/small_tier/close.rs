//! The small tier's part of a clean shutdown (`Cache::close`, after the flash log's): every
//! live RAM item the tier would keep and the flash log did not take (no flash copy, no older
//! version on flash) moves to the tier as a RAM eviction would move it (its slot goes), then
//! the tier merges everything staged and marks its superblock clean with the cache's CAS
//! counter and delayed `flush_all` (`SmallSets::close`). A restart serves those items as well
//! as the ones already on pages.
//!
//! Invariants kept: a key the tier holds has no index slot (so a write after the close still
//! removes its copy, which also reopens the superblock), and no version in the flash log (so
//! the two tiers a restart rebuilds never hold two versions of one key).
//!
//! # Threads
//! The closing caller; one shard lock at a time, the tier's locks below it (leaves).
use super::Small;
use crate::engine::Core;
use crate::ram::index::Tier;
use crate::Error;

impl Core {
    /// Move the small RAM items to the tier and close it cleanly. Idempotent; does nothing
    /// when the tier is off.
    pub(crate) fn close_small(&self) -> Result<(), Error> {
        let Small::On { sets, .. } = &self.small else {
            return Ok(());
        };
        if sets.is_closed() {
            return Ok(());
        }
        let now = self.now();
        let keeps = |e: &crate::ram::index::Entry| {
            e.tier == Tier::Ram
                && self.ram.record(e.loc).is_some_and(|r| {
                    let h = &r.header;
                    self.small.qualifies(&r) && !self.meta.dead_at(h.exptime, h.stored, now)
                })
        };
        let (mut moved, mut refused) = (0u64, 0u64);
        let mut key = Vec::new();
        for i in 0..self.slots.shard_count() {
            let mut hashes = Vec::new();
            self.slots.lock_nth(i).for_each(|e| {
                if keeps(&e) {
                    if let Some(r) = self.ram.record(e.loc) {
                        r.read_key(&mut key);
                        hashes.push(self.slots.hash(&key));
                    }
                }
            });
            hashes.sort_unstable();
            hashes.dedup();
            for hash in hashes {
                let mut shard = self.slots.lock(hash);
                let mut skip = Vec::new();
                while let Some((pos, e)) = shard.find(hash, |e| keeps(&e) && !skip.contains(&e.loc))
                {
                    let Some(rec) = self.ram.record(e.loc) else {
                        break;
                    };
                    rec.read_key(&mut key);
                    // A refusal is a full staging buffer: merge it and offer once more.
                    let taken = self.small.take(&rec, &key) || {
                        sets.flush_staged();
                        self.small.take(&rec, &key)
                    };
                    if taken {
                        self.ram.unlink(&self.env(), &mut shard, pos, &rec.header);
                        moved += 1;
                    } else {
                        skip.push(e.loc);
                        refused += 1;
                    }
                }
            }
        }
        if refused > 0 {
            log::warn!(
                "shutdown: the small tier refused {refused} RAM items; a restart misses them"
            );
        }
        let closed = sets.close(self.meta.last_cas(), self.meta.flush_at());
        match &closed {
            Ok(()) => {
                log::info!("shutdown: small tier closed cleanly ({moved} RAM items moved to it)")
            }
            Err(e) => {
                log::error!(
                    "shutdown: small tier not closed cleanly ({e}); a restart treats it as killed"
                )
            }
        }
        closed.map_err(|e| Error::Small(e.to_string()))
    }
}
