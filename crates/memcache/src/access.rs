//! What a request touches ([`Access`]): the keys it reads or writes, so a connection can run
//! a write beside the reads still in its window when none of them touches its key.
//!
//! Why: a connection's plain reads run together in a window ([`crate::window`]) while their
//! flash reads are at the device, but a write used to wait for the whole window to empty.
//! With a client sending one request per packet and ~10 % SETs, every SET then held the
//! requests behind it for the slowest flash read in flight (milliseconds on a loaded disk):
//! the head-of-line wait behind the open-loop tails of issue 30. A write to a key no running
//! read or write touches cannot change what those see, nor they what it does, so it may
//! run at once, its reply kept in order behind theirs.
//!
//! Invariants: only requests on named keys whose whole effect is on those keys get an
//! [`Access`] (storage, delete, arithmetic, touch, `gat`, meta get/set/delete/arith and the
//! plain reads); anything else (`flush_all`, `stats`, admin, auth, a rejected data block)
//! has none and runs alone. Keys are compared by a 64-bit hash: a collision only makes a
//! request wait. A request with more than [`MAX_TRACKED_KEYS`] keys counts as touching every
//! key, so tracking stays bounded.
use crate::request::Request;

/// Keys a window slot remembers one by one; a request with more touches "everything".
pub const MAX_TRACKED_KEYS: usize = 32;

/// The keys a request touches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Keys {
    One(u64),
    Many(Box<[u64]>),
    /// More than [`MAX_TRACKED_KEYS`]: conflicts with any key.
    All,
}

/// What a request touches, and whether it changes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    pub keys: Keys,
    pub write: bool,
}

/// FNV-1a: a short key is hashed in a few nanoseconds, with no state to share.
fn key_hash(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl Keys {
    /// The keys of a request naming several (a multi-key get).
    fn of<'k>(keys: impl ExactSizeIterator<Item = &'k [u8]>) -> Self {
        if keys.len() > MAX_TRACKED_KEYS {
            Keys::All
        } else {
            Keys::Many(keys.map(key_hash).collect())
        }
    }

    fn hashes(&self) -> &[u64] {
        match self {
            Keys::One(h) => std::slice::from_ref(h),
            Keys::Many(hs) => hs,
            Keys::All => &[],
        }
    }

    /// True when the two share a key (or may: a hash collision, or [`Keys::All`]).
    pub fn overlaps(&self, other: &Keys) -> bool {
        if matches!(self, Keys::All) || matches!(other, Keys::All) {
            return true;
        }
        let (a, b) = (self.hashes(), other.hashes());
        a.iter().any(|h| b.contains(h))
    }
}

impl Access {
    fn one(key: &[u8], write: bool) -> Self {
        Self {
            keys: Keys::One(key_hash(key)),
            write,
        }
    }

    /// What `request` touches; `None` for a request that must run alone. `plain` says
    /// whether it is a plain read ([`crate::connection::is_plain_read`]): any other keyed
    /// request counts as a write.
    pub fn of(request: &Request, plain: bool) -> Option<Self> {
        let write = !plain;
        Some(match request {
            Request::Retrieval(r) => match r.keys.as_slice() {
                [key] => Self::one(key, write),
                keys => Self {
                    keys: Keys::of(keys.iter().map(|k| &k[..])),
                    write,
                },
            },
            Request::MetaGet(m) => Self::one(&m.key, write),
            Request::Storage(s) => Self::one(&s.key, true),
            Request::Delete { key, .. }
            | Request::Arith { key, .. }
            | Request::Touch { key, .. } => Self::one(key, true),
            Request::MetaSet { meta, .. }
            | Request::MetaDelete(meta)
            | Request::MetaArith { meta, .. } => Self::one(&meta.key, true),
            // `mn` touches nothing.
            Request::MetaNoop => Self {
                keys: Keys::Many(Box::new([])),
                write: false,
            },
            _ => return None,
        })
    }

    /// The two cannot run side by side: one writes a key the other touches.
    pub fn conflicts(&self, other: &Access) -> bool {
        (self.write || other.write) && self.keys.overlaps(&other.keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Decoded, Decoder, Limits};
    use crate::connection::is_plain_read;

    fn access(line: &str) -> Option<Access> {
        let mut input = bytes::BytesMut::from(line.as_bytes());
        match Decoder::new(Limits::default()).decode(&mut input) {
            Decoded::Request { request, .. } => Access::of(&request, is_plain_read(&request)),
            other => panic!("{line:?} decoded as {other:?}"),
        }
    }

    fn conflict(a: &str, b: &str) -> bool {
        match (access(a), access(b)) {
            (Some(a), Some(b)) => a.conflicts(&b),
            _ => true,
        }
    }

    #[test]
    fn a_write_conflicts_only_with_requests_on_its_key() {
        assert!(conflict("get a\r\n", "set a 0 0 1\r\nx\r\n"));
        assert!(!conflict("get a\r\n", "set b 0 0 1\r\nx\r\n"));
        assert!(conflict("get x a y\r\n", "delete a\r\n"));
        assert!(!conflict("get x a y\r\n", "delete b\r\n"));
        assert!(conflict("mg a v\r\n", "ms a 1\r\nx\r\n"));
        assert!(conflict("incr a 1\r\n", "incr a 1\r\n"));
        assert!(!conflict("incr a 1\r\n", "decr b 1\r\n"));
        // A meta get that changes the item is a write.
        assert!(conflict("mg a v T10\r\n", "get a\r\n"));
        assert!(conflict("gat 10 a\r\n", "get a\r\n"));
        // Reads never conflict with reads; `mn` with nothing.
        assert!(!conflict("get a\r\n", "gets a\r\n"));
        assert!(!conflict("mn\r\n", "set a 0 0 1\r\nx\r\n"));
    }

    #[test]
    fn requests_that_are_not_on_keys_run_alone_and_big_multigets_touch_everything() {
        for line in ["flush_all\r\n", "stats\r\n", "version\r\n", "me a\r\n"] {
            assert_eq!(access(line), None, "{line:?}");
        }
        let keys: Vec<String> = (0..=MAX_TRACKED_KEYS).map(|i| format!("k{i}")).collect();
        let big = format!("get {}\r\n", keys.join(" "));
        assert_eq!(access(&big).map(|a| a.keys), Some(Keys::All));
        assert!(conflict(&big, "set zzz 0 0 1\r\nx\r\n"));
        assert!(!conflict(&big, "get zzz\r\n"));
    }
}
