//! The flusher thread, the engine's housekeeper: writes (without syncing) any stream chunk
//! whose oldest record has waited `flush_interval`, so a quiet stream still reaches flash
//! within a bounded time; hands records of failed writes to the user's
//! [`ReclaimHandler::lost`](crate::ReclaimHandler::lost) (with the state lock released, so
//! the handler may call the engine); and starts the probes of failing devices when due
//! (the health part, `health.rs`, says which; their IO completes on an executor thread).
//! It waits on the engine condvar and holds the state lock only for memory work and to hand
//! IO to the executor.
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::MutexGuard;

use crate::inner::Inner;
use crate::io::{AlignedBuf, IoOp, IoRequest};
use crate::location::PAGE;
use crate::state::State;

pub(crate) fn run(inner: &Arc<Inner>) {
    let mut state = inner.state.lock();
    let mut next_probe: Option<Instant> = None;
    loop {
        if state.writes.has_lost() {
            let lost = state.writes.take_lost();
            MutexGuard::unlocked(&mut state, || inner.handler.lost(&lost));
            inner
                .lost_handled
                .fetch_add(lost.len() as u64, std::sync::atomic::Ordering::Release);
            continue;
        }
        if state.closed() {
            return;
        }
        // The interval is a runtime knob: re-read it every tick (idle at 100 ms when off).
        let interval = inner.knobs.flush_interval();
        let mut tick = interval.map_or(Duration::from_millis(100), |i| {
            (i / 2).max(Duration::from_millis(1))
        });
        if let Some(at) = next_probe {
            tick = tick.min(at.saturating_duration_since(Instant::now()));
        }
        inner.wake.wait_for(&mut state, tick);
        if state.writes.has_lost() {
            continue;
        }
        if state.closed() {
            return;
        }
        if let Some(interval) = inner.knobs.flush_interval() {
            inner.flush_old_chunks(&mut state, interval);
        }
        next_probe = start_probes(inner, &mut state);
    }
}

/// Start the probes that are due (a zero page over the header of the device's next free
/// segment, if it has one, then a sync); returns when the next one is due.
fn start_probes(inner: &Arc<Inner>, state: &mut State) -> Option<Instant> {
    let (due, next) = state.health.due_probes(Instant::now(), &inner.stats);
    for dev in due {
        let target = state.segments.probe_target(dev);
        let me = Arc::clone(inner);
        let sync = move |me: Arc<Inner>| {
            let again = Arc::clone(&me);
            me.exec.submit(IoRequest {
                op: IoOp::Sync { dev },
                done: Box::new(move |r| probe_done(&again, dev, r.map(|_| ()))),
            });
        };
        match target {
            Some(off) => inner.exec.submit(IoRequest {
                op: IoOp::Write {
                    dev,
                    off,
                    buf: Arc::new(AlignedBuf::zeroed(PAGE as usize)),
                },
                done: Box::new(move |r| match r {
                    Ok(_) => sync(me),
                    Err(e) => probe_done(&me, dev, Err(e)),
                }),
            }),
            None => sync(me),
        }
    }
    next
}

/// A probe of `dev` finished (executor thread).
fn probe_done(inner: &Arc<Inner>, dev: usize, res: io::Result<()>) {
    let max = inner.knobs.device_retry_max();
    let mut guard = inner.state.lock();
    let state = &mut *guard;
    state
        .health
        .probe_done(dev, inner.dev_name(dev), res, max, &inner.stats);
    inner.update_gauges(state);
    drop(guard);
    inner.wake.notify_all();
}
