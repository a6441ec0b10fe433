//! Open-time work: superblocks (validate, or format blank devices — never foreign data or the
//! other face's device, see [`crate::probe`]) and recovery of every segment in sequence order.
//!
//! A segment with a valid header of this instance is recovered from its checksummed summary
//! (sealed: no record read; a named record is verified again when read) or scanned up to the
//! first record that does not verify (open at the crash, or damaged tail); with
//! `recovery_full_scan` every segment is scanned. Records reach the user oldest first.
//! Invariant: losses are counted and logged, never silent (the cases and their counters are
//! in `docs/faults.md`, "Damage found at start", and `docs/format.md`, "Recovery").
//!
//! Runs on the thread calling `Flash::open`, before any other engine thread exists.

use std::time::Instant;

use crate::config::FlashConfig;
use crate::engine::{random_bytes, Inner, RecordMeta};
use crate::error::{Error, Result};
use crate::format::record::{self, DecodeError};
use crate::format::segment::{
    decode_summary, Footer, SegmentHeader, SummaryEntry, FOOTER_LEN, SEGMENT_HEADER_LEN,
};
use crate::format::superblock::{Role, Superblock, SuperblockError, SUPERBLOCK_AREA};
use crate::format::{segment_seed, FORMAT_VERSION};
use crate::io::{read_blocking, run_batch, run_one, AlignedBuf, Device, Executor, IoOp};
use crate::journal::JournalMode;
use crate::location::PAGE;
use crate::probe::Content;
use crate::segments::{SegInfo, SegState};
use crate::stats::FlashStats;

pub(crate) struct Layout {
    pub segs: Vec<SegInfo>,
    pub uuid: [u8; 16],
    pub hash_seed: u64,
    pub formatted: bool,
    /// Devices whose superblock held something other than a flashtier superblock or zeros
    /// and that were formatted anyway (what they held is lost).
    pub superblocks_lost: u64,
}

/// Segments past which per-segment loss lines are summed up in one line.
const LOG_EACH: u64 = 10;

fn all_zero(b: &[u8]) -> bool {
    b.iter().all(|&x| x == 0)
}

