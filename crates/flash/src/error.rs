//! The engine's error type.
//!
//! Errors are classified by origin so a face can map them to its protocol: `Config` and
//! `RecordTooLarge` are caller mistakes; `NoSpace` and `Busy` are back-pressure (the kv face
//! keeps the item in RAM, the block face waits and retries); `Io`, `DeviceFailed` and `Corrupt`
//! are internal faults (`SERVER_ERROR`, NBD `EIO`). A corrupt or stale record is always an
//! error, never data.
use std::fmt;
use std::io;
use std::path::PathBuf;

/// Everything the flash engine can fail with.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is invalid (message says which setting and why).
    Config(String),
    /// A `PATH:SIZE` device spec could not be parsed.
    Spec(String),
    /// A device file does not exist and creation was not requested, or its directory is missing.
    DeviceMissing(PathBuf),
    /// The file system holding a device does not support `O_DIRECT` (tmpfs, some FUSE).
    DirectIoUnsupported(PathBuf),
    /// The devices hold a flashtier format that does not match the configuration (or each
    /// other); the message says what differs. Open with `reformat_on_mismatch` to wipe.
    Mismatch(String),
    /// A device was formatted for another size than the one configured now (so its segments
    /// would not line up): the one mismatch a user makes by editing a size. Nothing was
    /// written; opening at `formatted` bytes finds what it held, `reformat_on_mismatch`
    /// wipes it.
    Resized {
        /// Device name (path or label).
        device: String,
        /// Bytes the device was formatted for (its superblock's device size).
        formatted: u64,
        /// Bytes configured now.
        requested: u64,
    },
    /// A device holds data that is not flashtier's of this role (a file system, a partition
    /// table, another face's device, any non-zero bytes): the engine formats only blank
    /// devices unless `FlashConfig::force_format` is set. Nothing was written to it.
    NotBlank {
        /// Device name (path or label).
        device: String,
        /// What was found ("an ext4 file system", "non-zero data at byte 4096 ...").
        found: String,
    },
    /// Two devices of a set, or a device and another path the user named, are the same
    /// storage (the same file, block device, or overlapping partitions); the message says which.
    SameStorage(String),
    /// An I/O error from a device, with the device name and the operation.
    Io {
        /// Device name (path or label).
        device: String,
        /// What was being done (`read`, `write`, `sync`, `open`, ...).
        op: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// No device takes writes: every one is failing or offline after write or sync errors
    /// (probed, and back in allocation when it works again). The text names the devices.
    DeviceFailed(String),
    /// No free segment is available for this stream right now (reclaim is running).
    NoSpace,
    /// A bounded queue is full (write buffers in flight); retry later. Reads never return it:
    /// past `read_queue_limit` they wait.
    Busy(&'static str),
    /// The record does not fit in one write chunk.
    RecordTooLarge {
        /// Encoded size of the record in bytes.
        size: usize,
        /// Largest encodable record in bytes.
        max: usize,
    },
    /// The location does not point into a live segment (freed, never written, out of range).
    InvalidLocation(u64),
    /// The bytes at a location failed their checksum or do not parse as a record. Also
    /// returned for stale records from a segment's previous life (checksum seeded by seq).
    Corrupt(&'static str),
    /// The engine is shut down.
    Closed,
}

impl Error {
    pub(crate) fn io(device: &str, op: &'static str, source: io::Error) -> Self {
        Error::Io {
            device: device.to_string(),
            op,
            source,
        }
    }

    /// True for faults inside the engine or its devices (as opposed to caller mistakes and
    /// back-pressure).
    pub fn is_internal(&self) -> bool {
        matches!(
            self,
            Error::Io { .. } | Error::DeviceFailed(_) | Error::Corrupt(_) | Error::Closed
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(m) => write!(f, "invalid flash config: {m}"),
            Error::Spec(m) => write!(f, "invalid flash device spec: {m}"),
            Error::DeviceMissing(p) => write!(
                f,
                "flash device {} does not exist (or its directory is missing)",
                p.display()
            ),
            Error::DirectIoUnsupported(p) => write!(
                f,
                "file system of {} does not support O_DIRECT (tmpfs?); use a real disk or \
                 disable direct IO",
                p.display()
            ),
            Error::Mismatch(m) => write!(f, "flash format mismatch: {m}"),
            Error::Resized {
                device,
                formatted,
                requested,
            } => write!(
                f,
                "flash format mismatch: device {device} was formatted for {}, now {} is \
                 configured",
                crate::size::format_size(*formatted),
                crate::size::format_size(*requested)
            ),
            Error::NotBlank { device, found } => write!(
                f,
                "refusing to format {device}: it holds {found}; flashtier formats only \
                 all-zero devices and its own (force the format to overwrite it)"
            ),
            Error::SameStorage(m) => write!(f, "refusing to use the same storage twice: {m}"),
            Error::Io { device, op, source } => write!(f, "flash {op} on {device}: {source}"),
            Error::DeviceFailed(d) => {
                write!(f, "no flash device takes writes ({d} failing or offline)")
            }
            Error::NoSpace => write!(f, "no free flash segment"),
            Error::Busy(q) => write!(f, "flash {q} queue full"),
            Error::RecordTooLarge { size, max } => {
                write!(f, "record of {size} bytes exceeds the {max}-byte maximum")
            }
            Error::InvalidLocation(l) => write!(f, "flash location {l:#x} is not live"),
            Error::Corrupt(what) => write!(f, "corrupt flash data: {what}"),
            Error::Closed => write!(f, "flash engine is closed"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Shorthand for the engine's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;
