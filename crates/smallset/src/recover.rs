//! Surviving restarts without lying: what an open makes of the superblock (`superblock`),
//! the dirty map (`dirty`) and the set pages, and what a clean close and a `flush_all` write.
//!
//! The rule — a page is served after a restart only if no staged change of its set can have
//! been lost:
//! - **clean stop** (superblock `clean`: everything staged merged, pages synced): every page
//!   of the recorded generation is kept;
//! - **killed** (superblock `open`, same boot id): the dirty map survived in the page cache,
//!   and the superblock's log window `[tail, head)` says which log pages to replay
//!   (`logscan`). The sets the map marks dirty are emptied, and so is, if a page of the window
//!   is lost, every set whose page's watermark (`format`) is not past the newest lost one —
//!   written as empty pages whose watermark is the log's head, then marked clean; every other
//!   page is kept, and each log object at or past its set's watermark goes back on its set's
//!   chain, oldest first. A set is marked dirty before its first staged change is visible,
//!   and clean only once nothing is staged for it and what was is in the log (its pages
//!   written, the head recorded: `record_log`) or on its page;
//! - **anything else** (another boot — a power cut may have lost dirty marks —, an unknown
//!   boot id, a map write that failed, a resized file, a damaged superblock): a fresh
//!   generation, every page of the run before reads as empty.
//!
//! The generation and the delayed `flush_all` time are written to the superblock before a
//! `flush_all` returns (with an empty log window), so a kill never brings back what it
//! flushed. The log's tail and head are written after each append (before its sets' dirty
//! marks are cleared) and each merge of the log's oldest pages (before their slots are
//! reused); docs/format.md, "The log across a kill", gives the whole rule and why it holds. An adopting open
//! rebuilds each set's filter from its page (a remove must see every key on flash). A fresh
//! open writes its superblock before it zeroes the old map (a kill between the two must not
//! leave the old generation with a clean map).
//!
//! # Threads
//! `open_device`, `adopt` and `begin` run in the opening thread before the tier is shared;
//! the rest on any caller, serialized by `Inner::header`, which is never held together with a
//! staging partition (`sets`, "Threads").
use std::collections::HashMap;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};

use flashtier_flash::io::AlignedBuf;
use flashtier_flash::Device;

use crate::format::{self, Layout, Page, SET_BYTES};
use crate::inner::{key_hash, Inner};
use crate::klog::KLog;
use crate::logscan::Scan;
use crate::stats::Counters;
use crate::summary::filter_of;
use crate::superblock::{self, Found, State, Superblock};
use crate::Error;

/// Set pages read per device read while scanning (256 KiB).
const SCAN_PAGES: u32 = 64;

/// What an open found: whether it kept pages of the run before, and what the cache needs
/// from that run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// True when the last stop was clean (stat `small_restart_clean`).
    pub clean: bool,
    /// True when pages of the run before were kept (a clean stop, or a kill on this boot).
    pub kept: bool,
    /// Entries found on the kept pages (stat `small_recovered_items`).
    pub items: u64,
    /// Sets emptied because the run before had staged changes for them when it was killed
    /// (stat `small_recovered_dirty_sets`).
    pub dirty_sets: u64,
    /// The largest CAS value the run before may have handed out, as far as the device knows:
    /// the superblock's CAS ceiling (any run, any stop; `superblock`), its clean-stop CAS
    /// and, when pages were kept, the largest CAS on them. New CAS values must continue
    /// above it. 0 on a blank or unreadable device.
    pub last_cas: u64,
    /// The delayed `flush_all` the run before recorded, if any (kept pages only).
    pub flush_at: Option<u32>,
    /// Log objects of the run before put back in the log's index: kept through a kill
    /// (stat `small_recovered_log_items`; puts and deletes).
    pub log_items: u64,
    /// Log pages of the run before replayed (stat `small_recovered_log_pages`).
    pub log_pages: u64,
    /// Log pages of the recorded window that were missing, torn or unreadable (stat
    /// `small_recovered_log_lost_pages`; every set not merged since was emptied).
    pub log_lost_pages: u64,
}

