//! A file or block device opened with `O_DIRECT`, read and written with `pread`/`pwrite`.
//!
//! This is the device the psync executor drives directly; the io_uring executor uses its
//! file descriptor ([`Device::raw_fd`]). A missing regular file is created (empty) at open
//! when the spec allows it; a missing directory is a clear [`Error::DeviceMissing`]. The file
//! is sized to the configured length with `fallocate` only in [`Device::prepare`], once the
//! engine has probed what it held and decided to use it (so a full file system fails at
//! open, not at the first write, and a refused file is never grown). If the open fails
//! after that, [`FileDevice::undo`] removes the file it created or shrinks the one it grew
//! back to its old length.
//!
//! Threads: any executor thread; `pread`/`pwrite` on one fd are safe concurrently.
// `unsafe` is needed here for raw syscalls/io_uring; each block states its SAFETY.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::Device;
use crate::error::{Error, Result};

/// A file or block device.
pub struct FileDevice {
    name: String,
    path: PathBuf,
    file: File,
    len: u64,
    /// Bytes the file held before this open (0 if it was created); the probe reads only
    /// these, and `undo` shrinks the file back to this length.
    existing: u64,
    /// This open created the file.
    created: bool,
    block_device: bool,
    /// The same file opened without `O_DIRECT`, for the crash journal's small writes through
    /// the page cache (opened at the first one).
    buffered: std::sync::OnceLock<File>,
    /// The journal's region mapped through `buffered` (`journal_attach`), when it is.
    journal_map: std::sync::OnceLock<super::journal_map::JournalMap>,
}

impl FileDevice {
    /// Open `path` (creating it, empty, if `create` and it is missing; [`Device::prepare`]
    /// sizes it to `size` bytes if shorter). `size == 0` uses the existing size. `direct`
    /// opens with `O_DIRECT`. The file is locked (`flock`) for as long as it is open.
    pub fn open(path: &Path, size: u64, create: bool, direct: bool) -> Result<Self> {
        let name = path.display().to_string();
        let exists = path.exists();
        if !exists {
            let parent_ok = path
                .parent()
                .is_none_or(|p| p.as_os_str().is_empty() || p.is_dir());
            if !create || !parent_ok || size == 0 {
                return Err(Error::DeviceMissing(PathBuf::from(path)));
            }
        }
        let mut opts = OpenOptions::new();
        opts.read(true).write(true);
        if !exists {
            opts.create_new(true);
        }
        if direct {
            opts.custom_flags(libc::O_DIRECT);
        }
        let mut file = match opts.open(path) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && direct => {
                if !exists {
                    let _ = std::fs::remove_file(path);
                }
                return Err(Error::DirectIoUnsupported(PathBuf::from(path)));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(Error::DeviceMissing(PathBuf::from(path)))
            }
            Err(e) => return Err(Error::io(&name, "open", e)),
        };
        let created = !exists;
        let fail = |e: Error| {
            if created {
                let _ = std::fs::remove_file(path);
            }
            e
        };
        lock_exclusive(&file).map_err(|e| fail(Error::io(&name, "lock", e)))?;
        let meta = file
            .metadata()
            .map_err(|e| fail(Error::io(&name, "stat", e)))?;
        let block_device = meta.file_type().is_block_device();
        let (len, existing) = if block_device {
            let dev_len = file
                .seek(SeekFrom::End(0))
                .map_err(|e| Error::io(&name, "seek", e))?;
            let len = if size == 0 {
                dev_len
            } else {
                size.min(dev_len)
            };
            (len, len)
        } else {
            let cur = meta.len();
            if size > cur && !create {
                return Err(Error::Config(format!(
                    "{name} is {cur} bytes, smaller than the configured {size}"
                )));
            }
            (if size == 0 { cur } else { size }, cur)
        };
        Ok(Self {
            name,
            path: path.to_path_buf(),
            file,
            len,
            existing,
            created,
            block_device,
            buffered: std::sync::OnceLock::new(),
            journal_map: std::sync::OnceLock::new(),
        })
    }

    /// Undo what this open did to the file system, after an open that failed: remove the
    /// file if this open created it, else shrink it back to the length it had (freeing
    /// what `prepare` allocated, also after a partly failed `fallocate`).
    pub fn undo(&self) {
        if self.created {
            let _ = std::fs::remove_file(&self.path);
        } else if !self.block_device {
            let grown = self.file.metadata().is_ok_and(|m| m.len() != self.existing);
            if grown {
                let _ = self.file.set_len(self.existing);
            }
        }
    }

    /// True if this open created the file.
    pub fn created(&self) -> bool {
        self.created
    }

    /// The page-cache handle of the file (see `buffered`).
    fn buffered(&self) -> io::Result<&File> {
        if let Some(f) = self.buffered.get() {
            return Ok(f);
        }
        let f = OpenOptions::new().read(true).write(true).open(&self.path)?;
        Ok(self.buffered.get_or_init(|| f))
    }
}

