//! Recovery side of [`crate::fence`]: the intents and floor tables the scan found, and the
//! verdict on each LBA's newest block record.
//!
//! Rule (docs/format.md): an intent `(first, blocks, V)` makes every record of its LBAs older
//! than `V` stale, dirty ones too (a dirty record older than an intent was written back before
//! the intent's write went around the cache). A clean record (or a dirty-flagged one at or below
//! the watermark) is trusted only above its region's floor in the newest durable table.
//! Without a table (first start, a cache written before intents existed, another geometry)
//! no clean record is trusted this way.
//! Threads: the thread opening the cache.
use std::collections::HashMap;

use flashtier_flash::{Flash, Location, RecordMeta};

use crate::fence::Fence;
use crate::record::RecordKind;

/// Fence records seen by the recovery scan.
#[derive(Default)]
pub(crate) struct Found {
    floor: Option<RecordMeta>,
    /// `(first LBA, blocks, version)`.
    intents: Vec<(u64, u64, u64)>,
    dead: Vec<Location>,
}

impl Found {
    /// Take `m` if it is an intent or a floor table.
    pub fn offer(&mut self, m: &RecordMeta) -> bool {
        match RecordKind::of(m.kind, m.key_id) {
            RecordKind::Intent => {
                self.intents
                    .push((m.key_id, u64::from(m.flags.max(1)), m.version));
                true
            }
            RecordKind::Floor => {
                match &self.floor {
                    Some(o) if o.version >= m.version => self.dead.push(m.location),
                    _ => {
                        if let Some(o) = self.floor.replace(*m) {
                            self.dead.push(o.location);
                        }
                    }
                }
                true
            }
            _ => false,
        }
    }

    /// Older floor tables (dead once open finished).
    pub fn dead(&self) -> &[Location] {
        &self.dead
    }

    /// Intents found.
    pub fn intents(&self) -> usize {
        self.intents.len()
    }

    /// The newest floor table `(version, floors)`, or why there is none to trust.
    pub fn load(&self, flash: &Flash, fence: &Fence) -> Result<(u64, Vec<u64>), String> {
        let Some(m) = self.floor else {
            return Err("no floor table (first start or a cache written before intents)".into());
        };
        let rec = flash
            .read(m.location)
            .wait()
            .map_err(|e| format!("floor table unreadable: {e}"))?;
        Ok((m.version, fence.decode(&rec.value)?))
    }

    /// For each LBA of `lbas`, the highest intent version covering it (0 if none).
    pub fn fences(&self, lbas: &HashMap<u64, RecordMeta>) -> HashMap<u64, u64> {
        let mut out: HashMap<u64, u64> = HashMap::new();
        for &(first, blocks, v) in &self.intents {
            if blocks as usize <= lbas.len() {
                for l in first..first + blocks {
                    if lbas.contains_key(&l) {
                        let e = out.entry(l).or_default();
                        *e = (*e).max(v);
                    }
                }
            } else {
                for &l in lbas.keys() {
                    if (first..first + blocks).contains(&l) {
                        let e = out.entry(l).or_default();
                        *e = (*e).max(v);
                    }
                }
            }
        }
        out
    }
}

/// What recovery does with an LBA's newest block record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Dirty,
    Clean,
    /// Older than an intent or its floor: the backing may hold newer data.
    Stale,
    /// Not provable (no floor table) and not in a valid shutdown snapshot.
    Dropped,
}

/// The verdict for record `version` (dirty-flagged or not) given the watermark, the highest
/// intent covering it, its region floor (`None`: no table) and whether a valid shutdown
/// snapshot lists it.
pub(crate) fn verdict(
    version: u64,
    dirty_flag: bool,
    watermark: u64,
    intent: u64,
    floor: Option<u64>,
    in_snapshot: bool,
) -> Verdict {
    if intent > version {
        return Verdict::Stale;
    }
    if dirty_flag && version > watermark {
        return Verdict::Dirty;
    }
    if in_snapshot {
        return Verdict::Clean;
    }
    match floor {
        Some(f) if version > f => Verdict::Clean,
        Some(_) => Verdict::Stale,
        None => Verdict::Dropped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intents_and_floors_decide() {
        // Dirty above the watermark, no intent: dirty.
        assert_eq!(verdict(10, true, 5, 0, None, false), Verdict::Dirty);
        // Dirty but an intent after it: it was written back and overwritten around.
        assert_eq!(verdict(10, true, 5, 11, Some(0), false), Verdict::Stale);
        // Clean above the floor and every intent: kept.
        assert_eq!(verdict(10, false, 5, 9, Some(8), false), Verdict::Clean);
        // Written back (dirty flag, at or below W): clean rule.
        assert_eq!(verdict(4, true, 5, 0, Some(3), false), Verdict::Clean);
        assert_eq!(verdict(4, true, 5, 0, Some(4), false), Verdict::Stale);
        // Clean at or below its floor: stale; no table: dropped unless in the snapshot.
        assert_eq!(verdict(10, false, 5, 0, Some(12), false), Verdict::Stale);
        assert_eq!(verdict(10, false, 5, 0, None, false), Verdict::Dropped);
        assert_eq!(verdict(10, false, 5, 0, None, true), Verdict::Clean);
        // A snapshot never overrides an intent.
        assert_eq!(verdict(10, false, 5, 11, None, true), Verdict::Stale);
    }
}
