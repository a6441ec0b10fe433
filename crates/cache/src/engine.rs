//! [`Cache`], the real store's handle, and `Core`, the state its components share: the
//! index, the RAM arena and ghost set, the flash tier when configured, the CAS counter and a
//! pending delayed `flush_all`. Opening recovers the flash tier into the index before the
//! cache is shared. What lives here is what every component needs: liveness (expiry and
//! `flush_all`), removing an item's slot, and `flush_all` itself. The operations are in
//! `ops`, the RAM tier in `ram`, the flash tier in `flash_tier`.
//!
//! # Threads
//! Any number of callers; the sweeper and write-back threads hold an `Arc<Core>` and are
//! stopped when the `Cache` is dropped, the engine's reclaimer reaches it through a `Weak`
//! behind the reclaim handler's gate. Lock order: `AllocState` → index shard → arena head;
//! the flash engine's locks are leaves.
use std::sync::atomic::Ordering;
use std::sync::Arc;

use flashtier_flash::Flash;

use crate::config::{CacheConfig, FlashDevices, StartError};
use crate::flash_tier::kv_record::KvRecord;
use crate::flash_tier::reclaim::Handler;
use crate::flash_tier::recovery::Recovered;
use crate::flash_tier::{entry_of, FlashTier, STREAM};
use crate::knobs::Tiering;
use crate::ledger::Cause;
use crate::meta::{Counters, Meta};
use crate::ram::index::{Entry, Index, Pos, Shard, Tier};
use crate::ram::lower::{LowerTier, NoLower};
use crate::ram::record::Header;
use crate::ram::sweeper::Sweeper;
use crate::ram::tier::{Env, RamTier};
use crate::Error;

/// State shared by callers and the sweeper.
pub(crate) struct Core {
    pub cfg: CacheConfig,
    /// The one index of both tiers: a key's slot names its tier.
    pub slots: Index,
    /// The RAM tier: arena, ghost set, eviction policy, sweeper pass.
    pub ram: RamTier,
    /// CAS, flush time, departure ledger, counters.
    pub meta: Meta,
    /// The flash tier, if configured.
    pub flash_tier: Option<FlashTier>,
}

/// The real store: the RAM tier, and the flash tier under it when `CacheConfig::flash` is
/// set.
///
/// # Using the real store
/// ```no_run
/// use flashtier_cache::{Cache, CacheConfig, ItemWrite, KvStore};
/// let cfg = CacheConfig::builder()
///     .memory_limit(1 << 30)      // bytes of item memory (`-m`)
///     .max_item_size(1 << 20)     // largest value (`-I`)
///     .build()?;                  // validates
/// let cache = Cache::new(cfg)?;   // starts the sweeper thread
/// let cas = cache.set_now(b"k", ItemWrite::new("v".into(), 0, 0))?;
/// # let _ = cas;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
/// [`Cache`] implements [`KvStore`](crate::KvStore). Without flash its futures complete on the first poll;
/// with flash (`CacheConfig::flash`, see [`FlashSettings`](crate::FlashSettings)) a GET or UPDATE of a
/// flash-resident item awaits one flash read.
///
/// # With flash
/// ```no_run
/// use flashtier_cache::{Cache, CacheConfig, FlashSettings};
/// let cfg = CacheConfig::builder()
///     .memory_limit(64 << 20)
///     .flash(FlashSettings::parse(&["/var/tmp/cache.flash:2GiB"])?)
///     .build()?;
/// let cache = Cache::new(cfg)?;   // formats a blank file, or recovers what is on it
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
/// `get_now`/`set_now`/`update_now`/`delete_now` are the same operations without `async`.
/// `stats_section` answers `items`, `slabs` (segments) and `settings`.
pub struct Cache {
    pub(crate) core: Arc<Core>,
    sweeper: Option<Sweeper>,
    /// The write-back thread (`writeback`), with flash.
    writeback: Option<Sweeper>,
    /// The back-pressure gate's thread (`flash_tier::backpressure`), with flash.
    gate: Option<crate::flash_tier::backpressure::GateThread>,
    handler: Option<Arc<Handler>>,
}

impl Drop for Cache {
    fn drop(&mut self) {
        // Stop the sweeper, then the flash engine's threads, while `core` is still alive:
        // the reclaimer must never hold the last reference to it.
        drop(self.sweeper.take());
        drop(self.writeback.take());
        let _ = self.close();
        // After `close`: its write-back of dirty versions still awaits room.
        drop(self.gate.take());
        if let Some(h) = &self.handler {
            h.close();
        }
    }
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("memory_limit", &self.core.cfg.memory_limit)
            .field("segment_bytes", &self.core.ram.mem_used())
            .field("items", &self.core.slots.len())
            .finish_non_exhaustive()
    }
}

