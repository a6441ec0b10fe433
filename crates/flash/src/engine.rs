//! The engine handle [`Flash`] and its shared state.
//!
//! One mutex (`Inner::state`) guards the segment table, the write buffers, the chunk writes in
//! flight and the flush waiters; held for memory work and for *enqueueing* IO, never across
//! IO. Taken by API callers (network threads), IO completions, the flusher and the reclaimer.
//!
//! Invariants: a record is readable from the moment `append` returns (current chunk, then the
//! in-flight list, then the device; the in-flight entry goes only in the write's completion,
//! under the lock). A page handed to the device is never written again in the same segment
//! life (an early chunk is padded to its page end). A read captures the segment's seed under
//! the lock, so a segment reused before the read completes fails the checksum (`Corrupt`).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{Condvar, Mutex};

use crate::completion::{Completion, Promise};
use crate::config::{DeviceSpec, FlashConfig, IoBackend};
use crate::error::{Error, Result};
use crate::format::record::Record;
use crate::format::segment::SummaryEntry;
use crate::health::{DeviceState, Health};
use crate::io::file::FileDevice;
use crate::io::psync::PsyncExecutor;
use crate::io::uring::UringExecutor;
use crate::io::{AlignedBuf, Device, Executor};
use crate::location::Location;
use crate::segments::{FreeLists, SegInfo, SegState};
use crate::stats::FlashStats;

pub use crate::handler::{
    Decision, DropAll, LostRecord, ReclaimHandler, RecordMeta, RecordWrite, StreamId,
};

pub(crate) struct StreamState {
    /// Open segment, if any.
    pub seg: Option<u32>,
    /// Current chunk buffer (capacity `chunk_size`); `Some` iff `seg` is.
    pub buf: Option<AlignedBuf>,
    /// Segment offset of `buf[0]` (page aligned).
    pub buf_off: u32,
    /// Bytes of `buf` in use.
    pub fill: usize,
    /// Records in `buf`.
    pub chunk_records: u32,
    /// Summary entries of the open segment.
    pub summary: Vec<SummaryEntry>,
    /// Chunk writes of this stream not yet completed.
    pub in_flight: usize,
    /// When the first record went into `buf`.
    pub oldest: Option<Instant>,
}

pub(crate) struct InflightWrite {
    pub id: u64,
    pub seg: u32,
    pub off: u32,
    pub buf: Arc<AlignedBuf>,
    pub stream: u8,
    /// Summary entries of the chunk's records (reported as lost if the write fails).
    pub entries: Vec<SummaryEntry>,
}

pub(crate) struct FlushWaiter {
    /// Every write with id <= target must complete first.
    pub target: u64,
    pub promise: Promise<()>,
    pub error: Option<String>,
}

pub(crate) struct State {
    pub segs: Vec<SegInfo>,
    pub free: FreeLists,
    /// Devices out of allocation (failing or offline), kept in step with `health`.
    pub out: Vec<bool>,
    /// Per device: state, strikes, probe schedule, sync bookkeeping (`health.rs`).
    pub health: Vec<Health>,
    /// Records of failed writes, waiting for the flusher to hand them to `lost`.
    pub lost: Vec<LostRecord>,
    /// Records ever put in `lost` (the journal's retire waits until the user has heard of
    /// all of them: `Inner::lost_handled`).
    pub lost_total: u64,
    pub streams: Vec<StreamState>,
    pub inflight: Vec<InflightWrite>,
    /// Next write id (ids start at 1).
    pub next_write_id: u64,
    /// Ids of writes submitted but not completed.
    pub outstanding: BTreeSet<u64>,
    pub waiters: Vec<FlushWaiter>,
    /// A write failed since the last `flush()` call: that flush reports it.
    pub write_error: Option<String>,
    pub next_seq: u64,
    /// The next [`crate::segments::SegInfo::order`] stamp a seal hands out.
    pub next_order: u64,
    /// The background reclaimer starts no pass, and ends the one under way after its
    /// current victim ([`Flash::pause_reclaim`]).
    pub reclaim_paused: bool,
    /// The background reclaimer is in a pass.
    pub reclaim_running: bool,
    pub closed: bool,
    /// Recycled chunk buffers.
    pub pool: Vec<AlignedBuf>,
}

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
    pub knobs: crate::knobs::Knobs,
    /// Recycled device-read buffers (see `io::pool`).
    pub read_pool: Arc<crate::io::pool::ReadPool>,
    /// Record reads at the device (at most `read_queue_limit`) and those waiting for a slot.
    pub reads: crate::read_queue::ReadQueue<crate::reader::PendingRead>,
    /// Write chunk buffers allocated (open, in flight, pooled); changed under `state`.
    pub chunk_bufs: AtomicU64,
    /// Bytes of reclaim's read buffers now.
    pub reclaim_buf_bytes: AtomicU64,
    /// The crash journal in global segment 0, when `FlashConfig::journal` is on.
    pub journal: Option<crate::journal::Journal>,
    /// Lost records the user's `lost` callback has returned from (see `State::lost_total`).
    pub lost_handled: AtomicU64,
}

