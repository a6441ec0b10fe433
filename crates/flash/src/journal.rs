//! The crash journal ([`Journal`]): makes a header-only record (a delete's tombstone, a flush
//! marker) survive a crash from the moment it is acknowledged, not from the log's next
//! flush.
//!
//! Why: the log's write buffers reach the device within `flush_interval` and are synced only
//! by `flush()`. A user that supersedes a version already on flash (a delete, an overwrite
//! whose new value waits in RAM) appends a tombstone; if the process dies before the
//! tombstone's chunk is written, a restart finds the old version and serves it — data the
//! user replaced. So every such record is also *committed* here, before the user replies:
//! a 32-byte entry (`format::journal::Entry`, the record's metadata) written at the ring's
//! head through the page cache (`Device::journal_write`: a copy into the segment mapped
//! shared, or a `pwrite`; no device wait). That
//! survives the process (`kill -9`, a panic, the OOM killer). With [`JournalMode::Sync`] the
//! user also awaits [`Journal::synced`] (group commit: one fdatasync covers every entry
//! written before it), which survives a power cut; with [`JournalMode::Write`] a power cut or
//! kernel crash is detected at the next open (the run record's boot id differs and the run
//! did not close cleanly) and the journal is reported untrusted: the user must then start
//! empty, since it cannot know which keys were superseded.
//!
//! Space: global segment 0 — a run record page, then a ring of entries. An entry may be
//! overwritten once its record is durable in the log: a `flush()` that started after the
//! entry was committed (the user appends the record *before* committing it) retires it
//! ([`Journal::retire`]). Past half the ring the journal thread runs such a flush; a commit
//! that finds the ring full waits for it (`flash_journal_full_waits`), at most
//! [`FULL_WAIT`], then gives the oldest entries up and marks the run untrusted (the next open
//! starts empty rather than risk an older value). An entry whose record the log refused
//! (back-pressure) is *uncovered*: the journal thread appends it again before its flush, and
//! nothing from it on retires until it is in the log.
//!
//! Epochs: entries are checksummed with the epoch of the run that wrote them. At open the
//! user reads the last run's entries, appends to the log those whose record it did not find
//! there, flushes, and calls [`Journal::begin`], which starts a new epoch: old entries stop
//! verifying without being erased.
//!
//! # Threads
//! Any thread commits (one short mutex, one `pwrite` under it); the `flash-journal` thread
//! ([`run`]) runs retiring flushes and, in sync mode, the group syncs. It reaches the log only
//! through the small [`Log`] trait (append again, lost records heard, flush), so this module
//! imports nothing of the engine. Lock order: the journal's ring
//! lock is a leaf (never held while taking the engine's state lock).
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

pub use crate::format::journal::Entry;
use crate::format::journal::{journal_seed, RunRecord, RunState, ENTRY_LEN};
use crate::io::Device;
use crate::location::PAGE;
use crate::stats::FlashStats;

/// Whether and how strongly header-only records are journaled before they are acknowledged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum JournalMode {
    /// No journal (the block face, which orders its own writes; engine tests).
    #[default]
    Off,
    /// Entries are written through the page cache before the user replies: they survive the
    /// process, and a power cut makes the next open report the journal untrusted.
    Write,
    /// Entries are also synced before the user replies (group commit): they survive a power
    /// cut.
    Sync,
}

impl JournalMode {
    fn to_byte(self) -> u8 {
        match self {
            JournalMode::Off => 0,
            JournalMode::Write => 1,
            JournalMode::Sync => 2,
        }
    }

    fn from_byte(b: u8) -> Self {
        match b {
            1 => JournalMode::Write,
            2 => JournalMode::Sync,
            _ => JournalMode::Off,
        }
    }
}

impl JournalMode {
    /// The mode named `s` (`off`, `write`, `sync`).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "off" => Some(JournalMode::Off),
            "write" => Some(JournalMode::Write),
            "sync" => Some(JournalMode::Sync),
            _ => None,
        }
    }

    /// The mode's name, as [`Self::parse`] takes it.
    pub fn name(self) -> &'static str {
        match self {
            JournalMode::Off => "off",
            JournalMode::Write => "write",
            JournalMode::Sync => "sync",
        }
    }
}

