//! Wall-clock time as the engine stores it: unix seconds in a `u32` (a record's append time,
//! expiry comparisons, a superblock's creation time). A leaf; any thread.
use std::time::{SystemTime, UNIX_EPOCH};

/// Unix seconds now (0 if the clock reads before 1970).
pub(crate) fn now_unix() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0)
}
