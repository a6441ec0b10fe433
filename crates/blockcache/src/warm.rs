//! Warm restart: clean cached blocks survive a clean shutdown, never a crash.
//!
//! Rule: a clean block record is trusted at open only if a valid shutdown snapshot lists its
//! exact `(LBA, location)` (the location, not the version: the index keeps no clean block's
//! version; no record newer than the marker exists, so the record at that location is the
//! one the cache held; a reclaim copy made after the snapshot only makes the block cold). Shutdown takes every stripe lock, writes the snapshot chunks and
//! then the marker, all at one fresh version `M`, each made durable. The snapshot is valid only
//! if the marker's version is the highest on the device, its geometry matches and every chunk
//! is found; open then writes a session record above `M` that reclaim keeps (`Warm`), so a
//! marker serves one open only. Story and byte tables: docs/block-cache.md, docs/format.md.
//!
//! Threads: `Found` and `write_session` run on the thread opening the cache;
//! [`BlockCache::shutdown`] on a tokio task.
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use flashtier_flash::{Flash, Location, RecordMeta};

use crate::block_io::BlockIo;
use crate::blocks::Blocks;
use crate::error::Error;
use crate::meta_log::{MetaLog, STREAM_META};
use crate::record::{BlockRecord, RecordKind};

/// `FTWARM01` listed `(LBA, version)`: such a snapshot is not trusted (the block face
/// starts cold for clean blocks once, after the upgrade).
const MAGIC: &[u8; 8] = b"FTWARM02";
const MARKER_LEN: usize = 40;
const ENTRY_LEN: usize = 16;
/// Largest snapshot chunk value (bytes).
const CHUNK_MAX: usize = 256 << 10;
/// How long a shutdown waits for in-flight requests, and for flash space.
pub(crate) const SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

/// Warm-restart records seen by the recovery scan.
#[derive(Default)]
pub(crate) struct Found {
    marker: Option<RecordMeta>,
    chunks: HashMap<(u64, u64), RecordMeta>,
    others: Vec<Location>,
}

impl Found {
    /// Take `m` if it is a warm-restart record.
    pub fn offer(&mut self, m: &RecordMeta) -> bool {
        match RecordKind::of(m.kind, m.key_id) {
            RecordKind::ShutdownMarker => {
                match &self.marker {
                    Some(o) if o.version >= m.version => self.others.push(m.location),
                    _ => {
                        if let Some(o) = self.marker.replace(*m) {
                            self.others.push(o.location);
                        }
                    }
                }
                true
            }
            RecordKind::SnapshotChunk => {
                // Reclaim may have copied a chunk: same (index, version), same bytes.
                if let Some(o) = self.chunks.insert((m.key_id, m.version), *m) {
                    self.others.push(o.location);
                }
                true
            }
            RecordKind::Session => {
                self.others.push(m.location);
                true
            }
            _ => false,
        }
    }

    /// Every warm-restart record's location (all are dead once open finished).
    pub fn locations(&self) -> Vec<Location> {
        let mut v = self.others.clone();
        v.extend(self.marker.map(|m| m.location));
        v.extend(self.chunks.values().map(|m| m.location));
        v
    }

    /// The snapshot as LBA → packed location, or why it cannot be trusted.
    pub fn load(
        &self,
        flash: &Flash,
        max_version: u64,
        block_size: u64,
        nblocks: u64,
    ) -> Result<HashMap<u64, u64>, String> {
        let Some(m) = self.marker else {
            return Err("no clean-shutdown marker (first start or crash)".into());
        };
        if m.version != max_version {
            return Err(format!(
                "shutdown marker {} is older than the newest record {max_version} (crash after a restart)",
                m.version
            ));
        }
        let rec = flash
            .read(m.location)
            .wait()
            .map_err(|e| format!("shutdown marker unreadable: {e}"))?;
        let v = &rec.value[..];
        if v.len() != MARKER_LEN || &v[0..8] != MAGIC {
            return Err("shutdown marker malformed".into());
        }
        let field = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&v[8 * i..8 * i + 8]);
            u64::from_le_bytes(b)
        };
        let (bs, nb, chunks, entries) = (field(1), field(2), field(3), field(4));
        if bs != block_size || nb != nblocks {
            return Err(format!(
                "snapshot was for {nb} blocks of {bs} bytes, now {nblocks} of {block_size}"
            ));
        }
        let mut out = HashMap::with_capacity(entries as usize);
        for i in 0..chunks {
            let c = self
                .chunks
                .get(&(i, m.version))
                .ok_or_else(|| format!("snapshot chunk {i} missing"))?;
            let r = flash
                .read(c.location)
                .wait()
                .map_err(|e| format!("snapshot chunk {i} unreadable: {e}"))?;
            if r.value.len() % ENTRY_LEN != 0 {
                return Err(format!("snapshot chunk {i} malformed"));
            }
            for e in r.value.chunks_exact(ENTRY_LEN) {
                let mut a = [0u8; 8];
                let mut b = [0u8; 8];
                a.copy_from_slice(&e[0..8]);
                b.copy_from_slice(&e[8..16]);
                out.insert(u64::from_le_bytes(a), u64::from_le_bytes(b));
            }
        }
        if out.len() as u64 != entries {
            return Err(format!(
                "snapshot holds {} entries, marker says {entries}",
                out.len()
            ));
        }
        Ok(out)
    }
}