/// Longest a commit waits for the ring to have room before it gives the oldest entries up
/// (and marks the run untrusted).
pub const FULL_WAIT: Duration = Duration::from_secs(1);

/// What the journal held at open, for the user's recovery.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JournalRecovered {
    /// The entries of the last run's epoch (every valid one in the ring, oldest lap
    /// included: each is a fact that stays true). Empty on a fresh journal.
    pub entries: Vec<Entry>,
    /// False when the last run may have acknowledged entries that are not here (it did not
    /// close cleanly and the machine rebooted since, without synced entries; or it gave
    /// entries up): the user must not trust anything older on flash — start empty.
    pub trusted: bool,
    /// Why it is untrusted (for the log), or how the last run ended.
    pub why: String,
}

/// A commit to await before acknowledging (sync mode only): see [`Journal::synced`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket(pub u64);

struct Ring {
    epoch: u64,
    seed: u32,
    /// Sequence number of the next entry (slot `next % capacity`).
    next: u64,
    /// Entries below this are durable in the log and may be overwritten.
    retired: u64,
    /// Entries whose record the log has not taken yet, oldest first.
    uncovered: Vec<(u64, Entry)>,
    /// [`Journal::begin`] ran: commits are taken.
    started: bool,
    /// The run gave entries up: closing leaves the run record untrusted.
    untrusted: bool,
    /// A retiring flush was asked for and has not finished.
    retire_asked: bool,
}

/// The crash journal of one engine (see the module docs).
pub struct Journal {
    dev: Arc<dyn Device>,
    /// Device offset of the journal segment.
    base: u64,
    /// Entries in the ring.
    capacity: u64,
    uuid: [u8; 16],
    boot_id: [u8; 16],
    /// [`JournalMode`] in force (a runtime knob, [`Journal::set_mode`]); changed under the
    /// ring lock, together with the run record's `synced` flag.
    mode: AtomicU8,
    stats: Arc<FlashStats>,
    ring: Mutex<Ring>,
    /// Wakes the journal thread (retire asked, sync needed) and full-ring waiters.
    wake: Condvar,
    /// Sync mode: entries with a sequence number below this are synced.
    synced: AtomicU64,
    /// Sync mode: (sequence number, waker) of commits awaiting a sync.
    waiters: Mutex<Vec<(u64, Waker)>>,
    closed: AtomicBool,
}

/// The machine's boot id (changes at every boot), or zeros where there is none.
pub fn boot_id() -> [u8; 16] {
    let mut out = [0u8; 16];
    let Ok(s) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") else {
        return out;
    };
    let hex: Vec<u8> = s
        .bytes()
        .filter(u8::is_ascii_hexdigit)
        .map(|b| match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => b - b'A' + 10,
        })
        .collect();
    for (o, pair) in out.iter_mut().zip(hex.chunks(2)) {
        *o = pair.iter().fold(0, |a, &d| a << 4 | d);
    }
    out
}

impl Journal {
    /// The journal in the segment at device offset `base` of `dev`, `seg_size` bytes.
    pub(crate) fn new(
        dev: Arc<dyn Device>,
        base: u64,
        seg_size: u64,
        uuid: [u8; 16],
        mode: JournalMode,
        stats: Arc<FlashStats>,
    ) -> Self {
        // Entries become copies into a shared mapping where the device allows it.
        if let Err(e) = dev.journal_attach(base, seg_size) {
            log::warn!("flash journal: not mapped ({e}); entries are written with pwrite");
        }
        Self {
            dev,
            base,
            capacity: (seg_size - PAGE) / ENTRY_LEN as u64,
            uuid,
            boot_id: boot_id(),
            mode: AtomicU8::new(mode.to_byte()),
            stats,
            ring: Mutex::new(Ring {
                epoch: 0,
                seed: journal_seed(&uuid, 0),
                next: 0,
                retired: 0,
                uncovered: Vec::new(),
                started: false,
                untrusted: false,
                retire_asked: false,
            }),
            wake: Condvar::new(),
            synced: AtomicU64::new(0),
            waiters: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
        }
    }

