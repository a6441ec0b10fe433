//! `Decision::Forget`: a record the user evicts leaves a drop note — a TOMBSTONE with its key
//! id and version and a horizon — that is durable before the victim is erased and that
//! recovery reports, so the user can hide older versions of the key left in other segments.
mod common;

use std::sync::Arc;

use common::LocMap;
use flashtier_flash::{
    kind, Decision, Device, Error, Flash, FlashConfig, FlashStats, Location, LostRecord,
    MemoryDevice, ReclaimHandler, RecordMeta, RecordWrite,
};

/// key_id -> location; keeps even keys, forgets (evicts with a note) odd ones.
#[derive(Default)]
struct Index {
    map: LocMap,
}

impl ReclaimHandler for Index {
    fn decide(&self, rec: &RecordMeta) -> Decision {
        let mut m = self.map.lock();
        let live = m.get(&rec.key_id) == Some(&rec.location);
        match (live, rec.key_id % 2) {
            (true, 0) => Decision::Keep,
            (true, _) => {
                m.remove(&rec.key_id);
                Decision::Forget
            }
            (false, _) => Decision::Drop,
        }
    }
    common::loc_map_callbacks!();
}

fn put(f: &Flash, index: &Index, key: u64, version: u64) {
    let v = vec![key as u8; 3000];
    let w = RecordWrite {
        kind: kind::PUT,
        key_id: key,
        version,
        flags: 0,
        exptime: 0,
        key: b"",
        value: &v,
    };
    loop {
        match f.append(0, &w) {
            Ok(loc) => {
                if let Some(old) = index.map.lock().insert(key, loc) {
                    f.mark_dead(old);
                }
                return;
            }
            Err(Error::NoSpace | Error::Busy(_)) => {
                f.reclaim_now(false).expect("reclaim");
            }
            Err(e) => panic!("append: {e}"),
        }
    }
}

#[test]
fn forgotten_records_leave_durable_notes_that_recovery_reports() {
    let dev = Arc::new(MemoryDevice::new("mem", 4 << 20));
    let cfg = FlashConfig {
        flush_interval: None,
        background_reclaim: false,
        keep_limit: 1.0,
        reclaim_policy: flashtier_flash::ReclaimPolicy::Fifo,
        ..FlashConfig::small()
    };
    let index = Arc::new(Index::default());
    let handler: Arc<dyn ReclaimHandler> = index.clone();
    let devs = vec![dev.clone() as Arc<dyn Device>];
    let (f, _) = Flash::open(devs, cfg.clone(), handler, |_| {}).expect("open");
    // Keys 0..100 once, then fresh keys until reclaim has been round the log.
    for key in 0..100 {
        put(&f, &index, key, key + 1);
    }
    let mut next = 1000;
    // Until reclaim has evicted some of the odd keys 0..100 (their notes are then young).
    while (1..100)
        .step_by(2)
        .all(|k| index.map.lock().contains_key(&k))
    {
        put(&f, &index, next, next + 1);
        next += 1;
    }
    let notes = FlashStats::get(&f.stats().drop_notes);
    assert!(notes > 0, "odd live keys were forgotten with notes");
    assert_eq!(FlashStats::get(&f.stats().drop_notes_failed), 0);
    let evicted: Vec<u64> = (1..100)
        .step_by(2)
        .filter(|k| !index.map.lock().contains_key(k))
        .collect();
    assert!(!evicted.is_empty());
    let newest = f.horizon();
    drop(f);

    // Reopen without a clean close (the notes were synced before each erase).
    let mut seen: Vec<RecordMeta> = Vec::new();
    let handler: Arc<dyn ReclaimHandler> = Arc::new(Index::default());
    let devs = vec![dev as Arc<dyn Device>];
    let (_f, _) = Flash::open(devs, cfg, handler, |m| seen.push(m)).expect("reopen");
    for k in evicted {
        let puts = seen
            .iter()
            .filter(|m| m.key_id == k && m.kind == kind::PUT)
            .count();
        let note = seen
            .iter()
            .find(|m| m.key_id == k && m.kind == kind::TOMBSTONE);
        // The record is gone and its note says which version went, with a horizon.
        assert_eq!(puts, 0, "key {k}: evicted record still recovered");
        let n = note.unwrap_or_else(|| panic!("key {k}: no drop note recovered"));
        assert_eq!(
            n.version,
            k + 1,
            "key {k}: the note names the dropped version"
        );
        assert!(n.flags > 0 && n.flags <= newest, "horizon {}", n.flags);
    }
}
