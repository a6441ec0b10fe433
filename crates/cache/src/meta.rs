//! [`Meta`]: what the cache keeps about its items besides the items — the CAS counter, the
//! pending delayed `flush_all`, the departure ledger and the event counters — and the one
//! liveness rule (expiry and `flush_all`) both tiers and the operations apply.
//!
//! A leaf: it knows no tier, only times, hashes and counts, so the RAM tier, the flash tier
//! and the core all read it without importing each other.
//!
//! CAS values are reserved in blocks of [`CAS_BLOCK`] when a [`CasStore`] is attached (the
//! small tier's superblock): a value past the recorded ceiling is handed out only after the
//! next ceiling was written, so a restart after a kill, which continues above the recorded
//! ceiling, never hands out a CAS value a client may still hold for a lost version.
//!
//! # Threads
//! Relaxed atomics, any thread; the ceiling is raised under `reserving` (once per block).
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};

use parking_lot::Mutex;

use crate::clock::Clock;
use crate::item::CasMode;
use crate::ledger::{Cause, Ledger};

/// CAS values reserved per ceiling write (a superblock page write per this many new
/// versions). Default: 2^20.
pub const CAS_BLOCK: u64 = 1 << 20;

/// Where the CAS ceiling is recorded so that it survives a kill (the small tier's superblock).
pub trait CasStore: Send + Sync + std::fmt::Debug {
    /// Record that values up to `ceiling` may be handed out; return once a kill would keep
    /// it.
    fn reserve(&self, ceiling: u64) -> Result<(), String>;
}

/// `flush_at` when no delayed `flush_all` is pending.
const NO_FLUSH: u64 = u64::MAX;

/// The cache's event counters (`stats`, docs/stats.md).
#[derive(Debug, Default)]
pub struct Counters {
    pub total_items: AtomicU64,
    pub live_bytes: AtomicU64,
    pub evictions: AtomicU64,
    pub evicted_unfetched: AtomicU64,
    pub reclaimed: AtomicU64,
    pub expired_unfetched: AtomicU64,
    pub moves_to_main: AtomicU64,
    pub reinserted: AtomicU64,
    pub compacted: AtomicU64,
    /// Overwrites written over the old record in RAM (same record size; no arena space used).
    pub rewritten_in_place: AtomicU64,
    /// Segments a writer compacted instead of evicting live items (dead space reclaimed).
    pub segments_reclaimed: AtomicU64,
    pub segments_swept: AtomicU64,
    /// Items a forced eviction dropped (`soft_tries` evictions had freed nothing; also in
    /// `evictions`).
    pub evicted_forced: AtomicU64,
}

impl Counters {
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }

    pub fn sub(c: &AtomicU64, n: u64) {
        c.fetch_sub(n, Relaxed);
    }

    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Relaxed)
    }
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Meta {
    clock: Clock,
    /// The last CAS value handed out.
    next_cas: AtomicU64,
    /// No CAS value above this may be handed out before `cas_store` recorded a higher one
    /// (`u64::MAX` without a store).
    ceiling: AtomicU64,
    /// Where ceilings are recorded, if anywhere.
    cas_store: Option<Box<dyn CasStore>>,
    /// Held while raising the ceiling.
    reserving: Mutex<()>,
    /// Time of the pending delayed `flush_all`, or `NO_FLUSH`.
    flush_at: AtomicU64,
    /// How keys last left, for classifying GET misses (`get_misses_*`).
    pub(crate) ledger: Ledger,
    pub(crate) counters: Counters,
}

impl Meta {
    /// CAS values continue above `last_cas`; `flush_at` is a delayed `flush_all` pending.
    pub fn new(clock: Clock, ledger_len: usize, last_cas: u64, flush_at: Option<u32>) -> Self {
        Self {
            clock,
            next_cas: AtomicU64::new(last_cas),
            ceiling: AtomicU64::new(u64::MAX),
            cas_store: None,
            reserving: Mutex::new(()),
            flush_at: AtomicU64::new(flush_at.map_or(NO_FLUSH, u64::from)),
            ledger: Ledger::new(ledger_len),
            counters: Counters::default(),
        }
    }

    /// Record CAS ceilings in `store` from now on (before any CAS is handed out): the first
    /// new value reserves a block.
    pub fn with_cas_store(mut self, store: Box<dyn CasStore>) -> Self {
        self.ceiling = AtomicU64::new(self.next_cas.load(Relaxed));
        self.cas_store = Some(store);
        self
    }

    /// Now, in unix seconds (the cache's clock).
    pub fn now(&self) -> u32 {
        self.clock.now()
    }

    /// The CAS of a new version: explicit, kept from the version replaced, or the next one.
    pub fn cas_for(&self, mode: CasMode, old: Option<u64>) -> u64 {
        match (mode, old) {
            (CasMode::Explicit(c), _) => c,
            (CasMode::Keep, Some(c)) => c,
            _ => {
                let cas = self.next_cas.fetch_add(1, Relaxed) + 1;
                if cas > self.ceiling.load(Acquire) {
                    self.raise_ceiling(cas);
                }
                cas
            }
        }
    }

    /// Record a ceiling at least `cas` + [`CAS_BLOCK`] before `cas` is handed out. A failed
    /// record is logged and the value handed out anyway (a write must not fail for it); the
    /// first value past the block tries again (one page write a block, even on a failing
    /// device).
    #[cold]
    fn raise_ceiling(&self, cas: u64) {
        let Some(store) = &self.cas_store else {
            return;
        };
        let _one = self.reserving.lock();
        if cas <= self.ceiling.load(Acquire) {
            return;
        }
        let next = cas.saturating_add(CAS_BLOCK);
        if let Err(e) = store.reserve(next) {
            log::error!(
                "CAS ceiling {next} not recorded ({e}); a restart after a kill may reuse CAS \
                 values"
            );
        }
        self.ceiling.store(next, Release);
    }

