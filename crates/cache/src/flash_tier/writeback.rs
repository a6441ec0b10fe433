//! [`WriteBack`]: a stored version reaches flash when RAM evicts it or when it has been dirty
//! for the `write_back_ms` window, whichever comes first (0 = write-through at SET). A dirty
//! version's home word holds the time it became dirty (kept across overwrites, so a key
//! overwritten nonstop still reaches flash once per window) and whether an older version may
//! be on flash (then a delete, or an expiry before write-back, appends a tombstone). The first
//! version to turn a key dirty queues `(since, hash)` (`dirty`); a pass appends every RAM
//! version of that hash still dirty since then. A failed append clears the dirty bit (retried
//! at eviction). At a clean shutdown it also appends every RAM version without a flash copy.
//! The crash rule: docs/eviction.md.
//!
//! A component over the tier and the RAM it reaches ([`RamAccess`]): it reads RAM records
//! and rewrites their home words, nothing else of RAM.
//!
//! # Threads
//! The `flashtier-writeback` thread (every [`PASS_EVERY`]) and `Cache::close`; one shard lock
//! at a time, as a SET appends, the flash engine's lock a leaf below it. Back-pressure is
//! waited out on this thread before the lock is taken, never under it.
use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::flash_tier::kv_record::{KvRecord, Put, PutValue};
use crate::flash_tier::tier::{FlashTier, Host};
use crate::flash_tier::{home_word, RamAccess, STREAM};
use crate::meta::Counters;
use crate::ram::index::Tier;
use crate::ram::record::{Header, HOME_OLDER};
use crate::ram::sweeper::Sweeper;

/// How often the write-back thread looks for due versions.
pub(crate) const PASS_EVERY: Duration = Duration::from_millis(100);
/// How long a clean shutdown waits, in all, for flash to take what RAM holds unwritten when it
/// refuses appends for back-pressure.
pub(crate) const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// At most this many walks over the index at a clean shutdown for RAM versions without a
/// flash copy (a walk appends them; reclaim under way may free a few more meanwhile).
const HOMELESS_WALKS: usize = 8;

