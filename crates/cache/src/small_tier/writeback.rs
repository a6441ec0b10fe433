//! [`SmallWriteBack`]: small versions reach the small-object tier after a write-back window,
//! as large ones reach the flash log, so a `kill -9` loses only what was written in the
//! window — not every small item RAM still held (before: a small version reached the tier
//! only when RAM evicted it or at a clean stop, so after a kill every small item still in RAM
//! was a miss, however old).
//!
//! A new small version the tier would keep gets a wait mark in its home word
//! (`HOME_SWAIT | since`, kept across overwrites, so a key overwritten nonstop is written
//! once per window) and the first version to mark a key queues `(since, hash)`. A pass (every
//! [`PASS_EVERY`] on its own thread) pops what is due and, under the key's shard lock, inserts
//! every RAM version of that hash still waiting into the tier, then marks it `HOME_BELOW`:
//! the tier holds a copy of this very version. From then on:
//! - a write that replaces or removes the version removes the copy first (`ops`: the same
//!   call as for a key with no RAM slot), so a kill never uncovers it;
//! - RAM evicting it only drops the slot (`Small::take`): the copy is already there, and
//!   no second page write is spent on it;
//! - a clean stop moves it again, as every small RAM item (`close`).
//!
//! The window is the flash tier's `write_back_ms` knob (0 = at the next pass), or
//! [`DEFAULT_WINDOW_MS`] without flash. A pass the tier refuses (staging full) puts the entry
//! back first in line and stops: the next pass tries again, so write-back is delayed under a
//! fill, never dropped (`small_write_back_lag_ms` shows by how much).
//!
//! Memory (issue 28, RSS at rest): the copies the tier stages are allocated on this thread and
//! freed by the tier's flusher, and an allocator with per-thread heaps (mimalloc) gives a
//! thread's emptied pages back only when that thread allocates or collects again. After a
//! fill this thread goes idle holding them (16.7 MiB above the live heap after a 20M-object
//! fill), so once a pass finds nothing to do after passes that did, and nothing is staged
//! any more, it calls the settings' `release_memory` (the server's `mi_collect`) on itself —
//! [`RELEASES`] times, one per idle pass, so frees the flusher makes just after the first
//! are returned too. Never while passes keep finding work.
//!
//! # Threads
//! Writers push (under their shard lock), the `flashtier-small-wb` thread pops; the queue's
//! mutex is a leaf. A pass holds one shard lock at a time, the tier's locks below it.
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use flashtier_smallset::SmallStore;

use crate::clock::Clock;
use crate::engine::Core;
use crate::flash_tier::dirty::DirtyQueue;
use crate::meta::Counters;
use crate::ram::index::Tier;
use crate::ram::record::{small_wait_word, HOME_BELOW};

/// How often the pass runs.
pub(crate) const PASS_EVERY: Duration = Duration::from_millis(100);
/// The window without a flash tier (the flash tier's `write_back_ms` default).
pub(crate) const DEFAULT_WINDOW_MS: u64 = 2000;

/// Idle passes that release memory after passes that inserted (module docs, "Memory").
pub(crate) const RELEASES: u32 = 2;

/// The small tier's write-back queue and counters (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct SmallWriteBack {
    queue: DirtyQueue,
    /// Versions the pass inserted into the tier.
    written: AtomicU64,
    /// Passes that stopped because the tier refused an insert (staging full).
    refused: AtomicU64,
    /// The allocator's collect for this thread (`SmallSettings::release_memory`).
    release: Option<fn()>,
    /// Releases still due: [`RELEASES`] after a pass that inserted, one used per idle pass
    /// with nothing staged (only the write-back thread touches it).
    releases_due: AtomicU32,
    /// Times `release` ran (stat `small_write_back_releases`).
    released: AtomicU64,
}

impl SmallWriteBack {
    /// A queue whose idle passes call `release` (module docs, "Memory").
    pub(crate) fn new(release: Option<fn()>) -> Self {
        Self {
            release,
            ..Self::default()
        }
    }

    /// After a pass that inserted `n`: arm the releases (`n > 0`), or, idle with nothing
    /// staged, spend one. True when `release` ran.
    pub(crate) fn after_pass(&self, n: usize, nothing_staged: bool) -> bool {
        if n > 0 {
            self.releases_due.store(RELEASES, Relaxed);
            return false;
        }
        let due = self.releases_due.load(Relaxed);
        if due == 0 || !nothing_staged {
            return false;
        }
        self.releases_due.store(due - 1, Relaxed);
        if let Some(release) = self.release {
            release();
            Counters::add(&self.released, 1);
        }
        true
    }

    /// The home word of a new small version: its predecessor's wait if it had one (no new
    /// queue entry), else a wait from now, queued.
    pub(crate) fn wait_word(&self, clock: &Clock, hash: u64, old: Option<u64>) -> u64 {
        let since = old.unwrap_or_else(|| self.queue.push_now(clock, hash));
        small_wait_word(since)
    }