    /// The CAS ceiling recorded (`u64::MAX` without a store).
    #[cfg(test)]
    pub fn cas_ceiling(&self) -> u64 {
        self.ceiling.load(Acquire)
    }

    /// The last CAS value handed out.
    pub fn last_cas(&self) -> u64 {
        self.next_cas.load(Relaxed)
    }

    fn flushed(&self, stored: u32, now: u32) -> bool {
        let f = self.flush_at.load(Relaxed);
        f != NO_FLUSH && f as u32 <= now && stored <= f as u32
    }

    /// True when an item with this expiry and store time can no longer be seen: expired, or
    /// covered by a passed `flush_all`.
    pub fn dead_at(&self, exptime: u32, stored: u32, now: u32) -> bool {
        (exptime != 0 && exptime <= now) || self.flushed(stored, now)
    }

    /// True when a segment whose newest record was stored at `max_stored` is covered by a
    /// passed `flush_all`.
    pub fn seg_flushed(&self, max_stored: u32, now: u32) -> bool {
        max_stored != 0 && self.flushed(max_stored, now)
    }

    /// A `flush_all` delayed to unix time `at`: items stored up to then die then.
    pub fn flush_later(&self, at: u32) {
        self.flush_at.store(u64::from(at), Relaxed);
    }

    /// The delayed `flush_all` in force (pending, or passed and still judging stored times).
    pub fn flush_at(&self) -> Option<u32> {
        let f = self.flush_at.load(Relaxed);
        (f != NO_FLUSH).then_some(f as u32)
    }

    /// An immediate `flush_all` (its items are removed by the caller): no flush pending.
    pub fn flush_now(&self) {
        self.flush_at.store(NO_FLUSH, Relaxed);
    }

    /// Key `hash` left the cache by `cause` (its item was `fetched` or not): note it in the
    /// ledger and count it — expiry in `reclaimed`, RAM or flash eviction in `evictions`, a
    /// lost write nowhere else.
    pub fn departed(&self, hash: u64, cause: Cause, fetched: bool) {
        self.ledger.departed(hash, cause);
        let c = &self.counters;
        let (all, unfetched) = match cause {
            Cause::Expired => (&c.reclaimed, &c.expired_unfetched),
            Cause::RamEvicted | Cause::ReclaimOld | Cause::ReclaimYoung => {
                (&c.evictions, &c.evicted_unfetched)
            }
            Cause::Lost => return,
        };
        Counters::add(all, 1);
        if !fetched {
            Counters::add(unfetched, 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// Records every ceiling; what a kill would keep is the last one.
    #[derive(Debug, Default)]
    struct Recorded(Arc<Mutex<Vec<u64>>>);

    impl CasStore for Recorded {
        fn reserve(&self, ceiling: u64) -> Result<(), String> {
            self.0.lock().push(ceiling);
            Ok(())
        }
    }

    #[test]
    fn no_cas_value_is_handed_out_above_the_recorded_ceiling() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let meta =
            Meta::new(Clock::system(), 16, 7, None).with_cas_store(Box::new(Recorded(log.clone())));
        let n = 2 * CAS_BLOCK + 5;
        for _ in 0..n {
            let cas = meta.cas_for(CasMode::New, None);
            let recorded = log.lock().last().copied().unwrap_or(0);
            assert!(
                cas <= recorded,
                "CAS {cas} handed out above ceiling {recorded}"
            );
        }
        // One page write per block, not per value.
        assert_eq!(log.lock().len(), 3);
        assert_eq!(meta.cas_ceiling(), log.lock()[2]);
        // Kept or explicit CAS values need no reservation.
        assert_eq!(meta.cas_for(CasMode::Keep, Some(3)), 3);
        assert_eq!(log.lock().len(), 3);
    }

    /// A store that always fails.
    #[derive(Debug)]
    struct Failing(Arc<Mutex<u64>>);

    impl CasStore for Failing {
        fn reserve(&self, _: u64) -> Result<(), String> {
            *self.0.lock() += 1;
            Err("device failed".into())
        }
    }

    #[test]
    fn a_failing_store_is_tried_once_a_block_and_values_still_handed_out() {
        let tries = Arc::new(Mutex::new(0));
        let meta = Meta::new(Clock::system(), 16, 0, None)
            .with_cas_store(Box::new(Failing(tries.clone())));
        for want in 1..=CAS_BLOCK + 2 {
            assert_eq!(meta.cas_for(CasMode::New, None), want);
        }
        assert_eq!(*tries.lock(), 2);
    }

    #[test]
    fn concurrent_writers_never_pass_the_ceiling() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let meta = Arc::new(
            Meta::new(Clock::system(), 16, 0, None).with_cas_store(Box::new(Recorded(log.clone()))),
        );
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (meta, log) = (meta.clone(), log.clone());
                std::thread::spawn(move || {
                    for _ in 0..CAS_BLOCK / 2 + 10 {
                        let cas = meta.cas_for(CasMode::New, None);
                        let top = log.lock().iter().copied().max().unwrap_or(0);
                        assert!(cas <= top);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(meta.last_cas() <= meta.cas_ceiling());
    }
}