impl Cache {
    /// A cache with `cfg` (validated here); starts the sweeper thread if configured.
    pub fn new(cfg: CacheConfig) -> Result<Self, StartError> {
        cfg.validate().map_err(StartError::Config)?;
        let mut seed = cfg.hash_seed;
        let mut opened = None;
        let mut engine_reserve = 0;
        let mut hot_stream = crate::flash_tier::STREAM;
        let handler = cfg.flash.as_ref().map(|_| Arc::new(Handler::new()));
        if let (Some(settings), Some(handler)) = (&cfg.flash, &handler) {
            let mut rec = Recovered::default();
            let engine = settings.engine_config();
            engine_reserve = engine.reserve_segments;
            hot_stream = crate::flash_tier::hot_stream(&engine);
            let tiering = Tiering::new(settings, engine.free_high_watermark);
            let h: Arc<dyn flashtier_flash::ReclaimHandler> = handler.clone();
            let res = match &settings.devices {
                FlashDevices::Specs(specs) => {
                    Flash::open_specs(specs, engine, h, |m| rec.on_record(m))
                }
                FlashDevices::Devices(devs) => {
                    Flash::open(devs.clone(), engine, h, |m| rec.on_record(m))
                }
            };
            let (flash, info) = match res {
                Ok(v) => v,
                Err(e) => {
                    handler.close();
                    return Err(StartError::Flash(e));
                }
            };
            seed = info.hash_seed;
            let journal = info.journal.clone().unwrap_or_default();
            for e in &journal.entries {
                rec.on_journal(e);
            }
            let mut rebuilt = rec.finish(cfg.clock.now());
            let cold = info.journal.is_some() && !journal.trusted;
            if cold {
                log::warn!(
                    "flash tier: starting empty: {} (the flash tier holds {} items that could \
                     be stale)",
                    journal.why,
                    rebuilt.items.len()
                );
                rebuilt.go_cold();
            }
            opened = Some((flash, info, rebuilt, tiering, cold));
        }
        // Index tables start at 2 buckets per shard (staggered up to 2.5).
        let index = Index::new(cfg.index_shards, seed, 2);
        let mut next_cas = 0;
        let mut flush_at = None;
        let tier = opened.map(|(flash, info, rebuilt, tiering, cold)| {
            for &(key_id, loc) in &rebuilt.items {
                index.lock(key_id).insert(key_id, entry_of(loc, 0));
            }
            for &loc in &rebuilt.dead {
                flash.mark_dead(loc);
            }
            next_cas = rebuilt.max_version;
            flush_at = rebuilt.flush_at;
            let mut tier = FlashTier::new(
                flash,
                info,
                rebuilt.max_version,
                tiering,
                engine_reserve,
                cfg.clock.clone(),
            );
            tier.hot_stream = hot_stream;
            tier.last_marker
                .store(rebuilt.last_marker, Ordering::Relaxed);
            tier.last_delayed
                .store(rebuilt.last_delayed, Ordering::Relaxed);
            Counters::add(&tier.counters.recovered, rebuilt.items.len() as u64);
            Counters::add(&tier.counters.journal_cold_starts, u64::from(cold));
            let replayed = crate::flash_tier::recovery::replay(&tier, &rebuilt);
            (tier, replayed)
        });
        let tier = match tier {
            Some((tier, Ok(()))) => Some(tier),
            Some((tier, Err(e))) => {
                let _ = tier.flash.close();
                if let Some(h) = &handler {
                    h.close();
                }
                return Err(StartError::Flash(e));
            }
            None => None,
        };
        let core = Arc::new(Core {
            slots: index,
            ram: RamTier::new(&cfg),
            meta: Meta::new(cfg.clock.clone(), 2 * cfg.ghost_len(), next_cas, flush_at),
            flash_tier: tier,
            cfg,
        });
        if let Some(h) = &handler {
            h.ready(Arc::downgrade(&core));
        }
        let sweeper = match core.cfg.sweep_interval {
            Some(every) => match Sweeper::spawn_fn("flashtier-sweeper", every, {
                let core = core.clone();
                move || {
                    core.sweep();
                }
            }) {
                Ok(s) => Some(s),
                Err(e) => {
                    if let Some(tier) = &core.flash_tier {
                        let _ = tier.flash.close();
                    }
                    return Err(StartError::Sweeper(e));
                }
            },
            None => None,
        };
        let writeback = crate::flash_tier::writeback::spawn(&core).map_err(StartError::Sweeper)?;
        let gate = crate::flash_tier::backpressure::GateThread::spawn(&core)
            .map_err(StartError::Sweeper)?;
        Ok(Self {
            core,
            sweeper,
            writeback,
            gate,
            handler,
        })
    }

    /// The shared state, for unit tests that drive a request's phases by hand.
    #[cfg(test)]
    pub(crate) fn core(&self) -> &Core {
        &self.core
    }

    /// The flash engine, when flash is configured (knobs: `flash().set_knob(..)`; durability
    /// barrier: `flash().flush()`; reclaim by hand: `flash().reclaim_now(..)`).
    pub fn flash(&self) -> Option<&Flash> {
        self.core.flash_tier.as_ref().map(|tier| &tier.flash)
    }

