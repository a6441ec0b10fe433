//! [`FileBackend`]: a regular file or a block device, accessed with positional reads and
//! writes (`pread`/`pwrite`) on tokio's blocking pool so the runtime's worker threads never
//! wait on the disk.
//!
//! Durability: `flush()` and FUA writes call `fdatasync`. Because every connection shares one
//! file description and the kernel's page cache, a flush through any connection covers all
//! completed writes, so the backend allows `CAN_MULTI_CONN`.
//!
//! TRIM punches a hole in a regular file (ignored where the file system cannot, and on block
//! devices); WRITE_ZEROES punches a hole unless NO_HOLE is set, then uses
//! `FALLOC_FL_ZERO_RANGE`, falling back to writing zero buffers.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::Path;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use rustix::fs::FallocateFlags;

use crate::error::BackendError;
use crate::{check_range, BackendFuture, BlockBackend, ZeroFlags};

/// Zero buffer size used when zeroes must be written as data. Default: 1 MiB.
const ZERO_CHUNK: usize = 1 << 20;

/// A file or block device served as a device.
#[derive(Debug, Clone)]
pub struct FileBackend {
    file: Arc<File>,
    size: u64,
    read_only: bool,
    block_device: bool,
}

impl FileBackend {
    /// Opens `path` read-write (or read-only) and takes its current size as the device size.
    pub fn open(path: impl AsRef<Path>, read_only: bool) -> Result<Self, BackendError> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(!read_only)
            .open(path.as_ref())?;
        let block_device = file.metadata()?.file_type().is_block_device();
        let size = file.seek(SeekFrom::End(0))?;
        Ok(FileBackend {
            file: Arc::new(file),
            size,
            read_only,
            block_device,
        })
    }

    /// Runs `op` on the blocking pool with a handle to the file.
    async fn blocking<T, F>(&self, op: F) -> Result<T, BackendError>
    where
        T: Send + 'static,
        F: FnOnce(&File) -> Result<T, BackendError> + Send + 'static,
    {
        let file = Arc::clone(&self.file);
        tokio::task::spawn_blocking(move || op(&file))
            .await
            .map_err(|_| BackendError::Io(std::io::Error::other("blocking task failed")))?
    }

    fn check_writable(&self) -> Result<(), BackendError> {
        if self.read_only {
            Err(BackendError::ReadOnly)
        } else {
            Ok(())
        }
    }
}

/// Writes zero buffers over `offset..offset+len`.
fn write_zero_data(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    let zeroes = vec![0u8; ZERO_CHUNK.min(len as usize)];
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(zeroes.len() as u64) as usize;
        file.write_all_at(zeroes.get(..n).unwrap_or(&zeroes), offset + done)?;
        done += n as u64;
    }
    Ok(())
}

/// True for errors meaning "this file system cannot do that fallocate mode".
fn unsupported(err: &rustix::io::Errno) -> bool {
    *err == rustix::io::Errno::OPNOTSUPP || *err == rustix::io::Errno::NOSYS
}

impl BlockBackend for FileBackend {
    fn size(&self) -> u64 {
        self.size
    }

    fn can_multi_conn(&self) -> bool {
        true
    }

    fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn read(&self, offset: u64, len: u32) -> BackendFuture<'_, Bytes> {
        Box::pin(async move {
            check_range(offset, u64::from(len), self.size)?;
            self.blocking(move |file| {
                let mut buf = BytesMut::zeroed(len as usize);
                file.read_exact_at(&mut buf, offset)?;
                Ok(buf.freeze())
            })
            .await
        })
    }

    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BackendFuture<'_, ()> {
        Box::pin(async move {
            self.check_writable()?;
            check_range(offset, data.len() as u64, self.size)?;
            self.blocking(move |file| {
                file.write_all_at(&data, offset)?;
                if fua {
                    file.sync_data()?;
                }
                Ok(())
            })
            .await
        })
    }

    fn flush(&self) -> BackendFuture<'_, ()> {
        Box::pin(async move {
            if self.read_only {
                return Ok(());
            }
            self.blocking(|file| Ok(file.sync_data()?)).await
        })
    }

    fn trim(&self, offset: u64, len: u32) -> BackendFuture<'_, ()> {
        Box::pin(async move {
            self.check_writable()?;
            check_range(offset, u64::from(len), self.size)?;
            if self.block_device || len == 0 {
                return Ok(());
            }
            self.blocking(move |file| {
                let mode = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
                match rustix::fs::fallocate(file, mode, offset, u64::from(len)) {
                    Ok(()) => Ok(()),
                    Err(e) if unsupported(&e) => Ok(()),
                    Err(e) => Err(BackendError::Io(e.into())),
                }
            })
            .await
        })
    }

    fn write_zeroes(&self, offset: u64, len: u32, flags: ZeroFlags) -> BackendFuture<'_, ()> {
        let block_device = self.block_device;
        Box::pin(async move {
            self.check_writable()?;
            check_range(offset, u64::from(len), self.size)?;
            if len == 0 {
                return Ok(());
            }
            self.blocking(move |file| {
                let len = u64::from(len);
                let mode = if flags.no_hole {
                    FallocateFlags::ZERO_RANGE | FallocateFlags::KEEP_SIZE
                } else {
                    FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE
                };
                let done = if block_device {
                    false
                } else {
                    match rustix::fs::fallocate(file, mode, offset, len) {
                        Ok(()) => true,
                        Err(e) if unsupported(&e) => false,
                        Err(e) => return Err(BackendError::Io(e.into())),
                    }
                };
                if !done {
                    write_zero_data(file, offset, len)?;
                }
                if flags.fua {
                    file.sync_data()?;
                }
                Ok(())
            })
            .await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str, len: usize) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("ftbackend-file-{tag}-{}", std::process::id()));
        std::fs::write(&p, vec![0x5au8; len]).expect("scratch file");
        p
    }

    #[tokio::test]
    async fn zeroes_trim_fua_and_limits() {
        let path = scratch("ops", 1 << 20);
        let b = FileBackend::open(&path, false).expect("open");
        assert_eq!(b.size(), 1 << 20);
        b.write(4096, Bytes::from(vec![7u8; 8192]), true)
            .await
            .expect("fua write");
        assert_eq!(
            &b.read(4096, 8192).await.expect("read")[..],
            &[7u8; 8192][..]
        );
        for no_hole in [false, true] {
            let flags = ZeroFlags { fua: true, no_hole };
            b.write_zeroes(4096, 4096, flags).await.expect("zeroes");
            assert!(b
                .read(4096, 4096)
                .await
                .expect("read")
                .iter()
                .all(|&x| x == 0));
            b.write(4096, Bytes::from(vec![7u8; 4096]), false)
                .await
                .expect("rewrite");
        }
        b.trim(65536, 65536).await.expect("trim");
        b.flush().await.expect("flush");
        assert!(matches!(
            b.read((1 << 20) - 1, 2).await,
            Err(BackendError::OutOfRange { .. })
        ));
        assert!(b
            .write(1 << 20, Bytes::from_static(b"x"), false)
            .await
            .is_err());
        assert_eq!(
            std::fs::metadata(&path).expect("meta").len(),
            1 << 20,
            "size is kept"
        );

        let ro = FileBackend::open(&path, true).expect("open ro");
        assert!(ro.is_read_only());
        let err = ro
            .write(0, Bytes::from_static(b"x"), false)
            .await
            .expect_err("read-only");
        assert_eq!(err.errno(), crate::Errno::Perm);
        std::fs::remove_file(&path).expect("cleanup");
    }
}
