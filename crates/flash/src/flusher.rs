//! The flusher thread, the engine's housekeeper: writes (without syncing) any stream chunk
//! whose oldest record has waited `flush_interval`, so a quiet stream still reaches flash
//! within a bounded time; hands records of failed writes to the user's
//! [`ReclaimHandler::lost`](crate::ReclaimHandler::lost) (with the state lock released, so
//! the handler may call the engine); and starts the probes of failing devices when due
//! (`health.rs`). It waits on the engine condvar and holds the state lock only for memory
//! work and to hand IO to the executor.
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::MutexGuard;

use crate::engine::Inner;

pub(crate) fn run(inner: &Arc<Inner>) {
    let mut state = inner.state.lock();
    let mut next_probe: Option<Instant> = None;
    loop {
        if !state.lost.is_empty() {
            let lost = std::mem::take(&mut state.lost);
            MutexGuard::unlocked(&mut state, || inner.handler.lost(&lost));
            inner
                .lost_handled
                .fetch_add(lost.len() as u64, std::sync::atomic::Ordering::Release);
            continue;
        }
        if state.closed {
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
        if !state.lost.is_empty() {
            continue;
        }
        if state.closed {
            return;
        }
        if let Some(interval) = inner.knobs.flush_interval() {
            inner.flush_old_chunks(&mut state, interval);
        }
        next_probe = inner.run_probes(&mut state);
    }
}
