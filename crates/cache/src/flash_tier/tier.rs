//! [`FlashTier`]: the flash engine plus what the cache keeps about it — versions, the newest
//! flush markers, tiering knobs, counters, the write-back queue, the back-pressure gate — and
//! the append path every record kind takes (a fresh version, the crash journal's commit for
//! tombstones and markers, the counts). Also what an operation awaits around its phase 2:
//! room before it ([`FlashTier::await_room`]) and its journal entry after it
//! ([`FlashTier::settle`]). Its fields are private to the `flash_tier` folder; `read` and
//! `promote` add the request-path methods, the other files are components over it.
//!
//! # Threads
//! Any thread; appends run under the key's shard lock and never wait (`append_unlocked`
//! and `append_again` excepted, called holding no cache lock). The engine's locks and this
//! type's own (`oldest_other`, `loss_log`) are leaves.
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use flashtier_flash::{Flash, FlashInfo, Location, Record, RecordMeta, RecordWrite, ValueFill};

use crate::clock::Clock;
use crate::flash_tier::backpressure::{Gate, Patience, Writable, DROP_WAIT_TIMES};
use crate::flash_tier::dirty::DirtyQueue;
use crate::flash_tier::journal::{self, Owed};
use crate::flash_tier::kv_record::{KvKind, KvRecord, PREFIX};
use crate::flash_tier::payback::Payback;
use crate::flash_tier::value_mean::ValueMean;
use crate::flash_tier::{flash_err, RamAccess, SMALL_KEEP_DIVISOR, STREAM};
use crate::knobs::Tiering;
use crate::ram::evict::OnLater;
use crate::Error;

/// How an append meets back-pressure (`Busy`, `NoSpace`): never waits and marks the gate
/// (`Stall(false)`), the same but reported to a caller that will await room (`Stall(true)`),
/// waits on this thread (`Block`), reported at once to a caller that drops the value when
/// the write buffers are in flight and marks the gate when no segment is free
/// (`DropIfBusy`), or neither waits nor marks the gate, the record being journaled
/// (`Journaled`: the journal appends it again).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wait {
    Stall(bool),
    Block,
    DropIfBusy,
    Journaled,
}

/// Why an append was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The write buffers are in flight (back-pressure).
    Busy,
    /// No segment is free beyond the reserve: reclaim is behind (back-pressure).
    NoSpace,
    /// Anything else (too small for flash, no device takes writes, closed).
    Other,
}

impl Refused {
    /// Back-pressure: waiting may help.
    pub fn pressure(self) -> bool {
        self != Refused::Other
    }
}