/// Check or write the superblocks; return the segment table skeleton.
// Longer than clippy.toml's 120 lines; left as is by issue 29 (cache crate only).
#[allow(clippy::too_many_lines)]
pub(crate) fn open_layout(
    devices: &[std::sync::Arc<dyn Device>],
    cfg: &mut FlashConfig,
    exec: &dyn Executor,
) -> Result<Layout> {
    let (found, blank_dev) = superblocks(devices, cfg, exec)?;
    let chosen = cfg.clone();
    adopt_geometry(cfg, &found);
    let (mut segs, mut plan) = lay_out(devices, cfg)?;
    let mismatch = check(&found, &plan, devices, cfg);
    if cfg.segment_size != chosen.segment_size {
        if mismatch.is_some() {
            // A set formatted afresh (the mismatch is refused below unless a reformat is
            // asked for) gets the sizes chosen for its capacity, not the old format's.
            *cfg = chosen;
            (segs, plan) = lay_out(devices, cfg)?;
        } else {
            log::info!(
                "flash {}: formatted with {}-byte segments; keeping them (a new format would \
                 use {})",
                devices[0].name(),
                cfg.segment_size,
                chosen.segment_size
            );
        }
    }
    // A set this face formatted before the journal existed, otherwise matching: formatted
    // anew (it is a cache of ours; it cannot be opened without the journal and keep its
    // promise that a deleted or overwritten key never comes back).
    let upgrade = cfg.journal != JournalMode::Off
        && matches!(found.first(), Some(Ok(sb)) if sb.journal == 0)
        && check(
            &found,
            &plan,
            devices,
            &FlashConfig {
                journal: JournalMode::Off,
                ..cfg.clone()
            },
        )
        .is_none();
    let cfg = &*cfg;
    let seg_size = cfg.segment_size;
    let blank = found
        .iter()
        .all(|f| *f == Err(SuperblockError::NotFormatted));
    match (blank, &mismatch) {
        (false, None) => {
            let Some(Ok(sb)) = found.first() else {
                return Err(Error::Mismatch("no superblock".into()));
            };
            prepare(devices)?;
            return Ok(Layout {
                segs,
                uuid: sb.uuid,
                hash_seed: sb.hash_seed,
                formatted: false,
                superblocks_lost: 0,
            });
        }
        (false, Some(why)) if !cfg.reformat_on_mismatch && !cfg.force_format && !upgrade => {
            return Err(why.to_error())
        }
        _ => {}
    }
    // Formatting over anything but a blank page loses what the device held: say so.
    let mut superblocks_lost = 0;
    for (d, dev) in devices.iter().enumerate() {
        let what = match found[d] {
            _ if blank_dev[d] => continue,
            Err(SuperblockError::NotFormatted) => "foreign data (forced)".to_string(),
            Err(e) => format!("superblock {e:?}"),
            Ok(_) if upgrade => "a flash format from before the crash journal".to_string(),
            Ok(_) => match &mismatch {
                Some(why) => format!("a superblock that does not match ({})", why.to_error()),
                None => "a superblock of another device set or geometry".to_string(),
            },
        };
        superblocks_lost += 1;
        // Asked for (`reformat_on_mismatch` over a format of this face): a warning.
        let asked = cfg.reformat_on_mismatch && found[d].is_ok();
        log::log!(
            if asked {
                log::Level::Warn
            } else {
                log::Level::Error
            },
            "flash device {}: {what} at its start; formatting it: the cache starts empty \
             (whatever it held is lost)",
            dev.name()
        );
    }
    prepare(devices)?;
    // Format: a new uuid makes every old segment header and record foreign.
    let rnd = random_bytes();
    let mut uuid = [0u8; 16];
    uuid.copy_from_slice(&rnd[..16]);
    let mut seed = [0u8; 8];
    seed.copy_from_slice(&rnd[16..]);
    let hash_seed = u64::from_le_bytes(seed);
    let created = u64::from(crate::engine::now_unix());
    // Zero every segment's header page first, so that later a header page is either a valid
    // header, zero (free), or damage; the superblock goes last, so an interrupted format
    // leaves no superblock and is simply done again.
    let zero = std::sync::Arc::new(AlignedBuf::zeroed(PAGE as usize));
    for batch in segs.chunks(256) {
        let ops = batch
            .iter()
            .map(|s| IoOp::Write {
                dev: s.dev,
                off: s.dev_off,
                buf: std::sync::Arc::clone(&zero),
            })
            .collect();
        for (s, r) in batch.iter().zip(run_batch(exec, ops)) {
            r.map_err(|e| Error::io(devices[s.dev].name(), "write segment header", e))?;
        }
    }
    let mut ops = Vec::new();
    for (d, dev) in devices.iter().enumerate() {
        let (n, first) = plan[d];
        let sb = Superblock {
            version: FORMAT_VERSION,
            device_index: d as u32,
            device_count: devices.len() as u32,
            segment_size: seg_size as u32,
            device_size: dev.len(),
            segments: n,
            first_segment: first,
            uuid,
            hash_seed,
            created,
            tier: cfg.device_tiers.get(d).copied().unwrap_or(0),
            role: cfg.role.to_byte(),
            journal: journal_byte(cfg),
        };
        let mut buf = AlignedBuf::zeroed(PAGE as usize);
        let bytes = sb.encode();
        buf.as_mut_slice()[..bytes.len()].copy_from_slice(&bytes);
        ops.push(IoOp::Write {
            dev: d,
            off: 0,
            buf: std::sync::Arc::new(buf),
        });
    }
    for (d, r) in run_batch(exec, ops).into_iter().enumerate() {
        r.map_err(|e| Error::io(devices[d].name(), "write superblock", e))?;
        run_one(exec, IoOp::Sync { dev: d })
            .map_err(|e| Error::io(devices[d].name(), "sync", e))?;
    }
    Ok(Layout {
        segs,
        uuid,
        hash_seed,
        formatted: true,
        superblocks_lost,
    })
}

/// Per device: its segment count and the global index of its first segment.
type Plan = Vec<(u32, u32)>;

