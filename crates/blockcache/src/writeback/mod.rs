//! [`Writeback`]: the writeback task and the state it owns — its wake-ups, rate, the holds of
//! blocks whose backing write failed (`retry`) and explicit flush jobs (`flush`).
//!
//! One tokio task per cache writes dirty blocks back for four causes — fallow, period,
//! threshold (`rate`), flush — in `flush_order` (causes, order, batch sizes:
//! docs/block-cache.md "Writeback causes and order"). Invariant: a block becomes clean only
//! after its run was written and the backing flushed, and only if not rewritten meanwhile;
//! reclaim may drop it only once a persisted clean watermark covers it (`watermark`).
//!
//! Lock order: the index mutex, then the holds mutex. Threads: the writeback task; request
//! tasks wake it and wait for its progress.
mod batch;
mod pick;
pub(crate) mod rate;
mod watermark;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::block_io::BlockIo;
use crate::durability::Durability;
use crate::flush::{FlushState, Flushes};
use crate::log_limit::LogLimiter;
use crate::retry::Retries;
use crate::stats::add;
use crate::tunables::{Mode, Tunables};
use pick::Want;
use rate::RateCtl;
pub(crate) use watermark::persist_watermark;

const TICK: Duration = Duration::from_millis(50);
/// Batches are this many times `writeback_batch` when draining or flushing.
const BIG: usize = 8;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Cause {
    Period,
    Threshold,
    Flush,
}

/// The writeback component's state.
#[derive(Debug, Default)]
pub(crate) struct Writeback {
    /// Wakes the task.
    wake: Notify,
    /// Signalled after each batch (writers waiting for space, flush waiters).
    progress: Notify,
    /// A writer is waiting for dirty blocks to drop.
    urgent: AtomicBool,
    /// The rate the controller set (blocks per second; 0 = idle or flushing).
    rate: AtomicU64,
    /// Blocks on hold after a failed backing write. Lock order: after the index mutex.
    holds: Mutex<Retries>,
    /// Explicit flushes.
    pub(crate) flushes: Flushes,
    /// Writeback errors, rate-limited in the log.
    error_log: LogLimiter,
}

impl Writeback {
    /// Wake the task (settings changed, a flush or switch started).
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    /// A writer waits for space: write back at full speed now.
    pub(crate) fn wake_urgently(&self) {
        self.urgent.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Wait up to `most` for the next batch to finish.
    pub(crate) async fn wait_progress(&self, most: Duration) {
        let _ = tokio::time::timeout(most, self.progress.notified()).await;
    }

    /// The cache stops: wake the task and every waiter so they see it.
    pub(crate) fn interrupt(&self) {
        self.wake.notify_one();
        self.progress.notify_waiters();
    }

    /// The rate the controller set (blocks per second).
    pub(crate) fn rate(&self) -> u64 {
        self.rate.load(Ordering::Relaxed)
    }

    /// Dirty blocks on hold after a failed backing write.
    pub(crate) fn held_blocks(&self) -> u64 {
        self.holds.lock().len() as u64
    }

    /// Count, log and remember a writeback error. Logged at most once a second (with the
    /// count since the last line), so a failing backing does not flood the log.
    fn report(&self, io: &BlockIo, msg: String) {
        add(&io.stats.backing_errors, 1);
        if let Some(n) = self.error_log.event() {
            log::warn!("{msg} (retried with backoff; {n} errors since the last line)");
        }
        io.note_error(msg);
    }
}

/// Client requests so far (reads and writes), to tell whether clients are active.
fn client_requests(io: &BlockIo) -> u64 {
    let s = &io.stats;
    s.read_requests.load(Ordering::Relaxed) + s.write_requests.load(Ordering::Relaxed)
}

/// What the writeback task needs of the cache that runs it (the cache implements it; the
/// task never names the cache, so the imports run one way).
pub(crate) trait Host: Send + Sync + 'static {
    /// This component's state.
    fn writeback(&self) -> &Writeback;
    /// The flash, the index and the backing.
    fn io(&self) -> &BlockIo;
    /// The watermark and fence.
    fn durability(&self) -> &Durability;
    /// The runtime knobs.
    fn tunables(&self) -> &Tunables;
    /// The cache is stopping: end the task.
    fn stopping(&self) -> bool;
}

