//! The crate's error type.

use std::fmt;
use std::io;

/// Errors from configuring or running a load.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A workload or command-line setting is invalid; the string says which and why.
    Config(String),
    /// Connecting to the server failed.
    Connect {
        /// The address that was dialled.
        addr: String,
        /// The underlying error.
        source: io::Error,
    },
    /// A socket or poll call failed in the middle of a run.
    Io(io::Error),
    /// The server sent bytes that are not a reply to what was asked; the stream cannot be
    /// resynchronised, so the run is aborted rather than reporting skewed numbers.
    Protocol(String),
    /// Every connection failed before the run ended.
    AllConnectionsLost,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(s) => write!(f, "invalid configuration: {s}"),
            Error::Connect { addr, .. } => write!(f, "cannot connect to {addr}"),
            Error::Io(_) => write!(f, "socket I/O failed"),
            Error::Protocol(s) => write!(f, "protocol error: {s}"),
            Error::AllConnectionsLost => write!(f, "all connections to the server were lost"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Connect { source, .. } => Some(source),
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}