/// The segment table skeleton for `cfg`'s segment size, and the [`Plan`] it follows.
fn lay_out(
    devices: &[std::sync::Arc<dyn Device>],
    cfg: &FlashConfig,
) -> Result<(Vec<SegInfo>, Plan)> {
    let seg_size = cfg.segment_size;
    let mut segs = Vec::new();
    let mut plan = Vec::new();
    for (d, dev) in devices.iter().enumerate() {
        let len = dev.len();
        let n = len.saturating_sub(SUPERBLOCK_AREA) / seg_size;
        if n == 0 {
            return Err(Error::Config(format!(
                "device {} ({len} bytes) holds no {seg_size}-byte segment",
                dev.name()
            )));
        }
        plan.push((n as u32, segs.len() as u32));
        for i in 0..n {
            segs.push(SegInfo::new(d, SUPERBLOCK_AREA + i * seg_size));
        }
    }
    if cfg.journal != JournalMode::Off {
        // Global segment 0 is the journal: never allocated, reclaimed or recovered.
        if let Some(s) = segs.first_mut() {
            s.state = SegState::Journal;
        }
        cfg.validate_total(segs.len() as u64 - 1)?;
    } else {
        cfg.validate_total(segs.len() as u64)?;
    }
    Ok((segs, plan))
}

/// A device's superblock, or why it has none.
type SuperblockFound = Result<Superblock, SuperblockError>;

/// Each device's superblock, or why it has none, and whether it was blank. Refuses, before anything is written, a
/// device that holds neither zeros nor flashtier's format (see [`crate::probe`]) and one
/// formatted by the other face, unless `force_format` (then it counts as blank).
fn superblocks(
    devices: &[std::sync::Arc<dyn Device>],
    cfg: &FlashConfig,
    exec: &dyn Executor,
) -> Result<(Vec<SuperblockFound>, Vec<bool>)> {
    let mut found = Vec::with_capacity(devices.len());
    let mut blank = Vec::with_capacity(devices.len());
    for (d, dev) in devices.iter().enumerate() {
        let refuse = |what: String| -> Result<Result<Superblock, SuperblockError>> {
            if !cfg.force_format {
                return Err(Error::NotBlank {
                    device: dev.name().to_string(),
                    found: what,
                });
            }
            log::warn!("{}: formatting over {what} (forced)", dev.name());
            Ok(Err(SuperblockError::NotFormatted))
        };
        let content = dev.probe().map_err(|e| Error::io(dev.name(), "probe", e))?;
        blank.push(matches!(content, Content::Blank));
        let sb = match content {
            Content::Blank => Err(SuperblockError::NotFormatted),
            Content::Foreign(what) => refuse(what)?,
            Content::Flashtier => {
                let page = read_blocking(exec, d, 0, PAGE as usize)
                    .map_err(|e| Error::io(dev.name(), "read superblock", e))?;
                match Superblock::decode(page.as_slice()) {
                    Ok(sb) => match Role::from_byte(sb.role) {
                        Some(r) if r == cfg.role || r == Role::Any || cfg.role == Role::Any => {
                            Ok(sb)
                        }
                        Some(r) => refuse(r.describe().to_string())?,
                        None => refuse(format!("a flashtier device of unknown role {}", sb.role))?,
                    },
                    Err(e) => Err(e),
                }
            }
        };
        found.push(sb);
    }
    Ok((found, blank))
}

/// A set formatted with other segment and chunk sizes than the ones chosen for its capacity
/// (`adopt_geometry`, set by `FlashConfig::for_capacity`) keeps its own, so a default that
/// changes between releases never refuses or wipes a warm cache.
fn adopt_geometry(cfg: &mut FlashConfig, found: &[SuperblockFound]) {
    let Some(Ok(sb)) = found.first() else { return };
    let size = u64::from(sb.segment_size);
    if !cfg.adopt_geometry || size == cfg.segment_size {
        return;
    }
    let chunk_size = FlashConfig::chunk_for(size);
    let adopted = FlashConfig {
        segment_size: size,
        chunk_size,
        // As many bytes in flight per stream as the default would have had.
        max_chunks_in_flight: (cfg.max_chunks_in_flight as u64 * cfg.chunk_size / chunk_size).max(1)
            as usize,
        ..cfg.clone()
    };
    if adopted.validate().is_err() {
        return;
    }
    *cfg = adopted;
}

/// Size every device for use (a file is grown to its configured length): only once the
/// engine has decided to use them all.
fn prepare(devices: &[std::sync::Arc<dyn Device>]) -> Result<()> {
    for dev in devices {
        dev.prepare()
            .map_err(|e| Error::io(dev.name(), "allocate", e))?;
    }
    Ok(())
}

