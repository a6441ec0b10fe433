//! Cache policy settings that change at runtime (`ctl set KEY=VALUE`, admin `/set`).
//!
//! Every field is an atomic read on the data path without a lock; writers are the admin
//! endpoint and the command line at start. Names, units and defaults are in [`TUNABLES`].
//! Invariant kept by [`Tunables::set`]: `dirty_low_pct <= dirty_high_pct <= dirty_max_pct`.
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::error::Error;

/// Cache mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Writes go to flash only (dirty) and are written back later.
    WriteBack,
    /// Writes go to the backing first, then are cached clean.
    WriteThrough,
    /// Writes go to the backing; cached copies are updated, uncached blocks are not admitted.
    WriteAround,
}

impl Mode {
    /// Parse `writeback|writethrough|writearound` (also `wb`, `wt`, `wa`).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "writeback" | "wb" => Some(Mode::WriteBack),
            "writethrough" | "wt" => Some(Mode::WriteThrough),
            "writearound" | "wa" => Some(Mode::WriteAround),
            _ => None,
        }
    }

    /// The canonical name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::WriteBack => "writeback",
            Mode::WriteThrough => "writethrough",
            Mode::WriteAround => "writearound",
        }
    }

    fn code(self) -> u64 {
        self as u64
    }

    fn from_code(c: u64) -> Self {
        match c {
            1 => Mode::WriteThrough,
            2 => Mode::WriteAround,
            _ => Mode::WriteBack,
        }
    }
}

/// Order in which dirty blocks are written back (blocks past their flush period go first
/// whatever the order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushOrder {
    /// Oldest dirty first.
    Fifo,
    /// Least recently accessed first.
    Lru,
    /// Ascending LBA, cyclic (sequential on a disk).
    Lba,
}

impl FlushOrder {
    /// Parse `fifo|lru|lba`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "fifo" => Some(FlushOrder::Fifo),
            "lru" => Some(FlushOrder::Lru),
            "lba" => Some(FlushOrder::Lba),
            _ => None,
        }
    }

    /// The canonical name.
    pub fn name(self) -> &'static str {
        match self {
            FlushOrder::Fifo => "fifo",
            FlushOrder::Lru => "lru",
            FlushOrder::Lba => "lba",
        }
    }
}

/// Every tunable: name, default (as text), meaning.
pub const TUNABLES: &[(&str, &str, &str)] = &[
    (
        "mode",
        "writeback",
        "writeback | writethrough | writearound; leaving writeback starts a switch that writes back every dirty block (ctl set mode=... --wait)",
    ),
    (
        "dirty_high_pct",
        "40",
        "percent of cache blocks dirty at which threshold writeback starts",
    ),
    (
        "dirty_low_pct",
        "20",
        "percent of cache blocks dirty at which threshold writeback stops",
    ),
    (
        "dirty_max_pct",
        "70",
        "percent of cache blocks dirty at which writes wait for writeback",
    ),
    (
        "write_stall_max_ms",
        "30000",
        "longest a write waits for dirty or flash space (writeback cannot progress, e.g. backing errors); it then fails with EIO (1..)",
    ),
    (
        "flush_period_s",
        "30",
        "a dirty block is written back within this many seconds (0 = no deadline)",
    ),
    (
        "flush_order",
        "lba",
        "fifo | lru | lba (ascending from a cyclic cursor: adjacent blocks merge into one backing write)",
    ),
    (
        "seq_threshold_kb",
        "1024",
        "a sequential stream longer than this bypasses the cache for uncached blocks, except blocks read before lately (a loop), which the frequency filter may admit (0 = off)",
    ),
    (
        "admit_max_kb",
        "0",
        "requests larger than this are not admitted (0 = any size)",
    ),
    (
        "admit_offset_min",
        "0",
        "bytes: only blocks at or past this offset are admitted",
    ),
    (
        "admit_offset_max",
        "0",
        "bytes: only blocks before this offset are admitted (0 = device end)",
    ),
    ("admit_reads", "1", "admit blocks on read misses (0/1)"),
    (
        "admit_writes",
        "1",
        "admit blocks on writes (0/1; 0 makes writes go around the cache)",
    ),
    ("writeback_batch", "64", "blocks per writeback batch"),
    (
        "writeback_inflight",
        "16",
        "backing writes in flight during writeback",
    ),
    (
        "writeback_max_rate",
        "0",
        "blocks per second cap for threshold/period writeback (0 = none)",
    ),
    (
        "writeback_busy_share_pct",
        "30",
        "while clients are active, the share of time a flush or mode switch writes back (1..=100; 100 = flat out)",
    ),
    (
        "reclaim_fill_moves",
        "1",
        "clean blocks reclaim may move (copy) instead of dropping, per block the cache writes, while the cache is below 97 % of capacity_blocks (0 = drop them; 0..=64)",
    ),
    (
        "admit_door_pct",
        "80",
        "below the fill line, once the cache holds this % of capacity_blocks and reclaim dropped a clean block within the last fill line (97 % of capacity_blocks) of appends, a read miss is admitted only if the sketch saw its block accessed before (0 = off; 0..=97)",
    ),
    (
        "reclaim_fill_floor_pct",
        "95",
        "after a writer waited for a free flash segment, fill moves stop for capacity_blocks/32 appends unless the cache holds fewer than this % of capacity_blocks (0..=97; 97 = fill moves never yield to writers)",
    ),
];

