//! A device whose writes wait while its gate is shut: a device slower than the writer, at
//! the moment a test chooses, so back-pressure (every chunk write in flight) can be made to
//! happen rather than hoped for.
use std::io;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use flashtier_cache::flash::Device;

/// Writes to `inner` wait while the gate is shut; reads and syncs pass through.
pub struct Gated {
    inner: Arc<dyn Device>,
    shut: Mutex<bool>,
    cv: Condvar,
}

impl Gated {
    /// `inner` behind an open gate.
    pub fn new(inner: Arc<dyn Device>) -> Arc<Self> {
        Arc::new(Gated {
            inner,
            shut: Mutex::new(false),
            cv: Condvar::new(),
        })
    }

    /// Shut (`true`) or open the gate; opening it lets every waiting write through.
    pub fn set(&self, shut: bool) {
        *self.shut.lock() = shut;
        self.cv.notify_all();
    }
}

impl Device for Gated {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.inner.read_at(buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let mut shut = self.shut.lock();
        while *shut {
            self.cv.wait(&mut shut);
        }
        drop(shut);
        self.inner.write_at(buf, off)
    }
    fn sync(&self) -> io::Result<()> {
        self.inner.sync()
    }
}