/// Counters of the flash tier (relaxed atomics, any thread).
#[derive(Debug, Default)]
pub struct TierCounters {
    /// Items appended by write-through (or at RAM eviction after a skipped write-through).
    pub objects_written: AtomicU64,
    /// Value bytes appended.
    pub bytes_written: AtomicU64,
    /// Flash records read for a request (GET/UPDATE), including tag collisions.
    pub objects_read: AtomicU64,
    /// Value bytes read.
    pub bytes_read: AtomicU64,
    /// GET hits served from flash.
    pub hits: AtomicU64,
    /// Flash reads that found another key (tag collisions).
    pub collisions: AtomicU64,
    /// Flash records a blind write (SET without an old CAS, delete) read to check that a
    /// tag-matching slot is its key's before taking it (see `read`).
    pub write_check_reads: AtomicU64,
    /// Items copied back to RAM on a repeat hit.
    pub promoted: AtomicU64,
    /// Promotions given up after space was taken: the slot changed meanwhile (a SET,
    /// DELETE, relocation or another promotion won), or no RAM space could be had.
    pub promotions_abandoned: AtomicU64,
    /// Promotions not attempted because `MAX_PROMOTING` were already under way.
    pub promotions_skipped: AtomicU64,
    /// RAM evictions that became flash slots (the item stayed).
    pub demoted: AtomicU64,
    /// Items lost because reclaim dropped their flash record (flash full).
    pub evicted: AtomicU64,
    /// Records reclaim rewrote and whose slot or home followed.
    pub relocated: AtomicU64,
    /// Write-throughs skipped by back-pressure, by a value too large for a flash chunk or
    /// smaller than the `item_size` knob (the item was kept in RAM only).
    pub write_skipped: AtomicU64,
    /// Requests failed by a flash fault.
    pub errors: AtomicU64,
    /// Reads that failed their checksum or hit a freed segment under a current slot.
    pub checksum_failures: AtomicU64,
    /// Tombstones appended.
    pub tombstones: AtomicU64,
    /// Tombstones or flush markers that could not be appended.
    pub marker_failures: AtomicU64,
    /// Items whose flash write failed while their RAM copy was live: the copy stays, without
    /// a flash home, and is appended again when RAM evicts it.
    pub write_failed_in_ram: AtomicU64,
    /// Items whose flash write failed after RAM had let them go (flash-only slots): lost.
    pub write_failed_lost: AtomicU64,
    /// Tombstones and markers whose write failed and that were appended again.
    pub markers_rewritten: AtomicU64,
    /// RAM evictions of an item not yet on flash that the engine refused for back-pressure:
    /// the item was copied within RAM instead (it is appended later) rather than waited for
    /// under the lock.
    pub evictions_deferred: AtomicU64,
    /// RAM evictions of a cold item (never fetched) not yet on flash that the engine refused
    /// for back-pressure, dropped at once rather than waited for or kept (the
    /// `evict_when_busy` knob): counted in `evictions` too.
    pub evictions_flash_busy: AtomicU64,
    /// Waits of writes that would otherwise have dropped items flash only deferred (see
    /// `backpressure::Patience`), microseconds waited, and waits that ran out (the write
    /// then went on, dropping): `extstore_drop_waits`, `_us`, `_timeouts`.
    pub drop_waits: AtomicU64,
    pub drop_wait_us: AtomicU64,
    pub drop_wait_timeouts: AtomicU64,
    /// Items rebuilt into the index at open.
    pub recovered: AtomicU64,
    /// Dirty versions appended by the write-back pass (window elapsed, or close).
    pub written_back: AtomicU64,
    /// Value bytes of every version stored (SET and updates), written to flash or not: the
    /// denominator of write amplification.
    pub bytes_stored: AtomicU64,
    /// Reclaim verdicts on referenced items while flash was full: kept because hit since
    /// the last pass; kept (compacted) unhit; dropped unhit although young (appended fewer
    /// versions ago than half the items the cache holds); dropped unhit and older.
    /// Together they say whether reclaim loses recent writes or cold ones.
    pub reclaim_kept_hit: AtomicU64,
    pub reclaim_kept_unhit: AtomicU64,
    /// Unhit items kept past the write budget because their record is small
    /// ([`SMALL_KEEP_DIVISOR`]).
    pub reclaim_kept_small: AtomicU64,
    pub reclaim_dropped_young: AtomicU64,
    pub reclaim_dropped_old: AtomicU64,
    /// Flash copies of items RAM holds, dropped by reclaim instead of rewritten
    /// (`ram_exclusive`): the item stays served from RAM.
    pub reclaim_dropped_in_ram: AtomicU64,
    /// Tombstones and markers the crash journal could not take (the operation flushed the
    /// log instead before its reply).
    pub journal_errors: AtomicU64,
    /// Journal entries recovered at open whose record the log did not hold: appended to it
    /// again before serving.
    pub journal_replayed: AtomicU64,
    /// Opens that found the journal untrusted (a power cut under `journal_mode=write`) and
    /// started the flash tier empty.
    pub journal_cold_starts: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// The flash engine plus what the cache keeps about it. Fields are private to the
/// `flash_tier` folder.
pub(crate) struct FlashTier {
    pub(super) flash: Flash,
    pub(super) info: FlashInfo,
    /// Last version handed out; the next is larger (see the module docs).
    pub(super) version: AtomicU64,
    /// Version of the newest immediate flush marker (reclaim keeps it).
    pub(super) last_marker: AtomicU64,
    /// Version of the newest delayed flush marker (reclaim keeps it).
    pub(super) last_delayed: AtomicU64,
    /// (victim seq, oldest other segment seq) last asked by [`Self::tombstone_needed`].
    oldest_other: parking_lot::Mutex<Option<(u64, Option<u64>)>>,
    /// Runtime tiering settings (`knobs`): append wait, size threshold, reclaim rules.
    pub(super) tiering: Tiering,
    /// The engine's reserved segments (part of the "has room" floor).
    reserve: u32,
    /// Repeat flash hits seen, for `recache_rate` (promote every Nth repeat hit).
    pub(super) repeat_hits: AtomicU64,
    /// Promotions running outside the shard lock (`promote`); at most `MAX_PROMOTING`.
    pub(super) promoting: AtomicU32,
    /// Whether promotions pay, and the sampling rate it sets (`payback`).
    pub(crate) payback: Payback,
    /// Set by the first `Cache::close`.
    pub(super) closed: AtomicBool,
    pub(super) counters: TierCounters,
    /// Recent mean value size appended; decides which records count as small
    /// (`small_record`).
    value_mean: ValueMean,
    /// Versions waiting for write-back (`writeback`).
    pub(super) dirty: DirtyQueue,
    /// The cache's clock (write-back's dirty-since times, reclaim's expiry checks).
    pub(super) clock: Clock,
    /// Where the write-back pass appends (see [`super::hot_stream`]).
    pub(super) hot_stream: u8,
    /// Back-pressure from the engine, awaited before locks (`backpressure`); shared with
    /// the gate's thread.
    pub(super) gate: Arc<Gate>,
    /// When an unreadable item was last logged, and how many since (the log is limited to
    /// one line per [`LOSS_LOG_EVERY`]).
    loss_log: parking_lot::Mutex<(Option<std::time::Instant>, u64)>,
}

/// Shortest time between two log lines about items dropped as unreadable.
pub const LOSS_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// The owner of the flash tier as the tier's background work reaches it (the reclaim
/// handler, the write-back and gate threads hold it): the tier, if configured, and RAM.
pub(crate) trait Host: Send + Sync + 'static {
    type Ram: RamAccess;
    /// The flash tier and the RAM it reaches; `None` without flash.
    fn parts(&self) -> Option<(&FlashTier, &Self::Ram)>;
}

