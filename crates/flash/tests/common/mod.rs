//! Helpers the flash engine's integration tests share: where real files go (the engine uses
//! O_DIRECT, which tmpfs refuses), a file device spec, a PUT record, an engine stat, a
//! bounded wait, a handler that records losses, a user index of live locations.
#![allow(dead_code)]

pub mod reap;

use std::collections::HashMap;
use std::ops::Deref;
use std::path::{Path, PathBuf};

use std::time::{Duration, Instant};

use parking_lot::Mutex;

use flashtier_flash::{
    kind, Decision, DeviceSpec, Flash, FlashConfig, Location, LostRecord, ReclaimHandler,
    RecordMeta, RecordWrite,
};

/// A directory on a real filesystem: `$FLASH_TEST_DIR`, else `/var/tmp`.
pub fn disk_dir() -> PathBuf {
    std::env::var_os("FLASH_TEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/var/tmp".into())
}

/// `disk_dir()/flashtier-test-<pid>-<name>`: a per-process file path (not created).
pub fn disk_file(name: &str) -> PathBuf {
    disk_dir().join(format!("flashtier-test-{}-{name}", std::process::id()))
}

/// A tier-0 file device of `size` bytes at `path`, created if missing.
pub fn file_spec(path: &Path, size: u64) -> DeviceSpec {
    DeviceSpec {
        path: path.to_path_buf(),
        size,
        tier: 0,
        create: true,
    }
}

/// [`FlashConfig::small`] with no interval flusher and no background reclaimer: the test
/// decides when chunks are written and segments reclaimed.
pub fn manual() -> FlashConfig {
    FlashConfig {
        flush_interval: None,
        background_reclaim: false,
        ..FlashConfig::small()
    }
}

/// The engine stat `flash_<name>`; panics if there is none.
pub fn stat(f: &Flash, name: &str) -> u64 {
    f.stats()
        .pairs()
        .into_iter()
        .find(|(k, _)| *k == format!("flash_{name}"))
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no stat {name}"))
}

/// Wait, polling every 5 ms, until `cond` holds; fails the test after `limit`.
pub fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < limit, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A handler that drops everything reclaim offers and records what the engine reports lost.
#[derive(Default)]
pub struct Losses(pub Mutex<Vec<LostRecord>>);

impl ReclaimHandler for Losses {
    fn decide(&self, _: &RecordMeta) -> Decision {
        Decision::Drop
    }
    fn relocated(&self, _: &RecordMeta, _: Location) -> bool {
        false
    }
    fn evicted(&self, _: &RecordMeta) {}
    fn lost(&self, recs: &[LostRecord]) {
        self.0.lock().extend_from_slice(recs);
    }
}

/// A user index: key id -> location of its live record, with the callbacks the tests'
/// handlers share. A relocation follows the record, and an eviction or a loss removes it,
/// only while the index still points at that record.
#[derive(Default)]
pub struct LocMap(pub Mutex<HashMap<u64, Location>>);

impl Deref for LocMap {
    type Target = Mutex<HashMap<u64, Location>>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl LocMap {
    /// True while the index points at `rec`.
    pub fn is_live(&self, rec: &RecordMeta) -> bool {
        self.0.lock().get(&rec.key_id) == Some(&rec.location)
    }

    /// `ReclaimHandler::relocated`.
    pub fn relocated(&self, rec: &RecordMeta, new: Location) -> bool {
        let mut m = self.0.lock();
        let moved = m.get(&rec.key_id) == Some(&rec.location);
        if moved {
            m.insert(rec.key_id, new);
        }
        moved
    }

    /// `ReclaimHandler::evicted`.
    pub fn evicted(&self, rec: &RecordMeta) {
        let mut m = self.0.lock();
        if m.get(&rec.key_id) == Some(&rec.location) {
            m.remove(&rec.key_id);
        }
    }

    /// `ReclaimHandler::lost`.
    pub fn lost(&self, recs: &[LostRecord]) {
        for r in recs {
            self.evicted(&r.meta);
        }
    }
}

/// The `relocated`, `evicted` and `lost` callbacks of a `ReclaimHandler` whose index is a
/// [`LocMap`] field named `map`.
#[allow(unused_macros)]
macro_rules! loc_map_callbacks {
    () => {
        fn relocated(&self, rec: &RecordMeta, new: Location) -> bool {
            self.map.relocated(rec, new)
        }
        fn evicted(&self, rec: &RecordMeta) {
            self.map.evicted(rec)
        }
        fn lost(&self, recs: &[LostRecord]) {
            self.map.lost(recs)
        }
    };
}
#[allow(unused_imports)]
pub(crate) use loc_map_callbacks;

/// A PUT record of `key_id` at `version` with key `k`, no flags and no expiry.
pub fn put_record(key_id: u64, version: u64, value: &[u8]) -> RecordWrite<'_> {
    RecordWrite {
        kind: kind::PUT,
        key_id,
        version,
        flags: 0,
        exptime: 0,
        key: b"k",
        value,
    }
}