    /// Entries the ring holds.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The mode in force.
    pub fn mode(&self) -> JournalMode {
        JournalMode::from_byte(self.mode.load(Ordering::Acquire))
    }

    /// Change the mode while serving. To `sync`: every entry written so far is synced, then
    /// the run record says entries are synced (so a power cut from now on keeps the cache
    /// warm). Away from `sync`: the commits awaiting a sync are synced and released, and the
    /// run record says entries are not synced *before* any entry is acknowledged unsynced.
    /// `off` stops journaling (a crash may then bring back a replaced version, as before the
    /// journal existed). Commits wait meanwhile (the ring lock).
    pub fn set_mode(&self, mode: JournalMode) -> crate::Result<()> {
        let r = self.ring.lock();
        let old = self.mode();
        if old == mode {
            return Ok(());
        }
        let io = |e| crate::Error::io(self.dev.name(), "journal mode", e);
        if old == JournalMode::Sync || mode == JournalMode::Sync {
            self.dev.journal_sync().map_err(io)?;
            self.synced.fetch_max(r.next, Ordering::AcqRel);
        }
        if r.started {
            self.write_run_as(r.epoch, RunState::Running, mode == JournalMode::Sync)
                .map_err(io)?;
        }
        self.mode.store(mode.to_byte(), Ordering::Release);
        drop(r);
        self.wake_synced();
        Ok(())
    }

    fn entry_off(&self, seq: u64) -> u64 {
        self.base + PAGE + (seq % self.capacity) * ENTRY_LEN as u64
    }

    /// Read the run record and every entry of its epoch (at open, before [`Self::begin`]).
    /// `formatted`: the set was formatted by this open (nothing to read).
    pub(crate) fn recover(&self, formatted: bool) -> std::io::Result<JournalRecovered> {
        let fresh = |why: &str| JournalRecovered {
            entries: Vec::new(),
            trusted: true,
            why: why.into(),
        };
        if formatted {
            return Ok(fresh("formatted"));
        }
        let mut page = vec![0u8; PAGE as usize];
        self.dev.journal_read(&mut page, self.base)?;
        let Some(run) = RunRecord::decode(&page).filter(|r| r.uuid == self.uuid) else {
            return Ok(fresh("no run record"));
        };
        let mut ring = vec![0u8; (self.capacity * ENTRY_LEN as u64) as usize];
        self.dev.journal_read(&mut ring, self.base + PAGE)?;
        let seed = journal_seed(&self.uuid, run.epoch);
        let entries: Vec<Entry> = ring
            .chunks_exact(ENTRY_LEN)
            .filter_map(|b| Entry::decode(b, seed))
            .collect();
        {
            let mut r = self.ring.lock();
            r.epoch = run.epoch;
            r.seed = seed;
        }
        let (trusted, why) = match run.state {
            RunState::Clean => (true, "the last run closed cleanly".to_string()),
            RunState::Untrusted => (
                false,
                "the last run gave journal entries up (its ring was full)".to_string(),
            ),
            RunState::Running if run.boot_id == self.boot_id => (
                true,
                "the last run stopped without closing (process crash)".to_string(),
            ),
            RunState::Running if run.synced => (
                true,
                "the machine restarted under the last run; its entries were synced".to_string(),
            ),
            RunState::Running => (
                false,
                "the machine restarted (power cut or kernel crash) while the last run served, \
                 and journal_mode=write does not sync entries: deletes and overwrites it \
                 acknowledged may be missing"
                    .to_string(),
            ),
        };
        Ok(JournalRecovered {
            entries,
            trusted,
            why,
        })
    }

