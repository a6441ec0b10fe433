//! Crash-safe clean blocks: backing-write intents and the floor table ([`Fence`]).
//!
//! Rule: after a crash a clean block record `(LBA, v)` is trusted only if no intent covering
//! the LBA has a version above `v` and `v` is above the LBA's region floor. An intent is
//! appended and made durable (group commit, `sync`) before every backing write that does not
//! carry a cached record's content. A block record reclaim drops may have been the newest of
//! its LBA, above an older, stale copy: it gets a drop intent, durable before its segment is
//! erased (`before_erase`). Reclaim keeps an intent while its version is above the persisted
//! watermark or a durable floor of a region it covers; floors rise every `raise_every`
//! intents. Story: docs/block-cache.md "Clean blocks after a crash"; bytes: docs/format.md.
//! Threads: request tasks (intents), the reclaimer thread (raises, `persist_blocking`).
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flashtier_flash::{Flash, RecordMeta};
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::blocks::Blocks;
use crate::meta_log::{MetaLog, STREAM_META};
use crate::record::{BlockRecord, RecordKind};
use crate::stats::{add, BlockStats};

/// Most floor regions (the table is one record of 8 bytes per region plus a header); fewer
/// on small segments: a table is written per reclaimed segment and stays under 1/256 of it.
pub(crate) const MAX_REGIONS: u64 = 4096;
/// Floor table header: magic, block size, blocks, log2 blocks per region.
pub(crate) const FLOOR_MAGIC: &[u8; 8] = b"FTFLOOR1";
pub(crate) const FLOOR_HEADER: usize = 32;
/// Intents appended between two raises of every floor, at most: reclaim keeps at most twice
/// this many, and fewer on a small cache device (about 0.5 % of it in intent records).
const RAISE_EVERY: u64 = 1 << 16;

/// One group-commit round: every intent appended before it started is durable once it ends.
struct Round(watch::Sender<Option<Result<(), String>>>);

struct GroupState {
    next: Arc<Round>,
    running: bool,
}

/// The floor table and the intent group commit.
pub(crate) struct Fence {
    /// log2 of blocks per region.
    pub shift: u32,
    block_size: u64,
    nblocks: u64,
    /// Floor per region (raised, never lowered).
    table: Vec<AtomicU64>,
    /// A floor was raised since the table was last made durable.
    changed: AtomicBool,
    /// The newest durable table's record version and entries (reclaim's intent rule).
    durable: Mutex<(u64, Vec<u64>)>,
    /// Serializes table writes: a later version always holds every earlier raise.
    writing: Mutex<()>,
    intents: AtomicU64,
    raise_every: u64,
    /// Version every floor is raised to at the next raise (taken at the previous one).
    raise_to: AtomicU64,
    group: Arc<Mutex<GroupState>>,
    /// One bit per LBA: a record of it was found at open or appended since (never cleared).
    /// A write around blocks none of which ever had a record needs no intent.
    seen: Vec<AtomicU64>,
}

fn new_round() -> Arc<Round> {
    Arc::new(Round(watch::channel(None).0))
}