/// Unix seconds now.
pub(crate) fn now_unix() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0)
}

impl Inner {
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

    /// See [`Flash::horizon`].
    pub(crate) fn horizon(&self) -> u32 {
        let newest = self.state.lock().next_seq.saturating_sub(1);
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
    pub(crate) fn chunk_bufs_full(&self, state: &State) -> bool {
        state.pool.is_empty()
            && self.chunk_bufs.load(Ordering::Relaxed) >= self.cfg.chunk_buffer_limit() as u64
    }

    pub(crate) fn update_gauges(&self, state: &State) {
        FlashStats::set(
            &self.stats.segments_free,
            state.free.total(&state.out) as u64,
        );
        let count = |s: DeviceState| state.health.iter().filter(|h| h.state == s).count() as u64;
        let (failing, offline) = (count(DeviceState::Failing), count(DeviceState::Offline));
        FlashStats::set(&self.stats.devices_failing, failing);
        FlashStats::set(&self.stats.devices_offline, offline);
        FlashStats::set(&self.stats.devices_failed, failing + offline);
        let used: u64 = state
            .segs
            .iter()
            .filter(|s| !matches!(s.state, SegState::Free | SegState::Failed))
            .map(|s| s.data_bytes)
            .sum();
        FlashStats::set(&self.stats.bytes_used, used);
        let dead: u64 = state
            .segs
            .iter()
            .filter(|s| matches!(s.state, SegState::Sealed | SegState::Reclaiming))
            .map(SegInfo::dead_bytes)
            .sum();
        FlashStats::set(&self.stats.bytes_dead, dead);
    }

    /// Free segments available to ordinary streams (beyond the reserve).
    pub(crate) fn spare(&self, state: &State) -> u32 {
        (state.free.total(&state.out) as u32).saturating_sub(self.cfg.reserve_segments)
    }
}

/// What the journal thread asks of the log: the engine's append, flush and lost records.
impl crate::journal::Log for Arc<Inner> {
    fn append_waiting(&self, rec: &RecordWrite<'_>, wait: std::time::Duration) -> bool {
        self.append_wait(0, rec, wait).is_ok()
    }

    fn lost_unheard(&self) -> bool {
        self.state.lock().lost_total > self.lost_handled.load(Ordering::Acquire)
    }

