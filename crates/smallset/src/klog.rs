//! The on-flash log in front of the sets (Kangaroo's KLog): what the staging buffer holds is
//! appended, packed into 4 KiB log pages written in runs, to a ring of `Layout::log_pages`
//! pages after the sets; the log's RAM index (`logindex`) says, per set, which log objects
//! are its. When the ring needs room its oldest segment is merged into the sets **grouped by
//! set**: every set with an object in the segment is rewritten once with *all* its log
//! objects (from anywhere in the log), so one 4 KiB page rewrite carries everything the log
//! gathered for the set instead of what a RAM buffer could hold.
//!
//! Why a log: a page rewrite per set carrying ~2 new objects wrote ~19 flash bytes per byte
//! stored, and the RAM buffer that gathered them refused most inserts under load; the log
//! gathers far more per set for a few bytes of RAM per object.
//!
//! Order (why no reader sees a wrong or missing value):
//! - append: write the pages, move the head and record it in the superblock
//!   (`recover::record_log`), push each object onto its set's chain, *then* drop it from
//!   staging (`Staging::done_then`) and, when nothing newer is staged for the set, clear its
//!   dirty mark (`dirty`): its changes are durable in the log now.
//! - merge of a set: read its page and its log objects, merge (newest version of a key wins;
//!   a delete drops it), widen the filter, write the page with the log's head as its
//!   watermark (`format`), store the filter, then cut the set's chain — under the set's
//!   partition lock. A slot is rewritten only after the tail passed it, which needs every set
//!   with an object in it merged; the tail is recorded in the superblock before that.
//! - a dropped merge (Kangaroo's admission threshold, `merge_min`) writes no page, so its
//!   objects stay below the page's watermark and would be replayed after a kill: the set's
//!   filter is widened with their keys, so a later remove stages a tombstone for them.
//! - a lookup copies its set's chain under the lock and reads log pages newest first: the
//!   first entry of its key decides (a delete is a miss). A page whose sequence number moved
//!   on was merged since: the set page then holds everything the copy named, so the lookup
//!   goes to the set page.
//! - a log page that cannot be read or decoded at merge time empties its sets (a lost delete
//!   must not let an older version on the page come back).
//!
//! Restarts: the log is kept. A clean close appends what is staged and merges the whole log
//! into the sets (`drain`); after a kill the open replays the recorded window `[tail, head)`
//! (`logscan`, `recover`): each object whose sequence number is at or past its set's page
//! watermark goes back on its set's chain, oldest first, so the newest wins again.

//! # Threads
//! `append`, `merge_tail` and `drain` run under `Inner::merging` (the flusher thread, or
//! `flush_staged`/close); lookups and walks on any caller.
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use bytes::Bytes;
use flashtier_flash::io::IoOp;

use crate::format::{self, Entry, Page, CAPACITY, LOG_DELETE, LOG_PUT, MAX_ENTRIES, SET_BYTES};
use crate::inner::{key_hash, Inner};
use crate::logindex::{LogIndex, LogRef};
use crate::staging::{Change, Staged};
use crate::stats::Counters;
use crate::summary::filter_of;

/// The log's ring and index.
pub(crate) struct KLog {
    /// Log pages (slots).
    pub(crate) pages: u32,
    /// The RAM index.
    pub(crate) index: LogIndex,
    /// Sequence number of the page last written to each slot (set before its objects are
    /// indexed).
    slot_seq: Vec<AtomicU64>,
    /// Next sequence number to write.
    head: AtomicU64,
    /// Oldest sequence number whose page may still hold indexed objects.
    tail: AtomicU64,
    /// The head last written to the superblock (`recover::record_log`): a merged page's
    /// watermark, so that no watermark is ever past the head an open replays up to.
    recorded: AtomicU64,
}

/// A log object located for a reader: slot, sequence number, position, tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Located {
    pub slot: u32,
    pub seq: u64,
    pub r: LogRef,
}

impl KLog {
    pub(crate) fn new(sets: u32, pages: u32, tag_bits: u32, huge: bool) -> Self {
        Self {
            pages,
            index: LogIndex::shaped(sets, pages, tag_bits, huge),
            slot_seq: (0..pages).map(|_| AtomicU64::new(u64::MAX)).collect(),
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            recorded: AtomicU64::new(0),
        }
    }

    /// Pages holding indexed objects (or not yet passed by the tail).
    pub(crate) fn used(&self) -> u64 {
        self.head.load(Relaxed) - self.tail.load(Relaxed)
    }