/// What the superblock says, as this process last wrote it.
#[derive(Debug, Default)]
pub(crate) struct HeaderState {
    /// The superblock on the device says clean.
    pub clean: bool,
    /// A change came after close: the superblock says open again.
    pub reopened: bool,
    /// The delayed `flush_all` time recorded.
    pub flush_at: Option<u32>,
    /// The dirty map cannot be trusted (a write failed): the boot id is written as zeros,
    /// so the next open after a kill starts fresh.
    pub distrusted: bool,
    /// The CAS ceiling recorded (`reserve_cas`): no CAS value above it was handed out.
    pub cas_ceiling: u64,
    /// The CAS value a clean close recorded (kept when the ceiling is rewritten after it).
    pub last_cas: u64,
}

/// The superblock's decision at open.
pub(crate) struct Opening {
    pub generation: u64,
    /// The superblock whose pages are kept, if any.
    pub adopted: Option<Superblock>,
    /// The machine's boot id now.
    pub boot_id: [u8; 16],
    /// The largest CAS value any run before may have handed out (the superblock's ceiling
    /// and clean-stop CAS, if it could be read; else 0), kept pages or not.
    pub cas_floor: u64,
}

/// Read page 0 of `dev`: refuse foreign data, keep the pages of a clean stop or of a kill on
/// this boot (same layout), else pick a fresh generation. Writes nothing.
pub(crate) fn open_device(dev: &dyn Device, layout: &Layout) -> Result<Opening, Error> {
    let mut page = AlignedBuf::zeroed(SET_BYTES);
    dev.read_at(page.as_mut_slice(), 0)?;
    let boot_id = flashtier_flash::journal::boot_id();
    let fresh = |after: u64, why: Option<&str>| {
        if let Some(why) = why {
            log::warn!("small tier {}: {why}; starting empty", dev.name());
        }
        Opening {
            generation: fresh_generation().max(after.saturating_add(2) | 1),
            adopted: None,
            boot_id,
            cas_floor: 0,
        }
    };
    let opening = match superblock::decode(page.as_slice()) {
        Found::Foreign => {
            return Err(Error::Device(format!(
                "{} holds data that is not a small-object tier; refusing to overwrite it",
                dev.name()
            )))
        }
        Found::Blank => fresh(0, None),
        Found::OursUnknown(why) => fresh(0, Some(why)),
        Found::Ours(sb)
            if sb.sets != layout.sets
                || sb.map_pages != layout.map_pages
                || sb.log_pages != layout.log_pages =>
        {
            fresh(sb.generation, Some("the file was resized"))
        }
        Found::Ours(sb) if sb.state == State::Clean => Opening {
            generation: sb.generation,
            adopted: Some(sb),
            boot_id,
            cas_floor: 0,
        },
        Found::Ours(sb) if sb.boot_id == boot_id && boot_id != [0; 16] => {
            log::warn!(
                "small tier {}: the last run was killed; keeping the sets it had nothing \
                 staged for",
                dev.name()
            );
            Opening {
                generation: sb.generation,
                adopted: Some(sb),
                boot_id,
                cas_floor: 0,
            }
        }
        Found::Ours(sb) => fresh(
            sb.generation,
            Some("the last run did not stop cleanly on this boot (or its dirty map failed)"),
        ),
    };
    // CAS values continue above what any run before may have handed out, pages kept or not:
    // a client may still hold one.
    let cas_floor = match superblock::decode(page.as_slice()) {
        Found::Ours(sb) => sb.cas_ceiling.max(sb.last_cas),
        _ => 0,
    };
    Ok(Opening {
        cas_floor,
        ..opening
    })
}

/// A generation no earlier run used (nanoseconds since the epoch, odd).
fn fresh_generation() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    t | 1
}