    fn flush_wait(&self) -> Result<()> {
        self.flush().wait()
    }
}

/// The flash engine. Cheap to share behind an `Arc`; every method takes `&self`.
///
/// Threads it owns: the IO executor (one io_uring thread or a psync pool), an interval
/// flusher (if `flush_interval` is set) and a reclaimer (if `background_reclaim`).
///
/// # Use
/// ```no_run
/// use std::sync::Arc;
/// use flashtier_flash::{DeviceSpec, DropAll, Flash, FlashConfig, RecordWrite, kind};
///
/// let spec = DeviceSpec::parse("/var/tmp/cache.flash:1GiB")?;
/// let (flash, _info) = Flash::open_specs(&[spec], FlashConfig::default(), Arc::new(DropAll), |_rec| {})?;
/// let loc = flash.append(0, &RecordWrite {
///     kind: kind::PUT, key_id: 42, version: 1, flags: 0, exptime: 0, key: b"k", value: b"v",
/// })?;
/// flash.flush().wait()?;                // durable
/// let rec = flash.read(loc).wait()?;    // or `.await` from async code
/// assert_eq!(&rec.value[..], b"v");
/// # Ok::<(), flashtier_flash::Error>(())
/// ```
pub struct Flash {
    pub(crate) inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// Facts about the opened device set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlashInfo {
    /// Instance uuid (random at format time).
    pub uuid: [u8; 16],
    /// Stable hash seed for key ids (random at format time, kept across restarts).
    pub hash_seed: u64,
    /// Segments in the set.
    pub segments: u32,
    /// Segment size in bytes.
    pub segment_size: u64,
    /// Bytes of flash usable for records (all segments).
    pub capacity: u64,
    /// IO backend in use (`io_uring` or `psync`).
    pub backend: &'static str,
    /// True if the devices were formatted by this open (nothing recovered).
    pub formatted: bool,
    /// What the crash journal held, when `FlashConfig::journal` is on: the user folds its
    /// entries into its recovery, appends to the log those it did not find there, flushes,
    /// then calls [`crate::Journal::begin`] (via [`Flash::journal`]).
    pub journal: Option<crate::journal::JournalRecovered>,
}

impl Flash {
    /// Open (or format) files or block devices from `PATH:SIZE` specs. See [`Flash::open`].
    /// Refuses two specs that are the same storage (`Error::SameStorage`); if the open
    /// fails, files it created are removed and files it grew are shrunk back.
    pub fn open_specs(
        specs: &[DeviceSpec],
        cfg: FlashConfig,
        handler: Arc<dyn ReclaimHandler>,
        on_record: impl FnMut(RecordMeta),
    ) -> Result<(Self, FlashInfo)> {
        for (i, a) in specs.iter().enumerate() {
            for b in &specs[i + 1..] {
                let same = crate::probe::same_storage(&a.path, &b.path)
                    .map_err(|e| Error::io(&a.path.display().to_string(), "stat", e))?;
                if let Some(why) = same {
                    return Err(Error::SameStorage(why));
                }
            }
        }
        let mut files: Vec<Arc<FileDevice>> = Vec::with_capacity(specs.len());
        let undo = |files: &[Arc<FileDevice>]| files.iter().for_each(|f| f.undo());
        for s in specs {
            match FileDevice::open(&s.path, s.size, s.create, cfg.direct_io) {
                Ok(f) => files.push(Arc::new(f)),
                Err(e) => {
                    undo(&files);
                    return Err(e);
                }
            }
        }
        let devices = files
            .iter()
            .map(|f| Arc::clone(f) as Arc<dyn Device>)
            .collect();
        let mut cfg = cfg;
        cfg.device_tiers = specs.iter().map(|s| s.tier).collect();
        // An open that fails leaves no file it created or grew behind.
        Self::open(devices, cfg, handler, on_record).inspect_err(|_| undo(&files))
    }