impl Fence {
    /// A table for `nblocks` blocks of `block_size` bytes, every floor at `floor`; segments
    /// of `segment_size` bytes bound its size, a device set of `capacity` bytes the intents.
    pub(crate) fn new(
        nblocks: u64,
        block_size: u64,
        segment_size: u64,
        capacity: u64,
        floor: u64,
    ) -> Self {
        let max = MAX_REGIONS.min(segment_size / 2048).max(16);
        let mut shift = 0;
        while nblocks.div_ceil(1 << shift) > max {
            shift += 1;
        }
        let n = nblocks.div_ceil(1 << shift) as usize;
        Fence {
            shift,
            block_size,
            nblocks,
            table: (0..n).map(|_| AtomicU64::new(floor)).collect(),
            changed: AtomicBool::new(true),
            durable: Mutex::new((0, vec![0; n])),
            writing: Mutex::new(()),
            intents: AtomicU64::new(0),
            raise_every: (capacity / 48 / 400).clamp(256, RAISE_EVERY),
            raise_to: AtomicU64::new(floor),
            group: Arc::new(Mutex::new(GroupState {
                next: new_round(),
                running: false,
            })),
            seen: (0..nblocks.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }

    /// A record of `lba` exists (found at open, or about to be appended).
    pub(crate) fn saw(&self, lba: u64) {
        if let Some(w) = self.seen.get((lba / 64) as usize) {
            w.fetch_or(1 << (lba % 64), Ordering::AcqRel);
        }
    }

    /// Whether any of `first..=last` ever had a record (then a write around needs an intent).
    pub(crate) fn any_seen(&self, first: u64, last: u64) -> bool {
        (first / 64..=last / 64).any(|i| {
            let Some(w) = self.seen.get(i as usize) else {
                return true;
            };
            let lo = if i == first / 64 { first % 64 } else { 0 };
            let hi = if i == last / 64 { last % 64 } else { 63 };
            let mask = (u64::MAX >> (63 - hi)) & (u64::MAX << lo);
            w.load(Ordering::Acquire) & mask != 0
        })
    }

    /// Regions in the table.
    pub(crate) fn regions(&self) -> usize {
        self.table.len()
    }

    /// Raise each region's floor to at least `floors[i]` (a loaded table).
    pub(crate) fn raise_all(&self, floors: &[u64]) {
        for (t, f) in self.table.iter().zip(floors) {
            t.fetch_max(*f, Ordering::AcqRel);
        }
        self.changed.store(true, Ordering::Release);
    }

    /// The floor of `lba`'s region.
    pub(crate) fn floor(&self, lba: u64) -> u64 {
        self.table
            .get((lba >> self.shift) as usize)
            .map_or(u64::MAX, |t| t.load(Ordering::Acquire))
    }

    /// Reclaim drops block record `(lba, version)`; `shadowed`: the index holds another
    /// record of the LBA that is newer (the index holds the newest record the cache has, so
    /// a clean entry elsewhere, whose version the index does not keep, is at least as new:
    /// the same version only as a copy of the same record, which shadows it as well). A
    /// shadowed record needs nothing (the engine flushes before every erase, so the newer one
    /// is durable by then).
    /// Otherwise it may be the newest record of its LBA: a *drop intent* `(lba, 1, version)`
    /// makes every older one stale (durable by that same flush); if it cannot be appended,
    /// the region's floor rises instead. Reclaimer thread; no lock of the cache held.
    pub(crate) fn dropped(
        &self,
        d: &MetaLog,
        blocks: &Blocks,
        lba: u64,
        version: u64,
        shadowed: bool,
    ) {
        if shadowed {
            return;
        }
        let rec = BlockRecord::Intent {
            lba,
            blocks: 1,
            version,
        }
        .write();
        let appended =
            d.flash().is_some_and(
                |f| match f.append_blocking(STREAM_META, &rec, Duration::ZERO) {
                    Ok(_) => true,
                    Err(flashtier_flash::Error::NoSpace | flashtier_flash::Error::Busy(_)) => f
                        .append_blocking(d.reclaim_stream(), &rec, Duration::from_secs(1))
                        .is_ok(),
                    Err(_) => false,
                },
            );
        if appended {
            add(&d.stats().drop_intents, 1);
            let now = blocks.next_version();
            self.counted(now);
        } else {
            self.raise(lba, version);
        }
    }

    /// One more intent appended (`now`: a version not below the newest taken). Every
    /// `raise_every` intents all floors rise to the version noted at the previous raise,
    /// so the intents older than it are no longer needed once the table is durable.
    fn counted(&self, now: u64) {
        let every = self.raise_every;
        if self.intents.fetch_add(1, Ordering::AcqRel) % every == every - 1 {
            let to = self.raise_to.swap(now, Ordering::AcqRel);
            for t in &self.table {
                t.fetch_max(to, Ordering::AcqRel);
            }
            self.changed.store(true, Ordering::Release);
        }
    }

    /// Raise `lba`'s region floor to `version` (written before the next erase).
    pub(crate) fn raise(&self, lba: u64, version: u64) {
        if let Some(t) = self.table.get((lba >> self.shift) as usize) {
            if t.fetch_max(version, Ordering::AcqRel) < version {
                self.changed.store(true, Ordering::Release);
            }
        }
    }

    /// Whether reclaim keeps a fence record; `None` for other kinds.
    pub(crate) fn keeps(&self, rec: &RecordMeta, wm_persisted: u64) -> Option<bool> {
        match RecordKind::of(rec.kind, rec.key_id) {
            RecordKind::Floor => Some(rec.version >= self.durable.lock().0),
            RecordKind::Intent => {
                if rec.version > wm_persisted {
                    return Some(true);
                }
                let d = self.durable.lock();
                let first = rec.key_id >> self.shift;
                let last = (rec.key_id + u64::from(rec.flags.max(1)) - 1) >> self.shift;
                Some((first..=last).any(|r| d.1.get(r as usize).is_none_or(|f| *f < rec.version)))
            }
            _ => None,
        }
    }

    /// Write the table if a floor was raised since it was last written, and make it durable
    /// (blocking: the reclaimer thread and open).
    pub(crate) fn persist_blocking(
        &self,
        d: &MetaLog,
        blocks: &Blocks,
        flash: &Flash,
    ) -> Result<(), String> {
        if !self.changed.load(Ordering::Acquire) {
            return Ok(());
        }
        let _w = self.writing.lock();
        self.changed.store(false, Ordering::Release);
        let version = blocks.take_version();
        let floors: Vec<u64> = self
            .table
            .iter()
            .map(|t| t.load(Ordering::Acquire))
            .collect();
        let mut value = Vec::with_capacity(FLOOR_HEADER + 8 * floors.len());
        value.extend_from_slice(FLOOR_MAGIC);
        for f in [self.block_size, self.nblocks, u64::from(self.shift)] {
            value.extend_from_slice(&f.to_le_bytes());
        }
        for f in &floors {
            value.extend_from_slice(&f.to_le_bytes());
        }
        let rec = BlockRecord::Floor {
            version,
            table: &value,
        }
        .write();
        let wait = Duration::from_secs(5);
        let res = match flash.append_blocking(STREAM_META, &rec, Duration::ZERO) {
            Err(flashtier_flash::Error::NoSpace | flashtier_flash::Error::Busy(_)) => {
                flash.append_blocking(d.reclaim_stream(), &rec, wait)
            }
            other => other,
        };
        let res = res
            .map(|_| ())
            .and_then(|()| flash.flush().wait())
            .map_err(|e| format!("writing the floor table: {e}"));
        if let Err(e) = res {
            self.changed.store(true, Ordering::Release);
            return Err(e);
        }
        add(&d.stats().floor_writes, 1);
        let mut d = self.durable.lock();
        if version > d.0 {
            *d = (version, floors);
        }
        Ok(())
    }

    /// A table found at open (record `version`, `floors`) is the durable one.
    pub(crate) fn set_durable(&self, version: u64, floors: Vec<u64>) {
        *self.durable.lock() = (version, floors);
    }

    /// Decode a floor table record's value for this geometry.
    pub(crate) fn decode(&self, value: &[u8]) -> Result<Vec<u64>, String> {
        let n = self.table.len();
        if value.len() != FLOOR_HEADER + 8 * n || &value[..8] != FLOOR_MAGIC {
            return Err("floor table malformed or for another geometry".into());
        }
        let word = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&value[8 * i..8 * i + 8]);
            u64::from_le_bytes(b)
        };
        let (bs, nb, shift) = (word(1), word(2), word(3));
        if bs != self.block_size || nb != self.nblocks || shift != u64::from(self.shift) {
            return Err(format!(
                "floor table was for {nb} blocks of {bs} bytes, now {} of {}",
                self.nblocks, self.block_size
            ));
        }
        Ok((0..n).map(|i| word(4 + i)).collect())
    }
}

