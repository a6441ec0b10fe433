//! The sweeper: frees memory held by expired and dead records without any client touching
//! them (`RamTier::sweep`; the thread is [`Sweeper`]). A pass looks at every sealed, quiet
//! segment, one at a time under `AllocState`: one with nothing live, everything expired, or
//! covered by a passed `flush_all` is drained and freed; one at least [`COMPACT_DEAD_PERCENT`]
//! dead (overwritten, deleted, expired) has its live records compacted into the same log's
//! head, if a free segment is available. A head holding anything stale is sealed first, so
//! expired items are found even when writes stop. A scan raises the segment's `min_exp`
//! hint, so it is rescanned only once something in it expired.
//!
//! # Threads
//! One thread per `Cache` (`flashtier-sweeper`), woken every `sweep_interval`, stopped when
//! the `Cache` is dropped; `Cache::sweep` runs a pass on the caller's thread. The write-back
//! thread runs on the same loop (`Sweeper::spawn_fn`, which knows nothing of what it runs).
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::meta::{Counters, Meta};
use crate::ram::arena::{AllocState, Log};
use crate::ram::evict::{Mode, COMPACT_DEAD_PERCENT};
use crate::ram::lower::LowerTier;
use crate::ram::record::F_FILLER;
use crate::ram::tier::{Env, RamTier};

/// Handle of the sweeper thread; dropping it stops and joins the thread.
#[derive(Debug)]
pub(crate) struct Sweeper {
    stop: Arc<(Mutex<bool>, Condvar)>,
    handle: Option<JoinHandle<()>>,
}

impl Sweeper {
    /// A thread named `name` running `pass` every `every` until the handle is dropped.
    pub fn spawn_fn(
        name: &str,
        every: Duration,
        mut pass: impl FnMut() + Send + 'static,
    ) -> std::io::Result<Self> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let s = stop.clone();
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let (lock, cv) = &*s;
                loop {
                    {
                        let mut stopped = lock.lock();
                        if !*stopped {
                            cv.wait_for(&mut stopped, every);
                        }
                        if *stopped {
                            return;
                        }
                    }
                    pass();
                }
            })?;
        Ok(Self {
            stop,
            handle: Some(handle),
        })
    }
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
        if let Some(h) = self.handle.take() {
            // A panicked sweeper has nothing left to clean up.
            let _ = h.join();
        }
    }
}

impl RamTier {
    /// One sweeper pass; returns the number of segments freed or compacted.
    pub(crate) fn sweep<L: LowerTier + ?Sized>(&self, env: &Env<'_, L>) -> usize {
        let ids: Vec<u32> = {
            let mut alloc = self.arena.state.lock();
            self.seal_stale_heads(env.meta, &mut alloc);
            alloc.queues.iter().flatten().copied().collect()
        };
        let mut swept = 0;
        for seg in ids {
            let mut alloc = self.arena.state.lock();
            let now = env.meta.now();
            let Some(log) = self.arena.queued_on(seg) else {
                continue;
            };
            let slot = self.arena.slot(seg);
            if slot.pending.load(Ordering::Acquire) != 0 {
                continue;
            }
            let end = u64::from(slot.end.load(Ordering::Relaxed));
            let live = slot.live.load(Ordering::Relaxed);
            let max_exp = slot.max_exp.load(Ordering::Relaxed);
            let all_dead = live == 0
                || (max_exp != 0 && max_exp != u32::MAX && max_exp <= now)
                || env
                    .meta
                    .seg_flushed(slot.max_stored.load(Ordering::Relaxed), now);
            let mut dead = end.saturating_sub(live);
            let compactable = |dead: u64| dead * 100 >= end * COMPACT_DEAD_PERCENT;
            if !all_dead
                && !slot.is_large()
                && !compactable(dead)
                && slot.min_exp.load(Ordering::Relaxed) <= now
            {
                dead += self.expired_words(seg, end as usize, now);
            }
            if !all_dead && (!compactable(dead) || slot.is_large()) {
                continue;
            }
            if !all_dead && self.arena.available(&alloc, false) == 0 {
                continue;
            }
            if !self.arena.unqueue(&mut alloc, seg) {
                continue;
            }
            let kept = self.drain(env, &mut alloc, seg, Mode::Compact(log));
            self.retire(&mut alloc, seg, kept);
            Counters::add(&env.meta.counters.segments_swept, 1);
            swept += 1;
        }
        swept
    }

