//! Device health: a write or sync error takes a device out of allocation (`Failing`), a probe
//! (a zero page over a free segment's header, then a sync) brings it back, and
//! [`OFFLINE_STRIKES`] failures without a quiet [`STABLE`] period make it `Offline` (still
//! probed, at the longest backoff). Backoff, jitter and the log lines: `docs/faults.md`.
//!
//! Durability bookkeeping lives here too, per device: writes completed (`write_gen`) and
//! covered by a sync (`synced_gen`). Invariants: a flush syncs only devices with unsynced
//! writes, so a failing device does not fail the healthy ones' flushes; a device failure
//! reports its unsynced writes to the flushes pending then (or the next one), once.
//!
//! Runs under the engine state lock (`engine.rs`); probe IO completes on the executor's
//! thread; the flusher thread starts due probes.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::{Inner, State};
use crate::io::{AlignedBuf, IoOp, IoRequest};
use crate::location::PAGE;
use crate::segments::SegState;
use crate::stats::FlashStats;

/// Tries of one chunk or summary write before its records count as lost (the same buffer
/// is written again at the same place at once: transient errors cost nothing).
pub(crate) const WRITE_ATTEMPTS: u32 = 3;
/// First probe delay after a failure.
const PROBE_BASE: Duration = Duration::from_millis(100);
/// Failures, without a quiet [`STABLE`] period between them, that make a device offline.
pub const OFFLINE_STRIKES: u32 = 5;
/// A device that ran this long without an error starts counting strikes afresh.
const STABLE: Duration = Duration::from_secs(60);

/// Where a device stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceState {
    /// Taking writes.
    Healthy,
    /// A write or sync failed recently: out of allocation until a probe succeeds.
    Failing,
    /// Kept failing: out of allocation, probed at the longest backoff only.
    Offline,
}

impl DeviceState {
    /// Lower-case name for logs and status lines.
    pub fn name(self) -> &'static str {
        match self {
            DeviceState::Healthy => "healthy",
            DeviceState::Failing => "failing",
            DeviceState::Offline => "offline",
        }
    }
}

/// One device's health record.
pub(crate) struct Health {
    pub state: DeviceState,
    /// Failures since the device last ran [`STABLE`] without one.
    strikes: u32,
    /// When the current state began.
    since: Instant,
    last_failure: Option<Instant>,
    next_probe: Instant,
    probing: bool,
    /// Jitter source (xorshift), seeded per device.
    rng: u64,
    /// Writes completed on the device (successful ones).
    pub write_gen: u64,
    /// `write_gen` covered by a sync (or reported lost to the flushes pending at a failure).
    pub synced_gen: u64,
}

