//! The engine's shared core, [`Inner`]: configuration, devices, the executor, counters, and
//! the state behind the one mutex (`state.rs`), shared by the public handle (`engine.rs`),
//! the IO completions and the background threads through an `Arc`. The write path
//! (`writer.rs`) and the read path (`reader.rs`) are its other methods; this file holds its
//! construction and the helpers both use.
//!
//! Invariants: a record is readable from the moment `append` returns (current chunk, then
//! the in-flight list, then the device; the in-flight entry goes only in the write's
//! completion, under the lock). A page handed to the device is never written again in the
//! same segment life (an early chunk is padded to its page end). A read captures the
//! segment's seed under the lock, so a segment reused before the read completes fails the
//! checksum (`Corrupt`).
//!
//! Threads: API callers (network threads), IO completions, the flusher, the reclaimer and
//! the journal thread. The read queue and the journal have locks of their own, never held
//! while `state` is taken (see `read_queue.rs`, `journal.rs`).
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::config::FlashConfig;
use crate::error::{Error, Result};
use crate::format::segment::SummaryEntry;
use crate::handler::{ReclaimHandler, RecordMeta, RecordWrite};
use crate::health::DeviceHealth;
use crate::io::pool::ReadPool;
use crate::io::uring::UringExecutor;
use crate::io::{Device, Executor};
use crate::journal::{Journal, JournalMode};
use crate::knobs::Knobs;
use crate::layout::{random_bytes, Layout};
use crate::location::Location;
use crate::read_queue::{PendingRead, ReadQueue};
use crate::segment_table::SegmentTable;
use crate::state::State;
use crate::stats::FlashStats;
use crate::write_queue::WriteQueue;

pub(crate) struct Inner {
    pub cfg: FlashConfig,
    pub devices: Vec<Arc<dyn Device>>,
    pub tiers: Vec<u8>,
    pub exec: Arc<dyn Executor>,
    /// `exec` again when it is the io_uring executor, for its lanes' reap handles.
    pub uring: Option<Arc<UringExecutor>>,
    pub stats: Arc<FlashStats>,
    pub state: Mutex<State>,
    /// Wakes the reclaimer and the flusher (waits on `state`).
    pub wake: Condvar,
    pub uuid: [u8; 16],
    pub hash_seed: u64,
    pub seg_size: u64,
    pub handler: Arc<dyn ReclaimHandler>,
    /// Runtime-tunable settings.
    pub knobs: Knobs,
    /// Recycled device-read buffers (see `io::pool`).
    pub read_pool: Arc<ReadPool>,
    /// Record reads at the device (at most `read_queue_limit`) and those waiting for a slot.
    pub reads: ReadQueue<PendingRead>,
    /// Write chunk buffers allocated (open, in flight, pooled); changed under `state`.
    pub chunk_bufs: AtomicU64,
    /// Bytes of reclaim's read buffers now.
    pub reclaim_buf_bytes: AtomicU64,
    /// The crash journal in global segment 0, when `FlashConfig::journal` is on.
    pub journal: Option<Journal>,
    /// Lost records the user's `lost` callback has returned from (see
    /// `WriteQueue::lost_total`).
    pub lost_handled: AtomicU64,
}

/// The executor, and the same one as io_uring's when it is that (see [`Inner::uring`]).
pub(crate) type Executors = (Arc<dyn Executor>, Option<Arc<UringExecutor>>);

impl Inner {
    /// The core over `devices` laid out as `layout` (before recovery: no segment free yet),
    /// with the executor `exec` and counters `stats`. Sets the gauges known at open.
    pub(crate) fn new(
        cfg: FlashConfig,
        devices: Vec<Arc<dyn Device>>,
        (exec, uring): Executors,
        stats: Arc<FlashStats>,
        layout: Layout,
        handler: Arc<dyn ReclaimHandler>,
    ) -> Self {
        let tiers: Vec<u8> = (0..devices.len())
            .map(|d| cfg.device_tiers.get(d).copied().unwrap_or(0))
            .collect();
        let journal = (cfg.journal != JournalMode::Off).then(|| {
            Journal::new(
                Arc::clone(&devices[0]),
                layout.segs[0].dev_off,
                cfg.segment_size,
                layout.uuid,
                cfg.journal,
                Arc::clone(&stats),
            )
        });
        let nsegs = layout.segs.len() as u64 - u64::from(journal.is_some());
        FlashStats::set(&stats.segments_total, nsegs);
        FlashStats::set(&stats.work_limit_bytes, cfg.work_limit());
        FlashStats::add(&stats.superblocks_lost, layout.superblocks_lost);
        let mut seed = [0u8; 8];
        seed.copy_from_slice(&random_bytes()[..8]);
        let state = State::new(
            SegmentTable::new(layout.segs, devices.len()),
            WriteQueue::new(usize::from(cfg.streams)),
            DeviceHealth::new(devices.len(), u64::from_le_bytes(seed)),
        );
        Self {
            read_pool: Arc::default(),
            reads: ReadQueue::new(Arc::clone(&stats)),
            chunk_bufs: AtomicU64::new(0),
            reclaim_buf_bytes: AtomicU64::new(0),
            seg_size: cfg.segment_size,
            state: Mutex::new(state),
            knobs: Knobs::new(&cfg),
            cfg,
            devices,
            tiers,
            exec,
            uring,
            stats,
            wake: Condvar::new(),
            uuid: layout.uuid,
            hash_seed: layout.hash_seed,
            handler,
            journal,
            lost_handled: AtomicU64::new(0),
        }
    }