/// Why a device set does not match the configuration.
#[derive(Clone, Debug)]
enum Mismatch {
    /// A device's size gives another segment count than it was formatted with.
    Resized {
        device: String,
        formatted: u64,
        requested: u64,
    },
    /// Anything else, described.
    Other(String),
}

impl Mismatch {
    fn to_error(&self) -> Error {
        match self.clone() {
            Mismatch::Resized {
                device,
                formatted,
                requested,
            } => Error::Resized {
                device,
                formatted,
                requested,
            },
            Mismatch::Other(why) => Error::Mismatch(why),
        }
    }
}

fn check(
    found: &[Result<Superblock, SuperblockError>],
    plan: &[(u32, u32)],
    devices: &[std::sync::Arc<dyn Device>],
    cfg: &FlashConfig,
) -> Option<Mismatch> {
    let other = |why: String| Some(Mismatch::Other(why));
    let first = match found.first() {
        Some(Ok(sb)) => *sb,
        Some(Err(e)) => return other(format!("device {}: superblock {e:?}", devices[0].name())),
        None => return other("no devices".into()),
    };
    for (d, f) in found.iter().enumerate() {
        let name = devices[d].name();
        let sb = match f {
            Ok(sb) => sb,
            Err(e) => return other(format!("device {name}: superblock {e:?}")),
        };
        let (n, start) = plan[d];
        let problems = [
            (
                sb.uuid != first.uuid,
                "belongs to another device set (uuid differs)".to_string(),
            ),
            (
                sb.device_count != devices.len() as u32,
                format!(
                    "was formatted in a set of {} devices, now {}",
                    sb.device_count,
                    devices.len()
                ),
            ),
            (
                sb.device_index != d as u32,
                format!("was device #{} of its set, now #{d}", sb.device_index),
            ),
            (
                u64::from(sb.segment_size) != cfg.segment_size,
                format!(
                    "has segment size {}, config says {}",
                    sb.segment_size, cfg.segment_size
                ),
            ),
            (
                d == 0 && sb.journal != journal_byte(cfg),
                if sb.journal == 0 {
                    "was formatted without the crash journal (by a flashtier before \
                     2026-11-27)"
                        .to_string()
                } else {
                    "holds a crash journal this open does not use".to_string()
                },
            ),
        ];
        if let Some((_, why)) = problems.into_iter().find(|(bad, _)| *bad) {
            return other(format!("device {name} {why}"));
        }
        if sb.segments != n {
            return Some(Mismatch::Resized {
                device: name.to_string(),
                formatted: sb.device_size,
                requested: devices[d].len(),
            });
        }
        if sb.first_segment != start {
            return other(format!(
                "device {name} starts at segment {}, the sizes before it now give {start}",
                sb.first_segment
            ));
        }
    }
    None
}

/// Superblock byte 74 for `cfg`: 1 when global segment 0 is the journal.
fn journal_byte(cfg: &FlashConfig) -> u8 {
    u8::from(cfg.journal != JournalMode::Off)
}

/// What a segment yielded.
struct Found {
    entries: Vec<SummaryEntry>,
    data_end: u32,
    sealed: bool,
}