/// How long to wait for the lock of a process that just died: the kernel drops a killed
/// process's io_uring ring (and the file references it holds, hence the lock) asynchronously,
/// a moment after the process is gone, so a restart right after `kill -9` can find the lock
/// still held. A lock whose owner (from /proc/locks) is a running process is refused at once.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Take an exclusive advisory lock so two engines never share a device; released when the
/// file is closed (also by a crash, see [`LOCK_WAIT`]).
pub fn lock_exclusive(file: &File) -> io::Result<()> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    let mut told = false;
    loop {
        // SAFETY: `file` owns a valid open descriptor for the duration of the call; flock
        // touches no memory of ours.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::WouldBlock {
            return Err(err);
        }
        let holder = file.metadata().ok().and_then(|m| lock_holder(&m));
        if let Some(pid) = holder.filter(|p| running(*p)) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("in use by running process {pid}"),
            ));
        }
        if std::time::Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "still locked by a process that exited (its lock was not released)",
            ));
        }
        if !told {
            told = true;
            log::info!(
                "waiting up to {} s for the lock of an exited process{} to be released",
                LOCK_WAIT.as_secs(),
                holder.map(|p| format!(" (pid {p})")).unwrap_or_default()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A process that exists and is not a zombie (a zombie's file references are gone).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(") ")
            .is_some_and(|(_, r)| !r.starts_with('Z') && !r.starts_with('X'))
    })
}

/// The pid owning a `flock` on the file `m` describes, from /proc/locks
/// (`N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE 0 EOF`, device numbers in hex).
fn lock_holder(m: &std::fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::MetadataExt as _;
    let dev = m.dev();
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let want = (major, minor, m.ino());
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.get(1) != Some(&"FLOCK") {
            return None;
        }
        let mut id = f.get(5)?.split(':');
        let maj = u64::from_str_radix(id.next()?, 16).ok()?;
        let min = u64::from_str_radix(id.next()?, 16).ok()?;
        let ino = id.next()?.parse::<u64>().ok()?;
        ((maj, min, ino) == want).then(|| f.get(4)?.parse().ok())?
    })
}

/// Bytes an unprivileged writer may still allocate on `file`'s file system.
fn free_bytes(file: &File) -> io::Result<u64> {
    // SAFETY: an all-zero `statvfs` is a valid value of this plain C struct.
    let mut vfs: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `file` owns a valid open descriptor for the duration of the call and `vfs` is a
    // properly aligned, writable `statvfs` the kernel fills in.
    let rc = unsafe { libc::fstatvfs(file.as_raw_fd(), &mut vfs) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(vfs.f_bavail.saturating_mul(vfs.f_frsize))
}

fn allocate(file: &File, size: u64) -> io::Result<()> {
    let len =
        libc::off_t::try_from(size).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `file` owns a valid open descriptor for the duration of the call; fallocate
    // touches no memory of ours.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        // File systems without fallocate: a sparse file still works.
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => file.set_len(size),
        _ => Err(err),
    }
}

impl Device for FileDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, off)
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.file.write_all_at(buf, off)
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.file.as_raw_fd())
    }

    fn journal_attach(&self, off: u64, len: u64) -> io::Result<()> {
        if self.journal_map.get().is_none() {
            let map = super::journal_map::JournalMap::new(self.buffered()?, off, len)?;
            let _ = self.journal_map.set(map);
        }
        Ok(())
    }

    fn journal_write(&self, bytes: &[u8], off: u64) -> io::Result<()> {
        if self.journal_map.get().is_some_and(|m| m.write(bytes, off)) {
            return Ok(());
        }
        self.buffered()?.write_all_at(bytes, off)
    }

    fn journal_read(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        if self.journal_map.get().is_some_and(|m| m.read(buf, off)) {
            return Ok(());
        }
        self.buffered()?.read_exact_at(buf, off)
    }

    fn journal_sync(&self) -> io::Result<()> {
        // msync(MS_SYNC) of a file range is an fdatasync of it (the same barrier).
        match self.journal_map.get() {
            Some(m) => m.sync(),
            None => self.buffered()?.sync_data(),
        }
    }

    fn probe(&self) -> io::Result<crate::probe::Content> {
        // Buffered reads of exactly the bytes that were there (no O_DIRECT alignment).
        let plain = File::open(&self.path)?;
        crate::probe::inspect(self.existing, &mut |off, buf: &mut [u8]| {
            plain.read_at(buf, off)
        })
    }

    fn prepare(&self) -> io::Result<()> {
        if self.block_device || self.existing >= self.len {
            return Ok(());
        }
        // Refuse before allocating anything when the file system cannot hold the growth (a
        // failed fallocate may leave metadata blocks behind even after the file is shrunk).
        let need = self.len - self.existing;
        let free = free_bytes(&self.file)?;
        if need > free {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                format!(
                    "No space left on device: {} bytes are needed to size it to {}, the file \
                     system has {free} free",
                    need, self.len
                ),
            ));
        }
        allocate(&self.file, self.len)
    }
}
