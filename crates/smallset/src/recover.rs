//! Surviving restarts without lying: what an open makes of the superblock (`superblock`) and
//! the set pages after it, and what a clean close writes.
//!
//! The rule: the pages are adopted only after a **clean** stop — every staged insert and
//! delete merged into its page, the pages synced, then the superblock marked clean (with the
//! generation, the cache's CAS counter and its pending delayed `flush_all`). Anything else (a
//! kill, a power cut, a failed merge, a resized file, a damaged superblock) starts a fresh
//! generation, so every page of the run before reads as empty: a staged delete or overwrite
//! lost with RAM can then never let its older page copy be served. An adopting open rebuilds
//! each set's filter from its page (a remove must see every key on flash) and writes `open`
//! durably before it accepts a change.
//!
//! After the clean mark, any change (an insert or remove a caller makes after close, a
//! `flush_all`) first puts the superblock back to `open` ([`mark_open`]), so the mark never
//! outlives what it vouches for.
//!
//! # Threads
//! `open_device` and `scan` run in the opening thread before the tier is shared; `close` and
//! `mark_open` on any caller, serialized by `Inner::header`.
use std::sync::atomic::Ordering::{Relaxed, SeqCst};

use flashtier_flash::io::AlignedBuf;
use flashtier_flash::Device;

use crate::format::{self, Page, SET_BYTES};
use crate::inner::{key_hash, Inner};
use crate::summary::filter_of;
use crate::superblock::{self, Found, State, Superblock};
use crate::Error;

/// Set pages read per device read while scanning (256 KiB).
const SCAN_PAGES: u32 = 64;

/// What an open found: whether it adopted the pages of a clean stop, and what the cache
/// needs from that stop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// True when the last stop was clean and its pages were adopted (stat
    /// `small_restart_clean`).
    pub clean: bool,
    /// Entries found on the adopted pages (stat `small_recovered_items`).
    pub items: u64,
    /// The largest CAS value the stop handed out or an adopted entry carries (new CAS
    /// values must continue above it); 0 when not clean.
    pub last_cas: u64,
    /// The delayed `flush_all` recorded at the clean stop, if any.
    pub flush_at: Option<u32>,
}

/// How the header is, as this process last wrote it.
#[derive(Debug, Default)]
pub(crate) struct HeaderState {
    /// The superblock on the device says clean.
    pub clean: bool,
    /// A change came after close: the superblock stays open for good.
    pub reopened: bool,
}

/// The superblock's decision at open: the generation to use and whether it was adopted.
pub(crate) struct Opening {
    pub generation: u64,
    pub adopted: Option<Superblock>,
}

/// Read page 0 of `dev` (which has `sets` set pages after it): refuse foreign data, adopt a
/// clean stop of the same size, else pick a fresh generation. Writes nothing.
pub(crate) fn open_device(dev: &dyn Device, sets: u32) -> Result<Opening, Error> {
    let mut page = AlignedBuf::zeroed(SET_BYTES);
    dev.read_at(page.as_mut_slice(), 0)?;
    let found = superblock::decode(page.as_slice());
    let fresh = |after: u64| fresh_generation().max(after.saturating_add(2) | 1);
    let opening = match found {
        Found::Foreign => {
            return Err(Error::Device(format!(
                "{} holds data that is not a small-object tier; refusing to overwrite it",
                dev.name()
            )))
        }
        Found::Blank => Opening {
            generation: fresh(0),
            adopted: None,
        },
        Found::OursUnknown(why) => {
            log::warn!("small tier {}: {why}; starting empty", dev.name());
            Opening {
                generation: fresh(0),
                adopted: None,
            }
        }
        Found::Ours(sb) if sb.state == State::Clean && sb.sets == sets => Opening {
            generation: sb.generation,
            adopted: Some(sb),
        },
        Found::Ours(sb) => {
            if sb.state == State::Clean {
                log::warn!(
                    "small tier {}: was {} sets, now {sets}; starting empty",
                    dev.name(),
                    sb.sets
                );
            } else {
                log::warn!(
                    "small tier {}: the last run did not stop cleanly; starting empty (its \
                     staged deletes may be lost, so none of its pages can be trusted)",
                    dev.name()
                );
            }
            Opening {
                generation: fresh(sb.generation),
                adopted: None,
            }
        }
    };
    Ok(opening)
}