/// Rebuild the segment table and report records. Called once from `Flash::open`.
pub(crate) fn recover(
    inner: &Inner,
    formatted: bool,
    mut on_record: impl FnMut(RecordMeta),
) -> Result<()> {
    let t0 = Instant::now();
    let exec = inner.exec.as_ref();
    let nsegs = inner.state.lock().segs.len();
    let mut headers: Vec<(u64, u32, u8)> = Vec::new(); // (seq, seg, stream)
    let mut losses = Losses::default();
    // Segments that could not be read: neither recovered nor reused this run.
    let mut retired = vec![false; nsegs];
    if !formatted {
        let places: Vec<(usize, u64)> = {
            let state = inner.state.lock();
            state.segs.iter().map(|s| (s.dev, s.dev_off)).collect()
        };
        let journal_seg =
            inner.state.lock().segs.first().map(|s| s.state) == Some(SegState::Journal);
        for (batch_start, batch) in places.chunks(64).enumerate().map(|(i, b)| (i * 64, b)) {
            let ops = batch
                .iter()
                .map(|&(dev, off)| IoOp::Read {
                    dev,
                    off,
                    buf: AlignedBuf::zeroed(PAGE as usize),
                })
                .collect();
            for (i, r) in run_batch(exec, ops).into_iter().enumerate() {
                let seg = (batch_start + i) as u32;
                if seg == 0 && journal_seg {
                    continue;
                }
                let dev = inner.dev_name(batch[i].0);
                let buf = match r {
                    Ok(Some(b)) => b,
                    Ok(None) => continue,
                    Err(e) => {
                        losses.unreadable(inner, seg, dev, &format!("header read failed: {e}"));
                        retired[seg as usize] = true;
                        continue;
                    }
                };
                FlashStats::add(&inner.stats.device_bytes_read, PAGE);
                match SegmentHeader::decode(buf.as_slice()) {
                    Some(h) if h.uuid == inner.uuid && h.segment == seg => {
                        headers.push((h.seq, seg, h.stream));
                    }
                    // Another device set's header (before a reformat): free.
                    Some(_) => {}
                    None if all_zero(&buf.as_slice()[..SEGMENT_HEADER_LEN]) => {}
                    None => losses.unreadable(
                        inner,
                        seg,
                        dev,
                        "header page is neither a segment header nor zero (overwritten?)",
                    ),
                }
            }
        }
    }
    headers.sort_unstable();
    let mut max_seq = 0;
    let mut live = vec![false; nsegs];
    // Windows of 64 segments bound the summaries held in RAM at once.
    for window in headers.chunks(64) {
        let found = read_segments(inner, window, &mut losses);
        for (&(seq, seg, stream), found) in window.iter().zip(found) {
            max_seq = max_seq.max(seq);
            let Some(found) = found else {
                retired[seg as usize] = true;
                continue;
            };
            if found.entries.is_empty() {
                continue;
            }
            live[seg as usize] = true;
            FlashStats::add(&inner.stats.recovered_segments, 1);
            let mut state = inner.state.lock();
            let info = &mut state.segs[seg as usize];
            info.reset(&inner.uuid, seq, stream);
            info.state = SegState::Sealed;
            info.has_summary = found.sealed;
            info.data_end = found.data_end;
            for e in &found.entries {
                info.add_record(u64::from(e.len).div_ceil(16) * 16, e.exptime);
            }
            drop(state);
            for e in &found.entries {
                let Ok(meta) = inner.record_meta(seg, e, seq) else {
                    continue;
                };
                FlashStats::add(&inner.stats.recovered_records, 1);
                on_record(meta);
            }
        }
    }
    let mut state = inner.state.lock();
    state.next_seq = max_seq + 1;
    state.next_order = order_recovered(&mut state.segs, max_seq);
    for (i, is_live) in live.iter().enumerate() {
        if state.segs[i].state == SegState::Journal {
            continue;
        }
        if retired[i] {
            state.segs[i].state = SegState::Failed;
        } else if !is_live {
            let dev = state.segs[i].dev;
            state.free.push(dev, i as u32);
        }
    }
    losses.summary();
    inner.update_gauges(&state);
    FlashStats::set(
        &inner.stats.recovery_time_us,
        t0.elapsed().as_micros() as u64,
    );
    Ok(())
}

/// Losses found by recovery: counted in the engine stats, logged one line per segment up
/// to [`LOG_EACH`], then summed up in one line at the end.
#[derive(Default)]
struct Losses {
    logged: u64,
    unlogged: u64,
}

impl Losses {
    fn log(&mut self, line: String) {
        if self.logged < LOG_EACH {
            self.logged += 1;
            log::warn!("{line}");
        } else {
            self.unlogged += 1;
        }
    }

    /// A segment whose header could not be read or is damaged: whatever it held is lost.
    fn unreadable(&mut self, inner: &Inner, seg: u32, dev: &str, why: &str) {
        FlashStats::add(&inner.stats.recovery_unreadable_headers, 1);
        self.log(format!(
            "flash recovery: segment {seg} on {dev}: {why}; the records it held (if any) are \
             lost"
        ));
    }

