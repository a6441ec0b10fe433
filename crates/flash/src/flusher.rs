//! The interval flusher thread: writes (without syncing) any stream chunk whose oldest record
//! has waited `flush_interval`, so a quiet stream still reaches flash within a bounded time.
//! It waits on the engine condvar and holds the state lock only to hand chunks to the
//! executor.
use std::sync::Arc;
use std::time::Duration;

use crate::engine::Inner;

pub(crate) fn run(inner: &Arc<Inner>) {
    let mut st = inner.state.lock();
    loop {
        if st.closed {
            return;
        }
        // The interval is a runtime knob: re-read it every tick (idle at 100 ms when off).
        let interval = inner.knobs.flush_interval();
        let tick = interval.map_or(Duration::from_millis(100), |i| {
            (i / 2).max(Duration::from_millis(1))
        });
        inner.wake.wait_for(&mut st, tick);
        if st.closed {
            return;
        }
        if let Some(interval) = inner.knobs.flush_interval() {
            inner.flush_old_chunks(&mut st, interval);
        }
    }
}
