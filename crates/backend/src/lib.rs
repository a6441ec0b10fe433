//! The storage behind a block export: the [`BlockBackend`] trait, its errors, and the file
//! and memory backends. Below both the NBD protocol crate (which serves and implements
//! backends) and the block cache (which is one and sits on one), so neither imports the other.
//!
//! # Layout
//! - [`mod@error`]: [`BackendError`] and the [`Errno`] set it maps onto.
//! - [`mod@file`]: [`FileBackend`], a regular file or block device with positional I/O on the
//!   blocking pool.
//! - [`memory`]: [`MemoryBackend`], a RAM image for tests and scratch exports.
//! - [`trace`]: [`Traced`], a decorator recording every request into a trace file.
//!
//! Contract every implementation keeps: a call returns only when its effect is visible to
//! every later call on the same backend from any connection; `write(.., fua = true)` and
//! `flush()` return only once the data (for flush: of every write that already returned) is
//! on non-volatile storage. Callers check ranges against [`BlockBackend::size`], but
//! implementations still refuse out-of-range requests rather than trust them. Methods take
//! `&self` and are called concurrently from many tasks.
#![deny(unsafe_code)]

pub mod error;
pub mod file;
pub mod memory;
pub mod trace;

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;

pub use error::{BackendError, Errno};

pub use file::FileBackend;
pub use memory::MemoryBackend;
pub use trace::{Traced, Tracer};

/// Default maximum payload of a request (2^25 bytes = 32 MiB), which the NBD spec says any
/// client may rely on.
pub const DEFAULT_MAX_PAYLOAD: u32 = 1 << 25;

/// The boxed future every backend method returns; boxing keeps the trait usable as
/// `Arc<dyn BlockBackend>` so a binary can pick the backend at run time.
pub type BackendFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, BackendError>> + Send + 'a>>;

/// Size constraints advertised with `NBD_INFO_BLOCK_SIZE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockSizes {
    /// Smallest addressable unit. Default: 1 byte.
    pub min: u32,
    /// Size below which I/O becomes inefficient. Default: 4096 bytes.
    pub preferred: u32,
    /// Largest READ/WRITE payload accepted. Default: 32 MiB (2^25 bytes).
    pub max_payload: u32,
}

impl Default for BlockSizes {
    fn default() -> Self {
        BlockSizes {
            min: 1,
            preferred: 4096,
            max_payload: DEFAULT_MAX_PAYLOAD,
        }
    }
}

/// Options of a `WRITE_ZEROES` request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZeroFlags {
    /// Persist before returning (`CMD_FLAG_FUA`).
    pub fua: bool,
    /// Keep the range allocated instead of punching a hole (`CMD_FLAG_NO_HOLE`).
    pub no_hole: bool,
}

/// A byte-addressed device an export serves. See the module docs for the contract.
pub trait BlockBackend: Send + Sync + 'static {
    /// Size of the device in bytes; constant for the life of the backend.
    fn size(&self) -> u64;

    /// Size constraints to advertise.
    fn block_sizes(&self) -> BlockSizes {
        BlockSizes::default()
    }

    /// True when a `flush()` issued through one connection covers writes completed through
    /// every other connection, which lets the server advertise `CAN_MULTI_CONN`.
    fn can_multi_conn(&self) -> bool;

    /// True when writes must be refused (`EPERM`).
    fn is_read_only(&self) -> bool {
        false
    }

    /// True when the device prefers sequential access (advertised as `ROTATIONAL`).
    fn is_rotational(&self) -> bool {
        false
    }

    /// Reads `len` bytes at `offset`.
    fn read(&self, offset: u64, len: u32) -> BackendFuture<'_, Bytes>;

    /// Writes `data` at `offset`; with `fua`, persists it before returning.
    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BackendFuture<'_, ()>;

    /// Persists every write that has returned.
    fn flush(&self) -> BackendFuture<'_, ()>;

    /// Hints that `len` bytes at `offset` are no longer needed. Contents afterwards are
    /// unspecified until rewritten.
    fn trim(&self, offset: u64, len: u32) -> BackendFuture<'_, ()>;

    /// Makes `len` bytes at `offset` read as zero.
    fn write_zeroes(&self, offset: u64, len: u32, flags: ZeroFlags) -> BackendFuture<'_, ()>;

    /// Hints that `len` bytes at `offset` will be read soon. Default: nothing to do.
    fn cache(&self, offset: u64, len: u32) -> BackendFuture<'_, ()> {
        let _ = (offset, len);
        Box::pin(async { Ok(()) })
    }
}

/// Shared ownership of a backend is a backend (lets a cache hold `Arc<dyn BlockBackend>`
/// for its backing and still hand it to a server or another layer).
impl<T: BlockBackend + ?Sized> BlockBackend for std::sync::Arc<T> {
    fn size(&self) -> u64 {
        (**self).size()
    }
    fn block_sizes(&self) -> BlockSizes {
        (**self).block_sizes()
    }
    fn can_multi_conn(&self) -> bool {
        (**self).can_multi_conn()
    }
    fn is_read_only(&self) -> bool {
        (**self).is_read_only()
    }
    fn is_rotational(&self) -> bool {
        (**self).is_rotational()
    }
    fn read(&self, offset: u64, len: u32) -> BackendFuture<'_, Bytes> {
        (**self).read(offset, len)
    }
    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BackendFuture<'_, ()> {
        (**self).write(offset, data, fua)
    }
    fn flush(&self) -> BackendFuture<'_, ()> {
        (**self).flush()
    }
    fn trim(&self, offset: u64, len: u32) -> BackendFuture<'_, ()> {
        (**self).trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u32, flags: ZeroFlags) -> BackendFuture<'_, ()> {
        (**self).write_zeroes(offset, len, flags)
    }
    fn cache(&self, offset: u64, len: u32) -> BackendFuture<'_, ()> {
        (**self).cache(offset, len)
    }
}

/// Checks that `offset..offset+len` lies within a device of `size` bytes.
pub fn check_range(offset: u64, len: u64, size: u64) -> Result<(), BackendError> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(BackendError::OutOfRange { offset, len, size }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_check_handles_overflow() {
        assert!(check_range(0, 10, 10).is_ok());
        assert!(check_range(10, 0, 10).is_ok());
        assert!(check_range(5, 6, 10).is_err());
        assert!(check_range(u64::MAX, 2, u64::MAX).is_err());
    }
}
