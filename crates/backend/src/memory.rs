//! [`MemoryBackend`]: a device image held in RAM. Used by tests and for scratch exports; all
//! data is lost when it is dropped, so `flush` is trivially durable for its lifetime.
//!
//! Invariant: the image length never changes. One `RwLock` guards it; every operation holds
//! it only for a memcpy, never across an await.

use std::sync::RwLock;

use bytes::Bytes;

use crate::error::BackendError;
use crate::{check_range, BackendFuture, BlockBackend, ZeroFlags};

/// A RAM-backed device.
#[derive(Debug)]
pub struct MemoryBackend {
    image: RwLock<Vec<u8>>,
    size: u64,
}

impl MemoryBackend {
    /// A zero-filled device of `size` bytes.
    pub fn new(size: usize) -> Self {
        MemoryBackend {
            image: RwLock::new(vec![0; size]),
            size: size as u64,
        }
    }

    /// A copy of the whole image (for tests).
    pub fn snapshot(&self) -> Vec<u8> {
        match self.image.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn fill(&self, offset: u64, len: u64, with: Option<&[u8]>) -> Result<(), BackendError> {
        check_range(offset, len, self.size)?;
        let mut image = self
            .image
            .write()
            .map_err(|_| BackendError::Invalid("poisoned"))?;
        let start = offset as usize;
        let end = start + len as usize;
        let dst = image
            .get_mut(start..end)
            .ok_or(BackendError::Invalid("range"))?;
        match with {
            Some(data) => dst.copy_from_slice(data),
            None => dst.fill(0),
        }
        Ok(())
    }
}

impl BlockBackend for MemoryBackend {
    fn size(&self) -> u64 {
        self.size
    }

    fn can_multi_conn(&self) -> bool {
        true
    }

    fn read(&self, offset: u64, len: u32) -> BackendFuture<'_, Bytes> {
        Box::pin(async move {
            check_range(offset, u64::from(len), self.size)?;
            let image = self
                .image
                .read()
                .map_err(|_| BackendError::Invalid("poisoned"))?;
            let start = offset as usize;
            let data = image
                .get(start..start + len as usize)
                .ok_or(BackendError::Invalid("range"))?;
            Ok(Bytes::copy_from_slice(data))
        })
    }

    fn write(&self, offset: u64, data: Bytes, _fua: bool) -> BackendFuture<'_, ()> {
        Box::pin(async move { self.fill(offset, data.len() as u64, Some(&data)) })
    }

    fn flush(&self) -> BackendFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }

    fn trim(&self, offset: u64, len: u32) -> BackendFuture<'_, ()> {
        Box::pin(async move { self.fill(offset, u64::from(len), None) })
    }

    fn write_zeroes(&self, offset: u64, len: u32, _flags: ZeroFlags) -> BackendFuture<'_, ()> {
        Box::pin(async move { self.fill(offset, u64::from(len), None) })
    }
}
