//! [`Cache`], the real store's handle (its threads), and `Core`, the composition every
//! request runs on: the one index of both tiers (`slots`), the RAM tier (`ram::tier::RamTier`),
//! the tier below (`lower::Lower`: none or the flash tier) and the cache's metadata
//! (`meta::Meta`: CAS, flush time, ledger, counters). Each part owns its state; the core lends
//! RAM what it does not own (`ram::tier::Env`) and lets the flash tier reach RAM through
//! `flash_tier::RamAccess`, which it implements here. Opening recovers the flash tier into the
//! index before the cache is shared (`flash_tier::recovery::open`). What else lives here:
//! `flush_all`, and starting and stopping the threads. The operations are in `ops`.
//!
//! # Threads
//! Any number of callers; the sweeper, write-back and gate threads hold an `Arc<Core>` and
//! are stopped when the `Cache` is dropped, the engine's reclaimer reaches it through a `Weak`
//! behind the reclaim handler's gate. Lock order: `AllocState` → index shard → arena head;
//! the flash engine's locks are leaves.
use std::sync::Arc;

use flashtier_flash::Flash;

use crate::config::{CacheConfig, StartError};
use crate::flash_tier::backpressure::GateThread;
use crate::flash_tier::reclaim::Handler;
use crate::flash_tier::tier::{FlashTier, Host};
use crate::flash_tier::{recovery, CopyAt, RamAccess};
use crate::lower::Lower;
use crate::meta::Meta;
use crate::ram::arena::RecordRef;
use crate::ram::index::{Entry, Index, Pos, Shard, Tier};
use crate::ram::lower::{CopyUp, LowerTier};
use crate::ram::record::Header;
use crate::ram::sweeper::Sweeper;
use crate::ram::tier::{Env, RamTier};
use crate::small_tier::Small;
use crate::Error;

/// The composition every request runs on (see the module docs).
pub(crate) struct Core {
    pub cfg: CacheConfig,
    /// The one index of both tiers: a key's slot names its tier.
    pub slots: Index,
    /// The RAM tier: arena, ghost set, eviction policy, sweeper pass.
    pub ram: RamTier,
    /// The tier below RAM: none, or the flash tier.
    pub lower: Lower,
    /// CAS, flush time, departure ledger, counters.
    pub meta: Meta,
    /// The small-object tier (`small_tier`), off by default.
    pub small: Small,
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
    /// The small tier's write-back thread (`small_tier::writeback`), with the small tier
    /// and a sweeper interval (unit tests without one run it by hand).
    small_wb: Option<Sweeper>,
    /// The back-pressure gate's thread (`flash_tier::backpressure`), with flash.
    gate: Option<GateThread>,
    handler: Option<Arc<Handler<Core>>>,
}