/// Keep the pages of `sb`'s run: read the dirty map, scan the log's recorded window
/// (`logscan`), read every set page (filters, item gauges, largest CAS, watermarks), empty
/// the sets that cannot be trusted — dirty ones, and with a lost log page every set whose
/// watermark is not past it — by writing them as empty pages whose watermark is the log's
/// head (so none of their log objects is replayed by a later open either), then clear their
/// marks and put the log's other objects back on their sets' chains, oldest first. Pages
/// that fail their checks read as empty (counted).
pub(crate) fn adopt(inner: &Inner, sb: &Superblock) -> Result<Recovered, Error> {
    let generation = inner.generation.load(Relaxed);
    let layout = &inner.layout;
    let mut out = Recovered {
        clean: sb.state == State::Clean,
        kept: true,
        last_cas: sb.last_cas.max(sb.cas_ceiling),
        flush_at: sb.flush_at,
        ..Recovered::default()
    };
    // The dirty map, read through the path it was written through; 1 = empty the set.
    let mut map = vec![0u8; inner.sets as usize];
    inner.dev.journal_read(&mut map, layout.map_off())?;
    let dirty: Vec<u32> = (0..inner.sets)
        .filter(|&s| map.get(s as usize).is_some_and(|&b| b != 0))
        .collect();
    let (tail, head) = match &inner.klog {
        Some(_) => (sb.log_tail, sb.log_head),
        None => (0, 0),
    };
    let scan = scan_log(inner, tail, head, generation)?;
    let lost = scan.newest_lost();
    if let Some(h) = lost {
        log::warn!(
            "small tier {}: {} log pages of the last run are lost (newest {h}); emptying every \
             set not merged since",
            inner.dev_name,
            scan.lost.len()
        );
    }
    // Watermarks of the sets the log has objects of (kept sets only).
    let mut marks: HashMap<u32, u64> = scan
        .pages
        .iter()
        .flat_map(|p| p.objs.iter().map(|o| (o.set, 0)))
        .collect();
    let (mut items, mut used) = (0u64, 0u64);
    let mut first = 0u32;
    while first < inner.sets {
        let n = SCAN_PAGES.min(inner.sets - first);
        let mut buf = AlignedBuf::zeroed(n as usize * SET_BYTES);
        inner
            .dev
            .read_at(buf.as_mut_slice(), layout.page_off(first))?;
        let bytes = buf.into_bytes();
        for i in 0..n {
            let set = first + i;
            let at = i as usize * SET_BYTES;
            let page = bytes.slice(at..at + SET_BYTES);
            let (entries, mark, corrupt) = match format::decode(&page, set, generation) {
                Page::Valid(es) => (es, format::mark_of(&page), false),
                Page::Empty => (Vec::new(), 0, false),
                Page::Corrupt(why) => {
                    inner.counters.corrupt_pages.fetch_add(1, Relaxed);
                    log::warn!("small tier: set {set} corrupt at open ({why}); emptied");
                    (Vec::new(), 0, true)
                }
            };
            let Some(flag) = map.get_mut(set as usize) else {
                continue;
            };
            // A damaged page's watermark is unknown: replaying its log objects could bring
            // back one its page had since replaced or evicted, so the set is emptied.
            if corrupt {
                *flag = 1;
            }
            if *flag == 0 && lost.is_some_and(|h| mark <= h) {
                *flag = 1;
            }
            if *flag != 0 {
                continue;
            }
            if let Some(m) = marks.get_mut(&set) {
                *m = mark;
            }
            if entries.is_empty() {
                continue;
            }
            items += entries.len() as u64;
            used += 1;
            for e in &entries {
                out.last_cas = out.last_cas.max(e.meta.cas);
            }
            inner
                .summaries
                .store(set, filter_of(entries.iter().map(|e| key_hash(&e.key))));
        }
        first += n;
    }
    // Empty the untrusted sets: an empty page whose watermark is the log's head.
    let mut empty = AlignedBuf::zeroed(SET_BYTES);
    for set in (0..inner.sets).filter(|&s| map.get(s as usize).is_some_and(|&b| b != 0)) {
        format::encode(empty.as_mut_slice(), set, generation, head, &[])
            .map_err(|why| Error::Device(format!("an empty set page: {why}")))?;
        inner.dev.write_at(empty.as_slice(), layout.page_off(set))?;
        out.dirty_sets += 1;
    }
    if out.dirty_sets > 0 {
        inner.dev.sync()?;
        for &set in &dirty {
            inner
                .dev
                .journal_write(&[0], layout.map_off() + u64::from(set))?;
        }
    }
    if let Some(log) = &inner.klog {
        out.log_items = replay(inner, log, &scan, &map, &marks);
        log.restore(tail, head);
        out.log_pages = scan.pages.len() as u64;
        out.log_lost_pages = scan.lost.len() as u64;
    }
    inner.counters.items.store(items, Relaxed);
    inner.counters.sets_used.store(used, Relaxed);
    out.items = items;
    Ok(out)
}

