//! The keep limit (`keep_limit`: at most that share of a victim's bytes is rewritten, so
//! every pass frees room) against the user's verdicts: records the user keeps outright come
//! before those it keeps only if there is room (`Decision::KeepIfRoom`), wherever they sit
//! in the victim, and a kept tombstone is never cut by the limit (dropping one could bring
//! an older version of its key back at recovery).
mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::LocMap;
use flashtier_flash::{
    kind, Decision, Device, Flash, FlashConfig, FlashStats, Location, LostRecord, MemoryDevice,
    ReclaimHandler, RecordMeta, RecordWrite,
};

/// key_id -> location of its live record. Keys below `if_room_below` are kept only if there
/// is room; the others (and tombstones) are kept outright.
#[derive(Default)]
struct Index {
    map: LocMap,
    if_room_below: AtomicU64,
}

impl ReclaimHandler for Index {
    fn decide(&self, rec: &RecordMeta) -> Decision {
        let live = self.map.is_live(rec);
        if !live {
            Decision::Drop
        } else if rec.kind == kind::PUT && rec.key_id < self.if_room_below.load(Ordering::SeqCst) {
            Decision::KeepIfRoom
        } else {
            Decision::Keep
        }
    }
    common::loc_map_callbacks!();
}

fn rig(keep_limit: f64) -> (Flash, Arc<Index>, u64) {
    let index = Arc::new(Index::default());
    let cfg = FlashConfig {
        flush_interval: None,
        background_reclaim: false,
        keep_limit,
        reclaim_policy: flashtier_flash::ReclaimPolicy::Fifo,
        ..FlashConfig::small()
    };
    let seg = cfg.segment_size;
    let dev: Arc<dyn Device> = Arc::new(MemoryDevice::new("mem", 4 << 20));
    let f = Flash::open(vec![dev], cfg, Arc::clone(&index) as _, |_| {})
        .unwrap()
        .0;
    (f, index, seg)
}

/// Append `n` records of `kind` (values of 1,000 bytes for PUT, none for TOMBSTONE) for
/// keys 0..n in order, flush, and return the keys whose record landed in the first segment.
fn fill(f: &Flash, index: &Index, seg: u64, n: u64, k: u8) -> Vec<u64> {
    let v = vec![7u8; if k == kind::PUT { 1000 } else { 0 }];
    for key in 0..n {
        let w = RecordWrite {
            kind: k,
            key_id: key,
            version: 1,
            flags: 0,
            exptime: 0,
            key: b"",
            value: &v,
        };
        let loc = f.append_blocking(0, &w, Duration::from_secs(5)).unwrap();
        index.map.lock().insert(key, loc);
    }
    f.flush().wait().unwrap();
    let mut first: Vec<u64> = index
        .map
        .lock()
        .iter()
        .filter(|(_, l)| l.byte_addr() < seg)
        .map(|(k, _)| *k)
        .collect();
    first.sort_unstable();
    first
}

#[test]
fn outright_keeps_come_before_keeps_if_room_wherever_they_sit() {
    let (f, index, seg) = rig(0.5);
    let first = fill(&f, &index, seg, 600, kind::PUT);
    assert!(
        first.len() > 100,
        "{} records in the first segment",
        first.len()
    );
    // The first 60 % of the victim's records are kept only if there is room, the last 40 %
    // outright: cut in offset order, the limit (50 %) would have taken the first ones and
    // evicted most of the outright keeps behind them.
    let boundary = first[first.len() * 6 / 10];
    index.if_room_below.store(boundary, Ordering::SeqCst);
    assert_eq!(f.reclaim_now(true).unwrap(), 1);
    let m = index.map.lock();
    let outright: Vec<u64> = first.iter().copied().filter(|k| *k >= boundary).collect();
    for k in &outright {
        assert!(
            m.get(k).is_some_and(|l| l.byte_addr() >= seg),
            "outright keep {k} was evicted"
        );
    }
    let if_room_kept = first
        .iter()
        .filter(|k| **k < boundary && m.contains_key(k))
        .count();
    let rewritten = FlashStats::get(&f.stats().records_rewritten) as usize;
    assert_eq!(rewritten, outright.len() + if_room_kept);
    assert!(
        if_room_kept < first.len() / 2 - outright.len() + 2,
        "{if_room_kept} keeps-if-room and {} outright kept: over the limit",
        outright.len()
    );
    assert!(
        if_room_kept > 0,
        "room left after the outright keeps went unused"
    );
}

#[test]
fn the_keep_limit_never_cuts_a_kept_tombstone() {
    let (f, index, seg) = rig(0.25);
    // Tombstones only (header-only records), every one of them kept.
    let first = fill(&f, &index, seg, 20_000, kind::TOMBSTONE);
    assert!(
        first.len() > 1000,
        "{} tombstones in the first segment",
        first.len()
    );
    assert_eq!(f.reclaim_now(true).unwrap(), 1);
    let m = index.map.lock();
    for k in &first {
        assert!(
            m.get(k).is_some_and(|l| l.byte_addr() >= seg),
            "kept tombstone {k} was cut by the keep limit"
        );
    }
    assert_eq!(
        FlashStats::get(&f.stats().records_rewritten) as usize,
        first.len()
    );
}
