//! Open-time layout: each device's superblock is read and checked (or the set is formatted),
//! and the segment table skeleton laid out. A blank device is formatted; foreign data or the
//! other face's device is refused unless `force_format` (see [`crate::probe`]); a set that
//! does not match the configuration is refused unless `reformat_on_mismatch` (or it predates
//! the crash journal, which a journaled open formats anew). A set formatted with other
//! segment sizes keeps them (`adopt_geometry`).
//!
//! Invariant: a format zeroes every segment header page before any superblock is written,
//! so an interrupted format leaves no superblock and is simply done again; formatting over
//! anything but a blank page is logged and counted (`flash_superblocks_lost`).
//!
//! Runs on the thread calling `Flash::open`, before the engine core exists: it knows devices,
//! the configuration and the executor only. Recovery of the segments follows (`recovery.rs`).
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::clock::now_unix;
use crate::config::FlashConfig;
use crate::error::{Error, Result};
use crate::format::superblock::{Role, Superblock, SuperblockError, SUPERBLOCK_AREA};
use crate::format::FORMAT_VERSION;
use crate::io::{read_blocking, run_batch, run_one, AlignedBuf, Device, Executor, IoOp};
use crate::journal::JournalMode;
use crate::location::PAGE;
use crate::probe::Content;
use crate::segments::{SegInfo, SegState};

/// What the open found or made: the segment table skeleton and the set's identity.
pub(crate) struct Layout {
    pub segs: Vec<SegInfo>,
    pub uuid: [u8; 16],
    pub hash_seed: u64,
    pub formatted: bool,
    /// Devices whose superblock held something other than a flashtier superblock or zeros
    /// and that were formatted anyway (what they held is lost).
    pub superblocks_lost: u64,
}

/// Check or write the superblocks; return the segment table skeleton.
pub(crate) fn open_layout(
    devices: &[Arc<dyn Device>],
    cfg: &mut FlashConfig,
    exec: &dyn Executor,
) -> Result<Layout> {
    let (found, blank_dev) = superblocks(devices, cfg, exec)?;
    let fit = fit(devices, cfg, &found)?;
    let cfg = &*cfg;
    let blank = found
        .iter()
        .all(|f| *f == Err(SuperblockError::NotFormatted));
    match (blank, &fit.mismatch) {
        (false, None) => {
            let Some(Ok(sb)) = found.first() else {
                return Err(Error::Mismatch("no superblock".into()));
            };
            prepare(devices)?;
            return Ok(Layout {
                segs: fit.segs,
                uuid: sb.uuid,
                hash_seed: sb.hash_seed,
                formatted: false,
                superblocks_lost: 0,
            });
        }
        (false, Some(why)) if !cfg.reformat_on_mismatch && !cfg.force_format && !fit.upgrade => {
            return Err(why.to_error())
        }
        _ => {}
    }
    let superblocks_lost = log_overwrites(devices, cfg, (&found, &blank_dev), &fit);
    prepare(devices)?;
    let (uuid, hash_seed) = format(devices, cfg, (&fit.segs, &fit.plan), exec)?;
    Ok(Layout {
        segs: fit.segs,
        uuid,
        hash_seed,
        formatted: true,
        superblocks_lost,
    })
}

/// How the configuration fits the superblocks found: the table laid out for the geometry
/// kept, and why the set does not match (if it does not).
struct Fit {
    segs: Vec<SegInfo>,
    plan: Plan,
    mismatch: Option<Mismatch>,
    /// The set matches but was formatted before the crash journal, which this open uses.
    upgrade: bool,
}