/// Put the scanned log's objects back on their sets' chains, oldest page first (so the
/// newest ends up first): those of sets not emptied (`map` 0) at or past their set's
/// watermark (`marks`). Returns the objects indexed.
fn replay(inner: &Inner, log: &KLog, scan: &Scan, map: &[u8], marks: &HashMap<u32, u64>) -> u64 {
    let mut n = 0;
    for p in &scan.pages {
        for (pos, o) in p.objs.iter().enumerate() {
            let emptied = map.get(o.set as usize).is_none_or(|&b| b != 0);
            if emptied || p.seq < marks.get(&o.set).copied().unwrap_or(u64::MAX) {
                continue;
            }
            let tag = log.index.tag_of(o.hash);
            let present = match log.index.refs(o.set).find(|r| r.tag == tag) {
                Some(r) => !r.delete,
                None => inner.summaries.may_hold(o.set, o.hash),
            };
            let delta = match (o.delete, present) {
                (false, false) => 1,
                (true, true) => -1,
                _ => 0,
            };
            log.index
                .push(o.set, p.slot, pos as u32, tag, o.delete, delta);
            n += 1;
        }
    }
    n
}

/// Read the log's window `[tail, head)` in runs of consecutive slots and scan it.
fn scan_log(inner: &Inner, tail: u64, head: u64, generation: u64) -> Result<Scan, Error> {
    let mut scan = Scan::default();
    let Some(log) = &inner.klog else {
        return Ok(scan);
    };
    let pages = u64::from(log.pages);
    let mut seq = tail;
    while seq < head {
        let slot = (seq % pages) as u32;
        let n = (head - seq)
            .min(pages - u64::from(slot))
            .min(u64::from(SCAN_PAGES));
        let mut buf = AlignedBuf::zeroed(n as usize * SET_BYTES);
        let read = inner
            .dev
            .read_at(buf.as_mut_slice(), inner.layout.log_off(slot));
        if let Err(e) = &read {
            log::warn!("small tier: reading log pages at open failed ({e})");
        }
        let bytes = buf.into_bytes();
        for i in 0..n {
            let at = i as usize * SET_BYTES;
            let page = read.is_ok().then(|| bytes.slice(at..at + SET_BYTES));
            scan.add(seq + i, slot + i as u32, page.as_ref(), generation, |h| {
                inner.set_of(h)
            });
        }
        seq += n;
    }
    Ok(scan)
}

/// Write `sb` as the superblock; with `sync`, sync the device after (pages written before
/// included).
fn write(inner: &Inner, sb: &Superblock, sync: bool) -> Result<(), Error> {
    let page = superblock::encode(sb);
    let mut buf = AlignedBuf::zeroed(SET_BYTES);
    buf.as_mut_slice().copy_from_slice(&page);
    inner.dev.write_at(buf.as_slice(), 0)?;
    if let Some(l) = &inner.klog {
        l.note_recorded(sb.log_head);
    }
    if sync {
        inner.dev.sync()?;
    }
    Ok(())
}