    fn write_run(&self, epoch: u64, state: RunState) -> std::io::Result<()> {
        self.write_run_as(epoch, state, self.mode() == JournalMode::Sync)
    }

    fn write_run_as(&self, epoch: u64, state: RunState, synced: bool) -> std::io::Result<()> {
        let run = RunRecord {
            uuid: self.uuid,
            epoch,
            boot_id: self.boot_id,
            state,
            synced,
        };
        self.dev.journal_write(&run.encode(), self.base)?;
        self.dev.journal_sync()
    }

    /// Start this run: a new epoch (every entry recovered stops verifying), the run record
    /// saying so, synced. Call it once the recovered entries that matter are durable in the
    /// log. Commits are refused before.
    pub fn begin(&self) -> crate::Result<()> {
        let mut r = self.ring.lock();
        let epoch = r.epoch.wrapping_add(1);
        self.write_run(epoch, RunState::Running)
            .map_err(|e| crate::Error::io(self.dev.name(), "start journal", e))?;
        r.epoch = epoch;
        r.seed = journal_seed(&self.uuid, epoch);
        r.next = 0;
        r.retired = 0;
        r.uncovered.clear();
        r.started = true;
        self.synced.store(0, Ordering::Relaxed);
        Ok(())
    }

    /// Commit the metadata of a record just appended to the log (`covered`) or refused by
    /// it (not `covered`: the journal thread appends it again). Returns a [`Ticket`] to await
    /// with [`Self::synced`] in sync mode, `None` when the entry already holds (write mode).
    /// Blocks only when the ring is full (at most [`FULL_WAIT`]).
    pub fn commit(&self, e: Entry, covered: bool) -> std::io::Result<Option<Ticket>> {
        let mut r = self.ring.lock();
        if !r.started {
            return Err(std::io::Error::other("journal not started"));
        }
        let mode = self.mode();
        if mode == JournalMode::Off {
            return Ok(None);
        }
        self.make_room(&mut r);
        let seq = r.next;
        self.dev
            .journal_write(&e.encode(r.seed), self.entry_off(seq))?;
        r.next += 1;
        if !covered {
            r.uncovered.push((seq, e));
            FlashStats::add(&self.stats.journal_uncovered, 1);
        }
        FlashStats::add(&self.stats.journal_entries, 1);
        let ask = !r.retire_asked && r.next - r.retired >= self.capacity / 2;
        if ask {
            r.retire_asked = true;
        }
        drop(r);
        if ask || mode == JournalMode::Sync {
            self.wake.notify_all();
        }
        Ok((mode == JournalMode::Sync).then_some(Ticket(seq)))
    }

    /// Under the ring lock: make the head slot free, waiting for a retiring flush if the
    /// ring is full, at most [`FULL_WAIT`]; then the oldest entries are given up.
    fn make_room(&self, r: &mut parking_lot::MutexGuard<'_, Ring>) {
        if r.next < r.retired + self.capacity {
            return;
        }
        FlashStats::add(&self.stats.journal_full_waits, 1);
        let deadline = Instant::now() + FULL_WAIT;
        while r.next >= r.retired + self.capacity {
            r.retire_asked = true;
            self.wake.notify_all();
            if self.wake.wait_until(r, deadline).timed_out() {
                break;
            }
        }
        if r.next >= r.retired + self.capacity {
            if !r.untrusted {
                r.untrusted = true;
                log::error!(
                    "flash journal: full for {} s (the log is not taking writes or flushes): \
                     giving its oldest entries up; the next start will be empty",
                    FULL_WAIT.as_secs()
                );
                // Best effort: if this write is lost the run record still says running.
                let _ = self.write_run(r.epoch, RunState::Untrusted);
            }
            r.retired = r.next + 1 - self.capacity;
            FlashStats::add(&self.stats.journal_entries_given_up, 1);
        }
    }

