//! The dirty map: one byte a set on the device (pages 1..=m, `format::Layout`), 1 while the
//! set may have changes staged in RAM that are durable nowhere yet: not in the on-flash log
//! (`klog`, kept across a kill) and not on its page. What lets a restart after `kill -9` keep
//! the pages (and the log objects) of every other set: a set whose page or log objects a lost
//! staged delete or overwrite would make lie is dirty on the device, and the open empties it
//! and replays none of its log objects.
//!
//! Invariants: a set is marked dirty on the device (through the page cache:
//! `Device::journal_write`, which survives the process) *before* its first staged change is
//! visible, under the staging partition's lock; it is marked clean only once nothing is
//! staged for it and what was is durable — after an append whose log pages were written and
//! whose head was recorded in the superblock (`klog::append`), or, without a log, after a
//! merge wrote its page — under the same lock (`Staging::stage`, `Staging::done`), or after a
//! `flush_all` recorded its new generation (`clear_unstaged`). A byte belongs to one set, so one partition: no two writers race on a
//! byte. Writes to the map are serialized by `write` (devices without a page cache patch
//! whole pages). A power cut may lose marks: the superblock's boot id catches that.
//!
//! # Threads
//! Any caller, under a staging partition lock; the flusher the same way.
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering::Relaxed};

use flashtier_flash::Device;
use parking_lot::Mutex;

/// The RAM copy of the map and its device offset.
pub(crate) struct DirtyMap {
    /// 1 when dirty, per set (what the device says, or is about to).
    flags: Vec<AtomicU8>,
    /// Byte offset of the map on the device.
    off: u64,
    /// Held while writing the map.
    write: Mutex<()>,
    /// A map write failed: the marks on the device cannot be trusted (the caller then makes
    /// the next open start fresh, `recover::check_map`).
    pub(crate) failed: AtomicBool,
}

impl DirtyMap {
    /// A map of `sets` clean sets at byte `off`.
    pub(crate) fn new(sets: u32, off: u64) -> Self {
        Self {
            flags: (0..sets).map(|_| AtomicU8::new(0)).collect(),
            off,
            write: Mutex::new(()),
            failed: AtomicBool::new(false),
        }
    }

    /// Mark `set` dirty (durably for a kill) unless it already is. A failed write sets
    /// `failed` (the caller then distrusts the device, `recover::check_map`).
    pub(crate) fn mark(&self, dev: &dyn Device, set: u32) {
        self.put(dev, set, 1);
    }

    /// Mark `set` clean: its page holds everything staged for it.
    pub(crate) fn clear(&self, dev: &dyn Device, set: u32) {
        self.put(dev, set, 0);
    }

    /// After `flush_all` dropped everything staged (and its new generation is recorded):
    /// clear the mark of every set that has nothing staged now, under its partition lock (a
    /// change staged meanwhile keeps its mark). A stale mark would empty the set at the
    /// next kill, losing what the log has of it since.
    pub(crate) fn clear_unstaged(&self, dev: &dyn Device, staging: &crate::staging::Staging) {
        for (set, f) in self.flags.iter().enumerate() {
            if f.load(Relaxed) == 0 {
                continue;
            }
            let set = set as u32;
            staging.with_set(set, |staged| {
                if staged.is_none() {
                    self.clear(dev, set);
                }
            });
        }
    }

    /// Whether `set` is marked dirty (tests).
    #[cfg(test)]
    pub(crate) fn is_dirty(&self, set: u32) -> Option<bool> {
        self.flags.get(set as usize).map(|f| f.load(Relaxed) == 1)
    }

    fn put(&self, dev: &dyn Device, set: u32, v: u8) {
        let Some(f) = self.flags.get(set as usize) else {
            return;
        };
        if f.load(Relaxed) == v {
            return;
        }
        let _w = self.write.lock();
        if let Err(e) = dev.journal_write(&[v], self.off + u64::from(set)) {
            log::error!("small tier: dirty map write failed ({e})");
            self.failed.store(true, Relaxed);
        }
        f.store(v, Relaxed);
    }
}