/// The runtime settings.
#[derive(Debug)]
pub struct Tunables {
    mode: AtomicU64,
    dirty_high_pct: AtomicU64,
    dirty_low_pct: AtomicU64,
    dirty_max_pct: AtomicU64,
    write_stall_max_ms: AtomicU64,
    flush_period_s: AtomicU64,
    flush_order: AtomicU64,
    seq_threshold_kb: AtomicU64,
    admit_max_kb: AtomicU64,
    admit_offset_min: AtomicU64,
    admit_offset_max: AtomicU64,
    admit_reads: AtomicU64,
    admit_writes: AtomicU64,
    writeback_batch: AtomicU64,
    writeback_inflight: AtomicU64,
    writeback_max_rate: AtomicU64,
    writeback_busy_share_pct: AtomicU64,
    reclaim_fill_moves: AtomicU64,
    reclaim_fill_floor_pct: AtomicU64,
    admit_door_pct: AtomicU64,
}

impl Default for Tunables {
    fn default() -> Self {
        let t = Tunables {
            mode: AtomicU64::new(0),
            dirty_high_pct: AtomicU64::new(0),
            dirty_low_pct: AtomicU64::new(0),
            dirty_max_pct: AtomicU64::new(0),
            write_stall_max_ms: AtomicU64::new(0),
            flush_period_s: AtomicU64::new(0),
            flush_order: AtomicU64::new(0),
            seq_threshold_kb: AtomicU64::new(0),
            admit_max_kb: AtomicU64::new(0),
            admit_offset_min: AtomicU64::new(0),
            admit_offset_max: AtomicU64::new(0),
            admit_reads: AtomicU64::new(0),
            admit_writes: AtomicU64::new(0),
            writeback_batch: AtomicU64::new(0),
            writeback_inflight: AtomicU64::new(0),
            writeback_max_rate: AtomicU64::new(0),
            writeback_busy_share_pct: AtomicU64::new(0),
            reclaim_fill_moves: AtomicU64::new(0),
            reclaim_fill_floor_pct: AtomicU64::new(0),
            admit_door_pct: AtomicU64::new(0),
        };
        for (name, default, _) in TUNABLES {
            // Defaults are constants above; a failure here would be a typo caught by tests.
            let _ = t.set(name, default);
        }
        t
    }
}

fn parse_u64(name: &str, v: &str) -> Result<u64, Error> {
    v.trim()
        .parse()
        .map_err(|_| Error::Config(format!("{name}: {v:?} is not a non-negative integer")))
}