    /// A future that completes once the entry of `t` is synced (sync mode), or the journal
    /// closed.
    pub fn synced(&self, t: Ticket) -> Synced<'_> {
        Synced {
            journal: self,
            seq: t.0,
        }
    }

    fn is_synced(&self, seq: u64) -> bool {
        self.synced.load(Ordering::Acquire) > seq || self.closed.load(Ordering::Acquire)
    }

    /// Block the calling thread until `t` is synced (threads that are no event loop).
    pub fn wait_synced(&self, t: Ticket) {
        let mut r = self.ring.lock();
        while !self.is_synced(t.0) {
            self.wake.notify_all();
            self.wake.wait_for(&mut r, Duration::from_millis(50));
        }
    }

    /// Entries the journal thread must append to the log again (refused the first time).
    pub(crate) fn uncovered(&self) -> Vec<(u64, Entry)> {
        self.ring.lock().uncovered.clone()
    }

    /// Sequence number of the next entry: a flush that starts after this call covers every
    /// entry below it (whose record was appended before it was committed).
    pub(crate) fn head(&self) -> u64 {
        self.ring.lock().next
    }

    /// A flush that started at head `upto` succeeded; `appended` are uncovered entries the
    /// log took before it started. Entries below `upto` and the first still uncovered retire.
    pub(crate) fn retire(&self, upto: u64, appended: &[u64]) {
        let mut r = self.ring.lock();
        r.uncovered.retain(|(s, _)| !appended.contains(s));
        let limit = r.uncovered.first().map_or(upto, |(s, _)| upto.min(*s));
        if limit > r.retired {
            r.retired = limit;
        }
        r.retire_asked = false;
        FlashStats::add(&self.stats.journal_retires, 1);
        FlashStats::set(&self.stats.journal_pending, r.next - r.retired);
        drop(r);
        self.wake.notify_all();
    }

    /// The journal thread's wait: until a retire is asked, a sync is owed, `tick` passes or
    /// the journal closes. Returns (retire asked, sync owed up to this head).
    pub(crate) fn wait_work(&self, tick: Duration) -> (bool, Option<u64>) {
        let mut r = self.ring.lock();
        let owed = |r: &Ring| {
            (self.mode() == JournalMode::Sync && self.synced.load(Ordering::Acquire) < r.next)
                .then_some(r.next)
        };
        if !r.retire_asked && owed(&r).is_none() && !self.closed.load(Ordering::Acquire) {
            self.wake.wait_for(&mut r, tick);
        }
        (r.retire_asked, owed(&r))
    }

    /// Sync every entry below `upto` (the journal thread, sync mode): one fdatasync, then
    /// wake the commits it covers.
    pub(crate) fn sync_upto(&self, upto: u64) -> std::io::Result<()> {
        self.dev.journal_sync()?;
        FlashStats::add(&self.stats.journal_syncs, 1);
        self.synced.fetch_max(upto, Ordering::AcqRel);
        self.wake_synced();
        Ok(())
    }

    /// A group sync failed: the entries it covered may not survive a power cut. Release
    /// their waiters anyway (the write reached the page cache; a failing device is the
    /// engine's health business) and mark the run untrusted, so that a restart after a
    /// power cut starts empty rather than trust them.
    pub(crate) fn sync_failed(&self, e: &std::io::Error) {
        let mut r = self.ring.lock();
        if !r.untrusted {
            r.untrusted = true;
            log::error!("flash journal: sync failed ({e}); the next start after a reboot is empty");
            let _ = self.write_run(r.epoch, RunState::Untrusted);
        }
        let upto = r.next;
        drop(r);
        self.synced.fetch_max(upto, Ordering::AcqRel);
        self.wake_synced();
    }

    fn wake_synced(&self) {
        let ready: Vec<Waker> = {
            let mut w = self.waiters.lock();
            let (done, wait): (Vec<_>, Vec<_>) =
                w.drain(..).partition(|(seq, _)| self.is_synced(*seq));
            *w = wait;
            done.into_iter().map(|(_, k)| k).collect()
        };
        ready.into_iter().for_each(Waker::wake);
        self.wake.notify_all();
    }

    /// The run is over (a clean close after a flush that succeeded, when `clean`): the run
    /// record says how it ended; commits wait no more.
    pub(crate) fn close(&self, clean: bool) {
        let r = self.ring.lock();
        if r.started {
            let state = if r.untrusted {
                RunState::Untrusted
            } else if clean {
                RunState::Clean
            } else {
                RunState::Running
            };
            if let Err(e) = self.write_run(r.epoch, state) {
                log::warn!("flash journal: run record not written at close: {e}");
            }
        }
        drop(r);
        self.closed.store(true, Ordering::Release);
        self.wake_synced();
    }

    /// True once closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// The entry of a header-only record about to be (or just) appended.
