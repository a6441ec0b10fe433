//! memcached's exptime rules, converted to the store's absolute unix seconds.
//!
//! 0 means never; 1..=30 days is relative to now; anything larger is an absolute unix time;
//! a negative value means "already expired". The store treats any non-zero time at or before
//! its clock's `now` as expired, so "expired" is encoded as 1 (a time long past).

/// memcached's `REALTIME_MAXDELTA`: 30 days in seconds.
pub const MAX_RELATIVE: i32 = 60 * 60 * 24 * 30;

/// Convert a client exptime to absolute unix seconds (0 = never) at `now`.
pub fn absolute(exptime: i32, now: u32) -> u32 {
    match exptime {
        0 => 0,
        e if e < 0 => 1,
        e if e <= MAX_RELATIVE => now.saturating_add(e as u32),
        e => e as u32,
    }
}

/// Remaining TTL as the meta `t` flag reports it: -1 for never.
pub fn remaining(abs: u32, now: u32) -> i64 {
    if abs == 0 {
        -1
    } else {
        i64::from(abs) - i64::from(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules() {
        let now = 1_700_000_000;
        assert_eq!(absolute(0, now), 0);
        assert_eq!(absolute(-1, now), 1);
        assert_eq!(absolute(10, now), now + 10);
        assert_eq!(absolute(MAX_RELATIVE, now), now + MAX_RELATIVE as u32);
        assert_eq!(absolute(MAX_RELATIVE + 1, now), MAX_RELATIVE as u32 + 1);
        assert_eq!(absolute(1_800_000_000, now), 1_800_000_000);
        assert_eq!(remaining(0, now), -1);
        assert_eq!(remaining(now + 5, now), 5);
    }
}