/// Lay out the table for the geometry the set keeps (`adopt_geometry`, or `cfg`'s when the
/// set does not match and would be formatted afresh) and check the superblocks against it.
fn fit(
    devices: &[Arc<dyn Device>],
    cfg: &mut FlashConfig,
    found: &[SuperblockFound],
) -> Result<Fit> {
    let chosen = cfg.clone();
    adopt_geometry(cfg, found);
    let (mut segs, mut plan) = lay_out(devices, cfg)?;
    let mismatch = check(found, &plan, devices, cfg);
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
            found,
            &plan,
            devices,
            &FlashConfig {
                journal: JournalMode::Off,
                ..cfg.clone()
            },
        )
        .is_none();
    Ok(Fit {
        segs,
        plan,
        mismatch,
        upgrade,
    })
}

/// Formatting over anything but a blank page loses what the device held: say so, once per
/// device. Returns the devices whose content is lost.
fn log_overwrites(
    devices: &[Arc<dyn Device>],
    cfg: &FlashConfig,
    (found, blank_dev): (&[SuperblockFound], &[bool]),
    fit: &Fit,
) -> u64 {
    let mut superblocks_lost = 0;
    for (d, dev) in devices.iter().enumerate() {
        let what = match found[d] {
            _ if blank_dev[d] => continue,
            Err(SuperblockError::NotFormatted) => "foreign data (forced)".to_string(),
            Err(e) => format!("superblock {e:?}"),
            Ok(_) if fit.upgrade => "a flash format from before the crash journal".to_string(),
            Ok(_) => match &fit.mismatch {
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
    superblocks_lost
}

/// Format the set laid out as `segs` and `plan`: a new uuid (which makes every old segment
/// header and record foreign) and hash seed, every segment header page zeroed, then the
/// superblocks written and synced. Returns the uuid and the hash seed.
fn format(
    devices: &[Arc<dyn Device>],
    cfg: &FlashConfig,
    (segs, plan): (&[SegInfo], &Plan),
    exec: &dyn Executor,
) -> Result<([u8; 16], u64)> {
    let rnd = random_bytes();
    let mut uuid = [0u8; 16];
    uuid.copy_from_slice(&rnd[..16]);
    let mut seed = [0u8; 8];
    seed.copy_from_slice(&rnd[16..]);
    let hash_seed = u64::from_le_bytes(seed);
    let created = u64::from(now_unix());
    // Zero every segment's header page first, so that later a header page is either a valid
    // header, zero (free), or damage; the superblock goes last, so an interrupted format
    // leaves no superblock and is simply done again.
    let zero = Arc::new(AlignedBuf::zeroed(PAGE as usize));
    for batch in segs.chunks(256) {
        let ops = batch
            .iter()
            .map(|s| IoOp::Write {
                dev: s.dev,
                off: s.dev_off,
                buf: Arc::clone(&zero),
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
            segment_size: cfg.segment_size as u32,
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
            buf: Arc::new(buf),
        });
    }
    for (d, r) in run_batch(exec, ops).into_iter().enumerate() {
        r.map_err(|e| Error::io(devices[d].name(), "write superblock", e))?;
        run_one(exec, IoOp::Sync { dev: d })
            .map_err(|e| Error::io(devices[d].name(), "sync", e))?;
    }
    Ok((uuid, hash_seed))
}

/// Per device: its segment count and the global index of its first segment.
type Plan = Vec<(u32, u32)>;

/// The segment table skeleton for `cfg`'s segment size, and the [`Plan`] it follows.
fn lay_out(devices: &[Arc<dyn Device>], cfg: &FlashConfig) -> Result<(Vec<SegInfo>, Plan)> {
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
    devices: &[Arc<dyn Device>],
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
fn prepare(devices: &[Arc<dyn Device>]) -> Result<()> {
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
    devices: &[Arc<dyn Device>],
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
        let resized = sb.device_size != devices[d].len();
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
                // A size change that also changed the segment size (sizes chosen for the
                // capacity) is reported as the resize it is, below.
                u64::from(sb.segment_size) != cfg.segment_size && !resized,
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
        if sb.segments != n || (resized && u64::from(sb.segment_size) != cfg.segment_size) {
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

/// 24 random bytes for a uuid and a seed (from the kernel's CSPRNG).
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