/// A generation no earlier run used (nanoseconds since the epoch, odd).
fn fresh_generation() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    t | 1
}

/// Read every set page of the adopted generation: rebuild the filters and the item gauges,
/// and find the largest CAS. Pages that fail their checks read as empty (counted).
pub(crate) fn scan(inner: &Inner, sb: &Superblock) -> Result<Recovered, Error> {
    let generation = inner.generation.load(Relaxed);
    let mut out = Recovered {
        clean: true,
        items: 0,
        last_cas: sb.last_cas,
        flush_at: sb.flush_at,
    };
    let (mut items, mut used) = (0u64, 0u64);
    let mut first = 0u32;
    while first < inner.sets {
        let n = SCAN_PAGES.min(inner.sets - first);
        let mut buf = AlignedBuf::zeroed(n as usize * SET_BYTES);
        inner
            .dev
            .read_at(buf.as_mut_slice(), format::page_off(first))?;
        let bytes = buf.into_bytes();
        for i in 0..n {
            let set = first + i;
            let at = i as usize * SET_BYTES;
            let page = bytes.slice(at..at + SET_BYTES);
            let entries = match format::decode(&page, set, generation) {
                Page::Valid(es) => es,
                Page::Empty => continue,
                Page::Corrupt(why) => {
                    inner.counters.corrupt_pages.fetch_add(1, Relaxed);
                    log::warn!("small tier: set {set} corrupt at open ({why}); read as empty");
                    continue;
                }
            };
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
    inner.counters.items.store(items, Relaxed);
    inner.counters.sets_used.store(used, Relaxed);
    out.items = items;
    Ok(out)
}

/// Write the superblock for `state` and sync the device (pages written before included).
fn write(inner: &Inner, sb: &Superblock) -> Result<(), Error> {
    let page = superblock::encode(sb);
    let mut buf = AlignedBuf::zeroed(SET_BYTES);
    buf.as_mut_slice().copy_from_slice(&page);
    inner.dev.write_at(buf.as_slice(), 0)?;
    inner.dev.sync()?;
    Ok(())
}

/// The superblock of this run while it is in use.
fn open_block(inner: &Inner) -> Superblock {
    Superblock {
        state: State::Open,
        sets: inner.sets,
        generation: inner.generation.load(Relaxed),
        last_cas: 0,
        flush_at: None,
    }
}

/// Mark the device in use (at open, before any change is accepted).
pub(crate) fn begin(inner: &Inner) -> Result<(), Error> {
    let _h = inner.header.lock();
    write(inner, &open_block(inner))
}

/// A clean close: stop taking changes quietly, merge everything staged, sync, mark clean.
/// Fails (leaving the superblock open, so the next open starts fresh) when a merge or a
/// write fails. Idempotent.
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
            "{}: {} staged changes could not be merged; the next start begins empty",
            inner.dev_name,
            inner.staging.len()
        )));
    }
    inner.dev.sync()?;
    write(
        inner,
        &Superblock {
            state: State::Clean,
            last_cas,
            flush_at,
            ..open_block(inner)
        },
    )?;
    h.clean = true;
    Ok(())
}

/// Called after every change to the tier's contents: after a clean close, put the
/// superblock back to open (durably) so the next open does not trust the pages.
pub(crate) fn after_change(inner: &Inner) {
    if inner.sealed.load(SeqCst) {
        mark_open(inner);
    }
}

/// Make the superblock say open for good (a change the clean mark does not cover).
pub(crate) fn mark_open(inner: &Inner) {
    let mut h = inner.header.lock();
    if h.reopened {
        return;
    }
    h.reopened = true;
    h.clean = false;
    if let Err(e) = write(inner, &open_block(inner)) {
        // The clean mark may still be on the device: say so loudly.
        log::error!(
            "small tier {}: a change after close could not reopen the superblock ({e}); \
             delete the file before restarting",
            inner.dev_name
        );
    }
}
