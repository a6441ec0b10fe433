//! Test-only: the engine core ([`Inner`]) built alone over in-memory devices, formatted and
//! recovered (every segment free) like `Flash::open` does, but with no background thread
//! (no flusher, reclaimer or journal thread) and a psync executor: unit tests of the write
//! and read paths drive it directly and look at its state parts.
use std::sync::Arc;

use crate::config::{FlashConfig, IoBackend};
use crate::format::record::kind;
use crate::handler::DropAll;
use crate::handler::RecordWrite;
use crate::inner::Inner;
use crate::io::faulty::{Faults, FaultyDevice};
use crate::io::memory::MemoryDevice;
use crate::io::psync::PsyncExecutor;
use crate::io::{Device, Executor};
use crate::stats::FlashStats;

/// An engine core and the devices under it; closes the state and stops the executor when
/// dropped.
pub(crate) struct Core {
    pub inner: Arc<Inner>,
    /// The in-memory device under each fault wrapper.
    pub mem: Vec<Arc<MemoryDevice>>,
    /// The faults of each device, off until a test arms them.
    pub faults: Vec<Arc<Faults>>,
}

/// 256 KiB segments, 64 KiB chunks, no interval flusher and no background reclaim.
pub(crate) fn small() -> FlashConfig {
    FlashConfig {
        flush_interval: None,
        background_reclaim: false,
        io_backend: IoBackend::Psync,
        ..FlashConfig::small()
    }
}

/// A core over `devices` in-memory devices of 4 MiB each, with `cfg`.
pub(crate) fn core(devices: usize, mut cfg: FlashConfig) -> Core {
    let mem: Vec<Arc<MemoryDevice>> = (0..devices)
        .map(|d| Arc::new(MemoryDevice::new(&format!("mem{d}"), 4 << 20)))
        .collect();
    let faults: Vec<Arc<Faults>> = (0..devices).map(|_| Faults::new()).collect();
    let devs: Vec<Arc<dyn Device>> = mem
        .iter()
        .zip(&faults)
        .map(|(m, f)| {
            let inner = Arc::clone(m) as Arc<dyn Device>;
            Arc::new(FaultyDevice::new(inner, Arc::clone(f))) as Arc<dyn Device>
        })
        .collect();
    let stats = Arc::new(FlashStats::default());
    let exec: Arc<dyn Executor> = Arc::new(PsyncExecutor::new(
        devs.clone(),
        cfg.psync_threads,
        Arc::clone(&stats),
    ));
    cfg.validate().expect("test config");
    let layout = crate::layout::open_layout(&devs, &mut cfg, exec.as_ref()).expect("layout");
    let inner = Arc::new(Inner::new(
        cfg,
        devs,
        (exec, None),
        stats,
        layout,
        Arc::new(DropAll),
    ));
    crate::recovery::recover(&inner, true, |_| {}).expect("recover");
    Core { inner, mem, faults }
}

impl Drop for Core {
    fn drop(&mut self) {
        self.inner.state.lock().close();
        self.inner.exec.shutdown();
    }
}

/// The counter `name` of `inner` (as `flash_<name>`).
pub(crate) fn stat(inner: &Inner, name: &str) -> u64 {
    inner
        .stats
        .pairs()
        .into_iter()
        .find(|(k, _)| *k == format!("flash_{name}"))
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no stat {name}"))
}

/// A PUT record of `key` (id `key_id`, version 1) holding `value`.
pub(crate) fn put<'a>(key: &'a [u8], key_id: u64, value: &'a [u8]) -> RecordWrite<'a> {
    RecordWrite {
        kind: kind::PUT,
        key_id,
        version: 1,
        flags: 0,
        exptime: 0,
        key,
        value,
    }
}