pub fn entry_of(w: &crate::handler::RecordWrite<'_>) -> Entry {
    Entry {
        kind: w.kind,
        flags: w.flags,
        key_id: w.key_id,
        version: w.version,
        exptime: w.exptime,
    }
}

/// The header-only record an entry copies (for appending it again).
pub fn record_of(e: &Entry) -> crate::handler::RecordWrite<'static> {
    crate::handler::RecordWrite {
        kind: e.kind,
        key_id: e.key_id,
        version: e.version,
        flags: e.flags,
        exptime: e.exptime,
        key: &[],
        value: &[],
    }
}

/// How long the journal thread sleeps when it has nothing to do.
const TICK: Duration = Duration::from_millis(100);
/// How long the journal thread waits for room to append an uncovered entry again.
const APPEND_AGAIN_WAIT: Duration = Duration::from_millis(100);

/// What the journal thread needs of the log it journals for (the engine implements it), so
/// this module knows nothing of the engine's state.
pub(crate) trait Log {
    /// Append `rec` to stream 0, waiting up to `wait` while the log has no room.
    fn append_waiting(&self, rec: &crate::handler::RecordWrite<'_>, wait: Duration) -> bool;
    /// Records of failed writes the user has not yet returned from hearing of (and so not yet
    /// appended again): a retiring flush would not cover them.
    fn lost_unheard(&self) -> bool;
    /// The log's durability barrier, waited for.
    fn flush_wait(&self) -> crate::Result<()>;
}

/// The `flash-journal` thread: group syncs (sync mode) and retiring flushes, until the
/// journal closes.
pub(crate) fn run(j: &Journal, log: &impl Log) {
    while !j.is_closed() {
        let (retire, owed) = j.wait_work(TICK);
        if let Some(upto) = owed {
            if let Err(e) = j.sync_upto(upto) {
                j.sync_failed(&e);
            }
        }
        if retire && !j.is_closed() {
            let mut appended = Vec::new();
            for (seq, e) in j.uncovered() {
                if log.append_waiting(&record_of(&e), APPEND_AGAIN_WAIT) {
                    appended.push(seq);
                }
            }
            // Records of failed writes go back to the user, who appends them again; a
            // retiring flush counts only once the user has (else it could cover an entry
            // whose record is lost and not yet appended again).
            if log.lost_unheard() {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            let head = j.head();
            match log.flush_wait() {
                Ok(()) => j.retire(head, &appended),
                Err(e) => {
                    log::warn!("flash journal: retiring flush failed ({e}); trying again");
                    std::thread::sleep(TICK);
                }
            }
        }
    }
}

/// See [`Journal::synced`].
pub struct Synced<'a> {
    journal: &'a Journal,
    seq: u64,
}

impl std::future::Future for Synced<'_> {
    type Output = ();

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.journal.is_synced(self.seq) {
            return Poll::Ready(());
        }
        self.journal
            .waiters
            .lock()
            .push((self.seq, cx.waker().clone()));
        // The sync may have finished between the check and the push.
        if self.journal.is_synced(self.seq) {
            self.journal.wake_synced();
        }
        self.journal.wake.notify_all();
        Poll::Pending
    }
}

#[cfg(test)]
#[path = "journal_tests.rs"]
mod tests;
