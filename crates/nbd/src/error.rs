//! Error types: the NBD errno set, backend errors (which map onto it), codec parse errors and
//! the crate-level [`Error`].
//!
//! Classification follows origin: a [`BackendError`] is the storage's answer and becomes an
//! errno in a reply; a [`ParseError`] is the peer's fault and ends the connection or option;
//! [`Error`] is what a caller of the server or client API sees.

use std::fmt;
use std::io;

/// Error values allowed in an NBD reply (`doc/proto.md`, "Error values").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Errno {
    /// `EPERM` (1): write or trim on a read-only export.
    Perm,
    /// `EIO` (5): input/output error.
    Io,
    /// `ENOMEM` (12): out of memory (avoided where possible).
    NoMem,
    /// `EINVAL` (22): invalid request: bad range for read/trim, unknown command or flag.
    Inval,
    /// `ENOSPC` (28): write past the end of the export, or no space left.
    NoSpc,
    /// `EOVERFLOW` (75): a payload-free request longer than the advertised maximum.
    Overflow,
    /// `ENOTSUP` (95): only for `WRITE_ZEROES` with `FAST_ZERO`.
    NotSup,
    /// `ESHUTDOWN` (108): the server is shutting down.
    Shutdown,
}

impl Errno {
    /// The value on the wire.
    pub fn code(self) -> u32 {
        match self {
            Errno::Perm => 1,
            Errno::Io => 5,
            Errno::NoMem => 12,
            Errno::Inval => 22,
            Errno::NoSpc => 28,
            Errno::Overflow => 75,
            Errno::NotSup => 95,
            Errno::Shutdown => 108,
        }
    }

    /// Decodes a non-zero wire value; unknown values count as `EINVAL`, as the spec tells
    /// clients to do.
    pub fn from_code(code: u32) -> Errno {
        match code {
            1 => Errno::Perm,
            5 => Errno::Io,
            12 => Errno::NoMem,
            28 => Errno::NoSpc,
            75 => Errno::Overflow,
            95 => Errno::NotSup,
            108 => Errno::Shutdown,
            _ => Errno::Inval,
        }
    }

    /// Maps an operating-system error as the spec asks (`EDQUOT`/`EFBIG` → `ENOSPC`, ...).
    pub fn from_io(err: &io::Error) -> Errno {
        match err.raw_os_error() {
            Some(code) if code == rustix::io::Errno::NOSPC.raw_os_error() => Errno::NoSpc,
            Some(code) if code == rustix::io::Errno::DQUOT.raw_os_error() => Errno::NoSpc,
            Some(code) if code == rustix::io::Errno::FBIG.raw_os_error() => Errno::NoSpc,
            Some(code) if code == rustix::io::Errno::PERM.raw_os_error() => Errno::Perm,
            Some(code) if code == rustix::io::Errno::ROFS.raw_os_error() => Errno::Perm,
            Some(code) if code == rustix::io::Errno::ACCESS.raw_os_error() => Errno::Perm,
            Some(code) if code == rustix::io::Errno::INVAL.raw_os_error() => Errno::Inval,
            Some(code) if code == rustix::io::Errno::NOMEM.raw_os_error() => Errno::NoMem,
            _ => Errno::Io,
        }
    }

    /// The C name, for logs and stats.
    pub fn name(self) -> &'static str {
        match self {
            Errno::Perm => "EPERM",
            Errno::Io => "EIO",
            Errno::NoMem => "ENOMEM",
            Errno::Inval => "EINVAL",
            Errno::NoSpc => "ENOSPC",
            Errno::Overflow => "EOVERFLOW",
            Errno::NotSup => "ENOTSUP",
            Errno::Shutdown => "ESHUTDOWN",
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

/// What a [`crate::BlockBackend`] operation can fail with. Each variant maps to one
/// [`Errno`] through [`BackendError::errno`].
#[derive(Debug)]
#[non_exhaustive]
pub enum BackendError {
    /// The operating system failed the I/O; the errno is derived from the OS error.
    Io(io::Error),
    /// The range `offset..offset+len` is not inside the device of `size` bytes.
    OutOfRange { offset: u64, len: u64, size: u64 },
    /// The request is malformed for this backend (`EINVAL`).
    Invalid(&'static str),
    /// The backend is read-only (`EPERM`).
    ReadOnly,
    /// A remote NBD server answered with this error.
    Remote(Errno),
    /// The connection to a remote NBD server is gone (`EIO`).
    Disconnected,
    /// The backend is shutting down (`ESHUTDOWN`).
    Shutdown,
}

impl BackendError {
    /// The NBD error value to put in the reply.
    pub fn errno(&self) -> Errno {
        match self {
            BackendError::Io(err) => Errno::from_io(err),
            BackendError::OutOfRange { .. } | BackendError::Invalid(_) => Errno::Inval,
            BackendError::ReadOnly => Errno::Perm,
            BackendError::Remote(errno) => *errno,
            BackendError::Disconnected => Errno::Io,
            BackendError::Shutdown => Errno::Shutdown,
        }
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendError::Io(err) => write!(f, "backend I/O error: {err}"),
            BackendError::OutOfRange { offset, len, size } => {
                write!(
                    f,
                    "range {offset}+{len} is outside the device of {size} bytes"
                )
            }
            BackendError::Invalid(why) => write!(f, "invalid request: {why}"),
            BackendError::ReadOnly => write!(f, "backend is read-only"),
            BackendError::Remote(errno) => write!(f, "remote NBD server replied {errno}"),
            BackendError::Disconnected => write!(f, "connection to the remote NBD server is lost"),
            BackendError::Shutdown => write!(f, "backend is shutting down"),
        }
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BackendError::Io(err) => Some(err),
            _ => None,
        }
    }
}

impl From<io::Error> for BackendError {
    fn from(err: io::Error) -> Self {
        BackendError::Io(err)
    }
}

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
