//! Server time in whole seconds.
//!
//! Expiry in flashtier is absolute unix time in seconds (`u32`, 0 = never). The protocol layer
//! converts memcached's relative/absolute/negative exptime rules into that form using the same
//! clock the store uses, so a test can move time forward without sleeping.
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A seconds clock: the system clock, plus an offset tests can advance.
#[derive(Clone, Debug, Default)]
pub struct Clock {
    offset: Arc<AtomicU32>,
}

impl Clock {
    /// A clock that follows the system time.
    pub fn system() -> Self {
        Self::default()
    }

    /// Current unix time in seconds (plus any test offset).
    pub fn now(&self) -> u32 {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        (secs as u32).wrapping_add(self.offset.load(Ordering::Relaxed))
    }

    /// Current unix time in milliseconds (plus any test offset).
    pub fn now_ms(&self) -> u64 {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        ms + u64::from(self.offset.load(Ordering::Relaxed)) * 1000
    }

    /// Move this clock (and every clone of it) forward by `secs` seconds. For tests.
    pub fn advance(&self, secs: u32) {
        self.offset.fetch_add(secs, Ordering::Relaxed);
    }
}