    /// The `small_write_back_*` stats.
    pub(crate) fn stats(&self, now_ms: u64, window_ms: u64) -> Vec<(String, String)> {
        let g = |a: &AtomicU64| Counters::get(a).to_string();
        vec![
            ("small_write_back_ms".into(), window_ms.to_string()),
            ("small_written_back".into(), g(&self.written)),
            ("small_write_back_refused".into(), g(&self.refused)),
            ("small_write_back_releases".into(), g(&self.released)),
            (
                "small_write_back_queue".into(),
                self.queue.len().to_string(),
            ),
            (
                "small_write_back_queue_bytes".into(),
                self.queue.memory_bytes().to_string(),
            ),
            (
                "small_write_back_lag_ms".into(),
                self.queue.lag_ms(now_ms, window_ms).to_string(),
            ),
        ]
    }
}

impl Core {
    /// The small tier's write-back window now (ms).
    pub(crate) fn small_window_ms(&self) -> u64 {
        self.lower
            .flash()
            .map_or(DEFAULT_WINDOW_MS, |t| t.tiering().write_back_ms())
    }

    /// One pass: insert every small RAM version waiting since `cutoff` (unix ms) or earlier
    /// (`u64::MAX`: all). Returns how many were inserted.
    pub(crate) fn small_write_back(&self, cutoff: u64) -> usize {
        let crate::small_tier::Small::On { sets, wb, .. } = &self.small else {
            return 0;
        };
        let mut n = 0;
        let mut key = Vec::new();
        while let Some(hash) = wb.queue.pop_due(cutoff) {
            let shard = self.slots.lock(hash);
            let now = self.now();
            let mut done = Vec::new();
            loop {
                let found = shard.find(hash, |e| {
                    e.tier == Tier::Ram
                        && !done.contains(&e.loc)
                        && self
                            .ram
                            .record(e.loc)
                            .is_some_and(|r| r.header.small_since().is_some_and(|s| s <= cutoff))
                });
                let Some((_, e)) = found else { break };
                done.push(e.loc);
                let Some(rec) = self.ram.record(e.loc) else {
                    break;
                };
                let h = rec.header;
                if self.meta.dead_at(h.exptime, h.stored, now) || !self.small.qualifies(&rec) {
                    // Expired, flushed or no longer the tier's (meta flags): nothing to keep.
                    rec.set_home(0);
                    continue;
                }
                rec.read_key(&mut key);
                if sets.insert(&key, &rec.value(), crate::small_tier::meta_of(&rec)) {
                    rec.set_home(HOME_BELOW);
                    n += 1;
                } else {
                    // Staging full: first in line for the next pass (the refused insert
                    // removed any older copy, as every refusal does).
                    wb.queue.push_front(h.small_since().unwrap_or(0), hash);
                    Counters::add(&wb.refused, 1);
                    Counters::add(&wb.written, n as u64);
                    return n;
                }
            }
        }
        Counters::add(&wb.written, n as u64);
        n
    }

    /// The write-back thread's pass: versions waiting for the window or longer.
    pub(crate) fn small_write_back_pass(&self) {
        let cutoff = self
            .cfg
            .clock
            .now_ms()
            .saturating_sub(self.small_window_ms());
        let n = self.small_write_back(cutoff);
        if let crate::small_tier::Small::On { sets, wb, .. } = &self.small {
            wb.after_pass(n, sets.nothing_staged());
        }
    }
}

impl crate::Cache {
    /// Run the small tier's write-back now for every waiting version, whatever its age
    /// (tests and tools). Returns how many were inserted; 0 when the tier is off.
    pub fn small_write_back_now(&self) -> usize {
        self.core.small_write_back(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static CALLS: AtomicU64 = AtomicU64::new(0);
    fn count() {
        CALLS.fetch_add(1, Relaxed);
    }

    /// Releases run only on idle passes after passes that inserted, only with nothing
    /// staged, `RELEASES` times, and are armed again by the next pass that inserts.
    #[test]
    fn idle_passes_release_memory_after_work_only() {
        let wb = SmallWriteBack::new(Some(count));
        assert!(!wb.after_pass(0, true), "no work yet: nothing to release");
        assert!(!wb.after_pass(5, true), "working: never");
        assert!(
            !wb.after_pass(0, false),
            "staged copies not freed yet: wait"
        );
        assert!(wb.after_pass(0, true));
        assert!(wb.after_pass(0, true));
        assert!(!wb.after_pass(0, true), "RELEASES spent");
        assert_eq!(CALLS.load(Relaxed), u64::from(RELEASES));
        assert!(!wb.after_pass(1, false));
        assert!(wb.after_pass(0, true));
        assert_eq!(CALLS.load(Relaxed), u64::from(RELEASES) + 1);
        assert_eq!(Counters::get(&wb.released), u64::from(RELEASES) + 1);
    }
}
