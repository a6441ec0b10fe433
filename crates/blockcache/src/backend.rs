//! [`BlockBackend`] for [`BlockCache`]: what the NBD server calls. Thin: each request goes
//! to the read or write path (`request.rs`); TRIM is accepted and ignored (a hint:
//! contents after TRIM are unspecified, so keeping them is correct).
//!
//! Threads: request tasks (tokio), one per NBD connection's in-flight request.

use bytes::Bytes;
use flashtier_backend::{check_range, BackendFuture, BlockBackend, BlockSizes, ZeroFlags};

use crate::cache::BlockCache;

impl BlockBackend for BlockCache {
    fn size(&self) -> u64 {
        self.io.size()
    }

    fn block_sizes(&self) -> BlockSizes {
        BlockSizes {
            min: 1,
            preferred: self.io.block_size as u32,
            max_payload: 32 << 20,
        }
    }

    fn can_multi_conn(&self) -> bool {
        // One flash engine and one backing for every connection: a FLUSH covers all.
        true
    }

    fn read(&self, offset: u64, len: u32) -> BackendFuture<'_, Bytes> {
        Box::pin(self.do_read(offset, len))
    }

    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BackendFuture<'_, ()> {
        Box::pin(self.do_write(offset, data, fua))
    }

    fn flush(&self) -> BackendFuture<'_, ()> {
        Box::pin(self.do_flush())
    }

    fn trim(&self, offset: u64, len: u32) -> BackendFuture<'_, ()> {
        // A hint: contents after TRIM are unspecified, so keeping them is correct.
        Box::pin(async move { check_range(offset, u64::from(len), self.size()) })
    }

    fn write_zeroes(&self, offset: u64, len: u32, flags: ZeroFlags) -> BackendFuture<'_, ()> {
        Box::pin(self.do_zeroes(offset, len, flags.fua))
    }
}
