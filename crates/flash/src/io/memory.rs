//! An in-memory device for tests: fast, deterministic, and able to hand out its contents as a
//! crash image (everything whose write completed, nothing else).
//!
//! Thread-safety: one mutex around the bytes; any executor thread may call it.
use std::io;

use parking_lot::Mutex;

use super::Device;

/// A device backed by a `Vec<u8>`.
pub struct MemoryDevice {
    name: String,
    data: Mutex<Vec<u8>>,
}

impl MemoryDevice {
    /// A zeroed device of `len` bytes.
    pub fn new(name: &str, len: u64) -> Self {
        Self::from_image(name, vec![0; len as usize])
    }

    /// A device holding `image` (e.g. a crash image taken from another device).
    pub fn from_image(name: &str, image: Vec<u8>) -> Self {
        Self {
            name: name.to_string(),
            data: Mutex::new(image),
        }
    }

    /// A copy of the current contents: what a crash at this instant would leave.
    pub fn image(&self) -> Vec<u8> {
        self.data.lock().clone()
    }

    /// Overwrite bytes directly (tests corrupting data on "flash").
    pub fn poke(&self, off: u64, bytes: &[u8]) {
        let mut d = self.data.lock();
        let s = off as usize;
        d[s..s + bytes.len()].copy_from_slice(bytes);
    }
}

fn range(len: usize, off: u64, n: usize) -> io::Result<std::ops::Range<usize>> {
    let s = usize::try_from(off).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let e = s.checked_add(n).filter(|&e| e <= len);
    e.map(|e| s..e)
        .ok_or_else(|| io::Error::other("access beyond end of memory device"))
}

impl Device for MemoryDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> u64 {
        self.data.lock().len() as u64
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let d = self.data.lock();
        let r = range(d.len(), off, buf.len())?;
        buf.copy_from_slice(&d[r]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let mut d = self.data.lock();
        let r = range(d.len(), off, buf.len())?;
        d[r].copy_from_slice(buf);
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        Ok(())
    }
}
