//! Which dirty blocks a writeback batch takes: blocks past their due age first (oldest
//! first), then the configured flush order — FIFO by first-dirty time, LRU by last access,
//! or ascending LBA from a cyclic cursor so adjacent blocks merge into one backing write.
//! Blocks being written or on hold are skipped; picked blocks are marked as being written
//! under the index mutex, so no block is in two batches.
use std::time::{Duration, Instant};

use super::Writeback;
use crate::block_io::BlockIo;
use crate::index::{Entry, Index};
use crate::tunables::FlushOrder;

/// How many blocks a batch wants.
#[derive(Clone, Copy, Debug)]
pub(super) struct Want {
    /// Blocks in the configured order.
    pub n: usize,
    /// Blocks older than this are due (taken first, at most `batch`).
    pub due_age: Option<Duration>,
    pub batch: usize,
    /// Most blocks in all.
    pub limit: usize,
    /// Take FIFO order whatever is configured (a writer waits for space).
    pub oldest_first: bool,
}

/// Dirty LBAs in flush order; `cursor` is where ascending-LBA order resumes.
fn order<'a>(
    index: &'a Index,
    order: FlushOrder,
    cursor: u64,
) -> Box<dyn Iterator<Item = u64> + 'a> {
    match order {
        FlushOrder::Fifo => Box::new(index.fifo.values().map(|(l, _)| *l)),
        FlushOrder::Lba => Box::new(
            index
                .by_lba
                .range(cursor..)
                .chain(index.by_lba.range(..cursor))
                .copied(),
        ),
        FlushOrder::Lru => {
            let mut v: Vec<(u64, u64)> = index
                .by_lba
                .iter()
                .filter_map(|l| index.dirty_meta.get(l).map(|d| (d.access, *l)))
                .collect();
            v.sort_unstable();
            Box::new(v.into_iter().map(|(_, l)| l))
        }
    }
}

impl Writeback {
    /// Choose blocks to write back: up to `batch` blocks past `due_age` (oldest first),
    /// then up to `n` more (at most `limit` in all) in the configured order (FIFO if
    /// `oldest_first`). Returns (lba, entry, due) and marks them as being written.
    pub(super) fn pick(
        &self,
        io: &BlockIo,
        configured: FlushOrder,
        want: &Want,
        cursor: &mut u64,
    ) -> Vec<(u64, Entry, bool)> {
        let Want {
            n,
            due_age,
            batch,
            limit,
            oldest_first,
        } = *want;
        let mut index = io.shared.index.lock();
        let holds = self.holds.lock();
        let now = Instant::now();
        let mut out: Vec<(u64, Entry, bool)> = Vec::new();
        let mut chosen = std::collections::BTreeSet::new();
        if let Some(age) = due_age {
            for (_, (lba, since)) in index.fifo.iter() {
                if out.len() >= batch.min(limit) || since.elapsed() < age {
                    break;
                }
                if index.writing.contains(lba) || !holds.ready(*lba, now) {
                    continue;
                }
                if let Some(e) = index.map.get(*lba) {
                    out.push((*lba, e, true));
                    chosen.insert(*lba);
                }
            }
        }
        let want = n.min(limit.saturating_sub(out.len()));
        if want > 0 {
            let o = if oldest_first {
                FlushOrder::Fifo
            } else {
                configured
            };
            let mut taken = 0;
            let mut next_cursor = *cursor;
            for lba in order(&index, o, *cursor) {
                if taken >= want {
                    break;
                }
                if index.writing.contains(&lba) || chosen.contains(&lba) || !holds.ready(lba, now) {
                    continue;
                }
                if let Some(e) = index.map.get(lba) {
                    out.push((lba, e, false));
                    taken += 1;
                    next_cursor = lba + 1;
                }
            }
            if o == FlushOrder::Lba {
                *cursor = next_cursor;
            }
        }
        drop(holds);
        for (lba, _, _) in &out {
            index.writing.insert(*lba);
        }
        out
    }
}
