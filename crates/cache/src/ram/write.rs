//! The RAM tier's write primitives: pick the CAS and the log, check sizes, build the record
//! header, reserve arena space, publish the written record in the index (replacing the key's
//! old slot), and give unused space back. Every write path goes reserve → write → publish
//! under the key's shard lock: SET, UPDATE (phase 2 decides there) and a promotion at hit time
//! bump and write under that lock, SET and UPDATE reserving the slow way (which may evict)
//! with no lock; a deferred promotion reserves and writes with no lock.

use crate::ram::arena::{Log, Space};

use crate::config::EvictionPolicy;
use crate::engine::Core;
use crate::meta::Counters;
use crate::ram::index::{self, Entry, Pos, Shard, Tier};
use crate::ram::record::{self, Header, F_STALE, F_WIN};
use crate::{Error, ItemWrite};

/// The slot a write replaces.
pub(crate) enum Existing {
    /// A RAM record.
    Ram(Pos, Entry),
    /// A lower-tier slot whose record was read and holds the key.
    Lower(Pos, Entry),
    /// Lower-tier slots taken as the key's without reading them (their packed locations; see
    /// `flash_tier::read` on blind views).
    Blind(Vec<u64>),
}

impl Core {
    pub(crate) fn check_size(&self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        if value.len() > self.cfg.max_item_size {
            return Err(Error::TooLarge {
                size: value.len(),
                max: self.cfg.max_item_size,
            });
        }
        if key.len() > record::MAX_KEY {
            return Err(Error::TooLarge {
                size: key.len(),
                max: record::MAX_KEY,
            });
        }
        Ok(())
    }

    pub(crate) fn target_log(&self, hash: u64) -> Log {
        if self.cfg.eviction == EvictionPolicy::S3Fifo && self.ghost.take(hash) {
            Log::Main
        } else {
            Log::Small
        }
    }

    pub(crate) fn new_header(w: &ItemWrite, klen: usize, now: u32, cas: u64) -> Header {
        let mut rflags = 0;
        if w.meta.stale {
            rflags |= F_STALE;
        }
        if w.meta.win_token_sent {
            rflags |= F_WIN;
        }
        Header {
            cas,
            exptime: w.exptime,
            flags: w.flags,
            vlen: w.value.len() as u32,
            stored: now,
            last_access: now,
            klen: klen as u16,
            rflags,
            home: 0,
        }
    }

    /// Reserve space for a record, blocking on allocation/eviction if needed (never on the
    /// tier below: an eviction it cannot take now is kept in RAM or dropped).
    pub(crate) fn reserve(&self, log: Log, words: usize) -> Result<Space, Error> {
        self.reserve_for(log, words, false)
    }

    /// [`Self::reserve`]; with `stall`, an eviction the tier below cannot take now stops it
    /// with `Error::FlashBusy` (nothing lost; the caller awaits room holding no lock and
    /// tries again).
    pub(crate) fn reserve_for(&self, log: Log, words: usize, stall: bool) -> Result<Space, Error> {
        if words > self.arena.large_threshold() {
            return self.obtain_large(words, log, stall);
        }
        loop {
            if let Some(s) = self.arena.try_bump(log, words) {
                return Ok(s);
            }
            self.advance(log, words, stall)?;
        }
    }

    /// Give back a reservation that will not be published.
    pub(crate) fn abandon(&self, space: Option<Space>) {
        let Some(space) = space else { return };
        if space.large {
            let mut alloc = self.arena.state.lock();
            self.arena.finish(space);
            self.arena.free_large(&mut alloc, space.seg);
        } else {
            if let Some(m) = self.arena.mem(space.seg) {
                record::write_filler(m, space.off, space.words);
            }
            self.arena.finish(space);
        }
    }

    /// Publish the record in `space` for `hash`, replacing `existing`. Shard lock held.
    pub(crate) fn publish(
        &self,
        shard: &mut Shard<'_>,
        hash: u64,
        existing: Option<Existing>,
        space: &Space,
        h: &Header,
    ) {
        let loc = self.arena.loc(space.seg, space.off);
        let mut entry = Entry {
            tier: Tier::Ram,
            freq: 0,
            size_hint: index::size_hint(space.words * 8),
            loc,
        };
        match existing {
            Some(Existing::Ram(pos, old)) => {
                if let Some(r) = self.arena.record(old.loc) {
                    self.release_rec(old.loc, &r.header);
                }
                entry.freq = old.freq;
                shard.set(pos, entry);
            }
            Some(Existing::Lower(pos, old)) => {
                self.lower().forget(old.lower_loc());
                entry.freq = old.freq;
                shard.set(pos, entry);
            }
            Some(Existing::Blind(locs)) => {
                for l in locs {
                    if self.remove_flash_loc(shard, hash, l) {
                        self.lower().forget(l);
                    }
                }
                shard.insert(hash, entry);
            }
            None => shard.insert(hash, entry),
        }
        self.arena
            .slot(space.seg)
            .note_publish(space.words, h.exptime, h.stored);
        Counters::add(&self.meta.counters.live_bytes, (space.words * 8) as u64);
        Counters::add(&self.meta.counters.total_items, 1);
    }

    /// After publishing (shard lock released): queue a large segment, end the reservation.
    pub(crate) fn finish(&self, space: Space) {
        if space.large {
            let mut alloc = self.arena.state.lock();
            self.arena.enqueue_large(&mut alloc, space.seg, space.log);
        }
        self.arena.finish(space);
    }
}
