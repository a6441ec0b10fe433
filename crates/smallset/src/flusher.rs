//! The flusher: appends staged entries to the on-flash log (`klog`, which merges its oldest
//! segment into the sets when it needs room), or, with no log, merges staged batches into set
//! pages. A batch is the sets with the most
//! staged bytes (`Staging::take_batch`); for each, one page read and one page write, all of a
//! batch's reads in flight together, then all its writes.
//!
//! The merge keeps what is read (RRIP, Kangaroo's RRIParoo): a page entry read since the
//! page was written (its hit bit) comes back as 0 (near), an unread one ages by one up to 3
//! (distant); new entries enter at 2. When the page overflows, the most distant entries go
//! first, older page entries before new ones at the same value. A staged entry shadows the
//! page's entry of its key (a newer version, or a delete that drops it), expired entries are
//! dropped.
//!
//! Order per set (why no reader sees a missing key): widen the filter with the new page's
//! keys, write, store the exact filter, then drop the merged entries from staging. A write
//! that fails keeps them staged (tried again later); the page may then read as corrupt, which
//! loses its items but never serves an old one. A set left with nothing staged is marked
//! clean in the dirty map (`dirty`), under the staging lock.
//!
//! # Threads
//! Runs on the `flashtier-small` thread (or the caller of `drain`), blocking on its own IO.
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use flashtier_flash::io::{AlignedBuf, IoOp, IoRequest};

use crate::format::{self, Entry, Page, CAPACITY, MAX_ENTRIES, RRIP_MAX, SET_BYTES};
use crate::inner::{key_hash, Inner};
use crate::staging::{Change, Staged};
use crate::stats::Counters;
use crate::summary::filter_of;

/// RRIP value new entries enter with ("long re-reference").
const RRIP_NEW: u8 = 2;

/// The flusher thread's loop: merge while staging is over its budget, until closed.
pub(crate) fn run(inner: &Arc<Inner>) {
    loop {
        {
            let mut w = inner.wake.lock();
            if !*w && !inner.closed.load(Relaxed) {
                inner.wake_cv.wait_for(&mut w, Duration::from_millis(100));
            }
            *w = false;
        }
        if inner.closed.load(Relaxed) {
            return;
        }
        let mut worked = false;
        if let Some(log) = &inner.klog {
            // Append from a few pages' worth staged, and on each tick whatever is staged.
            let mut tick = true;
            while (inner.staging.bytes() > inner.kick_at() || (tick && !inner.staging.is_empty()))
                && !inner.closed.load(Relaxed)
            {
                tick = false;
                worked = true;
                let _one_at_a_time = inner.merging.lock();
                if !crate::klog::append(inner, log) {
                    break;
                }
            }
        } else {
            // Merge down to three quarters of the budget, so batches stay large.
            let low = inner.cfg.staging_bytes / 4 * 3;
            while inner.staging.bytes() > low && !inner.closed.load(Relaxed) {
                worked = true;
                if !flush_batch(inner) {
                    break;
                }
            }
        }
        // Going idle: hand what the work freed back (the staging maps' room, then the
        // allocator's free pages: `SmallConfig::release_memory`).
        if worked {
            inner.staging.shrink();
            if let Some(release) = inner.cfg.release_memory {
                release();
            }
        }
    }
}

/// Merge everything staged, and the whole log (tests, tools, close; blocks).
pub(crate) fn drain(inner: &Inner) {
    if let Some(log) = &inner.klog {
        let _one_at_a_time = inner.merging.lock();
        crate::klog::drain(inner, log);
        return;
    }
    for _ in 0..1_000_000 {
        if inner.staging.is_empty() || !flush_batch(inner) {
            return;
        }
    }
}

/// Merge one batch; false when there was nothing to merge or the device failed.
fn flush_batch(inner: &Inner) -> bool {
    let _one_at_a_time = inner.merging.lock();
    let batch = inner.staging.take_batch(inner.cfg.batch_sets);
    if batch.is_empty() {
        return false;
    }
    let plans = batch
        .into_iter()
        .map(|(set, staged)| (set, staged, false))
        .collect();
    let (any, _) = write_sets(inner, plans, 0, |set, staged| {
        inner.staging.done_then(set, staged, || {
            inner.dirty.clear(&*inner.dev, set);
        });
    });
    any
}