impl Health {
    pub(crate) fn new(dev: usize, seed: u64) -> Self {
        let now = Instant::now();
        Self {
            state: DeviceState::Healthy,
            strikes: 0,
            since: now,
            last_failure: None,
            next_probe: now,
            probing: false,
            rng: (seed ^ (dev as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1,
            write_gen: 0,
            synced_gen: 0,
        }
    }

    /// Out of allocation.
    pub(crate) fn out(&self) -> bool {
        self.state != DeviceState::Healthy
    }

    fn jitter(&mut self, d: Duration) -> Duration {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        // A fraction in [0.5, 1].
        let f = 0.5 + (self.rng % 1024) as f64 / 2046.0;
        d.mul_f64(f)
    }

    /// Schedule the next probe after `strikes` failures, capped at `max`.
    fn schedule(&mut self, max: Duration) -> Duration {
        let exp = self.strikes.saturating_sub(1).min(20);
        let wait = PROBE_BASE.saturating_mul(1 << exp).min(max);
        let wait = self.jitter(wait);
        self.next_probe = Instant::now() + wait;
        wait
    }
}

impl State {
    /// Move `dev` to `state`, keeping the allocation mask (`out`) in step.
    fn set_device_state(&mut self, dev: usize, state: DeviceState) {
        if let (Some(h), Some(o)) = (self.health.get_mut(dev), self.out.get_mut(dev)) {
            h.state = state;
            h.since = Instant::now();
            *o = state != DeviceState::Healthy;
        }
    }
}

impl Inner {
    /// A write or sync on `dev` failed for good (`what`, `err`). The first failure of a
    /// healthy device makes it failing: logged, counted, taken out of allocation, its open
    /// segments sealed (their chunks and summaries still go to it; failures there are
    /// reported like any other), and its unsynced writes reported to the pending flushes.
    pub(crate) fn device_error(
        self: &Arc<Self>,
        state: &mut State,
        dev: usize,
        what: &str,
        err: &str,
    ) {
        let max = self.knobs.device_retry_max();
        let name = self.dev_name(dev).to_string();
        let Some(h) = state.health.get_mut(dev) else {
            return;
        };
        h.synced_gen = h.write_gen;
        if h.out() {
            return;
        }
        let now = Instant::now();
        let quiet = h
            .last_failure
            .is_none_or(|t| now.duration_since(t) >= STABLE);
        h.strikes = if quiet { 1 } else { h.strikes + 1 };
        h.last_failure = Some(now);
        let wait = h.schedule(max);
        let strikes = h.strikes;
        FlashStats::add(&self.stats.device_failures, 1);
        if strikes >= OFFLINE_STRIKES {
            state.set_device_state(dev, DeviceState::Offline);
            FlashStats::add(&self.stats.device_offlines, 1);
            log::error!(
                "flash device {name} offline after {strikes} failures (last: {what}: {err}); \
                 out of allocation, its data stays readable; probing in {} ms",
                wait.as_millis()
            );
        } else {
            state.set_device_state(dev, DeviceState::Failing);
            log::warn!(
                "flash device {name} failing: {what}: {err}; out of allocation, its data stays \
                 readable; probing in {} ms (failure {strikes} of {OFFLINE_STRIKES} before \
                 offline)",
                wait.as_millis()
            );
        }
        // After close the executor completes requests inline, under this lock: no new IO.
        for s in 0..state.streams.len() {
            let on_dev = !state.closed
                && state.streams[s]
                    .seg
                    .is_some_and(|seg| state.segs[seg as usize].dev == dev);
            if on_dev {
                self.seal(state, s as u8);
            }
        }
        self.update_gauges(state);
        self.wake.notify_all();
    }

    /// Start the probes that are due; returns when the next one is due (for the flusher's
    /// wait).
    pub(crate) fn run_probes(self: &Arc<Self>, state: &mut State) -> Option<Instant> {
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        for dev in 0..state.health.len() {
            let h = &mut state.health[dev];
            if !h.out() || h.probing {
                continue;
            }
            if h.next_probe > now {
                next = Some(next.map_or(h.next_probe, |n| n.min(h.next_probe)));
                continue;
            }
            h.probing = true;
            FlashStats::add(&self.stats.device_probes, 1);
            let target = state
                .free
                .peek(dev)
                .filter(|&seg| state.segs[seg as usize].state == SegState::Free)
                .map(|seg| state.segs[seg as usize].dev_off);
            let me = Arc::clone(self);
            let sync = move |me: Arc<Inner>| {
                let again = Arc::clone(&me);
                me.exec.submit(IoRequest {
                    op: IoOp::Sync { dev },
                    done: Box::new(move |r| again.probe_done(dev, r.map(|_| ()))),
                });
            };
            match target {
                Some(off) => self.exec.submit(IoRequest {
                    op: IoOp::Write {
                        dev,
                        off,
                        buf: Arc::new(AlignedBuf::zeroed(PAGE as usize)),
                    },
                    done: Box::new(move |r| match r {
                        Ok(_) => sync(me),
                        Err(e) => me.probe_done(dev, Err(e)),
                    }),
                }),
                None => sync(me),
            }
        }
        next
    }

    /// A probe of `dev` finished (executor thread).
    fn probe_done(self: &Arc<Self>, dev: usize, res: io::Result<()>) {
        let max = self.knobs.device_retry_max();
        let name = self.dev_name(dev).to_string();
        let mut guard = self.state.lock();
        let state = &mut *guard;
        let Some(h) = state.health.get_mut(dev) else {
            return;
        };
        h.probing = false;
        let was = h.state;
        match res {
            Ok(()) => {
                let (out_for, strikes) = (h.since.elapsed(), h.strikes);
                state.set_device_state(dev, DeviceState::Healthy);
                FlashStats::add(&self.stats.device_recoveries, 1);
                log::warn!(
                    "flash device {name} back in service after {:.1} s {} ({strikes} failures)",
                    out_for.as_secs_f64(),
                    was.name(),
                );
            }
            Err(e) => {
                FlashStats::add(&self.stats.device_probe_failures, 1);
                h.strikes += 1;
                h.last_failure = Some(Instant::now());
                let wait = h.schedule(max);
                let strikes = h.strikes;
                if was == DeviceState::Failing && strikes >= OFFLINE_STRIKES {
                    state.set_device_state(dev, DeviceState::Offline);
                    FlashStats::add(&self.stats.device_offlines, 1);
                    log::error!(
                        "flash device {name} offline after {strikes} failures (last: probe: \
                         {e}); out of allocation, its data stays readable; retried every {} ms",
                        max.as_millis()
                    );
                } else {
                    log::debug!(
                        "flash device {name} probe failed: {e}; next in {} ms",
                        wait.as_millis()
                    );
                }
            }
        }
        self.update_gauges(state);
        drop(guard);
        self.wake.notify_all();
    }
}