    fn slot(&self, seq: u64) -> u32 {
        (seq % u64::from(self.pages)) as u32
    }

    /// Pages merged at once when the ring needs room.
    fn segment(&self) -> u64 {
        u64::from((self.pages / 16).clamp(1, 1024))
    }

    /// Pages appended at most at once (room must stay for a segment).
    fn max_append(&self) -> usize {
        (self.pages / 4).clamp(1, 256) as usize
    }

    /// The set's log objects with their pages' sequence numbers, newest first (caller holds
    /// the set's partition lock).
    pub(crate) fn locate(&self, set: u32) -> Vec<Located> {
        self.index.refs(set).map(|r| self.located(r)).collect()
    }

    /// The set's log objects whose tag is `tag`, newest first (caller holds the set's
    /// partition lock): what a GET's lookup reads. Only these get their page's sequence
    /// number, and the list is built only when one matches, so a lookup whose key is not in
    /// the log (nearly every set-page hit) allocates nothing (thirteenth sitting: the whole
    /// list, built per GET, was ~8 % of a small GET's CPU).
    pub(crate) fn locate_tagged(&self, set: u32, tag: u32) -> Vec<Located> {
        self.index
            .refs(set)
            .filter(|r| r.tag == tag)
            .map(|r| self.located(r))
            .collect()
    }

    fn located(&self, r: LogRef) -> Located {
        Located {
            slot: r.slot,
            seq: self
                .slot_seq
                .get(r.slot as usize)
                .map_or(u64::MAX, |s| s.load(Relaxed)),
            r,
        }
    }

    /// The sequence number of the next page to write.
    pub(crate) fn head(&self) -> u64 {
        self.head.load(Relaxed)
    }

    /// The oldest sequence number whose page may still hold indexed objects.
    pub(crate) fn tail(&self) -> u64 {
        self.tail.load(Relaxed)
    }

    /// The head last written to the superblock.
    pub(crate) fn recorded(&self) -> u64 {
        self.recorded.load(Relaxed)
    }

    /// A superblock write carrying `head` landed (`recover::write`).
    pub(crate) fn note_recorded(&self, head: u64) {
        self.recorded.fetch_max(head, Relaxed);
    }

    /// Continue a log whose window `[tail, head)` was replayed at open (`recover`): the
    /// window's slots hold those sequence numbers (the index says which objects count).
    pub(crate) fn restore(&self, tail: u64, head: u64) {
        for seq in tail..head {
            if let Some(s) = self.slot_seq.get(self.slot(seq) as usize) {
                s.store(seq, Relaxed);
            }
        }
        self.head.store(head, Relaxed);
        self.tail.store(tail, Relaxed);
        self.recorded.store(head, Relaxed);
    }

    /// The tail jumps to the head (`flush_all`, under `merging`, before the new generation
    /// is recorded: nothing of the old one is replayed).
    pub(crate) fn skip_to_head(&self) {
        self.tail.store(self.head.load(Relaxed), Relaxed);
    }

    /// Forget everything (`flush_all`, under `merging`): the tail jumps to the head.
    pub(crate) fn clear(&self) {
        self.index.clear();
        self.tail.store(self.head.load(Relaxed), Relaxed);
    }
}

/// What a log page read back says about one located object.
pub(crate) enum LogRead {
    /// The entry is there (its key may be another's with the same tag).
    Entry(Entry),
    /// The slot holds a newer page: the set was merged since the chain was copied.
    Stale,
    /// Unreadable or damaged.
    Lost,
}

/// Read and decode the log page of `at` and pick its entry.
pub(crate) async fn read_entry(inner: &Inner, at: &Located) -> LogRead {
    let off = inner.layout.log_off(at.slot);
    Counters::add(&inner.counters.log_page_reads, 1);
    let page = match inner.read_at(off).await {
        Ok(p) => p,
        Err(_) => {
            Counters::add(&inner.counters.io_errors, 1);
            return LogRead::Lost;
        }
    };
    pick(inner, &page, at)
}

pub(crate) fn pick(inner: &Inner, page: &Bytes, at: &Located) -> LogRead {
    let generation = inner.generation.load(Relaxed);
    match format::decode_log(page, at.seq, generation) {
        Page::Valid(es) => es
            .into_iter()
            .nth(at.r.pos as usize)
            .map_or(LogRead::Lost, LogRead::Entry),
        Page::Empty => LogRead::Stale,
        Page::Corrupt(why) => {
            Counters::add(&inner.counters.corrupt_pages, 1);
            log::warn!("small tier: log slot {} read back corrupt ({why})", at.slot);
            LogRead::Lost
        }
    }
}

