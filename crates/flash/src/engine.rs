//! The public handle [`Flash`]: open (superblocks, recovery, background threads), the
//! record API, knobs and close. Every method forwards to the shared core (`inner.rs`) or one
//! of the engine's parts; this file owns only the handle's threads.
//!
//! Threads it starts: the IO executor (io_uring rings or a psync pool), the flusher
//! (`flusher.rs`), the reclaimer (`reclaimer.rs`, if `background_reclaim`) and the journal
//! thread (`journal.rs`, with a journal); `close` (or drop) stops them all. Methods take
//! `&self` and may be called from any thread; the ones that block say so.

use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;

use crate::completion::Completion;
use crate::config::{DeviceSpec, FlashConfig, IoBackend};
use crate::error::{Error, Result};
use crate::format::record::Record;
use crate::inner::{Executors, Inner};
use crate::io::file::FileDevice;
use crate::io::psync::PsyncExecutor;
use crate::io::uring::UringExecutor;
use crate::io::{Device, Executor};
use crate::location::Location;
use crate::stats::FlashStats;

pub use crate::handler::{
    Decision, DropAll, LostRecord, ReclaimHandler, RecordMeta, RecordWrite, StreamId, ValueFill,
};

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
        let executors = make_executor(&devices, &cfg, &stats)?;
        let backend = executors.0.backend();
        let layout = crate::layout::open_layout(&devices, &mut cfg, executors.0.as_ref())?;
        let formatted = layout.formatted;
        let inner = Arc::new(Inner::new(cfg, devices, executors, stats, layout, handler));
        crate::recovery::recover(&inner, formatted, on_record)?;
        let journal = match &inner.journal {
            Some(j) => Some(
                j.recover(formatted)
                    .map_err(|e| Error::io(inner.devices[0].name(), "read journal", e))?,
            ),
            None => None,
        };
        let nsegs = inner.record_segments();
        let info = FlashInfo {
            uuid: inner.uuid,
            hash_seed: inner.hash_seed,
            segments: nsegs,
            segment_size: inner.seg_size,
            capacity: u64::from(nsegs) * inner.seg_size,
            backend,
            formatted,
            journal,
        };
        let threads = start_threads(&inner)?;
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

    /// [`append`](Self::append) of a record whose value is `rec.value` followed by the
    /// `fill.len` bytes `fill` writes straight into the write chunk (see [`ValueFill`]): the
    /// caller's copy of its value is the only one, and nothing is allocated for it.
    pub fn append_with(
        &self,
        stream: StreamId,
        rec: &RecordWrite<'_>,
        fill: ValueFill<'_>,
    ) -> Result<Location> {
        self.inner.append_parts(stream, rec, Some(fill))
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
        self.inner.append_wait(stream, rec, None, timeout)
    }

    /// [`append_blocking`](Self::append_blocking) with the value's tail written by `fill`
    /// (see [`append_with`](Self::append_with)).
    pub fn append_blocking_with(
        &self,
        stream: StreamId,
        rec: &RecordWrite<'_>,
        fill: ValueFill<'_>,
        timeout: std::time::Duration,
    ) -> Result<Location> {
        self.inner.append_wait(stream, rec, Some(fill), timeout)
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
    /// only for locations still live in the user's index (not after reclaim dropped them),
    /// and only for value records (kind PUT): the dead estimate is a segment's dead count
    /// times the mean size of its value records.
    pub fn mark_dead(&self, loc: Location) {
        self.inner.mark_dead(loc);
    }

    /// Run one reclaim pass now on the calling thread (blocking: it does IO and waits):
    /// reclaim victims until the free target is met or none is left. Returns segments freed.
    /// With `force`, reclaim one victim even if enough segments are free.
    pub fn reclaim_now(&self, force: bool) -> Result<u32> {
        crate::reclaimer::reclaim_pass(&self.inner, force, false)
    }

    /// Stop background reclaim until close, waiting for the victim under way to finish:
    /// after this returns no record is dropped or moved unless the caller runs
    /// [`Self::reclaim_now`]. For a clean shutdown that must write what only RAM holds
    /// without reclaim taking another record's flash copy afterwards. Appends then get
    /// only the room already free.
    pub fn pause_reclaim(&self) {
        let mut state = self.inner.state.lock();
        state.reclaim.pause();
        while state.reclaim.running() {
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
        self.inner.state.lock().segments.oldest_seq_except(except)
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
        if state.health.all_out() {
            return None;
        }
        Some(state.free_total() as u32)
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
        self.inner.state.lock().close();
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
        if !self.inner.state.lock().closed() {
            let _ = self.close();
        }
    }
}

/// Start the engine's background threads: the flusher, the reclaimer (if
/// `background_reclaim`) and the journal thread (with a journal).
fn start_threads(inner: &Arc<Inner>) -> Result<Vec<JoinHandle<()>>> {
    let mut threads = Vec::new();
    {
        let i = Arc::clone(inner);
        threads.push(spawn("flash-flusher", move || crate::flusher::run(&i))?);
    }
    if inner.cfg.background_reclaim {
        let i = Arc::clone(inner);
        threads.push(spawn("flash-reclaim", move || crate::reclaimer::run(&i))?);
    }
    if inner.journal.is_some() {
        let i = Arc::clone(inner);
        threads.push(spawn("flash-journal", move || {
            if let Some(j) = &i.journal {
                crate::journal::run(j, &i);
            }
        })?);
    }
    Ok(threads)
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map_err(|e| Error::io("engine", "spawn thread", e))
}

/// The executor `cfg` asks for.
fn make_executor(
    devices: &[Arc<dyn Device>],
    cfg: &FlashConfig,
    stats: &Arc<FlashStats>,
) -> Result<Executors> {
    let all_fd = devices.iter().all(|d| d.raw_fd().is_some());
    let uring = || {
        UringExecutor::with_setup(
            devices.to_vec(),
            cfg.uring_entries,
            cfg.uring_rings,
            Arc::clone(stats),
            &cfg.uring_setup,
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

#[cfg(test)]
mod tests {
    #[test]
    fn flash_is_send_sync() {
        fn f<T: Send + Sync>() {}
        f::<super::Flash>();
    }
}