    /// Open a device set: validate superblocks (format blank devices; a device holding other
    /// data or the other face's format is `Error::NotBlank` unless `force_format`; mismatches
    /// are an error unless `reformat_on_mismatch`), recover every segment in sequence order and call
    /// `on_record` for each recovered record (segments oldest first, records in append order
    /// within one), then start the background threads.
    ///
    /// Resolving duplicates is the user's job and must use `version`, not arrival order: a
    /// reclaim copy of an old version can land in a newer segment than a later write of the
    /// same key (the copy was started before the overwrite; `relocated` then returned false
    /// and the copy is dead but still on flash). So keep, per `key_id`, the record with the
    /// highest `version` (ties: the later one), and give deletions a tombstone record with a
    /// fresh version, or a deleted key can come back from an older segment.
    // Longer than clippy.toml's 120 lines; left as is by issue 29 (cache crate only).
    #[allow(clippy::too_many_lines)]
    pub fn open(
        devices: Vec<Arc<dyn Device>>,
        mut cfg: FlashConfig,
        handler: Arc<dyn ReclaimHandler>,
        on_record: impl FnMut(RecordMeta),
    ) -> Result<(Self, FlashInfo)> {
        cfg.validate()?;
        if devices.is_empty() {
            return Err(Error::Config("no flash devices".into()));
        }
        let stats = Arc::new(FlashStats::default());
        let (exec, uring) = make_executor(&devices, &cfg, &stats)?;
        let backend = exec.backend();
        let layout = crate::recovery::open_layout(&devices, &mut cfg, exec.as_ref())?;
        let tiers: Vec<u8> = (0..devices.len())
            .map(|d| cfg.device_tiers.get(d).copied().unwrap_or(0))
            .collect();
        let streams = (0..cfg.streams)
            .map(|_| StreamState {
                seg: None,
                buf: None,
                buf_off: 0,
                fill: 0,
                chunk_records: 0,
                summary: Vec::new(),
                in_flight: 0,
                oldest: None,
            })
            .collect();
        let journal = (cfg.journal != crate::journal::JournalMode::Off).then(|| {
            crate::journal::Journal::new(
                Arc::clone(&devices[0]),
                layout.segs[0].dev_off,
                cfg.segment_size,
                layout.uuid,
                cfg.journal,
                Arc::clone(&stats),
            )
        });
        let nsegs = layout.segs.len() as u32 - u32::from(journal.is_some());
        let layout_lost = layout.superblocks_lost;
        let cfg_for_knobs = cfg.clone();
        let inner = Arc::new(Inner {
            read_pool: Arc::default(),
            reads: crate::read_queue::ReadQueue::new(Arc::clone(&stats)),
            chunk_bufs: AtomicU64::new(0),
            reclaim_buf_bytes: AtomicU64::new(0),
            seg_size: cfg.segment_size,
            state: Mutex::new(State {
                free: FreeLists::new(devices.len()),
                out: vec![false; devices.len()],
                health: {
                    let mut seed = [0u8; 8];
                    seed.copy_from_slice(&random_bytes()[..8]);
                    let seed = u64::from_le_bytes(seed);
                    (0..devices.len()).map(|d| Health::new(d, seed)).collect()
                },
                lost: Vec::new(),
                lost_total: 0,
                segs: layout.segs,
                streams,
                inflight: Vec::new(),
                next_write_id: 1,
                outstanding: BTreeSet::new(),
                waiters: Vec::new(),
                write_error: None,
                next_seq: 1,
                next_order: 1,
                reclaim_paused: false,
                reclaim_running: false,
                closed: false,
                pool: Vec::new(),
            }),
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
            knobs: crate::knobs::Knobs::new(&cfg_for_knobs),
            journal,
            lost_handled: AtomicU64::new(0),
        });
        FlashStats::set(&inner.stats.segments_total, u64::from(nsegs));
        FlashStats::set(&inner.stats.work_limit_bytes, inner.cfg.work_limit());
        FlashStats::add(&inner.stats.superblocks_lost, layout_lost);
        crate::recovery::recover(&inner, layout.formatted, on_record)?;
        let journal = match &inner.journal {
            Some(j) => Some(
                j.recover(layout.formatted)
                    .map_err(|e| Error::io(inner.devices[0].name(), "read journal", e))?,
            ),
            None => None,
        };
        let info = FlashInfo {
            uuid: inner.uuid,
            hash_seed: inner.hash_seed,
            segments: nsegs,
            segment_size: inner.seg_size,
            capacity: u64::from(nsegs) * inner.seg_size,
            backend,
            formatted: layout.formatted,
            journal,
        };
        let mut threads = Vec::new();
        {
            let i = Arc::clone(&inner);
            threads.push(spawn("flash-flusher", move || crate::flusher::run(&i))?);
        }
        if inner.cfg.background_reclaim {
            let i = Arc::clone(&inner);
            threads.push(spawn("flash-reclaim", move || crate::reclaimer::run(&i))?);
        }
        if inner.journal.is_some() {
            let i = Arc::clone(&inner);
            threads.push(spawn("flash-journal", move || {
                if let Some(j) = &i.journal {
                    crate::journal::run(j, &i);
                }
            })?);
        }
        Ok((
            Self {
                inner,
                threads: Mutex::new(threads),
            },
            info,
        ))
    }