/// A non-negative integer of at most `max`.
fn parse_at_most(name: &str, v: &str, max: u64) -> Result<u64, Error> {
    match parse_u64(name, v)? {
        n if n <= max => Ok(n),
        n => Err(Error::Config(format!("{name}: {n} must be 0..={max}"))),
    }
}

fn parse_bool(name: &str, v: &str) -> Result<u64, Error> {
    match v.trim() {
        "1" | "true" | "on" | "yes" => Ok(1),
        "0" | "false" | "off" | "no" => Ok(0),
        _ => Err(Error::Config(format!("{name}: {v:?} is not 0/1"))),
    }
}

impl Tunables {
    /// Set one tunable from text. Unknown names and bad values are errors; nothing changes.
    pub fn set(&self, name: &str, value: &str) -> Result<(), Error> {
        let pct = |v: &str| -> Result<u64, Error> {
            let p = parse_u64(name, v)?;
            if p > 100 {
                return Err(Error::Config(format!("{name}: {p} is over 100")));
            }
            Ok(p)
        };
        match name {
            "mode" => {
                let m = Mode::parse(value.trim()).ok_or_else(|| {
                    Error::Config(format!(
                        "mode: {value:?} is not writeback|writethrough|writearound"
                    ))
                })?;
                self.mode.store(m.code(), Relaxed);
            }
            "dirty_high_pct" | "dirty_low_pct" | "dirty_max_pct" => {
                let p = pct(value)?;
                let (mut lo, mut hi, mut mx) = (
                    self.dirty_low_pct.load(Relaxed),
                    self.dirty_high_pct.load(Relaxed),
                    self.dirty_max_pct.load(Relaxed),
                );
                match name {
                    "dirty_low_pct" => lo = p,
                    "dirty_high_pct" => hi = p,
                    _ => mx = p,
                }
                // At construction the others are still 0; only check once all are set.
                if hi != 0 && mx != 0 && !(lo <= hi && hi <= mx) {
                    return Err(Error::Config(format!(
                        "{name}: need dirty_low_pct ({lo}) <= dirty_high_pct ({hi}) <= dirty_max_pct ({mx})"
                    )));
                }
                self.dirty_low_pct.store(lo, Relaxed);
                self.dirty_high_pct.store(hi, Relaxed);
                self.dirty_max_pct.store(mx, Relaxed);
            }
            "flush_period_s" => self.flush_period_s.store(parse_u64(name, value)?, Relaxed),
            "write_stall_max_ms" => match parse_u64(name, value)? {
                0 => return Err(Error::Config(format!("{name}: must be at least 1"))),
                n => self.write_stall_max_ms.store(n, Relaxed),
            },
            "flush_order" => {
                let o = FlushOrder::parse(value.trim()).ok_or_else(|| {
                    Error::Config(format!("flush_order: {value:?} is not fifo|lru|lba"))
                })?;
                self.flush_order.store(o as u64, Relaxed);
            }
            "seq_threshold_kb" => self
                .seq_threshold_kb
                .store(parse_u64(name, value)?, Relaxed),
            "admit_max_kb" => self.admit_max_kb.store(parse_u64(name, value)?, Relaxed),
            "admit_offset_min" => self
                .admit_offset_min
                .store(parse_u64(name, value)?, Relaxed),
            "admit_offset_max" => self
                .admit_offset_max
                .store(parse_u64(name, value)?, Relaxed),
            "admit_reads" => self.admit_reads.store(parse_bool(name, value)?, Relaxed),
            "admit_writes" => self.admit_writes.store(parse_bool(name, value)?, Relaxed),
            "writeback_batch" | "writeback_inflight" => {
                let n = parse_u64(name, value)?;
                if n == 0 || n > 4096 {
                    return Err(Error::Config(format!("{name}: {n} must be 1..=4096")));
                }
                if name == "writeback_batch" {
                    self.writeback_batch.store(n, Relaxed);
                } else {
                    self.writeback_inflight.store(n, Relaxed);
                }
            }
            "writeback_max_rate" => self
                .writeback_max_rate
                .store(parse_u64(name, value)?, Relaxed),
            "writeback_busy_share_pct" => match pct(value)? {
                0 => return Err(Error::Config(format!("{name}: must be 1..=100"))),
                p => self.writeback_busy_share_pct.store(p, Relaxed),
            },
            "reclaim_fill_moves" => self
                .reclaim_fill_moves
                .store(parse_at_most(name, value, 64)?, Relaxed),
            "reclaim_fill_floor_pct" => self
                .reclaim_fill_floor_pct
                .store(parse_at_most(name, value, 97)?, Relaxed),
            "admit_door_pct" => self
                .admit_door_pct
                .store(parse_at_most(name, value, 97)?, Relaxed),
            _ => return Err(Error::Config(format!("unknown tunable {name:?}"))),
        }
        Ok(())
    }

