//! What a backend operation fails with: [`BackendError`], and the errno set ([`Errno`]) each
//! error maps onto. The values are NBD's (`doc/proto.md`, "Error values"), which are POSIX
//! errno numbers, so a cache, a file and a remote NBD server report failures alike and the
//! NBD server puts the value straight into a reply.

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
