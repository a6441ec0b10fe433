//! The block cache's error type: opening failures (configuration, flash engine, backing).
//! Errors on the data path are [`flashtier_backend::BackendError`]s, which map to NBD errno
//! replies.
use std::fmt;

/// What opening a [`crate::BlockCache`] or changing a tunable can fail with.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A setting is invalid (the message names it).
    Config(String),
    /// The flash engine failed to open or recover.
    Flash(flashtier_flash::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(m) => write!(f, "block cache config: {m}"),
            Error::Flash(e) => write!(f, "cache device: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Config(_) => None,
            Error::Flash(e) => Some(e),
        }
    }
}

impl From<flashtier_flash::Error> for Error {
    fn from(e: flashtier_flash::Error) -> Self {
        Error::Flash(e)
    }
}