impl Drop for Cache {
    fn drop(&mut self) {
        // Stop the sweeper, then the flash engine's threads, while `core` is still alive:
        // the reclaimer must never hold the last reference to it.
        drop(self.sweeper.take());
        drop(self.writeback.take());
        drop(self.small_wb.take());
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
        let handler = cfg.flash.as_ref().map(|_| Arc::new(Handler::new()));
        let (slots, lower, last_cas, flush_at, replay) = match (&cfg.flash, &handler) {
            (Some(settings), Some(handler)) => {
                let h: Arc<dyn flashtier_flash::ReclaimHandler> = handler.clone();
                match recovery::open(settings, &cfg, h) {
                    Ok(o) => (
                        o.slots,
                        Lower::Flash(o.tier),
                        o.last_cas,
                        o.flush_at,
                        o.replay,
                    ),
                    Err(e) => {
                        handler.close();
                        return Err(StartError::Flash(e));
                    }
                }
            }
            _ => (
                cfg.index(cfg.hash_seed, cfg.ram_loc_bound()),
                Lower::None,
                0,
                None,
                Vec::new(),
            ),
        };
        let small = match Small::open(cfg.small.as_ref()) {
            Ok(s) => s,
            Err(e) => {
                if let Some(tier) = lower.flash() {
                    let _ = tier.engine().close();
                }
                if let Some(h) = &handler {
                    h.close();
                }
                return Err(StartError::Small(e));
            }
        };
        // A small tier that kept its pages continues its CAS counter and delayed `flush_all`
        // too (the later of two flush times covers more: never a flushed item).
        let (last_cas, flush_at) = match small.recovered() {
            Some(r) => (last_cas.max(r.last_cas), flush_at.max(r.flush_at)),
            None => (last_cas, flush_at),
        };
        let mut meta = Meta::new(cfg.clock.clone(), 2 * cfg.ghost_len(), last_cas, flush_at);
        if let Some(store) = small.cas_store() {
            meta = meta.with_cas_store(store);
        }
        let core = Arc::new(Core {
            small,
            slots,
            ram: RamTier::new(&cfg),
            lower,
            meta,
            cfg,
        });
        if let Some(h) = &handler {
            h.ready(Arc::downgrade(&core));
        }
        // The journal's replay appends may need reclaim to free a segment (a crash under a
        // load that outran reclaim leaves the flash at its reserve), and reclaim answers
        // through the handler: so only now, before anything else runs or serves.
        if let Some(tier) = core.lower.flash() {
            if let Err(e) = recovery::replay(tier, &replay) {
                let _ = tier.engine().close();
                if let Some(h) = &handler {
                    h.close();
                }
                return Err(StartError::Flash(e));
            }
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
                    if let Some(tier) = core.lower.flash() {
                        let _ = tier.engine().close();
                    }
                    return Err(StartError::Sweeper(e));
                }
            },
            None => None,
        };
        let writeback = crate::flash_tier::writeback::spawn(&core).map_err(StartError::Sweeper)?;
        let small_wb = match (core.small.is_on(), core.cfg.sweep_interval) {
            (true, Some(_)) => {
                let c = core.clone();
                Some(
                    Sweeper::spawn_fn(
                        "flashtier-small-wb",
                        crate::small_tier::writeback::PASS_EVERY,
                        move || c.small_write_back_pass(),
                    )
                    .map_err(StartError::Sweeper)?,
                )
            }
            _ => None,
        };
        let gate = match core.lower.flash() {
            Some(tier) => {
                let c = core.clone();
                let probe = move || c.parts().is_none_or(|(t, _)| t.takes_appends());
                Some(GateThread::spawn(tier.gate().clone(), probe).map_err(StartError::Sweeper)?)
            }
            None => None,
        };
        Ok(Self {
            core,
            sweeper,
            writeback,
            small_wb,
            gate,
            handler,
        })
    }

    /// The shared state, for unit tests that drive a request's phases by hand.
    #[cfg(test)]
    pub(crate) fn core(&self) -> &Core {
        &self.core
    }

    /// The flash tier, for unit tests (panics without flash).
    #[cfg(test)]
    pub(crate) fn tier(&self) -> &FlashTier {
        self.core.lower.flash().expect("a cache with flash")
    }

    /// The flash engine, when flash is configured (knobs: `flash().set_knob(..)`; durability
    /// barrier: `flash().flush()`; reclaim by hand: `flash().reclaim_now(..)`).
    pub fn flash(&self) -> Option<&Flash> {
        self.core.lower.flash().map(FlashTier::engine)
    }

    /// A clean shutdown: record the CAS counter on flash, flush flash and stop its threads;
    /// then hand the small-object tier the small RAM items with no flash copy and close it
    /// cleanly (`small_tier::close`), so a restart serves both. Idempotent. Later writes fail
    /// with `Error::Flash` (with flash); with neither flash nor the small tier, does nothing.
    pub fn close(&self) -> Result<(), Error> {
        let lower = self.core.lower.close(&*self.core);
        let small = self.core.close_small();
        lower.and(small)
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

    /// What the RAM tier works with but does not own: the index, the metadata and the tiers
    /// below (the core itself: the small tier, then `lower`; `small_tier::below`).
    pub(crate) fn env(&self) -> Env<'_, Core> {
        Env {
            slots: &self.slots,
            meta: &self.meta,
            lower: self,
        }
    }

    /// One sweeper pass over the RAM tier (see `ram::sweeper`).
    pub(crate) fn sweep(&self) -> usize {
        self.ram.sweep(&self.env())
    }

    /// `flush_all [delay]`; returns once its marker is journaled (`flash_tier::journal`),
    /// so a restart never serves what it flushed.
    pub fn flush_all(&self, at: u32) {
        let _ = crate::flash_tier::journal::take_owed();
        self.flush_all_now(at);
        let owed = crate::flash_tier::journal::take_owed();
        if let Err(e) = crate::block::block_on(self.lower.settle(owed)) {
            log::error!("flush_all: its marker could not be made durable: {e}");
        }
    }

    fn flush_all_now(&self, at: u32) {
        let now = self.now();
        if at > now {
            self.meta.flush_later(at);
            self.lower.flush(at);
            self.small.flush_later(at);
            return;
        }
        self.meta.flush_now();
        self.small.clear();
        let env = self.env();
        for i in 0..self.slots.shard_count() {
            let mut shard = self.slots.lock_nth(i);
            shard.drain(|e| match e.tier {
                Tier::Ram => self.ram.forget_slot(&env, e.loc),
                Tier::Flash => self.lower.forget(e.lower_loc()),
            });
        }
        self.lower.flush(0);
    }
}

/// The flash tier reaches RAM and the shared state through the core.
impl RamAccess for Core {
    fn slots(&self) -> &Index {
        &self.slots
    }

    fn meta(&self) -> &Meta {
        &self.meta
    }

    fn record(&self, loc: u64) -> Option<RecordRef<'_>> {
        self.ram.record(loc)
    }

    fn find_key(&self, shard: &Shard<'_>, hash: u64, key: &[u8]) -> Option<(Pos, Entry)> {
        self.ram.find_key(shard, hash, key)
    }

    fn copy_fits(&self, words: usize) -> bool {
        words <= self.ram.large_threshold()
    }

    fn copy_up(&self, at: CopyAt<'_, '_>, key: &[u8], h: &Header, value: &[u8]) -> CopyUp {
        let env = self.env();
        match at {
            CopyAt::Now(shard, pos) => self.ram.copy_up_now(&env, shard, pos, key, h, value),
            CopyAt::Later { hash, loc } => self.ram.copy_up_later(&env, hash, loc, key, h, value),
        }
    }
}

/// The flash tier's background work (reclaim handler, write-back and gate threads) holds the
/// core.
impl Host for Core {
    type Ram = Core;

    fn parts(&self) -> Option<(&FlashTier, &Core)> {
        self.lower.flash().map(|t| (t, self))
    }
}
