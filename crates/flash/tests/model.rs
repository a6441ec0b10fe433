//! Model-based test of the engine used the way a cache index uses it: random puts, deletes
//! (tombstones), flushes, forced reclaims (the handler keeps live records and tombstones),
//! clean restarts and crash restarts (image taken after a flush, no close), checked against a
//! `HashMap` model. After a restart the index is rebuilt from recovered records by highest
//! `version`, exactly as `Flash::open` documents.
mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use proptest::prelude::*;

use flashtier_flash::{
    kind, Decision, Device, Error, Flash, FlashConfig, Location, LostRecord, MemoryDevice,
    ReclaimHandler, RecordMeta, RecordWrite,
};

#[derive(Clone, Copy, Debug, PartialEq)]
struct Entry {
    loc: Location,
    version: u64,
    tombstone: bool,
}

#[derive(Default)]
struct Index(Mutex<HashMap<u64, Entry>>);

impl ReclaimHandler for Index {
    fn decide(&self, rec: &RecordMeta) -> Decision {
        match self.0.lock().get(&rec.key_id) {
            Some(e) if e.loc == rec.location => Decision::Keep,
            _ => Decision::Drop,
        }
    }
    fn relocated(&self, rec: &RecordMeta, new: Location) -> bool {
        let mut m = self.0.lock();
        match m.get_mut(&rec.key_id) {
            Some(e) if e.loc == rec.location => {
                e.loc = new;
                true
            }
            _ => false,
        }
    }
    fn evicted(&self, rec: &RecordMeta) {
        let mut m = self.0.lock();
        if m.get(&rec.key_id).is_some_and(|e| e.loc == rec.location) {
            m.remove(&rec.key_id);
        }
    }
    fn lost(&self, recs: &[LostRecord]) {
        for r in recs {
            self.evicted(&r.meta);
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Put(u64, usize),
    Delete(u64),
    Flush,
    Reclaim,
    Restart,
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => (0u64..40, 0usize..4000).prop_map(|(k, l)| Op::Put(k, l)),
        5 => (0u64..40).prop_map(Op::Delete),
        3 => Just(Op::Flush),
        3 => Just(Op::Reclaim),
        1 => Just(Op::Restart),
        1 => Just(Op::Crash),
    ]
}

fn value(key: u64, version: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| (key * 7 + version * 13 + j as u64) as u8)
        .collect()
}

fn cfg() -> FlashConfig {
    FlashConfig {
        keep_limit: 1.0,
        ..common::manual()
    }
}

fn open(mem: &Arc<MemoryDevice>, index: &Arc<Index>) -> Flash {
    let mut recovered: HashMap<u64, Entry> = HashMap::new();
    let dev: Arc<dyn Device> = Arc::clone(mem) as Arc<dyn Device>;
    let handler: Arc<dyn ReclaimHandler> = Arc::clone(index) as Arc<dyn ReclaimHandler>;
    let (f, _) = Flash::open(vec![dev], cfg(), handler, |m| {
        let e = Entry {
            loc: m.location,
            version: m.version,
            tombstone: m.kind == kind::TOMBSTONE,
        };
        match recovered.get(&m.key_id) {
            Some(old) if old.version > m.version => {}
            _ => {
                recovered.insert(m.key_id, e);
            }
        }
    })
    .unwrap();
    *index.0.lock() = recovered;
    f
}

fn append(f: &Flash, w: &RecordWrite<'_>) -> Location {
    for _ in 0..10 {
        match f.append_blocking(0, w, Duration::from_secs(5)) {
            Ok(l) => return l,
            Err(Error::NoSpace) => {
                f.reclaim_now(false).unwrap();
            }
            Err(e) => panic!("append: {e}"),
        }
    }
    panic!("no space even after reclaim");
}

fn check(
    f: &Flash,
    index: &Index,
    model: &HashMap<u64, (u64, usize)>,
) -> Result<(), TestCaseError> {
    let idx = index.0.lock().clone();
    for key in 0..40u64 {
        let live = idx.get(&key).filter(|e| !e.tombstone);
        match (model.get(&key), live) {
            (None, None) => {}
            (Some((version, len)), Some(e)) => {
                prop_assert_eq!(e.version, *version);
                let r = f
                    .read(e.loc)
                    .wait()
                    .map_err(|err| TestCaseError::fail(format!("read {key}: {err}")))?;
                prop_assert_eq!(r.header.key_id, key);
                prop_assert_eq!(r.header.version, *version);
                prop_assert_eq!(&r.value[..], &value(key, *version, *len)[..]);
            }
            (m, i) => {
                return Err(TestCaseError::fail(format!(
                    "key {key}: model {m:?} index {i:?}"
                )))
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn engine_with_index_matches_model(ops in proptest::collection::vec(op(), 1..250)) {
        let mut mem = Arc::new(MemoryDevice::new("mem", 4 << 20));
        let index = Arc::new(Index::default());
        let mut f = open(&mem, &index);
        let mut model: HashMap<u64, (u64, usize)> = HashMap::new();
        let mut version = 0u64;
        for op in &ops {
            match op {
                Op::Put(key, len) => {
                    version += 1;
                    let v = value(*key, version, *len);
                    let w = RecordWrite { kind: kind::PUT, key_id: *key, version, flags: 0, exptime: 0, key: b"", value: &v };
                    let loc = append(&f, &w);
                    let old = index.0.lock().insert(*key, Entry { loc, version, tombstone: false });
                    if let Some(old) = old {
                        f.mark_dead(old.loc);
                    }
                    model.insert(*key, (version, *len));
                }
                Op::Delete(key) => {
                    version += 1;
                    let w = RecordWrite { kind: kind::TOMBSTONE, key_id: *key, version, flags: 0, exptime: 0, key: b"", value: b"" };
                    let loc = append(&f, &w);
                    let old = index.0.lock().insert(*key, Entry { loc, version, tombstone: true });
                    if let Some(old) = old {
                        f.mark_dead(old.loc);
                    }
                    model.remove(key);
                }
                Op::Flush => f.flush().wait().unwrap(),
                Op::Reclaim => {
                    f.reclaim_now(true).unwrap();
                }
                Op::Restart => {
                    f.close().unwrap();
                    drop(f);
                    f = open(&mem, &index);
                }
                Op::Crash => {
                    f.flush().wait().unwrap();
                    let image = mem.image();
                    // kill -9: the old engine may still write to `mem`, but the image is fixed.
                    drop(f);
                    mem = Arc::new(MemoryDevice::from_image("mem", image));
                    f = open(&mem, &index);
                }
            }
            if !matches!(op, Op::Put(..) | Op::Delete(_)) {
                check(&f, &index, &model)?;
            }
        }
        check(&f, &index, &model)?;
    }
}
