//! [`OpenGate`]: the reclaim callbacks wait until open has rebuilt the index.
//!
//! Why: the flash engine starts its reclaimer inside `Flash::open`, but the block cache builds
//! its index only afterwards, from what the recovery scan offered (`open.rs`). A reclaim pass
//! in between found an empty index, dropped every block record of its victim (dirty ones too)
//! and erased the segment; open then indexed those records anyway, at locations no longer
//! live (or already rewritten): a dirty block, acknowledged or not, read as an I/O error
//! after the restart, its data gone. So every callback of the reclaim handler first waits at
//! this gate, which open opens once the index is rebuilt — or on any way out of open (the
//! guard of [`OpenGate::guard`]), so a failed open never leaves the reclaimer blocked while
//! the engine is closed.
//!
//! Threads: the engine's reclaimer and flusher wait; the thread running open opens it.
use parking_lot::{Condvar, Mutex};

/// Closed until open has rebuilt the index.
#[derive(Debug, Default)]
pub(crate) struct OpenGate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl OpenGate {
    /// A gate already open (a handler built outside `open`: unit tests).
    #[cfg(test)]
    pub(crate) fn opened() -> Self {
        OpenGate {
            open: Mutex::new(true),
            opened: Condvar::new(),
        }
    }

    /// Block until the gate is open.
    pub(crate) fn wait(&self) {
        let mut open = self.open.lock();
        while !*open {
            self.opened.wait(&mut open);
        }
    }

    /// Open the gate: every waiter goes on, and later callers do not wait.
    pub(crate) fn open(&self) {
        *self.open.lock() = true;
        self.opened.notify_all();
    }

    /// A guard that opens the gate when dropped (open succeeded, failed or panicked).
    pub(crate) fn guard(&self) -> OpenOnDrop<'_> {
        OpenOnDrop(self)
    }
}

/// Opens its gate when dropped.
pub(crate) struct OpenOnDrop<'a>(&'a OpenGate);

impl Drop for OpenOnDrop<'_> {
    fn drop(&mut self) {
        self.0.open();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[test]
    fn waiters_go_on_only_once_the_gate_opens() {
        let gate = Arc::new(OpenGate::default());
        let passed = Arc::new(AtomicBool::new(false));
        let t = {
            let (gate, passed) = (Arc::clone(&gate), Arc::clone(&passed));
            std::thread::spawn(move || {
                gate.wait();
                passed.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!passed.load(Ordering::SeqCst), "went through a closed gate");
        drop(gate.guard());
        t.join().expect("waiter");
        assert!(passed.load(Ordering::SeqCst));
        gate.wait();
        OpenGate::opened().wait();
    }
}