/// The writeback task (see the module docs); ends when the host stops.
pub(crate) async fn run<H: Host>(cache: Arc<H>) {
    let mut ctl = RateCtl::default();
    let mut budget = 0.0f64;
    let mut last = Instant::now();
    let mut last_wm = Instant::now();
    let mut busy = false;
    let mut rest = Duration::ZERO;
    let mut cursor = 0u64;
    let wb = cache.writeback();
    let io = cache.io();
    let durable = cache.durability();
    let mut last_reqs = client_requests(io);
    while !cache.stopping() {
        if !rest.is_zero() {
            let _ =
                tokio::time::timeout(rest.min(Duration::from_secs(1)), wb.wake.notified()).await;
            rest = Duration::ZERO;
        } else if busy {
            tokio::task::yield_now().await;
        } else {
            let _ = tokio::time::timeout(TICK, wb.wake.notified()).await;
        }
        if cache.stopping() {
            break;
        }
        let now = Instant::now();
        let dt = now.duration_since(last).as_secs_f64();
        last = now;
        let t = cache.tunables();
        let (low_pct, high_pct, _) = t.dirty_pcts();
        let cap = io.capacity_blocks as f64;
        let period = t.flush_period_s();
        let (batch, _, max_rate) = t.writeback();
        let dirty = io.dirty_blocks() as f64;
        let low = cap * low_pct as f64 / 100.0;
        let high = cap * high_pct as f64 / 100.0;
        let thresh_rate = ctl.update(dirty, low, high, dt, max_rate as f64);
        // An explicit flush is running, or (outside writeback mode) every dirty block is a
        // leftover (or a rewrite of one) that a mode switch is draining: flush speed.
        let flushing = matches!(wb.flushes.state(&io.blocks), FlushState::Running { .. })
            || (t.mode() != Mode::WriteBack && io.dirty_blocks() > 0);
        let urgent = wb.urgent.swap(false, Ordering::AcqRel);
        let reqs = client_requests(io);
        let clients = reqs != last_reqs;
        last_reqs = reqs;
        let mut age_rate = if period > 0 {
            dirty / (period as f64 / 2.0)
        } else {
            0.0
        };
        if max_rate > 0 {
            age_rate = age_rate.min(max_rate as f64);
        }
        let rate = thresh_rate.max(age_rate);
        wb.rate.store(
            if flushing || urgent { 0 } else { rate as u64 },
            Ordering::Relaxed,
        );
        let big = batch * BIG;
        let (cause, n, limit) = if flushing {
            (Cause::Flush, big, big)
        } else if urgent {
            (Cause::Threshold, big, big)
        } else {
            // Up to half a second of work may accumulate (at least two batches).
            budget = (budget + rate * dt).min((rate * 0.5).max(batch as f64 * 2.0));
            let c = if ctl.draining {
                Cause::Threshold
            } else {
                Cause::Period
            };
            let limit = if ctl.draining { big } else { batch };
            (c, (budget.floor() as usize).min(limit), limit)
        };
        let due_age = if period > 0 {
            Some(Duration::from_millis(period * 750))
        } else {
            None
        };
        // A stalled writer may wait for flash space, which comes from advancing the clean
        // watermark, which only the oldest dirty block holds back: go oldest first.
        let want = Want {
            n,
            due_age,
            batch,
            limit,
            oldest_first: urgent,
        };
        let picks = wb.pick(&io.blocks, t.flush_order(), &want, &mut cursor);
        if picks.is_empty() {
            busy = false;
            if urgent || last_wm.elapsed() >= Duration::from_millis(500) {
                persist_watermark(io, durable).await;
                last_wm = Instant::now();
            }
            continue;
        }
        if !flushing && !urgent {
            let normal = picks.iter().filter(|p| !p.2).count();
            budget = (budget - normal as f64).max(0.0);
        }
        let started = Instant::now();
        let cleaned = wb.write_back(io, t, &picks, cause).await;
        if cleaned > 0 {
            persist_watermark(io, durable).await;
            last_wm = Instant::now();
        }
        wb.progress.notify_waiters();
        busy = flushing || urgent || budget >= 1.0;
        let share = t.busy_share_pct();
        if flushing && !urgent && clients && share < 100 {
            let took = started.elapsed();
            rest = took * (100 - share as u32) / share.max(1) as u32;
        }
    }
}