/// The superblock of this run while it is in use.
fn open_block(inner: &Inner, h: &HeaderState) -> Superblock {
    Superblock {
        state: State::Open,
        sets: inner.sets,
        generation: inner.generation.load(Relaxed),
        last_cas: 0,
        flush_at: h.flush_at,
        map_pages: inner.layout.map_pages,
        log_pages: inner.layout.log_pages,
        boot_id: if h.distrusted { [0; 16] } else { inner.boot_id },
        cas_ceiling: h.cas_ceiling,
        log_tail: inner.klog.as_ref().map_or(0, |l| l.tail()),
        log_head: inner.klog.as_ref().map_or(0, |l| l.head()),
    }
}

/// The superblock as the tier stands: clean (with the last CAS) if it was closed cleanly and
/// nothing changed since, else open.
fn current_block(inner: &Inner, h: &HeaderState) -> Superblock {
    if h.clean {
        Superblock {
            state: State::Clean,
            last_cas: h.last_cas,
            ..open_block(inner, h)
        }
    } else {
        open_block(inner, h)
    }
}

/// Record the log's tail and head in the superblock (a plain write, no sync: it survives a
/// kill; a power cut starts fresh anyway). After an append, before its sets' dirty marks are
/// cleared; after a merge of the tail, before its slots are reused. False when the write
/// failed (the caller then leaves the marks: a kill empties those sets).
pub(crate) fn record_log(inner: &Inner) -> bool {
    let mut h = inner.header.lock();
    let sb = current_block(inner, &h);
    match write(inner, &sb, false) {
        Ok(()) => {
            Counters::add(&inner.counters.log_records, 1);
            Counters::add(&inner.counters.bytes_written, SET_BYTES as u64);
            true
        }
        Err(e) => {
            Counters::add(&inner.counters.io_errors, 1);
            // The appended sets stay dirty and later watermarks stay at the recorded head;
            // a later record that lands would make the window cover pages merged past
            // meanwhile, so from now on the superblock vouches for nothing after a kill.
            h.distrusted = true;
            log::error!(
                "small tier {}: the log's head could not be recorded ({e}); its sets stay \
                 dirty and a kill restarts the tier empty",
                inner.dev_name
            );
            false
        }
    }
}

/// Mark the device in use (at open, before any change is accepted): the superblock first,
/// then, for a fresh generation, a clean map (a kill between the two leaves the new
/// generation with stale dirty marks, which only empty sets already empty).
pub(crate) fn begin(
    inner: &Inner,
    fresh: bool,
    flush_at: Option<u32>,
    cas_floor: u64,
) -> Result<(), Error> {
    let mut h = inner.header.lock();
    h.flush_at = flush_at;
    h.cas_ceiling = cas_floor;
    write(inner, &open_block(inner, &h), true)?;
    if fresh {
        let zero = AlignedBuf::zeroed(inner.layout.map_pages as usize * SET_BYTES);
        inner
            .dev
            .write_at(zero.as_slice(), inner.layout.map_off())?;
        inner.dev.sync()?;
    }
    Ok(())
}

/// `flush_all` now: the next generation, written to the superblock before anything staged
/// is dropped (`SmallSets::clear` then drops it). Returns the new generation.
pub(crate) fn next_generation(inner: &Inner) -> u64 {
    let mut h = inner.header.lock();
    let next = inner.generation.load(Relaxed).wrapping_add(2);
    // Nothing of the old generation's log is replayed (`merging` is held: no append).
    if let Some(l) = &inner.klog {
        l.skip_to_head();
    }
    h.flush_at = None;
    h.clean = false;
    let sb = Superblock {
        generation: next,
        ..open_block(inner, &h)
    };
    if let Err(e) = write(inner, &sb, false) {
        log::error!(
            "small tier {}: flush_all could not be recorded ({e}); distrusting the device",
            inner.dev_name
        );
        h.distrusted = true;
    }
    inner.generation.store(next, Relaxed);
    next
}

