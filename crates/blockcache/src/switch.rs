//! `ModeSwitch`: mode changes at runtime, and how a switch away from writeback is observed.
//!
//! Leaving writeback changes the mode at once and starts a switch: an explicit flush (its id is
//! the switch id) plus a drain until no dirty block is left; it is *done* at 0 dirty blocks,
//! *cancelled* if the mode goes back to writeback first. Why rewrites of dirty blocks still go
//! to flash meanwhile: docs/block-cache.md "Mode switches".
//!
//! Invariant: the mode and the switch record change together under the switch mutex.
//! Lock order: the switch mutex, then the flush-job and index mutexes (starting the flush).
//! Threads: admin requests (set, status, wait) and the writeback task (reads `switching`).
use std::time::Instant;

use parking_lot::Mutex;

use crate::tunables::{Mode, Tunables};

/// Where a mode switch stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwitchPhase {
    /// Dirty blocks are being written back.
    Running,
    /// No dirty block is left.
    Done,
    /// The mode went back to writeback before the drain finished.
    Cancelled,
}

impl SwitchPhase {
    /// `running`, `done` or `cancelled`.
    pub fn name(self) -> &'static str {
        match self {
            SwitchPhase::Running => "running",
            SwitchPhase::Done => "done",
            SwitchPhase::Cancelled => "cancelled",
        }
    }
}

/// The latest switch away from writeback, as reported.
#[derive(Clone, Debug, PartialEq)]
pub struct SwitchStatus {
    /// Id of the flush the switch started (as reported by `flush_id`).
    pub id: u64,
    /// Mode before.
    pub from: Mode,
    /// Mode now (or, if cancelled, the mode that was asked for).
    pub to: Mode,
    /// Where it stands.
    pub phase: SwitchPhase,
    /// Dirty blocks when it started.
    pub total: u64,
    /// Dirty blocks now.
    pub dirty_left: u64,
    /// Seconds since it started, or until it finished.
    pub secs: f64,
}

#[derive(Debug)]
struct SwitchJob {
    id: u64,
    from: Mode,
    to: Mode,
    total: u64,
    started: Instant,
    finished: Option<f64>,
    cancelled: bool,
}

/// The mode-switch component: the latest switch away from writeback.
#[derive(Debug, Default)]
pub(crate) struct ModeSwitch {
    job: Mutex<Option<SwitchJob>>,
}

impl ModeSwitch {
    /// Set `mode` in `tunables`; leaving writeback records a new switch whose flush
    /// `start_flush` starts (with `dirty` blocks now). Returns true if a switch started.
    pub(crate) fn change(
        &self,
        tunables: &Tunables,
        mode: Mode,
        dirty: impl Fn() -> u64,
        start_flush: impl FnOnce() -> u64,
    ) -> bool {
        let mut job = self.job.lock();
        let before = tunables.mode();
        tunables.set_mode(mode);
        match (before == Mode::WriteBack, mode == Mode::WriteBack) {
            (true, false) => {
                let id = start_flush();
                *job = Some(SwitchJob {
                    id,
                    from: before,
                    to: mode,
                    total: dirty(),
                    started: Instant::now(),
                    finished: None,
                    cancelled: false,
                });
                true
            }
            (false, true) => {
                if let Some(j) = job.as_mut().filter(|j| j.finished.is_none()) {
                    j.cancelled = true;
                    j.finished = Some(j.started.elapsed().as_secs_f64());
                }
                false
            }
            (false, false) => {
                if let Some(j) = job.as_mut().filter(|j| j.finished.is_none()) {
                    j.to = mode;
                }
                false
            }
            (true, true) => false,
        }
    }

    /// The latest switch with `dirty` blocks left; done once none is.
    pub(crate) fn status(&self, dirty: u64) -> Option<SwitchStatus> {
        let mut job = self.job.lock();
        let j = job.as_mut()?;
        if j.finished.is_none() && dirty == 0 {
            j.finished = Some(j.started.elapsed().as_secs_f64());
        }
        let phase = match (j.finished, j.cancelled) {
            (_, true) => SwitchPhase::Cancelled,
            (Some(_), false) => SwitchPhase::Done,
            (None, false) => SwitchPhase::Running,
        };
        Some(SwitchStatus {
            id: j.id,
            from: j.from,
            to: j.to,
            phase,
            total: j.total.max(dirty),
            dirty_left: dirty,
            secs: j
                .finished
                .unwrap_or_else(|| j.started.elapsed().as_secs_f64()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaving_writeback_starts_a_switch_that_ends_done_or_cancelled() {
        let (tunables, switch) = (Tunables::default(), ModeSwitch::default());
        assert!(switch.status(5).is_none());
        let mut flushes = 0;
        assert!(switch.change(
            &tunables,
            Mode::WriteThrough,
            || 5,
            || {
                flushes += 1;
                7
            }
        ));
        assert_eq!(flushes, 1);
        let s = switch.status(5).expect("a switch");
        assert_eq!(
            (s.id, s.from, s.to, s.phase),
            (7, Mode::WriteBack, Mode::WriteThrough, SwitchPhase::Running)
        );
        // Through to around retargets the running switch; no new flush.
        assert!(!switch.change(&tunables, Mode::WriteAround, || 5, || unreachable!()));
        assert_eq!(
            switch.status(3).map(|s| (s.to, s.dirty_left)),
            Some((Mode::WriteAround, 3))
        );
        assert_eq!(switch.status(0).map(|s| s.phase), Some(SwitchPhase::Done));
        assert_eq!(
            switch.status(2).map(|s| s.phase),
            Some(SwitchPhase::Done),
            "stays done"
        );
        // A new switch, cancelled by going back to writeback.
        tunables.set_mode(Mode::WriteBack);
        assert!(switch.change(&tunables, Mode::WriteAround, || 4, || 8));
        assert!(!switch.change(&tunables, Mode::WriteBack, || 4, || unreachable!()));
        assert_eq!(tunables.mode(), Mode::WriteBack);
        let s = switch.status(4).expect("the cancelled switch");
        assert_eq!((s.id, s.phase), (8, SwitchPhase::Cancelled));
    }
}