    /// Current value of one tunable as text.
    pub fn get(&self, name: &str) -> Option<String> {
        Some(match name {
            "mode" => self.mode().name().to_string(),
            "flush_order" => self.flush_order().name().to_string(),
            "dirty_high_pct" => self.dirty_high_pct.load(Relaxed).to_string(),
            "dirty_low_pct" => self.dirty_low_pct.load(Relaxed).to_string(),
            "dirty_max_pct" => self.dirty_max_pct.load(Relaxed).to_string(),
            "write_stall_max_ms" => self.write_stall_max_ms.load(Relaxed).to_string(),
            "flush_period_s" => self.flush_period_s.load(Relaxed).to_string(),
            "seq_threshold_kb" => self.seq_threshold_kb.load(Relaxed).to_string(),
            "admit_max_kb" => self.admit_max_kb.load(Relaxed).to_string(),
            "admit_offset_min" => self.admit_offset_min.load(Relaxed).to_string(),
            "admit_offset_max" => self.admit_offset_max.load(Relaxed).to_string(),
            "admit_reads" => self.admit_reads.load(Relaxed).to_string(),
            "admit_writes" => self.admit_writes.load(Relaxed).to_string(),
            "writeback_batch" => self.writeback_batch.load(Relaxed).to_string(),
            "writeback_inflight" => self.writeback_inflight.load(Relaxed).to_string(),
            "writeback_max_rate" => self.writeback_max_rate.load(Relaxed).to_string(),
            "writeback_busy_share_pct" => self.writeback_busy_share_pct.load(Relaxed).to_string(),
            "reclaim_fill_moves" => self.reclaim_fill_moves.load(Relaxed).to_string(),
            "reclaim_fill_floor_pct" => self.reclaim_fill_floor_pct.load(Relaxed).to_string(),
            "admit_door_pct" => self.admit_door_pct.load(Relaxed).to_string(),
            _ => return None,
        })
    }

    /// Every tunable as `(name, value)`.
    pub fn list(&self) -> Vec<(&'static str, String)> {
        TUNABLES
            .iter()
            .map(|(n, _, _)| (*n, self.get(n).unwrap_or_default()))
            .collect()
    }

    /// Set the mode (the cache's `set_mode` does it together with the switch record).
    pub(crate) fn set_mode(&self, m: Mode) {
        self.mode.store(m.code(), Relaxed);
    }

    /// Current mode.
    pub fn mode(&self) -> Mode {
        Mode::from_code(self.mode.load(Relaxed))
    }

    /// Current flush order.
    pub fn flush_order(&self) -> FlushOrder {
        match self.flush_order.load(Relaxed) {
            1 => FlushOrder::Lru,
            2 => FlushOrder::Lba,
            _ => FlushOrder::Fifo,
        }
    }

    /// `(low, high, max)` dirty percentages.
    pub fn dirty_pcts(&self) -> (u64, u64, u64) {
        (
            self.dirty_low_pct.load(Relaxed),
            self.dirty_high_pct.load(Relaxed),
            self.dirty_max_pct.load(Relaxed),
        )
    }