    /// Segments that hold records (the journal's left out).
    pub(crate) fn record_segments(&self) -> u32 {
        let all = self.state.lock().segments.len() as u32;
        all - u32::from(self.journal.is_some())
    }

    /// Global segment index and offset within it of a byte address.
    pub(crate) fn split(&self, addr: u64) -> (u32, u32) {
        ((addr / self.seg_size) as u32, (addr % self.seg_size) as u32)
    }

    pub(crate) fn location(&self, seg: u32, off: u32, len: usize) -> Result<Location> {
        let addr = u64::from(seg) * self.seg_size + u64::from(off);
        Location::new(addr, len as u64).ok_or(Error::InvalidLocation(addr))
    }

    /// What recovery and reclaim report of summary entry `e` of segment `seg` (sequence
    /// number `seq`).
    pub(crate) fn record_meta(&self, seg: u32, e: &SummaryEntry, seq: u64) -> Result<RecordMeta> {
        Ok(RecordMeta {
            location: self.location(seg, e.offset, e.len as usize)?,
            key_id: e.key_id,
            version: e.version,
            kind: e.kind,
            exptime: e.exptime,
            flags: e.flags,
            len: e.len,
            seq,
        })
    }

    /// See [`crate::Flash::horizon`].
    pub(crate) fn horizon(&self) -> u32 {
        let newest = self.state.lock().segments.newest_seq();
        u32::try_from(newest).unwrap_or(u32::MAX)
    }

    /// Refresh `work_bytes` and `work_peak_bytes` from the chunk and reclaim buffer counts.
    pub(crate) fn note_work(&self) {
        let chunks = self.chunk_bufs.load(Ordering::Relaxed) * self.cfg.chunk_size;
        let w = chunks + self.reclaim_buf_bytes.load(Ordering::Relaxed);
        FlashStats::set(&self.stats.work_bytes, w);
        self.stats.work_peak_bytes.fetch_max(w, Ordering::Relaxed);
    }

    /// True when an append needing a new chunk buffer must wait: none pooled and
    /// `chunk_buffer_limit` allocated.
    pub(crate) fn chunk_bufs_full(&self, writes: &WriteQueue) -> bool {
        writes.pool_empty()
            && self.chunk_bufs.load(Ordering::Relaxed) >= self.cfg.chunk_buffer_limit() as u64
    }

    pub(crate) fn update_gauges(&self, state: &State) {
        state.update_gauges(&self.stats);
    }

    /// Free segments available to ordinary streams (beyond the reserve).
    pub(crate) fn spare(&self, state: &State) -> u32 {
        state.spare(self.cfg.reserve_segments)
    }

    pub(crate) fn dev_name(&self, dev: usize) -> &str {
        self.devices.get(dev).map(|d| d.name()).unwrap_or("?")
    }

    /// A write or sync on `dev` failed for good (`what`, `err`). The first failure of a
    /// healthy device makes it failing (`health.rs`): out of allocation, its open segments
    /// sealed (their chunks and summaries still go to it; failures there are reported like
    /// any other), and its unsynced writes reported to the pending flushes.
    pub(crate) fn device_error(
        self: &Arc<Self>,
        state: &mut State,
        dev: usize,
        what: &str,
        err: &str,
    ) {
        let max = self.knobs.device_retry_max();
        let name = self.dev_name(dev);
        if !state.health.fail(dev, name, (what, err), max, &self.stats) {
            return;
        }
        // After close the executor completes requests inline, under this lock: no new IO.
        for s in 0..state.writes.streams() {
            let on_dev = !state.closed()
                && state
                    .writes
                    .stream(s)
                    .and_then(|st| st.seg())
                    .and_then(|seg| state.segments.get(seg))
                    .is_some_and(|info| info.dev == dev);
            if on_dev {
                self.seal(state, s as u8);
            }
        }
        self.update_gauges(state);
        self.wake.notify_all();
    }
}

/// What the journal thread asks of the log: the engine's append, flush and lost records.
impl crate::journal::Log for Arc<Inner> {
    fn append_waiting(&self, rec: &RecordWrite<'_>, wait: std::time::Duration) -> bool {
        self.append_wait(0, rec, None, wait).is_ok()
    }

    fn lost_unheard(&self) -> bool {
        self.state.lock().writes.lost_total() > self.lost_handled.load(Ordering::Acquire)
    }

    fn flush_wait(&self) -> Result<()> {
        self.flush().wait()
    }
}
