//! The portable executor: a small pool of threads calling the blocking [`Device`] methods
//! (`pread`/`pwrite`/`fdatasync` for files). Used where io_uring is unavailable and for
//! devices without a file descriptor (memory, fault injection).
//!
//! Threads: `threads` workers named `flash-psync-N` share one channel; completion callbacks
//! run on the worker that performed the IO.
use std::io;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;

use super::{enqueue, op_dev, run_blocking, Device, Executor, IoRequest};
use crate::stats::FlashStats;

/// Thread-pool executor.
pub struct PsyncExecutor {
    tx: Mutex<Option<Sender<IoRequest>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    stats: Arc<FlashStats>,
}

impl PsyncExecutor {
    /// Start `threads` workers over `devices`.
    pub fn new(devices: Vec<Arc<dyn Device>>, threads: usize, stats: Arc<FlashStats>) -> Self {
        let (tx, rx) = channel::<IoRequest>();
        let rx = Arc::new(Mutex::new(rx));
        let devices = Arc::new(devices);
        let handles = (0..threads.max(1))
            .filter_map(|i| {
                let rx = Arc::clone(&rx);
                let devices = Arc::clone(&devices);
                let stats = Arc::clone(&stats);
                std::thread::Builder::new()
                    .name(format!("flash-psync-{i}"))
                    .spawn(move || worker(&rx, &devices, &stats))
                    .ok()
            })
            .collect();
        Self {
            tx: Mutex::new(Some(tx)),
            threads: Mutex::new(handles),
            stats,
        }
    }
}

fn worker(rx: &Mutex<Receiver<IoRequest>>, devices: &[Arc<dyn Device>], stats: &FlashStats) {
    loop {
        let req = match rx.lock().recv() {
            Ok(r) => r,
            Err(_) => return,
        };
        let res = match devices.get(op_dev(&req.op)) {
            Some(d) => run_blocking(d.as_ref(), req.op),
            None => Err(io::Error::other("no such device")),
        };
        stats.io_queue_depth.fetch_sub(1, Ordering::Relaxed);
        (req.done)(res);
    }
}

/// Dropping the executor (an engine that failed to open, or the last handle going away)
/// stops and joins its threads, so none outlives it.
impl Drop for PsyncExecutor {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Executor for PsyncExecutor {
    fn submit(&self, req: IoRequest) {
        enqueue(&self.tx, &self.stats, req);
    }

    fn shutdown(&self) {
        self.tx.lock().take();
        let handles = std::mem::take(&mut *self.threads.lock());
        for h in handles {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }

    fn backend(&self) -> &'static str {
        "psync"
    }
}
