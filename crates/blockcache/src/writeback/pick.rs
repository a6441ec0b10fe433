//! Which dirty blocks a writeback batch takes: blocks past their due age first (oldest
//! first), then the configured flush order — FIFO by first-dirty time, LRU by last access,
//! or ascending LBA from a cyclic cursor so adjacent blocks merge into one backing write.
//! Blocks being written or on hold are skipped; picked blocks are marked as being written
//! under the index mutex, so no block is in two batches.
use std::time::{Duration, Instant};

use super::Writeback;
use crate::blocks::Blocks;
use crate::index::Entry;
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

impl Writeback {
    /// Choose blocks to write back: up to `batch` blocks past `due_age` (oldest first),
    /// then up to `n` more (at most `limit` in all) in the configured order (FIFO if
    /// `oldest_first`). Returns (lba, entry, due) and marks them as being written.
    pub(super) fn pick(
        &self,
        blocks: &Blocks,
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
        blocks.locked(|index| {
            let holds = self.holds.lock();
            let now = Instant::now();
            let mut out: Vec<(u64, Entry, bool)> = Vec::new();
            let mut chosen = std::collections::BTreeSet::new();
            if let Some(age) = due_age {
                for (lba, since) in index.dirty_since() {
                    if out.len() >= batch.min(limit) || since.elapsed() < age {
                        break;
                    }
                    if index.is_writing(lba) || !holds.ready(lba, now) {
                        continue;
                    }
                    if let Some(e) = index.get(lba) {
                        out.push((lba, e, true));
                        chosen.insert(lba);
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
                for lba in index.dirty_order(o, *cursor) {
                    if taken >= want {
                        break;
                    }
                    if index.is_writing(lba) || chosen.contains(&lba) || !holds.ready(lba, now) {
                        continue;
                    }
                    if let Some(e) = index.get(lba) {
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
                index.start_writing(*lba);
            }
            out
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dirty blocks 30, 10, 20 in that order (FIFO), then 10 read again (so LRU is 30, 20,
    /// 10); LBA order from a cursor at 15 is 20, 30, 10.
    fn index() -> Blocks {
        let blocks = Blocks::default();
        blocks.locked(|index| {
            for (loc, lba) in [30u64, 10, 20].into_iter().enumerate() {
                let version = index.take_version();
                index.put(lba, loc as u64, version, true);
            }
            index.lookup(10);
        });
        blocks
    }

    fn want(n: usize) -> Want {
        Want {
            n,
            due_age: None,
            batch: n,
            limit: n,
            oldest_first: false,
        }
    }

    fn lbas(picks: &[(u64, Entry, bool)]) -> Vec<u64> {
        picks.iter().map(|p| p.0).collect()
    }

    #[test]
    fn each_flush_order_picks_in_its_order() {
        let wb = Writeback::default();
        let mut cursor = 15;
        let fifo = wb.pick(&index(), FlushOrder::Fifo, &want(3), &mut cursor);
        assert_eq!(lbas(&fifo), [30, 10, 20]);
        let lru = wb.pick(&index(), FlushOrder::Lru, &want(3), &mut cursor);
        assert_eq!(lbas(&lru), [30, 20, 10]);
        assert_eq!(cursor, 15, "only LBA order moves the cursor");
        let lba = wb.pick(&index(), FlushOrder::Lba, &want(2), &mut cursor);
        assert_eq!(lbas(&lba), [20, 30]);
        assert_eq!(cursor, 31, "resumes after the last block taken");
        // A writer waiting for space forces FIFO whatever is configured.
        let urgent = Want {
            oldest_first: true,
            ..want(3)
        };
        let picks = wb.pick(&index(), FlushOrder::Lru, &urgent, &mut cursor);
        assert_eq!(lbas(&picks), [30, 10, 20]);
        assert!(picks.iter().all(|p| !p.2), "none due without a due age");
    }

    #[test]
    fn due_blocks_come_first_and_no_block_is_picked_twice_or_while_held() {
        let wb = Writeback::default();
        let index = index();
        let mut cursor = 0;
        wb.holds.lock().failed([10u64], Instant::now());
        let due = Want {
            due_age: Some(Duration::ZERO),
            batch: 1,
            ..want(3)
        };
        let picks = wb.pick(&index, FlushOrder::Lba, &due, &mut cursor);
        // 30 is due (oldest, one a batch); then LBA order skips the held 10.
        assert_eq!(lbas(&picks), [30, 20]);
        assert_eq!(picks.iter().map(|p| p.2).collect::<Vec<_>>(), [true, false]);
        assert!(index.locked(|ix| ix.is_writing(30) && ix.is_writing(20)));
        // Being written: not picked again until the batch ends.
        let again = wb.pick(&index, FlushOrder::Fifo, &want(3), &mut cursor);
        assert!(again.is_empty(), "{:?}", lbas(&again));
    }
}