    /// Seal a head segment that holds something expired, flushed or dead, so this pass can
    /// free or compact it: a head that stops receiving writes would otherwise keep its
    /// expired items forever. Sealing costs at most the unused tail of that segment.
    fn seal_stale_heads(&self, meta: &Meta, alloc: &mut AllocState) {
        let now = meta.now();
        for log in [Log::Small, Log::Main] {
            let Some((seg, off)) = self.arena.head(log) else {
                continue;
            };
            if off == 0 {
                continue;
            }
            let slot = self.arena.slot(seg);
            if slot.pending.load(Ordering::Acquire) != 0 {
                // Writers are still filling it: it is in use, not stale.
                continue;
            }
            let live = slot.live.load(Ordering::Relaxed);
            let stale = live == 0
                || (off as u64).saturating_sub(live) * 2 >= off as u64
                || slot.min_exp.load(Ordering::Relaxed) <= now
                || meta.seg_flushed(slot.max_stored.load(Ordering::Relaxed), now);
            if stale {
                self.arena.seal_head(alloc, log, Some(seg));
            }
        }
    }

    /// Words of expired records in a sealed, quiet segment (live or not); updates the
    /// segment's `min_exp` hint. Caller holds `AllocState`.
    fn expired_words(&self, seg: u32, end: usize, now: u32) -> u64 {
        let mut off = 0;
        let mut expired = 0u64;
        let mut next_min = u32::MAX;
        while off < end {
            let Some(rec) = self.arena.record_at(seg, off) else {
                return 0;
            };
            let h = rec.header;
            let n = h.words();
            if h.rflags & F_FILLER == 0 && h.exptime != 0 {
                if h.exptime <= now {
                    expired += n as u64;
                } else {
                    next_min = next_min.min(h.exptime);
                }
            }
            off += n;
        }
        self.arena
            .slot(seg)
            .min_exp
            .store(next_min, Ordering::Relaxed);
        expired
    }
}

/// Sweeper passes on a RAM tier alone.
#[cfg(test)]
mod tests {
    use crate::ram::record::rec_words;
    use crate::ram::testing::{key, Answer, FakeLower, Rig, SEG};

    const VALUE: [u8; 1000] = [3; 1000];

    fn per_segment() -> usize {
        SEG / 8 / rec_words(key(0).len(), VALUE.len())
    }

    #[test]
    fn a_pass_frees_segments_whose_items_expired_the_open_one_too() {
        let rig = Rig::new(4, FakeLower::new(false, Answer::Drop));
        let now = rig.meta.now();
        let n = per_segment() * 3 / 2;
        for i in 0..n {
            rig.set(&key(i), &VALUE, now + 1);
        }
        assert_eq!(rig.ram.sweep(&rig.env()), 0, "nothing expired yet");
        rig.clock.advance(2);
        let swept = rig.ram.sweep(&rig.env());
        assert_eq!(swept, 2, "the sealed segment and the stale head");
        assert_eq!(rig.count(|c| &c.segments_swept), 2);
        assert_eq!(rig.slots.len(), 0, "no client touched them");
        assert_eq!(rig.count(|c| &c.reclaimed) as usize, n);
        assert_eq!(rig.count(|c| &c.live_bytes), 0);
        assert_eq!(rig.ram.segment_counts().free, 2);
    }

    #[test]
    fn a_pass_compacts_a_mostly_overwritten_segment() {
        let rig = Rig::new(8, FakeLower::new(false, Answer::Drop));
        let n = 2 * per_segment();
        for i in 0..n {
            rig.set(&key(i), &VALUE, 0);
        }
        // Overwrite two thirds of the first segment's items: it is mostly dead.
        let dead = per_segment() * 2 / 3;
        for i in 0..dead {
            rig.set(&key(i), &VALUE, 0);
        }
        let swept = rig.ram.sweep(&rig.env());
        assert!(swept >= 1);
        let compacted = rig.count(|c| &c.compacted) as usize;
        assert!(
            compacted >= per_segment() - dead,
            "{compacted} live records moved"
        );
        assert_eq!(rig.slots.len() as usize, n);
        assert!((0..n).all(|i| rig.get(&key(i)).as_deref() == Some(&VALUE[..])));
        assert_eq!(rig.count(|c| &c.evictions), 0);
    }

    #[test]
    fn a_pass_leaves_live_segments_alone() {
        let rig = Rig::new(8, FakeLower::new(false, Answer::Drop));
        let n = 2 * per_segment();
        for i in 0..n {
            rig.set(&key(i), &VALUE, 0);
        }
        let used = rig.ram.mem_used();
        assert_eq!(rig.ram.sweep(&rig.env()), 0);
        assert_eq!(rig.count(|c| &c.compacted), 0);
        assert_eq!(rig.ram.mem_used(), used);
        assert_eq!(rig.slots.len() as usize, n);
    }
}
