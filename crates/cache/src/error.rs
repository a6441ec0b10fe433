//! The cache layer's error type.
//!
//! Errors are classified by origin so the protocol layer can map them straight to
//! `CLIENT_ERROR` (the request itself was unacceptable) or `SERVER_ERROR` (the server could
//! not do something it should have been able to do).
use std::fmt;

/// An error from the cache layer.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The item (key + value + header) is larger than the largest item the store accepts.
    /// memcached answers `SERVER_ERROR object too large for cache`.
    TooLarge { size: usize, max: usize },
    /// No memory could be found for the item even after eviction.
    /// memcached answers `SERVER_ERROR out of memory storing object`.
    OutOfMemory,
    /// The flash tier failed the request (I/O error, full device, corrupt record).
    Flash(String),
    /// An internal invariant did not hold (a bug); the request fails rather than guessing.
    Internal(&'static str),
    /// A new memory limit outside what the store can take at run time
    /// ([`crate::Cache::set_memory_limit`]); memcached answers `MEMLIMIT_ADJUST_FAILED`.
    MemoryLimit { requested: u64, min: u64, max: u64 },
    /// An unknown runtime knob or a value it does not accept (`KvStore::set_knob`); the
    /// text says which and what is accepted. A client error.
    Knob(String),
    /// The small-object tier could not close cleanly (a merge or the superblock write
    /// failed): its next open starts empty. Only from [`crate::Cache::close`].
    Small(String),
    /// Flash refused an append for back-pressure while RAM was evicting for a write: the
    /// write awaits room holding no lock and tries again (`flash_tier::backpressure`). Never
    /// returned by the store's public operations.
    FlashBusy,
}

impl Error {
    /// True when the client caused the error (maps to `CLIENT_ERROR`), false when the server
    /// did (maps to `SERVER_ERROR`).
    pub fn is_client_error(&self) -> bool {
        matches!(self, Error::Knob(_))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::TooLarge { .. } => write!(f, "object too large for cache"),
            Error::OutOfMemory => write!(f, "out of memory storing object"),
            Error::Flash(msg) => write!(f, "flash error: {msg}"),
            Error::FlashBusy => write!(f, "flash busy"),
            Error::Small(msg) => write!(f, "small-object tier: {msg}"),
            Error::Internal(what) => write!(f, "internal error: {what}"),
            Error::Knob(msg) => write!(f, "{msg}"),
            Error::MemoryLimit {
                requested,
                min,
                max,
            } => write!(
                f,
                "memory limit {requested} bytes out of bounds ({min}..={max})"
            ),
        }
    }
}

impl std::error::Error for Error {}