    /// Append a record to `stream`. Returns its location at once; the record is readable
    /// immediately and durable after the next completed [`flush`](Self::flush).
    ///
    /// Errors: `NoSpace` (no free segment for this stream; reclaim was woken), `Busy` (too
    /// many chunk writes in flight for the stream), `RecordTooLarge`, `DeviceFailed` (every
    /// device is failing or offline after write errors; see [`crate::health`]), `Closed`.
    ///
    /// If the record's write to the device later fails (after retries), the handler's
    /// [`lost`](ReclaimHandler::lost) hears of it; the location then no longer reads.
    /// Never blocks on IO.
    pub fn append(&self, stream: StreamId, rec: &RecordWrite<'_>) -> Result<Location> {
        self.inner.append(stream, rec)
    }

    /// True when an append of a `len`-byte record to `stream` would not be refused by
    /// back-pressure now (chunk writes all in flight, or no free segment while reclaim frees
    /// one). Cheap (one lock); a hint — another writer may take the room first. For callers
    /// that wait for room without blocking a thread (poll it, then `append`).
    pub fn can_append(&self, stream: StreamId, len: usize) -> bool {
        self.inner.can_append(stream, len)
    }

    /// Like [`append`](Self::append) but blocks the calling thread while the stream's chunk
    /// writes are all in flight (`Busy`), for up to `timeout`. For writers that must not lose
    /// a record (the block face, bulk loaders); never call it from a network thread.
    pub fn append_blocking(
        &self,
        stream: StreamId,
        rec: &RecordWrite<'_>,
        timeout: std::time::Duration,
    ) -> Result<Location> {
        self.inner.append_wait(stream, rec, timeout)
    }

    /// Read the record at `loc`: from RAM if still buffered, else one device read of the
    /// pages the size hint names. A checksum failure is an error (`Corrupt`), never data; so
    /// is a location whose segment is free (`InvalidLocation`) or was reused while the read
    /// was in flight. A location the user kept *after* reclaim dropped or relocated it may,
    /// once its segment is reused, hold a newer record: compare `key_id` (and the key).
    /// Errors also: `Io` (device read failed), `Closed`. Data on a failing or offline device
    /// stays readable. Past `read_queue_limit` device reads in flight a read waits for a slot
    /// (in arrival order; `flash_reads_waited`), it is never refused.
    pub fn read(&self, loc: Location) -> Completion<Record> {
        self.inner.read(loc)
    }

    /// A handle for an event loop to reap the IO completions of lane `lane` (the ring the
    /// threads that called [`crate::use_ring_lane`] with it submit on) on its own thread
    /// (poll its fd for readability, then call `reap`); `None` on the psync backend. See
    /// `io::uring`.
    pub fn reap_handle(&self, lane: usize) -> Option<crate::ReapHandle> {
        self.inner.uring.as_ref().and_then(|u| u.reap_handle(lane))
    }

    /// Durability barrier: write every partly filled buffer (padded to its page end), wait
    /// for every write submitted so far, then fdatasync each device that completed writes
    /// since its last sync. Completes with an error if any write since the previous `flush`
    /// failed, or a sync failed; such an error is reported once (the failed write's records
    /// went to [`ReclaimHandler::lost`]; a later flush covers only later writes).
    pub fn flush(&self) -> Completion<()> {
        self.inner.flush()
    }

