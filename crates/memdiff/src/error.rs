//! The crate's error type: only failures of the harness itself. A divergence between the two
//! servers is not an error but the result ([`crate::runner::Outcome::Diverged`]).

use std::fmt;
use std::io;

/// Why a differential run could not be carried out.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Connecting to a server failed.
    Connect {
        /// The address as given.
        addr: String,
        /// The underlying error.
        source: io::Error,
    },
    /// The configuration cannot work (e.g. zero connections).
    Config(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Connect { addr, source } => write!(f, "cannot connect to {addr}: {source}"),
            Error::Config(msg) => write!(f, "bad configuration: {msg}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Connect { source, .. } => Some(source),
            Error::Config(_) => None,
        }
    }
}