    /// Longest a write waits for space before it fails with EIO.
    pub fn write_stall_max(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.write_stall_max_ms.load(Relaxed))
    }

    /// Flush period in seconds (0 = none).
    pub fn flush_period_s(&self) -> u64 {
        self.flush_period_s.load(Relaxed)
    }

    /// Sequential bypass threshold in bytes (0 = off).
    pub fn seq_threshold(&self) -> u64 {
        self.seq_threshold_kb.load(Relaxed) * 1024
    }

    /// Whether a request of `len` bytes at `offset` may be admitted (`write` = a write).
    pub fn admits(&self, offset: u64, len: u64, write: bool) -> bool {
        self.refusal(offset, len, write).is_none()
    }

    /// The first admission rule refusing a request of `len` bytes at `offset`, if any.
    pub fn refusal(&self, offset: u64, len: u64, write: bool) -> Option<Refusal> {
        let dir = if write {
            self.admit_writes.load(Relaxed)
        } else {
            self.admit_reads.load(Relaxed)
        };
        let max = self.admit_max_kb.load(Relaxed) * 1024;
        let lo = self.admit_offset_min.load(Relaxed);
        let hi = self.admit_offset_max.load(Relaxed);
        if dir != 1 {
            Some(Refusal::Direction)
        } else if max != 0 && len > max {
            Some(Refusal::Size)
        } else if offset < lo || (hi != 0 && offset >= hi) {
            Some(Refusal::Offset)
        } else {
            None
        }
    }

    /// Share of time (percent) a flush writes back while clients are active.
    pub fn busy_share_pct(&self) -> u64 {
        self.writeback_busy_share_pct.load(Relaxed)
    }

    /// Fill moves reclaim may make per block the cache writes.
    pub fn fill_moves(&self) -> u64 {
        self.reclaim_fill_moves.load(Relaxed)
    }

    /// `reclaim_fill_floor_pct`: below this share of `capacity_blocks` fill moves do not
    /// yield to a writer waiting for space.
    pub fn fill_floor_pct(&self) -> u64 {
        self.reclaim_fill_floor_pct.load(Relaxed)
    }

    /// `admit_door_pct`: from this share of `capacity_blocks` up to the fill line, while
    /// reclaim drops clean blocks, a read miss needs history to be admitted (0 = never).
    pub fn door_pct(&self) -> u64 {
        self.admit_door_pct.load(Relaxed)
    }

    /// `(batch, inflight, max_rate)` for writeback.
    pub fn writeback(&self) -> (usize, usize, u64) {
        (
            self.writeback_batch.load(Relaxed) as usize,
            self.writeback_inflight.load(Relaxed) as usize,
            self.writeback_max_rate.load(Relaxed),
        )
    }
}

/// Which admission rule refused a request (see [`Tunables::refusal`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `admit_reads` / `admit_writes` is 0 for the request's direction.
    Direction,
    /// Larger than `admit_max_kb`.
    Size,
    /// Outside `admit_offset_min..admit_offset_max`.
    Offset,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_round_trip_and_checks() {
        let t = Tunables::default();
        for (name, default, _) in TUNABLES {
            assert_eq!(t.get(name).as_deref(), Some(*default), "{name}");
        }
        t.set("mode", "wt").unwrap();
        assert_eq!(t.mode(), Mode::WriteThrough);
        assert!(t.set("mode", "bogus").is_err());
        assert!(t.set("dirty_low_pct", "50").is_err());
        t.set("dirty_max_pct", "90").unwrap();
        t.set("dirty_high_pct", "80").unwrap();
        t.set("dirty_low_pct", "50").unwrap();
        assert_eq!(t.dirty_pcts(), (50, 80, 90));
        assert!(t.set("nope", "1").is_err());
        t.set("admit_max_kb", "64").unwrap();
        assert!(t.admits(0, 65536, true));
        assert!(!t.admits(0, 65537, true));
        t.set("admit_reads", "0").unwrap();
        assert!(!t.admits(0, 4096, false));
    }
}