    /// Hand every partly filled write buffer to the device now (padded to its page end),
    /// without waiting for it or syncing: records appended late (after a refusal) need not
    /// wait `flush_interval` more to reach the device. Errors go where a write's always go.
    pub fn write_buffers(&self) {
        self.inner.write_buffers();
    }

    /// The user no longer needs the record at `loc` (overwritten, deleted): counts it dead for
    /// victim selection and the fragmentation stat. Cheap; no IO. Call it once per record,
    /// only for locations still live in the user's index (not after reclaim dropped them).
    pub fn mark_dead(&self, loc: Location) {
        self.inner.mark_dead(loc);
    }

    /// Run one reclaim pass now on the calling thread (blocking: it does IO and waits):
    /// reclaim victims until the free target is met or none is left. Returns segments freed.
    /// With `force`, reclaim one victim even if enough segments are free.
    pub fn reclaim_now(&self, force: bool) -> Result<u32> {
        crate::reclaimer::reclaim_pass(&self.inner, force)
    }

    /// Stop background reclaim until close, waiting for the victim under way to finish:
    /// after this returns no record is dropped or moved unless the caller runs
    /// [`Self::reclaim_now`]. For a clean shutdown that must write what only RAM holds
    /// without reclaim taking another record's flash copy afterwards. Appends then get
    /// only the room already free.
    pub fn pause_reclaim(&self) {
        let mut state = self.inner.state.lock();
        state.reclaim_paused = true;
        while state.reclaim_running {
            self.inner.wake.wait(&mut state);
        }
    }

    /// Change a runtime knob (see [`crate::knobs::KNOB_NAMES`]): `flush_interval_ms` (0 =
    /// off), `max_chunks_in_flight`, `read_queue_limit`, `free_low_watermark`,
    /// `free_high_watermark`, `reclaim_policy` (`fifo`/`greedy`), `keep_limit` (0..=1),
    /// `reclaim_rate` (bytes/s, sizes like `64M`; 0 = unlimited), `journal_mode`
    /// (`off`/`write`/`sync`, with a journal: [`crate::Journal::set_mode`]). Takes effect
    /// at once.
    pub fn set_knob(&self, name: &str, value: &str) -> Result<()> {
        self.inner.knobs.set(name, value)?;
        if let (Some(j), "journal_mode") = (&self.inner.journal, name) {
            j.set_mode(self.inner.knobs.journal_mode())?;
        }
        self.inner.wake.notify_all();
        Ok(())
    }

    /// Current knob values as `(name, value)` text pairs.
    pub fn knobs(&self) -> Vec<(&'static str, String)> {
        self.inner.knobs.list()
    }

    /// The crash journal, when `FlashConfig::journal` is on (commit header-only records
    /// with [`crate::Journal::commit`] right after appending them; see `journal`).
    pub fn journal(&self) -> Option<&crate::journal::Journal> {
        self.inner.journal.as_ref()
    }

    /// The engine's counters.
    pub fn stats(&self) -> &FlashStats {
        &self.inner.stats
    }

    /// A tombstone's *horizon* now, as stored in its flags: the newest segment sequence
    /// number handed out so far (saturating at `u32::MAX`). Every segment that may hold a
    /// record written before now has a seq ≤ this; see [`Self::oldest_seq_except`].
    pub fn horizon(&self) -> u32 {
        self.inner.horizon()
    }

    /// The oldest sequence number among segments that hold records (open, sealed or being
    /// reclaimed), leaving out the segment with seq `except` (the reclaim victim asking).
    /// A tombstone of horizon H is still needed while this is ≤ H. `None`: no other segment.
    pub fn oldest_seq_except(&self, except: u64) -> Option<u64> {
        let state = self.inner.state.lock();
        state
            .segs
            .iter()
            .filter(|s| {
                matches!(
                    s.state,
                    SegState::Open(_) | SegState::Sealed | SegState::Reclaiming
                ) && s.seq != except
            })
            .map(|s| s.seq)
            .min()
    }

