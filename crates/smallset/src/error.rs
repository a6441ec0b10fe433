//! The small tier's errors: a typed enum, classified by origin (the caller's settings or the
//! device), mapped by the cache onto `SERVER_ERROR` (a device error on a GET is a miss the
//! cache counts, never a wrong value).
use std::fmt;

/// What went wrong in the small tier.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A setting is out of range (the message says which and why).
    Config(String),
    /// The device is not usable (missing, foreign data, too small).
    Device(String),
    /// A device read or write failed.
    Io(std::io::Error),
    /// The tier is closed.
    Closed,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(m) => write!(f, "small tier setting: {m}"),
            Error::Device(m) => write!(f, "small tier device: {m}"),
            Error::Io(e) => write!(f, "small tier I/O: {e}"),
            Error::Closed => write!(f, "small tier is closed"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}