    /// A segment recovered only in part (or not at all): corrupt summary, torn or damaged
    /// records, or a read that failed.
    fn damaged(&mut self, inner: &Inner, seg: u32, dev: &str, why: &str) {
        FlashStats::add(&inner.stats.recovery_damaged_segments, 1);
        self.log(format!("flash recovery: segment {seg} on {dev}: {why}"));
    }

    fn summary(&self) {
        if self.unlogged > 0 {
            log::warn!(
                "flash recovery: {} more damaged or unreadable segments (see \
                 flash_recovery_damaged_segments, flash_recovery_unreadable_headers)",
                self.unlogged
            );
        }
    }
}

/// Read the records of every segment in `headers` (seq order): from their summaries if
/// sealed (and full scan is off), else by scanning. IO is issued in batches so the device
/// sees many reads in flight: footers, then summaries, then segments to scan. `None` for a
/// segment that could not be read at all (logged, counted; the caller retires it).
// Longer than clippy.toml's 120 lines; left as is by issue 29 (cache crate only).
#[allow(clippy::too_many_lines)]
fn read_segments(
    inner: &Inner,
    headers: &[(u64, u32, u8)],
    losses: &mut Losses,
) -> Vec<Option<Found>> {
    let exec = inner.exec.as_ref();
    let seg_size = inner.seg_size;
    let place = |seg: u32| {
        let state = inner.state.lock();
        (
            state.segs[seg as usize].dev,
            state.segs[seg as usize].dev_off,
        )
    };
    let seeds: Vec<u32> = headers
        .iter()
        .map(|h| segment_seed(&inner.uuid, h.0))
        .collect();
    let mut found: Vec<Option<Found>> = headers.iter().map(|_| None).collect();
    // For each index `i` of `batch`, read the `(offset, length)` that `at(i)` names within
    // segment `headers[i].1`, all in one batch; results in `batch` order.
    let read = |batch: &[usize], at: &dyn Fn(usize) -> (u64, u64)| {
        let ops = batch
            .iter()
            .map(|&i| {
                let (dev, off) = place(headers[i].1);
                let (rel, len) = at(i);
                IoOp::Read {
                    dev,
                    off: off + rel,
                    buf: AlignedBuf::zeroed(len as usize),
                }
            })
            .collect();
        run_batch(exec, ops)
    };
    let dev_of = |seg: u32| inner.dev_name(place(seg).0).to_string();
    let mut unreadable = vec![false; headers.len()];
    if !inner.cfg.recovery_full_scan {
        let mut footers: Vec<Option<Footer>> = vec![None; headers.len()];
        let idx: Vec<usize> = (0..headers.len()).collect();
        for batch in idx.chunks(64) {
            let footers_read = read(batch, &|_| (seg_size - PAGE, PAGE));
            for (&i, r) in batch.iter().zip(footers_read) {
                // A footer that cannot be read: scan the segment instead.
                let Ok(Some(buf)) = r else { continue };
                FlashStats::add(&inner.stats.device_bytes_read, PAGE);
                let fbuf = &buf.as_slice()[PAGE as usize - FOOTER_LEN..];
                footers[i] = Footer::decode(fbuf, seeds[i]).filter(|f| {
                    f.seq == headers[i].0
                        && u64::from(f.summary_offset).is_multiple_of(PAGE)
                        && u64::from(f.summary_offset) < seg_size
                        && f.data_end <= f.summary_offset
                });
            }
        }
        let sealed: Vec<usize> = (0..headers.len())
            .filter(|&i| footers[i].is_some())
            .collect();
        for batch in sealed.chunks(32) {
            // Every index in `sealed` has a footer.
            let summary_at = |i: usize| {
                let so = footers[i].map_or(0, |f| u64::from(f.summary_offset));
                (so, seg_size - so)
            };
            for (&i, r) in batch.iter().zip(read(batch, &summary_at)) {
                // A summary that cannot be read: scan the segment instead.
                let (Ok(Some(buf)), Some(f)) = (r, footers[i]) else {
                    continue;
                };
                FlashStats::add(&inner.stats.device_bytes_read, buf.len() as u64);
                match decode_summary(buf.as_slice(), &f, seeds[i]) {
                    Some(entries) => {
                        found[i] = Some(Found {
                            entries,
                            data_end: f.data_end,
                            sealed: true,
                        })
                    }
                    None => {
                        // Not a loss yet: the scan below finds what verifies.
                        FlashStats::add(&inner.stats.checksum_failures, 1);
                        log::warn!(
                            "flash recovery: segment {} on {}: summary corrupt; scanning its \
                             records instead",
                            headers[i].1,
                            dev_of(headers[i].1)
                        );
                    }
                }
            }
        }
    }
    let to_scan: Vec<usize> = (0..headers.len()).filter(|&i| found[i].is_none()).collect();
    for batch in to_scan.chunks(4) {
        for (&i, r) in batch.iter().zip(read(batch, &|_| (0, seg_size))) {
            let seg = headers[i].1;
            let buf = match r {
                Ok(Some(b)) => b,
                Ok(None) => continue,
                Err(e) => {
                    FlashStats::add(&inner.stats.read_errors, 1);
                    losses.damaged(
                        inner,
                        seg,
                        &dev_of(seg),
                        &format!("cannot be read ({e}): retired, the records it held are lost"),
                    );
                    unreadable[i] = true;
                    continue;
                }
            };
            FlashStats::add(&inner.stats.device_bytes_read, seg_size);
            let (entries, data_end, damaged) = scan(buf.as_slice(), seeds[i]);
            if damaged {
                FlashStats::add(&inner.stats.checksum_failures, 1);
                losses.damaged(
                    inner,
                    seg,
                    &dev_of(seg),
                    &format!(
                        "a record does not verify after {} good ones (torn or damaged); the \
                         records past it are lost",
                        entries.len()
                    ),
                );
            }
            found[i] = Some(Found {
                entries,
                data_end,
                sealed: false,
            });
        }
    }
    found
        .into_iter()
        .zip(unreadable)
        .map(|(f, bad)| {
            (!bad).then(|| {
                f.unwrap_or(Found {
                    entries: Vec::new(),
                    data_end: 0,
                    sealed: false,
                })
            })
        })
        .collect()
}