/// A log entry as a staged change.
pub(crate) fn change_of(e: &Entry) -> Change {
    if e.rrip == LOG_DELETE {
        Change::Delete
    } else {
        Change::Put {
            value: e.value.clone(),
            meta: e.meta,
        }
    }
}

/// Append one batch of staged entries to the log (making room first). False when nothing
/// was staged or the device failed. Caller holds `merging`.
pub(crate) fn append(inner: &Inner, log: &KLog) -> bool {
    let limit = log.max_append();
    let batch = inner
        .staging
        .take_upto(limit as u64 * CAPACITY as u64 * 3 / 4);
    if batch.is_empty() {
        return false;
    }
    // Pack: (set, staged entry) per position, pages in order.
    let mut pages: Vec<Vec<(u32, &Staged)>> = vec![Vec::new()];
    let mut used = 0usize;
    'fill: for (set, staged) in &batch {
        for s in staged {
            let len = match &s.change {
                Change::Put { value, .. } => format::entry_len(s.key.len(), value.len()),
                Change::Delete => format::entry_len(s.key.len(), 0),
            };
            let full = pages.last().is_none_or(|p| p.len() >= MAX_ENTRIES);
            if full || used + len > CAPACITY {
                if pages.len() >= limit {
                    break 'fill;
                }
                pages.push(Vec::new());
                used = 0;
            }
            used += len;
            if let Some(p) = pages.last_mut() {
                p.push((*set, s));
            }
        }
    }
    pages.retain(|p| !p.is_empty());
    let n = pages.len() as u64;
    while u64::from(log.pages) - log.used() < n {
        if !merge_tail(inner, log) {
            return false;
        }
    }
    let generation = inner.generation.load(Relaxed);
    let head = log.head.load(Relaxed);
    // One write per run of consecutive slots.
    let mut writes = Vec::new();
    let mut bufs = Vec::new();
    let mut k = 0u64;
    while k < n {
        let first = log.slot(head + k);
        let run = (n - k).min(u64::from(log.pages - first));
        let mut buf = inner.page_buf(run as usize * SET_BYTES);
        for j in 0..run {
            let seq = head + k + j;
            let entries: Vec<Entry> = pages[(k + j) as usize]
                .iter()
                .map(|(_, s)| log_entry(s))
                .collect();
            let at = j as usize * SET_BYTES;
            let dst = &mut buf.as_mut_slice()[at..at + SET_BYTES];
            if let Err(why) = format::encode_log(dst, seq, generation, &entries) {
                log::error!("small tier: a log page could not be encoded ({why})");
                return false;
            }
        }
        let buf = Arc::new(buf);
        bufs.push(buf.clone());
        writes.push(IoOp::Write {
            dev: 0,
            off: inner.layout.log_off(first),
            buf,
        });
        k += run;
    }
    let results = crate::flusher::run_all(inner, writes);
    inner.recycle(bufs);
    for r in results {
        if let Err(e) = r {
            Counters::add(&inner.counters.io_errors, 1);
            log::warn!("small tier: a log write failed: {e}");
            return false;
        }
    }
    let c = &inner.counters;
    Counters::add(&c.log_pages_written, n);
    Counters::add(&c.bytes_written, n * SET_BYTES as u64);
    Counters::add(&c.log_bytes_written, n * SET_BYTES as u64);
    for j in 0..n {
        if let Some(s) = log.slot_seq.get(log.slot(head + j) as usize) {
            s.store(head + j, Relaxed);
        }
    }
    log.head.store(head + n, Relaxed);
    // Durable for a kill before any dirty mark is cleared: the open replays up to here.
    let recorded = crate::recover::record_log(inner);
    let mut flushed: HashMap<u32, Vec<Staged>> = HashMap::new();
    for (j, page) in pages.iter().enumerate() {
        let slot = log.slot(head + j as u64);
        for (pos, (set, s)) in page.iter().enumerate() {
            let delete = matches!(s.change, Change::Delete);
            let tag = log.index.tag_of(s.hash);
            inner.staging.with_set(*set, |_| {
                // Whether the key is live before this object: its newest log object of the
                // same tag decides, else the set's filter (an estimate: tags and filters
                // can collide).
                let present = match log.index.refs(*set).find(|r| r.tag == tag) {
                    Some(r) => !r.delete,
                    None => inner.summaries.may_hold(*set, s.hash),
                };
                let delta = match (delete, present) {
                    (false, false) => 1,
                    (true, true) => -1,
                    _ => 0,
                };
                log.index.push(*set, slot, pos as u32, tag, delete, delta);
            });
            flushed.entry(*set).or_default().push((*s).clone());
        }
    }
    for (set, list) in flushed {
        // The log holds the set's changes now: clean unless something newer is staged (or
        // the head could not be recorded: then a kill must still empty it).
        inner.staging.done_then(set, &list, || {
            if recorded {
                inner.dirty.clear(&*inner.dev, set);
            }
        });
    }
    crate::recover::check_map(inner);
    true
}