/// The warm-restart records of this run, which reclaim must keep: the session record and
/// the snapshot being written at shutdown (by version; 0 = none yet).
#[derive(Debug, Default)]
pub(crate) struct Warm {
    session_version: AtomicU64,
    snapshot_version: AtomicU64,
}

impl Warm {
    /// Whether a warm-restart record belongs to this run and must survive reclaim; `None`
    /// for records of other kinds.
    pub(crate) fn keeps(&self, rec: &RecordMeta) -> Option<bool> {
        let v = match RecordKind::of(rec.kind, rec.key_id) {
            RecordKind::Session => self.session_version.load(Ordering::Acquire),
            RecordKind::SnapshotChunk | RecordKind::ShutdownMarker => {
                self.snapshot_version.load(Ordering::Acquire)
            }
            _ => return None,
        };
        Some(v != 0 && rec.version == v)
    }
}

/// Append and make durable this run's session record (see the module doc). Called by open
/// before the cache is handed out; failure fails the open.
pub(crate) fn write_session(
    flash: &Flash,
    warm: &Warm,
    d: &MetaLog,
    blocks: &Blocks,
) -> Result<(), Error> {
    let v = blocks.take_version();
    warm.session_version.store(v, Ordering::Release);
    let rec = BlockRecord::Session { version: v }.write();
    let wait = Duration::from_secs(5);
    match flash.append_blocking(STREAM_META, &rec, wait) {
        Ok(_) => {}
        Err(flashtier_flash::Error::NoSpace) => {
            flash.append_blocking(d.reclaim_stream(), &rec, wait)?;
        }
        Err(e) => return Err(e.into()),
    }
    flash.flush().wait()?;
    Ok(())
}

/// What a clean shutdown did.
#[derive(Clone, Debug, Default)]
pub struct ShutdownReport {
    /// Clean blocks listed in the snapshot (served from flash after restart).
    pub clean_saved: u64,
    /// Dirty blocks left on the cache device (written back after restart).
    pub dirty_left: u64,
    /// Why no snapshot was written (the next start is cold for clean data), if so.
    pub skipped: Option<String>,
}

impl Warm {
    /// Write the snapshot of `io`'s clean blocks and then the shutdown marker, each made
    /// durable; returns the blocks listed. Caller holds every stripe lock.
    pub(crate) async fn save_snapshot(&self, io: &BlockIo) -> Result<u64, String> {
        let (entries, m) = io.blocks.clean_snapshot();
        self.snapshot_version.store(m, Ordering::Release);
        let per = (CHUNK_MAX.min(io.flash.max_value_len(0)) / ENTRY_LEN).max(1);
        let mut buf = Vec::with_capacity(per * ENTRY_LEN);
        let mut chunks = 0u64;
        let deadline = Instant::now() + SHUTDOWN_WAIT;
        for part in entries.chunks(per) {
            buf.clear();
            for (l, v) in part {
                buf.extend_from_slice(&l.to_le_bytes());
                buf.extend_from_slice(&v.to_le_bytes());
            }
            let chunk = BlockRecord::SnapshotChunk {
                index: chunks,
                version: m,
                entries: &buf,
            };
            Self::append_meta(io, chunk, deadline).await?;
            chunks += 1;
        }
        io.flash
            .flush()
            .await
            .map_err(|e| format!("flushing the snapshot: {e}"))?;
        let mut marker = Vec::with_capacity(MARKER_LEN);
        marker.extend_from_slice(MAGIC);
        for f in [io.block_size, io.nblocks, chunks, entries.len() as u64] {
            marker.extend_from_slice(&f.to_le_bytes());
        }
        let record = BlockRecord::ShutdownMarker {
            version: m,
            marker: &marker,
        };
        Self::append_meta(io, record, deadline).await?;
        io.flash
            .flush()
            .await
            .map_err(|e| format!("flushing the shutdown marker: {e}"))?;
        Ok(entries.len() as u64)
    }

    async fn append_meta(
        io: &BlockIo,
        record: BlockRecord<'_>,
        deadline: Instant,
    ) -> Result<(), String> {
        let rec = record.write();
        loop {
            match io.flash.append(STREAM_META, &rec) {
                Ok(_) => return Ok(()),
                Err(flashtier_flash::Error::Busy(_) | flashtier_flash::Error::NoSpace)
                    if Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                Err(e) => return Err(format!("writing the snapshot: {e}")),
            }
        }
    }
}