    /// Free segments right now on devices that take writes (the reclaim reserve included;
    /// 0 while none does).
    pub fn free_segments(&self) -> u32 {
        self.writable_free_segments().unwrap_or(0)
    }

    /// Free segments on devices that take writes (the reclaim reserve included), or `None`
    /// while no device takes writes (every one failing or offline): then nothing can be
    /// appended, so there is nothing to make room for. One look at the engine state.
    pub fn writable_free_segments(&self) -> Option<u32> {
        let state = self.inner.state.lock();
        if state.out.iter().all(|out| *out) {
            return None;
        }
        Some(state.free.total(&state.out) as u32)
    }

    /// Largest value for a key of `key_len` bytes that `append` accepts.
    pub fn max_value_len(&self, key_len: usize) -> usize {
        self.inner.cfg.max_value_len(key_len)
    }

    /// Flush, stop the background threads and the executor. Further calls fail with
    /// `Closed`, and so do reads still waiting for a device read slot. Returns the flush's
    /// outcome.
    pub fn close(&self) -> Result<()> {
        let res = self.flush().wait();
        if let Some(j) = &self.inner.journal {
            j.close(res.is_ok());
        }
        {
            let mut state = self.inner.state.lock();
            state.closed = true;
        }
        self.inner.close_reads();
        self.inner.wake.notify_all();
        for h in std::mem::take(&mut *self.threads.lock()) {
            let _ = h.join();
        }
        self.inner.exec.shutdown();
        res
    }
}

impl Drop for Flash {
    fn drop(&mut self) {
        if !self.inner.state.lock().closed {
            let _ = self.close();
        }
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map_err(|e| Error::io("engine", "spawn thread", e))
}

/// The executor, and the same one as io_uring's when it is that (see [`Inner::uring`]).
type Executors = (Arc<dyn Executor>, Option<Arc<UringExecutor>>);

/// The executor `cfg` asks for.
fn make_executor(
    devices: &[Arc<dyn Device>],
    cfg: &FlashConfig,
    stats: &Arc<FlashStats>,
) -> Result<Executors> {
    let all_fd = devices.iter().all(|d| d.raw_fd().is_some());
    let uring = || {
        UringExecutor::new(
            devices.to_vec(),
            cfg.uring_entries,
            cfg.uring_rings,
            Arc::clone(stats),
        )
        .map(Arc::new)
    };
    let psync = || -> (Arc<dyn Executor>, _) {
        let p = PsyncExecutor::new(devices.to_vec(), cfg.psync_threads, Arc::clone(stats));
        (Arc::new(p), None)
    };
    let with_uring = |u: Arc<UringExecutor>| (Arc::clone(&u) as Arc<dyn Executor>, Some(u));
    match cfg.io_backend {
        IoBackend::Psync => Ok(psync()),
        IoBackend::Uring => uring()
            .map(with_uring)
            .map_err(|e| Error::io("io_uring", "setup", e)),
        IoBackend::Auto if all_fd => Ok(uring().map_or_else(|_| psync(), with_uring)),
        IoBackend::Auto => Ok(psync()),
    }
}

/// Read 16 random bytes for a uuid/seed (from the kernel's CSPRNG).
pub(crate) fn random_bytes() -> [u8; 24] {
    let mut b = [0u8; 24];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .is_ok();
    if !ok {
        // Fall back to time and pid: uniqueness, not secrecy, is what matters here.
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        b[..16].copy_from_slice(&t.to_le_bytes());
        b[16..20].copy_from_slice(&std::process::id().to_le_bytes());
    }
    b
}

#[cfg(test)]
mod tests {
    #[test]
    fn flash_is_send_sync() {
        fn f<T: Send + Sync>() {}
        f::<super::Flash>();
    }
}
