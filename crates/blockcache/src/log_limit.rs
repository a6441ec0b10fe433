//! [`LogLimiter`]: at most one log line a second for a repeating event, carrying the count of
//! events since the previous line, so a failing backing or a stalled writer cannot flood the
//! log. One small mutex, never held across an await or another lock.
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// When the event was last logged, and events since.
#[derive(Debug, Default)]
pub(crate) struct LogLimiter(Mutex<(Option<Instant>, u64)>);

impl LogLimiter {
    /// Count one event; `Some(n)` when it is to be logged now (`n` events since the last
    /// line, this one included).
    pub(crate) fn event(&self) -> Option<u64> {
        let mut state = self.0.lock();
        state.1 += 1;
        if state
            .0
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
        {
            let n = state.1;
            *state = (Some(Instant::now()), 0);
            return Some(n);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_the_first_event_then_counts_quietly() {
        let limit = LogLimiter::default();
        assert_eq!(limit.event(), Some(1));
        assert_eq!(limit.event(), None);
        assert_eq!(limit.event(), None);
        // A second later the next line carries the two quiet events and itself.
        limit.0.lock().0 = Some(Instant::now() - Duration::from_secs(2));
        assert_eq!(limit.event(), Some(3));
    }
}