/// Rewrite the pages of `plans` — `(set, changes, empty)`: each set's page merged with its
/// changes (newest per key), or emptied when `empty` — one read and one write a set, all
/// reads in flight together, then all writes; each page carries log watermark `mark`
/// (`format`; 0 without a log). `written(set, changes)` runs after a set's page is written
/// and its filter stored. Returns (any page written, every page written).
pub(crate) fn write_sets(
    inner: &Inner,
    plans: Vec<(u32, Vec<Staged>, bool)>,
    mark: u64,
    written: impl Fn(u32, &[Staged]),
) -> (bool, bool) {
    let generation = inner.generation.load(Relaxed);
    let reads = run_all(
        inner,
        plans
            .iter()
            .map(|(set, _, _)| IoOp::Read {
                dev: 0,
                off: inner.layout.page_off(*set),
                buf: inner.page_buf(SET_BYTES),
            })
            .collect(),
    );
    let now = unix_now();
    let mut all = true;
    let mut writes = Vec::with_capacity(plans.len());
    let mut bufs = Vec::with_capacity(plans.len());
    let mut done = Vec::with_capacity(plans.len());
    for ((set, staged, empty), read) in plans.into_iter().zip(reads) {
        let old = match read {
            Ok(Some(buf)) => page_entries(inner, &inner.bytes_of(buf), set, generation),
            _ => {
                Counters::add(&inner.counters.io_errors, 1);
                all = false;
                continue;
            }
        };
        let old_len = old.len();
        let kept = if empty {
            Counters::add(&inner.counters.log_lost_sets, 1);
            Vec::new()
        } else {
            merge(inner, old, inner.summaries.hits(set), &staged, now)
        };
        let mut buf = inner.page_buf(SET_BYTES);
        if let Err(why) = format::encode(buf.as_mut_slice(), set, generation, mark, &kept) {
            log::error!("small tier: set {set} could not be encoded ({why})");
            all = false;
            continue;
        }
        let filter = filter_of(kept.iter().map(|e| key_hash(&e.key)));
        inner.summaries.widen(set, filter);
        let buf = Arc::new(buf);
        bufs.push(buf.clone());
        writes.push(IoOp::Write {
            dev: 0,
            off: inner.layout.page_off(set),
            buf,
        });
        done.push((set, staged, filter, old_len, kept.len()));
    }
    let results = run_all(inner, writes);
    inner.recycle(bufs);
    let mut any = false;
    for ((set, staged, filter, old_len, new_len), r) in done.into_iter().zip(results) {
        if let Err(e) = r {
            Counters::add(&inner.counters.io_errors, 1);
            log::warn!("small tier: writing set {set} failed: {e}");
            all = false;
            continue;
        }
        any = true;
        Counters::add(&inner.counters.page_writes, 1);
        Counters::add(&inner.counters.bytes_written, SET_BYTES as u64);
        if inner.generation.load(Relaxed) == generation {
            inner.summaries.store(set, filter);
            let c = &inner.counters;
            c.items.fetch_add(new_len as u64, Relaxed);
            c.items
                .fetch_sub((old_len as u64).min(c.items.load(Relaxed)), Relaxed);
            if old_len == 0 && new_len > 0 {
                Counters::add(&c.sets_used, 1);
            } else if old_len > 0 && new_len == 0 {
                c.sets_used.fetch_sub(1, Relaxed);
            }
        }
        written(set, &staged);
        crate::recover::check_map(inner);
    }
    (any, all)
}

/// The entries of a page read back (empty if it is blank, of another generation or corrupt).
fn page_entries(inner: &Inner, page: &Bytes, set: u32, generation: u64) -> Vec<Entry> {
    match format::decode(page, set, generation) {
        Page::Valid(es) => es,
        Page::Empty => Vec::new(),
        Page::Corrupt(why) => {
            Counters::add(&inner.counters.corrupt_pages, 1);
            log::warn!("small tier: set {set} read back corrupt ({why}); its items are lost");
            Vec::new()
        }
    }
}

/// The new page of a set: its old entries (aged, or refreshed if hit) not shadowed by a
/// staged entry and not expired, plus the staged puts; the most distant evicted to fit.
pub(crate) fn merge(
    inner: &Inner,
    old: Vec<Entry>,
    hits: u32,
    staged: &[Staged],
    now: u32,
) -> Vec<Entry> {
    let live = |e: &Entry| e.meta.exptime == 0 || e.meta.exptime > now;
    // (entry, came from the old page)
    let mut all: Vec<(Entry, bool)> = Vec::with_capacity(old.len() + staged.len());
    for (i, mut e) in old.into_iter().enumerate() {
        if staged.iter().any(|s| s.key == e.key) || !live(&e) {
            continue;
        }
        e.rrip = if i < 32 && hits & (1 << i) != 0 {
            0
        } else {
            (e.rrip + 1).min(RRIP_MAX)
        };
        all.push((e, true));
    }
    for s in staged {
        if let Change::Put { value, meta } = &s.change {
            let e = Entry {
                key: s.key.clone(),
                value: value.clone(),
                meta: *meta,
                rrip: RRIP_NEW,
            };
            if live(&e) {
                all.push((e, false));
            }
        }
    }
    // Evict from the front: most distant first, old page entries before new ones.
    all.sort_by_key(|(e, old)| (std::cmp::Reverse(e.rrip), !*old));
    let mut used: usize = all
        .iter()
        .map(|(e, _)| format::entry_len(e.key.len(), e.value.len()))
        .sum();
    let mut skip = 0;
    while skip < all.len() && (used > CAPACITY || all.len() - skip > MAX_ENTRIES) {
        if let Some((e, _)) = all.get(skip) {
            used -= format::entry_len(e.key.len(), e.value.len());
        }
        skip += 1;
    }
    Counters::add(&inner.counters.evictions, skip as u64);
    all.into_iter().skip(skip).map(|(e, _)| e).collect()
}

/// Run `ops` through the executor and wait for all of them; results in order.
pub(crate) fn run_all(inner: &Inner, ops: Vec<IoOp>) -> Vec<std::io::Result<Option<AlignedBuf>>> {
    let n = ops.len();
    let (tx, rx) = std::sync::mpsc::channel();
    for (i, op) in ops.into_iter().enumerate() {
        let tx = tx.clone();
        inner.exec.submit(IoRequest {
            op,
            done: Box::new(move |r| {
                let _ = tx.send((i, r));
            }),
        });
    }
    drop(tx);
    let mut out: Vec<Option<std::io::Result<Option<AlignedBuf>>>> = (0..n).map(|_| None).collect();
    while let Ok((i, r)) = rx.recv() {
        if let Some(slot) = out.get_mut(i) {
            *slot = Some(r);
        }
    }
    out.into_iter()
        .map(|r| r.unwrap_or_else(|| Err(std::io::Error::other("executor dropped a request"))))
        .collect()
}

/// Unix time now, in seconds (expiry is judged in unix seconds, as the cache stores it).
pub(crate) fn unix_now() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32)
}