impl Fence {
    /// Append the intent for blocks `first..=last` and make it durable (group commit), before
    /// a backing write around the cache; nothing if none of them ever had a record (no older
    /// copy can come back). Caller holds the blocks' stripe locks.
    pub(crate) async fn intent(
        &self,
        log: &MetaLog,
        blocks: &Blocks,
        flash: &Arc<Flash>,
        first: u64,
        last: u64,
    ) -> Result<(), String> {
        if !self.any_seen(first, last) {
            add(&log.stats().intents_skipped, 1);
            return Ok(());
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        let n = u32::try_from(last - first + 1).map_err(|_| "intent range too long")?;
        loop {
            let res = blocks.locked(|index| {
                index.stamp(|version| {
                    let rec = BlockRecord::Intent {
                        lba: first,
                        blocks: n,
                        version,
                    };
                    let r = flash.append(STREAM_META, &rec.write());
                    if r.is_ok() {
                        self.counted(version);
                    }
                    r
                })
            });
            match res {
                Ok(_) => break,
                Err(flashtier_flash::Error::Busy(_) | flashtier_flash::Error::NoSpace)
                    if Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err(e) => return Err(format!("writing a backing-write intent: {e}")),
            }
        }
        add(&log.stats().intents_written, 1);
        sync(&self.group, log.stats(), flash).await
    }
}

/// Wait until every intent appended so far is durable: join the next round, or start it.
async fn sync(
    group: &Arc<Mutex<GroupState>>,
    stats: &Arc<BlockStats>,
    flash: &Arc<Flash>,
) -> Result<(), String> {
    let (mut rx, lead) = {
        let mut g = group.lock();
        let lead = !g.running;
        g.running = true;
        (g.next.0.subscribe(), lead)
    };
    if lead {
        let (group, stats, flash) = (Arc::clone(group), Arc::clone(stats), Arc::clone(flash));
        tokio::spawn(async move { run_rounds(&group, &stats, &flash).await });
    }
    let out = match rx.wait_for(Option::is_some).await {
        Ok(v) => v.clone().unwrap_or(Ok(())),
        Err(_) => Err("intent sync task ended".into()),
    };
    out
}

/// Run rounds while someone waits on the next one.
async fn run_rounds(group: &Mutex<GroupState>, stats: &BlockStats, flash: &Flash) {
    loop {
        let round = {
            let mut g = group.lock();
            if g.next.0.receiver_count() == 0 {
                g.running = false;
                return;
            }
            std::mem::replace(&mut g.next, new_round())
        };
        add(&stats.intent_syncs, 1);
        let res = flash.flush().await.map_err(|e| e.to_string());
        round.0.send_replace(Some(res));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seen_bits_cover_exactly_the_lbas_set() {
        let f = Fence::new(1000, 4096, 1 << 20, 64 << 20, 0);
        assert!(!f.any_seen(0, 999));
        f.saw(130);
        for (a, b, want) in [
            (0, 129, false),
            (131, 999, false),
            (130, 130, true),
            (0, 999, true),
            (128, 191, true),
            (64, 127, false),
        ] {
            assert_eq!(f.any_seen(a, b), want, "{a}..={b}");
        }
        f.saw(63);
        assert!(f.any_seen(63, 63) && f.any_seen(0, 63) && !f.any_seen(0, 62));
    }

    #[test]
    fn regions_and_raises_are_bounded() {
        let f = Fence::new(1 << 20, 4096, 8 << 20, 64 << 20, 5);
        assert!(f.regions() as u64 <= MAX_REGIONS);
        assert_eq!(f.floor(12345), 5);
        f.raise(12345, 9);
        assert_eq!(f.floor(12345), 9);
        assert_eq!(f.floor(0), 5);
        // Every `raise_every` intents floors rise to the version of the previous raise.
        let every = f.raise_every;
        for i in 0..every {
            f.counted(100 + i);
        }
        assert_eq!(f.floor(0), 5, "first raise: to the floor at open");
        for i in 0..every {
            f.counted(1000 + i);
        }
        assert_eq!(f.floor(0), 100 + every - 1);
    }
}