fn log_entry(s: &Staged) -> Entry {
    match &s.change {
        Change::Put { value, meta } => Entry {
            key: s.key.clone(),
            value: value.clone(),
            meta: *meta,
            rrip: LOG_PUT,
        },
        Change::Delete => Entry {
            key: s.key.clone(),
            value: Bytes::new(),
            meta: format::ItemMeta::default(),
            rrip: LOG_DELETE,
        },
    }
}

/// Merge the log's oldest segment into the sets and move the tail past it. False when the
/// log is empty or the device failed (the tail stays). Caller holds `merging`.
pub(crate) fn merge_tail(inner: &Inner, log: &KLog) -> bool {
    let tail = log.tail.load(Relaxed);
    let head = log.head.load(Relaxed);
    if tail == head {
        return false;
    }
    // The segment's pages stay decoded for the whole merge: at most a quarter of the budget.
    let budget = inner.cfg.merge_pages.max(4);
    let seg = log.segment().min(budget as u64 / 4).min(head - tail);
    let seqs: Vec<u64> = (tail..tail + seg).collect();
    let slots: HashSet<u32> = seqs.iter().map(|&s| log.slot(s)).collect();
    let reads = crate::flusher::run_all(
        inner,
        seqs.iter()
            .map(|&s| IoOp::Read {
                dev: 0,
                off: inner.layout.log_off(log.slot(s)),
                buf: inner.page_buf(SET_BYTES),
            })
            .collect(),
    );
    let generation = inner.generation.load(Relaxed);
    Counters::add(&inner.counters.log_page_reads, seg);
    let mut cache: Decoded = HashMap::new();
    let mut candidates: Vec<u32> = Vec::new();
    let mut unreadable = false;
    for (&seq, r) in seqs.iter().zip(reads) {
        let slot = log.slot(seq);
        let Ok(Some(buf)) = r else {
            Counters::add(&inner.counters.io_errors, 1);
            unreadable = true;
            continue;
        };
        let page = inner.bytes_of(buf);
        match format::decode_log(&page, seq, generation) {
            Page::Valid(es) => {
                candidates.extend(es.iter().map(|e| inner.set_of(key_hash(&e.key))));
                cache.insert(slot, Some(es));
            }
            // Written but not this generation's (a flush_all since): nothing indexed.
            Page::Empty => {}
            Page::Corrupt(_) => unreadable = true,
        }
    }
    if unreadable {
        // Which sets point into the damaged pages is known only to the index.
        candidates = (0..inner.sets).collect();
    }
    candidates.sort_unstable();
    candidates.dedup();
    let sets: Vec<u32> = candidates
        .into_iter()
        .filter(|&set| {
            inner.staging.with_set(set, |_| {
                log.index.refs(set).any(|r| slots.contains(&r.slot))
            })
        })
        .collect();
    // Chunks of at most `batch_sets` sets whose log pages fit the budget beside what is
    // decoded (issue 28: kept for the whole merge they held up to every log page of the tier
    // decoded in RAM at once, 414–419 MB live at the peak of a 4M-object fill of a 1 GiB
    // tier; a fixed page cap checked only between chunks of 512 sets still let a merge hold
    // ~7k pages). Between chunks the pages from outside the segment are dropped when the next
    // chunk would not fit; a later chunk that needs one reads it again (`small_log_page_reads`).
    // A set alone needing more than the budget is merged alone.
    let seg_kept = cache.keys().filter(|s| slots.contains(s)).count();
    let mut at = 0;
    while at < sets.len() {
        // The chunk's log pages outside the segment.
        let mut outside: HashSet<u32> = HashSet::new();
        let mut end = at;
        while let Some(&set) = sets.get(end) {
            if end - at >= inner.cfg.batch_sets.max(1) {
                break;
            }
            let mut mine: Vec<u32> = inner.staging.with_set(set, |_| {
                log.index
                    .refs(set)
                    .map(|r| r.slot)
                    .filter(|s| !slots.contains(s))
                    .collect()
            });
            mine.sort_unstable();
            mine.dedup();
            let more = mine.iter().filter(|s| !outside.contains(s)).count();
            if end > at && seg_kept + outside.len() + more > budget {
                break;
            }
            outside.extend(mine);
            end += 1;
        }
        let unread = outside.iter().filter(|s| !cache.contains_key(s)).count();
        if cache.len() + unread > budget {
            cache.retain(|slot, _| slots.contains(slot));
        }
        let Some(chunk) = sets.get(at..end) else {
            break;
        };
        if !merge_sets(inner, log, chunk, &mut cache) {
            inner.counters.merge_bytes.store(0, Relaxed);
            return false;
        }
        at = end;
    }
    inner.counters.merge_bytes.store(0, Relaxed);
    Counters::add(&inner.counters.log_merges, 1);
    log.tail.store(tail + seg, Relaxed);
    // Before the slots are reused (the caller appends next): a kill after the reuse must
    // not replay them. A failed record leaves the old tail, which only replays more.
    crate::recover::record_log(inner);
    true
}