impl std::fmt::Debug for FlashTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlashTier")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl FlashTier {
    pub fn new(
        flash: Flash,
        info: FlashInfo,
        max_version: u64,
        tiering: Tiering,
        reserve: u32,
        clock: Clock,
    ) -> Self {
        Self {
            clock,
            tiering,
            reserve,
            repeat_hits: AtomicU64::new(0),
            payback: Payback::default(),
            promoting: AtomicU32::new(0),
            closed: AtomicBool::new(false),
            loss_log: parking_lot::Mutex::new((None, 0)),
            flash,
            info,
            version: AtomicU64::new(max_version),
            last_marker: AtomicU64::new(0),
            last_delayed: AtomicU64::new(0),
            oldest_other: parking_lot::Mutex::new(None),
            value_mean: ValueMean::default(),
            counters: TierCounters::default(),
            dirty: Default::default(),
            hot_stream: STREAM,
            gate: Default::default(),
        }
    }

    /// True while flash has room: more free segments than the engine's reserve plus
    /// `drop_under`. Reclaim then keeps every referenced record, hit or not (unless
    /// `drop_unread`). Also true while no device takes writes: free segments on devices that
    /// are out do not count, so flash would look full, yet no append waits for room then —
    /// evicting for it would only lose items (and a RAM copy freed of its home could not be
    /// written at eviction).
    pub fn has_room(&self) -> bool {
        let floor = self.reserve.saturating_add(self.tiering.drop_under());
        self.flash
            .writable_free_segments()
            .is_none_or(|free| free > floor)
    }

    /// The newest version handed out so far.
    pub fn current_version(&self) -> u64 {
        self.version.load(Ordering::Relaxed)
    }

    /// True while compaction may keep unhit items: device writes within the `write_budget`
    /// knob's multiple of the value bytes stored.
    pub fn compaction_budget(&self) -> bool {
        let written = flashtier_flash::FlashStats::get(&self.flash.stats().device_bytes_written);
        let stored = self.counters.bytes_stored.load(Ordering::Relaxed);
        (written as f64) <= self.tiering.write_budget() * stored as f64
    }

    /// True for a record of `len` bytes small enough to keep past the write budget: at most
    /// 1/[`SMALL_KEEP_DIVISOR`] of the recent mean value size appended (`value_mean`).
    pub fn small_record(&self, len: u32) -> bool {
        self.value_mean.at_most_share(len, SMALL_KEEP_DIVISOR)
    }

    /// An item's flash record failed its checksum (or its segment was freed or retired)
    /// under a current slot: the slot was removed. Count it; log it, at most one line per
    /// [`LOSS_LOG_EVERY`] with the count since the last line.
    pub fn unreadable_item(&self, err: &flashtier_flash::Error) {
        add(&self.counters.checksum_failures, 1);
        let mut l = self.loss_log.lock();
        l.1 += 1;
        if l.0.is_none_or(|t| t.elapsed() >= LOSS_LOG_EVERY) {
            log::warn!(
                "flash: {} items dropped as unreadable ({err}); counted in \
                 extstore_checksum_failures",
                l.1
            );
            *l = (Some(std::time::Instant::now()), 0);
        }
    }

    /// A fresh version, larger than every earlier one and ≥ `at_least`.
    pub fn next_version(&self, at_least: u64) -> u64 {
        let prev = self
            .version
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_add(1).max(at_least))
            })
            .unwrap_or(0);
        prev.saturating_add(1).max(at_least)
    }

    /// Append `rec` to `stream` ([`STREAM`], or [`Self::hot_stream`] for versions written
    /// back while RAM still holds them), with a fresh version, and count it. `None` (counted)
    /// when the engine did not take it: back-pressure, no device taking writes, a PUT value
    /// smaller than the `item_size` knob or too large for a chunk. A failed PUT leaves the
    /// item in RAM only, a failed marker is counted in `marker_failures`: an append never
    /// fails a request.
    pub fn append(&self, stream: u8, rec: &KvRecord<'_>) -> Option<Location> {
        self.try_append(stream, rec).ok()
    }

    /// [`Self::append`], telling why it failed: `Err(true)` for back-pressure (the engine
    /// may take it a little later), `Err(false)` otherwise.
    pub fn try_append(&self, stream: u8, rec: &KvRecord<'_>) -> Result<Location, bool> {
        self.append_or_stall(stream, rec, false)
    }

    /// [`Self::try_append`]; with `stall`, a refusal for back-pressure is not counted (the
    /// caller awaits room and tries again).
    pub fn append_or_stall(
        &self,
        stream: u8,
        rec: &KvRecord<'_>,
        stall: bool,
    ) -> Result<Location, bool> {
        self.append_full(stream, rec, Wait::Stall(stall))
            .map_err(Refused::pressure)
    }

    /// [`Self::try_append`] of a cold item being evicted: refused because the write
    /// buffers are in flight (`Refused::Busy`), it is not counted or waited for (the caller
    /// drops it); refused for want of a free segment it marks the gate as any refusal does.
    pub fn try_append_cold(&self, stream: u8, rec: &KvRecord<'_>) -> Result<Location, Refused> {
        self.append_full(stream, rec, Wait::DropIfBusy)
    }

    /// Append a tombstone or marker the crash journal holds: a refusal for back-pressure
    /// neither marks the gate nor counts as a marker failure; the journal entry is committed
    /// as not covered and the journal appends the record again (`flash_journal_uncovered`).
    pub fn append_journaled(&self, stream: u8, rec: &KvRecord<'_>) -> Result<Location, bool> {
        self.append_full(stream, rec, Wait::Journaled)
            .map_err(Refused::pressure)
    }

    /// [`Self::append`], waiting up to the `append_wait` knob on back-pressure (blocking the
    /// thread). Only for callers holding no lock (a `flush_all` marker).
    pub fn append_unlocked(&self, stream: u8, rec: &KvRecord<'_>) -> Option<Location> {
        self.append_full(stream, rec, Wait::Block).ok()
    }

    fn append_full(&self, stream: u8, rec: &KvRecord<'_>, wait: Wait) -> Result<Location, Refused> {
        let stall = wait == Wait::Stall(true);
        if let KvRecord::Put(p) = rec {
            if (p.value.len() as u64) < self.tiering.item_size() {
                add(&self.counters.write_skipped, 1);
                return Err(Refused::Other);
            }
        }
        let version = self.next_version(rec.min_version());
        let mut prefix = [0; PREFIX];
        let mut w = rec.encode(version, &mut prefix);
        if let KvRecord::Tombstone { .. } = rec {
            w.flags = self.flash.horizon();
        }
        // A PUT's value goes from where it lies (RAM words or a request's bytes) straight
        // into the engine's write chunk, after the prefix: one copy, no buffer.
        let body = rec.body();
        let copy = |dst: &mut [u8]| {
            if let Some(b) = body {
                b.copy_to(dst);
            }
        };
        let fill = body.map(|b| ValueFill {
            len: b.len(),
            fill: &copy,
        });
        let res = match wait {
            Wait::Block => self.append_blocking(stream, &w, fill),
            Wait::Journaled => self.append_engine(stream, &w, fill),
            Wait::DropIfBusy => match self.append_engine(stream, &w, fill) {
                Err(flashtier_flash::Error::Busy(_)) => return Err(Refused::Busy),
                Err(flashtier_flash::Error::NoSpace) => {
                    if !self.tiering.append_wait().is_zero() {
                        self.gate.pressure();
                    }
                    Err(flashtier_flash::Error::NoSpace)
                }
                other => other,
            },
            Wait::Stall(_) => self.append_write(stream, &w, fill),
        };
        let refused = match &res {
            Ok(_) => Refused::Other,
            Err(flashtier_flash::Error::Busy(_)) => Refused::Busy,
            Err(flashtier_flash::Error::NoSpace) => Refused::NoSpace,
            Err(_) => Refused::Other,
        };
        let pressure = res.is_err() && refused.pressure();
        if pressure && stall {
            return Err(refused);
        }
        if matches!(rec, KvRecord::Tombstone { .. } | KvRecord::Flush { .. }) {
            self.journal_commit(&w, res.is_ok());
        }
        let c = &self.counters;
        match (rec, &res) {
            (KvRecord::Put(p), Ok(_)) => {
                add(&c.objects_written, 1);
                add(&c.bytes_written, p.value.len() as u64);
                self.value_mean.note(p.value.len());
            }
            (_, Err(_)) if pressure && wait == Wait::Journaled => {}
            (KvRecord::Put(_), Err(_)) => add(&c.write_skipped, 1),
            (KvRecord::Tombstone { .. }, Ok(_)) => add(&c.tombstones, 1),
            (KvRecord::Flush { at: 0 }, Ok(_)) => {
                self.last_marker.store(version, Ordering::Relaxed)
            }
            (KvRecord::Flush { .. }, Ok(_)) => self.last_delayed.store(version, Ordering::Relaxed),
            (KvRecord::CasCheckpoint { .. }, Ok(_)) => {}
            (_, Err(_)) => add(&c.marker_failures, 1),
        }
        res.map_err(|_| refused)
    }

    /// One engine append; never waits (callers may hold a shard lock). A refusal for
    /// back-pressure marks the gate, so later operations await room before they lock.
    fn append_write(
        &self,
        stream: u8,
        w: &RecordWrite<'_>,
        fill: Option<ValueFill<'_>>,
    ) -> Result<Location, flashtier_flash::Error> {
        let res = self.append_engine(stream, w, fill);
        if matches!(
            res,
            Err(flashtier_flash::Error::Busy(_) | flashtier_flash::Error::NoSpace)
        ) && !self.tiering.append_wait().is_zero()
        {
            self.gate.pressure();
        }
        res
    }

    /// One engine append of `w`, its value followed by `fill`'s bytes if any.
    fn append_engine(
        &self,
        stream: u8,
        w: &RecordWrite<'_>,
        fill: Option<ValueFill<'_>>,
    ) -> Result<Location, flashtier_flash::Error> {
        match fill {
            Some(f) => self.flash.append_with(stream, w, f),
            None => self.flash.append(stream, w),
        }
    }

    /// [`Self::append_engine`], waiting up to the `append_wait` knob on back-pressure.
    fn append_blocking(
        &self,
        stream: u8,
        w: &RecordWrite<'_>,
        fill: Option<ValueFill<'_>>,
    ) -> Result<Location, flashtier_flash::Error> {
        let wait = self.tiering.append_wait();
        match fill {
            Some(f) => self.flash.append_blocking_with(stream, w, f, wait),
            None => self.flash.append_blocking(stream, w, wait),
        }
    }

    /// True when the last append was refused for back-pressure: an operation about to
    /// append should await [`Self::writable`] first, holding no lock.
    pub fn pressured(&self) -> bool {
        self.gate.is_pressured()
    }

    /// Await room in the engine (at most the `append_wait` knob) if appends were being
    /// refused; ready at once otherwise. Call it holding no lock.
    pub(crate) fn writable(&self) -> Writable<'_> {
        self.gate.writable(self.tiering.append_wait())
    }

    /// [`Self::writable`], waiting at most `wait`.
    pub(crate) fn writable_for(&self, wait: std::time::Duration) -> Writable<'_> {
        self.gate.writable(wait)
    }

    /// Append a tombstone, marker or checkpoint again after its write failed, with its own
    /// kind, version and fields (`rec`, the lost content, gives the key). False if the
    /// engine refused it.
    pub fn append_again(&self, m: &RecordMeta, rec: Option<&Record>) -> bool {
        let (key, value) = rec.map_or((&[][..], &[][..]), |r| (&r.key[..], &r.value[..]));
        let w = RecordWrite {
            kind: m.kind,
            key_id: m.key_id,
            version: m.version,
            flags: m.flags,
            exptime: m.exptime,
            key,
            value,
        };
        // Where the engine reports a failed write, holding no cache lock: it may wait.
        let wait = self.tiering.append_wait();
        self.flash.append_blocking(STREAM, &w, wait).is_ok()
    }

    /// Whether reclaim must keep tombstone `m` (a delete, or the engine's drop note of an
    /// evicted version): while flash has room, as before; else while a segment other than
    /// its own that may hold an older version of the key (seq ≤ its horizon) survives. A
    /// tombstone without a horizon (flags 0, written before horizons) follows the room rule.
    pub fn tombstone_needed(&self, m: &RecordMeta) -> bool {
        if self.has_room() {
            return true;
        }
        if m.flags == 0 {
            return false;
        }
        let oldest = {
            let mut cache = self.oldest_other.lock();
            match *cache {
                // Asked again for the same victim: segments only got newer (or fewer), so
                // the cached answer is at most the true one — keeping is the safe side.
                Some((seq, oldest)) if seq == m.seq => oldest,
                _ => {
                    let oldest = self.flash.oldest_seq_except(m.seq);
                    *cache = Some((m.seq, oldest));
                    oldest
                }
            }
        };
        oldest.is_some_and(|o| o <= u64::from(m.flags))
    }

    /// True for a marker record reclaim must keep (the newest flush markers).
    pub fn is_current_marker(&self, m: &RecordMeta) -> bool {
        matches!(KvKind::of(m), KvKind::Flush { .. })
            && (m.version == self.last_marker.load(Ordering::Relaxed)
                || m.version == self.last_delayed.load(Ordering::Relaxed))
    }

    /// Commit header-only record `w` to the crash journal (`journal::commit`); counted in
    /// `journal_errors` when the journal cannot take it. Without a journal, does nothing.
    fn journal_commit(&self, w: &RecordWrite<'_>, covered: bool) {
        if let Some(j) = self.flash.journal() {
            if !journal::commit(j, w, covered) {
                add(&self.counters.journal_errors, 1);
            }
        }
    }

    /// True when a header-only record that could not go to the log still holds: the
    /// journal took it and appends it to the log again.
    pub(crate) fn journaled(&self) -> bool {
        self.flash.journal().is_some()
    }

    /// Await what a write's phase 2 owes before its reply (`journal`): the sync of its
    /// journal entry, or a flush of the log.
    pub(crate) async fn settle(&self, owed: Owed) -> Result<(), Error> {
        journal::settle(&self.flash, owed).await.map_err(|e| {
            add(&self.counters.errors, 1);
            flash_err(&e)
        })
    }

    /// Before a write's phase 2 (holding no lock): if the engine has been refusing appends
    /// for back-pressure, await room (`backpressure`) within the request's budget of
    /// `append_wait_ms` (`p.first`, shared by every wait of the request), or, once it is
    /// holding rather than drop deferred items, within `p.before_drop` (counted in
    /// `drop_waits`); the appends made under the lock never wait.
    pub(crate) async fn await_room(&self, p: &mut Patience) {
        let wait = self.tiering.append_wait();
        if !self.pressured() || wait.is_zero() {
            return;
        }
        if !p.holding() {
            let left = p.first.left(wait);
            if !left.is_zero() {
                self.writable_for(left).await;
            }
            return;
        }
        let left = p.before_drop.left(wait * DROP_WAIT_TIMES);
        if left.is_zero() {
            return;
        }
        add(&self.counters.drop_waits, 1);
        let start = std::time::Instant::now();
        let room = self.writable_for(left).await;
        add(
            &self.counters.drop_wait_us,
            start.elapsed().as_micros() as u64,
        );
        if !room {
            add(&self.counters.drop_wait_timeouts, 1);
        }
    }

    /// What a write's evictions do with an item flash cannot take now (`OnLater`): stall
    /// while its first budget lasts; then keep it in RAM, stopping where it could only be
    /// dropped; once holding, stall again while the second budget lasts; then keep or drop
    /// (as with flash waits off).
    pub(crate) fn on_later(&self, p: &Patience) -> OnLater {
        if self.tiering.append_wait().is_zero() {
            OnLater::KeepOrDrop
        } else if !p.first.spent() {
            OnLater::Stall
        } else if !p.holding() {
            OnLater::Keep
        } else if !p.before_drop.spent() {
            OnLater::Stall
        } else {
            OnLater::KeepOrDrop
        }
    }

    /// A write's phase 2 ran with `on_later` and ended in `Error::FlashBusy`: after an
    /// [`OnLater::Keep`] it stopped rather than drop deferred items, so it is holding from
    /// now on, its second budget started (so it ends even if no wait is ever needed).
    pub(crate) fn busy(&self, p: &mut Patience, on_later: OnLater) {
        if on_later == OnLater::Keep && !p.holding() {
            p.before_drop
                .left(self.tiering.append_wait() * DROP_WAIT_TIMES);
        }
    }

    /// True when the engine takes an append of the largest record it takes (the gate
    /// thread's probe: room means any waiting write may go).
    pub(crate) fn takes_appends(&self) -> bool {
        self.flash.can_append(STREAM, self.flash.max_value_len(0))
    }

    /// The tier's counters, for the whole-cache unit tests (`crate::tests`).
    #[cfg(test)]
    pub(crate) fn counters(&self) -> &TierCounters {
        &self.counters
    }

    /// The back-pressure gate (its thread holds it too).
    pub(crate) fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }

    /// Bytes the write-back queue's buffer holds (`write_back_queue_bytes`).
    pub(crate) fn write_back_queue_bytes(&self) -> usize {
        self.dirty.memory_bytes()
    }

    /// The flash engine.
    pub(crate) fn engine(&self) -> &Flash {
        &self.flash
    }

    /// Facts about the opened devices.
    pub(crate) fn info(&self) -> &FlashInfo {
        &self.info
    }

    /// The runtime tiering settings.
    pub(crate) fn tiering(&self) -> &Tiering {
        &self.tiering
    }

    /// Mark a clean shutdown begun; false if one already was (`Cache::close` is idempotent).
    pub(crate) fn begin_close(&self) -> bool {
        !self.closed.swap(true, Ordering::SeqCst)
    }
}
