//! The protocol crate's error type (server set-up and socket failures). Per-request
//! problems are not errors here: they become protocol replies (`CLIENT_ERROR`, ...).
use std::fmt;

/// An error that stops a server.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Binding, accepting or configuring a socket failed.
    Io(std::io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "socket error: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}
