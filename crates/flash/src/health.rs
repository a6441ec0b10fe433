//! Device health: a write or sync error takes a device out of allocation (`Failing`), a probe
//! (a zero page over a free segment's header, then a sync) brings it back, and
//! [`OFFLINE_STRIKES`] failures without a quiet [`STABLE`] period make it `Offline` (still
//! probed, at the longest backoff). Backoff, jitter and the log lines: `docs/faults.md`.
//!
//! Durability bookkeeping lives here too, per device: writes completed (`write_gen`) and
//! covered by a sync (`synced_gen`). Invariants: a flush syncs only devices with unsynced
//! writes, so a failing device does not fail the healthy ones' flushes; a device failure
//! reports its unsynced writes to the flushes pending then (or the next one), once. The
//! allocation mask ([`DeviceHealth::out_mask`]) is always in step with the device states.
//!
//! [`DeviceHealth`] is one part of the engine state (`state.rs`): it runs under the engine
//! state lock, does no IO and knows nothing of segments; the caller seals what a failed
//! device held open (`inner.rs`) and the flusher thread starts the probes this part says are
//! due (`flusher.rs`), whose IO completes on an executor thread.

use std::io;
use std::time::{Duration, Instant};

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
struct Health {
    state: DeviceState,
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
    write_gen: u64,
    /// `write_gen` covered by a sync (or reported lost to the flushes pending at a failure).
    synced_gen: u64,
}

