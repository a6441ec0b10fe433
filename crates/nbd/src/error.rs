//! Error types: codec parse errors and the crate-level [`Error`]. The errno set and backend
//! errors (`Errno`, `BackendError`) live in `flashtier-backend`, below this crate.
//!
//! Classification follows origin: a `BackendError` is the storage's answer and becomes an
//! errno in a reply; a [`ParseError`] is the peer's fault and ends the connection or option;
//! [`Error`] is what a caller of the server or client API sees.

use std::fmt;
use std::io;

pub(crate) use flashtier_backend::{BackendError, Errno};

/// Why a byte slice is not a valid protocol message. Codecs return it from their `parse_*`
/// functions; `Incomplete` means "read more bytes and try again".
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseError {
    /// At least `needed` bytes in total are required before the message can be parsed.
    Incomplete { needed: usize },
    /// A magic number did not match.
    BadMagic { expected: u64, found: u64 },
    /// A length field is larger than allowed.
    TooLong { len: u64, max: u64 },
    /// The message is structurally invalid.
    Invalid(&'static str),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Incomplete { needed } => {
                write!(f, "incomplete message: {needed} bytes needed")
            }
            ParseError::BadMagic { expected, found } => {
                write!(f, "bad magic {found:#x}, expected {expected:#x}")
            }
            ParseError::TooLong { len, max } => write!(f, "length {len} exceeds maximum {max}"),
            ParseError::Invalid(why) => write!(f, "invalid message: {why}"),
        }
    }
}

impl std::error::Error for ParseError {}

/// Errors of the server and client APIs.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Socket or file I/O failed.
    Io(io::Error),
    /// The peer sent bytes that break the protocol.
    Protocol(ParseError),
    /// Negotiation failed; the text says how (e.g. the server refused the export).
    Handshake(String),
    /// An `nbd://` / `nbd+unix://` URI or a listen address could not be parsed.
    Address(String),
    /// A remote server answered a request with an error.
    Remote(Errno),
    /// The connection is closed.
    Closed,
    /// The configuration is invalid.
    Config(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(err) => write!(f, "I/O error: {err}"),
            Error::Protocol(err) => write!(f, "protocol error: {err}"),
            Error::Handshake(why) => write!(f, "handshake failed: {why}"),
            Error::Address(why) => write!(f, "bad address: {why}"),
            Error::Remote(errno) => write!(f, "server replied {errno}"),
            Error::Closed => write!(f, "connection closed"),
            Error::Config(why) => write!(f, "invalid configuration: {why}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(err) => Some(err),
            Error::Protocol(err) => Some(err),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(err: io::Error) -> Self {
        Error::Io(err)
    }
}

impl From<ParseError> for Error {
    fn from(err: ParseError) -> Self {
        Error::Protocol(err)
    }
}