/// Run `step` until it reports done or `deadline` passes, pausing 5 ms between tries (flash
/// back-pressure at shutdown). True if it finished.
fn until_done(deadline: Instant, mut step: impl FnMut() -> bool) -> bool {
    loop {
        if step() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Start the write-back thread of `host`'s flash tier (with flash only).
pub(crate) fn spawn<H: Host>(host: &Arc<H>) -> std::io::Result<Option<Sweeper>> {
    if host.parts().is_none() {
        return Ok(None);
    }
    let h = host.clone();
    Sweeper::spawn_fn("flashtier-writeback", PASS_EVERY, move || {
        if let Some((tier, ram)) = h.parts() {
            WriteBack::new(tier, ram).pass();
        }
    })
    .map(Some)
}

/// Write-back over `tier` and the RAM it reaches (see the module docs).
pub(crate) struct WriteBack<'a, R> {
    tier: &'a FlashTier,
    ram: &'a R,
    /// Buffers a pass reuses for every key it appends (none allocated per item).
    scratch: Cell<Scratch>,
}

/// A pass's reused buffers: the key being appended, and the RAM versions of its hash done.
#[derive(Default)]
struct Scratch {
    key: Vec<u8>,
    done: Vec<u64>,
}

impl<'a, R: RamAccess> WriteBack<'a, R> {
    pub(crate) fn new(tier: &'a FlashTier, ram: &'a R) -> Self {
        Self {
            tier,
            ram,
            scratch: Cell::default(),
        }
    }

    /// Append every dirty version that became dirty at or before `cutoff` (unix ms;
    /// `u64::MAX` = all). A version flash refuses for back-pressure stays dirty and queued
    /// (first in line) and the pass ends: the next one waits for room and tries again, so a
    /// busy flash delays write-back but never drops it. Returns how many were appended.
    pub(crate) fn due(&self, cutoff: u64) -> usize {
        let tier = self.tier;
        let mut n = 0;
        while let Some(hash) = tier.dirty.pop_due(cutoff) {
            let (appended, refused) =
                self.append_ram_versions(hash, |h| h.dirty_since().is_some_and(|s| s <= cutoff));
            n += appended;
            if let Some(since) = refused {
                tier.dirty.push_front(since, hash);
                break;
            }
        }
        if n > 0 {
            Counters::add(&tier.counters.written_back, n as u64);
        }
        n
    }

    /// At a clean shutdown: write back every dirty version ([`Self::due`]), then every live
    /// version RAM holds without a flash copy ([`Self::homeless`]), waiting out
    /// back-pressure for at most [`CLOSE_WAIT`] in all. Returns how many were appended.
    pub(crate) fn all_at_close(&self) -> usize {
        let tier = self.tier;
        let deadline = Instant::now() + CLOSE_WAIT;
        let mut n = 0;
        until_done(deadline, || {
            n += self.due(u64::MAX);
            tier.dirty.len() == 0
        });
        let left = tier.dirty.len();
        if left > 0 {
            log::error!(
                "shutdown: flash kept refusing writes for {} s; {left} dirty versions were not \
                 written and a restart will not find them",
                CLOSE_WAIT.as_secs()
            );
        }
        n + self.homeless(deadline)
    }

    /// At a clean shutdown: append every live version RAM holds without a flash copy — reclaim
    /// dropped it (`ram_exclusive`), or its append was refused (back-pressure, no device
    /// taking writes) — so a warm restart finds it. Values under the `item_size` knob stay
    /// RAM-only as always; back-pressure is waited out until `deadline`. Returns how many
    /// were appended.
    fn homeless(&self, deadline: Instant) -> usize {
        let tier = self.tier;
        // Reclaim keeps flash copies of RAM items once closing starts, but it may still
        // evict one past the engine's keep limit after a walk passed its shard. So: walk
        // while reclaim makes room for these appends, then pause reclaim and walk again
        // for what it took meanwhile (the room it left is enough for a few).
        let (mut n, _) = self.homeless_walks(deadline);
        tier.flash.pause_reclaim();
        // The last walks try again whatever the first left: their count is what is lost.
        let (more, left) = self.homeless_walks(deadline);
        n += more;
        if left > 0 {
            log::error!(
                "shutdown: flash kept refusing writes; {left} RAM versions without a flash \
                 copy were not written and a restart will not find them"
            );
        }
        if n > 0 {
            Counters::add(&tier.counters.written_back, n as u64);
        }
        n
    }

    /// [`Self::homeless_walk`] until a walk finds nothing to write (at most
    /// [`HOMELESS_WALKS`], until `deadline`): (versions appended, keys left unwritten).
    fn homeless_walks(&self, deadline: Instant) -> (usize, usize) {
        let (mut n, mut left) = (0, 0);
        for _ in 0..HOMELESS_WALKS {
            let (appended, found, unwritten) = self.homeless_walk(deadline);
            n += appended;
            left = unwritten;
            if found == 0 || Instant::now() >= deadline {
                break;
            }
        }
        (n, left)
    }

    /// One walk of [`Self::homeless`] over every shard: (versions appended, keys found
    /// homeless, keys left unwritten at the deadline).
    fn homeless_walk(&self, deadline: Instant) -> (usize, usize, usize) {
        let slots = self.ram.slots();
        let min = self.tier.tiering.item_size();
        let homeless = |h: &Header| {
            h.home_loc().is_none() && h.dirty_since().is_none() && u64::from(h.vlen) >= min
        };
        let (mut n, mut found, mut left) = (0, 0, 0);
        for i in 0..slots.shard_count() {
            let mut hashes = Vec::new();
            let mut key = Vec::new();
            slots.lock_nth(i).for_each(|e| {
                if e.tier != Tier::Ram {
                    return;
                }
                let Some(r) = self.ram.record(e.loc) else {
                    return;
                };
                if homeless(&r.header) {
                    r.read_key(&mut key);
                    hashes.push(slots.hash(&key));
                }
            });
            hashes.sort_unstable();
            hashes.dedup();
            found += hashes.len();
            for hash in hashes {
                let done = until_done(deadline, || {
                    let (appended, refused) = self.append_ram_versions(hash, homeless);
                    n += appended;
                    refused.is_none()
                });
                left += usize::from(!done);
            }
        }
        (n, found, left)
    }

    /// Append the RAM versions of `hash` whose header passes `due` (each then has a home, or
    /// no home but "older on flash" if flash refused it for good); a dead one only covers its
    /// older flash versions with a tombstone. Returns how many were appended and, if flash
    /// refused one for back-pressure, its dirty time (it and the rest are left as they were).
    fn append_ram_versions(
        &self,
        hash: u64,
        due: impl Fn(&Header) -> bool,
    ) -> (usize, Option<u64>) {
        let mut scratch = self.scratch.take();
        let res = self.append_ram_versions_in(hash, due, &mut scratch);
        self.scratch.set(scratch);
        res
    }

    /// [`Self::append_ram_versions`] with the pass's buffers. Each value is copied once,
    /// from its arena words into the engine's write chunk (`PutValue::Ram`).
    fn append_ram_versions_in(
        &self,
        hash: u64,
        due: impl Fn(&Header) -> bool,
        Scratch { key, done }: &mut Scratch,
    ) -> (usize, Option<u64>) {
        let tier = self.tier;
        if tier.pressured() {
            crate::block::block_on(tier.writable());
        }
        let slots = self.ram.slots();
        let mut n = 0;
        done.clear();
        let shard = slots.lock(hash);
        let now = tier.clock.now();
        loop {
            let found = shard.find(hash, |e| {
                e.tier == Tier::Ram
                    && !done.contains(&e.loc)
                    && self.ram.record(e.loc).is_some_and(|r| due(&r.header))
            });
            let Some((_, e)) = found else { break };
            done.push(e.loc);
            let Some(rec) = self.ram.record(e.loc) else {
                break;
            };
            let h = rec.header;
            let no_home = if h.flash_behind() { HOME_OLDER } else { 0 };
            rec.read_key(key);
            let key_id = slots.hash(key);
            if self.ram.meta().dead_at(h.exptime, h.stored, now) {
                // Expired or flushed before reaching flash: an older flash version must
                // not outlive it (after a restart it would be served).
                if h.flash_behind() {
                    let key = &key[..];
                    tier.append(STREAM, &KvRecord::Tombstone { key_id, key });
                }
                rec.set_home(0);
                continue;
            }
            let value = rec.value_words();
            let put = Put::of(key_id, key, PutValue::Ram(&value), &h);
            let home = match tier.try_append(tier.hot_stream, &KvRecord::Put(put)) {
                Ok(loc) => {
                    n += 1;
                    home_word(loc)
                }
                Err(true) => return (n, Some(h.dirty_since().unwrap_or(0))),
                Err(false) => no_home,
            };
            rec.set_home(home);
        }
        (n, None)
    }

    /// One pass of the write-back thread: versions dirty for the window or longer.
    pub(crate) fn pass(&self) {
        let tier = self.tier;
        let window = tier.tiering.write_back_ms();
        let cutoff = tier.clock.now_ms().saturating_sub(window);
        let n = self.due(cutoff);
        if window == 0 && n > 0 {
            // Write-through: these were refused at their store; do not let them wait
            // another `flush_interval` in a write buffer.
            tier.flash.write_buffers();
        }
    }
}