/// Parse records from the start of a segment image until the first that does not verify.
/// Returns the entries, the page-aligned end of the last record, and whether the scan ended
/// inside a page (a torn or corrupt record rather than the end of what was written).
pub(crate) fn scan(seg: &[u8], seed: u32) -> (Vec<SummaryEntry>, u32, bool) {
    let mut entries = Vec::new();
    let mut off = SEGMENT_HEADER_LEN;
    let mut end = 0usize;
    let page = PAGE as usize;
    let damaged = loop {
        let Some(rest) = seg.get(off..) else {
            break false;
        };
        if rest.is_empty() {
            break false;
        }
        match record::decode(rest, seed) {
            Ok(h) => {
                entries.push(SummaryEntry {
                    key_id: h.key_id,
                    version: h.version,
                    offset: off as u32,
                    len: h.unpadded_len() as u32,
                    exptime: h.exptime,
                    flags: h.flags,
                    kind: h.kind,
                });
                off += h.padded_len();
                end = off;
            }
            Err(DecodeError::Padding) if !off.is_multiple_of(page) => {
                off = off.div_ceil(page) * page
            }
            Err(DecodeError::Padding) => break false,
            Err(_) => break !off.is_multiple_of(page),
        }
    };
    (entries, (end.div_ceil(page) * page) as u32, damaged)
}

/// Reclaim's age order for recovered segments (see `SegInfo::order`; seal times are not on
/// flash): each stream's newest segment — the one it was filling at shutdown, holding its
/// latest records however long ago it was opened — ranks above every other, in seq order;
/// the rest keep their seq. Returns the next stamp to hand out.
fn order_recovered(segs: &mut [SegInfo], max_seq: u64) -> u64 {
    let mut tails: Vec<(u64, usize)> = Vec::new();
    for (i, s) in segs.iter().enumerate() {
        if s.state != SegState::Sealed {
            continue;
        }
        match tails.iter_mut().find(|t| segs[t.1].stream == s.stream) {
            Some(t) if t.0 < s.seq => *t = (s.seq, i),
            Some(_) => {}
            None => tails.push((s.seq, i)),
        }
    }
    tails.sort_unstable();
    let mut next = max_seq + 1;
    for (_, i) in tails {
        segs[i].order = next;
        next += 1;
    }
    next
}

#[cfg(test)]
#[path = "recovery_tests.rs"]
mod tests;