/// RAM a decoded log page holds: its buffer (the entries slice it; an `AlignedBuf` of a page
/// allocates two, to align the window) and its entry vector.
fn decoded_bytes(d: &Option<Vec<Entry>>) -> u64 {
    let entries = d.as_ref().map_or(0, |es| es.capacity());
    (2 * SET_BYTES + entries * std::mem::size_of::<Entry>()) as u64
}

/// One set's merge plan: its log objects as changes (newest per key), and whether any of
/// them was lost (then the set is emptied).
struct Plan {
    set: u32,
    changes: Vec<Staged>,
    lost: bool,
}

/// Merge `sets` (each with every log object it has) into their pages.
/// Log pages read for a merge, decoded once (`None`: unreadable, damaged or rewritten).
type Decoded = HashMap<u32, Option<Vec<Entry>>>;

fn merge_sets(inner: &Inner, log: &KLog, sets: &[u32], cache: &mut Decoded) -> bool {
    let generation = inner.generation.load(Relaxed);
    let located: Vec<(u32, Vec<Located>)> = sets
        .iter()
        .map(|&set| (set, inner.staging.with_set(set, |_| log.locate(set))))
        .collect();
    // Log pages not read yet, all in flight together.
    let mut need: Vec<u32> = located
        .iter()
        .flat_map(|(_, l)| l.iter().map(|a| a.slot))
        .filter(|s| !cache.contains_key(s))
        .collect();
    need.sort_unstable();
    need.dedup();
    let reads = crate::flusher::run_all(
        inner,
        need.iter()
            .map(|&slot| IoOp::Read {
                dev: 0,
                off: inner.layout.log_off(slot),
                buf: inner.page_buf(SET_BYTES),
            })
            .collect(),
    );
    Counters::add(&inner.counters.log_page_reads, need.len() as u64);
    for (slot, r) in need.into_iter().zip(reads) {
        let seq = log
            .slot_seq
            .get(slot as usize)
            .map_or(u64::MAX, |s| s.load(Relaxed));
        let decoded = match r {
            Ok(Some(buf)) => match format::decode_log(&inner.bytes_of(buf), seq, generation) {
                Page::Valid(es) => Some(es),
                Page::Empty => None,
                Page::Corrupt(why) => {
                    Counters::add(&inner.counters.corrupt_pages, 1);
                    log::warn!("small tier: log slot {slot} read back corrupt ({why})");
                    None
                }
            },
            _ => {
                Counters::add(&inner.counters.io_errors, 1);
                None
            }
        };
        cache.insert(slot, decoded);
    }
    let decoded: u64 = cache.values().map(decoded_bytes).sum();
    let mut plans = Vec::with_capacity(located.len());
    for (set, list) in located {
        let mut plan = Plan {
            set,
            changes: Vec::new(),
            lost: false,
        };
        // Oldest first, so a newer version of a key replaces an older one.
        for at in list.iter().rev() {
            let read = match cache.get(&at.slot) {
                Some(Some(es)) => es
                    .get(at.r.pos as usize)
                    .cloned()
                    .map_or(LogRead::Lost, LogRead::Entry),
                _ => LogRead::Lost,
            };
            let e = match read {
                LogRead::Entry(e) if inner.set_of(key_hash(&e.key)) == set => e,
                _ => {
                    plan.lost = true;
                    continue;
                }
            };
            let hash = key_hash(&e.key);
            let s = Staged {
                hash,
                key: e.key.clone(),
                change: change_of(&e),
                seq: 0,
            };
            match plan.changes.iter_mut().find(|c| c.key == e.key) {
                Some(old) => *old = s,
                None => plan.changes.push(s),
            }
        }
        plans.push(plan);
    }
    // Kangaroo's admission threshold: too few new objects for a page rewrite are dropped,
    // unless dropping could uncover an older version (a delete, a key the set may hold).
    let min = inner.cfg.merge_min;
    let mut rewrite = Vec::with_capacity(plans.len());
    for p in plans {
        let puts = p.changes.len();
        let droppable = !p.lost
            && puts < min
            && p.changes.iter().all(|c| {
                matches!(c.change, Change::Put { .. }) && !inner.summaries.may_hold(p.set, c.hash)
            });
        if droppable {
            Counters::add(&inner.counters.log_dropped, puts as u64);
            // Still in the log below the page's watermark (replayed after a kill): a later
            // remove must see them and stage a tombstone.
            inner
                .summaries
                .widen(p.set, filter_of(p.changes.iter().map(|c| c.hash)));
            taken(inner, log, p.set);
        } else {
            Counters::add(&inner.counters.log_objects_merged, puts as u64);
            rewrite.push((p.set, p.changes, p.lost));
        }
    }
    Counters::add(&inner.counters.log_sets_merged, rewrite.len() as u64);
    // Every log object of these sets below the head is on their new pages (or lost by them);
    // the watermark is the head as recorded in the superblock (equal to it unless a record
    // failed): a watermark past the recorded head would hide, after a kill, the objects the
    // next run appends from that head on.
    let mark = log.recorded();
    // The chunk's set pages: each read into a page buffer (two pages allocated), decoded
    // (about a page of entries) and encoded into a new buffer (two more).
    let set_pages = rewrite.len() as u64 * (5 * SET_BYTES) as u64;
    inner
        .counters
        .merge_holds(decoded + set_pages, cache.len() as u64);
    let (_, all) =
        crate::flusher::write_sets(inner, rewrite, mark, |set, _| taken(inner, log, set));
    all
}