/// A delayed `flush_all` to unix time `at`: recorded before it returns.
pub(crate) fn flush_later(inner: &Inner, at: u32) {
    let mut h = inner.header.lock();
    h.flush_at = Some(at);
    if h.clean {
        h.clean = false;
        h.reopened = true;
    }
    if let Err(e) = write(inner, &open_block(inner, &h), false) {
        log::error!(
            "small tier {}: a delayed flush_all could not be recorded ({e})",
            inner.dev_name
        );
    }
}

/// A clean close: merge everything staged, sync, mark clean. Fails (leaving the superblock
/// open) when a merge or a write fails. Idempotent.
pub(crate) fn close(inner: &Inner, last_cas: u64, flush_at: Option<u32>) -> Result<(), Error> {
    // SeqCst pairs with `after_change`: a change staged before this store is merged below;
    // one staged after it sees `sealed` and reopens the superblock.
    inner.sealed.store(true, SeqCst);
    crate::flusher::drain(inner);
    let mut h = inner.header.lock();
    if h.clean || h.reopened {
        return Ok(());
    }
    if !inner.staging.is_empty() {
        return Err(Error::Device(format!(
            "{}: {} staged changes could not be merged; their sets restart empty",
            inner.dev_name,
            inner.staging.len()
        )));
    }
    if let Some(l) = inner.klog.as_ref().filter(|l| l.used() > 0) {
        return Err(Error::Device(format!(
            "{}: {} log pages could not be merged; their sets restart empty",
            inner.dev_name,
            l.used()
        )));
    }
    if h.distrusted {
        return Err(Error::Device(format!(
            "{}: its dirty map or a log record failed; the next start begins empty",
            inner.dev_name
        )));
    }
    h.flush_at = flush_at;
    inner.dev.sync()?;
    write(
        inner,
        &Superblock {
            state: State::Clean,
            last_cas,
            ..open_block(inner, &h)
        },
        true,
    )?;
    h.clean = true;
    h.last_cas = last_cas;
    Ok(())
}

/// Record that CAS values up to `ceiling` may be handed out: the superblock is rewritten
/// (same state) with the new ceiling before this returns, so an open after a kill continues
/// above it. A plain write, no sync: it survives the process (a kill); a power cut that
/// loses it also restarts the tier empty. Does nothing when `ceiling` is not above the one
/// recorded.
pub(crate) fn reserve_cas(inner: &Inner, ceiling: u64) -> Result<(), Error> {
    let mut h = inner.header.lock();
    if ceiling <= h.cas_ceiling {
        return Ok(());
    }
    let old = h.cas_ceiling;
    h.cas_ceiling = ceiling;
    let sb = current_block(inner, &h);
    if let Err(e) = write(inner, &sb, false) {
        h.cas_ceiling = old;
        return Err(e);
    }
    Ok(())
}

/// Called after every change to the tier's contents: after a clean close, put the
/// superblock back to open (the dirty map then covers the change, as for any open run).
pub(crate) fn after_change(inner: &Inner) {
    if inner.sealed.load(SeqCst) {
        let mut h = inner.header.lock();
        if !h.clean {
            return;
        }
        h.clean = false;
        h.reopened = true;
        if let Err(e) = write(inner, &open_block(inner, &h), true) {
            log::error!(
                "small tier {}: a change after close could not reopen the superblock ({e}); \
                 delete the file before restarting",
                inner.dev_name
            );
        }
    }
}

/// After a dirty-map write: if one ever failed, make the superblock's boot id zeros so a
/// kill restarts empty (the map may lack a mark).
pub(crate) fn check_map(inner: &Inner) {
    if !inner.dirty.failed.load(Relaxed) {
        return;
    }
    let mut h = inner.header.lock();
    if h.distrusted {
        return;
    }
    h.distrusted = true;
    if let Err(e) = write(inner, &open_block(inner, &h), true) {
        log::error!(
            "small tier {}: could not record a failed dirty map ({e}); delete the file \
             before restarting",
            inner.dev_name
        );
    }
}