    /// Record the CAS counter on flash, flush flash and stop its threads (a clean shutdown).
    /// Idempotent. Later writes fail with
    /// `Error::Flash`. Without flash, does nothing.
    pub fn close(&self) -> Result<(), Error> {
        match &self.core.flash_tier {
            Some(tier) if tier.closed.swap(true, Ordering::SeqCst) => Ok(()),
            Some(tier) => {
                self.core.write_all_at_close();
                let cas = self.core.meta.last_cas();
                tier.append(STREAM, &KvRecord::CasCheckpoint { cas });
                tier.flash.close().map_err(|e| Error::Flash(e.to_string()))
            }
            None => Ok(()),
        }
    }

    /// The last CAS value handed out (new items get larger ones). After a warm restart it is
    /// the largest version recovered from flash.
    pub fn last_cas(&self) -> u64 {
        self.core.meta.last_cas()
    }

    /// Items whose only copy is on flash right now (walks the index; for tests and tools).
    pub fn flash_items(&self) -> u64 {
        let mut n = 0;
        for i in 0..self.core.slots.shard_count() {
            n += self.core.slots.lock_nth(i).count_tier(Tier::Flash) as u64;
        }
        n
    }

    /// The configuration in force.
    pub fn config(&self) -> &CacheConfig {
        &self.core.cfg
    }

    /// Run one sweeper pass now: free or compact segments that are mostly expired or dead.
    /// Returns how many segments were swept.
    pub fn sweep(&self) -> usize {
        self.core.sweep()
    }

    /// Bytes of RAM the index tables occupy.
    pub fn index_bytes(&self) -> u64 {
        self.core.slots.memory_bytes()
    }

    /// Change the RAM limit at run time (memcached's `cache_memlimit`), in bytes, rounded down
    /// to whole segments. Raising it lets the arena take more segments; lowering it stops
    /// taking new ones and withholds segments freed by eviction until the store holds no more
    /// than the new limit (their memory is kept for reuse, not returned to the allocator).
    /// Fails, changing nothing, below two segments or above the larger of the start limit and
    /// `arena::MAX_LIMIT` (1 TiB).
    pub fn set_memory_limit(&self, bytes: u64) -> Result<(), Error> {
        self.core.ram.set_limit(bytes)
    }

    /// The RAM limit in force, in bytes (whole segments).
    pub fn memory_limit(&self) -> u64 {
        self.core.ram.limit()
    }

    /// Bytes of segment memory allocated (the quantity the memory limit bounds).
    pub fn segment_bytes(&self) -> u64 {
        self.core.ram.mem_used()
    }
}

impl Core {
    pub fn now(&self) -> u32 {
        self.meta.now()
    }

    /// What the RAM tier works with: the index, the metadata and the tier below.
    pub(crate) fn env(&self) -> Env<'_, dyn LowerTier + '_> {
        Env {
            slots: &self.slots,
            meta: &self.meta,
            lower: self.lower(),
        }
    }

    /// One sweeper pass over the RAM tier (see `ram::sweeper`).
    pub(crate) fn sweep(&self) -> usize {
        self.ram.sweep(&self.env())
    }

    /// True when the record can no longer be seen: expired or flushed.
    pub fn dead(&self, h: &Header, now: u32) -> bool {
        self.meta.dead_at(h.exptime, h.stored, now)
    }

    pub(crate) fn find_key(
        &self,
        shard: &Shard<'_>,
        hash: u64,
        key: &[u8],
    ) -> Option<(Pos, Entry)> {
        self.ram.find_key(shard, hash, key)
    }

    /// The tier below RAM: the flash tier, or one that does nothing.
    pub(crate) fn lower(&self) -> &dyn LowerTier {
        match &self.flash_tier {
            Some(tier) => tier,
            None => &NoLower,
        }
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
        self.lower().forget(e.lower_loc());
        self.lower().cover_if_flushed(hash, exptime, self.now());
        self.meta.departed(hash, Cause::Expired, e.freq > 0);
    }

    /// `flush_all [delay]`; returns once its marker is journaled (`flash_tier::journal`),
    /// so a restart never serves what it flushed.
    pub fn flush_all(&self, at: u32) {
        let _ = crate::flash_tier::journal::take_owed();
        self.flush_all_now(at);
        let owed = crate::flash_tier::journal::take_owed();
        if let Err(e) = crate::block::block_on(self.settle(owed)) {
            log::error!("flush_all: its marker could not be made durable: {e}");
        }
    }

    fn flush_all_now(&self, at: u32) {
        let now = self.now();
        if at > now {
            self.meta.flush_later(at);
            self.lower().flush(at);
            return;
        }
        self.meta.flush_now();
        let env = self.env();
        for i in 0..self.slots.shard_count() {
            let mut shard = self.slots.lock_nth(i);
            shard.drain(|e| match e.tier {
                Tier::Ram => self.ram.forget_slot(&env, e.loc),
                Tier::Flash => self.lower().forget(e.lower_loc()),
            });
        }
        self.lower().flush(0);
    }
}