/// The set's page holds its log objects (or they were dropped): cut its chain, and mark it
/// clean when nothing is staged for it either (it normally is already: the append cleared
/// it; not when the head could not be recorded then).
fn taken(inner: &Inner, log: &KLog, set: u32) {
    inner.staging.with_set(set, |staged| {
        log.index.take(set);
        if staged.is_none() {
            inner.dirty.clear(&*inner.dev, set);
        }
    });
}

/// Append everything staged and merge the whole log into the sets (tests, tools, a clean
/// close). Caller holds `merging`.
pub(crate) fn drain(inner: &Inner, log: &KLog) {
    for _ in 0..1_000_000 {
        if inner.staging.is_empty() || !append(inner, log) {
            break;
        }
    }
    for _ in 0..1_000_000 {
        if log.used() == 0 || !merge_tail(inner, log) {
            break;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use std::sync::Arc;

    use flashtier_flash::{Device, MemoryDevice};

    use super::*;
    use crate::{block_on, ItemMeta, SmallConfig, SmallSets, SmallStore};

    /// 16 sets and 8 log pages.
    fn tier() -> (Arc<MemoryDevice>, SmallSets) {
        let pages = 16 + 2 + 8;
        let dev = Arc::new(MemoryDevice::new("small", pages * 4096));
        let cfg = SmallConfig {
            staging_bytes: 64 << 10,
            batch_sets: 4,
            log_fraction: 8.5 / (pages - 1) as f64,
            merge_min: 1,
            io_lanes: 1,
            log_tag_bits: 16,
            release_memory: None,
            merge_pages: 2048,
            hugepages: false,
        };
        let d: Arc<dyn Device> = dev.clone();
        let t = SmallSets::with_device(d, cfg).unwrap();
        assert_eq!((t.sets(), t.log_pages()), (16, 8));
        (dev, t)
    }

    /// The flusher calls `release_memory` on its own thread once it goes idle after
    /// appending, and not while it has nothing to do.
    #[test]
    fn the_flusher_releases_memory_when_idle_after_work() {
        use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        fn release() {
            assert_eq!(
                std::thread::current().name(),
                Some("flashtier-small"),
                "on the flusher thread"
            );
            CALLS.fetch_add(1, Relaxed);
        }
        let dev: Arc<dyn Device> = Arc::new(MemoryDevice::new("small", 26 * 4096));
        let cfg = SmallConfig {
            staging_bytes: 64 << 10,
            batch_sets: 4,
            log_fraction: 8.5 / 25.0,
            release_memory: Some(release),
            ..SmallConfig::default()
        };
        let t = SmallSets::with_device(dev, cfg).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(350));
        assert_eq!(
            CALLS.load(Relaxed),
            0,
            "idle from the start: nothing to release"
        );
        for k in 0..10u8 {
            assert!(t.insert(&[b'k', k], &[k; 50], meta(k.into())));
        }
        let start = std::time::Instant::now();
        while CALLS.load(Relaxed) == 0 && start.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(CALLS.load(Relaxed) >= 1, "called after the append");
        assert_eq!(t.inner.klog.as_ref().unwrap().index.live(), 10);
    }

    fn meta(cas: u64) -> ItemMeta {
        ItemMeta {
            cas,
            ..ItemMeta::default()
        }
    }

    fn get(t: &SmallSets, k: &[u8]) -> Option<Vec<u8>> {
        block_on(t.lookup(k))
            .unwrap()
            .item
            .map(|i| i.value.to_vec())
    }

    /// Appended objects are found through their set's chain; a merge of the tail moves
    /// them to the pages, cuts the chains and marks the sets clean; once the slot is
    /// rewritten, a chain copied before reads it as stale.
    #[test]
    fn append_locate_merge_and_stale() {
        let (_dev, t) = tier();
        let i = &t.inner;
        let log = i.klog.as_ref().unwrap();
        for k in 0..10u8 {
            assert!(t.insert(&[b'k', k], &[k; 50], meta(k.into())));
        }
        t.flush_to_log();
        assert_eq!((log.used(), log.index.live()), (1, 10));
        let set = i.set_of(key_hash(b"k\x03"));
        let copied = i.staging.with_set(set, |_| log.locate(set));
        let at = copied
            .iter()
            .find(|a| a.r.tag == log.index.tag_of(key_hash(b"k\x03")))
            .copied()
            .unwrap();
        match block_on(read_entry(i, &at)) {
            LogRead::Entry(e) => assert_eq!((&e.key[..], e.rrip), (&b"k\x03"[..], LOG_PUT)),
            _ => panic!("the appended entry reads back"),
        }
        assert_eq!(
            i.dirty.is_dirty(set),
            Some(false),
            "durable in the log: clean"
        );
        {
            let _m = i.merging.lock();
            assert!(merge_tail(i, log));
        }
        assert_eq!((log.used(), log.index.live()), (0, 0));
        assert_eq!(i.dirty.is_dirty(set), Some(false), "merged: still clean");
        assert_eq!(get(&t, b"k\x03"), Some(vec![3; 50]));
        // Fill the ring past the slot: the copied chain now reads stale.
        for round in 0..9u8 {
            for k in 0..40u8 {
                t.insert(&[b'r', round, k], &[round; 60], meta(1));
            }
            t.flush_to_log();
        }
        assert!(matches!(block_on(read_entry(i, &at)), LogRead::Stale));
        assert_eq!(get(&t, b"k\x03"), Some(vec![3; 50]));
    }

    /// A GET's `locate_tagged` is `locate` filtered by tag, in the same (newest first)
    /// order with the same sequence numbers: per set, for every tag seen and one never seen.
    #[test]
    fn locate_tagged_is_locate_filtered_by_tag() {
        let (_dev, t) = tier();
        let i = &t.inner;
        let log = i.klog.as_ref().unwrap();
        for round in 0..3u8 {
            for k in 0..60u8 {
                assert!(t.insert(&[b't', k], &[round; 40], meta(k.into())));
            }
            t.flush_to_log();
        }
        let mut matched = 0;
        for set in 0..i.sets {
            let all = i.staging.with_set(set, |_| log.locate(set));
            let mut tags: Vec<u32> = all.iter().map(|a| a.r.tag).collect();
            tags.sort_unstable();
            tags.dedup();
            tags.push(u32::MAX);
            for tag in tags {
                let want: Vec<Located> = all.iter().filter(|a| a.r.tag == tag).copied().collect();
                let got = i.staging.with_set(set, |_| log.locate_tagged(set, tag));
                assert_eq!(got, want, "set {set} tag {tag}");
                matched += got.len();
            }
        }
        assert_eq!(
            matched, 180,
            "every logged object is found under its own tag"
        );
        assert_eq!(log.index.live(), 180);
    }

    /// A merge holds at most `merge_pages` decoded log pages (its segment's and the other
    /// pages of the chunk it is merging), unless one set alone has objects on more; every
    /// value is still served after the merges, and the gauges say what was held.
    #[test]
    fn a_merge_holds_at_most_its_page_budget() {
        for budget in [4usize, 2048] {
            let pages = 16 + 2 + 8;
            let dev: Arc<dyn Device> = Arc::new(MemoryDevice::new("small", pages * 4096));
            let cfg = SmallConfig {
                staging_bytes: 64 << 10,
                batch_sets: 4,
                log_fraction: 8.5 / (pages - 1) as f64,
                merge_pages: budget,
                ..SmallConfig::default()
            };
            let t = SmallSets::with_device(dev, cfg).unwrap();
            let i = &t.inner;
            let log = i.klog.as_ref().unwrap();
            // Fill the log's 8 pages, a few objects a page, so each set has objects on
            // several pages.
            for round in 0..7u8 {
                for k in 0..12u8 {
                    assert!(t.insert(&[b'k', round, k], &[round ^ k; 200], meta(1)));
                }
                t.flush_to_log();
            }
            assert_eq!(log.used(), 7);
            // The most pages outside the segment (1 page) one set has objects on.
            let seg_slot = log.slot(log.tail());
            let per_set = (0..i.sets)
                .map(|set| {
                    let mut s: Vec<u32> = log
                        .index
                        .refs(set)
                        .map(|r| r.slot)
                        .filter(|&s| s != seg_slot)
                        .collect();
                    s.sort_unstable();
                    s.dedup();
                    s.len()
                })
                .max()
                .unwrap();
            {
                let _m = i.merging.lock();
                assert!(merge_tail(i, log));
            }
            let c = &i.counters;
            let peak = c.merge_peak_pages.load(Relaxed) as usize;
            assert!(
                peak <= budget.max(1 + per_set),
                "budget {budget}: held {peak} pages (one set needs {per_set} + the segment)"
            );
            if budget > 4 {
                assert!(peak > 4, "a large budget keeps what it read ({peak})");
            }
            assert!(c.merge_peak_bytes.load(Relaxed) >= peak as u64 * 4096);
            assert_eq!(
                c.merge_bytes.load(Relaxed),
                0,
                "nothing held between merges"
            );
            for round in 0..7u8 {
                for k in 0..12u8 {
                    assert_eq!(get(&t, &[b'k', round, k]), Some(vec![round ^ k; 200]));
                }
            }
        }
    }

    /// A log page that cannot be read back at merge time empties the sets it holds objects
    /// of: a tombstone on it must not let the page's older version come back.
    #[test]
    fn a_damaged_log_page_empties_its_sets() {
        let (dev, t) = tier();
        let i = &t.inner;
        for k in 0..20u8 {
            assert!(t.insert(&[b'k', k], b"old", meta(1)));
        }
        t.flush_staged();
        for k in 0..20u8 {
            t.remove(&[b'k', k]);
        }
        t.flush_to_log();
        for k in 0..20u8 {
            assert_eq!(get(&t, &[b'k', k]), None, "the tombstone shadows the page");
        }
        // Damage the log page (slot of the page just written).
        let log = i.klog.as_ref().unwrap();
        let slot = log.slot(log.head.load(Relaxed) - 1);
        dev.write_at(&[0x5a; 4096], i.layout.log_off(slot)).unwrap();
        for k in 0..20u8 {
            assert_eq!(get(&t, &[b'k', k]), None, "a lost log entry is a miss");
        }
        t.flush_staged();
        assert!(i.counters.log_lost_sets.load(Relaxed) > 0);
        for k in 0..20u8 {
            assert_eq!(get(&t, &[b'k', k]), None, "key {k} after the merge");
        }
    }
}