impl Health {
    fn new(dev: usize, seed: u64) -> Self {
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
    fn out(&self) -> bool {
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

/// Every device's health and the allocation mask derived from it.
pub(crate) struct DeviceHealth {
    devs: Vec<Health>,
    /// Devices out of allocation (failing or offline), kept in step with `devs`.
    out: Vec<bool>,
}

impl DeviceHealth {
    /// `devices` healthy devices; `seed` seeds the probe jitter.
    pub(crate) fn new(devices: usize, seed: u64) -> Self {
        Self {
            devs: (0..devices).map(|d| Health::new(d, seed)).collect(),
            out: vec![false; devices],
        }
    }

    /// Per device: out of allocation (failing or offline).
    pub(crate) fn out_mask(&self) -> &[bool] {
        &self.out
    }

    /// No device takes writes.
    pub(crate) fn all_out(&self) -> bool {
        self.out.iter().all(|o| *o)
    }

    /// Devices watched.
    pub(crate) fn len(&self) -> usize {
        self.devs.len()
    }

    /// `dev`'s state (`None`: no such device).
    #[cfg(test)]
    pub(crate) fn state(&self, dev: usize) -> Option<DeviceState> {
        self.devs.get(dev).map(|h| h.state)
    }

    /// Devices now failing and offline.
    pub(crate) fn counts(&self) -> (u64, u64) {
        let count = |s: DeviceState| self.devs.iter().filter(|h| h.state == s).count() as u64;
        (count(DeviceState::Failing), count(DeviceState::Offline))
    }

    /// A write of records completed on `dev`: the next flush must sync it.
    pub(crate) fn note_write(&mut self, dev: usize) {
        if let Some(h) = self.devs.get_mut(dev) {
            h.write_gen += 1;
        }
    }

    /// Devices with completed writes no sync covers yet, with the generation a sync started
    /// now covers.
    pub(crate) fn unsynced(&self) -> Vec<(usize, u64)> {
        self.devs
            .iter()
            .enumerate()
            .filter(|(_, h)| h.write_gen > h.synced_gen)
            .map(|(d, h)| (d, h.write_gen))
            .collect()
    }

    /// A sync of `dev` started at generation `gen` succeeded.
    pub(crate) fn synced(&mut self, dev: usize, gen: u64) {
        if let Some(h) = self.devs.get_mut(dev) {
            h.synced_gen = h.synced_gen.max(gen);
        }
    }

    /// Move `dev` to `state`, keeping the allocation mask in step.
    fn set_state(&mut self, dev: usize, state: DeviceState) {
        if let (Some(h), Some(o)) = (self.devs.get_mut(dev), self.out.get_mut(dev)) {
            h.state = state;
            h.since = Instant::now();
            *o = state != DeviceState::Healthy;
        }
    }

    /// A write or sync on `dev` (named `name`) failed for good (`what`, `err`). Its unsynced
    /// writes count as reported. The first failure of a healthy device makes it failing (or
    /// offline after [`OFFLINE_STRIKES`] close together): logged, counted, taken out of
    /// allocation, a probe scheduled within `max`. Returns true in that case (the caller
    /// seals the device's open segments); false when it was out already.
    pub(crate) fn fail(
        &mut self,
        dev: usize,
        name: &str,
        (what, err): (&str, &str),
        max: Duration,
        stats: &FlashStats,
    ) -> bool {
        let Some(h) = self.devs.get_mut(dev) else {
            return false;
        };
        h.synced_gen = h.write_gen;
        if h.out() {
            return false;
        }
        let now = Instant::now();
        let quiet = h
            .last_failure
            .is_none_or(|t| now.duration_since(t) >= STABLE);
        h.strikes = if quiet { 1 } else { h.strikes + 1 };
        h.last_failure = Some(now);
        let wait = h.schedule(max);
        let strikes = h.strikes;
        FlashStats::add(&stats.device_failures, 1);
        if strikes >= OFFLINE_STRIKES {
            self.set_state(dev, DeviceState::Offline);
            FlashStats::add(&stats.device_offlines, 1);
            log::error!(
                "flash device {name} offline after {strikes} failures (last: {what}: {err}); \
                 out of allocation, its data stays readable; probing in {} ms",
                wait.as_millis()
            );
        } else {
            self.set_state(dev, DeviceState::Failing);
            log::warn!(
                "flash device {name} failing: {what}: {err}; out of allocation, its data stays \
                 readable; probing in {} ms (failure {strikes} of {OFFLINE_STRIKES} before \
                 offline)",
                wait.as_millis()
            );
        }
        true
    }

    /// The devices whose probe is due at `now` (each then counts as probing until
    /// [`Self::probe_done`]), and when the next one not yet due is.
    pub(crate) fn due_probes(
        &mut self,
        now: Instant,
        stats: &FlashStats,
    ) -> (Vec<usize>, Option<Instant>) {
        let mut due = Vec::new();
        let mut next: Option<Instant> = None;
        for (dev, h) in self.devs.iter_mut().enumerate() {
            if !h.out() || h.probing {
                continue;
            }
            if h.next_probe > now {
                next = Some(next.map_or(h.next_probe, |n| n.min(h.next_probe)));
                continue;
            }
            h.probing = true;
            FlashStats::add(&stats.device_probes, 1);
            due.push(dev);
        }
        (due, next)
    }

    /// A probe of `dev` (named `name`) finished with `res`: back in service, or a strike
    /// more (offline after [`OFFLINE_STRIKES`]) and the next probe scheduled within `max`.
    pub(crate) fn probe_done(
        &mut self,
        dev: usize,
        name: &str,
        res: io::Result<()>,
        max: Duration,
        stats: &FlashStats,
    ) {
        let Some(h) = self.devs.get_mut(dev) else {
            return;
        };
        h.probing = false;
        let was = h.state;
        match res {
            Ok(()) => {
                let (out_for, strikes) = (h.since.elapsed(), h.strikes);
                self.set_state(dev, DeviceState::Healthy);
                FlashStats::add(&stats.device_recoveries, 1);
                log::warn!(
                    "flash device {name} back in service after {:.1} s {} ({strikes} failures)",
                    out_for.as_secs_f64(),
                    was.name(),
                );
            }
            Err(e) => {
                FlashStats::add(&stats.device_probe_failures, 1);
                h.strikes += 1;
                h.last_failure = Some(Instant::now());
                let wait = h.schedule(max);
                let strikes = h.strikes;
                if was == DeviceState::Failing && strikes >= OFFLINE_STRIKES {
                    self.set_state(dev, DeviceState::Offline);
                    FlashStats::add(&stats.device_offlines, 1);
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: Duration = Duration::from_secs(10);

    fn fail(h: &mut DeviceHealth, dev: usize, stats: &FlashStats) -> bool {
        h.fail(dev, "d", ("write", "EIO"), MAX, stats)
    }

    #[test]
    fn a_failure_takes_the_device_out_once() {
        let stats = FlashStats::default();
        let mut h = DeviceHealth::new(2, 7);
        assert!(!h.all_out());
        assert!(fail(&mut h, 1, &stats));
        assert_eq!(h.state(1), Some(DeviceState::Failing));
        assert_eq!(h.out_mask(), [false, true]);
        assert_eq!(h.counts(), (1, 0));
        // Already out: no second transition, no second count.
        assert!(!fail(&mut h, 1, &stats));
        assert_eq!(FlashStats::get(&stats.device_failures), 1);
        assert!(!fail(&mut h, 5, &stats), "no such device");
        assert!(fail(&mut h, 0, &stats));
        assert!(h.all_out());
    }

    #[test]
    fn failed_probes_make_it_offline_and_a_good_one_brings_it_back() {
        let stats = FlashStats::default();
        let mut h = DeviceHealth::new(1, 1);
        assert!(fail(&mut h, 0, &stats));
        for _ in 1..OFFLINE_STRIKES {
            assert_eq!(h.state(0), Some(DeviceState::Failing));
            h.probe_done(0, "d", Err(io::Error::other("EIO")), MAX, &stats);
        }
        assert_eq!(h.state(0), Some(DeviceState::Offline));
        assert_eq!(h.counts(), (0, 1));
        assert_eq!(FlashStats::get(&stats.device_offlines), 1);
        assert_eq!(
            FlashStats::get(&stats.device_probe_failures),
            u64::from(OFFLINE_STRIKES - 1)
        );
        h.probe_done(0, "d", Ok(()), MAX, &stats);
        assert_eq!(h.state(0), Some(DeviceState::Healthy));
        assert_eq!(h.out_mask(), [false]);
        assert_eq!(FlashStats::get(&stats.device_recoveries), 1);
    }

    #[test]
    fn probes_come_due_once_until_done() {
        let stats = FlashStats::default();
        let mut h = DeviceHealth::new(3, 3);
        assert_eq!(h.due_probes(Instant::now(), &stats), (vec![], None));
        assert!(fail(&mut h, 2, &stats));
        // The first probe waits 50-100 ms (jittered base delay).
        let (due, next) = h.due_probes(Instant::now(), &stats);
        assert!(due.is_empty());
        let next = next.expect("a probe is scheduled");
        let later = next + Duration::from_millis(1);
        assert_eq!(h.due_probes(later, &stats), (vec![2], None));
        // Under way: not due again until it is done.
        assert_eq!(h.due_probes(later, &stats), (vec![], None));
        assert_eq!(FlashStats::get(&stats.device_probes), 1);
        h.probe_done(2, "d", Err(io::Error::other("EIO")), MAX, &stats);
        let (due, next) = h.due_probes(later, &stats);
        assert!(due.is_empty() && next.is_some(), "rescheduled with backoff");
    }

    #[test]
    fn syncs_cover_completed_writes_and_a_failure_reports_them() {
        let stats = FlashStats::default();
        let mut h = DeviceHealth::new(2, 0);
        h.note_write(0);
        h.note_write(0);
        h.note_write(1);
        assert_eq!(h.unsynced(), [(0, 2), (1, 1)]);
        h.synced(0, 2);
        // A sync started before a later write covers only what it saw.
        h.note_write(1);
        h.synced(1, 1);
        assert_eq!(h.unsynced(), [(1, 2)]);
        // A failure reports the unsynced writes (to the pending flushes): none left to sync.
        assert!(fail(&mut h, 1, &stats));
        assert!(h.unsynced().is_empty());
        h.synced(0, 1);
        assert!(
            h.unsynced().is_empty(),
            "an older sync never lowers the mark"
        );
    }
}
