//! The engine state behind its one mutex (`Inner::state`), as four parts that each own their
//! fields: the segment table (`segment_table.rs`), the write queue (`write_queue.rs`),
//! device health (`health.rs`) and the reclaim flags (here), plus `closed`.
//!
//! One lock for all of them because most operations cross two parts under one decision (an
//! append takes a free segment on a healthy device and fills a stream's chunk; a device
//! failure seals that device's open segments). The lock is held for memory work and for
//! *enqueueing* IO, never across IO. Taken by API callers (network threads), IO completions,
//! the flusher and the reclaimer; the parts below it take no lock of their own. Methods here
//! are the few that read several parts at once.
use crate::health::DeviceHealth;
use crate::segment_table::SegmentTable;
use crate::stats::FlashStats;
use crate::write_queue::WriteQueue;

/// The background reclaimer's flags ([`crate::Flash::pause_reclaim`] waits on them).
#[derive(Default)]
pub(crate) struct ReclaimFlags {
    /// Start no pass, and end the one under way after its current victim.
    paused: bool,
    /// The background reclaimer is in a pass.
    running: bool,
}

impl ReclaimFlags {
    /// Stop background reclaim until close.
    pub(crate) fn pause(&mut self) {
        self.paused = true;
    }

    /// Background reclaim is paused.
    pub(crate) fn paused(&self) -> bool {
        self.paused
    }

    /// The background reclaimer is in a pass.
    pub(crate) fn running(&self) -> bool {
        self.running
    }

    /// The background reclaimer starts (`true`) or ends a pass.
    pub(crate) fn set_running(&mut self, running: bool) {
        self.running = running;
    }
}

/// Everything the engine state lock guards.
pub(crate) struct State {
    pub(crate) segments: SegmentTable,
    pub(crate) writes: WriteQueue,
    pub(crate) health: DeviceHealth,
    pub(crate) reclaim: ReclaimFlags,
    /// `Flash::close` ran: no new work is taken.
    closed: bool,
}

impl State {
    pub(crate) fn new(segments: SegmentTable, writes: WriteQueue, health: DeviceHealth) -> Self {
        Self {
            segments,
            writes,
            health,
            reclaim: ReclaimFlags::default(),
            closed: false,
        }
    }

    /// The engine is closed.
    pub(crate) fn closed(&self) -> bool {
        self.closed
    }

    /// Close the engine: no new work from now on.
    pub(crate) fn close(&mut self) {
        self.closed = true;
    }

    /// Free segments on devices that take writes.
    pub(crate) fn free_total(&self) -> usize {
        self.segments.free_total(self.health.out_mask())
    }

    /// Free segments available to ordinary streams (beyond `reserve`).
    pub(crate) fn spare(&self, reserve: u32) -> u32 {
        (self.free_total() as u32).saturating_sub(reserve)
    }

    /// Refresh the gauges that follow the segment table and device health.
    pub(crate) fn update_gauges(&self, stats: &FlashStats) {
        FlashStats::set(&stats.segments_free, self.free_total() as u64);
        let (failing, offline) = self.health.counts();
        FlashStats::set(&stats.devices_failing, failing);
        FlashStats::set(&stats.devices_offline, offline);
        FlashStats::set(&stats.devices_failed, failing + offline);
        FlashStats::set(&stats.bytes_used, self.segments.bytes_used());
        FlashStats::set(&stats.bytes_dead, self.segments.bytes_dead());
        let [a1, a2, a3, a4] = self.segments.dead_by_age();
        FlashStats::set(&stats.bytes_dead_age1, a1);
        FlashStats::set(&stats.bytes_dead_age2, a2);
        FlashStats::set(&stats.bytes_dead_age3, a3);
        FlashStats::set(&stats.bytes_dead_age4, a4);
    }
}
