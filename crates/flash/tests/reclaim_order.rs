//! Reclaim's age order is when a segment was sealed, not when it was opened: a stream that
//! fills slowly (write-back of hot items, reclaim's own copies) opened its segment long
//! before its last records went in, and FIFO by open order would reclaim those fresh
//! records first. After a restart, each stream's last segment counts as the newest.
mod common;

use std::sync::Arc;

use parking_lot::Mutex;

use flashtier_flash::{
    Decision, Device, Flash, Location, LostRecord, MemoryDevice, ReclaimHandler, RecordMeta,
};

/// Records the key of every record reclaim asks about, in order; keeps nothing.
#[derive(Default)]
struct Asked(Mutex<Vec<u64>>);

impl ReclaimHandler for Asked {
    fn decide(&self, rec: &RecordMeta) -> Decision {
        self.0.lock().push(rec.key_id);
        Decision::Drop
    }
    fn relocated(&self, _: &RecordMeta, _: Location) -> bool {
        false
    }
    fn evicted(&self, _: &RecordMeta) {}
    fn lost(&self, _: &[LostRecord]) {}
}

/// Stream the slow records go to (not the reclaim stream, 1).
const SLOW: u8 = 2;
/// Key ids of the slow stream's records start here.
const SLOW_KEYS: u64 = 1 << 40;

fn open(dev: &Arc<dyn Device>, asked: Arc<Asked>) -> Flash {
    Flash::open(vec![Arc::clone(dev)], common::manual(), asked, |_| {})
        .unwrap()
        .0
}

/// One record opens the slow stream's segment first; then stream 0 fills three segments;
/// then the slow segment fills up and seals. Returns the next free key of stream 0.
fn slow_segment_opened_first(f: &Flash, value: &[u8], per_segment: u64) -> u64 {
    let mut v = 1;
    let mut put = |stream: u8, key: u64| {
        f.append(stream, &common::put_record(key, v, value))
            .unwrap();
        v += 1;
        f.flush().wait().unwrap();
    };
    put(SLOW, SLOW_KEYS);
    let mut key = 0;
    for _ in 0..3 * per_segment {
        put(0, key);
        key += 1;
    }
    for i in 1..per_segment + 1 {
        put(SLOW, SLOW_KEYS + i);
    }
    key
}

/// The first segment a forced reclaim pass takes holds only stream-0 records.
fn first_victim_is_stream_zero(f: &Flash, asked: &Asked, what: &str) {
    asked.0.lock().clear();
    f.reclaim_now(true).unwrap();
    let keys = asked.0.lock().clone();
    assert!(!keys.is_empty(), "{what}: reclaim took no segment");
    assert!(
        keys.iter().all(|&k| k < SLOW_KEYS),
        "{what}: the slow stream's segment, sealed last, was reclaimed first: {keys:?}"
    );
}

#[test]
fn fifo_reclaims_by_seal_order_and_ranks_stream_tails_newest_after_restart() {
    let cfg = common::manual();
    let dev: Arc<dyn Device> = Arc::new(MemoryDevice::new("order", 4 << 20));
    let value = vec![7u8; 30 << 10];
    // About 8 records of 30 KiB per 256 KiB segment; appends past that seal it.
    let per_segment = cfg.segment_size / (31 << 10);
    let asked = Arc::new(Asked::default());
    let f = open(&dev, Arc::clone(&asked));
    slow_segment_opened_first(&f, &value, per_segment);
    first_victim_is_stream_zero(&f, &asked, "running");
    f.close().unwrap();
    drop(f);

    // After a restart seal times are gone: the slow stream's last segment (opened before
    // stream 0's, holding its latest records) still ranks after stream 0's older segments.
    let dev2: Arc<dyn Device> = Arc::new(MemoryDevice::new("order2", 4 << 20));
    let f = open(&dev2, Arc::clone(&asked));
    let mut v = 1;
    f.append(SLOW, &common::put_record(SLOW_KEYS, v, &value))
        .unwrap();
    for key in 0..3 * per_segment {
        v += 1;
        f.append(0, &common::put_record(key, v, &value)).unwrap();
        f.flush().wait().unwrap();
    }
    f.close().unwrap();
    drop(f);
    let asked = Arc::new(Asked::default());
    let f = open(&dev2, Arc::clone(&asked));
    first_victim_is_stream_zero(&f, &asked, "after a restart");
}
